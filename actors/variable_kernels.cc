// Kernels of the resource-variable ops. Each one is a conversation with variable actors
// (actors/variable.h): reads and assignments are one message each; updates lease their
// variables (in the global lease order), compute, and release them.
#include <algorithm>
#include <cstdlib>
#include <optional>

#include "actors/actor_resource.h"
#include "actors/runtime_device.h"
#include "actors/runtime_kernels.h"
#include "actors/simulation.h"
#include "actors/variable.h"
#include "actors/withdrawable.h"
#include "core/cpu_time.h"
#include "core/phantom.h"
#include "core/switches.h"
#include "graph/attr.h"
#include "kernels/kernel_registry.h"
#include "kernels/training_ops.h"

namespace troupe::actors {
namespace {

using kernels::async_op_kernel;
using kernels::kernel_construction;
using kernels::kernel_context;


result<variable_resource*> variable_input(const kernel_context& ctx, int i, const std::string& node) {
  const tensor& t = ctx.input(i);
  if (t.type() != dtype::resource || t.num_elements() != 1) {
    return invalid_argument_error("input ", i, " of '", node, "' must be a resource handle");
  }
  const resource_handle& h = t.resource_value();
  auto* v = h.get<variable_resource>();
  if (v == nullptr) {
    return invalid_argument_error("input ", i, " of '", node, "' is ", h.debug_string(), ", not a variable");
  }
  return v;
}

// Whether a kernel reaches its variables' values through their cells directly (on its own
// thread, no message: variable_cell::try_read, try_lease) while nothing waits in their
// actors: not under a simulation, whose world orders every exchange with an actor in
// virtual time, nor with TROUPE_VARIABLE_DIRECT=0.
bool direct_access(kernel_construction& c) {
  static const bool enabled = env_switch("TROUPE_VARIABLE_DIRECT", true);
  auto* dev = runtime_device::from(c.device());
  return enabled && (dev == nullptr || dev->simulation() == nullptr);
}

// Reads `v`'s value, then calls `then` with it: at once, on this thread, when `direct`
// and the value is free (variable_cell::try_read), else with the variable actor's answer.
template <class Then>
void read_value(variable_resource& v, bool direct, Then then) {
  if (direct && v.cell() != nullptr) {
    tensor value;
    if (v.cell()->try_read(&value)) return then(result<tensor>(std::move(value)));
  }
  caf::anon_send(v.actor(), var_read_atom::value, reply<tensor>(std::move(then), v.peer()));
}

class var_handle_kernel final : public kernels::op_kernel {
 public:
  explicit var_handle_kernel(kernel_construction& c) : op_kernel(c) {
    if (c.get_attrs("dtype", &dtype_, "shape", &shape_)) key_.read(c);
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

  void compute(kernel_context& ctx) override {
    auto v = key_.find_or_make<variable_resource>([&] {
      auto cell = std::make_shared<variable_cell>();
      caf::actor a = spawn_variable(key_.device->system(), key_.name, dtype_, shape_, cell);
      return result<std::shared_ptr<variable_resource>>(std::make_shared<variable_resource>(
          key_.name, str_cat(key_.device->name(), "/", key_.container, "/", key_.name), dtype_, shape_, std::move(a),
          std::move(cell)));
    });
    if (!v.ok()) return ctx.fail(v.error());
    if ((*v)->value_type() != dtype_) {
      return ctx.fail(invalid_argument_error("variable '", key_.name, "' already exists on ", key_.device->name(),
                                             " with dtype ", dtype_name((*v)->value_type()), ", not ",
                                             dtype_name(dtype_)));
    }
    ctx.set_output(0, tensor::from_resource({key_.device->name(), key_.container, key_.name, *v}));
  }

 private:
  resource_key key_;
  dtype dtype_ = dtype::invalid;
  partial_shape shape_;
};

class read_variable_kernel final : public async_op_kernel {
 public:
  explicit read_variable_kernel(kernel_construction& c) : async_op_kernel(c), direct_(direct_access(c)) {
    c.get_attr("dtype", &dtype_);
  }
  void compute_async(kernel_context& ctx, done_callback done) override {
    auto v = variable_input(ctx, 0, name());
    if (!v.ok()) return ctx.fail(v.error()), done();
    if ((*v)->value_type() != dtype_) {
      ctx.fail(invalid_argument_error("'", name(), "' reads ", dtype_name(dtype_), " but variable '", (*v)->name(),
                                      "' holds ", dtype_name((*v)->value_type())));
      return done();
    }
    read_value(**v, direct_, [&ctx, done](result<tensor> r) {
      if (r.ok()) ctx.set_output(0, std::move(*r));
      else ctx.fail(r.error());
      done();
    });
  }

