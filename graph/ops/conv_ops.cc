// Op schemas: 2-D convolution and pooling, spelled as TensorFlow's raw ops.
//
//   Conv2D                 input [N,H,W,C] (or NCHW) * filter [kh,kw,C,out_c]
//   Conv2DBackpropInput    (input_sizes, filter, out_backprop) -> d input
//   Conv2DBackpropFilter   (input, filter_sizes, out_backprop) -> d filter
//   MaxPool, MaxPoolGrad   (orig_input, orig_output, grad) -> d orig_input
//   AvgPool, AvgPoolGrad   (orig_input_shape, grad) -> d input
//
// Padding follows TensorFlow: VALID (no padding; a window larger than the input is an
// error), SAME (out = ceil(in / stride), pad_before = max(0, (out-1)*stride + eff - in) / 2
// with eff = (k-1)*dilation + 1) and, for Conv2D and MaxPool, EXPLICIT with
// explicit_paddings. Filters are HWIO in both data formats.
//
// Gradients follow TensorFlow's nn_grad.py: Conv2D -> Conv2DBackpropInput and
// Conv2DBackpropFilter (and those two back to convolutions, for second order), MaxPool ->
// MaxPoolGrad, AvgPool -> AvgPoolGrad -> AvgPool. MaxPoolGrad has none yet (TensorFlow's
// needs MaxPoolGradGrad).
//
// Kernels: kernels/cpu/conv_kernels.cc and kernels/cpu/pool_kernels.cc.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/gradients.h"
#include "graph/op_registry.h"

namespace troupe::graph {

namespace {

std::string list_string(const std::vector<std::int64_t>& values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) s += str_cat(i > 0 ? "," : "", values[i]);
  return s + "]";
}

// The validated window attributes of a node, in data_format order resolved to H and W.
struct window_attrs {
  bool nchw = false;
  std::string padding;
  std::int64_t stride[2] = {1, 1};
  std::int64_t dilation[2] = {1, 1};
  std::int64_t ksize[2] = {1, 1};      // pools only
  std::int64_t pads[2][2] = {{0, 0}, {0, 0}};  // EXPLICIT: (before, after) for H and W

  int height_dim() const { return nchw ? 2 : 1; }
  int width_dim() const { return nchw ? 3 : 2; }
  int channel_dim() const { return nchw ? 1 : 3; }
  std::string describe() const {
    std::string s = str_cat("strides ", stride[0], "x", stride[1], ", padding ", padding);
    if (dilation[0] != 1 || dilation[1] != 1) {
      s += str_cat(", dilations ", dilation[0], "x", dilation[1]);
    }
    return s;
  }
};

status read_pair(const shape_context& ctx, std::string_view attr, const window_attrs& w,
                 std::int64_t out[2]) {
  std::vector<std::int64_t> values;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr(attr, &values));
  const char* format = w.nchw ? "NCHW" : "NHWC";
  if (values.size() != 4) {
    return ctx.error(attr, " must have 4 entries, one per dimension of ", format, ", but is ",
                     list_string(values));
  }
  if (values[0] != 1 || values[static_cast<std::size_t>(w.channel_dim())] != 1) {
    return ctx.error(attr, " ", list_string(values),
                     " must be 1 in the batch and channel dimensions (", format, ")");
  }
  out[0] = values[static_cast<std::size_t>(w.height_dim())];
  out[1] = values[static_cast<std::size_t>(w.width_dim())];
  if (out[0] < 1 || out[1] < 1) {
    return ctx.error(attr, " ", list_string(values), " must be at least 1 in the spatial dimensions");
  }
  return status();
}

