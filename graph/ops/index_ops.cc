// Op schemas: ops that pick, place or repeat elements by index (Pad, PadV2, Tile,
// StridedSlice, StridedSliceGrad, Split, SplitV, GatherV2, UnsortedSegmentSum,
// DynamicPartition, DynamicStitch, OneHot, TopKV2, Where, BroadcastTo), with TensorFlow's
// raw-op names, inputs and attributes.
//
// Shape functions give fully known shapes when the index operands are graph-time
// constants and the data shapes are known, and otherwise the rank when it follows.
//
// Gradients follow TensorFlow's array_grad.py, except where TensorFlow returns
// IndexedSlices (GatherV2): troupe has none, so the gradient is the dense
// UnsortedSegmentSum of the incoming gradient into the params' shape. Index outputs
// (TopKV2's indices, Where, OneHot) carry no gradient.
#include "graph/ops/index_ops.h"

#include <cmath>

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops.h"

namespace troupe::graph {

namespace {
template <class T>
status check_range(T start, T limit, T delta) {
  if (delta == 0) return invalid_argument_error("Range: delta must not be 0");
  if (delta > 0 && start > limit) {
    return invalid_argument_error("Range: start ", start, " is above limit ", limit, " with delta ", delta, " > 0");
  }
  if (delta < 0 && start < limit) {
    return invalid_argument_error("Range: start ", start, " is below limit ", limit, " with delta ", delta, " < 0");
  }
  return status();
}
}  // namespace

result<std::int64_t> range_size(std::int64_t start, std::int64_t limit, std::int64_t delta) {
  TROUPE_RETURN_IF_ERROR(check_range(start, limit, delta));
  auto span = static_cast<std::uint64_t>(limit > start ? limit - start : start - limit);
  auto step = static_cast<std::uint64_t>(delta > 0 ? delta : -delta);
  return static_cast<std::int64_t>((span + step - 1) / step);
}

result<std::int64_t> range_size(double start, double limit, double delta) {
  TROUPE_RETURN_IF_ERROR(check_range(start, limit, delta));
  double size = std::ceil(std::abs((limit - start) / delta));
  if (!(size < 9.2e18)) return invalid_argument_error("Range: ", size, " elements are too many");
  return static_cast<std::int64_t>(size);
}


result<strided_slice_plan> plan_strided_slice(const std::vector<std::int64_t>& input_dims,
                                              const std::vector<std::int64_t>& begin,
                                              const std::vector<std::int64_t>& end,
                                              const std::vector<std::int64_t>& strides,
                                              const strided_slice_masks& masks) {
  const int sparse_dims = static_cast<int>(begin.size());
  if (end.size() != begin.size() || strides.size() != begin.size()) {
    return invalid_argument_error("StridedSlice: begin, end and strides must have the same length, "
                                  "but have ", begin.size(), ", ", end.size(), " and ",
                                  strides.size(), " entries");
  }
  if (sparse_dims > 32) {
    return invalid_argument_error("StridedSlice: at most 32 indices are supported, not ", sparse_dims);
  }
  auto bit = [](std::int64_t mask, int i) { return ((mask >> i) & 1) != 0; };
  const std::int64_t ellipsis = masks.ellipsis_mask & ((std::int64_t{1} << sparse_dims) - 1);
  if ((ellipsis & (ellipsis - 1)) != 0) {
    return invalid_argument_error("StridedSlice: ellipsis_mask ", masks.ellipsis_mask,
                                  " has more than one bit set; at most one ellipsis is allowed");
  }
  // Without an ellipsis, the unmentioned trailing dimensions are taken whole.
  int ellipsis_at = sparse_dims;
  for (int i = 0; i < sparse_dims; ++i) {
    if (bit(ellipsis, i)) ellipsis_at = i;
  }
  int new_axes_after_ellipsis = 0;
  for (int i = ellipsis_at + 1; i < sparse_dims; ++i) {
    if (bit(masks.new_axis_mask, i)) ++new_axes_after_ellipsis;
  }

  const int dims = static_cast<int>(input_dims.size());
  constexpr int k_new_axis = -1, k_shrink_axis = -2;
  struct dense_index {
    std::int64_t begin = 0, end = 0, stride = 1;
    bool begin_masked = true, end_masked = true, shrink = false;
  };
  std::vector<dense_index> dense(static_cast<std::size_t>(dims));
  std::vector<int> gather;  // per output dimension: a dense index, k_new_axis or k_shrink_axis
  int full = 0;
  for (int i = 0; i <= sparse_dims; ++i) {
    if (i == ellipsis_at) {
      int next = std::min(dims - (sparse_dims - i) + 1 + new_axes_after_ellipsis, dims);
      if (ellipsis_at == sparse_dims) next = dims;
      for (; full < next; ++full) gather.push_back(full);
      continue;
    }
    if (i == sparse_dims) break;
    if (bit(masks.new_axis_mask, i)) {
      gather.push_back(k_new_axis);
      continue;
    }
    if (full >= dims) {
      return invalid_argument_error("StridedSlice: index ", i, " is out of range for an input of rank ",
                                    dims, " (the spec names more dimensions than the input has)");
    }
    auto& d = dense[static_cast<std::size_t>(full)];
    d.begin = begin[static_cast<std::size_t>(i)];
    d.end = end[static_cast<std::size_t>(i)];
    d.stride = strides[static_cast<std::size_t>(i)];
    d.begin_masked = bit(masks.begin_mask, i);
    d.end_masked = bit(masks.end_mask, i);
    d.shrink = bit(masks.shrink_axis_mask, i);
    gather.push_back(d.shrink ? k_shrink_axis : full);
    ++full;
  }

  strided_slice_plan plan;
  for (int i = 0; i < dims; ++i) {
    const auto& d = dense[static_cast<std::size_t>(i)];
    const std::int64_t dim = input_dims[static_cast<std::size_t>(i)];
    const std::int64_t stride = d.stride;
    if (stride == 0) return invalid_argument_error("StridedSlice: strides[", i, "] must be non-zero");
    if (d.shrink && stride <= 0) {
      return invalid_argument_error("StridedSlice: dimension ", i, " is indexed (shrink_axis_mask) "
                                    "with stride ", stride, "; only a positive stride is allowed there");
    }
    std::int64_t b = 0, size = -1;
    if (d.shrink) {
      size = 1;
      if (dim >= 0) {
        b = d.begin < 0 ? d.begin + dim : d.begin;
        if (b < 0 || b >= dim) {
          return invalid_argument_error("StridedSlice: index ", d.begin, " of dimension ", i,
                                        " is out of bounds for size ", dim, " (valid: [", -dim, ", ",
                                        dim, "))");
        }
      }
    } else if (dim >= 0) {
      // Valid positions: [0, dim] going forward, [-1, dim - 1] going backward.
      const std::int64_t lo = stride > 0 ? 0 : -1, hi = stride > 0 ? dim : dim - 1;
      auto canonical = [&](std::int64_t x, bool masked, bool is_end) {
        if (masked) return (stride > 0) != is_end ? lo : hi;
        std::int64_t forward = x < 0 ? dim + x : x;
        return std::clamp(forward, lo, hi);
      };
      b = canonical(d.begin, d.begin_masked, false);
      std::int64_t e = canonical(d.end, d.end_masked, true);
      std::int64_t interval = e - b;
      if (interval == 0 || ((interval < 0) != (stride < 0))) {
        size = 0;
      } else {
        size = interval / stride + (interval % stride != 0 ? 1 : 0);
      }
    }
    plan.begin.push_back(b);
    plan.stride.push_back(stride);
    plan.size.push_back(size);
  }
  for (int g : gather) {
    if (g >= 0) plan.final_shape.push_back(plan.size[static_cast<std::size_t>(g)]);
    if (g == k_new_axis) plan.final_shape.push_back(1);
  }
  return plan;
}

namespace {

// A scalar int32/int64 input's value when known at graph time.
std::optional<std::int64_t> scalar_input_value(const shape_context& ctx, int input) {
  const tensor* value = ctx.input_value(input);
  if (value == nullptr || value->num_elements() != 1) return std::nullopt;
  return index_values(*value)[0];
}

// The length of a vector input when its shape says, else -1.
std::int64_t vector_length(const shape_context& ctx, int input) {
  const partial_shape& s = ctx.input(input);
  return s.known_rank() && s.rank() == 1 ? s.dim(0) : -1;
}

// An axis in [-rank, rank) made non-negative, or an error naming the op's operand.
result<int> resolve_axis(const shape_context& ctx, std::int64_t axis, int rank, const char* what) {
  std::int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    return ctx.error(what, " ", axis, " is out of range for rank ", rank, " (valid: [", -rank, ", ",
                     rank, "))");
  }
  return static_cast<int>(a);
}

// Pad, PadV2: each dimension grows by its two paddings.
status pad_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 2));
  const partial_shape& input = ctx.input(0);
  int rank = input.rank();
  if (rank < 0 && ctx.input(1).known_rank()) rank = static_cast<int>(ctx.input(1).dim(0));
  if (rank < 0) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  const tensor* paddings = ctx.input_value(1);
  if (paddings == nullptr) {
    ctx.set_output(0, partial_shape::unknown_of_rank(rank));
    return status();
  }
  if (paddings->rank() != 2 || paddings->dim(0) != rank || paddings->dim(1) != 2) {
    return ctx.error("paddings must have shape [", rank, ",2] for an input of rank ", rank,
                     ", but has shape ", paddings->shape().to_string());
  }
  std::vector<std::int64_t> p = index_values(*paddings);
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank), -1);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (p[2 * i] < 0 || p[2 * i + 1] < 0) {
      return ctx.error("paddings must be non-negative, but row ", i, " is [", p[2 * i], ", ",
                       p[2 * i + 1], "]");
    }
    if (input.known_rank() && input.dim(static_cast<int>(i)) >= 0) {
      dims[i] = input.dim(static_cast<int>(i)) + p[2 * i] + p[2 * i + 1];
    }
  }
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

