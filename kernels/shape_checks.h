// The checks and output geometry of ops that have both a CPU and a GPU kernel: each op's
// operands are validated here once, so that both kernels accept the same inputs, compute
// the same shapes and fail with the same messages. Only what needs the values themselves
// (indices in range, labels in range) stays with a kernel: the GPU's do not read them.
//
// Plain host C++ (no CUDA): kernels/cpu/*.cc and kernels/cuda/*.cc both include it.
// Attributes are read from the node (graph::get_attr's errors), operands are tensors in
// host memory where a value is read (axes, depth, num_segments).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/attr.h"

namespace troupe::kernels {

// An axis operand (a scalar) in [-rank, rank), made non-negative; errors name `op`.
result<std::int64_t> axis_operand(std::string_view op, const tensor& axis_value, int rank);

// ---- Sum, Mean, Max, Min, Prod ----

// A run of neighbouring input dimensions that are all reduced or all kept.
struct dim_group {
  std::int64_t size;
  bool reduced;
};

struct reduction_geometry {
  tensor_shape output;             // with keep_dims, a reduced dimension stays as 1
  std::int64_t count = 1;          // input elements combined into each output
  std::vector<dim_group> groups;   // size-1 dimensions dropped, neighbours merged
  std::int64_t reduced_groups = 0;
};

// The reduction of `input` over the axes held by `axes` (a scalar or a vector; negative
// axes count from the end, a repeat is an error).
result<reduction_geometry> reduction_geometry_of(const tensor_shape& input, const tensor& axes, bool keep_dims);

// ---- ArgMax, ArgMin ----

// `input` seen as [outer, reduce, inner] around dimension `axis`.
struct arg_reduction_geometry {
  int axis = 0;
  std::int64_t outer = 1, reduce = 1, inner = 1;
  tensor_shape output;
};

// The geometry for the `dimension` operand (a scalar); an empty dimension is an error.
result<arg_reduction_geometry> arg_reduction_geometry_of(std::string_view op, const tensor_shape& input,
                                                         const tensor& dimension);

// ---- SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits ----

struct xent_geometry {
  std::int64_t batch = 0, classes = 0;
};

// features and labels (each of rank <= 2) broadcast to one [batch, classes] matrix.
result<xent_geometry> softmax_xent_geometry(const tensor_shape& features, const tensor_shape& labels);
// features [batch, classes] and labels [batch].
result<xent_geometry> sparse_softmax_xent_geometry(const tensor_shape& features, const tensor_shape& labels);

// ---- BiasAdd, BiasAddGrad ----

// A BiasAdd value as [batch, channels, spatial]: NHWC puts channels last (spatial = 1),
// NCHW puts them in dimension 1.
struct bias_layout {
  std::int64_t batch = 1;
  std::int64_t channels = 1;
  std::int64_t spatial = 1;
};

// *nchw: whether the node's data_format is NCHW (else NHWC; anything else is an error).
status read_bias_format(const tf::NodeDef& node, bool* nchw);
// BiasAdd's value (rank >= 2) and bias (a vector of its channels).
result<bias_layout> bias_add_layout(const tensor_shape& value, const tensor_shape& bias, bool nchw);
// BiasAddGrad's out_backprop (rank >= 2).
result<bias_layout> bias_add_grad_layout(const tensor_shape& out_backprop, bool nchw);

// ---- FusedBatchNormV3, FusedBatchNormGradV3 ----

// The attributes both batch norm ops share.
struct batch_norm_options {
  float epsilon = 1e-4f;
  bool is_training = true;
  std::string format = "NHWC";  // NHWC, NCHW (rank 4), NDHWC, NCDHW (rank 5)
  int rank = 4;
  bool channels_first = false;
};

status read_batch_norm_options(const tf::NodeDef& node, batch_norm_options* o);

// x as [outer, channels, inner]: channels last (inner = 1) or in dimension 1.
struct channel_layout {
  std::int64_t outer = 1;
  std::int64_t channels = 1;
  std::int64_t inner = 1;
  std::int64_t per_channel() const { return outer * inner; }
  // Calls f(index, channel) for every element, in memory order.
  template <class F>
  void for_each(F&& f) const {
    std::int64_t i = 0;
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t c = 0; c < channels; ++c) {
        for (std::int64_t k = 0; k < inner; ++k) f(i++, c);
      }
    }
  }
};

