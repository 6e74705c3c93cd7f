#include "sim/simulation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <list>
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

// A set of cores and the kernels running on it, shared as an operating system shares
// them (processor sharing): each running kernel gets an equal share of the cores, at most
// as many as it can use (its intra-op threads), and what one cannot use goes to the
// others. A kernel ends when its work (CPU nanoseconds) is done.
class simulation::machine {
 public:
  using done_callback = std::function<void(env::clock::time_point start, env::clock::time_point end)>;
  machine(sim::world& w, int cores) : world_(w), cores_(std::max(1, cores)) {}

  // Work of `work_ns` that may use up to `threads` cores: a kernel's of task number
  // `task` (>= 0), or a message's or the control plane's (-1); at most k_longest_ns of
  // it (a NaN: that much).
  void start(double work_ns, double threads, done_callback done, int task = -1) {
    advance();
    work_ns = work_ns <= k_longest_ns ? std::max(work_ns, 1.0) : k_longest_ns;
    jobs_.push_back({work_ns, std::clamp(threads, 0.1, static_cast<double>(cores_)), 0, task,
                     world_.now(), std::move(done)});
    reschedule();
  }

  // Whether the kernels running could keep every core busy (and, with `task` >= 0, some
  // of them are that task's).
  bool kernels_fill_cores(int task = -1) const {
    double wanted = 0;
    bool its_own = task < 0;
    for (const job& j : jobs_) {
      if (j.task < 0) continue;
      wanted += j.cap;
      its_own = its_own || j.task == task;
    }
    return its_own && wanted >= cores_ - 1e-9;
  }

 private:
  struct job {
    double remaining;  // work left, ns on one core
    double cap;        // cores it can use
    double rate;       // cores it has now
    int task;          // a kernel's task number; -1: not a kernel
    env::clock::time_point start;
    done_callback done;
  };

  // Brings every job's remaining work up to now, at the rates since the last change.
  void advance() {
    const auto now = world_.now();
    const double dt = std::chrono::duration<double, std::nano>(now - last_).count();
    if (dt > 0) {
      for (job& j : jobs_) j.remaining -= j.rate * dt;
    }
    last_ = now;
  }

  // New rates (water-filling the cores) and the event of the next job to end.
  void reschedule() {
    std::vector<job*> by_cap;
    for (job& j : jobs_) by_cap.push_back(&j);
    std::stable_sort(by_cap.begin(), by_cap.end(), [](const job* a, const job* b) { return a->cap < b->cap; });
    double left = cores_;
    for (std::size_t i = 0; i < by_cap.size(); ++i) {
      by_cap[i]->rate = std::min(by_cap[i]->cap, left / static_cast<double>(by_cap.size() - i));
      left -= by_cap[i]->rate;
    }
    const std::uint64_t generation = ++generation_;
    if (jobs_.empty()) return;
    double first = std::numeric_limits<double>::infinity();
    for (const job& j : jobs_) first = std::min(first, std::max(j.remaining, 0.0) / j.rate);
    const auto at = world_.now() + virtual_duration(std::ceil(first));
    world_.at(at, [this, generation] {
      if (generation != generation_) return;  // a later start or end changed the rates
      advance();
      std::vector<std::pair<done_callback, env::clock::time_point>> ended;
      for (auto it = jobs_.begin(); it != jobs_.end();) {
        if (it->remaining <= 0.5) {
          ended.emplace_back(std::move(it->done), it->start);
          it = jobs_.erase(it);
        } else {
          ++it;
        }
      }
      reschedule();
      const auto now = world_.now();
      for (auto& [done, began] : ended) done(began, now);
    });
  }

  sim::world& world_;
  const int cores_;
  std::list<job> jobs_;  // in the order they started
  env::clock::time_point last_{};
  std::uint64_t generation_ = 0;
};