status tile_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  const partial_shape& input = ctx.input(0);
  int rank = input.known_rank() ? input.rank() : static_cast<int>(vector_length(ctx, 1));
  if (rank < 0) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank), -1);
  if (const tensor* multiples = ctx.input_value(1)) {
    std::vector<std::int64_t> m = index_values(*multiples);
    if (static_cast<int>(m.size()) != rank) {
      return ctx.error("multiples ", multiples->debug_string(), " must have one entry per input "
                       "dimension (", rank, ")");
    }
    for (std::size_t i = 0; i < m.size(); ++i) {
      if (m[i] < 0) return ctx.error("multiples[", i, "] = ", m[i], " must be non-negative");
      if (input.known_rank() && input.dim(static_cast<int>(i)) >= 0) {
        dims[i] = input.dim(static_cast<int>(i)) * m[i];
      }
    }
  }
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

status get_masks(const tf::NodeDef& node, strided_slice_masks* masks) {
  TROUPE_RETURN_IF_ERROR(get_attr(node, "begin_mask", &masks->begin_mask));
  TROUPE_RETURN_IF_ERROR(get_attr(node, "end_mask", &masks->end_mask));
  TROUPE_RETURN_IF_ERROR(get_attr(node, "ellipsis_mask", &masks->ellipsis_mask));
  TROUPE_RETURN_IF_ERROR(get_attr(node, "new_axis_mask", &masks->new_axis_mask));
  return get_attr(node, "shrink_axis_mask", &masks->shrink_axis_mask);
}

