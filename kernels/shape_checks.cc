#include "kernels/shape_checks.h"

#include <algorithm>

namespace troupe::kernels {

namespace {

std::int64_t product(const std::vector<std::int64_t>& dims, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}

status require_channel_vector(const tensor& t, const char* name, std::int64_t channels) {
  if (t.rank() != 1 || t.dim(0) != channels) {
    return invalid_argument_error(name, " must be a vector of ", channels, " elements (the channels of x), but is ",
                                  t.shape());
  }
  return status();
}

// x's layout, or an error naming the expected rank.
result<channel_layout> channel_layout_of(std::string_view op, const batch_norm_options& o, const tensor_shape& x) {
  if (x.rank() != o.rank) {
    return invalid_argument_error(op, " x must be ", o.rank, "-dimensional (", o.format, "), but is ", x);
  }
  const int channel_dim = o.channels_first ? 1 : o.rank - 1;
  channel_layout l;
  for (int i = 0; i < o.rank; ++i) {
    if (i < channel_dim) l.outer *= x.dim(i);
    else if (i == channel_dim) l.channels = x.dim(i);
    else l.inner *= x.dim(i);
  }
  return l;
}

bias_layout bias_layout_of(const tensor_shape& shape, bool nchw) {
  bias_layout l;
  const int channel_dim = nchw ? 1 : shape.rank() - 1;
  for (int i = 0; i < shape.rank(); ++i) {
    if (i < channel_dim) l.batch *= shape.dim(i);
    else if (i == channel_dim) l.channels = shape.dim(i);
    else l.spatial *= shape.dim(i);
  }
  return l;
}

}  // namespace

result<std::int64_t> axis_operand(std::string_view op, const tensor& axis_value, int rank) {
  if (axis_value.num_elements() != 1) {
    return invalid_argument_error(op, ": the axis must be a scalar, not ", axis_value.shape());
  }
  const std::int64_t axis = index_values(axis_value)[0];
  const std::int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    return invalid_argument_error(op, ": axis ", axis, " is out of range for rank ", rank, " (valid: [", -rank, ", ",
                                  rank, "))");
  }
  return a;
}

result<reduction_geometry> reduction_geometry_of(const tensor_shape& input, const tensor& axes, bool keep_dims) {
  if (axes.rank() > 1) {
    return invalid_argument_error("reduction_indices must be a scalar or a vector, not ", axes.shape());
  }
  const int rank = input.rank();
  std::vector<bool> reduced(static_cast<std::size_t>(rank), false);
  for (std::int64_t axis : index_values(axes)) {
    if (axis < -rank || axis >= rank) {
      return invalid_argument_error("reduction axis ", axis, " is out of range for input ", input, " (valid: [",
                                    -rank, ", ", rank, "))");
    }
    const auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
    if (reduced[a]) {
      return invalid_argument_error("reduction axes contain dimension ", a, " twice (input ", input, ")");
    }
    reduced[a] = true;
  }
  reduction_geometry g;
  for (int i = 0; i < rank; ++i) {
    const std::int64_t size = input.dim(i);
    const bool r = reduced[static_cast<std::size_t>(i)];
    if (!r) g.output.add_dim(size);
    else if (keep_dims) g.output.add_dim(1);
    if (r) g.count *= size;
    if (size == 1) continue;
    if (!g.groups.empty() && g.groups.back().reduced == r) {
      g.groups.back().size *= size;
    } else {
      g.groups.push_back({size, r});
      g.reduced_groups += r ? 1 : 0;
    }
  }
  return g;
}

result<arg_reduction_geometry> arg_reduction_geometry_of(std::string_view op, const tensor_shape& input,
                                                         const tensor& dimension) {
  if (dimension.rank() != 0) {
    return invalid_argument_error("dimension must be a scalar, not ", dimension.shape());
  }
  const int rank = input.rank();
  std::int64_t axis = index_values(dimension)[0];
  if (rank == 0 || axis < -rank || axis >= rank) {
    return invalid_argument_error("dimension ", axis, " is out of range for input ", input, " (valid: [", -rank, ", ",
                                  rank, "))");
  }
  if (axis < 0) axis += rank;
  arg_reduction_geometry g;
  g.axis = static_cast<int>(axis);
  g.reduce = input.dim(g.axis);
  if (g.reduce == 0) {
    return invalid_argument_error("cannot take ", op, " over empty dimension ", g.axis, " of input ", input);
  }
  g.outer = product(input.dims(), 0, static_cast<std::size_t>(g.axis));
  g.inner = product(input.dims(), static_cast<std::size_t>(g.axis) + 1, input.dims().size());
  g.output = input;
  g.output.remove_dim(g.axis);
  return g;
}

