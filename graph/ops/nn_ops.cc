// Op schemas: dense-layer and classifier ops, spelled as TensorFlow's raw ops.
//
//   MatMul                             product = op(a) * op(b), op = optional transpose
//   BiasAdd, BiasAddGrad               add a per-channel bias (NHWC: last dim, NCHW: dim 1)
//   Softmax, LogSoftmax                over the last dimension
//   SoftmaxCrossEntropyWithLogits      dense labels, broadcastable to the features
//   SparseSoftmaxCrossEntropyWithLogits  integer class labels
//
// Kernels: kernels/cpu/matmul_kernels.cc and kernels/cpu/nn_kernels.cc. Gradients follow
// TensorFlow's math_grad.py and nn_grad.py; BiasAddGrad has none yet (no second order).
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops.h"

namespace troupe::graph {

namespace {

// Merges two possibly unknown dimensions (-1); false when both are known and differ.
bool merge_dim(std::int64_t a, std::int64_t b, std::int64_t* out) {
  if (a >= 0 && b >= 0 && a != b) return false;
  *out = a >= 0 ? a : b;
  return true;
}

status matmul_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 2));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 2));
  bool transpose_a = false;
  bool transpose_b = false;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("transpose_a", &transpose_a));
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("transpose_b", &transpose_b));
  const partial_shape& a = ctx.input(0);
  const partial_shape& b = ctx.input(1);
  std::int64_t m = -1, k_a = -1, k_b = -1, n = -1;
  if (a.known_rank()) {
    m = a.dim(transpose_a ? 1 : 0);
    k_a = a.dim(transpose_a ? 0 : 1);
  }
  if (b.known_rank()) {
    k_b = b.dim(transpose_b ? 1 : 0);
    n = b.dim(transpose_b ? 0 : 1);
  }
  std::int64_t k;
  if (!merge_dim(k_a, k_b, &k)) {
    return ctx.error("matrix size-incompatible: a ", a.to_string(),
                     transpose_a ? " (transposed)" : "", " has inner dimension ", k_a, " but b ",
                     b.to_string(), transpose_b ? " (transposed)" : "", " has inner dimension ",
                     k_b);
  }
  ctx.set_output(0, partial_shape{m, n});
  return status();
}

// BatchMatMulV2 (batch dimensions broadcast) and BatchMatMul (they must agree):
// [..., m, k] x [..., k, n] -> [batch..., m, n], each operand adjointed on request.
status batch_matmul_shape(shape_context& ctx, bool broadcast) {
  bool adj_x = false, adj_y = false;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("adj_x", &adj_x));
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("adj_y", &adj_y));
  const partial_shape& x = ctx.input(0);
  const partial_shape& y = ctx.input(1);
  if ((x.known_rank() && x.rank() < 2) || (y.known_rank() && y.rank() < 2)) {
    return ctx.error("BatchMatMul needs tensors of rank 2 or more, but x is ", x.to_string(), " and y is ",
                     y.to_string());
  }
  if (!x.known_rank() || !y.known_rank()) {
    ctx.set_output(0, partial_shape());
    return status();
  }
  const std::int64_t m = x.dim(x.rank() - (adj_x ? 1 : 2)), k_x = x.dim(x.rank() - (adj_x ? 2 : 1));
  const std::int64_t k_y = y.dim(y.rank() - (adj_y ? 1 : 2)), n = y.dim(y.rank() - (adj_y ? 2 : 1));
  std::int64_t k;
  if (!merge_dim(k_x, k_y, &k)) {
    return ctx.error("matrix size-incompatible: x ", x.to_string(), adj_x ? " (adjoint)" : "",
                     " has inner dimension ", k_x, " but y ", y.to_string(), adj_y ? " (adjoint)" : "",
                     " has inner dimension ", k_y);
  }
  partial_shape xb(std::vector<std::int64_t>(x.dims().begin(), x.dims().end() - 2));
  partial_shape yb(std::vector<std::int64_t>(y.dims().begin(), y.dims().end() - 2));
  if (!broadcast && xb.rank() != yb.rank()) {
    return ctx.error("batch dimensions differ: x ", x.to_string(), " and y ", y.to_string());
  }
  auto batch = broadcast_shapes(xb, yb);
  if (!batch.ok()) return ctx.error("batch dimensions do not broadcast: ", batch.error().message());
  std::vector<std::int64_t> out = batch->dims();
  out.push_back(m);
  out.push_back(n);
  ctx.set_output(0, partial_shape(out));
  return status();
}