status strided_slice_shape(shape_context& ctx) {
  for (int i = 1; i <= 3; ++i) TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, 1));
  const partial_shape& input = ctx.input(0);
  const tensor* begin = ctx.input_value(1);
  const tensor* end = ctx.input_value(2);
  const tensor* strides = ctx.input_value(3);
  if (!input.known_rank() || begin == nullptr || end == nullptr || strides == nullptr) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  strided_slice_masks masks;
  TROUPE_RETURN_IF_ERROR(get_masks(ctx.node(), &masks));
  auto plan = plan_strided_slice(input.dims(), index_values(*begin), index_values(*end),
                                 index_values(*strides), masks);
  if (!plan.ok()) return ctx.error(plan.error().message(), " (input shape ", input.to_string(), ")");
  ctx.set_output(0, partial_shape(plan->final_shape));
  return status();
}

// StridedSliceGrad: the output has the shape given by its first input.
status strided_slice_grad_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 1));
  if (const tensor* shape = ctx.input_value(0)) {
    ctx.set_output(0, partial_shape(index_values(*shape)));
  } else {
    std::int64_t n = vector_length(ctx, 0);
    ctx.set_output(0, n >= 0 ? partial_shape::unknown_of_rank(static_cast<int>(n)) : partial_shape::unknown());
  }
  return status();
}

// Split: num_split equal parts of the value along split_dim (input 0).
status split_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 0));
  std::int64_t num_split = 0;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("num_split", &num_split));
  const partial_shape& value = ctx.input(1);
  std::optional<std::int64_t> axis_value = scalar_input_value(ctx, 0);
  partial_shape out = partial_shape::unknown();
  if (value.known_rank()) {
    out = partial_shape::unknown_of_rank(value.rank());
    if (axis_value) {
      auto axis = resolve_axis(ctx, *axis_value, value.rank(), "split_dim");
      if (!axis.ok()) return axis.error();
      std::vector<std::int64_t> dims = value.dims();
      std::int64_t& along = dims[static_cast<std::size_t>(*axis)];
      if (along >= 0 && along % num_split != 0) {
        return ctx.error("dimension ", *axis, " of value ", value.to_string(),
                         " cannot be split evenly into ", num_split, " parts");
      }
      if (along >= 0) along /= num_split;
      out = partial_shape(std::move(dims));
    }
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, out);
  return status();
}

// SplitV: parts of the given sizes (one may be -1: the rest) along split_dim (input 2).
status split_v_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(2, 0));
  const partial_shape& value = ctx.input(0);
  std::optional<std::int64_t> axis_value = scalar_input_value(ctx, 2);
  const tensor* sizes_value = ctx.input_value(1);
  if (!value.known_rank()) {
    for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, partial_shape::unknown());
    return status();
  }
  if (!axis_value || sizes_value == nullptr) {
    for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, partial_shape::unknown_of_rank(value.rank()));
    return status();
  }
  auto axis = resolve_axis(ctx, *axis_value, value.rank(), "split_dim");
  if (!axis.ok()) return axis.error();
  std::vector<std::int64_t> sizes = index_values(*sizes_value);
  if (static_cast<int>(sizes.size()) != ctx.num_outputs()) {
    return ctx.error("size_splits ", sizes_value->debug_string(), " has ", sizes.size(),
                     " entries but num_split is ", ctx.num_outputs());
  }
  std::int64_t along = value.dim(*axis), known = 0;
  int unknown_at = -1;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1 && unknown_at < 0) {
      unknown_at = static_cast<int>(i);
    } else if (sizes[i] < 0) {
      return ctx.error("size_splits ", sizes_value->debug_string(), " may hold one -1 and otherwise "
                       "non-negative sizes");
    } else {
      known += sizes[i];
    }
  }
  if (along >= 0) {
    if ((unknown_at < 0 && known != along) || known > along) {
      return ctx.error("size_splits ", sizes_value->debug_string(), " do not add up to dimension ",
                       *axis, " of value ", value.to_string());
    }
    if (unknown_at >= 0) sizes[static_cast<std::size_t>(unknown_at)] = along - known;
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    std::vector<std::int64_t> dims = value.dims();
    dims[static_cast<std::size_t>(*axis)] = sizes[static_cast<std::size_t>(i)];
    ctx.set_output(i, partial_shape(std::move(dims)));
  }
  return status();
}

