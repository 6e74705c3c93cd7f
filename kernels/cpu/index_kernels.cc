// CPU kernels: ops that pick, place or repeat elements by index (schemas in
// graph/ops/index_ops.cc): Pad, PadV2, Tile, StridedSlice, StridedSliceGrad, Split, SplitV,
// GatherV2, UnsortedSegmentSum, DynamicPartition, (Parallel)DynamicStitch, OneHot, TopKV2,
// Where, BroadcastTo, ListDiff, ScatterNd, GatherNd, ReverseV2, Unique, InTopKV2.
//
// Most of them move elements without looking at them, so they work on bytes and serve
// every dtype with one kernel: contiguous runs are copied with memcpy, single elements
// through an unsigned integer of the element's size. Only the ops that compare or add
// values (UnsortedSegmentSum, TopKV2, Where) are written per dtype. Index operands are
// int32 or int64 and are read with index_values; every index is checked, and an error
// names the operand, the position and the value, and what would be valid.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>
#include <vector>

#include "graph/ops/index_ops.h"
#include "kernels/kernel_registry.h"
#include "kernels/shape_checks.h"

namespace troupe::kernels {

namespace {

// Calls f.template operator()<E>() with an unsigned integer type E of `size` bytes.
template <class F>
void visit_element_size(std::size_t size, F&& f) {
  switch (size) {
    case 1: f.template operator()<std::uint8_t>(); break;
    case 2: f.template operator()<std::uint16_t>(); break;
    case 4: f.template operator()<std::uint32_t>(); break;
    case 8: f.template operator()<std::uint64_t>(); break;
    default: assert(false && "numeric dtypes have 1, 2, 4 or 8 bytes");
  }
}

// Row-major strides, in elements.
std::vector<std::int64_t> strides_of(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> strides(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

std::int64_t product(const std::vector<std::int64_t>& dims, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}

// Advances a row-major multi-index over `dims`; returns false after the last one.
bool next_index(std::vector<std::int64_t>& index, const std::vector<std::int64_t>& dims) {
  for (std::size_t i = dims.size(); i-- > 0;) {
    if (++index[i] < dims[i]) return true;
    index[i] = 0;
  }
  return false;
}

// "[1,2]": the multi-index of flat position `flat` in `shape`, for error messages.
std::string position_in(const tensor_shape& shape, std::int64_t flat) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(shape.rank()));
  for (int i = shape.rank(); i-- > 0;) {
    index[static_cast<std::size_t>(i)] = flat % std::max<std::int64_t>(shape.dim(i), 1);
    flat /= std::max<std::int64_t>(shape.dim(i), 1);
  }
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < index.size(); ++i) out << (i > 0 ? "," : "") << index[i];
  out << "]";
  return out.str();
}

// Fills `t` with copies of the element at `value` (or zeros when value is null).
void fill_bytes(tensor& t, const void* value) {
  std::size_t element = dtype_size(t.type());
  if (value == nullptr) {
    std::memset(t.raw_data(), 0, t.byte_size());
    return;
  }
  char* dst = static_cast<char*>(t.raw_data());
  for (std::int64_t i = 0; i < t.num_elements(); ++i) {
    std::memcpy(dst + static_cast<std::size_t>(i) * element, value, element);
  }
}

// ---------------------------------------------------------------------------------------
// Pad, PadV2: the output filled with the constant, then the input copied row by row.

class pad_kernel final : public op_kernel {
 public:
  explicit pad_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    const tensor& paddings = ctx.input(1);
    const int rank = input.rank();
    if (paddings.rank() != 2 || paddings.dim(0) != rank || paddings.dim(1) != 2) {
      ctx.fail_invalid_argument(op(), ": paddings must have shape [", rank, ",2] for an input of shape ",
                                input.shape(), ", but has shape ", paddings.shape());
      return;
    }
    const void* constant = nullptr;
    if (ctx.num_inputs() == 3) {
      if (ctx.input(2).num_elements() != 1 || ctx.input(2).rank() != 0) {
        ctx.fail_invalid_argument(op(), ": constant_values must be a scalar, not ", ctx.input(2).shape());
        return;
      }
      constant = ctx.input(2).raw_data();
    }
    std::vector<std::int64_t> p = index_values(paddings);
    std::vector<std::int64_t> out_dims;
    for (int i = 0; i < rank; ++i) {
      auto d = static_cast<std::size_t>(i);
      if (p[2 * d] < 0 || p[2 * d + 1] < 0) {
        ctx.fail_invalid_argument(op(), ": paddings must be non-negative, but row ", i, " is [", p[2 * d],
                                  ", ", p[2 * d + 1], "]");
        return;
      }
      out_dims.push_back(input.dim(i) + p[2 * d] + p[2 * d + 1]);
    }
    tensor& out = ctx.allocate_output(0, tensor_shape(out_dims));
    fill_bytes(out, constant);
    if (input.num_elements() == 0) return;
    const std::size_t element = dtype_size(input.type());
    if (rank == 0) {
      std::memcpy(out.raw_data(), input.raw_data(), element);
      return;
    }
    const std::vector<std::int64_t>& in_dims = input.shape().dims();
    std::vector<std::int64_t> out_strides = strides_of(out_dims);
    std::vector<std::int64_t> rows(in_dims.begin(), in_dims.end() - 1);
    std::vector<std::int64_t> index(rows.size(), 0);
    const std::size_t row_bytes = static_cast<std::size_t>(in_dims.back()) * element;
    const char* src = static_cast<const char*>(input.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    std::int64_t r = 0;
    do {
      std::int64_t offset = p[2 * rows.size()];
      for (std::size_t i = 0; i < rows.size(); ++i) offset += (index[i] + p[2 * i]) * out_strides[i];
      std::memcpy(dst + static_cast<std::size_t>(offset) * element,
                  src + static_cast<std::size_t>(r++) * row_bytes, row_bytes);
    } while (next_index(index, rows));
  }
};

// ---------------------------------------------------------------------------------------
// Tile and BroadcastTo: every output element reads the input element at an index derived
// from its own (modulo the input's size, or 0 along a broadcast dimension).

// out[o] = in[sum_i (o_i mod in_dims[i]) * in_strides[i]] with in_strides 0 to broadcast.
void gather_by_pattern(const tensor& input, tensor& out, const std::vector<std::int64_t>& in_dims,
                       const std::vector<std::int64_t>& in_strides) {
  if (out.num_elements() == 0) return;
  const std::vector<std::int64_t>& out_dims = out.shape().dims();
  visit_element_size(dtype_size(input.type()), [&]<class E>() {
    const E* src = static_cast<const E*>(input.raw_data());
    E* dst = static_cast<E*>(out.raw_data());
    std::vector<std::int64_t> index(out_dims.size(), 0), in_index(out_dims.size(), 0);
    std::int64_t offset = 0;
    for (std::int64_t o = 0; o < out.num_elements(); ++o) {
      dst[o] = src[offset];
      for (std::size_t i = out_dims.size(); i-- > 0;) {
        if (++index[i] == out_dims[i]) {  // carry into dimension i - 1
          offset -= in_index[i] * in_strides[i];
          index[i] = 0;
          in_index[i] = 0;
          continue;
        }
        if (++in_index[i] == in_dims[i]) {
          offset -= (in_dims[i] - 1) * in_strides[i];
          in_index[i] = 0;
        } else {
          offset += in_strides[i];
        }
        break;
      }
    }
  });
}

class tile_kernel final : public op_kernel {
 public:
  explicit tile_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    const tensor& multiples = ctx.input(1);
    if (multiples.rank() != 1 || multiples.dim(0) != input.rank()) {
      ctx.fail_invalid_argument("Tile: multiples must be a vector with one entry per input dimension (",
                                input.rank(), "), but has shape ", multiples.shape());
      return;
    }
    std::vector<std::int64_t> m = index_values(multiples);
    std::vector<std::int64_t> out_dims;
    for (int i = 0; i < input.rank(); ++i) {
      if (m[static_cast<std::size_t>(i)] < 0) {
        ctx.fail_invalid_argument("Tile: multiples[", i, "] = ", m[static_cast<std::size_t>(i)],
                                  " must be non-negative");
        return;
      }
      out_dims.push_back(input.dim(i) * m[static_cast<std::size_t>(i)]);
    }
    tensor& out = ctx.allocate_output(0, tensor_shape(out_dims));
    gather_by_pattern(input, out, input.shape().dims(), strides_of(input.shape().dims()));
  }
};