result<xent_geometry> softmax_xent_geometry(const tensor_shape& features, const tensor_shape& labels) {
  auto bad = [&]() -> status {
    return invalid_argument_error("features ", features, " and labels ", labels,
                                  " must broadcast to a [batch, classes] matrix");
  };
  if (features.rank() > 2 || labels.rank() > 2 || std::max(features.rank(), labels.rank()) < 2) return bad();
  std::int64_t dims[2];
  for (int i = 0; i < 2; ++i) {
    const int fi = features.rank() - 2 + i, li = labels.rank() - 2 + i;
    const std::int64_t f = fi >= 0 ? features.dim(fi) : 1, l = li >= 0 ? labels.dim(li) : 1;
    if (f != l && f != 1 && l != 1) return bad();
    dims[i] = f == 1 ? l : f;
  }
  return xent_geometry{dims[0], dims[1]};
}

result<xent_geometry> sparse_softmax_xent_geometry(const tensor_shape& features, const tensor_shape& labels) {
  if (features.rank() != 2 || labels.rank() != 1 || labels.dim(0) != features.dim(0)) {
    return invalid_argument_error("features must be [batch, classes] and labels [batch], but features are ", features,
                                  " and labels ", labels);
  }
  return xent_geometry{features.dim(0), features.dim(1)};
}

status read_bias_format(const tf::NodeDef& node, bool* nchw) {
  std::string format;
  TROUPE_RETURN_IF_ERROR(graph::get_attr(node, "data_format", &format));
  if (format != "NHWC" && format != "NCHW") {
    return invalid_argument_error("data_format must be 'NHWC' or 'NCHW', not '", format, "'");
  }
  *nchw = format == "NCHW";
  return status();
}

result<bias_layout> bias_add_layout(const tensor_shape& value, const tensor_shape& bias, bool nchw) {
  if (value.rank() < 2) return invalid_argument_error("BiasAdd value must have rank >= 2, but is ", value);
  const bias_layout l = bias_layout_of(value, nchw);
  if (bias.rank() != 1 || bias.dim(0) != l.channels) {
    return invalid_argument_error("BiasAdd bias ", bias, " must be a vector of ", l.channels,
                                  " elements, the channel dimension of value ", value, nchw ? " (NCHW)" : " (NHWC)");
  }
  return l;
}

result<bias_layout> bias_add_grad_layout(const tensor_shape& out_backprop, bool nchw) {
  if (out_backprop.rank() < 2) {
    return invalid_argument_error("BiasAddGrad out_backprop must have rank >= 2, but is ", out_backprop);
  }
  return bias_layout_of(out_backprop, nchw);
}

status read_batch_norm_options(const tf::NodeDef& node, batch_norm_options* o) {
  TROUPE_RETURN_IF_ERROR(graph::get_attr(node, "epsilon", &o->epsilon));
  TROUPE_RETURN_IF_ERROR(graph::get_attr(node, "is_training", &o->is_training));
  TROUPE_RETURN_IF_ERROR(graph::get_attr(node, "data_format", &o->format));
  if (o->format == "NHWC" || o->format == "NCHW") {
    o->rank = 4;
  } else if (o->format == "NDHWC" || o->format == "NCDHW") {
    o->rank = 5;
  } else {
    return invalid_argument_error("data_format must be 'NHWC', 'NCHW', 'NDHWC' or 'NCDHW', not '", o->format, "'");
  }
  o->channels_first = o->format[1] == 'C';
  return status();
}

result<channel_layout> batch_norm_layout(std::string_view op, const batch_norm_options& o, const tensor& x,
                                         const tensor& scale, const tensor& offset, const tensor& mean,
                                         const tensor& variance, bool reads_statistics) {
  auto l = channel_layout_of(op, o, x.shape());
  if (!l.ok()) return l;
  TROUPE_RETURN_IF_ERROR(require_channel_vector(scale, "scale", l->channels));
  TROUPE_RETURN_IF_ERROR(require_channel_vector(offset, "offset", l->channels));
  if (reads_statistics) {
    TROUPE_RETURN_IF_ERROR(require_channel_vector(mean, "mean", l->channels));
    TROUPE_RETURN_IF_ERROR(require_channel_vector(variance, "variance", l->channels));
  }
  return l;
}

