// GPU devices in the runtime, on any machine: a fake accelerator whose "device memory" is
// host memory that tensors declare unreadable (tensor::on_host() is false), with copies
// completing on a thread of its own, and fake GPU kernels that check where their inputs
// are and compute with the CPU kernels. It proves what the real GPU device relies on:
// the placer prefers the GPU for nodes that have a GPU kernel; cut edges become
// Send/Recv; host tensors are copied in for kernels that read device memory and shape
// inputs stay on the host; tensors leave the device (Send, fetches) in host memory;
// memory mistakes are errors naming the node, never wrong numbers.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "actors/runtime_kernels.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "graph/variables.h"
#include "kernels/training_ops.h"
#include "kernels/kernel_runner.h"
#include "tests/actors/session_fixture.h"

using namespace troupe;

namespace troupe::kernels {
void register_builtin_kernels(kernel_registry& registry);  // kernels/kernel_registry.cc
}

namespace {

// Host memory that tensors treat as a device's.
class fake_memory final : public external_memory {
 public:
  void release(void* data, std::size_t) noexcept override {
    ::operator delete(data);
    live.fetch_sub(1);
  }
  bool host_accessible() const override { return false; }
  tensor allocate(dtype type, tensor_shape shape) {
    const std::size_t bytes = static_cast<std::size_t>(shape.num_elements()) * dtype_size(type);
    live.fetch_add(1);
    return tensor(type, std::move(shape), buffer::adopt(::operator new(std::max<std::size_t>(bytes, 1)), bytes, this));
  }
  std::atomic<int> live{0};
};

// A GPU as the runtime sees one; copies to the host complete on the fake's own thread.
class fake_gpu final : public kernels::device, public kernels::accelerator {
 public:
  explicit fake_gpu(std::string name) : device(std::move(name), "GPU"), worker_([this] { loop(); }) {}
  ~fake_gpu() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }
  kernels::accelerator* accelerator() override { return this; }

  result<tensor> to_device(const tensor& host) override {
    if (!host.on_host()) return invalid_argument_error("to_device of a device tensor");
    tensor d = memory.allocate(host.type(), host.shape());
    std::memcpy(d.raw_data(), host.raw_data(), host.byte_size());
    copies_in.fetch_add(1);
    return d;
  }
  void to_host(const tensor& t, std::function<void(result<tensor>)> done) override {
    if (t.on_host()) {
      done(t);
      return;
    }
    later([t, done = std::move(done), this] {
      tensor h(t.type(), t.shape());
      std::memcpy(h.raw_data(), t.raw_data(), t.byte_size());
      copies_out.fetch_add(1);
      done(std::move(h));
    });
  }
  void when_done(std::function<void(status)> done) override {
    later([done = std::move(done)] { done(status()); });
  }
  result<tensor> copy(const tensor& t) override {
    if (t.on_host()) return invalid_argument_error("copy of a host tensor");
    tensor d = memory.allocate(t.type(), t.shape());
    std::memcpy(d.raw_data(), t.raw_data(), t.byte_size());
    copies_within.fetch_add(1);
    return d;
  }
  // The CPU's arithmetic on the fake's memory (host memory behind), after the same checks
  // of where each input is as a real GPU's.
  status apply_update(const kernels::training_update& update, std::vector<tensor>& vars,
                      std::span<const tensor> inputs) override {
    for (const tensor& v : vars) {
      if (v.on_host()) return internal_error(update.op, ": a variable's value is in host memory");
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].type() != dtype::resource && inputs[i].on_host()) {
        return internal_error(update.op, ": input ", i, " is in host memory");
      }
    }
    updates.fetch_add(1);
    if (update.op == "TroupeApplyGradientDescentMatMul") product_updates.fetch_add(1);
    return kernels::apply_training_update(update, vars, inputs);
  }

  result<tensor> gather(const tensor& params, const tensor& indices) override {
    if (params.on_host() || indices.on_host()) return internal_error("gather of host tensors");
    auto rows = kernels::gather(params, indices);
    if (!rows.ok()) return rows.error();
    tensor d = memory.allocate(rows->type(), rows->shape());
    std::memcpy(d.raw_data(), rows->raw_data(), rows->byte_size());
    gathers.fetch_add(1);
    return d;
  }

  fake_memory memory;
  std::atomic<int> copies_in{0}, copies_out{0}, copies_within{0}, updates{0}, product_updates{0}, gathers{0};

 private:
  void later(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(fn));
    }
    wake_.notify_one();
  }
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