class broadcast_to_kernel final : public op_kernel {
 public:
  explicit broadcast_to_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    const tensor& shape = ctx.input(1);
    if (shape.rank() != 1) {
      ctx.fail_invalid_argument("BroadcastTo: shape must be a vector, not ", shape.shape());
      return;
    }
    std::vector<std::int64_t> target = index_values(shape);
    const auto rank = static_cast<int>(target.size());
    const int offset = rank - input.rank();
    std::vector<std::int64_t> in_dims(target.size(), 1), in_strides(target.size(), 0);
    std::vector<std::int64_t> strides = strides_of(input.shape().dims());
    bool ok = offset >= 0;
    for (int i = 0; i < rank && ok; ++i) {
      auto d = static_cast<std::size_t>(i);
      if (target[d] < 0) ok = false;
      if (i < offset || !ok) continue;
      std::int64_t size = input.dim(i - offset);
      if (size == target[d]) {
        in_dims[d] = size;
        in_strides[d] = strides[static_cast<std::size_t>(i - offset)];
      } else if (size != 1) {
        ok = false;
      }
    }
    if (!ok) {
      ctx.fail_invalid_argument("BroadcastTo: cannot broadcast an input of shape ", input.shape(),
                                " to shape ", shape.debug_string(), " (each input dimension must be 1 "
                                "or equal the target's, aligned from the right)");
      return;
    }
    tensor& out = ctx.allocate_output(0, tensor_shape(target));
    gather_by_pattern(input, out, in_dims, in_strides);
  }
};

// ---------------------------------------------------------------------------------------
// StridedSlice and its gradient: the plan (graph/ops/index_ops.h) gives a begin, stride
// and size per input dimension; the output walks that box in row-major order.

bool read_strided_slice_masks(kernel_construction& c, graph::strided_slice_masks* m) {
  return c.get_attr("begin_mask", &m->begin_mask) && c.get_attr("end_mask", &m->end_mask) &&
         c.get_attr("ellipsis_mask", &m->ellipsis_mask) && c.get_attr("new_axis_mask", &m->new_axis_mask) &&
         c.get_attr("shrink_axis_mask", &m->shrink_axis_mask);
}

result<graph::strided_slice_plan> plan_from_inputs(kernel_context& ctx, const std::vector<std::int64_t>& dims,
                                                   const graph::strided_slice_masks& masks) {
  for (int i = 1; i <= 3; ++i) {
    if (ctx.input(i).rank() != 1) {
      return invalid_argument_error("StridedSlice: begin, end and strides must be vectors, but input ", i,
                                    " has shape ", ctx.input(i).shape());
    }
  }
  return graph::plan_strided_slice(dims, index_values(ctx.input(1)), index_values(ctx.input(2)),
                                   index_values(ctx.input(3)), masks);
}

