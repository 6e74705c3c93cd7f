// The kernel interface: the code that computes one op on one device type.
//
// A kernel is built once per node when a partition is prepared; its constructor reads and
// validates the node's attributes (reporting errors through kernel_construction), so that
// compute() is the hot path. Kernels are shared by concurrent steps: compute() must not
// mutate the kernel (stateful kernels guard their own state).
//
//   class relu_kernel final : public op_kernel {
//    public:
//     explicit relu_kernel(kernel_construction& c) : op_kernel(c) {}
//     void compute(kernel_context& ctx) override {
//       const tensor& x = ctx.input(0);
//       tensor& y = ctx.allocate_output(0, x.shape());
//       ...
//     }
//   };
//
// An asynchronous kernel (Recv, queue and variable ops, actor-backed ops) derives from
// async_op_kernel and calls done() exactly once, from any thread, when it has finished
// (after setting outputs or failing). Errors: ctx.fail(status) and return; the executor
// aborts the step and reports the node's name with the error.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/float_env.h"
#include "core/memory.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "graph/proto/node_def.pb.h"
#include "kernels/cancellation.h"
#include "kernels/device.h"

namespace troupe::kernels {

// What a kernel's constructor sees: the node, its op schema, its input/output dtypes.
class kernel_construction {
 public:
  kernel_construction(const tf::NodeDef& node, const graph::op_def& op,
                      std::vector<dtype> input_types, std::vector<dtype> output_types,
                      kernels::device* dev = nullptr)
      : node_(node), op_(op), input_types_(std::move(input_types)),
        output_types_(std::move(output_types)), device_(dev) {}

  const tf::NodeDef& node() const { return node_; }
  const graph::op_def& op() const { return op_; }
  const std::vector<dtype>& input_types() const { return input_types_; }
  const std::vector<dtype>& output_types() const { return output_types_; }
  // The device the kernel will run on; null when a kernel runs outside any device
  // (run_kernel). Kernels that need one fail construction without it.
  kernels::device* device() const { return device_; }

  // Reads an attribute; on failure records the error (the kernel is then discarded).
  template <class T>
  bool get_attr(std::string_view name, T* out) {
    status s = graph::get_attr(node_, name, out);
    if (!s.ok()) fail(std::move(s));
    return status_.ok();
  }
  // Reads several: get_attrs("rate", &rate_, "burst", &burst_). False at the first failure.
  template <class T, class... Rest>
  bool get_attrs(std::string_view name, T* out, Rest... rest) {
    if (!get_attr(name, out)) return false;
    if constexpr (sizeof...(rest) > 0) return get_attrs(rest...);
    return true;
  }
  void fail(status s) {
    if (status_.ok()) status_ = std::move(s);
  }
  const status& construction_status() const { return status_; }

 private:
  const tf::NodeDef& node_;
  const graph::op_def& op_;
  std::vector<dtype> input_types_;
  std::vector<dtype> output_types_;
  kernels::device* device_;
  status status_;
};

// Per-step information a kernel may need beyond its inputs.
struct step_info {
  std::int64_t step_id = 0;
  compute_pool* pool = nullptr;  // intra-op parallelism; never null during compute
  // Cancelled when the step aborts; async kernels that wait on others register here.
  // Never null during compute.
  cancellation_manager* cancellation = nullptr;
  // The device's memory account (core/memory.h), current while compute runs; an
  // asynchronous kernel that allocates later, on another thread, makes it current there
  // (account_scope). Null: the process's.
  memory_account* memory = nullptr;
  // Who runs the step: the device (often partial, "/job:worker/task:1") of the session
  // that started it. Null or empty: unknown (a kernel run on its own).
  const std::string* client = nullptr;
};

// What one execution of a kernel sees: inputs, outputs, the step, the device's pool.
class kernel_context {
 public:
  kernel_context(std::span<const tensor> inputs, std::span<tensor> outputs,
                 std::span<const dtype> output_types, const step_info& step)
      : inputs_(inputs), outputs_(outputs), output_types_(output_types), step_(step) {}

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  const tensor& input(int i) const { return inputs_[static_cast<std::size_t>(i)]; }
  std::span<const tensor> inputs() const { return inputs_; }
  dtype output_type(int i) const { return output_types_[static_cast<std::size_t>(i)]; }

  // Allocates output i with its declared dtype (uninitialized bytes).
  tensor& allocate_output(int i, tensor_shape shape) {
    auto& out = outputs_[static_cast<std::size_t>(i)];
    out = tensor(output_type(i), std::move(shape));
    return out;
  }
  // Sets output i to an existing tensor (sharing its buffer).
  void set_output(int i, tensor t) { outputs_[static_cast<std::size_t>(i)] = std::move(t); }
  tensor& output(int i) { return outputs_[static_cast<std::size_t>(i)]; }

  // Reuses input `input_index`'s buffer for output `output_index` when no one else holds
  // it and dtype and size match; otherwise allocates. For element-wise kernels.
  tensor& forward_input_or_allocate_output(int input_index, int output_index, tensor_shape shape);