status read_window_attrs(const shape_context& ctx, bool conv, window_attrs* w) {
  std::string data_format = "NHWC";
  if (ctx.node().attr().count("data_format") > 0) {
    TROUPE_RETURN_IF_ERROR(ctx.get_attr("data_format", &data_format));
  }
  w->nchw = data_format == "NCHW";
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("padding", &w->padding));
  TROUPE_RETURN_IF_ERROR(read_pair(ctx, "strides", *w, w->stride));
  if (conv) TROUPE_RETURN_IF_ERROR(read_pair(ctx, "dilations", *w, w->dilation));
  else TROUPE_RETURN_IF_ERROR(read_pair(ctx, "ksize", *w, w->ksize));
  std::vector<std::int64_t> pads;
  if (ctx.node().attr().count("explicit_paddings") > 0) {
    TROUPE_RETURN_IF_ERROR(ctx.get_attr("explicit_paddings", &pads));
  }
  if (w->padding != "EXPLICIT") {
    if (!pads.empty()) {
      return ctx.error("explicit_paddings ", list_string(pads),
                       " must be empty unless padding is EXPLICIT");
    }
    return status();
  }
  auto at = [&](int dim, int side) { return pads[static_cast<std::size_t>(2 * dim + side)]; };
  bool valid = pads.size() == 8 && at(0, 0) == 0 && at(0, 1) == 0 && at(w->channel_dim(), 0) == 0 &&
               at(w->channel_dim(), 1) == 0;
  for (std::int64_t p : pads) valid = valid && p >= 0;
  if (!valid) {
    return ctx.error("explicit_paddings ", list_string(pads),
                     " must be 8 non-negative values (before, after per dimension of ",
                     data_format, ") that are 0 in the batch and channel dimensions");
  }
  for (int i = 0; i < 2; ++i) {
    int dim = i == 0 ? w->height_dim() : w->width_dim();
    w->pads[i][0] = at(dim, 0);
    w->pads[i][1] = at(dim, 1);
  }
  return status();
}

// The output size of spatial dimension i (0: height, 1: width) for an input of `in` (-1:
// unknown) and a window of `window` (-1: unknown); -1 when unknown. Errors when the window
// certainly does not fit.
status window_output(const shape_context& ctx, const window_attrs& w, int i, std::int64_t in,
                     std::int64_t window, const std::string& what, std::int64_t* out) {
  *out = -1;
  if (w.padding == "SAME") {
    if (in >= 0) *out = (in + w.stride[i] - 1) / w.stride[i];
    return status();
  }
  if (in < 0 || window < 0) return status();
  std::int64_t effective = (window - 1) * w.dilation[i] + 1;
  std::int64_t padded = in + w.pads[i][0] + w.pads[i][1];
  if (effective > padded) {
    const char* dim = i == 0 ? "height" : "width";
    return ctx.error("the window's ", dim, " of ", effective, w.dilation[i] > 1 ? " (dilated)" : "",
                     " is larger than the input's ", dim, " of ", in,
                     w.padding == "EXPLICIT" ? " plus its explicit padding" : "", " with ",
                     w.padding, " padding (", what, ", ", w.describe(), ")");
  }
  *out = (padded - effective) / w.stride[i] + 1;
  return status();
}

// Builds a 4-D shape in data_format order from N, H, W, C.
partial_shape make_image_shape(const window_attrs& w, std::int64_t n, std::int64_t h,
                               std::int64_t width, std::int64_t c) {
  return w.nchw ? partial_shape{n, c, h, width} : partial_shape{n, h, width, c};
}

std::int64_t dim_or_unknown(const partial_shape& s, int i) {
  return s.known_rank() ? s.dim(i) : -1;
}

// The forward Conv2D output for an input and a filter shape, with the channel check.
status conv_output(const shape_context& ctx, const window_attrs& w, const partial_shape& input,
                   const partial_shape& filter, partial_shape* out) {
  std::int64_t in_c = dim_or_unknown(input, w.channel_dim());
  std::int64_t filter_in = dim_or_unknown(filter, 2);
  std::string what = str_cat("input ", input.to_string(), " (", w.nchw ? "NCHW" : "NHWC",
                             "), filter ", filter.to_string());
  if (in_c >= 0 && filter_in >= 0 && in_c != filter_in) {
    return ctx.error(what, ": the input has ", in_c, " channels but the filter expects ",
                     filter_in, " (grouped convolution is not supported)");
  }
  std::int64_t h, width;
  TROUPE_RETURN_IF_ERROR(window_output(ctx, w, 0, dim_or_unknown(input, w.height_dim()),
                                       dim_or_unknown(filter, 0), what, &h));
  TROUPE_RETURN_IF_ERROR(window_output(ctx, w, 1, dim_or_unknown(input, w.width_dim()),
                                       dim_or_unknown(filter, 1), what, &width));
  *out = make_image_shape(w, dim_or_unknown(input, 0), h, width, dim_or_unknown(filter, 3));
  return status();
}

// The value of a 4-element int32 shape operand when known at graph time.
status sizes_input(const shape_context& ctx, int index, const std::string& what,
                   std::optional<partial_shape>* out) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(index, 1));
  const partial_shape& s = ctx.input(index);
  if (s.known_rank() && s.dim(0) >= 0 && s.dim(0) != 4) {
    return ctx.error(what, " must hold 4 sizes but has shape ", s.to_string());
  }
  const tensor* value = ctx.input_value(index);
  if (value == nullptr) return status();
  if (value->type() != dtype::int32 || value->num_elements() != 4) {
    return ctx.error(what, " must be an int32 vector of 4 sizes but is ", value->debug_string());
  }
  std::vector<std::int64_t> dims;
  for (std::int32_t d : value->flat<std::int32_t>()) {
    if (d < 0) return ctx.error(what, " ", value->debug_string(), " has a negative size");
    dims.push_back(d);
  }
  *out = partial_shape(std::move(dims));
  return status();
}