// Calls f(box_position, full_offset) for each element of the plan's box, in order.
template <class F>
void walk_box(const graph::strided_slice_plan& plan, const std::vector<std::int64_t>& full_dims, F&& f) {
  const std::size_t rank = plan.size.size();
  std::int64_t count = product(plan.size, 0, rank);
  if (count == 0) return;
  std::vector<std::int64_t> strides = strides_of(full_dims);
  std::vector<std::int64_t> index(rank, 0);
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < rank; ++i) offset += plan.begin[i] * strides[i];
  for (std::int64_t k = 0; k < count; ++k) {
    f(k, offset);
    for (std::size_t i = rank; i-- > 0;) {
      offset += plan.stride[i] * strides[i];
      if (++index[i] < plan.size[i]) break;
      offset -= plan.stride[i] * strides[i] * index[i];
      index[i] = 0;
    }
  }
}

class strided_slice_kernel final : public op_kernel {
 public:
  explicit strided_slice_kernel(kernel_construction& c) : op_kernel(c) { read_strided_slice_masks(c, &masks_); }

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    auto plan = plan_from_inputs(ctx, input.shape().dims(), masks_);
    if (!plan.ok()) {
      ctx.fail(plan.error().with_context("input shape " + input.shape().to_string()));
      return;
    }
    tensor& out = ctx.allocate_output(0, tensor_shape(plan->final_shape));
    visit_element_size(dtype_size(input.type()), [&]<class E>() {
      const E* src = static_cast<const E*>(input.raw_data());
      E* dst = static_cast<E*>(out.raw_data());
      walk_box(*plan, input.shape().dims(), [&](std::int64_t k, std::int64_t offset) { dst[k] = src[offset]; });
    });
  }

 private:
  graph::strided_slice_masks masks_;
};

class strided_slice_grad_kernel final : public op_kernel {
 public:
  explicit strided_slice_grad_kernel(kernel_construction& c) : op_kernel(c) { read_strided_slice_masks(c, &masks_); }

  void compute(kernel_context& ctx) override {
    const tensor& shape = ctx.input(0);
    const tensor& dy = ctx.input(4);
    if (shape.rank() != 1) {
      ctx.fail_invalid_argument("StridedSliceGrad: shape must be a vector, not ", shape.shape());
      return;
    }
    auto dims = tensor_shape::make(index_values(shape));
    if (!dims.ok()) {
      ctx.fail(dims.error());
      return;
    }
    auto plan = plan_from_inputs(ctx, dims->dims(), masks_);
    if (!plan.ok()) {
      ctx.fail(plan.error().with_context("StridedSliceGrad of shape " + dims->to_string()));
      return;
    }
    if (dy.shape() != tensor_shape(plan->final_shape)) {
      ctx.fail_invalid_argument("StridedSliceGrad: dy has shape ", dy.shape(), " but the slice of ",
                                *dims, " has shape ", tensor_shape(plan->final_shape));
      return;
    }
    tensor& out = ctx.allocate_output(0, *dims);
    fill_bytes(out, nullptr);
    visit_element_size(dtype_size(dy.type()), [&]<class E>() {
      const E* src = static_cast<const E*>(dy.raw_data());
      E* dst = static_cast<E*>(out.raw_data());
      walk_box(*plan, dims->dims(), [&](std::int64_t k, std::int64_t offset) { dst[offset] = src[k]; });
    });
  }

 private:
  graph::strided_slice_masks masks_;
};

// ---------------------------------------------------------------------------------------
// Split, SplitV: each part is `outer` chunks of (its size along the axis) * inner elements.

void split_into(kernel_context& ctx, const tensor& value, std::int64_t axis,
                const std::vector<std::int64_t>& sizes) {
  const std::vector<std::int64_t>& dims = value.shape().dims();
  const std::int64_t outer = product(dims, 0, static_cast<std::size_t>(axis));
  const std::int64_t inner = product(dims, static_cast<std::size_t>(axis) + 1, dims.size());
  const std::size_t element = dtype_size(value.type());
  const char* src = static_cast<const char*>(value.raw_data());
  const std::int64_t along = dims[static_cast<std::size_t>(axis)];
  std::int64_t start = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    tensor_shape part = value.shape();
    part.set_dim(static_cast<int>(axis), sizes[k]);
    tensor& out = ctx.allocate_output(static_cast<int>(k), part);
    const std::size_t chunk = static_cast<std::size_t>(sizes[k] * inner) * element;
    char* dst = static_cast<char*>(out.raw_data());
    for (std::int64_t o = 0; o < outer && chunk > 0; ++o) {
      std::memcpy(dst + static_cast<std::size_t>(o) * chunk,
                  src + static_cast<std::size_t>((o * along + start) * inner) * element, chunk);
    }
    start += sizes[k];
  }
}

class split_kernel final : public op_kernel {
 public:
  explicit split_kernel(kernel_construction& c) : op_kernel(c) { c.get_attr("num_split", &num_split_); }

  void compute(kernel_context& ctx) override {
    const tensor& value = ctx.input(1);
    auto checked = axis_operand("Split", ctx.input(0), value.rank());
    if (!checked.ok()) return ctx.fail(checked.error());
    const std::int64_t axis = *checked;
    std::int64_t along = value.dim(static_cast<int>(axis));
    if (along % num_split_ != 0) {
      ctx.fail_invalid_argument("Split: dimension ", axis, " of value ", value.shape(), " (", along,
                                ") cannot be split evenly into ", num_split_, " parts");
      return;
    }
    split_into(ctx, value, axis, std::vector<std::int64_t>(static_cast<std::size_t>(num_split_), along / num_split_));
  }

 private:
  std::int64_t num_split_ = 1;
};