// The gradients of a product z = op_a(a) op_b(b) (op: transposed when ta / tb) with
// respect to a and b, built with `product(s, x, y, tx, ty)` (MatMul or BatchMatMulV2):
// TensorFlow's table of the four cases.
template <class Product>
std::pair<output, output> product_grads(const scope& s, const Product& product, bool ta, bool tb, const output& a,
                                        const output& b, const output& dz) {
  if (!ta && !tb) return {product(s, dz, b, false, true), product(s, a, dz, true, false)};
  if (!ta && tb) return {product(s, dz, b, false, false), product(s, dz, a, true, false)};
  if (ta && !tb) return {product(s, b, dz, false, true), product(s, a, dz, false, false)};
  return {product(s, b, dz, true, true), product(s, dz, a, true, true)};
}

// TensorFlow's gradient of BatchMatMulV2, summed over the batch dimensions a side was
// broadcast along.
status batch_matmul_grad(const gradient_context& ctx, std::vector<output>* dx) {
  bool ax = false, ay = false;
  TROUPE_RETURN_IF_ERROR(get_attr(ctx.forward.def, "adj_x", &ax));
  TROUPE_RETURN_IF_ERROR(get_attr(ctx.forward.def, "adj_y", &ay));
  const output& x = ctx.inputs[0];
  const output& y = ctx.inputs[1];
  auto [gx, gy] = product_grads(ctx.s, ops::batch_matmul, ax, ay, x, y, ctx.grad_outputs[0]);
  *dx = {sum_to_shape_of(ctx.s, gx, x), sum_to_shape_of(ctx.s, gy, y)};
  return status();
}

// The channel dimension of a BiasAdd value of rank `rank`.
int bias_channel_dim(const std::string& data_format, int rank) {
  return data_format == "NCHW" ? 1 : rank - 1;
}

status bias_add_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank_at_least(0, 2));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  std::string data_format;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("data_format", &data_format));
  const partial_shape& value = ctx.input(0);
  const partial_shape& bias = ctx.input(1);
  if (!value.known_rank()) {
    ctx.set_output(0, value);
    return status();
  }
  std::vector<std::int64_t> dims = value.dims();
  int channel = bias_channel_dim(data_format, value.rank());
  std::int64_t bias_size = bias.known_rank() ? bias.dim(0) : -1;
  auto& c = dims[static_cast<std::size_t>(channel)];
  if (!merge_dim(c, bias_size, &c)) {
    return ctx.error("bias ", bias.to_string(), " does not match the channel dimension ",
                     channel, " of value ", value.to_string(), " (data_format ", data_format,
                     ")");
  }
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

status bias_add_grad_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank_at_least(0, 2));
  std::string data_format;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("data_format", &data_format));
  const partial_shape& grad = ctx.input(0);
  std::int64_t channels = -1;
  if (grad.known_rank()) channels = grad.dim(bias_channel_dim(data_format, grad.rank()));
  ctx.set_output(0, partial_shape{channels});
  return status();
}

status softmax_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank_at_least(0, 1));
  ctx.set_output(0, ctx.input(0));
  return status();
}

// Features and labels broadcast to a [batch, classes] matrix (TensorFlow allows e.g.
// labels of shape [classes] or [1, classes] for every row).
status softmax_xent_shape(shape_context& ctx) {
  auto merged = broadcast_shapes(ctx.input(0), ctx.input(1));
  if (!merged.ok()) return ctx.error("features and labels: ", merged.error().message());
  const partial_shape& s = *merged;
  if (s.known_rank() && s.rank() != 2) {
    return ctx.error("features ", ctx.input(0).to_string(), " and labels ",
                     ctx.input(1).to_string(), " must broadcast to rank 2 but broadcast to ",
                     s.to_string());
  }
  std::int64_t batch = s.known_rank() ? s.dim(0) : -1;
  ctx.set_output(0, partial_shape{batch});
  ctx.set_output(1, s.known_rank() ? s : partial_shape::unknown_of_rank(2));
  return status();
}