// Checks out_backprop against the forward output (dimensions known on both sides).
status check_backprop(const shape_context& ctx, const partial_shape& forward_out,
                      const partial_shape& out_backprop, const window_attrs& w) {
  if (!forward_out.is_compatible_with(out_backprop)) {
    return ctx.error("out_backprop ", out_backprop.to_string(),
                     " does not match the forward output's shape ", forward_out.to_string(), " (",
                     w.nchw ? "NCHW" : "NHWC", ", ", w.describe(), ")");
  }
  return status();
}

status conv2d_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 4));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 4));
  window_attrs w;
  TROUPE_RETURN_IF_ERROR(read_window_attrs(ctx, /*conv=*/true, &w));
  partial_shape out;
  TROUPE_RETURN_IF_ERROR(conv_output(ctx, w, ctx.input(0), ctx.input(1), &out));
  ctx.set_output(0, std::move(out));
  return status();
}

status conv2d_backprop_input_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 4));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(2, 4));
  window_attrs w;
  TROUPE_RETURN_IF_ERROR(read_window_attrs(ctx, /*conv=*/true, &w));
  std::optional<partial_shape> sizes;
  TROUPE_RETURN_IF_ERROR(sizes_input(ctx, 0, "input_sizes", &sizes));
  const partial_shape& filter = ctx.input(1);
  const partial_shape& out_backprop = ctx.input(2);
  if (!sizes) {
    ctx.set_output(0, make_image_shape(w, dim_or_unknown(out_backprop, 0), -1, -1,
                                       dim_or_unknown(filter, 2)));
    return status();
  }
  partial_shape forward_out;
  TROUPE_RETURN_IF_ERROR(conv_output(ctx, w, *sizes, filter, &forward_out));
  TROUPE_RETURN_IF_ERROR(check_backprop(ctx, forward_out, out_backprop, w));
  ctx.set_output(0, *sizes);
  return status();
}

status conv2d_backprop_filter_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 4));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(2, 4));
  window_attrs w;
  TROUPE_RETURN_IF_ERROR(read_window_attrs(ctx, /*conv=*/true, &w));
  std::optional<partial_shape> sizes;
  TROUPE_RETURN_IF_ERROR(sizes_input(ctx, 1, "filter_sizes", &sizes));
  const partial_shape& input = ctx.input(0);
  const partial_shape& out_backprop = ctx.input(2);
  if (!sizes) {
    ctx.set_output(0, partial_shape{-1, -1, dim_or_unknown(input, w.channel_dim()),
                                    dim_or_unknown(out_backprop, w.channel_dim())});
    return status();
  }
  partial_shape forward_out;
  TROUPE_RETURN_IF_ERROR(conv_output(ctx, w, input, *sizes, &forward_out));
  TROUPE_RETURN_IF_ERROR(check_backprop(ctx, forward_out, out_backprop, w));
  ctx.set_output(0, *sizes);
  return status();
}

// The pooled shape of `input` (data_format order).
status pool_output(const shape_context& ctx, const window_attrs& w, const partial_shape& input,
                   partial_shape* out) {
  std::string what = str_cat("input ", input.to_string(), " (", w.nchw ? "NCHW" : "NHWC",
                             "), ksize ", w.ksize[0], "x", w.ksize[1]);
  std::int64_t h, width;
  TROUPE_RETURN_IF_ERROR(
      window_output(ctx, w, 0, dim_or_unknown(input, w.height_dim()), w.ksize[0], what, &h));
  TROUPE_RETURN_IF_ERROR(
      window_output(ctx, w, 1, dim_or_unknown(input, w.width_dim()), w.ksize[1], what, &width));
  *out = make_image_shape(w, dim_or_unknown(input, 0), h, width,
                          dim_or_unknown(input, w.channel_dim()));
  return status();
}

status pool_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 4));
  window_attrs w;
  TROUPE_RETURN_IF_ERROR(read_window_attrs(ctx, /*conv=*/false, &w));
  partial_shape out;
  TROUPE_RETURN_IF_ERROR(pool_output(ctx, w, ctx.input(0), &out));
  ctx.set_output(0, std::move(out));
  return status();
}