result<channel_layout> batch_norm_grad_layout(std::string_view op, const batch_norm_options& o, const tensor& dy,
                                              const tensor& x, const tensor& scale, const tensor& reserve_1,
                                              const tensor& reserve_2) {
  auto l = channel_layout_of(op, o, x.shape());
  if (!l.ok()) return l;
  if (dy.shape() != x.shape()) {
    return invalid_argument_error("y_backprop ", dy.shape(), " must have the shape of x ", x.shape());
  }
  TROUPE_RETURN_IF_ERROR(require_channel_vector(scale, "scale", l->channels));
  TROUPE_RETURN_IF_ERROR(require_channel_vector(reserve_1, "reserve_space_1", l->channels));
  TROUPE_RETURN_IF_ERROR(require_channel_vector(reserve_2, "reserve_space_2", l->channels));
  return l;
}

status check_gather_attrs(const tf::NodeDef& node) {
  std::int64_t batch_dims = 0;
  TROUPE_RETURN_IF_ERROR(graph::get_attr(node, "batch_dims", &batch_dims));
  if (batch_dims != 0) {
    return invalid_argument_error("GatherV2: batch_dims ", batch_dims, " is not supported (only 0)");
  }
  return status();
}

result<gather_geometry> gather_geometry_of(const tensor_shape& params, const tensor_shape& indices,
                                           const tensor& axis_value) {
  if (params.rank() == 0) return invalid_argument_error("GatherV2: params must have rank >= 1, not a scalar");
  auto axis = axis_operand("GatherV2", axis_value, params.rank());
  if (!axis.ok()) return axis.error();
  const std::vector<std::int64_t>& dims = params.dims();
  const auto a = static_cast<std::size_t>(*axis);
  gather_geometry g;
  g.axis = *axis;
  g.outer = product(dims, 0, a);
  g.rows = dims[a];
  g.inner = product(dims, a + 1, dims.size());
  std::vector<std::int64_t> out_dims(dims.begin(), dims.begin() + *axis);
  out_dims.insert(out_dims.end(), indices.dims().begin(), indices.dims().end());
  out_dims.insert(out_dims.end(), dims.begin() + *axis + 1, dims.end());
  g.output = tensor_shape(out_dims);
  return g;
}

result<segment_sum_geometry> unsorted_segment_sum_geometry(const tensor_shape& data, const tensor_shape& ids,
                                                           const tensor& num_value) {
  if (num_value.num_elements() != 1) {
    return invalid_argument_error("UnsortedSegmentSum: num_segments must be a scalar, not ", num_value.shape());
  }
  const std::int64_t num = index_values(num_value)[0];
  bool prefix = ids.rank() <= data.rank();
  for (int i = 0; prefix && i < ids.rank(); ++i) prefix = ids.dim(i) == data.dim(i);
  if (!prefix || num < 0) {
    return invalid_argument_error("UnsortedSegmentSum: segment_ids ", ids, " must be a prefix of data's shape ", data,
                                  " and num_segments (", num, ") non-negative");
  }
  std::vector<std::int64_t> out_dims{num};
  out_dims.insert(out_dims.end(), data.dims().begin() + ids.rank(), data.dims().end());
  return segment_sum_geometry{num, tensor_shape(out_dims)};
}

result<one_hot_geometry> one_hot_geometry_of(const tensor_shape& indices, const tensor& depth_value,
                                             const tensor& on, const tensor& off, std::int64_t axis) {
  if (depth_value.rank() != 0 || on.rank() != 0 || off.rank() != 0) {
    return invalid_argument_error("OneHot: depth, on_value and off_value must be scalars, but have shapes ",
                                  depth_value.shape(), ", ", on.shape(), " and ", off.shape());
  }
  one_hot_geometry g;
  g.depth = depth_value.data<std::int32_t>()[0];
  const int rank = indices.rank();
  if (g.depth < 0 || axis < -1 || axis > rank) {
    return invalid_argument_error("OneHot: depth (", g.depth, ") must be non-negative and axis (", axis,
                                  ") -1 or in [0, ", rank, "]");
  }
  const std::size_t a = axis == -1 ? static_cast<std::size_t>(rank) : static_cast<std::size_t>(axis);
  std::vector<std::int64_t> dims = indices.dims();
  g.prefix = product(dims, 0, a);
  g.suffix = product(dims, a, dims.size());
  dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(a), g.depth);
  g.output = tensor_shape(dims);
  return g;
}

