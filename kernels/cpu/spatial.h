// Sliding 2-D windows over images, shared by the convolution and pooling kernels: reading
// the window attributes (strides, dilations or ksize, padding, explicit_paddings,
// data_format) once in a kernel's constructor, TensorFlow's output-size and padding rules,
// and the NCHW <-> NHWC transposes that let NCHW run on the NHWC code.
//
// Padding (TensorFlow's rules, per spatial dimension, with eff = (window - 1) * dilation + 1):
//   VALID     out = ceil((in - eff + 1) / stride), no padding; eff > in is an error
//   SAME      out = ceil(in / stride), pad_before = max(0, (out - 1) * stride + eff - in) / 2
//   EXPLICIT  out = (in + before + after - eff) / stride + 1, pads from explicit_paddings
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/attr.h"
#include "kernels/kernel.h"

namespace troupe::kernels {

enum class padding_kind { valid, same, explicit_ };

// The window attributes of one node, validated.
struct window_options {
  bool nchw = false;
  std::int64_t window_h = 1, window_w = 1;  // pools: ksize; convolutions: the filter's
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t dilation_h = 1, dilation_w = 1;
  padding_kind padding = padding_kind::valid;
  std::string padding_name = "VALID";
  std::int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;  // EXPLICIT only

  // "strides [1,2,2,1], padding SAME" (and dilations when not 1): for error messages.
  std::string describe() const {
    std::string s = str_cat("strides ", stride_h, "x", stride_w, ", padding ", padding_name);
    if (dilation_h != 1 || dilation_w != 1) s += str_cat(", dilations ", dilation_h, "x", dilation_w);
    return s;
  }
};

inline std::string list_to_string(const std::vector<std::int64_t>& values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) s += str_cat(i > 0 ? "," : "", values[i]);
  return s + "]";
}

// Reads a 4-entry per-dimension list attribute (strides, dilations, ksize) into its H and W
// entries; the batch and channel entries must be 1.
inline status read_spatial_pair(const tf::NodeDef& node, std::string_view attr, bool nchw,
                                std::int64_t* h, std::int64_t* w) {
  std::vector<std::int64_t> values;
  TROUPE_RETURN_IF_ERROR(graph::get_attr(node, attr, &values));
  const char* format = nchw ? "NCHW" : "NHWC";
  if (values.size() != 4) {
    return invalid_argument_error(attr, " must have 4 entries, one per dimension of ", format,
                                  ", but is ", list_to_string(values));
  }
  std::size_t batch = 0, channel = nchw ? 1 : 3, height = nchw ? 2 : 1, width = nchw ? 3 : 2;
  if (values[batch] != 1 || values[channel] != 1) {
    return invalid_argument_error(attr, " ", list_to_string(values),
                                  " must be 1 in the batch and channel dimensions (", format, ")");
  }
  if (values[height] < 1 || values[width] < 1) {
    return invalid_argument_error(attr, " ", list_to_string(values),
                                  " must be at least 1 in the spatial dimensions");
  }
  *h = values[height];
  *w = values[width];
  return status();
}

