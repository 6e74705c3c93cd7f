// Kernels for TensorFlow's conditional accumulator ops. The accumulator ops find or
// create the accumulator actor in the device's resource manager and output its handle
// (TensorFlow's ConditionalAccumulator and SparseConditionalAccumulator output a
// Ref(string) handle; troupe has no reference types, so all three output a resource
// handle, which the ops that use them take: GraphDefs load unchanged). The others send
// one request with a reply and finish from it; a parked take is withdrawn when its step
// aborts.
#include "actors/accumulator.h"
#include "actors/actor_resource.h"
#include "actors/runtime_device.h"
#include "actors/withdrawable.h"
#include "graph/attr.h"

namespace troupe::actors {
namespace {

using kernels::async_op_kernel;
using kernels::kernel_construction;
using kernels::kernel_context;

// ConditionalAccumulator, ResourceConditionalAccumulator, SparseConditionalAccumulator.
class accumulator_op_kernel final : public kernels::op_kernel {
 public:
  explicit accumulator_op_kernel(kernel_construction& c) : op_kernel(c) {
    if (!key_.read(c)) return;
    std::string reduction = "MEAN";
    if (!c.get_attrs("dtype", &options_.type, "shape", &options_.shape)) return;
    if (c.node().attr().count("reduction_type") > 0 && !c.get_attr("reduction_type", &reduction)) return;
    if (reduction != "MEAN" && reduction != "SUM") {
      c.fail(invalid_argument_error("node '", c.node().name(), "': reduction_type is '", reduction,
                                    "'; MEAN or SUM"));
      return;
    }
    options_.reduction = reduction == "SUM" ? accumulator_reduction::sum : accumulator_reduction::mean;
    options_.sparse = c.node().op() == "SparseConditionalAccumulator";
    if (c.node().attr().count("_one_per_worker") > 0 && !c.get_attr("_one_per_worker", &options_.one_per_source)) return;
    options_.name = key_.name;
    options_.pool = &key_.device->pool();
    options_.observer = key_.device->sync_watcher();
    status s = validate_accumulator_options(options_);
    if (!s.ok()) c.fail(s.with_context(str_cat("node '", c.node().name(), "' (", c.node().op(), ")")));
  }

  void compute(kernel_context& ctx) override {
    auto made = key_.find_or_make<accumulator_resource>([&] {
      accumulator_options o = options_;
      o.owner = key_.device->self();
      return make_accumulator(key_.device->system(), std::move(o));
    });
    if (!made.ok()) return ctx.fail(made.error());
    if (status s = (*made)->matches(options_); !s.ok()) return ctx.fail(std::move(s));
    ctx.set_output(0, tensor::from_resource(resource_handle{key_.device->name(), key_.container, key_.name, *made}));
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  resource_key key_;
  accumulator_options options_;
};

// A scalar of type T at input `index`, or false after failing ctx.
template <class T>
bool scalar_input(kernel_context& ctx, int index, const char* what, T* out) {
  const tensor& t = ctx.input(index);
  if (t.type() != dtype_of<T> || t.num_elements() != 1) {
    ctx.fail_invalid_argument(what, " must be a ", dtype_name(dtype_of<T>), " scalar but is ", t.debug_string(4));
    return false;
  }
  *out = t.flat<T>()[0];
  return true;
}

// Whether `a` is sparse as op `op` needs (else ctx failed, naming both).
bool of_kind(kernel_context& ctx, const accumulator_resource& a, bool sparse, const std::string& op) {
  if (a.options().sparse == sparse) return true;
  ctx.fail_invalid_argument(a.label(), " is ", a.options().sparse ? "sparse" : "dense", "; ", op,
                            sparse ? " needs a SparseConditionalAccumulator" : " needs a dense one");
  return false;
}

status_reply finishing(kernel_context& ctx, async_op_kernel::done_callback done, const accumulator_resource& a) {
  return status_reply(
      [&ctx, done = std::move(done)](result<done_t> r) {
        if (!r.ok()) ctx.fail(r.error());
        done();
      },
      a.peer());
}

// (Resource)AccumulatorApplyGradient, SparseAccumulatorApplyGradient: never parked.
class apply_kernel final : public async_op_kernel {
 public:
  explicit apply_kernel(kernel_construction& c) : async_op_kernel(c) {
    sparse_ = c.node().op() == "SparseAccumulatorApplyGradient";
    if (sparse_) c.get_attr("has_known_shape", &has_known_shape_);
  }
  void compute_async(kernel_context& ctx, done_callback done) override {
    auto* a = resolve_input<accumulator_resource>(ctx, 0);
    std::int64_t local_step = 0;
    if (a == nullptr || !scalar_input(ctx, 1, "local_step", &local_step)) return done();
    if (!of_kind(ctx, *a, sparse_, op())) return done();
    accumulator_apply m;
    m.local_step = local_step;
    if (const std::string* client = ctx.step().client) m.source = *client;
    if (sparse_) {
      m.indices = ctx.input(2);
      m.gradient = ctx.input(3);
      if (has_known_shape_) m.dense_shape = ctx.input(4);
    } else {
      m.gradient = ctx.input(2);
    }
    m.done = finishing(ctx, std::move(done), *a);
    caf::anon_send(a->actor(), std::move(m));
  }