 private:
  dtype dtype_ = dtype::invalid;
  bool direct_;
};

class assign_variable_kernel final : public async_op_kernel {
 public:
  explicit assign_variable_kernel(kernel_construction& c)
      : async_op_kernel(c), on_device_(c.device() != nullptr && c.device()->accelerator() != nullptr) {}
  // On a GPU the value is kept in its memory (the executor copies a host value in).
  memory input_memory(int i) const override { return i == 1 && on_device_ ? memory::device : memory::host; }
  void compute_async(kernel_context& ctx, done_callback done) override {
    auto v = variable_input(ctx, 0, name());
    if (!v.ok()) return ctx.fail(v.error()), done();
    caf::anon_send((*v)->actor(), var_assign_atom::value, ctx.input(1),
                   status_reply([&ctx, done](result<done_t> r) {
                     if (!r.ok()) ctx.fail(r.error());
                     done();
                   }, (*v)->peer()));
  }

 private:
  bool on_device_;
};

class var_is_initialized_kernel final : public async_op_kernel {
 public:
  using async_op_kernel::async_op_kernel;
  void compute_async(kernel_context& ctx, done_callback done) override {
    auto v = variable_input(ctx, 0, name());
    if (!v.ok()) return ctx.fail(v.error()), done();
    caf::anon_send((*v)->actor(), var_init_atom::value,
                   reply<bool>([&ctx, done](result<bool> r) {
                     if (r.ok()) ctx.set_output(0, tensor::scalar<bool>(*r));
                     else ctx.fail(r.error());
                     done();
                   }, (*v)->peer()));
  }
};

class resource_gather_kernel final : public async_op_kernel {
 public:
  explicit resource_gather_kernel(kernel_construction& c) : async_op_kernel(c), direct_(direct_access(c)) {
    c.get_attr("batch_dims", &batch_dims_);
    if (c.device() != nullptr) accelerator_ = c.device()->accelerator();
    if (accelerator_ != nullptr && batch_dims_ != 0) {
      c.fail(unimplemented_error("'", c.node().name(), "': ResourceGather with batch_dims ", batch_dims_,
                                 " has no GPU kernel (only 0)"));
    }
  }
  // On a GPU the indices are read there.
  memory input_memory(int i) const override { return i == 1 && accelerator_ != nullptr ? memory::device : memory::host; }