// GatherV2: params.shape[:axis] + indices.shape + params.shape[axis + 1:].
status gather_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(2, 0));
  std::int64_t batch_dims = 0;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("batch_dims", &batch_dims));
  if (batch_dims != 0) return ctx.error("batch_dims ", batch_dims, " is not supported (only 0)");
  const partial_shape& params = ctx.input(0);
  const partial_shape& indices = ctx.input(1);
  std::optional<std::int64_t> axis_value = scalar_input_value(ctx, 2);
  if (!params.known_rank() || !indices.known_rank() || !axis_value) {
    if (params.known_rank() && indices.known_rank()) {
      ctx.set_output(0, partial_shape::unknown_of_rank(params.rank() + indices.rank() - 1));
    } else {
      ctx.set_output(0, partial_shape::unknown());
    }
    return status();
  }
  auto axis = resolve_axis(ctx, *axis_value, params.rank(), "axis");
  if (!axis.ok()) return axis.error();
  std::vector<std::int64_t> dims(params.dims().begin(), params.dims().begin() + *axis);
  dims.insert(dims.end(), indices.dims().begin(), indices.dims().end());
  dims.insert(dims.end(), params.dims().begin() + *axis + 1, params.dims().end());
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

// UnsortedSegmentSum: [num_segments] + data.shape[rank(segment_ids):].
status unsorted_segment_sum_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(2, 0));
  const partial_shape& data = ctx.input(0);
  const partial_shape& ids = ctx.input(1);
  std::optional<std::int64_t> num = scalar_input_value(ctx, 2);
  if (!data.known_rank() || !ids.known_rank()) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  if (ids.rank() > data.rank()) {
    return ctx.error("segment_ids ", ids.to_string(), " must be a prefix of data's shape ",
                     data.to_string());
  }
  for (int i = 0; i < ids.rank(); ++i) {
    if (ids.dim(i) >= 0 && data.dim(i) >= 0 && ids.dim(i) != data.dim(i)) {
      return ctx.error("segment_ids ", ids.to_string(), " must be a prefix of data's shape ",
                       data.to_string());
    }
  }
  std::vector<std::int64_t> dims{num ? *num : -1};
  dims.insert(dims.end(), data.dims().begin() + ids.rank(), data.dims().end());
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

// DynamicPartition: each output is [?] + data.shape[rank(partitions):].
status dynamic_partition_shape(shape_context& ctx) {
  const partial_shape& data = ctx.input(0);
  const partial_shape& partitions = ctx.input(1);
  partial_shape out = partial_shape::unknown();
  if (data.known_rank() && partitions.known_rank()) {
    if (partitions.rank() > data.rank()) {
      return ctx.error("partitions ", partitions.to_string(), " must be a prefix of data's shape ",
                       data.to_string());
    }
    std::vector<std::int64_t> dims{-1};
    dims.insert(dims.end(), data.dims().begin() + partitions.rank(), data.dims().end());
    out = partial_shape(std::move(dims));
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, out);
  return status();
}

// DynamicStitch: [max index + 1] + data[0].shape[rank(indices[0]):].
status dynamic_stitch_shape(shape_context& ctx) {
  const int n = ctx.num_inputs() / 2;
  std::int64_t max_index = -1;
  bool all_known = true;
  partial_shape inner = partial_shape::unknown();
  for (int i = 0; i < n; ++i) {
    const partial_shape& indices = ctx.input(i);
    const partial_shape& data = ctx.input(n + i);
    if (const tensor* v = ctx.input_value(i)) {
      for (std::int64_t x : index_values(*v)) max_index = std::max(max_index, x);
    } else {
      all_known = false;
    }
    if (indices.known_rank() && data.known_rank()) {
      if (indices.rank() > data.rank()) {
        return ctx.error("indices[", i, "] ", indices.to_string(), " must be a prefix of data[", i,
                         "]'s shape ", data.to_string());
      }
      partial_shape rest(std::vector<std::int64_t>(data.dims().begin() + indices.rank(), data.dims().end()));
      auto merged = inner.merge(rest);
      if (!merged.ok()) {
        return ctx.error("data[", i, "] ", data.to_string(), " does not match the other inputs "
                         "beyond the indices' dimensions: ", merged.error().message());
      }
      inner = std::move(*merged);
    }
  }
  if (!inner.known_rank()) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  std::vector<std::int64_t> dims{all_known ? max_index + 1 : -1};
  dims.insert(dims.end(), inner.dims().begin(), inner.dims().end());
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

// OneHot: indices' shape with depth inserted at axis (-1: last).
status one_hot_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 0));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(2, 0));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(3, 0));
  std::int64_t axis = -1;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("axis", &axis));
  const partial_shape& indices = ctx.input(0);
  if (!indices.known_rank()) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  if (axis < -1 || axis > indices.rank()) {
    return ctx.error("axis ", axis, " must be -1 or in [0, ", indices.rank(), "]");
  }
  std::optional<std::int64_t> depth = scalar_input_value(ctx, 1);
  if (depth && *depth < 0) return ctx.error("depth ", *depth, " must be non-negative");
  std::vector<std::int64_t> dims = indices.dims();
  dims.insert(axis == -1 ? dims.end() : dims.begin() + axis, depth ? *depth : -1);
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

// TopKV2: the input's shape with the last dimension k, twice.
status top_k_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank_at_least(0, 1));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 0));
  const partial_shape& input = ctx.input(0);
  partial_shape out = partial_shape::unknown();
  if (input.known_rank()) {
    std::vector<std::int64_t> dims = input.dims();
    std::optional<std::int64_t> k = scalar_input_value(ctx, 1);
    if (k && *k < 0) return ctx.error("k ", *k, " must be non-negative");
    if (k && dims.back() >= 0 && dims.back() < *k) {
      return ctx.error("input ", input.to_string(), " must have at least k = ", *k,
                       " entries in its last dimension");
    }
    dims.back() = k ? *k : -1;
    out = partial_shape(std::move(dims));
  }
  ctx.set_output(0, out);
  ctx.set_output(1, out);
  return status();
}