 private:
  bool sparse_ = false;
  bool has_known_shape_ = false;
};

// (Resource)AccumulatorTakeGradient, SparseAccumulatorTakeGradient: parked until enough
// gradients are kept; withdrawn when the step aborts.
class take_kernel final : public async_op_kernel {
 public:
  explicit take_kernel(kernel_construction& c) : async_op_kernel(c) {
    sparse_ = c.node().op() == "SparseAccumulatorTakeGradient";
  }
  void compute_async(kernel_context& ctx, done_callback done) override {
    auto* a = resolve_input<accumulator_resource>(ctx, 0);
    std::int32_t num_required = 0;
    if (a == nullptr || !scalar_input(ctx, 1, "num_required", &num_required)) return done();
    if (!of_kind(ctx, *a, sparse_, op())) return done();
    const std::uint64_t id = a->next_request_id();
    caf::actor actor = a->actor();
    send_withdrawable<std::vector<tensor>>(
        ctx, std::move(done), a->peer(),
        [&](reply<std::vector<tensor>> r) { caf::anon_send(actor, accumulator_take{id, num_required, std::move(r)}); },
        [actor, id] { caf::anon_send(actor, accumulator_cancel{id}); }, set_outputs);
  }

 private:
  bool sparse_ = false;
};

// (Resource)AccumulatorSetGlobalStep.
class set_step_kernel final : public async_op_kernel {
 public:
  using async_op_kernel::async_op_kernel;
  void compute_async(kernel_context& ctx, done_callback done) override {
    auto* a = resolve_input<accumulator_resource>(ctx, 0);
    std::int64_t step = 0;
    if (a == nullptr || !scalar_input(ctx, 1, "new_global_step", &step)) return done();
    caf::anon_send(a->actor(), accumulator_set_step{step, finishing(ctx, std::move(done), *a)});
  }
};

// (Resource)AccumulatorNumAccumulated.
class count_kernel final : public async_op_kernel {
 public:
  using async_op_kernel::async_op_kernel;
  void compute_async(kernel_context& ctx, done_callback done) override {
    auto* a = resolve_input<accumulator_resource>(ctx, 0);
    if (a == nullptr) return done();
    ask_for_outputs(ctx, std::move(done), a->peer(),
                    [&](reply<std::vector<tensor>> r) { caf::anon_send(a->actor(), accumulator_count{std::move(r)}); });
  }
};

}  // namespace

void register_accumulator_kernels(kernels::kernel_registry& registry) {
  for (const char* op : {"ConditionalAccumulator", "ResourceConditionalAccumulator", "SparseConditionalAccumulator"}) {
    registry.add(op, "CPU", {}, kernels::make_kernel<accumulator_op_kernel>);
  }
  for (const char* op : {"AccumulatorApplyGradient", "ResourceAccumulatorApplyGradient",
                         "SparseAccumulatorApplyGradient"}) {
    registry.add(op, "CPU", {}, kernels::make_kernel<apply_kernel>);
  }
  for (const char* op : {"AccumulatorTakeGradient", "ResourceAccumulatorTakeGradient",
                         "SparseAccumulatorTakeGradient"}) {
    registry.add(op, "CPU", {}, kernels::make_kernel<take_kernel>);
  }
  for (const char* op : {"AccumulatorSetGlobalStep", "ResourceAccumulatorSetGlobalStep"}) {
    registry.add(op, "CPU", {}, kernels::make_kernel<set_step_kernel>);
  }
  for (const char* op : {"AccumulatorNumAccumulated", "ResourceAccumulatorNumAccumulated"}) {
    registry.add(op, "CPU", {}, kernels::make_kernel<count_kernel>);
  }
}

}  // namespace troupe::actors