class split_v_kernel final : public op_kernel {
 public:
  explicit split_v_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& value = ctx.input(0);
    const tensor& size_splits = ctx.input(1);
    auto checked = axis_operand("SplitV", ctx.input(2), value.rank());
    if (!checked.ok()) return ctx.fail(checked.error());
    const std::int64_t axis = *checked;
    std::vector<std::int64_t> sizes = index_values(size_splits);
    if (size_splits.rank() != 1 || static_cast<int>(sizes.size()) != ctx.num_outputs()) {
      ctx.fail_invalid_argument("SplitV: size_splits ", size_splits.debug_string(), " must be a vector of ",
                                ctx.num_outputs(), " sizes (num_split)");
      return;
    }
    const std::int64_t along = value.dim(static_cast<int>(axis));
    std::int64_t known = 0;
    int unknown_at = -1;
    bool ok = true;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] == -1 && unknown_at < 0) {
        unknown_at = static_cast<int>(i);
      } else if (sizes[i] < 0) {
        ok = false;
      } else {
        known += sizes[i];
      }
    }
    if (ok && unknown_at >= 0 && known <= along) sizes[static_cast<std::size_t>(unknown_at)] = along - known;
    if (!ok || (unknown_at < 0 && known != along) || known > along) {
      ctx.fail_invalid_argument("SplitV: size_splits ", size_splits.debug_string(), " must be non-negative "
                                "sizes (at most one -1) adding up to dimension ", axis, " of value ",
                                value.shape(), " (", along, ")");
      return;
    }
    split_into(ctx, value, axis, sizes);
  }
};

// ---------------------------------------------------------------------------------------
// GatherV2: out[o, j, i] = params[o, indices[j], i] with params seen as [outer, N, inner].

class gather_kernel final : public op_kernel {
 public:
  explicit gather_kernel(kernel_construction& c) : op_kernel(c) {
    if (status s = check_gather_attrs(c.node()); !s.ok()) c.fail(std::move(s));
  }

  void compute(kernel_context& ctx) override {
    const tensor& params = ctx.input(0);
    const tensor& indices = ctx.input(1);
    auto g = gather_geometry_of(params.shape(), indices.shape(), ctx.input(2));
    if (!g.ok()) return ctx.fail(g.error());
    const std::int64_t outer = g->outer, rows = g->rows, inner = g->inner;
    std::vector<std::int64_t> index = index_values(indices);
    for (std::size_t j = 0; j < index.size(); ++j) {
      if (index[j] < 0 || index[j] >= rows) {
        ctx.fail_invalid_argument("GatherV2: indices", position_in(indices.shape(), static_cast<std::int64_t>(j)),
                                  " = ", index[j], " is not in [0, ", rows, ") (params shape ", params.shape(),
                                  ", axis ", g->axis, ")");
        return;
      }
    }
    tensor& out = ctx.allocate_output(0, g->output);
    const std::size_t chunk = static_cast<std::size_t>(inner) * dtype_size(params.type());
    if (chunk == 0) return;
    const char* src = static_cast<const char*>(params.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    const auto n = static_cast<std::int64_t>(index.size());
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t j = 0; j < n; ++j) {
        std::memcpy(dst + static_cast<std::size_t>(o * n + j) * chunk,
                    src + static_cast<std::size_t>(o * rows + index[static_cast<std::size_t>(j)]) * chunk, chunk);
      }
    }
  }
};

// ---------------------------------------------------------------------------------------
// UnsortedSegmentSum: out[segment_ids[j], i] += data[j, i]; negative ids are dropped, as in
// TensorFlow.

template <class T>
class unsorted_segment_sum_kernel final : public op_kernel {
 public:
  explicit unsorted_segment_sum_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& data = ctx.input(0);
    const tensor& ids = ctx.input(1);
    auto g = unsorted_segment_sum_geometry(data.shape(), ids.shape(), ctx.input(2));
    if (!g.ok()) return ctx.fail(g.error());
    const std::int64_t num = g->num_segments;
    tensor& out = ctx.allocate_output(0, g->output);
    fill_bytes(out, nullptr);
    const std::int64_t inner = product(g->output.dims(), 1, g->output.dims().size());
    std::vector<std::int64_t> segment = index_values(ids);
    const T* src = data.data<T>();
    T* dst = out.data<T>();
    for (std::size_t j = 0; j < segment.size(); ++j) {
      const std::int64_t s = segment[j];
      if (s < 0) continue;
      if (s >= num) {
        ctx.fail_invalid_argument("UnsortedSegmentSum: segment_ids", position_in(ids.shape(), static_cast<std::int64_t>(j)),
                                  " = ", s, " is out of range [0, ", num, ") (num_segments)");
        return;
      }
      for (std::int64_t i = 0; i < inner; ++i) dst[s * inner + i] += src[static_cast<std::int64_t>(j) * inner + i];
    }
  }
};

// ---------------------------------------------------------------------------------------
// DynamicPartition, DynamicStitch: rows (the dimensions beyond the index operand's) moved
// whole.

class dynamic_partition_kernel final : public op_kernel {
 public:
  explicit dynamic_partition_kernel(kernel_construction& c) : op_kernel(c) { c.get_attr("num_partitions", &num_); }