status where_shape(shape_context& ctx) {
  const partial_shape& input = ctx.input(0);
  ctx.set_output(0, partial_shape{-1, input.known_rank() ? input.rank() : -1});
  return status();
}

// ListDiff: vectors of what x keeps and where (their length depends on the values).
status list_diff_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 1));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  ctx.set_output(0, partial_shape{-1});
  ctx.set_output(1, partial_shape{-1});
  return status();
}

// ScatterNd: the requested shape; updates must be indices.shape[:-1] + shape[K:].
status scatter_nd_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank_at_least(0, 1));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(2, 1));
  const tensor* shape = ctx.input_value(2);
  if (shape == nullptr) {
    std::int64_t n = vector_length(ctx, 2);
    ctx.set_output(0, n >= 0 ? partial_shape::unknown_of_rank(static_cast<int>(n)) : partial_shape::unknown());
    return status();
  }
  ctx.set_output(0, partial_shape(index_values(*shape)));
  return status();
}

// GatherNd: indices.shape[:-1] + params.shape[K:], K = indices.shape[-1].
status gather_nd_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank_at_least(1, 1));
  const partial_shape& params = ctx.input(0);
  const partial_shape& indices = ctx.input(1);
  if (!params.known_rank() || !indices.known_rank() || indices.dim(indices.rank() - 1) < 0) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  const std::int64_t k = indices.dim(indices.rank() - 1);
  if (k > params.rank()) {
    return ctx.error("indices of shape ", indices.to_string(), " index ", k, " dimensions of params of shape ",
                     params.to_string(), ", which has ", params.rank());
  }
  std::vector<std::int64_t> dims(indices.dims().begin(), indices.dims().end() - 1);
  dims.insert(dims.end(), params.dims().begin() + k, params.dims().end());
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

// InTopKV2: one boolean per row of predictions.
status in_top_k_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 2));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(2, 0));
  const partial_shape& p = ctx.input(0);
  ctx.set_output(0, partial_shape{p.known_rank() ? p.dim(0) : -1});
  return status();
}

// Unique: two vectors, the distinct values (their count depends on the values) and x's
// positions among them.
status unique_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 1));
  ctx.set_output(0, partial_shape{-1});
  ctx.set_output(1, ctx.input(0));
  return status();
}

// BroadcastTo: the requested shape, which the input must broadcast to.
status broadcast_to_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  const tensor* shape = ctx.input_value(1);
  if (shape == nullptr) {
    std::int64_t n = vector_length(ctx, 1);
    ctx.set_output(0, n >= 0 ? partial_shape::unknown_of_rank(static_cast<int>(n)) : partial_shape::unknown());
    return status();
  }
  partial_shape target(index_values(*shape));
  auto broadcast = broadcast_shapes(ctx.input(0), target);
  if (!broadcast.ok() || (broadcast->known_rank() && broadcast->rank() != target.rank())) {
    return ctx.error("cannot broadcast an input of shape ", ctx.input(0).to_string(), " to shape ",
                     target.to_string());
  }
  ctx.set_output(0, target);
  return status();
}

// ---- Gradients. ----

using grads = std::vector<output>*;

const tensor* constant_input(const gradient_context& ctx, int i) {
  return ctx.s.current_graph().constant_value(ctx.forward.inputs[static_cast<std::size_t>(i)]);
}

// A vector constant of an index dtype (int32 or int64).
output index_vector(const scope& s, dtype type, const std::vector<std::int64_t>& values) {
  if (type == dtype::int64) return ops::constant(s, tensor::from_vector(values));
  std::vector<std::int32_t> narrow(values.begin(), values.end());
  return ops::constant(s, tensor::from_vector(narrow));
}

// The length of a vector when its shape says, else -1.
std::int64_t vector_length_of(const output& v) {
  return v.shape.known_rank() && v.shape.rank() == 1 ? v.shape.dim(0) : -1;
}

// Pad, PadV2: the gradient's slice where the input sits (constant_values gets none, as in
// TensorFlow).
status pad_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& paddings = ctx.inputs[1];
  dtype index = paddings.type;
  output before = s.add("Slice", {paddings, index_vector(s, index, {0, 0}), index_vector(s, index, {-1, 1})}).out();
  output begin = ops::reshape(s, before, index_vector(s, index, {-1}));
  output size = ops::shape(s, ctx.inputs[0], index);
  dx->assign(ctx.inputs.size(), output{});
  (*dx)[0] = s.add("Slice", {ctx.grad_outputs[0], begin, size}).out();
  return status();
}

// Tile: view the gradient as [m0, d0, m1, d1, ...] and sum over the m axes.
status tile_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& x = ctx.inputs[0];
  output multiples = ctx.inputs[1];
  std::int64_t rank = vector_length_of(multiples);
  if (rank < 0) {
    return invalid_argument_error("the gradient of Tile needs the length of 'multiples' at graph "
                                  "time, but its shape is ", multiples.shape.to_string());
  }
  output shape = ops::shape(s, x, multiples.type);
  output split_shape = ops::reshape(
      s, ops::transpose(s, ops::stack(s, {multiples, shape}), ops::int32_vector(s, {1, 0})), index_vector(s, multiples.type, {-1}));
  std::vector<std::int32_t> axes;
  for (std::int32_t i = 0; i < 2 * rank; i += 2) axes.push_back(i);
  output summed = ops::sum(s, ops::reshape(s, ctx.grad_outputs[0], split_shape), ops::int32_vector(s, axes));
  *dx = {reshape_to_shape_of(s, summed, x), output{}};
  return status();
}