status max_pool_grad_shape(shape_context& ctx) {
  for (int i = 0; i < 3; ++i) TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, 4));
  window_attrs w;
  TROUPE_RETURN_IF_ERROR(read_window_attrs(ctx, /*conv=*/false, &w));
  partial_shape pooled;
  TROUPE_RETURN_IF_ERROR(pool_output(ctx, w, ctx.input(0), &pooled));
  for (int i = 1; i < 3; ++i) {
    if (!pooled.is_compatible_with(ctx.input(i))) {
      return ctx.error(i == 1 ? "orig_output " : "grad ", ctx.input(i).to_string(),
                       " does not match the pooled shape ", pooled.to_string(), " of orig_input ",
                       ctx.input(0).to_string());
    }
  }
  ctx.set_output(0, ctx.input(0));
  return status();
}

status avg_pool_grad_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 4));
  window_attrs w;
  TROUPE_RETURN_IF_ERROR(read_window_attrs(ctx, /*conv=*/false, &w));
  std::optional<partial_shape> sizes;
  TROUPE_RETURN_IF_ERROR(sizes_input(ctx, 0, "orig_input_shape", &sizes));
  if (!sizes) {
    ctx.set_output(0, partial_shape::unknown_of_rank(4));
    return status();
  }
  partial_shape pooled;
  TROUPE_RETURN_IF_ERROR(pool_output(ctx, w, *sizes, &pooled));
  if (!pooled.is_compatible_with(ctx.input(1))) {
    return ctx.error("grad ", ctx.input(1).to_string(), " does not match the pooled shape ",
                     pooled.to_string(), " of orig_input_shape ", sizes->to_string());
  }
  ctx.set_output(0, *sizes);
  return status();
}


// ---- Gradients. ----

using grads = std::vector<output>*;

// The forward node's window attributes, to build its gradient ops with (T is inferred).
std::map<std::string, tf::AttrValue> window_attrs_of(const node& forward) {
  std::map<std::string, tf::AttrValue> attrs;
  for (const char* name : {"strides", "padding", "explicit_paddings", "data_format", "dilations",
                           "use_cudnn_on_gpu", "ksize"}) {
    auto it = forward.def.attr().find(name);
    if (it != forward.def.attr().end()) attrs[name] = it->second;
  }
  return attrs;
}

output backprop_input(const gradient_context& ctx, const output& input_sizes,
                      const output& filter, const output& dy) {
  return ctx.s.add("Conv2DBackpropInput", {input_sizes, filter, dy}, window_attrs_of(ctx.forward))
      .out();
}
output backprop_filter(const gradient_context& ctx, const output& input,
                       const output& filter_sizes, const output& dy) {
  return ctx.s.add("Conv2DBackpropFilter", {input, filter_sizes, dy}, window_attrs_of(ctx.forward))
      .out();
}
output conv2d(const gradient_context& ctx, const output& input, const output& filter) {
  return ctx.s.add("Conv2D", {input, filter}, window_attrs_of(ctx.forward)).out();
}

// output = conv(input, filter).
status conv2d_grad(const gradient_context& ctx, grads dx) {
  const output& input = ctx.inputs[0];
  const output& filter = ctx.inputs[1];
  const output& dy = ctx.grad_outputs[0];
  *dx = {backprop_input(ctx, shape_of(ctx.s, input), filter, dy),
         backprop_filter(ctx, input, shape_of(ctx.s, filter), dy)};
  return status();
}

// output = conv^T(filter, out_backprop), linear in each of filter and out_backprop.
status conv2d_backprop_input_grad(const gradient_context& ctx, grads dx) {
  const output& filter = ctx.inputs[1];
  const output& dy = ctx.grad_outputs[0];
  *dx = {output(), backprop_filter(ctx, dy, shape_of(ctx.s, filter), ctx.inputs[2]),
         conv2d(ctx, dy, filter)};
  return status();
}

// output = patches(input)^T * out_backprop, linear in each of input and out_backprop.
status conv2d_backprop_filter_grad(const gradient_context& ctx, grads dx) {
  const output& input = ctx.inputs[0];
  const output& dy = ctx.grad_outputs[0];
  *dx = {backprop_input(ctx, shape_of(ctx.s, input), dy, ctx.inputs[2]), output(),
         conv2d(ctx, input, dy)};
  return status();
}

status max_pool_grad_fn(const gradient_context& ctx, grads dx) {
  *dx = {ctx.s
             .add("MaxPoolGrad", {ctx.inputs[0], ctx.outputs[0], ctx.grad_outputs[0]},
                  window_attrs_of(ctx.forward))
             .out()};
  return status();
}