std::map<std::string, std::atomic<int>>& gpu_runs() {
  static std::map<std::string, std::atomic<int>> runs;
  return runs;
}

// A "GPU" kernel of `op`: inputs in device memory (host memory for `host_inputs`), which
// it checks; computes with the CPU kernel on host copies; outputs in device memory.
class fake_gpu_kernel final : public kernels::op_kernel {
 public:
  fake_gpu_kernel(kernels::kernel_construction& c, std::vector<int> host_inputs)
      : op_kernel(c), host_inputs_(std::move(host_inputs)), node_(c.node()) {
    gpu_ = dynamic_cast<fake_gpu*>(c.device() == nullptr ? nullptr : c.device()->accelerator());
    if (gpu_ == nullptr) c.fail(failed_precondition_error("fake GPU kernel without the fake GPU"));
  }
  memory input_memory(int i) const override {
    return std::find(host_inputs_.begin(), host_inputs_.end(), i) != host_inputs_.end() ? memory::host : memory::device;
  }
  void compute(kernels::kernel_context& ctx) override {
    ++gpu_runs()[node_.op()];
    std::vector<tensor> host;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const tensor& t = ctx.input(i);
      if (t.on_host() != (input_memory(i) == memory::host)) {
        ctx.fail(internal_error("fake GPU kernel ", node_.name(), ": input ", i, " is in the wrong memory"));
        return;
      }
      tensor h(t.type(), t.shape());
      std::memcpy(h.raw_data(), t.raw_data(), t.byte_size());
      host.push_back(std::move(h));
    }
    auto out = kernels::run_kernel(node_, host);
    if (!out.ok()) {
      ctx.fail(out.error());
      return;
    }
    for (std::size_t o = 0; o < out->size(); ++o) {
      tensor d = gpu_->memory.allocate((*out)[o].type(), (*out)[o].shape());
      std::memcpy(d.raw_data(), (*out)[o].raw_data(), (*out)[o].byte_size());
      ctx.set_output(static_cast<int>(o), std::move(d));
    }
  }

 private:
  std::vector<int> host_inputs_;
  tf::NodeDef node_;
  fake_gpu* gpu_ = nullptr;
};

// Fake GPU kernels first (a lookup takes the first match), then every built-in and
// runtime kernel (whose real GPU kernels, in a CUDA build, the fakes hide).
kernels::kernel_registry& fake_registry() {
  static kernels::kernel_registry* registry = [] {
    auto* r = new kernels::kernel_registry();
    auto fake = [r](const std::string& op, std::vector<int> host_inputs, std::vector<dtype> types) {
      for (dtype t : types) {
        r->add(op, "GPU", {{"T", t}}, [host_inputs](kernels::kernel_construction& c) {
          return std::make_unique<fake_gpu_kernel>(c, host_inputs);
        });
      }
    };
    fake("MatMul", {}, {dtype::float32});
    fake("AddV2", {}, {dtype::float32, dtype::int32});
    fake("Relu", {}, {dtype::float32});
    fake("Sum", {1}, {dtype::float32});  // the axes are read on the host
    fake("Fill", {0}, {dtype::float32});  // a slot's initializer, colocated with its variable
    for (const char* op : {"ZerosLike", "OnesLike", "Mul"}) fake(op, {}, {dtype::float32});  // in gradients
    kernels::register_builtin_kernels(*r);
    actors::register_runtime_kernels(*r);
    return r;
  }();
  return *registry;
}

struct gpu_cluster {
  fake_gpu* gpu = nullptr;
  std::shared_ptr<actors::cluster> cluster;