// A device's kernels, on its machine's cores.
class simulation::device_timer final : public actors::kernel_timer {
 public:
  device_timer(simulation& s, std::string type, machine& m, int task)
      : sim_(s), type_(std::move(type)), machine_(m), task_(task) {}
  void ran(const graph::node& node, std::span<const tensor> inputs, std::span<const tensor> outputs,
           finish_callback finish) override {
    const kernel_cost cost = sim_.kernel_cost_of(node, type_, inputs, outputs);
    double work = cost.work_ns * noise_factor();
    if (env::buggify("kernel.slow")) work *= 10;
    machine_.start(work, cost.threads, std::move(finish), task_);
  }
  void hold(const tf::NodeDef& def, std::span<const tensor> inputs, double ns, std::function<void()> then) override {
    double work = (sim_.kernel_overhead_ns() + sim_.held_ns(def, type_, inputs, ns)) * noise_factor();
    if (env::buggify("variable.slow_update")) work *= 20;
    machine_.start(
        work, sim_.threads_for(work), [then = std::move(then)](env::clock::time_point, env::clock::time_point) { then(); },
        task_);
  }

 private:
  // compute_model::noise's factor for a kernel starting now (1 without noise).
  double noise_factor() {
    const compute_model& c = sim_.options_.compute;
    if (c.noise <= 0) return 1;
    const auto now = sim_.world_.now();
    if (c.noise_ms <= 0 || now >= redraw_at_) {
      factor_ = 1 + std::exponential_distribution<double>(1 / c.noise)(sim_.world_.random());
      redraw_at_ = now + std::chrono::microseconds(static_cast<std::int64_t>(c.noise_ms * 1e3));
    }
    return factor_;
  }

  simulation& sim_;
  const std::string type_;
  machine& machine_;
  const int task_;
  double factor_ = 1;
  env::clock::time_point redraw_at_;
};

double simulation::kernel_overhead_ns() const {
  const auto& t = options_.compute.table;
  // A table measured untraced too says the runtime's cost, 0 included.
  return t && (t->runtime_ns_per_kernel() > 0 || t->cpu_us_per_step() > 0) ? t->runtime_ns_per_kernel()
                                                                           : options_.compute.kernel_overhead_us * 1e3;
}

double simulation::threads_for(double work_ns) const {
  // As compute_pool::parallel_for splits work: blocks of at least 20 us.
  return std::max(1.0, std::min(static_cast<double>(options_.compute.intra_op_threads), std::floor(work_ns / 20000)));
}

namespace {
// What a table's entry costs the cores: its mean CPU time, else (older tables) its
// median CPU time, else its median wall time.
double cpu_cost(const KernelCost& c) {
  if (c.mean_cpu_ns() > 0) return c.mean_cpu_ns();
  return c.median_cpu_ns() > 0 ? c.median_cpu_ns() : c.median_ns();
}
}  // namespace

std::chrono::nanoseconds virtual_duration(double ns) {
  if (!(ns <= k_longest_ns)) return std::chrono::nanoseconds(static_cast<std::int64_t>(k_longest_ns));
  return std::chrono::nanoseconds(ns > 0 ? static_cast<std::int64_t>(ns) : 0);
}

simulation::simulation(simulation_options o) : options_(std::move(o)), world_({.seed = options_.seed}) {
  if (options_.compute.machine_cores > 0) shared_ = std::make_unique<machine>(world_, options_.compute.machine_cores);
  if (options_.compute.table) {
    for (const KernelCost& c : options_.compute.table->kernels()) {
      table_[cost_key(c.op(), c.device_type(), {c.inputs().begin(), c.inputs().end()},
                      {c.attrs().begin(), c.attrs().end()})] = {cpu_cost(c), c.alone_ns()};
    }
  }
}

simulation::~simulation() = default;

simulation::kernel_cost simulation::kernel_cost_of(const graph::node& node, const std::string& device_type,
                                                   std::span<const tensor> inputs, std::span<const tensor> outputs) {
  const double overhead = kernel_overhead_ns();
  if (const measured* m = measured_of(node.def, device_type, inputs)) {
    const double work = overhead + m->cpu_ns;
    if (m->alone_ns <= 0) return {work, threads_for(work)};
    // Alone it took alone_ns (plus the runtime's cost): the cores it keeps busy.
    return {work, std::min<double>(options_.compute.intra_op_threads, work / (overhead + m->alone_ns))};
  }
  const compute_model& c = options_.compute;
  const kernel_work w = work_of(node, inputs, outputs);
  const double work = overhead + std::max(w.flops / c.gflops, w.bytes / c.memory_gbps);
  return {work, threads_for(work)};
}