  void compute(kernel_context& ctx) override {
    const tensor& data = ctx.input(0);
    const tensor& partitions = ctx.input(1);
    bool prefix = partitions.rank() <= data.rank();
    for (int i = 0; prefix && i < partitions.rank(); ++i) prefix = partitions.dim(i) == data.dim(i);
    if (!prefix) {
      ctx.fail_invalid_argument("DynamicPartition: partitions ", partitions.shape(),
                                " must be a prefix of data's shape ", data.shape());
      return;
    }
    const std::int32_t* p = partitions.data<std::int32_t>();
    const std::int64_t n = partitions.num_elements();
    std::vector<std::int64_t> counts(static_cast<std::size_t>(num_), 0);
    for (std::int64_t j = 0; j < n; ++j) {
      if (p[j] < 0 || p[j] >= num_) {
        ctx.fail_invalid_argument("DynamicPartition: partitions", position_in(partitions.shape(), j), " = ", p[j],
                                  " is not in [0, ", num_, ")");
        return;
      }
      ++counts[static_cast<std::size_t>(p[j])];
    }
    std::vector<std::int64_t> inner_dims(data.shape().dims().begin() + partitions.rank(), data.shape().dims().end());
    const std::size_t row = static_cast<std::size_t>(product(inner_dims, 0, inner_dims.size())) * dtype_size(data.type());
    std::vector<char*> dst;
    for (std::int64_t k = 0; k < num_; ++k) {
      std::vector<std::int64_t> dims{counts[static_cast<std::size_t>(k)]};
      dims.insert(dims.end(), inner_dims.begin(), inner_dims.end());
      dst.push_back(static_cast<char*>(ctx.allocate_output(static_cast<int>(k), tensor_shape(dims)).raw_data()));
    }
    const char* src = static_cast<const char*>(data.raw_data());
    for (std::int64_t j = 0; j < n && row > 0; ++j) {
      char*& d = dst[static_cast<std::size_t>(p[j])];
      std::memcpy(d, src + static_cast<std::size_t>(j) * row, row);
      d += row;
    }
  }

 private:
  std::int64_t num_ = 1;
};

class dynamic_stitch_kernel final : public op_kernel {
 public:
  explicit dynamic_stitch_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const int n = ctx.num_inputs() / 2;
    const tensor& first_indices = ctx.input(0);
    const tensor& first_data = ctx.input(n);
    if (first_indices.rank() > first_data.rank()) {
      ctx.fail_invalid_argument("DynamicStitch: indices[0] ", first_indices.shape(),
                                " must be a prefix of data[0]'s shape ", first_data.shape());
      return;
    }
    std::vector<std::int64_t> inner_dims(first_data.shape().dims().begin() + first_indices.rank(),
                                         first_data.shape().dims().end());
    std::int64_t max_index = -1;
    for (int i = 0; i < n; ++i) {
      const tensor& indices = ctx.input(i);
      std::vector<std::int64_t> expected = indices.shape().dims();
      expected.insert(expected.end(), inner_dims.begin(), inner_dims.end());
      if (ctx.input(n + i).shape() != tensor_shape(expected)) {
        ctx.fail_invalid_argument("DynamicStitch: data[", i, "] has shape ", ctx.input(n + i).shape(),
                                  " but indices[", i, "] ", indices.shape(), " and the rows of data[0] ",
                                  first_data.shape(), " ask for ", tensor_shape(expected));
        return;
      }
      const std::int32_t* idx = indices.data<std::int32_t>();
      for (std::int64_t j = 0; j < indices.num_elements(); ++j) {
        if (idx[j] < 0) {
          ctx.fail_invalid_argument("DynamicStitch: indices[", i, "]", position_in(indices.shape(), j), " = ", idx[j],
                                    " must be non-negative");
          return;
        }
        max_index = std::max<std::int64_t>(max_index, idx[j]);
      }
    }
    std::vector<std::int64_t> out_dims{max_index + 1};
    out_dims.insert(out_dims.end(), inner_dims.begin(), inner_dims.end());
    tensor& out = ctx.allocate_output(0, tensor_shape(out_dims));
    fill_bytes(out, nullptr);
    const std::size_t row = static_cast<std::size_t>(product(inner_dims, 0, inner_dims.size())) * dtype_size(out.type());
    if (row == 0) return;
    char* dst = static_cast<char*>(out.raw_data());
    for (int i = 0; i < n; ++i) {
      const std::int32_t* idx = ctx.input(i).data<std::int32_t>();
      const char* src = static_cast<const char*>(ctx.input(n + i).raw_data());
      for (std::int64_t j = 0; j < ctx.input(i).num_elements(); ++j) {
        std::memcpy(dst + static_cast<std::size_t>(idx[j]) * row, src + static_cast<std::size_t>(j) * row, row);
      }
    }
  }
};

// ---------------------------------------------------------------------------------------
// OneHot: on_value where the index equals the position along the new axis, off_value
// elsewhere (an index outside [0, depth) gives a row of off_value, as in TensorFlow).

class one_hot_kernel final : public op_kernel {
 public:
  explicit one_hot_kernel(kernel_construction& c) : op_kernel(c) { c.get_attr("axis", &axis_); }

  void compute(kernel_context& ctx) override {
    const tensor& indices = ctx.input(0);
    const tensor& depth_value = ctx.input(1);
    const tensor& on = ctx.input(2);
    const tensor& off = ctx.input(3);
    auto g = one_hot_geometry_of(indices.shape(), depth_value, on, off, axis_);
    if (!g.ok()) return ctx.fail(g.error());
    const std::int64_t depth = g->depth, prefix = g->prefix, suffix = g->suffix;
    tensor& out = ctx.allocate_output(0, g->output);
    std::vector<std::int64_t> index(static_cast<std::size_t>(indices.num_elements()));
    visit_dtype<type_list<std::uint8_t, std::int8_t, std::int32_t, std::int64_t>>(indices.type(), [&]<class I>() {
      const I* in = indices.data<I>();
      for (std::size_t j = 0; j < index.size(); ++j) index[j] = static_cast<std::int64_t>(in[j]);
    });
    visit_element_size(dtype_size(out.type()), [&]<class E>() {
      E on_bits, off_bits;
      std::memcpy(&on_bits, on.raw_data(), sizeof(E));
      std::memcpy(&off_bits, off.raw_data(), sizeof(E));
      E* dst = static_cast<E*>(out.raw_data());
      for (std::int64_t p = 0; p < prefix; ++p) {
        for (std::int64_t d = 0; d < depth; ++d) {
          for (std::int64_t s = 0; s < suffix; ++s) {
            *dst++ = index[static_cast<std::size_t>(p * suffix + s)] == d ? on_bits : off_bits;
          }
        }
      }
    });
  }