  gpu_cluster() {
    placement::job_spec job{"localhost", {placement::task_spec{{{"CPU", 1}, {"GPU", 1}}}}};
    auto spec = placement::cluster_spec::create({job});
    REQUIRE(spec.ok());
    actors::cluster_options o;
    o.spec = *spec;
    o.compute_threads = 2;
    o.kernels = &fake_registry();
    o.make_accelerator = [this](const std::string& name, const std::string& type,
                                int) -> result<std::unique_ptr<kernels::device>> {
      auto g = std::make_unique<fake_gpu>(name);
      gpu = g.get();
      return std::unique_ptr<kernels::device>(std::move(g));
    };
    auto c = actors::cluster::create(o);
    if (!c.ok()) FAIL(c.error().to_string());
    cluster = *c;
  }
};

// y = sum(relu(x w + b), axis 1) and z = -y, with z's node asked for the CPU.
graph::scope model_graph() {
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 2});
  auto w = ops::constant(root.with_name("w"), tensor::from_vector<float>({1, -2, 3, 4}, {2, 2}));
  auto b = ops::constant(root.with_name("b"), tensor::from_vector<float>({0.5f, -1}));
  auto h = ops::relu(root.with_name("h"), ops::add(root.with_name("xwb"), ops::matmul(root.with_name("xw"), x, w), b));
  auto y = ops::sum(root.with_name("y"), h, ops::constant(root.with_name("axis"), tensor::scalar<std::int32_t>(1)));
  const std::string cpu = "/job:localhost/replica:0/task:0/device:CPU:0";
  ops::neg(root.with_name("z").with_device(cpu), y);
  // A control edge from the GPU to the CPU: the partitioner sends a constant made on the GPU.
  ops::identity(root.with_name("after").with_device(cpu).with_control_dependencies({graph::operation{"h", {}}}), x);
  return root;
}

}  // namespace