  void compute_async(kernel_context& ctx, done_callback done) override {
    auto v = variable_input(ctx, 0, name());
    if (!v.ok()) return ctx.fail(v.error()), done();
    if (accelerator_ != nullptr) return gather_on_device(ctx, **v, std::move(done));
    int batch_dims = static_cast<int>(batch_dims_);
    read_value(**v, direct_, [&ctx, done, batch_dims](result<tensor> r) {
      if (!r.ok()) {
        ctx.fail(r.error());
        return done();
      }
      // The copy runs on the thread that read the value (this one, or the variable's)
      // when cheaper than a hand-off (the gathered bytes at ~1 ns per 8 bytes, under
      // 20 us), else on the pool.
      const tensor& params = *r;
      if (is_phantom(params) || is_phantom(ctx.input(1))) {  // a shape-only simulation's
        std::vector<std::int64_t> dims = ctx.input(1).shape().dims();
        for (int d = batch_dims + 1; d < params.rank(); ++d) dims.push_back(params.dim(d));
        ctx.set_output(0, phantom_tensor(params.type(), tensor_shape(std::move(dims))));
        return done();
      }
      const double row_bytes = params.num_elements() == 0 || params.dim(0) == 0
                                   ? 0
                                   : static_cast<double>(params.byte_size()) / static_cast<double>(params.dim(0));
      const double bytes = static_cast<double>(ctx.input(1).num_elements()) * row_bytes;
      auto gather = [&ctx, done, batch_dims, params = std::move(*r)] {
        account_scope memory(ctx.step().memory);  // the device's, on any thread
        result<tensor> out = internal_error("not gathered");
        status thrown = kernels::catch_exceptions(
            [&] { out = kernels::gather(params, ctx.input(1), batch_dims); });
        if (!thrown.ok()) ctx.fail(std::move(thrown));
        else if (out.ok()) ctx.set_output(0, std::move(*out));
        else ctx.fail(out.error());
        done();
      };
      if (bytes / 8 > kernels::op_kernel::k_inline_ns) ctx.pool().schedule(std::move(gather));
      else gather();
    });
  }

 private:
  // The device gathers the rows (enqueued: cheap, so here); a value in host memory (set by
  // a checkpoint's restore) is copied in first.
  void gather_on_device(kernel_context& ctx, variable_resource& v, done_callback done) {
    read_value(v, direct_, [this, &ctx, done](result<tensor> r) {
      if (r.ok() && r->on_host()) r = accelerator_->to_device(*r);
      if (r.ok()) r = accelerator_->gather(*r, ctx.input(1));
      if (r.ok()) ctx.set_output(0, std::move(*r));
      else ctx.fail(r.error());
      done();
    });
  }

  std::int64_t batch_dims_ = 0;
  kernels::accelerator* accelerator_ = nullptr;
  bool direct_;
};

class destroy_resource_kernel final : public kernels::op_kernel {
 public:
  explicit destroy_resource_kernel(kernel_construction& c) : op_kernel(c) {
    c.get_attr("ignore_lookup_error", &ignore_lookup_error_);
    device_ = require_runtime(c);
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }
  void compute(kernel_context& ctx) override {
    const resource_handle& h = ctx.input(0).resource_value();
    if (!device_->resources().erase(h.container, h.name) && !ignore_lookup_error_) {
      ctx.fail(not_found_error("no resource '", h.name, "' on ", device_->name()));
    }
  }

 private:
  bool ignore_lookup_error_ = true;
  runtime_device* device_ = nullptr;
};

// An op that updates the variables among its inputs: leases them all (in lease_key order,
// each request withdrawn if the step aborts), runs update(), releases them and waits until
// every variable has its value back. Subclasses see the leased values in input order.
class variable_update_kernel final : public async_op_kernel {
 public:
  explicit variable_update_kernel(kernel_construction& c) : async_op_kernel(c), direct_(direct_access(c)) {
    if (auto* dev = runtime_device::from(c.device()); dev != nullptr && dev->simulation() != nullptr) {
      timer_ = dev->simulation()->timer_of(dev->name(), dev->task());
      def_ = c.node();
    }
    if (c.device() != nullptr) accelerator_ = c.device()->accelerator();
    for (dtype t : c.input_types()) input_is_value_.push_back(t != dtype::resource);
    attrs_.op = c.node().op();
    if (graph::has_attr(c.node(), "use_nesterov")) c.get_attr("use_nesterov", &attrs_.use_nesterov);
    if (graph::has_attr(c.node(), "update_slots")) c.get_attr("update_slots", &attrs_.update_slots);
    if (graph::has_attr(c.node(), "transpose_a")) c.get_attr("transpose_a", &attrs_.transpose_a);
    if (graph::has_attr(c.node(), "transpose_b")) c.get_attr("transpose_b", &attrs_.transpose_b);
    // Its estimated cost per element of the (first) variable, the figure its kernel's
    // parallel_for uses (kernels/cpu/training_ops.cc): the update runs inline (on the
    // thread that got the last lease) when it is cheaper than a hand-off, on the compute
    // pool otherwise. A product's multiply-adds per element of var are its inner dimension,
    // a few hundred in the models; a square root per element costs a few.
    const std::string& op = attrs_.op;
    if (op == "TroupeApplyGradientDescentMatMul") ns_per_element_ = 20.0;
    if (op == "ResourceApplyAdagrad" || op == "ResourceApplyAdam" || op == "ResourceApplyRMSProp") ns_per_element_ = 4.0;
  }