status strided_slice_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  std::map<std::string, tf::AttrValue> attrs;
  for (const char* name : {"begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"}) {
    attrs[name] = ctx.forward.def.attr().at(name);
  }
  output shape = ops::shape(s, ctx.inputs[0], ctx.inputs[1].type);
  output g = s.add("StridedSliceGrad", {shape, ctx.inputs[1], ctx.inputs[2], ctx.inputs[3], ctx.grad_outputs[0]},
                   attrs).out();
  *dx = {g, output{}, output{}, output{}};
  return status();
}

// Split, SplitV: the parts' gradients joined again (zeros for parts without one).
output join_part_grads(const gradient_context& ctx, const output& axis) {
  std::vector<output> parts;
  for (int i = 0; i < static_cast<int>(ctx.outputs.size()); ++i) parts.push_back(grad_or_zeros(ctx, i));
  if (parts.size() == 1) return parts[0];
  return ops::concat(ctx.s, parts, axis);
}

status split_grad(const gradient_context& ctx, grads dx) {
  *dx = {output{}, join_part_grads(ctx, ctx.inputs[0])};
  return status();
}

status split_v_grad(const gradient_context& ctx, grads dx) {
  *dx = {join_part_grads(ctx, ctx.inputs[2]), output{}, output{}};
  return status();
}

// GatherV2: the gradient, seen as [outer, num_indices, inner], summed by index into
// [outer, params.shape[axis], inner] and reshaped to the params' shape.
status gather_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& params = ctx.inputs[0];
  const output& indices = ctx.inputs[1];
  const tensor* axis_value = constant_input(ctx, 2);
  if (axis_value == nullptr) {
    return invalid_argument_error("the gradient of GatherV2 needs a constant axis");
  }
  std::int64_t axis = index_values(*axis_value)[0];
  if (axis < 0) {
    if (!params.shape.known_rank()) {
      return invalid_argument_error("the gradient of GatherV2 with a negative axis needs the params' rank");
    }
    axis += params.shape.rank();
  }
  auto a = static_cast<std::int32_t>(axis);
  output shape = shape_of(s, params);
  output zero = ops::int32_vector(s, {0});
  output outer = ops::prod(s, s.add("Slice", {shape, zero, ops::int32_vector(s, {a})}).out(), zero);
  output inner = ops::prod(s, s.add("Slice", {shape, ops::int32_vector(s, {a + 1}), ops::int32_vector(s, {-1})}).out(), zero);
  output rows = ops::reshape(s, s.add("Slice", {shape, ops::int32_vector(s, {a}), ops::int32_vector(s, {1})}).out(), ops::int32_vector(s, {}));
  output grad3 = ops::reshape(s, ctx.grad_outputs[0], ops::stack(s, {outer, ops::size(s, indices), inner}));
  output swap = ops::int32_vector(s, {1, 0, 2});
  output summed = s.add("UnsortedSegmentSum", {ops::transpose(s, grad3, swap),
                                               ops::reshape(s, indices, index_vector(s, indices.type, {-1})), rows})
                      .out();
  *dx = {ops::reshape(s, ops::transpose(s, summed, swap), shape), output{}, output{}};
  return status();
}

// UnsortedSegmentSum: each data row receives its segment's gradient.
status unsorted_segment_sum_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  *dx = {s.add("GatherV2", {ctx.grad_outputs[0], ctx.inputs[1], ops::scalar<std::int32_t>(s, 0)}).out(),
         output{}, output{}};
  return status();
}

// GatherNd and ScatterNd are each other's gradients (TensorFlow's array_grad.py).
status gather_nd_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& indices = ctx.inputs[1];
  output shape = ops::cast(s, shape_of(s, ctx.inputs[0]), indices.type);
  *dx = {s.add("ScatterNd", {indices, ctx.grad_outputs[0], shape}).out(), output{}};
  return status();
}
status scatter_nd_grad(const gradient_context& ctx, grads dx) {
  *dx = {output{}, ctx.s.add("GatherNd", {ctx.grad_outputs[0], ctx.inputs[0]}).out(), output{}};
  return status();
}
status reverse_grad(const gradient_context& ctx, grads dx) {
  *dx = {ctx.s.add("ReverseV2", {ctx.grad_outputs[0], ctx.inputs[1]}).out(), output{}};
  return status();
}

// DynamicPartition: partition the positions 0..n-1 the same way, then stitch the
// gradients back to where their rows came from.
status dynamic_partition_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& data = ctx.inputs[0];
  const output& partitions = ctx.inputs[1];
  output all = ops::fill(s, ops::reshape(s, ops::size(s, partitions), ops::int32_vector(s, {1})),
                         ops::constant(s, tensor::scalar<bool>(true)));
  output positions = ops::reshape(s, ops::cast(s, s.add("Where", {all}).out(), dtype::int32),
                                   ops::shape(s, partitions));
  operation parts = s.add("DynamicPartition", {positions, partitions},
                          {{"num_partitions", ctx.forward.def.attr().at("num_partitions")}});
  std::vector<output> part_positions, part_grads;
  for (int i = 0; i < static_cast<int>(ctx.outputs.size()); ++i) {
    part_positions.push_back(parts.out(i));
    part_grads.push_back(grad_or_zeros(ctx, i));
  }
  output stitched = s.add("DynamicStitch", {input(part_positions), input(part_grads)}).out();
  *dx = {reshape_to_shape_of(s, stitched, data), output{}};
  return status();
}