// Reads data_format, strides, padding, explicit_paddings (when the op has it) and, when
// asked, dilations (convolutions) or ksize (pools).
inline status read_window_options(const tf::NodeDef& node, bool with_dilations, bool with_ksize,
                                  window_options* o) {
  std::string data_format = "NHWC";
  if (node.attr().count("data_format") > 0) {
    TROUPE_RETURN_IF_ERROR(graph::get_attr(node, "data_format", &data_format));
  }
  if (data_format != "NHWC" && data_format != "NCHW") {
    return invalid_argument_error("data_format must be NHWC or NCHW, not '", data_format, "'");
  }
  o->nchw = data_format == "NCHW";
  TROUPE_RETURN_IF_ERROR(read_spatial_pair(node, "strides", o->nchw, &o->stride_h, &o->stride_w));
  if (with_dilations) {
    TROUPE_RETURN_IF_ERROR(
        read_spatial_pair(node, "dilations", o->nchw, &o->dilation_h, &o->dilation_w));
  }
  if (with_ksize) {
    TROUPE_RETURN_IF_ERROR(read_spatial_pair(node, "ksize", o->nchw, &o->window_h, &o->window_w));
  }
  TROUPE_RETURN_IF_ERROR(graph::get_attr(node, "padding", &o->padding_name));
  if (o->padding_name == "VALID") {
    o->padding = padding_kind::valid;
  } else if (o->padding_name == "SAME") {
    o->padding = padding_kind::same;
  } else if (o->padding_name == "EXPLICIT") {
    o->padding = padding_kind::explicit_;
  } else {
    return invalid_argument_error("padding must be SAME, VALID or EXPLICIT, not '",
                                  o->padding_name, "'");
  }
  std::vector<std::int64_t> pads;
  if (node.attr().count("explicit_paddings") > 0) {
    TROUPE_RETURN_IF_ERROR(graph::get_attr(node, "explicit_paddings", &pads));
  }
  if (o->padding != padding_kind::explicit_) {
    if (!pads.empty()) {
      return invalid_argument_error("explicit_paddings ", list_to_string(pads),
                                    " must be empty unless padding is EXPLICIT");
    }
    return status();
  }
  // Pairs (before, after) per dimension, in data_format order.
  std::size_t batch = 0, channel = o->nchw ? 1 : 3, height = o->nchw ? 2 : 1,
              width = o->nchw ? 3 : 2;
  bool valid = pads.size() == 8 && pads[2 * batch] == 0 && pads[2 * batch + 1] == 0 &&
               pads[2 * channel] == 0 && pads[2 * channel + 1] == 0;
  for (std::int64_t p : pads) valid = valid && p >= 0;
  if (!valid) {
    return invalid_argument_error(
        "explicit_paddings ", list_to_string(pads),
        " must be 8 non-negative values (before, after per dimension of ", data_format,
        ") that are 0 in the batch and channel dimensions");
  }
  o->pad_top = pads[2 * height];
  o->pad_bottom = pads[2 * height + 1];
  o->pad_left = pads[2 * width];
  o->pad_right = pads[2 * width + 1];
  return status();
}

// The output size and padding before of one spatial dimension.
inline status window_output_size(std::string_view dim_name, std::int64_t in,
                                 std::int64_t window, std::int64_t dilation, std::int64_t stride,
                                 const window_options& o, std::int64_t explicit_before,
                                 std::int64_t explicit_after, std::int64_t* out,
                                 std::int64_t* pad_before) {
  std::int64_t effective = (window - 1) * dilation + 1;
  switch (o.padding) {
    case padding_kind::valid:
      if (effective > in) break;
      *out = (in - effective + stride) / stride;
      *pad_before = 0;
      return status();
    case padding_kind::same: {
      *out = (in + stride - 1) / stride;
      std::int64_t total = std::max<std::int64_t>(0, (*out - 1) * stride + effective - in);
      *pad_before = total / 2;
      return status();
    }
    case padding_kind::explicit_:
      if (effective > in + explicit_before + explicit_after) break;
      *out = (in + explicit_before + explicit_after - effective) / stride + 1;
      *pad_before = explicit_before;
      return status();
  }
  return invalid_argument_error("the window's ", dim_name, " of ", effective,
                                dilation > 1 ? " (dilated)" : "", " is larger than the input's ",
                                dim_name, " of ", in,
                                o.padding == padding_kind::explicit_ ? " plus its explicit padding"
                                                                     : "",
                                " with ", o.padding_name, " padding");
}

// The geometry of one 2-D window operation on NHWC images.
struct window_geometry {
  std::int64_t batch = 0, in_h = 0, in_w = 0, channels = 0;
  std::int64_t window_h = 1, window_w = 1;
  std::int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  std::int64_t pad_top = 0, pad_left = 0;
  std::int64_t out_h = 0, out_w = 0;
};

// The fields of `g` other than its batch, and a convolution's output channels, in a fixed
// order: the part of a cache key that names a convolution's geometry.
using geometry_key = std::array<std::int64_t, 14>;
inline geometry_key key_of(const window_geometry& g, std::int64_t out_c) {
  return {g.in_h,       g.in_w,       g.channels, g.window_h, g.window_w, out_c, g.stride_h,
          g.stride_w,   g.dilation_h, g.dilation_w, g.pad_top, g.pad_left, g.out_h, g.out_w};
}

// `head` followed by `key_of(g, out_c)`.
template <std::size_t N>
std::array<std::int64_t, N + 14> prefixed_key(const std::array<std::int64_t, N>& head, const window_geometry& g,
                                              std::int64_t out_c) {
  std::array<std::int64_t, N + 14> key{};
  const geometry_key tail = key_of(g, out_c);
  std::copy(head.begin(), head.end(), key.begin());
  std::copy(tail.begin(), tail.end(), key.begin() + N);
  return key;
}

