// Op schemas: more activations, element-wise math and normalization, spelled as
// TensorFlow's raw ops.
//
//   Relu6 Elu Softplus LeakyRelu    (features -> activations); LeakyRelu has alpha = 0.2
//   Relu6Grad SoftplusGrad LeakyReluGrad   (gradients, features -> backprops)
//   EluGrad                         (gradients, outputs -> backprops)
//   Reciprocal                      (x -> y) 1 / x; ReciprocalGrad (y, dy -> z)
//   Pow FloorDiv FloorMod           (x, y -> z), numpy broadcasting; FloorDiv and FloorMod
//                                   round toward negative infinity (FloorMod takes the
//                                   divisor's sign)
//   ClipByValue                     (t, clip_value_min, clip_value_max -> output), the
//                                   bounds broadcast to t's shape
//   L2Loss                          (t -> output) sum(t^2) / 2, a scalar
//   LRN, LRNGrad                    local response normalization over the last dimension
//                                   of an NHWC tensor
//   FusedBatchNorm(V2, V3), FusedBatchNormGrad(V2, V3)   batch normalization per channel (NHWC, NCHW,
//                                   NDHWC, NCDHW); in training y uses the batch's biased
//                                   variance while the batch_variance output is the
//                                   Bessel-corrected one
//
// Type sets are TensorFlow's narrowed to the dtypes troupe computes with, except that
// LRN and FusedBatchNorm also take double (TensorFlow: half, bfloat16, float) so that
// their gradients can be checked in float64. Kernels: kernels/cpu/nn2_kernels.cc.
//
// Gradients follow TensorFlow's nn_grad.py, math_grad.py and clip_ops.py. FloorDiv has
// none (TensorFlow returns None); the *Grad ops have none yet (no second order).
#include <cstdio>
#include <cstdlib>

#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops.h"

namespace troupe::graph {

namespace {

constexpr const char* k_real_types = "T: {float, double, int8, int16, int32, int64, uint8, uint16}";
constexpr const char* k_signed_types = "T: {float, double, int8, int16, int32, int64}";
constexpr const char* k_float_types = "T: {float, double}";

// Merges two possibly unknown dimensions (-1); false when both are known and differ.
bool merge_dim(std::int64_t a, std::int64_t b, std::int64_t* out) {
  if (a >= 0 && b >= 0 && a != b) return false;
  *out = a >= 0 ? a : b;
  return true;
}

// The output has t's shape; the bounds must broadcast to it.
status clip_by_value_shape(shape_context& ctx) {
  const partial_shape& t = ctx.input(0);
  for (int i = 1; i <= 2; ++i) {
    auto b = broadcast_shapes(t, ctx.input(i));
    bool ok = b.ok();
    if (ok && t.known_rank() && b->known_rank()) {
      ok = b->rank() == t.rank();
      for (int d = 0; ok && d < t.rank(); ++d) ok = t.dim(d) < 0 || b->dim(d) == t.dim(d);
    }
    if (!ok) {
      return ctx.error(i == 1 ? "clip_value_min " : "clip_value_max ", ctx.input(i).to_string(),
                       " does not broadcast to the shape of t ", t.to_string());
    }
  }
  ctx.set_output(0, t);
  return status();
}

status lrn_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 4));
  ctx.set_output(0, ctx.input(0).known_rank() ? ctx.input(0) : partial_shape::unknown_of_rank(4));
  return status();
}

status lrn_grad_shape(shape_context& ctx) {
  partial_shape out = partial_shape::unknown_of_rank(4);
  for (int i = 0; i < 3; ++i) {
    TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, 4));
    auto merged = out.merge(ctx.input(i));
    if (!merged.ok()) {
      return ctx.error("input_grads ", ctx.input(0).to_string(), ", input_image ",
                       ctx.input(1).to_string(), " and output_image ", ctx.input(2).to_string(),
                       " must have one shape");
    }
    out = std::move(*merged);
  }
  ctx.set_output(0, std::move(out));
  return status();
}