 private:
  std::int64_t axis_ = -1;
};

// ---------------------------------------------------------------------------------------
// TopKV2: the k largest entries of each last-dimension row, largest first; equal values
// keep their order (the lower index first), as in TensorFlow.

template <class T>
class top_k_kernel final : public op_kernel {
 public:
  explicit top_k_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    const tensor& k_value = ctx.input(1);
    if (k_value.rank() != 0 || input.rank() < 1) {
      ctx.fail_invalid_argument("TopKV2: k must be a scalar (has shape ", k_value.shape(),
                                ") and input have rank >= 1 (has shape ", input.shape(), ")");
      return;
    }
    const std::int64_t k = index_values(k_value)[0];
    const std::int64_t n = input.dim(input.rank() - 1);
    if (k < 0 || k > n) {
      ctx.fail_invalid_argument("TopKV2: k = ", k, " must be in [0, ", n, "], the size of the last dimension of ",
                                input.shape());
      return;
    }
    tensor_shape out_shape = input.shape();
    out_shape.set_dim(input.rank() - 1, k);
    tensor& values = ctx.allocate_output(0, out_shape);
    tensor& indices = ctx.allocate_output(1, out_shape);
    const std::int64_t rows = n == 0 ? 0 : input.num_elements() / n;
    const T* in = input.data<T>();
    T* v = values.data<T>();
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = in + r * n;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int64_t a, std::int64_t b) {
        return row[a] > row[b] || (!(row[b] > row[a]) && a < b);
      });
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int64_t at = order[static_cast<std::size_t>(j)];
        v[r * k + j] = row[at];
        if (indices.type() == dtype::int64) {
          indices.data<std::int64_t>()[r * k + j] = at;
        } else {
          indices.data<std::int32_t>()[r * k + j] = static_cast<std::int32_t>(at);
        }
      }
    }
  }
};

// ---------------------------------------------------------------------------------------
// Where: the coordinates of the non-zero (true) elements, in row-major order.

template <class T>
class where_kernel final : public op_kernel {
 public:
  explicit where_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    const T* in = input.data<T>();
    std::int64_t count = 0;
    for (std::int64_t i = 0; i < input.num_elements(); ++i) count += in[i] != T(0) ? 1 : 0;
    const int rank = input.rank();
    tensor& out = ctx.allocate_output(0, tensor_shape{count, rank});
    if (count == 0) return;
    std::int64_t* dst = out.data<std::int64_t>();
    std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
    for (std::int64_t i = 0; i < input.num_elements(); ++i) {
      if (in[i] != T(0)) dst = std::copy(index.begin(), index.end(), dst);
      next_index(index, input.shape().dims());
    }
  }
};

// ---------------------------------------------------------------------------------------
// ListDiff: the elements of x that are not in y, in x's order, and their positions in x.

template <class T>
class list_diff_kernel final : public op_kernel {
 public:
  explicit list_diff_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    const tensor& y = ctx.input(1);
    for (int i = 0; i < 2; ++i) {
      if (ctx.input(i).rank() != 1) {
        ctx.fail_invalid_argument(i == 0 ? "x" : "y", " must be a vector, but has shape ",
                                  ctx.input(i).shape().to_string());
        return;
      }
    }
    std::vector<T> drop(y.flat<T>().begin(), y.flat<T>().end());
    std::sort(drop.begin(), drop.end());
    std::vector<std::int64_t> kept;
    for (std::int64_t i = 0; i < x.num_elements(); ++i) {
      if (!std::binary_search(drop.begin(), drop.end(), x.flat<T>()[static_cast<std::size_t>(i)])) kept.push_back(i);
    }
    const auto n = static_cast<std::int64_t>(kept.size());
    tensor& out = ctx.allocate_output(0, tensor_shape{n});
    tensor& idx = ctx.allocate_output(1, tensor_shape{n});
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t i = kept[static_cast<std::size_t>(k)];
      out.data<T>()[k] = x.flat<T>()[static_cast<std::size_t>(i)];
      if (idx.type() == dtype::int32) idx.data<std::int32_t>()[k] = static_cast<std::int32_t>(i);
      else idx.data<std::int64_t>()[k] = i;
    }
  }
};

// ---------------------------------------------------------------------------------------
// ScatterNd and GatherNd: indices [..., K] whose last dimension indexes the first K
// dimensions of a tensor of shape `dims`; each index tuple names a slice of
// prod(dims[K:]) elements.

struct nd_slices {
  std::vector<std::int64_t> offsets;  // each tuple's slice, in slices from the start
  std::int64_t slice = 1;             // elements per slice
};