  void fail(status s) {
    if (status_.ok()) status_ = std::move(s);
  }
  // invalid_argument with the given message parts.
  template <class... Args>
  void fail_invalid_argument(const Args&... args) {
    fail(invalid_argument_error(args...));
  }
  bool ok() const { return status_.ok(); }
  const status& get_status() const { return status_; }

  const step_info& step() const { return step_; }
  compute_pool& pool() const { return *step_.pool; }
  cancellation_manager& cancellation() const { return *step_.cancellation; }

  // An asynchronous kernel's own work, the CPU time it computed (not its waiting: a
  // variable update's, not its leases'), for the step's tracer: measured only when the
  // executor asks (a tracer is there); < 0: not measured.
  void want_cpu_ns() { cpu_wanted_ = true; }
  bool cpu_ns_wanted() const { return cpu_wanted_; }
  void set_cpu_ns(double ns) { cpu_ns_ = ns; }
  double cpu_ns() const { return cpu_ns_; }

 private:
  bool cpu_wanted_ = false;
  double cpu_ns_ = -1;
  std::span<const tensor> inputs_;
  std::span<tensor> outputs_;
  std::span<const dtype> output_types_;
  const step_info& step_;
  status status_;
};

class op_kernel {
 public:
  explicit op_kernel(const kernel_construction& c) : name_(c.node().name()), op_(&c.op().name) {}
  virtual ~op_kernel() = default;

  // Synchronous kernels override this.
  virtual void compute(kernel_context& ctx) = 0;
  virtual bool is_async() const { return false; }

  // The kernel's estimated running time on these inputs, in nanoseconds. The executor runs
  // a ready node inline (on the thread that made it ready) when this is at most
  // k_inline_ns, the cost of handing it to another pool thread; otherwise on the pool.
  // Off the pool (on an actor's thread) only such cheap nodes ever run. The default says
  // "always worth a thread"; kernels of constant small cost return 0 (shape ops, messages
  // to actors), element-wise kernels elementwise_ns() with their measured cost per
  // element.
  virtual double estimated_ns(std::span<const tensor> inputs) const { return k_expensive_ns; }
  // True when estimated_ns looks at its inputs; false lets the executor ask once, when it
  // prepares the node, and keep the answer beside the node (no call per step).
  virtual bool estimate_depends_on_inputs() const { return false; }
  static constexpr double k_inline_ns = 20000;
  static constexpr double k_expensive_ns = 1e18;

  const std::string& name() const { return name_; }
  const std::string& op() const { return *op_; }

  // Where the kernel reads input i: host memory (every CPU kernel, and a GPU kernel's
  // shape and axis inputs), the device's memory (a GPU kernel's data), or either (Send,
  // Identity). On a device with an accelerator the executor copies a host tensor in for a
  // `device` input; a device tensor reaching a `host` input is an error.
  enum class memory { host, device, any };
  virtual memory input_memory(int i) const { return memory::host; }

 private:
  std::string name_;
  const std::string* op_;  // the op schema's name (schemas live as long as their registry)
};

// The estimated time of an element-wise kernel over `inputs` that broadcast together:
// `ns_per_element` times the broadcast result's element count (the largest size of each
// dimension, aligned on the right).
double elementwise_ns(std::span<const tensor> inputs, double ns_per_element);

// The dynamic type of `e`, demangled ("std::out_of_range").
std::string exception_type_name(const std::exception& e);

// Runs `body` (a kernel's work) with subnormal floats flushed to zero (core/float_env.h)
// and returns ok, or the error of an exception that escaped it: allocation_error
// (core/memory.h) becomes RESOURCE_EXHAUSTED with what was asked for and why, anything
// else INTERNAL naming the exception. No exception escapes a kernel: the executor and
// everything that runs kernel work elsewhere (a pool task of an asynchronous kernel) go
// through this.
template <class F>
status catch_exceptions(F&& body) noexcept {
  flush_denormals numerics;
  try {
    body();
    return status();
  } catch (const allocation_error& e) {
    return e.to_status();
  } catch (const std::exception& e) {
    return internal_error("the kernel threw ", exception_type_name(e), ": ", e.what());
  } catch (...) {
    return internal_error("the kernel threw an exception that is not a std::exception");
  }
}
class async_op_kernel : public op_kernel {
 public:
  using op_kernel::op_kernel;
  using done_callback = std::function<void()>;

  // Calls done exactly once, from any thread, when the outputs are set or ctx failed.
  // REQUIRES: ctx stays valid until done is called (the executor guarantees it).
  virtual void compute_async(kernel_context& ctx, done_callback done) = 0;

  void compute(kernel_context& ctx) final;  // not used: the executor calls compute_async
  bool is_async() const final { return true; }
  // Starting one is a message to an actor (a variable, a queue, the rendezvous): cheap.
  // One that starts real work itself puts it on the pool, or overrides this.
  double estimated_ns(std::span<const tensor>) const override { return 0; }
};

}  // namespace troupe::kernels