TEST_CASE("nodes with GPU kernels run on the GPU; copies in and out keep the numbers", "[actors][gpu]") {
  gpu_cluster gc;
  const tensor x = tensor::from_vector<float>({1, 2, -3, 1}, {2, 2});
  // The reference: the same graph on a CPU-only cluster.
  auto cpu_session = testing::make_session(model_graph());
  auto want = cpu_session->run({{"x", x}}, {"y", "z", "after"});
  REQUIRE(want.ok());

  actors::session_options so;
  so.cluster = gc.cluster;
  auto s = testing::make_session(model_graph(), so);
  const int matmuls = gpu_runs()["MatMul"], sums = gpu_runs()["Sum"];
  auto got = s->run({{"x", x}}, {"y", "z", "after"});
  REQUIRE(got.ok());
  CHECK(got->at(2).equals(x));
  // The GPU ran MatMul, AddV2, Relu and Sum; the fetches came back in host memory.
  CHECK(gpu_runs()["MatMul"] == matmuls + 1);
  CHECK(gpu_runs()["Sum"] == sums + 1);
  REQUIRE(got->at(0).on_host());
  REQUIRE(got->at(1).on_host());
  CHECK(got->at(0).equals(want->at(0)));
  CHECK(got->at(1).equals(want->at(1)));
  // x, w and b were copied in (axis stays on the host); y left through a Send to z's CPU
  // and through the fetch.
  CHECK(gc.gpu->copies_in >= 3);
  CHECK(gc.gpu->copies_out >= 2);
  // Many steps, concurrently: same answers, and no device buffer is left behind.
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto r = s->run({{"x", x}}, {"y", "z"});
        if (!r.ok() || !r->at(0).equals(want->at(0)) || !r->at(1).equals(want->at(1))) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
  s.reset();
  // Buffers go as their last holders let go; some hold on a moment after the session (a
  // device actor's last step closing, an unprepared partition): all of them go.
  for (int i = 0; i < 500 && gc.gpu->memory.live != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(gc.gpu->memory.live == 0);
}

float init_value(std::size_t i) { return 0.25f * static_cast<float>(i) - 1.0f; }

constexpr const char* k_cpu = "/job:localhost/replica:0/task:0/device:CPU:0";
constexpr const char* k_gpu = "/job:localhost/replica:0/task:0/device:GPU:0";

// run(options, device) twice, the computation on the CPU either way (the fake GPU has only
// a few kernels): on a CPU-only cluster with the variables on its CPU (the reference),
// then on `gc`'s cluster with them on the GPU. Returns {reference, GPU's}.
template <class Run>
auto on_cpu_and_gpu(gpu_cluster& gc, Run run) {
  actors::session_options cpu;
  cpu.default_device = k_cpu;
  auto want = run(cpu, k_cpu);
  actors::session_options gpu = cpu;
  gpu.cluster = gc.cluster;
  auto got = run(gpu, k_gpu);
  return std::make_pair(std::move(want), std::move(got));
}

// `fetch` after running `init` and then `steps` steps of `train` on a session of `root`.
tensor value_after_steps(graph::scope root, const actors::session_options& so, const std::string& init,
                         const std::string& train, int steps, const std::string& fetch) {
  auto s = testing::make_session(std::move(root), so);
  REQUIRE(s->run({}, {}, {init}).ok());
  for (int i = 0; i < steps; ++i) {
    auto r = s->run({}, {}, {train});
    INFO(r.to_status());
    REQUIRE(r.ok());
  }
  auto last = s->run({}, {fetch});
  REQUIRE(last.ok());
  return last->at(0);
}

// w and b trained by `opt` to minimize sum((w x + b)^2): the variables on `device` (their
// updates, which take their handles, with them), the rest wherever the session's default
// device says.
struct trained {
  graph::scope root = graph::scope::new_root();
  std::string train, init;
};
trained training_graph(const train::optimizer& opt, const std::string& device) {
  trained t;
  graph::variable_collection vars;
  auto on = t.root.with_device(device);
  auto w = graph::make_variable(on, "w", {4}, dtype::float32,
                                ops::constant(on, tensor::from_vector<float>({1, -2, 0.5f, 3})));
  auto b = graph::make_variable(on, "b", {4}, dtype::float32,
                                ops::constant(on, tensor::from_vector<float>({0, 0.25f, -1, 2})));
  vars.add(w);
  vars.add(b);
  auto x = ops::constant(t.root.with_name("x"), tensor::from_vector<float>({0.5f, 1, -1, 2}));
  auto y = ops::add(t.root.with_name("y"), ops::mul(t.root.with_name("wx"), w.value, x), b.value);
  auto loss = ops::sum(t.root.with_name("loss"), ops::mul(t.root.with_name("yy"), y, y),
                       ops::constant(t.root.with_name("axes"), tensor::scalar<std::int32_t>(0)));
  auto step = train::minimize(t.root.with_name("train"), opt, loss, vars);
  REQUIRE(step.ok());
  t.train = step->node;
  t.init = graph::global_variables_initializer(t.root.with_name("init"), vars).node;
  return t;
}

TEST_CASE("variables live on the GPU: read, assigned and updated there, snapshots kept, numbers as on the CPU",
          "[actors][gpu]") {
  for (const auto& [label, opt] : std::vector<std::pair<std::string, train::optimizer>>{
           {"gradient descent", train::gradient_descent(0.05)},
           {"momentum", train::momentum(0.05, 0.9)},
           {"nesterov momentum", train::momentum(0.05, 0.9, true)},
           {"adam", train::adam(0.05)},
           {"rms_prop", train::rms_prop(0.05, 0.9, 0.5)},
           {"adagrad", train::adagrad(0.05)}}) {
    INFO(label);
    std::vector<tensor> cpu_reads, gpu_reads;
    gpu_cluster gc;
    const auto [want, got] = on_cpu_and_gpu(gc, [&](const actors::session_options& so, const std::string& device) {
      trained t = training_graph(opt, device);
      auto s = testing::make_session(std::move(t.root), so);
      auto initialized = s->run({}, {}, {t.init});
      INFO(initialized.to_status());
      REQUIRE(initialized.ok());
      for (int i = 0; i < 5; ++i) {
        // The value read for this step's gradient is fetched beside the update: a snapshot
        // the update must not touch.
        auto r = s->run({}, {"w/Read/ReadVariableOp"}, {t.train});
        INFO(r.to_status());
        REQUIRE(r.ok());
        (device == k_gpu ? gpu_reads : cpu_reads).push_back(r->at(0));
      }
      auto last = s->run({}, {"w/Read/ReadVariableOp", "b/Read/ReadVariableOp"});
      REQUIRE(last.ok());
      return *last;
    });
    // Two variables and their slots, updated on the fake GPU at each of the 5 steps.
    CHECK(gc.gpu->updates == 10);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      REQUIRE(got[i].on_host());
      CHECK(got[i].equals(want[i]));
    }
    // Each step's snapshot is the value before that step's update, as on the CPU.
    REQUIRE(gpu_reads.size() == cpu_reads.size());
    for (std::size_t i = 0; i < gpu_reads.size(); ++i) CHECK(gpu_reads[i].equals(cpu_reads[i]));
    CHECK_FALSE(gpu_reads.front().equals(gpu_reads.back()));
    // The fetched snapshot shared w's buffer when the update came: it was copied on the device.
    CHECK(gc.gpu->copies_within >= 1);
  }
}