result<matmul_geometry> matmul_geometry_of(const tensor_shape& a, const tensor_shape& b, bool transpose_a,
                                           bool transpose_b) {
  if (a.rank() != 2 || b.rank() != 2) {
    return invalid_argument_error("MatMul needs matrices, but a is ", a, " and b is ", b);
  }
  matmul_geometry g;
  g.m = a.dim(transpose_a ? 1 : 0);
  g.k = a.dim(transpose_a ? 0 : 1);
  const std::int64_t k_b = b.dim(transpose_b ? 1 : 0);
  g.n = b.dim(transpose_b ? 0 : 1);
  if (g.k != k_b) {
    return invalid_argument_error("matrix size-incompatible: a ", a, transpose_a ? " (transposed)" : "",
                                  " has inner dimension ", g.k, " but b ", b, transpose_b ? " (transposed)" : "",
                                  " has inner dimension ", k_b);
  }
  return g;
}

result<batch_matmul_shape> batch_matmul_geometry(const tensor_shape& x, const tensor_shape& y, bool adj_x, bool adj_y,
                                                 bool broadcast) {
  if (x.rank() < 2 || y.rank() < 2) {
    return invalid_argument_error("BatchMatMul needs tensors of rank 2 or more, but x is ", x.to_string(),
                                  " and y is ", y.to_string());
  }
  batch_matmul_shape g;
  g.m = x.dim(x.rank() - (adj_x ? 1 : 2));
  g.k = x.dim(x.rank() - (adj_x ? 2 : 1));
  const std::int64_t k_y = y.dim(y.rank() - (adj_y ? 1 : 2));
  g.n = y.dim(y.rank() - (adj_y ? 2 : 1));
  if (g.k != k_y) {
    return invalid_argument_error("matrix size-incompatible: x ", x.to_string(), adj_x ? " (adjoint)" : "",
                                  " has inner dimension ", g.k, " but y ", y.to_string(), adj_y ? " (adjoint)" : "",
                                  " has inner dimension ", k_y);
  }
  // Batch dimensions aligned on the right, as numpy broadcasts.
  const int rank = std::max(x.rank(), y.rank()) - 2;
  std::vector<std::int64_t> xb(static_cast<std::size_t>(rank), 1), yb(static_cast<std::size_t>(rank), 1), out;
  for (int i = 0; i < x.rank() - 2; ++i) xb[static_cast<std::size_t>(rank - (x.rank() - 2) + i)] = x.dim(i);
  for (int i = 0; i < y.rank() - 2; ++i) yb[static_cast<std::size_t>(rank - (y.rank() - 2) + i)] = y.dim(i);
  for (int i = 0; i < rank; ++i) {
    const std::int64_t a = xb[static_cast<std::size_t>(i)], b = yb[static_cast<std::size_t>(i)];
    const bool same = a == b && (broadcast || x.rank() == y.rank());
    if (!same && !(broadcast && (a == 1 || b == 1))) {
      return invalid_argument_error(broadcast ? "batch dimensions do not broadcast: x " : "batch dimensions differ: x ",
                                    x.to_string(), " and y ", y.to_string());
    }
    out.push_back(a == 1 ? b : a);
  }
  g.batches = 1;
  for (std::int64_t d : out) g.batches *= d;
  g.x_batch.resize(static_cast<std::size_t>(g.batches));
  g.y_batch.resize(static_cast<std::size_t>(g.batches));
  // Walk the output's batch index, carrying each side's matrix index (0 stride where it
  // broadcasts).
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
  for (std::int64_t b = 0; b < g.batches; ++b) {
    std::int64_t xi = 0, yi = 0;
    for (int d = 0; d < rank; ++d) {
      const auto u = static_cast<std::size_t>(d);
      xi = xi * xb[u] + (xb[u] == 1 ? 0 : index[u]);
      yi = yi * yb[u] + (yb[u] == 1 ? 0 : index[u]);
    }
    g.x_batch[static_cast<std::size_t>(b)] = xi;
    g.y_batch[static_cast<std::size_t>(b)] = yi;
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < out[static_cast<std::size_t>(d)]) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  out.push_back(g.m);
  out.push_back(g.n);
  g.output = tensor_shape(out);
  return g;
}

}  // namespace troupe::kernels