// What the index tuples point at, every index checked against `dims` (`what` names them).
result<nd_slices> nd_slices_of(const tensor& indices, const std::vector<std::int64_t>& dims, const char* what) {
  if (indices.rank() < 1) {
    return invalid_argument_error("indices must have rank >= 1, but have shape ", indices.shape().to_string());
  }
  const std::int64_t k = indices.dim(indices.rank() - 1);
  if (k > static_cast<std::int64_t>(dims.size())) {
    return invalid_argument_error("indices of shape ", indices.shape().to_string(), " index ", k, " dimensions of ",
                                  what, ", which has ", dims.size());
  }
  nd_slices out;
  for (std::size_t d = static_cast<std::size_t>(k); d < dims.size(); ++d) out.slice *= dims[d];
  const std::vector<std::int64_t> index = index_values(indices);
  std::int64_t tuples = 1;
  for (int d = 0; d + 1 < indices.rank(); ++d) tuples *= indices.dim(d);
  out.offsets.resize(static_cast<std::size_t>(tuples));
  for (std::int64_t j = 0; j < tuples; ++j) {
    std::int64_t offset = 0;
    for (std::int64_t d = 0; d < k; ++d) {
      const std::int64_t i = index[static_cast<std::size_t>(j * k + d)];
      const std::int64_t size = dims[static_cast<std::size_t>(d)];
      if (i < 0 || i >= size) {
        return invalid_argument_error("indices", position_in(indices.shape(), j * k + d), " = ", i, " is not in [0, ",
                                      size, ") (dimension ", d, " of ", what, ")");
      }
      offset = offset * size + i;
    }
    out.offsets[static_cast<std::size_t>(j)] = offset;
  }
  return out;
}

// ScatterNd: zeros of `shape`, plus each update added at its index tuple (duplicates add up).
template <class T>
class scatter_nd_kernel final : public op_kernel {
 public:
  explicit scatter_nd_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& indices = ctx.input(0);
    const tensor& updates = ctx.input(1);
    const tensor& shape_input = ctx.input(2);
    if (shape_input.rank() != 1) {
      ctx.fail_invalid_argument("shape must be a vector, but has shape ", shape_input.shape().to_string());
      return;
    }
    std::vector<std::int64_t> dims = index_values(shape_input);
    auto out_shape = tensor_shape::make(dims);
    if (!out_shape.ok()) return ctx.fail(out_shape.error());
    auto slices = nd_slices_of(indices, dims, "shape");
    if (!slices.ok()) return ctx.fail(slices.error());
    // updates must be indices.shape[:-1] + shape[K:].
    const auto k = static_cast<std::size_t>(indices.dim(indices.rank() - 1));
    std::vector<std::int64_t> want(indices.shape().dims().begin(), indices.shape().dims().end() - 1);
    want.insert(want.end(), dims.begin() + static_cast<std::ptrdiff_t>(k), dims.end());
    if (updates.shape().dims() != want) {
      ctx.fail_invalid_argument("updates of shape ", updates.shape().to_string(), " do not fit indices of shape ",
                                indices.shape().to_string(), " into shape ", out_shape->to_string(),
                                " (they must have shape indices.shape[:-1] + shape[K:], K = ", k, ")");
      return;
    }
    tensor& out = ctx.allocate_output(0, *out_shape);
    T* dst = out.data<T>();
    std::fill(dst, dst + out.num_elements(), T(0));
    const T* src = updates.data<T>();
    const std::int64_t slice = slices->slice;
    for (std::size_t j = 0; j < slices->offsets.size(); ++j) {
      const std::int64_t at = slices->offsets[j] * slice;
      for (std::int64_t e = 0; e < slice; ++e) dst[at + e] += src[static_cast<std::int64_t>(j) * slice + e];
    }
  }
};

// GatherNd: the slices the index tuples name, in order (an index out of range is an
// error, as on TensorFlow's CPU).
class gather_nd_kernel final : public op_kernel {
 public:
  explicit gather_nd_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& params = ctx.input(0);
    const tensor& indices = ctx.input(1);
    const std::vector<std::int64_t> dims(params.shape().dims().begin(), params.shape().dims().end());
    auto slices = nd_slices_of(indices, dims, "params");
    if (!slices.ok()) return ctx.fail(slices.error());
    const auto k = static_cast<std::ptrdiff_t>(indices.dim(indices.rank() - 1));
    std::vector<std::int64_t> out_dims(indices.shape().dims().begin(), indices.shape().dims().end() - 1);
    out_dims.insert(out_dims.end(), dims.begin() + k, dims.end());
    tensor& out = ctx.allocate_output(0, tensor_shape(out_dims));
    const std::size_t bytes = static_cast<std::size_t>(slices->slice) * dtype_size(params.type());
    if (bytes == 0) return;
    const char* src = static_cast<const char*>(params.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    for (std::size_t j = 0; j < slices->offsets.size(); ++j) {
      std::memcpy(dst + j * bytes, src + static_cast<std::size_t>(slices->offsets[j]) * bytes, bytes);
    }
  }
};

// ---------------------------------------------------------------------------------------
// ReverseV2: the tensor with the order of the listed axes reversed.

class reverse_kernel final : public op_kernel {
 public:
  explicit reverse_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    const tensor& axes = ctx.input(1);
    if (axes.rank() != 1) {
      ctx.fail_invalid_argument("axis must be a vector, but has shape ", axes.shape().to_string());
      return;
    }
    std::vector<bool> reversed(static_cast<std::size_t>(x.rank()), false);
    for (std::int64_t a : index_values(axes)) {
      if (a < -x.rank() || a >= x.rank()) {
        ctx.fail_invalid_argument("axis ", a, " is out of range for a tensor of shape ", x.shape().to_string(),
                                  " (valid: [", -x.rank(), ", ", x.rank(), "))");
        return;
      }
      const auto d = static_cast<std::size_t>(a < 0 ? a + x.rank() : a);
      if (reversed[d]) {
        ctx.fail_invalid_argument("axis ", a, " is given twice in ", axes.debug_string());
        return;
      }
      reversed[d] = true;
    }
    tensor& out = ctx.allocate_output(0, x.shape());
    const std::size_t element = dtype_size(x.type());
    const auto* src = static_cast<const char*>(x.raw_data());
    auto* dst = static_cast<char*>(out.raw_data());
    std::vector<std::int64_t> index(static_cast<std::size_t>(x.rank()), 0);
    const std::vector<std::int64_t> dims(x.shape().dims().begin(), x.shape().dims().end());
    for (std::int64_t i = 0; i < x.num_elements(); ++i) {
      std::int64_t from = 0;
      for (std::size_t d = 0; d < dims.size(); ++d) {
        from = from * dims[d] + (reversed[d] ? dims[d] - 1 - index[d] : index[d]);
      }
      std::memcpy(dst + static_cast<std::size_t>(i) * element, src + static_cast<std::size_t>(from) * element, element);
      next_index(index, dims);
    }
  }
};