// The rank and channel dimension of a FusedBatchNorm data_format.
status batch_norm_format(shape_context& ctx, int* rank, int* channel_dim) {
  std::string format;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("data_format", &format));
  *rank = format.size() == 5 ? 5 : 4;
  *channel_dim = format[1] == 'C' ? 1 : *rank - 1;
  return status();
}

// x (input x_input) and the per-channel vectors (inputs `vectors`) agree on the channels.
status batch_norm_channels(shape_context& ctx, int x_input, std::initializer_list<int> vectors,
                           partial_shape* x, std::int64_t* channels) {
  int rank = 4, channel_dim = 3;
  TROUPE_RETURN_IF_ERROR(batch_norm_format(ctx, &rank, &channel_dim));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(x_input, rank));
  *x = ctx.input(x_input).known_rank() ? ctx.input(x_input) : partial_shape::unknown_of_rank(rank);
  *channels = x->dim(channel_dim);
  for (int i : vectors) {
    TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, 1));
    const partial_shape& v = ctx.input(i);
    if (!merge_dim(*channels, v.known_rank() ? v.dim(0) : -1, channels)) {
      return ctx.error("input ", i, " ", v.to_string(), " must have one element per channel of x ",
                       x->to_string());
    }
  }
  return status();
}

status fused_batch_norm_shape(shape_context& ctx) {
  bool is_training = true;
  float factor = 1.0f;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("is_training", &is_training));
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("exponential_avg_factor", &factor));
  partial_shape x;
  std::int64_t channels = -1;
  // In training with exponential_avg_factor 1, mean and variance are not read (and may be
  // empty).
  if (is_training && factor == 1.0f) {
    TROUPE_RETURN_IF_ERROR(batch_norm_channels(ctx, 0, {1, 2}, &x, &channels));
  } else {
    TROUPE_RETURN_IF_ERROR(batch_norm_channels(ctx, 0, {1, 2, 3, 4}, &x, &channels));
  }
  ctx.set_output(0, x);
  for (int i = 1; i <= 4; ++i) ctx.set_output(i, partial_shape{channels});
  if (ctx.num_outputs() > 5) ctx.set_output(5, partial_shape::unknown());  // V3's reserve_space_3
  return status();
}

status fused_batch_norm_grad_shape(shape_context& ctx) {
  partial_shape x;
  std::int64_t channels = -1;
  TROUPE_RETURN_IF_ERROR(batch_norm_channels(ctx, 1, {2, 3, 4}, &x, &channels));
  auto merged = x.merge(ctx.input(0));
  if (!merged.ok()) {
    return ctx.error("y_backprop ", ctx.input(0).to_string(), " must have the shape of x ",
                     x.to_string());
  }
  ctx.set_output(0, std::move(*merged));
  ctx.set_output(1, partial_shape{channels});
  ctx.set_output(2, partial_shape{channels});
  ctx.set_output(3, partial_shape{0});
  ctx.set_output(4, partial_shape{0});
  return status();
}

// ---- Gradients. ----

using grads = std::vector<output>*;

output dy_of(const gradient_context& ctx) { return ctx.grad_outputs[0]; }
output binary_op(const scope& s, const char* op, output a, output b) { return s.add(op, {a, b}).out(); }

status relu6_grad(const gradient_context& ctx, grads dx) {
  *dx = {binary_op(ctx.s, "Relu6Grad", dy_of(ctx), ctx.inputs[0])};
  return status();
}
status elu_grad(const gradient_context& ctx, grads dx) {
  *dx = {binary_op(ctx.s, "EluGrad", dy_of(ctx), ctx.outputs[0])};
  return status();
}
status softplus_grad(const gradient_context& ctx, grads dx) {
  *dx = {binary_op(ctx.s, "SoftplusGrad", dy_of(ctx), ctx.inputs[0])};
  return status();
}
status selu_grad(const gradient_context& ctx, grads dx) {
  *dx = {binary_op(ctx.s, "SeluGrad", dy_of(ctx), ctx.outputs[0])};
  return status();
}
status softsign_grad(const gradient_context& ctx, grads dx) {
  *dx = {binary_op(ctx.s, "SoftsignGrad", dy_of(ctx), ctx.inputs[0])};
  return status();
}
status leaky_relu_grad(const gradient_context& ctx, grads dx) {
  float alpha = 0.2f;
  TROUPE_RETURN_IF_ERROR(get_attr(ctx.forward.def, "alpha", &alpha));
  *dx = {ctx.s.add("LeakyReluGrad", {dy_of(ctx), ctx.inputs[0]}, {{"alpha", attr_value(alpha)}}).out()};
  return status();
}
status reciprocal_grad(const gradient_context& ctx, grads dx) {
  *dx = {binary_op(ctx.s, "ReciprocalGrad", ctx.outputs[0], dy_of(ctx))};
  return status();
}

