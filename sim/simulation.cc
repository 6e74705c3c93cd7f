#include "sim/simulation.h"

#include <algorithm>
#include <random>

#include "graph/graph.h"

namespace troupe::sim {
namespace {

std::string cost_key(const std::string& op, const std::string& device_type, const std::vector<std::string>& inputs,
                     const std::vector<std::string>& attrs) {
  std::string key = op + '\x01' + device_type;
  for (const auto& i : inputs) key += '\x01' + i;
  key += '\x02';
  for (const auto& a : attrs) key += '\x01' + a;
  return key;
}

double bytes_of(std::span<const tensor> ts) {
  double b = 0;
  for (const tensor& t : ts) {
    if (t.initialized()) b += static_cast<double>(t.byte_size());
  }
  return b;
}

bool attr_true(const graph::node& n, const char* name) {
  auto it = n.def.attr().find(name);
  return it != n.def.attr().end() && it->second.b();
}

}  // namespace

kernel_work work_of(const graph::node& node, std::span<const tensor> inputs, std::span<const tensor> outputs) {
  kernel_work w;
  w.bytes = bytes_of(inputs) + bytes_of(outputs);
  const std::string& op = node.op_name();
  auto elements = [](std::span<const tensor> ts) {
    double n = 0;
    for (const tensor& t : ts) {
      if (t.initialized()) n += static_cast<double>(t.num_elements());
    }
    return n;
  };
  if ((op == "MatMul" || op == "BatchMatMul" || op == "BatchMatMulV2") && inputs.size() >= 2 && inputs[0].rank() >= 2) {
    const tensor& a = inputs[0];
    const int r = a.rank();
    const bool adj_a = attr_true(node, "transpose_a") || attr_true(node, "adj_x");
    const double k = static_cast<double>(adj_a ? a.dim(r - 2) : a.dim(r - 1));
    w.flops = 2 * k * elements(outputs);
  } else if ((op == "Conv2D" || op == "Conv2DBackpropInput" || op == "Conv2DBackpropFilter") && inputs.size() >= 2) {
    // Two operations per output element of the forward convolution and filter tap.
    const tensor& filter = op == "Conv2DBackpropFilter" ? outputs.empty() ? inputs[1] : outputs[0] : inputs[1];
    const tensor& big = op == "Conv2D" ? outputs.empty() ? inputs[0] : outputs[0] : inputs[2 % inputs.size()];
    if (filter.rank() == 4 && big.initialized()) {
      w.flops = 2 * static_cast<double>(big.num_elements()) * static_cast<double>(filter.dim(0) * filter.dim(1) * filter.dim(2));
    }
  } else {
    // One per element of the largest input or of the outputs (element-wise ops,
    // reductions).
    double largest = 0;
    for (const tensor& t : inputs) {
      if (t.initialized()) largest = std::max(largest, static_cast<double>(t.num_elements()));
    }
    w.flops = std::max(largest, elements(outputs));
  }
  return w;
}

// A device's virtual cores: a kernel takes the one free first, from when it is free.
class simulation::device_timer final : public actors::kernel_timer {
 public:
  device_timer(simulation& s, std::string type, int cores)
      : sim_(s), type_(std::move(type)), free_at_(static_cast<std::size_t>(std::max(1, cores))) {}
  void ran(const graph::node& node, std::span<const tensor> inputs, std::span<const tensor> outputs,
           finish_callback finish) override {
    const auto ns = std::chrono::nanoseconds(static_cast<std::int64_t>(sim_.kernel_ns(node, type_, inputs, outputs)));
    auto core = std::min_element(free_at_.begin(), free_at_.end());
    const auto start = std::max(*core, sim_.world_.now());
    const auto end = start + ns;
    *core = end;
    sim_.world_.at(end, [finish = std::move(finish), start, end] { finish(start, end); });
  }

 private:
  simulation& sim_;
  const std::string type_;
  std::vector<env::clock::time_point> free_at_;
};

simulation::simulation(simulation_options o) : options_(std::move(o)), world_({.seed = options_.seed}) {
  if (options_.compute.table) {
    for (const KernelCost& c : options_.compute.table->kernels()) {
      table_[cost_key(c.op(), c.device_type(), {c.inputs().begin(), c.inputs().end()},
                      {c.attrs().begin(), c.attrs().end()})] = c.median_ns();
    }
  }
}

simulation::~simulation() = default;

double simulation::kernel_ns(const graph::node& node, const std::string& device_type, std::span<const tensor> inputs,
                             std::span<const tensor> outputs) {
  if (!table_.empty()) {
    std::vector<std::string> signature;
    signature.reserve(inputs.size());
    for (const tensor& t : inputs) signature.push_back(input_signature(t));
    auto it = table_.find(cost_key(node.op_name(), device_type, signature, cost_attrs(node.def)));
    if (it != table_.end()) {
      ++from_table_;
      return it->second;
    }
  }
  ++from_rates_;
  const compute_model& c = options_.compute;
  const kernel_work w = work_of(node, inputs, outputs);
  return c.kernel_overhead_us * 1e3 + std::max(w.flops / c.gflops, w.bytes / c.memory_gbps);
}

actors::kernel_timer* simulation::timer_of(const std::string& device, const std::string&) {
  auto& t = timers_[device];
  if (t == nullptr) {
    // "/job:w/replica:0/task:0/device:CPU:0" -> "CPU"
    std::string type = device.substr(device.rfind("/device:") + 8);
    type = type.substr(0, type.find(':'));
    t = std::make_unique<device_timer>(*this, type, options_.compute.cores_per_device);
  }
  return t.get();
}

std::chrono::nanoseconds simulation::transfer_delay(const std::string& from, const std::string& to, std::int64_t bytes) {
  const network_model& n = options_.network;
  const auto now = world_.now();
  auto& free = links_free_[{from, to}];
  const auto start = std::max(free, now);
  const auto on_wire = std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(bytes) * 8 / n.bandwidth_gbps));
  free = start + on_wire;
  double extra_us = n.latency_us;
  if (n.jitter_us > 0) extra_us += std::uniform_real_distribution<double>(0, n.jitter_us)(world_.random());
  return (free - now) + std::chrono::nanoseconds(static_cast<std::int64_t>(extra_us * 1e3));
}

}  // namespace troupe::sim