double simulation::held_ns(const tf::NodeDef& def, const std::string& device_type, std::span<const tensor> inputs,
                           double estimate_ns) {
  const measured* m = measured_of(def, device_type, inputs);
  return m != nullptr ? m->cpu_ns : estimate_ns;
}

const simulation::measured* simulation::measured_of(const tf::NodeDef& def, const std::string& device_type,
                                                    std::span<const tensor> inputs) {
  auto it = table_.empty() ? table_.end()
                           : table_.find(cost_key(def.op(), device_type, input_signatures(inputs), cost_attrs(def)));
  if (it == table_.end()) {
    ++from_rates_;
    return nullptr;
  }
  ++from_table_;
  return &it->second;
}

int simulation::task_number(const std::string& task) {
  return task_numbers_.emplace(task, static_cast<int>(task_numbers_.size())).first->second;
}

actors::kernel_timer* simulation::timer_of(const std::string& device, const std::string& task) {
  auto& t = timers_[device];
  if (t == nullptr) {
    // "/job:w/replica:0/task:0/device:CPU:0" -> "CPU"
    std::string type = device.substr(device.rfind("/device:") + 8);
    type = type.substr(0, type.find(':'));
    machine* m = shared_.get();
    if (m == nullptr) m = own_.emplace_back(std::make_unique<machine>(world_, options_.compute.cores_per_device)).get();
    t = std::make_unique<device_timer>(*this, type, *m, task_number(task));
  }
  return t.get();
}

void simulation::transfer(const std::string& from, const std::string& to, std::int64_t bytes,
                          std::function<void()> deliver) {
  const network_model& n = options_.network;
  const auto now = world_.now();
  auto& free = links_free_[{from, to}];
  auto start = std::max(free, now);
  if (shared_ != nullptr) {
    ++sent_;
    // The link's thread waiting for a core already (go with it), or asleep (its link idle)
    // while the kernels, some of them its task's, keep every core busy.
    auto& wakes = link_wakes_[{from, to}];
    if (wakes > now) {
      ++sent_busy_;
      start = std::max(start, wakes);
    } else if (free <= now && shared_->kernels_fill_cores(task_number(from))) {
      ++sent_busy_;
      if (n.send_busy_wait_us > 0) start = wakes = busy_wait_from_now(n.send_busy_wait_us);
    }
  }
  double gbps = n.bandwidth_gbps;
  if (n.nic_gbps > 0) {
    // The sender's egress, the link and the receiver's ingress, all at once.
    start = std::max({start, egress_free_[from], ingress_free_[to]});
    gbps = std::min(gbps, n.nic_gbps);
  }
  const auto on_wire =
      virtual_duration(static_cast<double>(bytes) * 8 / gbps + n.transfer_us * 1e3);
  free = start + on_wire;
  if (n.nic_gbps > 0) egress_free_[from] = ingress_free_[to] = free;
  double extra_us = n.latency_us;
  if (n.jitter_us > 0) extra_us += std::uniform_real_distribution<double>(0, n.jitter_us)(world_.random());
  if (env::buggify("network.spike")) extra_us += std::uniform_real_distribution<double>(0, 20000)(world_.random());
  auto arrives = free + virtual_duration(extra_us * 1e3);
  if (auto clog = clogged_until_.find({from, to}); clog != clogged_until_.end()) arrives = std::max(arrives, clog->second);
  moved_since_round_ = true;
  if (swizzling_ && !swizzle_scheduled_) {
    swizzle_scheduled_ = true;
    world_.at(now + std::chrono::microseconds(static_cast<std::int64_t>(options_.swizzle.every_ms * 1e3)),
              [this] { swizzle_round(); });
  }
  if ((n.copy_gbps <= 0 && n.message_cpu_us <= 0) || shared_ == nullptr) {
    arrive(arrives, std::move(deliver));
    return;
  }
  // On one machine the copies and the messages' own cost take its cores too: the later
  // of the two ends.
  const double copy_ns = (n.copy_gbps > 0 ? 2 * static_cast<double>(bytes) / n.copy_gbps : 0) + 2 * n.message_cpu_us * 1e3;
  auto pending = std::make_shared<int>(2);
  auto shared = std::make_shared<std::function<void()>>(std::move(deliver));
  auto one_done = [pending, shared] {
    if (--*pending == 0) (*shared)();
  };
  arrive(arrives, one_done);
  shared_->start(copy_ns, /*threads=*/1,
                 [one_done](env::clock::time_point, env::clock::time_point) { one_done(); });
}

