#include "graph/ops.h"

namespace troupe::ops {

using graph::attr_value;

output constant(const scope& s, const tensor& value) {
  return s.add("Const", {}, {{"value", attr_value(value)}, {"dtype", attr_value(value.type())}}).out();
}

output int32_vector(const scope& s, std::vector<std::int32_t> values) {
  return constant(s, tensor::from_vector(values));
}
output placeholder(const scope& s, dtype type, const partial_shape& shape) {
  return s.add("Placeholder", {}, {{"dtype", attr_value(type)}, {"shape", attr_value(shape)}}).out();
}
output placeholder_with_default(const scope& s, output default_value, const partial_shape& shape) {
  return s.add("PlaceholderWithDefault", {default_value},
               {{"dtype", attr_value(default_value.type)}, {"shape", attr_value(shape)}}).out();
}
output identity(const scope& s, output x) { return s.add("Identity", {x}).out(); }
operation no_op(const scope& s) { return s.add("NoOp", {}); }

namespace {
output unary(const scope& s, const char* op, output x) { return s.add(op, {x}).out(); }
output binary(const scope& s, const char* op, output x, output y) { return s.add(op, {x, y}).out(); }
output reduction(const scope& s, const char* op, output x, output axes, bool keep_dims) {
  return s.add(op, {x, axes}, {{"keep_dims", attr_value(keep_dims)}, {"Tidx", attr_value(axes.type)}}).out();
}
output random(const scope& s, const char* op, output shape, dtype type, int seed, int seed2) {
  return s.add(op, {shape}, {{"dtype", attr_value(type)}, {"seed", attr_value(seed)},
                             {"seed2", attr_value(seed2)}}).out();
}
}  // namespace

output add(const scope& s, output x, output y) { return binary(s, "AddV2", x, y); }
output sub(const scope& s, output x, output y) { return binary(s, "Sub", x, y); }
output mul(const scope& s, output x, output y) { return binary(s, "Mul", x, y); }
output div(const scope& s, output x, output y) { return binary(s, "RealDiv", x, y); }
output maximum(const scope& s, output x, output y) { return binary(s, "Maximum", x, y); }
output minimum(const scope& s, output x, output y) { return binary(s, "Minimum", x, y); }
output add_n(const scope& s, std::vector<output> xs) { return s.add("AddN", {input(std::move(xs))}).out(); }
output neg(const scope& s, output x) { return unary(s, "Neg", x); }
output abs(const scope& s, output x) { return unary(s, "Abs", x); }
output square(const scope& s, output x) { return unary(s, "Square", x); }
output sqrt(const scope& s, output x) { return unary(s, "Sqrt", x); }
output rsqrt(const scope& s, output x) { return unary(s, "Rsqrt", x); }
output exp(const scope& s, output x) { return unary(s, "Exp", x); }
output log(const scope& s, output x) { return unary(s, "Log", x); }
output tanh(const scope& s, output x) { return unary(s, "Tanh", x); }
output sigmoid(const scope& s, output x) { return unary(s, "Sigmoid", x); }
output relu(const scope& s, output x) { return unary(s, "Relu", x); }
output cast(const scope& s, output x, dtype to) {
  return s.add("Cast", {x}, {{"SrcT", attr_value(x.type)}, {"DstT", attr_value(to)}}).out();
}

output equal(const scope& s, output x, output y) { return binary(s, "Equal", x, y); }
output not_equal(const scope& s, output x, output y) { return binary(s, "NotEqual", x, y); }
output less(const scope& s, output x, output y) { return binary(s, "Less", x, y); }
output greater(const scope& s, output x, output y) { return binary(s, "Greater", x, y); }
output select(const scope& s, output condition, output x, output y) {
  return s.add("SelectV2", {condition, x, y}).out();
}

output matmul(const scope& s, output a, output b, bool transpose_a, bool transpose_b) {
  return s.add("MatMul", {a, b}, {{"transpose_a", attr_value(transpose_a)},
                                  {"transpose_b", attr_value(transpose_b)}}).out();
}
output batch_matmul(const scope& s, output x, output y, bool adj_x, bool adj_y) {
  return s.add("BatchMatMulV2", {x, y}, {{"adj_x", attr_value(adj_x)}, {"adj_y", attr_value(adj_y)}}).out();
}
output bias_add(const scope& s, output value, output bias) { return binary(s, "BiasAdd", value, bias); }
output softmax(const scope& s, output logits) { return unary(s, "Softmax", logits); }
output log_softmax(const scope& s, output logits) { return unary(s, "LogSoftmax", logits); }
operation softmax_cross_entropy_with_logits(const scope& s, output features, output labels) {
  return s.add("SoftmaxCrossEntropyWithLogits", {features, labels});
}
operation sparse_softmax_cross_entropy_with_logits(const scope& s, output features, output labels) {
  return s.add("SparseSoftmaxCrossEntropyWithLogits", {features, labels},
               {{"Tlabels", attr_value(labels.type)}});
}

output sum(const scope& s, output x, output axes, bool keep_dims) { return reduction(s, "Sum", x, axes, keep_dims); }
output mean(const scope& s, output x, output axes, bool keep_dims) { return reduction(s, "Mean", x, axes, keep_dims); }
output max(const scope& s, output x, output axes, bool keep_dims) { return reduction(s, "Max", x, axes, keep_dims); }
output min(const scope& s, output x, output axes, bool keep_dims) { return reduction(s, "Min", x, axes, keep_dims); }
output prod(const scope& s, output x, output axes, bool keep_dims) { return reduction(s, "Prod", x, axes, keep_dims); }
output argmax(const scope& s, output x, output axis, dtype output_type) {
  return s.add("ArgMax", {x, axis}, {{"Tidx", attr_value(axis.type)},
                                     {"output_type", attr_value(output_type)}}).out();
}

output reshape(const scope& s, output x, output shape) {
  return s.add("Reshape", {x, shape}, {{"Tshape", attr_value(shape.type)}}).out();
}
output shape(const scope& s, output x, dtype out_type) {
  return s.add("Shape", {x}, {{"out_type", attr_value(out_type)}}).out();
}
output size(const scope& s, output x, dtype out_type) {
  return s.add("Size", {x}, {{"out_type", attr_value(out_type)}}).out();
}
output rank(const scope& s, output x) { return unary(s, "Rank", x); }
output fill(const scope& s, output dims, output value) {
  return s.add("Fill", {dims, value}, {{"index_type", attr_value(dims.type)}}).out();
}
output zeros_like(const scope& s, output x) { return unary(s, "ZerosLike", x); }
output ones_like(const scope& s, output x) { return unary(s, "OnesLike", x); }
output transpose(const scope& s, output x, output perm) {
  return s.add("Transpose", {x, perm}, {{"Tperm", attr_value(perm.type)}}).out();
}
output concat(const scope& s, std::vector<output> values, output axis) {
  return s.add("ConcatV2", {input(std::move(values)), axis}, {{"Tidx", attr_value(axis.type)}}).out();
}
output stack(const scope& s, std::vector<output> values, int axis) {
  return s.add("Pack", {input(std::move(values))}, {{"axis", attr_value(axis)}}).out();
}

output random_uniform(const scope& s, output shape, dtype type, int seed, int seed2) {
  return random(s, "RandomUniform", shape, type, seed, seed2);
}
output random_normal(const scope& s, output shape, dtype type, int seed, int seed2) {
  return random(s, "RandomStandardNormal", shape, type, seed, seed2);
}
output truncated_normal(const scope& s, output shape, dtype type, int seed, int seed2) {
  return random(s, "TruncatedNormal", shape, type, seed, seed2);
}

}  // namespace troupe::ops