// DynamicStitch: each data input gathers its rows of the gradient.
status dynamic_stitch_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const std::size_t n = ctx.inputs.size() / 2;
  dx->assign(ctx.inputs.size(), output{});
  for (std::size_t i = 0; i < n; ++i) {
    (*dx)[n + i] = s.add("GatherV2", {ctx.grad_outputs[0], ctx.inputs[i], ops::scalar<std::int32_t>(s, 0)}).out();
  }
  return status();
}

// TopKV2: each value's gradient goes back to the position it was taken from:
// sum over k of OneHot(indices, n) * grad.
status top_k_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& x = ctx.inputs[0];
  output depth;
  if (x.shape.known_rank() && x.shape.dim(x.shape.rank() - 1) >= 0) {
    depth = ops::scalar<std::int32_t>(s, static_cast<std::int32_t>(x.shape.dim(x.shape.rank() - 1)));
  } else {
    output last = ops::sub(s, ops::rank(s, x), ops::scalar<std::int32_t>(s, 1));
    depth = s.add("GatherV2", {ops::shape(s, x), last, ops::scalar<std::int32_t>(s, 0)}).out();
  }
  output one_hot = s.add("OneHot", {ctx.outputs[1], depth, scalar_of(s, x.type, 1), scalar_of(s, x.type, 0)}).out();
  output g = grad_or_zeros(ctx, 0);
  output expanded = s.add("ExpandDims", {g, ops::scalar<std::int32_t>(s, -1)}).out();
  output summed = ops::sum(s, ops::mul(s, one_hot, expanded), ops::scalar<std::int32_t>(s, -2));
  *dx = {reshape_to_shape_of(s, summed, x), output{}};
  return status();
}

status broadcast_to_grad(const gradient_context& ctx, grads dx) {
  *dx = {sum_to_shape_of(ctx.s, ctx.grad_outputs[0], ctx.inputs[0]), output{}};
  return status();
}

constexpr const char* k_mask_attrs[] = {"begin_mask: int = 0", "end_mask: int = 0",
                                        "ellipsis_mask: int = 0", "new_axis_mask: int = 0",
                                        "shrink_axis_mask: int = 0"};

}  // namespace

