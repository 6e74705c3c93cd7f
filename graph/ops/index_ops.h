// Index arithmetic shared by shape functions and kernels, so that graph-time and run-time
// shapes agree by construction.
//
// Range's length: TensorFlow's, ceil((limit - start) / delta) elements, an error when
// delta is 0 or points away from limit.
//
// StridedSlice's index arithmetic, shared by its shape function (graph/ops/index_ops.cc)
// and its kernels (kernels/cpu/index_kernels.cc), so that graph-time and run-time shapes
// agree by construction. It follows TensorFlow's ValidateStridedSliceOp: the sparse spec
// (begin, end, strides and five bit masks) is expanded against the input's rank into a
// dense spec with one (begin, stride, size) per input dimension, then new axes are added
// and shrunk axes dropped to give the final shape.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace troupe::graph {

[[nodiscard]] result<std::int64_t> range_size(std::int64_t start, std::int64_t limit, std::int64_t delta);
[[nodiscard]] result<std::int64_t> range_size(double start, double limit, double delta);

struct strided_slice_masks {
  std::int64_t begin_mask = 0;
  std::int64_t end_mask = 0;
  std::int64_t ellipsis_mask = 0;
  std::int64_t new_axis_mask = 0;
  std::int64_t shrink_axis_mask = 0;
};

struct strided_slice_plan {
  // One entry per input dimension: the first index read, the step, and how many indices
  // are read (-1: unknown, when the input dimension is unknown).
  std::vector<std::int64_t> begin;
  std::vector<std::int64_t> stride;
  std::vector<std::int64_t> size;
  // The output's shape (-1 for an unknown dimension).
  std::vector<std::int64_t> final_shape;
};

// input_dims: the input's dimensions, -1 where unknown. begin, end and strides have one
// entry per sparse index. Errors (invalid_argument) say which index is wrong and why.
[[nodiscard]] result<strided_slice_plan> plan_strided_slice(const std::vector<std::int64_t>& input_dims,
                                                            const std::vector<std::int64_t>& begin,
                                                            const std::vector<std::int64_t>& end,
                                                            const std::vector<std::int64_t>& strides,
                                                            const strided_slice_masks& masks);

}  // namespace troupe::graph