bool simulation::delay_step_start(const std::string&, std::int64_t feed_bytes, std::function<void()> start) {
  const network_model& n = options_.network;
  if (shared_ == nullptr) return false;
  // The processes' crowding: work on the cores that nothing waits for.
  if (n.crowding_cpu_us > 0) {
    shared_->start(n.crowding_cpu_us * 1e3, /*threads=*/1, [](env::clock::time_point, env::clock::time_point) {});
  }
  if (n.step_cpu_us <= 0) return false;
  // The request's CPU (the client's and the task's, with the copies of what it feeds at
  // both ends), then its way to the task.
  const auto latency = virtual_duration(n.latency_us * 1e3);
  const double copies_ns = n.copy_gbps > 0 ? 2 * static_cast<double>(feed_bytes) / n.copy_gbps : 0;
  shared_->start(n.step_cpu_us * 1e3 + copies_ns, /*threads=*/1,
                 [this, latency, start = std::move(start)](env::clock::time_point, env::clock::time_point end) {
                   arrive(end + latency, std::move(start));
                 });
  return true;
}

env::clock::time_point simulation::busy_wait_from_now(double mean_us) {
  const double us = std::exponential_distribution<double>(1 / mean_us)(world_.random());
  return world_.now() + virtual_duration(us * 1e3);
}

void simulation::arrive(env::clock::time_point at, std::function<void()> deliver) {
  if (shared_ == nullptr) {
    world_.at(at, std::move(deliver));
    return;
  }
  world_.at(at, [this, deliver = std::move(deliver)]() mutable {
    ++arrived_;
    if (!shared_->kernels_fill_cores()) return deliver();
    ++arrived_busy_;
    if (options_.network.busy_wait_us <= 0) return deliver();
    world_.at(busy_wait_from_now(options_.network.busy_wait_us), std::move(deliver));
  });
}

void simulation::start_swizzle() {
  if (options_.swizzle.every_ms <= 0 || options_.swizzle.clog_ms <= 0) return;
  swizzling_ = true;
}

void simulation::stop_swizzle() {
  swizzling_ = false;
  clogged_until_.clear();  // what they hold arrives when it was due: at most clog_ms from now
}

void simulation::swizzle_round() {
  swizzle_scheduled_ = false;
  if (!swizzling_) return;
  const auto now = world_.now();
  for (auto it = clogged_until_.begin(); it != clogged_until_.end();) {
    it = it->second <= now ? clogged_until_.erase(it) : std::next(it);
  }
  std::vector<std::pair<std::string, std::string>> known;
  for (const auto& [link, free] : links_free_) {
    if (clogged_until_.find(link) == clogged_until_.end()) known.push_back(link);
  }
  for (int i = 0; i < options_.swizzle.links && !known.empty(); ++i) {
    const std::size_t pick = world_.random()() % known.size();
    const double part = std::uniform_real_distribution<double>(0.5, 1.0)(world_.random());
    clogged_until_[known[pick]] =
        now + std::chrono::microseconds(static_cast<std::int64_t>(options_.swizzle.clog_ms * part * 1e3));
    known.erase(known.begin() + static_cast<std::ptrdiff_t>(pick));
    ++clogs_;
  }
  // The next round only while transfers come (the next transfer schedules it otherwise).
  if (moved_since_round_) {
    moved_since_round_ = false;
    swizzle_scheduled_ = true;
    world_.at(now + std::chrono::microseconds(static_cast<std::int64_t>(options_.swizzle.every_ms * 1e3)),
              [this] { swizzle_round(); });
  }
}

}  // namespace troupe::sim