// z = x^y: dx = dy * y * x^(y-1); dy = dy * z * log(x) where x > 0, else 0.
status pow_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& x = ctx.inputs[0];
  const output& y = ctx.inputs[1];
  const output& z = ctx.outputs[0];
  const output& g = dy_of(ctx);
  output y_minus_one = ops::sub(s, y, scalar_of(s, y.type, 1.0));
  output gx = ops::mul(s, g, ops::mul(s, y, binary_op(s, "Pow", x, y_minus_one)));
  output positive = ops::greater(s, x, ops::zeros_like(s, x));
  output safe_x = ops::select(s, positive, x, ops::ones_like(s, x));
  output log_x = ops::select(s, positive, ops::log(s, safe_x), ops::zeros_like(s, x));
  output gy = ops::mul(s, ops::mul(s, g, z), log_x);
  *dx = {sum_to_shape_of(s, gx, x), sum_to_shape_of(s, gy, y)};
  return status();
}

// z = x - floor(x / y) * y: dx = dy, dy = -dy * floor(x / y).
status floor_mod_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& x = ctx.inputs[0];
  const output& y = ctx.inputs[1];
  output gy = ops::mul(s, dy_of(ctx), ops::neg(s, binary_op(s, "FloorDiv", x, y)));
  *dx = {sum_to_shape_of(s, dy_of(ctx), x), sum_to_shape_of(s, gy, y)};
  return status();
}

// The gradient goes to t where it lies within the bounds, else to the bound it was
// clipped to.
status clip_by_value_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& t = ctx.inputs[0];
  const output& lo = ctx.inputs[1];
  const output& hi = ctx.inputs[2];
  const output& g = dy_of(ctx);
  output zeros = ops::zeros_like(s, g);
  output below = ops::less(s, t, lo);
  output above = ops::greater(s, t, hi);
  output gt = ops::select(s, below, zeros, ops::select(s, above, zeros, g));
  *dx = {sum_to_shape_of(s, gt, t), sum_to_shape_of(s, ops::select(s, below, g, zeros), lo),
         sum_to_shape_of(s, ops::select(s, above, g, zeros), hi)};
  return status();
}

status l2_loss_grad(const gradient_context& ctx, grads dx) {
  *dx = {ops::mul(ctx.s, ctx.inputs[0], dy_of(ctx))};
  return status();
}

status lrn_grad(const gradient_context& ctx, grads dx) {
  std::int64_t depth_radius = 5;
  float bias = 1, alpha = 1, beta = 0.5f;
  const tf::NodeDef& def = ctx.forward.def;
  TROUPE_RETURN_IF_ERROR(get_attr(def, "depth_radius", &depth_radius));
  TROUPE_RETURN_IF_ERROR(get_attr(def, "bias", &bias));
  TROUPE_RETURN_IF_ERROR(get_attr(def, "alpha", &alpha));
  TROUPE_RETURN_IF_ERROR(get_attr(def, "beta", &beta));
  *dx = {ctx.s
             .add("LRNGrad", {dy_of(ctx), ctx.inputs[0], ctx.outputs[0]},
                  {{"depth_radius", attr_value(depth_radius)},
                   {"bias", attr_value(bias)},
                   {"alpha", attr_value(alpha)},
                   {"beta", attr_value(beta)}})
             .out()};
  return status();
}