TEST_CASE("a dense layer's weights on the GPU take gradient descent's product update there", "[actors][gpu]") {
  // loss = sum(x W): W's whole gradient is a product, which gradient descent with
  // fuse_matmul_updates applies with one fused update (TroupeApplyGradientDescentMatMul).
  gpu_cluster gc;
  const auto [want, got] = on_cpu_and_gpu(gc, [](actors::session_options so, const std::string& device) {
    auto root = graph::scope::new_root();
    graph::variable_collection vars;
    auto on = root.with_device(device);
    auto w = graph::make_variable(on, "w", {3, 2}, dtype::float32,
                                  ops::constant(on, tensor::from_vector<float>({1, -2, 0.5f, 3, 0.25f, -1}, {3, 2})));
    vars.add(w);
    auto x = ops::constant(root.with_name("x"), tensor::from_vector<float>({0.5f, 1, -1, 2, 0, 1, -0.5f, 0.25f, 1.5f,
                                                                            1, 1, 1, -2, 0.5f, 0},
                                                                           {5, 3}));
    auto y = ops::matmul(root.with_name("xw"), x, w.value);
    auto loss = ops::sum(root.with_name("loss"), y,
                         ops::constant(root.with_name("axes"), tensor::from_vector<std::int32_t>({0, 1})));
    train::optimizer sgd = train::gradient_descent(0.01);
    sgd.fuse_matmul_updates = true;
    // The gradients on W's device too (the product update fuses only there).
    auto step = train::minimize(root.with_name("train").with_device(device), sgd, loss, vars);
    REQUIRE(step.ok());
    const std::string init = graph::global_variables_initializer(root.with_name("init"), vars).node;
    so.allow_soft_placement = true;  // the gradients' ops without a GPU kernel on the CPU
    return value_after_steps(std::move(root), so, init, step->node, 4, "w/Read/ReadVariableOp");
  });
  CHECK(gc.gpu->product_updates == 4);
  CHECK(got.equals(want));
}