void register_index_ops(op_registry& registry) {
  add_builtin_op(registry, op_schema("Pad")
                               .input("input: T")
                               .input("paddings: Tpaddings")
                               .output("output: T")
                               .attr("T: type")
                               .attr("Tpaddings: {int32, int64} = DT_INT32")
                               .shape_fn(pad_shape)
                               .gradient(pad_grad));
  add_builtin_op(registry, op_schema("PadV2")
                               .input("input: T")
                               .input("paddings: Tpaddings")
                               .input("constant_values: T")
                               .output("output: T")
                               .attr("T: type")
                               .attr("Tpaddings: {int32, int64} = DT_INT32")
                               .shape_fn(pad_shape)
                               .gradient(pad_grad));
  add_builtin_op(registry, op_schema("Tile")
                               .input("input: T")
                               .input("multiples: Tmultiples")
                               .output("output: T")
                               .attr("T: type")
                               .attr("Tmultiples: {int32, int64} = DT_INT32")
                               .shape_fn(tile_shape)
                               .gradient(tile_grad));
  op_schema strided_slice("StridedSlice");
  strided_slice.input("input: T").input("begin: Index").input("end: Index").input("strides: Index")
      .output("output: T").attr("T: type").attr("Index: {int32, int64}");
  op_schema strided_slice_grad_op("StridedSliceGrad");
  strided_slice_grad_op.input("shape: Index").input("begin: Index").input("end: Index")
      .input("strides: Index").input("dy: T").output("output: T").attr("T: type")
      .attr("Index: {int32, int64}");
  for (const char* mask : k_mask_attrs) {
    strided_slice.attr(mask);
    strided_slice_grad_op.attr(mask);
  }
  add_builtin_op(registry, std::move(strided_slice.shape_fn(strided_slice_shape).gradient(strided_slice_grad)));
  // Its own gradient (second derivatives) is not supported yet.
  add_builtin_op(registry, std::move(strided_slice_grad_op.shape_fn(strided_slice_grad_shape)));
  add_builtin_op(registry, op_schema("Split")
                               .input("split_dim: int32")
                               .input("value: T")
                               .output("output: num_split * T")
                               .attr("num_split: int >= 1")
                               .attr("T: type")
                               .shape_fn(split_shape)
                               .gradient(split_grad));
  add_builtin_op(registry, op_schema("SplitV")
                               .input("value: T")
                               .input("size_splits: Tlen")
                               .input("split_dim: int32")
                               .output("output: num_split * T")
                               .attr("num_split: int >= 1")
                               .attr("T: type")
                               .attr("Tlen: {int32, int64} = DT_INT64")
                               .shape_fn(split_v_shape)
                               .gradient(split_v_grad));
  add_builtin_op(registry, op_schema("GatherV2")
                               .input("params: Tparams")
                               .input("indices: Tindices")
                               .input("axis: Taxis")
                               .output("output: Tparams")
                               .attr("batch_dims: int = 0")
                               .attr("Tparams: type")
                               .attr("Tindices: {int32, int64}")
                               .attr("Taxis: {int32, int64}")
                               .shape_fn(gather_shape)
                               .gradient(gather_grad));
  add_builtin_op(registry, op_schema("UnsortedSegmentSum")
                               .input("data: T")
                               .input("segment_ids: Tindices")
                               .input("num_segments: Tnumsegments")
                               .output("output: T")
                               .attr("T: {float, double, int8, int16, int32, int64, uint8, uint16}")
                               .attr("Tindices: {int32, int64}")
                               .attr("Tnumsegments: {int32, int64} = DT_INT32")
                               .shape_fn(unsorted_segment_sum_shape)
                               .gradient(unsorted_segment_sum_grad));
  add_builtin_op(registry, op_schema("DynamicPartition")
                               .input("data: T")
                               .input("partitions: int32")
                               .output("outputs: num_partitions * T")
                               .attr("num_partitions: int >= 1")
                               .attr("T: type")
                               .shape_fn(dynamic_partition_shape)
                               .gradient(dynamic_partition_grad));
  // ParallelDynamicStitch (TensorFlow's gradients of DynamicPartition use it) may merge
  // its indices in any order; troupe merges as DynamicStitch does: a later index wins.
  for (const char* name : {"DynamicStitch", "ParallelDynamicStitch"}) {
    add_builtin_op(registry, op_schema(name)
                                 .input("indices: N * int32")
                                 .input("data: N * T")
                                 .output("merged: T")
                                 .attr("N: int >= 1")
                                 .attr("T: type")
                                 .shape_fn(dynamic_stitch_shape)
                                 .gradient(dynamic_stitch_grad));
  }
  add_builtin_op(registry, op_schema("ListDiff")
                               .input("x: T")
                               .input("y: T")
                               .output("out: T")
                               .output("idx: out_idx")
                               .attr("T: type")
                               .attr("out_idx: {int32, int64} = DT_INT32")
                               .shape_fn(list_diff_shape)
                               .no_gradient());
  add_builtin_op(registry, op_schema("ScatterNd")
                               .input("indices: Tindices")
                               .input("updates: T")
                               .input("shape: Tindices")
                               .output("output: T")
                               .attr("T: type")
                               .attr("Tindices: {int32, int64}")
                               .shape_fn(scatter_nd_shape)
                               .gradient(scatter_nd_grad));
  add_builtin_op(registry, op_schema("GatherNd")
                               .input("params: Tparams")
                               .input("indices: Tindices")
                               .output("output: Tparams")
                               .attr("Tparams: type")
                               .attr("Tindices: {int32, int64}")
                               .attr("bad_indices_policy: string = ''")
                               .shape_fn(gather_nd_shape)
                               .gradient(gather_nd_grad));
  add_builtin_op(registry, op_schema("ReverseV2")
                               .input("tensor: T")
                               .input("axis: Tidx")
                               .output("output: T")
                               .attr("Tidx: {int32, int64} = DT_INT32")
                               .attr("T: type")
                               .shape_fn(unchanged_shape)
                               .gradient(reverse_grad));
  add_builtin_op(registry, op_schema("InTopKV2")
                               .input("predictions: float")
                               .input("targets: T")
                               .input("k: T")
                               .output("precision: bool")
                               .attr("T: {int32, int64} = DT_INT32")
                               .shape_fn(in_top_k_shape)
                               .no_gradient());
  add_builtin_op(registry, op_schema("Unique")
                               .input("x: T")
                               .output("y: T")
                               .output("idx: out_idx")
                               .attr("T: type")
                               .attr("out_idx: {int32, int64} = DT_INT32")
                               .shape_fn(unique_shape)
                               .no_gradient());
  add_builtin_op(registry, op_schema("OneHot")
                               .input("indices: TI")
                               .input("depth: int32")
                               .input("on_value: T")
                               .input("off_value: T")
                               .output("output: T")
                               .attr("axis: int = -1")
                               .attr("T: type")
                               .attr("TI: {uint8, int8, int32, int64} = DT_INT64")
                               .shape_fn(one_hot_shape)
                               .no_gradient());
  add_builtin_op(registry, op_schema("TopKV2")
                               .input("input: T")
                               .input("k: Tk")
                               .output("values: T")
                               .output("indices: index_type")
                               .attr("sorted: bool = true")
                               .attr("T: {float, double, int8, int16, int32, int64, uint8, uint16}")
                               .attr("Tk: {int32, int64} = DT_INT32")
                               .attr("index_type: {int32, int64} = DT_INT32")
                               .shape_fn(top_k_shape)
                               .gradient(top_k_grad));
  add_builtin_op(registry, op_schema("Where")
                               .input("input: T")
                               .output("index: int64")
                               .attr("T: {float, double, int8, int16, int32, int64, uint8, uint16, bool} = DT_BOOL")
                               .shape_fn(where_shape)
                               .no_gradient());
  add_builtin_op(registry, op_schema("BroadcastTo")
                               .input("input: T")
                               .input("shape: Tidx")
                               .output("output: T")
                               .attr("T: type")
                               .attr("Tidx: {int32, int64} = DT_INT32")
                               .shape_fn(broadcast_to_shape)
                               .gradient(broadcast_to_grad));
}

}  // namespace troupe::graph