  // On a device with memory of its own (a GPU), every input but the variables' handles is
  // read there (hyper-parameters too, as TensorFlow's GPU kernels read them).
  memory input_memory(int i) const override {
    return accelerator_ != nullptr && input_is_value_[static_cast<std::size_t>(i)] ? memory::device : memory::host;
  }

  void compute_async(kernel_context& ctx, done_callback done) final {
    auto op = std::make_shared<operation>();
    op->ctx = &ctx;
    op->done = std::move(done);
    op->kernel = this;
    op->direct = direct_;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).type() != dtype::resource) continue;
      auto v = variable_input(ctx, i, name());
      if (!v.ok()) return ctx.fail(v.error()), op->finish();
      for (auto* other : op->vars) {
        if (other == *v) {
          ctx.fail(invalid_argument_error("'", name(), "' names variable '", other->name(), "' twice"));
          return op->finish();
        }
      }
      op->vars.push_back(*v);
    }
    op->values.resize(op->vars.size());
    op->leased.assign(op->vars.size(), false);
    for (std::size_t i = 0; i < op->vars.size(); ++i) op->order.push_back(i);
    std::sort(op->order.begin(), op->order.end(), [&](std::size_t a, std::size_t b) {
      return op->vars[a]->lease_key() < op->vars[b]->lease_key();
    });
    lease_next(op);
  }

 private:
  bool direct_;                     // leases taken directly (direct_access)
  kernel_timer* timer_ = nullptr;  // under a simulation: the device's kernels' timer
  tf::NodeDef def_;                 // and the node (its cost's key)
  kernels::accelerator* accelerator_ = nullptr;  // the device's memory and streams (a GPU), or null
  kernels::training_update attrs_;                // the op and the attributes its update reads
  std::vector<bool> input_is_value_;              // by input: not a variable's handle
  double ns_per_element_ = 1.0;                   // see the constructor

  // Applies the update to `vars` (the leased values of the variables `of`, in input
  // order), in place; a value that readers still share is copied first (readers keep their
  // snapshots; the variable hands it out as it is, so that the copy runs on the update's
  // thread: the compute pool for any variable large enough to matter, see run()). On the
  // host, the op's arithmetic (kernels/training_ops.h); on a device with memory of its
  // own, values in host memory (restored by a checkpoint) are copied in and shared ones
  // are copied on the device, then the device enqueues the update.
  status update(kernel_context& ctx, std::vector<tensor>& vars, const std::vector<variable_resource*>& of) const {
    if (accelerator_ == nullptr) {
      for (std::size_t i = 0; i < vars.size(); ++i) {
        if (vars[i].ref_count_is_one()) continue;
        status copied = kernels::catch_exceptions([&] { vars[i] = vars[i].deep_copy(); });
        if (!copied.ok()) {
          return copied.with_context(str_cat("copying variable '", of[i]->name(), "' for its update (readers still hold its value)"));
        }
      }
      return kernels::apply_training_update(attrs_, vars, ctx.inputs(), &ctx.pool());
    }
    for (tensor& v : vars) {
      if (v.on_host()) {
        auto in = accelerator_->to_device(v);
        if (!in.ok()) return in.error();
        v = std::move(*in);
      } else if (!v.ref_count_is_one()) {
        auto own = accelerator_->copy(v);
        if (!own.ok()) return own.error();
        v = std::move(*own);
      }
    }
    return accelerator_->apply_update(attrs_, vars, ctx.inputs());
  }