// FusedBatchNormV3's x, with scale and offset (and, when `reads_statistics`, mean and
// variance) vectors of its channels.
result<channel_layout> batch_norm_layout(std::string_view op, const batch_norm_options& o, const tensor& x,
                                         const tensor& scale, const tensor& offset, const tensor& mean,
                                         const tensor& variance, bool reads_statistics);
// FusedBatchNormGradV3's y_backprop (x's shape), x, scale, reserve_space_1 and 2.
result<channel_layout> batch_norm_grad_layout(std::string_view op, const batch_norm_options& o, const tensor& dy,
                                              const tensor& x, const tensor& scale, const tensor& reserve_1,
                                              const tensor& reserve_2);

// ---- GatherV2, UnsortedSegmentSum, OneHot ----

// params as [outer, rows, inner] around the axis; output: params' shape with the axis
// replaced by indices' shape.
struct gather_geometry {
  std::int64_t axis = 0;
  std::int64_t outer = 1, rows = 0, inner = 1;
  tensor_shape output;
};

// batch_dims must be 0.
status check_gather_attrs(const tf::NodeDef& node);
result<gather_geometry> gather_geometry_of(const tensor_shape& params, const tensor_shape& indices,
                                           const tensor& axis_value);

// output: [num_segments] followed by data's dimensions beyond segment_ids' rank.
struct segment_sum_geometry {
  std::int64_t num_segments = 0;
  tensor_shape output;
};

result<segment_sum_geometry> unsorted_segment_sum_geometry(const tensor_shape& data, const tensor_shape& ids,
                                                           const tensor& num_value);

// output: indices' shape with depth inserted at the axis; [prefix, depth, suffix].
struct one_hot_geometry {
  std::int64_t depth = 0, prefix = 1, suffix = 1;
  tensor_shape output;
};

// REQUIRES: depth_value is int32.
result<one_hot_geometry> one_hot_geometry_of(const tensor_shape& indices, const tensor& depth_value,
                                             const tensor& on, const tensor& off, std::int64_t axis);

// ---- MatMul, BatchMatMulV2, BatchMatMul ----

// MatMul: op(a) [m, k] times op(b) [k, n]. Errors: an operand that is not a matrix,
// inner dimensions that differ.
struct matmul_geometry {
  std::int64_t m = 0, n = 0, k = 0;
};
result<matmul_geometry> matmul_geometry_of(const tensor_shape& a, const tensor_shape& b, bool transpose_a,
                                           bool transpose_b);

// BatchMatMulV2's geometry: the product of the innermost two dimensions of x and y (each
// adjointed on request: transposed, as these dtypes are real), over batch dimensions that
// broadcast as numpy does; BatchMatMul (version 1) does not broadcast.
//
//   for (std::int64_t b = 0; b < g->batches; ++b)
//     C[b] (m x n) = op(X[x_batch[b]]) (m x k) * op(Y[y_batch[b]]) (k x n)
struct batch_matmul_shape {
  tensor_shape output;  // batch dimensions, m, n
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batches = 0;
  // For each output matrix b (row-major over the output's batch dimensions), which
  // matrix of x and of y it multiplies.
  std::vector<std::int64_t> x_batch, y_batch;
};

// Errors (invalid_argument): a rank below 2, inner dimensions that differ, batch
// dimensions that do not broadcast (or, without broadcasting, differ).
result<batch_matmul_shape> batch_matmul_geometry(const tensor_shape& x, const tensor_shape& y, bool adj_x, bool adj_y,
                                                 bool broadcast);

}  // namespace troupe::kernels