// ---------------------------------------------------------------------------------------
// InTopKV2: whether each row's target class is among its k largest predictions, as
// TensorFlow counts it: fewer than k classes predicted strictly higher; false for a
// target out of range or a prediction that is not finite.

class in_top_k_kernel final : public op_kernel {
 public:
  explicit in_top_k_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& predictions = ctx.input(0);
    const tensor& targets = ctx.input(1);
    const tensor& k_input = ctx.input(2);
    if (predictions.rank() != 2 || targets.rank() != 1 || targets.dim(0) != predictions.dim(0) ||
        k_input.rank() != 0) {
      ctx.fail_invalid_argument("predictions must be [batch, classes], targets [batch] and k a scalar; have ",
                                predictions.shape().to_string(), ", ", targets.shape().to_string(), " and ",
                                k_input.shape().to_string());
      return;
    }
    const std::int64_t batch = predictions.dim(0), classes = predictions.dim(1);
    const std::int64_t k = index_values(k_input)[0];
    const std::vector<std::int64_t> target = index_values(targets);
    tensor& out = ctx.allocate_output(0, tensor_shape{batch});
    const float* p = predictions.data<float>();
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t t = target[static_cast<std::size_t>(b)];
      bool in = t >= 0 && t < classes && std::isfinite(p[b * classes + t]);
      if (in) {
        const float mine = p[b * classes + t];
        std::int64_t higher = 0;
        for (std::int64_t c = 0; c < classes; ++c) {
          const float v = p[b * classes + c];
          if (!std::isfinite(v)) {
            in = false;
            break;
          }
          if (v > mine) ++higher;
        }
        in = in && higher < k;
      }
      out.data<bool>()[b] = in;
    }
  }
};

// ---------------------------------------------------------------------------------------
// Unique: the distinct values of a vector in the order they first appear, and where each
// element of x went.

template <class T>
class unique_kernel final : public op_kernel {
 public:
  explicit unique_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    if (x.rank() != 1) {
      ctx.fail_invalid_argument("x must be a vector, but has shape ", x.shape().to_string());
      return;
    }
    std::map<T, std::int64_t> seen;
    std::vector<T> values;
    tensor& idx = ctx.allocate_output(1, x.shape());
    for (std::int64_t i = 0; i < x.num_elements(); ++i) {
      const T v = x.flat<T>()[static_cast<std::size_t>(i)];
      auto [it, inserted] = seen.emplace(v, static_cast<std::int64_t>(values.size()));
      if (inserted) values.push_back(v);
      if (idx.type() == dtype::int32) idx.data<std::int32_t>()[i] = static_cast<std::int32_t>(it->second);
      else idx.data<std::int64_t>()[i] = it->second;
    }
    tensor& y = ctx.allocate_output(0, tensor_shape{static_cast<std::int64_t>(values.size())});
    std::copy(values.begin(), values.end(), y.data<T>());
  }
};

}  // namespace

void register_index_kernels(kernel_registry& registry) {
  // Byte moves: one kernel for every dtype and index type.
  registry.add("Pad", "CPU", {}, make_kernel<pad_kernel>);
  registry.add("PadV2", "CPU", {}, make_kernel<pad_kernel>);
  registry.add("Tile", "CPU", {}, make_kernel<tile_kernel>);
  registry.add("BroadcastTo", "CPU", {}, make_kernel<broadcast_to_kernel>);
  registry.add("StridedSlice", "CPU", {}, make_kernel<strided_slice_kernel>);
  registry.add("StridedSliceGrad", "CPU", {}, make_kernel<strided_slice_grad_kernel>);
  registry.add("Split", "CPU", {}, make_kernel<split_kernel>);
  registry.add("SplitV", "CPU", {}, make_kernel<split_v_kernel>);
  registry.add("GatherV2", "CPU", {}, make_kernel<gather_kernel>);
  registry.add("DynamicPartition", "CPU", {}, make_kernel<dynamic_partition_kernel>);
  registry.add("DynamicStitch", "CPU", {}, make_kernel<dynamic_stitch_kernel>);
  registry.add("ParallelDynamicStitch", "CPU", {}, make_kernel<dynamic_stitch_kernel>);
  registry.add("OneHot", "CPU", {}, make_kernel<one_hot_kernel>);
  // Arithmetic and comparisons: one kernel per dtype.
  add_typed_kernels<unsorted_segment_sum_kernel, real_number_types>(registry, "UnsortedSegmentSum");
  add_typed_kernels<top_k_kernel, real_number_types>(registry, "TopKV2");
  add_typed_kernels<where_kernel, all_numeric_types>(registry, "Where");
  add_typed_kernels<list_diff_kernel, real_number_types>(registry, "ListDiff");
  add_typed_kernels<scatter_nd_kernel, real_number_types>(registry, "ScatterNd");
  registry.add("GatherNd", "CPU", {}, make_kernel<gather_nd_kernel>);
  registry.add("ReverseV2", "CPU", {}, make_kernel<reverse_kernel>);
  registry.add("InTopKV2", "CPU", {}, make_kernel<in_top_k_kernel>);
  add_typed_kernels<unique_kernel, real_number_types>(registry, "Unique");
}

}  // namespace troupe::kernels