  // One update in flight. Whatever happens to it, every lease it holds goes back: after
  // the update, after a failure, or (without waiting for the answer) when it is destroyed.
  struct operation {
    kernel_context* ctx = nullptr;
    done_callback done;
    const variable_update_kernel* kernel = nullptr;
    bool direct = false;  // the kernel's direct_ (read here: the kernel may go first)
    std::vector<variable_resource*> vars;
    std::vector<tensor> values;
    std::vector<bool> leased;
    std::vector<std::size_t> order;
    std::size_t next = 0;  // in order: the next variable to lease
    std::atomic<int> releases_pending{0};
    std::mutex release_mutex;  // releases are answered on the variables' threads
    status release_error;

    ~operation() {
      for (std::size_t i = 0; i < leased.size(); ++i) {
        if (leased[i] && !give_back_directly(i, nullptr)) {
          caf::anon_send(vars[i]->actor(), var_release_atom::value, std::move(values[i]), status_reply());
        }
      }
    }
    // Gives lease `i` back through the variable's cell (variable_cell::try_release), when
    // leases are direct: true, and `*error` (when given) set if the variable was gone.
    // False: give it back by message.
    bool give_back_directly(std::size_t i, status* error) {
      variable_cell* cell = direct ? vars[i]->cell() : nullptr;
      if (cell == nullptr) return false;
      leased[i] = false;
      bool drain = false;
      if (!cell->try_release(std::move(values[i]), &drain)) {
        if (error != nullptr && error->ok()) {
          *error = unavailable_error(vars[i]->label(), " went away before its update came back");
        }
        return true;
      }
      if (drain) caf::anon_send(vars[i]->actor(), var_drain_atom::value);
      return true;
    }
    void finish() {
      if (!release_error.ok()) ctx->fail(release_error);
      auto d = std::move(done);
      d();
    }
  };

  // Gives every leased value back; `op` finishes once every variable has confirmed (a
  // variable that died with the value fails the update with `unavailable`).
  static void release_all(const std::shared_ptr<operation>& op) {
    // Directly (no answer to wait for; nothing else touches release_error yet), else by
    // message, each answered on its variable's thread.
    std::vector<std::size_t> by_message;
    for (std::size_t i = 0; i < op->vars.size(); ++i) {
      if (op->leased[i] && !op->give_back_directly(i, &op->release_error)) by_message.push_back(i);
    }
    if (by_message.empty()) return op->finish();
    op->releases_pending.store(static_cast<int>(by_message.size()));
    for (std::size_t i : by_message) {
      op->leased[i] = false;
      caf::anon_send(op->vars[i]->actor(), var_release_atom::value, std::move(op->values[i]),
                     status_reply(
                         [op](result<done_t> r) {
                           if (!r.ok()) {
                             std::lock_guard<std::mutex> lock(op->release_mutex);
                             if (op->release_error.ok()) op->release_error = r.error();
                           }
                           if (op->releases_pending.fetch_sub(1) == 1) op->finish();
                         },
                         op->vars[i]->peer()));
    }
  }

  static void lease_next(std::shared_ptr<operation> op) {
    // Directly while each variable is free (variable_cell) and the step goes on, else
    // through its actor (which also refuses a step that aborted: withdrawn).
    while (op->next < op->vars.size() && op->direct && !op->ctx->cancellation().is_cancelled()) {
      const std::size_t i = op->order[op->next];
      variable_cell* cell = op->vars[i]->cell();
      if (cell == nullptr || !cell->try_lease(&op->values[i])) break;
      op->leased[i] = true;
      ++op->next;
    }
    if (op->next == op->vars.size()) return run(std::move(op));
    const std::size_t i = op->order[op->next];
    variable_resource* v = op->vars[i];
    const std::uint64_t id = v->next_request_id();
    caf::actor actor = v->actor();
    send_withdrawable<tensor>(
        *op->ctx,
        [op] {
          if (!op->ctx->ok()) return release_all(op);
          ++op->next;
          lease_next(op);
        },
        v->peer(), [&](reply<tensor> r) { caf::anon_send(actor, var_lease_atom::value, id, std::move(r)); },
        [actor, id] { caf::anon_send(actor, var_withdraw_atom::value, id); },
        [op, i](kernel_context& ctx, result<tensor> r) {
          if (!r.ok()) return ctx.fail(r.error());
          op->values[i] = std::move(*r);
          op->leased[i] = true;
        });
  }