status avg_pool_grad_fn(const gradient_context& ctx, grads dx) {
  *dx = {ctx.s
             .add("AvgPoolGrad", {shape_of(ctx.s, ctx.inputs[0]), ctx.grad_outputs[0]},
                  window_attrs_of(ctx.forward))
             .out()};
  return status();
}

// AvgPoolGrad is linear in grad, and its adjoint is AvgPool.
status avg_pool_grad_grad(const gradient_context& ctx, grads dx) {
  *dx = {output(),
         ctx.s.add("AvgPool", {ctx.grad_outputs[0]}, window_attrs_of(ctx.forward)).out()};
  return status();
}

}  // namespace

void register_conv_ops(op_registry& registry) {
  const char* conv_padding = "padding: {'SAME', 'VALID', 'EXPLICIT'}";
  const char* explicit_paddings = "explicit_paddings: list(int) = []";
  const char* data_format = "data_format: {'NHWC', 'NCHW'} = 'NHWC'";
  const char* dilations = "dilations: list(int) = [1, 1, 1, 1]";

  add_builtin_op(registry, op_schema("Conv2D")
                               .input("input: T")
                               .input("filter: T")
                               .output("output: T")
                               .attr("T: {float, double}")
                               .attr("strides: list(int)")
                               .attr("use_cudnn_on_gpu: bool = true")
                               .attr(conv_padding)
                               .attr(explicit_paddings)
                               .attr(data_format)
                               .attr(dilations)
                               .shape_fn(conv2d_shape)
                               .gradient(conv2d_grad));
  add_builtin_op(registry, op_schema("Conv2DBackpropInput")
                               .input("input_sizes: int32")
                               .input("filter: T")
                               .input("out_backprop: T")
                               .output("output: T")
                               .attr("T: {float, double}")
                               .attr("strides: list(int)")
                               .attr("use_cudnn_on_gpu: bool = true")
                               .attr(conv_padding)
                               .attr(explicit_paddings)
                               .attr(data_format)
                               .attr(dilations)
                               .shape_fn(conv2d_backprop_input_shape)
                               .gradient(conv2d_backprop_input_grad));
  add_builtin_op(registry, op_schema("Conv2DBackpropFilter")
                               .input("input: T")
                               .input("filter_sizes: int32")
                               .input("out_backprop: T")
                               .output("output: T")
                               .attr("T: {float, double}")
                               .attr("strides: list(int)")
                               .attr("use_cudnn_on_gpu: bool = true")
                               .attr(conv_padding)
                               .attr(explicit_paddings)
                               .attr(data_format)
                               .attr(dilations)
                               .shape_fn(conv2d_backprop_filter_shape)
                               .gradient(conv2d_backprop_filter_grad));

  add_builtin_op(registry, op_schema("MaxPool")
                               .input("input: T")
                               .output("output: T")
                               .attr("T: {float, double} = DT_FLOAT")
                               .attr("ksize: list(int) >= 4")
                               .attr("strides: list(int) >= 4")
                               .attr(conv_padding)
                               .attr(explicit_paddings)
                               .attr(data_format)
                               .shape_fn(pool_shape)
                               .gradient(max_pool_grad_fn));
  add_builtin_op(registry, op_schema("MaxPoolGrad")
                               .input("orig_input: T")
                               .input("orig_output: T")
                               .input("grad: T")
                               .output("output: T")
                               .attr("ksize: list(int) >= 4")
                               .attr("strides: list(int) >= 4")
                               .attr(conv_padding)
                               .attr(explicit_paddings)
                               .attr(data_format)
                               .attr("T: {float, double} = DT_FLOAT")
                               .shape_fn(max_pool_grad_shape));
  add_builtin_op(registry, op_schema("AvgPool")
                               .input("value: T")
                               .output("output: T")
                               .attr("ksize: list(int) >= 4")
                               .attr("strides: list(int) >= 4")
                               .attr("padding: {'SAME', 'VALID'}")
                               .attr(data_format)
                               .attr("T: {float, double}")
                               .shape_fn(pool_shape)
                               .gradient(avg_pool_grad_fn));
  add_builtin_op(registry, op_schema("AvgPoolGrad")
                               .input("orig_input_shape: int32")
                               .input("grad: T")
                               .output("output: T")
                               .attr("ksize: list(int) >= 4")
                               .attr("strides: list(int) >= 4")
                               .attr("padding: {'SAME', 'VALID'}")
                               .attr(data_format)
                               .attr("T: {float, double}")
                               .shape_fn(avg_pool_grad_shape)
                               .gradient(avg_pool_grad_grad));
}

}  // namespace troupe::graph