status sparse_softmax_xent_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 2));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  const partial_shape& features = ctx.input(0);
  const partial_shape& labels = ctx.input(1);
  std::int64_t batch = -1, classes = -1;
  if (features.known_rank()) {
    batch = features.dim(0);
    classes = features.dim(1);
  }
  if (!merge_dim(batch, labels.known_rank() ? labels.dim(0) : -1, &batch)) {
    return ctx.error("features ", features.to_string(), " and labels ", labels.to_string(),
                     " disagree on the batch size");
  }
  ctx.set_output(0, partial_shape{batch});
  ctx.set_output(1, partial_shape{batch, classes});
  return status();
}

// ---- Gradients. ----

using grads = std::vector<output>*;

// product = op(a) op(b): each input's gradient is a product of dy with the other input,
// transposed as TensorFlow's _MatMulGrad does for the four combinations.
status matmul_grad(const gradient_context& ctx, grads dx) {
  bool ta = false, tb = false;
  TROUPE_RETURN_IF_ERROR(get_attr(ctx.forward.def, "transpose_a", &ta));
  TROUPE_RETURN_IF_ERROR(get_attr(ctx.forward.def, "transpose_b", &tb));
  auto [da, db] = product_grads(ctx.s, ops::matmul, ta, tb, ctx.inputs[0], ctx.inputs[1], ctx.grad_outputs[0]);
  *dx = {da, db};
  return status();
}

status bias_add_grad(const gradient_context& ctx, grads dx) {
  std::string data_format;
  TROUPE_RETURN_IF_ERROR(get_attr(ctx.forward.def, "data_format", &data_format));
  const output& dy = ctx.grad_outputs[0];
  *dx = {dy, ctx.s.add("BiasAddGrad", {dy}, {{"data_format", attr_value(data_format)}}).out()};
  return status();
}

output last_axis(const scope& s) { return ops::constant(s, tensor::scalar<std::int32_t>(-1)); }

// [batch] -> [batch, 1].
output expand_last(const scope& s, const output& x) {
  return s.add("ExpandDims", {x, last_axis(s)}).out();
}

// dx = (dy - sum(dy * y, last axis)) * y.
status softmax_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& y = ctx.outputs[0];
  const output& dy = ctx.grad_outputs[0];
  output dot = ops::sum(s, ops::mul(s, dy, y), last_axis(s), true);
  *dx = {ops::mul(s, ops::sub(s, dy, dot), y)};
  return status();
}

// dx = dy - sum(dy, last axis) * exp(y).
status log_softmax_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& dy = ctx.grad_outputs[0];
  output total = ops::sum(s, dy, last_axis(s), true);
  *dx = {ops::sub(s, dy, ops::mul(s, total, ops::exp(s, ctx.outputs[0])))};
  return status();
}

// The gradient of the features of both cross-entropy ops, from the loss gradient (times
// the backprop output) and, when one flows in, the backprop output's own gradient
// (TensorFlow's _BroadcastMul and second-order term).
output xent_features_grad(const gradient_context& ctx, const output& features) {
  const scope& s = ctx.s;
  const output& backprop = ctx.outputs[1];
  output grad;
  if (ctx.grad_outputs[0].valid()) {
    output dloss = expand_last(s, ctx.grad_outputs[0]);
    grad = ops::mul(s, dloss, backprop);
  }
  if (ctx.grad_outputs[1].valid()) {
    const output& dbackprop = ctx.grad_outputs[1];
    output softmax = ops::softmax(s, features);
    output dot = ops::sum(s, ops::mul(s, dbackprop, softmax), last_axis(s), true);
    output second = ops::mul(s, ops::sub(s, dbackprop, dot), softmax);
    grad = grad.valid() ? ops::add(s, grad, second) : second;
  }
  return grad;
}