TEST_CASE("an embedding on the GPU: rows gathered and sparse updates scattered there", "[actors][gpu]") {
  // loss = sum(lookup(table, ids) * weights): the table's gradient is sparse (its rows at
  // ids, two of them repeated), which gradient descent scatter-adds into the table.
  gpu_cluster gc;
  const auto [want, got] = on_cpu_and_gpu(gc, [](const actors::session_options& so, const std::string& device) {
    auto root = graph::scope::new_root();
    graph::variable_collection vars;
    auto on = root.with_device(device);
    std::vector<float> init(6 * 3);
    for (std::size_t i = 0; i < init.size(); ++i) init[i] = init_value(i);
    auto table = graph::make_variable(on, "table", {6, 3}, dtype::float32,
                                      ops::constant(on, tensor::from_vector<float>(init, {6, 3})));
    vars.add(table);
    auto ids = ops::constant(root.with_name("ids"), tensor::from_vector<std::int32_t>({4, 1, 4, 0, 1}));
    auto rows = root.add("ResourceGather", {table.handle, ids},
                         {{"dtype", graph::attr_value(dtype::float32)}, {"Tindices", graph::attr_value(dtype::int32)}})
                    .out();
    auto weights = ops::constant(root.with_name("weights"),
                                 tensor::from_vector<float>({1, -2, 0.5f, 3, 1, -1, 0.25f, 2, -0.5f, 1, 1, 1, -3, 0.5f, 2},
                                                            {5, 3}));
    auto loss = ops::sum(root.with_name("loss"), ops::mul(root.with_name("rw"), rows, weights),
                         ops::constant(root.with_name("axes"), tensor::from_vector<std::int32_t>({0, 1})));
    auto step = train::minimize(root.with_name("train"), train::gradient_descent(0.1), loss, vars);
    REQUIRE(step.ok());
    const std::string init_op = graph::global_variables_initializer(root.with_name("init"), vars).node;
    return value_after_steps(std::move(root), so, init_op, step->node, 3, "table/Read/ReadVariableOp");
  });
  CHECK(gc.gpu->gathers == 3);
  CHECK(gc.gpu->updates == 3);  // the scatter-adds
  CHECK(got.equals(want));
  // Rows 2, 3 and 5 were never looked up: unchanged.
  CHECK(got.flat<float>()[5 * 3] == init_value(5 * 3));
}

TEST_CASE("a device tensor at a kernel input read on the host is an error naming the node", "[actors][gpu]") {
  gpu_cluster gc;
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 2});
  auto i = ops::placeholder(root.with_name("i"), dtype::int32, {});
  // The axis is computed by a GPU kernel (AddV2 on int32): it is in device memory.
  auto axis = ops::add(root.with_name("axis"), i, ops::constant(root, tensor::scalar<std::int32_t>(0)));
  ops::sum(root.with_name("y"), x, axis);
  actors::session_options so;
  so.cluster = gc.cluster;
  auto s = testing::make_session(root, so);
  auto r = s->run({{"x", tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})}, {"i", tensor::scalar<std::int32_t>(1)}},
                  {"y"});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message(), Catch::Contains("'y'") && Catch::Contains("reads it on the host"));
}

TEST_CASE("without soft placement a GPU request for a CPU-only op fails; with it the op runs on the CPU",
          "[actors][gpu]") {
  gpu_cluster gc;
  auto build = [] {
    auto root = graph::scope::new_root();
    auto x = ops::placeholder(root.with_name("x"), dtype::float32, {1, 2});
    // Transpose has no GPU kernel, fake or real.
    ops::transpose(root.with_name("n").with_device("/device:GPU:0"), x,
                   ops::constant(root, tensor::from_vector<std::int32_t>({1, 0})));
    return root;
  };
  const tensor x = tensor::from_vector<float>({1, -2}, {1, 2});
  actors::session_options so;
  so.cluster = gc.cluster;
  so.allow_soft_placement = true;
  auto soft = testing::make_session(build(), so);
  auto r = soft->run({{"x", x}}, {"n"});
  REQUIRE(r.ok());
  CHECK(r->at(0).equals(tensor::from_vector<float>({1, -2}, {2, 1})));
  so.allow_soft_placement = false;
  auto strict = testing::make_session(build(), so);
  auto e = strict->run({{"x", x}}, {"n"});
  REQUIRE_FALSE(e.ok());
  CHECK_THAT(e.error().message(), Catch::Contains("'n'") && Catch::Contains("GPU"));
}

TEST_CASE("a cluster naming a GPU that cannot be made fails to start, naming the device", "[actors][gpu]") {
  placement::job_spec job{"localhost", {placement::task_spec{{{"CPU", 1}, {"GPU", 1}}}}};
  auto spec = placement::cluster_spec::create({job});
  REQUIRE(spec.ok());
  actors::cluster_options o;
  o.spec = *spec;
  o.make_accelerator = [](const std::string& name, const std::string&, int) -> result<std::unique_ptr<kernels::device>> {
    return not_found_error("cannot make ", name, ": there is no GPU 0");
  };
  auto c = actors::cluster::create(o);
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.error().message(), Catch::Contains("/job:localhost/replica:0/task:0/device:GPU:0"));
}