// Only y's gradient is propagated (as TensorFlow does). In training the saved batch
// statistics (reserve_space_1/2) are used, in inference the given mean and variance; mean,
// variance get no gradient.
status fused_batch_norm_grad(const gradient_context& ctx, grads dx) {
  const tf::NodeDef& def = ctx.forward.def;
  float epsilon = 1e-4f;
  std::string data_format;
  bool is_training = true;
  TROUPE_RETURN_IF_ERROR(get_attr(def, "epsilon", &epsilon));
  TROUPE_RETURN_IF_ERROR(get_attr(def, "data_format", &data_format));
  TROUPE_RETURN_IF_ERROR(get_attr(def, "is_training", &is_training));
  output mean = is_training ? ctx.outputs[3] : ctx.inputs[3];
  output variance = is_training ? ctx.outputs[4] : ctx.inputs[4];
  // FusedBatchNorm and FusedBatchNormV2 have no reserve_space_3 (V3's is an unused scalar).
  output reserve_3 = ctx.outputs.size() > 5 ? ctx.outputs[5] : scalar_of(ctx.s, ctx.outputs[1].type, 0.0);
  auto grad = ctx.s.add("FusedBatchNormGradV3",
                        {grad_or_zeros(ctx, 0), ctx.inputs[0], ctx.inputs[1], mean, variance, reserve_3},
                        {{"epsilon", attr_value(epsilon)},
                         {"data_format", attr_value(data_format)},
                         {"is_training", attr_value(is_training)}});
  *dx = {grad.out(0), grad.out(1), grad.out(2), output{}, output{}};
  return status();
}

op_schema activation_schema(const char* name, const char* types) {
  return std::move(op_schema(name)
                       .input("features: T")
                       .output("activations: T")
                       .attr(types)
                       .shape_fn(unchanged_shape));
}

op_schema activation_grad_schema(const char* name, const char* types, const char* second) {
  return std::move(op_schema(name)
                       .input("gradients: T")
                       .input(second)
                       .output("backprops: T")
                       .attr(types)
                       .shape_fn(same_shape_binary));
}

op_schema binary_schema(const char* name, const char* types) {
  return std::move(op_schema(name).input("x: T").input("y: T").output("z: T").attr(types).shape_fn(
      broadcast_binary_shape));
}

op_schema lrn_attrs(op_schema schema) {
  return std::move(schema.attr("depth_radius: int = 5")
                       .attr("bias: float = 1.0")
                       .attr("alpha: float = 1.0")
                       .attr("beta: float = 0.5")
                       .attr("T: {float, double} = DT_FLOAT"));
}

}  // namespace