status softmax_xent_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& features = ctx.inputs[0];
  const output& labels = ctx.inputs[1];
  const output& backprop = ctx.outputs[1];
  // Features broadcast to [batch, classes] when labels widened them.
  output wide_features = features.shape == backprop.shape && features.shape.fully_defined()
                             ? features
                             : ops::add(s, features, ops::zeros_like(s, backprop));
  output dfeatures = xent_features_grad(ctx, wide_features);
  // The labels enter the loss through -log_softmax(features) and the backprop output
  // through -labels.
  output dlabels;
  if (ctx.grad_outputs[0].valid()) {
    output dloss = expand_last(s, ctx.grad_outputs[0]);
    dlabels = ops::mul(s, dloss, ops::neg(s, ops::log_softmax(s, wide_features)));
  }
  if (ctx.grad_outputs[1].valid()) {
    output minus = ops::neg(s, ctx.grad_outputs[1]);
    dlabels = dlabels.valid() ? ops::add(s, dlabels, minus) : minus;
  }
  *dx = {sum_to_shape_of(s, dfeatures, features), sum_to_shape_of(s, dlabels, labels)};
  return status();
}

status sparse_softmax_xent_grad(const gradient_context& ctx, grads dx) {
  *dx = {xent_features_grad(ctx, ctx.inputs[0]), output{}};
  return status();
}

}  // namespace

void register_nn_ops(op_registry& registry) {
  add_builtin_op(registry, op_schema("MatMul")
                             .input("a: T")
                             .input("b: T")
                             .output("product: T")
                             .attr("transpose_a: bool = false")
                             .attr("transpose_b: bool = false")
                             .attr("T: {float, double, int32, int64}")
                             .shape_fn(matmul_shape)
                             .gradient(matmul_grad));

  for (bool v2 : {true, false}) {
    add_builtin_op(registry, op_schema(v2 ? "BatchMatMulV2" : "BatchMatMul")
                               .input("x: T")
                               .input("y: T")
                               .output("output: T")
                               .attr("T: {float, double, int32, int64}")
                               .attr("adj_x: bool = false")
                               .attr("adj_y: bool = false")
                               .shape_fn([v2](shape_context& ctx) { return batch_matmul_shape(ctx, v2); })
                               .gradient(batch_matmul_grad));
  }

  add_builtin_op(registry,
               op_schema("BiasAdd")
                   .input("value: T")
                   .input("bias: T")
                   .output("output: T")
                   .attr("T: {float, double, int8, int16, int32, int64, uint8, uint16}")
                   .attr("data_format: {'NHWC', 'NCHW'} = 'NHWC'")
                   .shape_fn(bias_add_shape)
                   .gradient(bias_add_grad));
  add_builtin_op(registry,
               op_schema("BiasAddGrad")
                   .input("out_backprop: T")
                   .output("output: T")
                   .attr("T: {float, double, int8, int16, int32, int64, uint8, uint16}")
                   .attr("data_format: {'NHWC', 'NCHW'} = 'NHWC'")
                   .shape_fn(bias_add_grad_shape));

  add_builtin_op(registry, op_schema("Softmax")
                             .input("logits: T")
                             .output("softmax: T")
                             .attr("T: {float, double}")
                             .shape_fn(softmax_shape)
                             .gradient(softmax_grad));
  add_builtin_op(registry, op_schema("LogSoftmax")
                             .input("logits: T")
                             .output("logsoftmax: T")
                             .attr("T: {float, double}")
                             .shape_fn(softmax_shape)
                             .gradient(log_softmax_grad));

  add_builtin_op(registry, op_schema("SoftmaxCrossEntropyWithLogits")
                             .input("features: T")
                             .input("labels: T")
                             .output("loss: T")
                             .output("backprop: T")
                             .attr("T: {float, double}")
                             .shape_fn(softmax_xent_shape)
                             .gradient(softmax_xent_grad));
  add_builtin_op(registry, op_schema("SparseSoftmaxCrossEntropyWithLogits")
                             .input("features: T")
                             .input("labels: Tlabels")
                             .output("loss: T")
                             .output("backprop: T")
                             .attr("T: {float, double}")
                             .attr("Tlabels: {int32, int64} = DT_INT64")
                             .shape_fn(sparse_softmax_xent_shape)
                             .gradient(sparse_softmax_xent_grad));
}

}  // namespace troupe::graph