// The geometry for an NHWC input of [batch, in_h, in_w, channels] and a window of
// window_h x window_w (the filter's or ksize).
inline status make_window_geometry(std::int64_t batch, std::int64_t in_h, std::int64_t in_w,
                                   std::int64_t channels, std::int64_t window_h,
                                   std::int64_t window_w, const window_options& o,
                                   window_geometry* g) {
  g->batch = batch;
  g->in_h = in_h;
  g->in_w = in_w;
  g->channels = channels;
  g->window_h = window_h;
  g->window_w = window_w;
  g->stride_h = o.stride_h;
  g->stride_w = o.stride_w;
  g->dilation_h = o.dilation_h;
  g->dilation_w = o.dilation_w;
  TROUPE_RETURN_IF_ERROR(window_output_size("height", in_h, window_h, o.dilation_h, o.stride_h,
                                            o, o.pad_top, o.pad_bottom, &g->out_h, &g->pad_top));
  return window_output_size("width", in_w, window_w, o.dilation_w, o.stride_w, o, o.pad_left,
                            o.pad_right, &g->out_w, &g->pad_left);
}

// The NHWC shape of a tensor given in `nchw` or NHWC layout (REQUIRES rank 4).
inline tensor_shape to_nhwc_shape(const tensor_shape& s, bool nchw) {
  return nchw ? tensor_shape{s.dim(0), s.dim(2), s.dim(3), s.dim(1)} : s;
}
inline tensor_shape from_nhwc_shape(const tensor_shape& s, bool nchw) {
  return nchw ? tensor_shape{s.dim(0), s.dim(3), s.dim(1), s.dim(2)} : s;
}

// ---- Pooling (the CPU and GPU kernels' checks) ----

inline const char* format_name(const window_options& o) { return o.nchw ? "NCHW" : "NHWC"; }

// The geometry of pooling an input of `shape` (in o's data_format) with o's ksize; errors
// name the operand as `what`.
inline status pool_geometry(const window_options& o, const tensor_shape& shape, std::string_view what,
                            window_geometry* g) {
  if (shape.rank() != 4) {
    return invalid_argument_error(what, " must be 4-D (", format_name(o), ") but is ", shape);
  }
  tensor_shape nhwc = to_nhwc_shape(shape, o.nchw);
  status s = make_window_geometry(nhwc.dim(0), nhwc.dim(1), nhwc.dim(2), nhwc.dim(3), o.window_h, o.window_w, o, g);
  if (!s.ok()) {
    return invalid_argument_error(what, " ", shape, " (", format_name(o), "), ksize ", o.window_h, "x", o.window_w,
                                  ", ", o.describe(), ": ", s.message());
  }
  return status();
}

// The pooled output's shape, in o's data_format.
inline tensor_shape pooled_shape(const window_options& o, const window_geometry& g) {
  return from_nhwc_shape(tensor_shape{g.batch, g.out_h, g.out_w, g.channels}, o.nchw);
}

// A gradient-side operand `what` must have the pooled output's shape.
inline status check_pooled_shape(const window_options& o, const window_geometry& g, std::string_view what,
                                 const tensor_shape& got) {
  tensor_shape want = pooled_shape(o, g);
  if (got != want) {
    return invalid_argument_error(what, " ", got, " must have the pooled output's shape ", want, " (", format_name(o),
                                  ", ksize ", o.window_h, "x", o.window_w, ", ", o.describe(), ")");
  }
  return status();
}

// dst[n, h, w, c] = src[n, c, h, w] (to_nhwc) or the reverse, split over the pool by image.
template <class T>
void transpose_images(const T* src, T* dst, const tensor_shape& nhwc, bool to_nhwc,
                      compute_pool& pool) {
  std::int64_t n = nhwc.dim(0), h = nhwc.dim(1), w = nhwc.dim(2), c = nhwc.dim(3);
  std::int64_t plane = h * w;
  pool.parallel_for(n, static_cast<double>(plane * c) * 0.5, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const T* s = src + i * plane * c;
      T* d = dst + i * plane * c;
      for (std::int64_t ch = 0; ch < c; ++ch) {
        for (std::int64_t p = 0; p < plane; ++p) {
          if (to_nhwc) d[p * c + ch] = s[ch * plane + p];
          else d[ch * plane + p] = s[p * c + ch];
        }
      }
    }
  });
}

// An NHWC copy of `t` when `nchw`, else `t` itself (sharing its buffer).
template <class T>
tensor nhwc_view(const tensor& t, bool nchw, compute_pool& pool) {
  if (!nchw) return t;
  tensor_shape nhwc = to_nhwc_shape(t.shape(), true);
  tensor out(t.type(), nhwc);
  transpose_images<T>(t.data<T>(), out.data<T>(), nhwc, true, pool);
  return out;
}

}  // namespace troupe::kernels
