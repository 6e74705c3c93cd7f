// ops:: — one typed builder function per op, each a thin layer over scope::add that
// names the TensorFlow op and its attributes. Type attributes come from the inputs.
//
//   auto y = ops::relu(s, ops::bias_add(s, ops::matmul(s, x, w), b));
//   auto loss = ops::mean(s, ops::sparse_softmax_cross_entropy_with_logits(s, y, labels).out(0),
//                         ops::constant(s, tensor::from_vector<int32_t>({0})));
//
// Any op without a wrapper here can be built with scope::add("OpName", inputs, attrs).
#pragma once

#include <vector>

#include "graph/builder.h"

namespace troupe::ops {

using graph::input;
using graph::operation;
using graph::output;
using graph::scope;

// Sources.
output constant(const scope& s, const tensor& value);
// A Const int32 vector (shapes, axes, begin and size of slices).
output int32_vector(const scope& s, std::vector<std::int32_t> values);
template <class T>
output scalar(const scope& s, T value) {
  return constant(s, tensor::scalar<T>(value));
}
output placeholder(const scope& s, dtype type, const partial_shape& shape = partial_shape());
output placeholder_with_default(const scope& s, output default_value, const partial_shape& shape);
output identity(const scope& s, output x);
operation no_op(const scope& s);

// Element-wise arithmetic (numpy broadcasting).
output add(const scope& s, output x, output y);  // AddV2
output sub(const scope& s, output x, output y);
output mul(const scope& s, output x, output y);
output div(const scope& s, output x, output y);  // RealDiv
output maximum(const scope& s, output x, output y);
output minimum(const scope& s, output x, output y);
output add_n(const scope& s, std::vector<output> xs);
output neg(const scope& s, output x);
output abs(const scope& s, output x);
output square(const scope& s, output x);
output sqrt(const scope& s, output x);
output rsqrt(const scope& s, output x);
output exp(const scope& s, output x);
output log(const scope& s, output x);
output tanh(const scope& s, output x);
output sigmoid(const scope& s, output x);
output relu(const scope& s, output x);
output cast(const scope& s, output x, dtype to);

// Comparisons and selection.
output equal(const scope& s, output x, output y);
output not_equal(const scope& s, output x, output y);
output less(const scope& s, output x, output y);
output greater(const scope& s, output x, output y);
output select(const scope& s, output condition, output x, output y);  // SelectV2

// Linear algebra and neural-network ops.
output matmul(const scope& s, output a, output b, bool transpose_a = false,
              bool transpose_b = false);
// BatchMatMulV2: op(x) op(y) over the innermost two dimensions, batch dimensions broadcast.
output batch_matmul(const scope& s, output x, output y, bool adj_x = false, bool adj_y = false);
output bias_add(const scope& s, output value, output bias);
output softmax(const scope& s, output logits);
output log_softmax(const scope& s, output logits);
// Outputs: loss [batch], backprop [batch, classes].
operation softmax_cross_entropy_with_logits(const scope& s, output features, output labels);
operation sparse_softmax_cross_entropy_with_logits(const scope& s, output features, output labels);

// Reductions over `axes` (an int32 or int64 tensor).
output sum(const scope& s, output x, output axes, bool keep_dims = false);
output mean(const scope& s, output x, output axes, bool keep_dims = false);
output max(const scope& s, output x, output axes, bool keep_dims = false);
output min(const scope& s, output x, output axes, bool keep_dims = false);
output prod(const scope& s, output x, output axes, bool keep_dims = false);
output argmax(const scope& s, output x, output axis, dtype output_type = dtype::int64);

// Shapes and layout.
output reshape(const scope& s, output x, output shape);
output shape(const scope& s, output x, dtype out_type = dtype::int32);
output size(const scope& s, output x, dtype out_type = dtype::int32);
output rank(const scope& s, output x);
output fill(const scope& s, output dims, output value);
output zeros_like(const scope& s, output x);
output ones_like(const scope& s, output x);
output transpose(const scope& s, output x, output perm);
output concat(const scope& s, std::vector<output> values, output axis);  // ConcatV2
output stack(const scope& s, std::vector<output> values, int axis = 0);  // Pack

// Random numbers; reproducible when seed or seed2 is non-zero.
output random_uniform(const scope& s, output shape, dtype type, int seed = 0, int seed2 = 0);
output random_normal(const scope& s, output shape, dtype type, int seed = 0, int seed2 = 0);
output truncated_normal(const scope& s, output shape, dtype type, int seed = 0, int seed2 = 0);

}  // namespace troupe::ops