  // A shape-only simulation's update (core/phantom.h): when a variable or an input is a
  // phantom, every variable becomes one of its shape, and nothing is computed.
  static bool shape_only_update(const kernel_context& ctx, std::vector<tensor>& vars) {
    bool phantom = any_phantom(vars);
    for (int i = 0; i < ctx.num_inputs() && !phantom; ++i) phantom = is_phantom(ctx.input(i));
    if (!phantom) return false;
    for (tensor& v : vars) v = phantom_tensor(v.type(), v.shape());
    return true;
  }

  static void run(std::shared_ptr<operation> op) {
    const double elements = op->values.empty() ? 0 : static_cast<double>(op->values[0].num_elements());
    auto work = [op, elements] {
      account_scope memory(op->ctx->step().memory);
      status s = kernels::catch_exceptions([&] {
        if (shape_only_update(*op->ctx, op->values)) return;
        std::optional<cpu_meter> cpu;
        if (op->ctx->cpu_ns_wanted()) cpu.emplace();
        status updated = op->kernel->update(*op->ctx, op->values, op->vars);
        if (cpu) op->ctx->set_cpu_ns(cpu->elapsed_ns());
        if (!updated.ok()) op->ctx->fail(std::move(updated));
      });
      if (!s.ok()) op->ctx->fail(std::move(s));
      if (kernel_timer* timer = op->kernel->timer_) {
        // Simulated: the leases are held for the update's virtual time (the calibration's,
        // or its estimate as run() makes it: per element of the variable).
        return timer->hold(op->kernel->def_, op->ctx->inputs(), elements * op->kernel->ns_per_element_,
                           [op] { release_all(op); });
      }
      release_all(op);
    };
    // (A device's update is enqueued, never computed here: inline.)
    if (op->kernel->accelerator_ == nullptr && elements * op->kernel->ns_per_element_ > kernels::op_kernel::k_inline_ns) {
      op->ctx->pool().schedule(std::move(work));
    } else {
      work();
    }
  }
};

template <class Kernel, class... Args>
kernels::kernel_factory make(Args... args) {
  return [=](kernel_construction& c) -> std::unique_ptr<kernels::op_kernel> {
    return std::make_unique<Kernel>(c, args...);
  };
}

}  // namespace

void register_variable_kernels(kernels::kernel_registry& registry) {
  // On GPUs too: the variables, their reads, gathers and assignments, and the updates the
  // device applies itself (kernels::accelerator::apply_update, gather).
  for (const char* device : {"CPU", "GPU"}) {
    registry.add("VarHandleOp", device, {}, make<var_handle_kernel>());
    registry.add("ReadVariableOp", device, {}, make<read_variable_kernel>());
    registry.add("AssignVariableOp", device, {}, make<assign_variable_kernel>());
    registry.add("VarIsInitializedOp", device, {}, make<var_is_initialized_kernel>());
    registry.add("DestroyResourceOp", device, {}, make<destroy_resource_kernel>());
    registry.add("ResourceGather", device, {}, make<resource_gather_kernel>());
    for (const char* update : {"AssignAddVariableOp", "AssignSubVariableOp", "ResourceScatterAdd",
                               "ResourceApplyGradientDescent",
                               "TroupeApplyGradientDescentMatMul", "ResourceApplyMomentum", "ResourceApplyAdagrad",
                               "ResourceApplyAdam", "ResourceApplyRMSProp"}) {
      registry.add(update, device, {}, make<variable_update_kernel>());
    }
  }
}

}  // namespace troupe::actors