void register_nn2_ops(op_registry& registry) {
  add_builtin_op(registry, activation_schema("Relu6", k_real_types).gradient(relu6_grad));
  add_builtin_op(registry, activation_grad_schema("Relu6Grad", k_real_types, "features: T"));
  add_builtin_op(registry, activation_schema("Elu", k_float_types).gradient(elu_grad));
  add_builtin_op(registry, activation_grad_schema("EluGrad", k_float_types, "outputs: T"));
  add_builtin_op(registry, activation_schema("Softplus", k_float_types).gradient(softplus_grad));
  add_builtin_op(registry, activation_grad_schema("SoftplusGrad", k_float_types, "features: T"));
  add_builtin_op(registry, activation_schema("Selu", k_float_types).gradient(selu_grad));
  add_builtin_op(registry, activation_grad_schema("SeluGrad", k_float_types, "outputs: T"));
  add_builtin_op(registry, activation_schema("Softsign", k_float_types).gradient(softsign_grad));
  add_builtin_op(registry, activation_grad_schema("SoftsignGrad", k_float_types, "features: T"));
  add_builtin_op(registry, activation_schema("LeakyRelu", k_float_types)
                               .attr("alpha: float = 0.2")
                               .gradient(leaky_relu_grad));
  add_builtin_op(registry, activation_grad_schema("LeakyReluGrad", k_float_types, "features: T")
                               .attr("alpha: float = 0.2"));

  add_builtin_op(registry, op_schema("Reciprocal")
                               .input("x: T")
                               .output("y: T")
                               .attr("T: {float, double, int32, int64}")
                               .shape_fn(unchanged_shape)
                               .gradient(reciprocal_grad));
  add_builtin_op(registry, op_schema("ReciprocalGrad")
                               .input("y: T")
                               .input("dy: T")
                               .output("z: T")
                               .attr(k_float_types)
                               .shape_fn(same_shape_binary));

  add_builtin_op(registry, binary_schema("Pow", k_signed_types).gradient(pow_grad));
  add_builtin_op(registry, binary_schema("FloorDiv", k_real_types).no_gradient());
  add_builtin_op(registry, binary_schema("FloorMod", k_real_types).gradient(floor_mod_grad));
  add_builtin_op(registry, op_schema("ClipByValue")
                               .input("t: T")
                               .input("clip_value_min: T")
                               .input("clip_value_max: T")
                               .output("output: T")
                               .attr(k_real_types)
                               .shape_fn(clip_by_value_shape)
                               .gradient(clip_by_value_grad));
  add_builtin_op(registry, op_schema("L2Loss")
                               .input("t: T")
                               .output("output: T")
                               .attr(k_float_types)
                               .shape_fn(scalar_shape)
                               .gradient(l2_loss_grad));

  add_builtin_op(registry, lrn_attrs(op_schema("LRN").input("input: T").output("output: T"))
                               .shape_fn(lrn_shape)
                               .gradient(lrn_grad));
  add_builtin_op(registry, lrn_attrs(op_schema("LRNGrad")
                                         .input("input_grads: T")
                                         .input("input_image: T")
                                         .input("output_image: T")
                                         .output("output: T"))
                               .shape_fn(lrn_grad_shape));

  // FusedBatchNorm (TF 1.x before 1.5: float only, no U), FusedBatchNormV2 (no
  // reserve_space_3) and FusedBatchNormV3, with their gradients: one kernel for all.
  for (int version = 1; version <= 3; ++version) {
    const std::string suffix = version == 1 ? "" : "V" + std::to_string(version);
    const char* u = version == 1 ? "T" : "U";
    op_schema forward("FusedBatchNorm" + suffix);
    forward.input("x: T")
        .input(std::string("scale: ") + u)
        .input(std::string("offset: ") + u)
        .input(std::string("mean: ") + u)
        .input(std::string("variance: ") + u)
        .output("y: T")
        .output(std::string("batch_mean: ") + u)
        .output(std::string("batch_variance: ") + u)
        .output(std::string("reserve_space_1: ") + u)
        .output(std::string("reserve_space_2: ") + u);
    if (version == 3) forward.output("reserve_space_3: U");
    forward.attr(version == 1 ? "T: {float}" : "T: {float, double}");
    if (version != 1) forward.attr("U: {float, double}");
    add_builtin_op(registry, std::move(forward.attr("epsilon: float = 0.0001")
                                           .attr("exponential_avg_factor: float = 1.0")
                                           .attr("data_format: {'NHWC', 'NCHW', 'NDHWC', 'NCDHW'} = 'NHWC'")
                                           .attr("is_training: bool = true")
                                           .shape_fn(fused_batch_norm_shape)
                                           .gradient(fused_batch_norm_grad)));
    op_schema backward("FusedBatchNormGrad" + suffix);
    backward.input("y_backprop: T")
        .input("x: T")
        .input(std::string("scale: ") + u)
        .input(std::string("reserve_space_1: ") + u)
        .input(std::string("reserve_space_2: ") + u);
    if (version == 3) backward.input("reserve_space_3: U");
    backward.output("x_backprop: T")
        .output(std::string("scale_backprop: ") + u)
        .output(std::string("offset_backprop: ") + u)
        .output(std::string("reserve_space_") + (version == 3 ? "4" : "3") + ": " + u)
        .output(std::string("reserve_space_") + (version == 3 ? "5" : "4") + ": " + u)
        .attr(version == 1 ? "T: {float}" : "T: {float, double}");
    if (version != 1) backward.attr("U: {float, double}");
    add_builtin_op(registry, std::move(backward.attr("epsilon: float = 0.0001")
                                           .attr("data_format: {'NHWC', 'NCHW', 'NDHWC', 'NCDHW'} = 'NHWC'")
                                           .attr("is_training: bool = true")
                                           .shape_fn(fused_batch_norm_grad_shape)));
  }
}

}  // namespace troupe::graph
