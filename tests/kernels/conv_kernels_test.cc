// Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter: the kernels against direct loops in
// double (explicit padding, written independently of the kernels' im2col) on a table of
// shapes (LeNet-like, odd sizes, strides, dilations, SAME/VALID/EXPLICIT, 1x1, chunk
// boundaries), both data formats and both dtypes; the backprops against central
// differences of the forward kernel; the gradient functions through a graph built by
// add_gradients and evaluated node by node; the error paths and the shape functions.
// float runs on oneDNN (kernels/cpu/onednn_conv.h) or im2col + gemm, whichever each
// geometry measures faster (and, for the forward pass and the filter gradient, the direct
// AVX-512 kernels of kernels/cpu/direct_conv.h, also tested here on their own), and double
// on im2col + gemm; CTest runs this file again with TROUPE_CONV=im2col, with
// TROUPE_CONV=direct and with each oneDNN variant fixed (TROUPE_CONV=onednn,
// TROUPE_CONV_VARIANT=nhwc, nchw, preferred, winograd) so that float covers every path.
// A run that fixes a path this processor cannot take (direct or Winograd without AVX-512)
// is skipped; the direct kernels' own test case (tag [.direct]) runs only in the
// TROUPE_CONV=direct run. Random data from seed 42.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/direct_conv.h"
#include "kernels/cpu/onednn_conv.h"
#include "kernels/kernel_runner.h"
#include "tests/skip.h"

namespace troupe {
namespace {

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == value;
}

const testing::skip_when path_unavailable([]() -> std::optional<std::string> {
  const char* why = kernels::avx512_hidden() ? "TROUPE_HIDE_AVX512 hides AVX-512" : "this processor has no AVX-512";
  if (env_is("TROUPE_CONV", "direct") && !kernels::direct_conv::available()) {
    return str_cat("TROUPE_CONV=direct fixes the direct AVX-512 convolution kernels, and ", why);
  }
  if (env_is("TROUPE_CONV_VARIANT", "winograd") && !kernels::onednn::has_winograd()) {
    return str_cat("TROUPE_CONV_VARIANT=winograd fixes oneDNN's Winograd convolutions, which oneDNN has only with "
                   "AVX-512, and ", why);
  }
  return std::nullopt;
});

struct conv_case {
  std::int64_t batch, in_h, in_w, in_c, k_h, k_w, out_c;
  std::int64_t stride_h, stride_w, dilation_h, dilation_w;
  std::string padding;                     // SAME, VALID or EXPLICIT
  std::vector<std::int64_t> pads = {};     // EXPLICIT: top, bottom, left, right
};

std::string describe(const conv_case& c) {
  return str_cat("input ", c.batch, "x", c.in_h, "x", c.in_w, "x", c.in_c, ", filter ", c.k_h,
                 "x", c.k_w, "x", c.in_c, "x", c.out_c, ", strides ", c.stride_h, "x",
                 c.stride_w, ", dilations ", c.dilation_h, "x", c.dilation_w, ", ", c.padding);
}

// The reference's own padding math (TensorFlow's documented rules).
struct ref_geometry {
  std::int64_t out_h, out_w, pad_top, pad_left;
};
ref_geometry ref_geometry_of(const conv_case& c) {
  auto one = [&](std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d, std::int64_t before,
                 std::int64_t after, std::int64_t* out, std::int64_t* pad) {
    std::int64_t eff = (k - 1) * d + 1;
    if (c.padding == "VALID") {
      *out = static_cast<std::int64_t>(std::ceil(double(in - eff + 1) / double(s)));
      *pad = 0;
    } else if (c.padding == "SAME") {
      *out = static_cast<std::int64_t>(std::ceil(double(in) / double(s)));
      *pad = std::max<std::int64_t>(0, (*out - 1) * s + eff - in) / 2;
    } else {
      *out = (in + before + after - eff) / s + 1;
      *pad = before;
    }
  };
  ref_geometry g{};
  std::int64_t top = c.pads.empty() ? 0 : c.pads[0], bottom = c.pads.empty() ? 0 : c.pads[1];
  std::int64_t left = c.pads.empty() ? 0 : c.pads[2], right = c.pads.empty() ? 0 : c.pads[3];
  one(c.in_h, c.k_h, c.stride_h, c.dilation_h, top, bottom, &g.out_h, &g.pad_top);
  one(c.in_w, c.k_w, c.stride_w, c.dilation_w, left, right, &g.out_w, &g.pad_left);
  return g;
}

// Calls fn(n, oy, ox, ky, kx, iy, ix) for every in-bounds tap of every output pixel.
template <class F>
void for_each_tap(const conv_case& c, const ref_geometry& g, F fn) {
  for (std::int64_t n = 0; n < c.batch; ++n)
    for (std::int64_t oy = 0; oy < g.out_h; ++oy)
      for (std::int64_t ox = 0; ox < g.out_w; ++ox)
        for (std::int64_t ky = 0; ky < c.k_h; ++ky)
          for (std::int64_t kx = 0; kx < c.k_w; ++kx) {
            std::int64_t iy = oy * c.stride_h - g.pad_top + ky * c.dilation_h;
            std::int64_t ix = ox * c.stride_w - g.pad_left + kx * c.dilation_w;
            if (iy < 0 || iy >= c.in_h || ix < 0 || ix >= c.in_w) continue;
            fn(n, oy, ox, ky, kx, iy, ix);
          }
}

// NHWC data as doubles; filters HWIO.
struct ref_conv {
  const conv_case& c;
  ref_geometry g;
  explicit ref_conv(const conv_case& cc) : c(cc), g(ref_geometry_of(cc)) {}
  std::int64_t in_at(std::int64_t n, std::int64_t y, std::int64_t x, std::int64_t ch) const {
    return ((n * c.in_h + y) * c.in_w + x) * c.in_c + ch;
  }
  std::int64_t out_at(std::int64_t n, std::int64_t y, std::int64_t x, std::int64_t ch) const {
    return ((n * g.out_h + y) * g.out_w + x) * c.out_c + ch;
  }
  std::int64_t f_at(std::int64_t ky, std::int64_t kx, std::int64_t i, std::int64_t o) const {
    return ((ky * c.k_w + kx) * c.in_c + i) * c.out_c + o;
  }
  std::vector<double> forward(const std::vector<double>& x, const std::vector<double>& f) const {
    std::vector<double> y(static_cast<std::size_t>(c.batch * g.out_h * g.out_w * c.out_c), 0.0);
    for_each_tap(c, g, [&](auto n, auto oy, auto ox, auto ky, auto kx, auto iy, auto ix) {
      for (std::int64_t i = 0; i < c.in_c; ++i)
        for (std::int64_t o = 0; o < c.out_c; ++o)
          y[out_at(n, oy, ox, o)] += x[in_at(n, iy, ix, i)] * f[f_at(ky, kx, i, o)];
    });
    return y;
  }
  std::vector<double> backprop_input(const std::vector<double>& f, const std::vector<double>& dy) const {
    std::vector<double> dx(static_cast<std::size_t>(c.batch * c.in_h * c.in_w * c.in_c), 0.0);
    for_each_tap(c, g, [&](auto n, auto oy, auto ox, auto ky, auto kx, auto iy, auto ix) {
      for (std::int64_t i = 0; i < c.in_c; ++i)
        for (std::int64_t o = 0; o < c.out_c; ++o)
          dx[in_at(n, iy, ix, i)] += dy[out_at(n, oy, ox, o)] * f[f_at(ky, kx, i, o)];
    });
    return dx;
  }
  std::vector<double> backprop_filter(const std::vector<double>& x, const std::vector<double>& dy) const {
    std::vector<double> df(static_cast<std::size_t>(c.k_h * c.k_w * c.in_c * c.out_c), 0.0);
    for_each_tap(c, g, [&](auto n, auto oy, auto ox, auto ky, auto kx, auto iy, auto ix) {
      for (std::int64_t i = 0; i < c.in_c; ++i)
        for (std::int64_t o = 0; o < c.out_c; ++o)
          df[f_at(ky, kx, i, o)] += dy[out_at(n, oy, ox, o)] * x[in_at(n, iy, ix, i)];
    });
    return df;
  }
};

std::vector<double> random_values(std::int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(count));
  for (double& x : v) x = dist(rng);
  return v;
}

// A tensor of NHWC (or, when nchw, NCHW) layout holding NHWC `values` of `nhwc` dims.
template <class T>
tensor image_tensor(const std::vector<double>& values, const std::vector<std::int64_t>& nhwc,
                    bool nchw) {
  std::int64_t n = nhwc[0], h = nhwc[1], w = nhwc[2], c = nhwc[3];
  tensor t(dtype_of<T>, nchw ? tensor_shape{n, c, h, w} : tensor_shape{n, h, w, c});
  T* p = t.data<T>();
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x)
        for (std::int64_t ch = 0; ch < c; ++ch) {
          std::int64_t from = ((b * h + y) * w + x) * c + ch;
          std::int64_t to = nchw ? ((b * c + ch) * h + y) * w + x : from;
          p[to] = static_cast<T>(values[static_cast<std::size_t>(from)]);
        }
  return t;
}

// The NHWC values of an image tensor in NHWC or NCHW layout, as doubles.
template <class T>
std::vector<double> image_values(const tensor& t, bool nchw) {
  std::int64_t n = t.dim(0), c = nchw ? t.dim(1) : t.dim(3), h = nchw ? t.dim(2) : t.dim(1),
               w = nchw ? t.dim(3) : t.dim(2);
  std::vector<double> out(static_cast<std::size_t>(t.num_elements()));
  const T* p = t.data<T>();
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x)
        for (std::int64_t ch = 0; ch < c; ++ch) {
          std::int64_t to = ((b * h + y) * w + x) * c + ch;
          std::int64_t from = nchw ? ((b * c + ch) * h + y) * w + x : to;
          out[static_cast<std::size_t>(to)] = static_cast<double>(p[from]);
        }
  return out;
}

template <class T>
tensor flat_tensor(const std::vector<double>& values, tensor_shape shape) {
  tensor t(dtype_of<T>, std::move(shape));
  for (std::size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = static_cast<T>(values[i]);
  return t;
}

template <class T>
std::vector<double> flat_values(const tensor& t) {
  std::vector<double> out;
  for (T v : t.flat<T>()) out.push_back(static_cast<double>(v));
  return out;
}

// Within rel * max(1, |want|) per element, relative to the largest |want| (sums of many
// products lose relative precision in float when they cancel).
void check_close(const std::vector<double>& got, const std::vector<double>& want, double rel,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  double scale = 1.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= rel * scale)) {
      FAIL_CHECK(what << ": element " << i << " = " << got[i] << ", want " << want[i]
                      << " (seed 42)");
      return;
    }
  }
}

tf::NodeDef conv_node(const std::string& op, dtype type, const conv_case& c, bool nchw) {
  tf::NodeDef node;
  node.set_name("conv");
  node.set_op(op);
  auto& attrs = *node.mutable_attr();
  attrs["T"] = graph::attr_value(type);
  auto per_dim = [&](std::int64_t h, std::int64_t w) {
    return graph::attr_value(nchw ? std::vector<std::int64_t>{1, 1, h, w}
                                  : std::vector<std::int64_t>{1, h, w, 1});
  };
  attrs["strides"] = per_dim(c.stride_h, c.stride_w);
  attrs["dilations"] = per_dim(c.dilation_h, c.dilation_w);
  attrs["padding"] = graph::attr_value(c.padding);
  attrs["data_format"] = graph::attr_value(nchw ? "NCHW" : "NHWC");
  if (c.padding == "EXPLICIT") {
    std::vector<std::int64_t> spatial = {c.pads[0], c.pads[1], c.pads[2], c.pads[3]};
    attrs["explicit_paddings"] = graph::attr_value(
        nchw ? std::vector<std::int64_t>{0, 0, 0, 0, spatial[0], spatial[1], spatial[2], spatial[3]}
             : std::vector<std::int64_t>{0, 0, spatial[0], spatial[1], spatial[2], spatial[3], 0, 0});
  }
  return node;
}

tensor sizes_tensor(const std::vector<std::int64_t>& dims) {
  std::vector<std::int32_t> v(dims.begin(), dims.end());
  return tensor::from_vector<std::int32_t>(v);
}

const std::vector<conv_case>& conv_cases() {
  static const std::vector<conv_case> cases = {
      {2, 28, 28, 1, 5, 5, 32, 1, 1, 1, 1, "SAME"},    // LeNet conv1
      {3, 14, 14, 32, 5, 5, 8, 1, 1, 1, 1, "SAME"},    // LeNet conv2 (several im2col chunks)
      {1, 7, 9, 3, 3, 3, 4, 1, 1, 1, 1, "VALID"},
      {2, 7, 9, 3, 3, 2, 5, 2, 2, 1, 1, "SAME"},       // odd sizes, stride 2
      {2, 8, 8, 3, 3, 3, 2, 2, 2, 1, 1, "SAME"},       // even sizes: padding only after
      {1, 11, 10, 2, 3, 3, 3, 1, 1, 2, 2, "SAME"},     // dilation 2
      {2, 11, 10, 2, 3, 2, 3, 1, 2, 2, 1, "VALID"},    // mixed dilation and stride
      {3, 5, 6, 4, 1, 1, 6, 1, 1, 1, 1, "VALID"},      // 1x1: a plain gemm
      {2, 5, 6, 4, 1, 1, 6, 2, 2, 1, 1, "SAME"},       // 1x1 with stride: im2col
      {1, 23, 23, 3, 11, 11, 4, 4, 4, 1, 1, "VALID"},  // AlexNet-like conv1
      {2, 5, 5, 2, 5, 5, 3, 1, 1, 1, 1, "VALID"},      // filter as large as the input
      {1, 4, 4, 2, 7, 7, 2, 3, 3, 1, 1, "SAME"},       // filter larger than the input
      {2, 6, 5, 2, 3, 3, 2, 2, 1, 1, 1, "EXPLICIT", {1, 2, 0, 3}},
      {2, 6, 7, 3, 3, 3, 4, 3, 3, 1, 1, "VALID"},      // stride skips input rows
      {2, 6, 5, 130, 3, 3, 20, 1, 1, 1, 1, "SAME"},    // many channels: oneDNN's blocked backward-data
      {2, 9, 9, 32, 3, 3, 48, 1, 1, 1, 1, "SAME"},     // 3x3 at stride 1, channels of 16s: Winograd
      {2, 17, 19, 3, 5, 5, 70, 2, 2, 1, 1, "SAME"},    // 70 channels: a tile of 64 and one of 6
      {1, 30, 30, 3, 11, 11, 64, 4, 4, 1, 1, "EXPLICIT", {2, 3, 5, 1}},  // AlexNet-like, padded unevenly
  };
  return cases;
}

template <class T>
void check_conv_case(const conv_case& c, bool nchw, compute_pool& pool, std::mt19937& rng) {
  INFO(describe(c) << (nchw ? ", NCHW" : ", NHWC") << ", " << dtype_name(dtype_of<T>));
  ref_conv ref(c);
  std::vector<std::int64_t> in_dims = {c.batch, c.in_h, c.in_w, c.in_c};
  std::vector<std::int64_t> out_dims = {c.batch, ref.g.out_h, ref.g.out_w, c.out_c};
  tensor_shape filter_shape{c.k_h, c.k_w, c.in_c, c.out_c};
  std::vector<double> x = random_values(c.batch * c.in_h * c.in_w * c.in_c, rng);
  std::vector<double> f = random_values(filter_shape.num_elements(), rng);
  std::vector<double> dy = random_values(c.batch * ref.g.out_h * ref.g.out_w * c.out_c, rng);
  tensor x_t = image_tensor<T>(x, in_dims, nchw);
  tensor f_t = flat_tensor<T>(f, filter_shape);
  tensor dy_t = image_tensor<T>(dy, out_dims, nchw);
  const double rel = std::is_same_v<T, float> ? 1e-5 : 1e-12;

  auto y = kernels::run_kernel(conv_node("Conv2D", dtype_of<T>, c, nchw), {x_t, f_t}, &pool);
  REQUIRE(y.ok());
  CHECK((*y)[0].shape() == dy_t.shape());
  check_close(image_values<T>((*y)[0], nchw), ref.forward(x, f), rel, "Conv2D");

  tensor in_sizes = sizes_tensor(nchw ? std::vector<std::int64_t>{c.batch, c.in_c, c.in_h, c.in_w} : in_dims);
  auto dx = kernels::run_kernel(conv_node("Conv2DBackpropInput", dtype_of<T>, c, nchw),
                                {in_sizes, f_t, dy_t}, &pool);
  REQUIRE(dx.ok());
  CHECK((*dx)[0].shape() == x_t.shape());
  check_close(image_values<T>((*dx)[0], nchw), ref.backprop_input(f, dy), rel,
              "Conv2DBackpropInput");

  auto df = kernels::run_kernel(conv_node("Conv2DBackpropFilter", dtype_of<T>, c, nchw),
                                {x_t, sizes_tensor(filter_shape.dims()), dy_t}, &pool);
  REQUIRE(df.ok());
  CHECK((*df)[0].shape() == filter_shape);
  check_close(flat_values<T>((*df)[0]), ref.backprop_filter(x, dy), rel, "Conv2DBackpropFilter");
}

TEST_CASE("Conv2D and its backprops match direct loops") {
  std::mt19937 rng(42);
  compute_pool one(1), two(2);
  for (const conv_case& c : conv_cases()) {
    for (bool nchw : {false, true}) {
      check_conv_case<float>(c, nchw, one, rng);
      check_conv_case<double>(c, nchw, two, rng);
    }
  }
}

TEST_CASE("the direct AVX-512 kernels match direct loops", "[.direct]") {
  REQUIRE(kernels::direct_conv::available());  // its CTest entry is skipped where they are not
  std::mt19937 rng(42);
  compute_pool one(1), three(3);
  for (const conv_case& c : conv_cases()) {
    INFO(describe(c));
    ref_conv ref(c);
    kernels::window_geometry g;
    g.batch = c.batch;
    g.in_h = c.in_h;
    g.in_w = c.in_w;
    g.channels = c.in_c;
    g.window_h = c.k_h;
    g.window_w = c.k_w;
    g.stride_h = c.stride_h;
    g.stride_w = c.stride_w;
    g.dilation_h = c.dilation_h;
    g.dilation_w = c.dilation_w;
    g.pad_top = ref.g.pad_top;
    g.pad_left = ref.g.pad_left;
    g.out_h = ref.g.out_h;
    g.out_w = ref.g.out_w;
    std::vector<double> x = random_values(c.batch * c.in_h * c.in_w * c.in_c, rng);
    std::vector<double> f = random_values(c.k_h * c.k_w * c.in_c * c.out_c, rng);
    std::vector<double> dy = random_values(c.batch * g.out_h * g.out_w * c.out_c, rng);
    const std::vector<float> xf(x.begin(), x.end()), ff(f.begin(), f.end()), dyf(dy.begin(), dy.end());
    for (compute_pool* pool : {&one, &three}) {
      // Poisoned outputs: every element must be written.
      std::vector<float> y(dy.size(), std::nanf("")), df(f.size(), std::nanf(""));
      kernels::direct_conv::forward(g, c.out_c, xf.data(), ff.data(), y.data(), *pool);
      check_close(std::vector<double>(y.begin(), y.end()), ref.forward(x, f), 1e-5, "direct forward");
      kernels::direct_conv::backprop_filter(g, c.out_c, xf.data(), dyf.data(), df.data(), *pool);
      check_close(std::vector<double>(df.begin(), df.end()), ref.backprop_filter(x, dy), 1e-5,
                  "direct filter gradient");
    }
  }
}

TEST_CASE("Conv2D on a larger batch with several threads") {
  std::mt19937 rng(42);
  compute_pool four(4);
  check_conv_case<float>({5, 24, 20, 6, 5, 3, 7, 1, 2, 1, 1, "SAME"}, false, four, rng);
  check_conv_case<float>({5, 7, 6, 144, 3, 3, 17, 1, 1, 1, 1, "SAME"}, false, four, rng);
}

TEST_CASE("float convolutions give the same bits on every call of a geometry") {
  // The first call of a geometry times the paths and variants; its output must come from
  // the one later calls take, so that a step computes the same as the next.
  std::mt19937 rng(42);
  compute_pool two(2);
  for (const conv_case& c : {conv_case{4, 13, 13, 32, 3, 3, 48, 1, 1, 1, 1, "SAME"},
                             conv_case{2, 45, 45, 3, 11, 11, 16, 4, 4, 1, 1, "VALID"},
                             conv_case{8, 14, 14, 6, 5, 5, 16, 1, 1, 1, 1, "VALID"}}) {
    for (bool nchw : {false, true}) {
      INFO(describe(c) << (nchw ? ", NCHW" : ", NHWC"));
      ref_conv ref(c);
      std::vector<std::int64_t> in_dims = {c.batch, c.in_h, c.in_w, c.in_c};
      std::vector<std::int64_t> out_dims = {c.batch, ref.g.out_h, ref.g.out_w, c.out_c};
      tensor_shape filter_shape{c.k_h, c.k_w, c.in_c, c.out_c};
      tensor x = image_tensor<float>(random_values(c.batch * c.in_h * c.in_w * c.in_c, rng), in_dims, nchw);
      tensor f = flat_tensor<float>(random_values(filter_shape.num_elements(), rng), filter_shape);
      tensor dy = image_tensor<float>(random_values(c.batch * ref.g.out_h * ref.g.out_w * c.out_c, rng),
                                      out_dims, nchw);
      tensor in_sizes = sizes_tensor(nchw ? std::vector<std::int64_t>{c.batch, c.in_c, c.in_h, c.in_w} : in_dims);
      const std::vector<std::pair<std::string, std::vector<tensor>>> ops = {
          {"Conv2D", {x, f}},
          {"Conv2DBackpropInput", {in_sizes, f, dy}},
          {"Conv2DBackpropFilter", {x, sizes_tensor(filter_shape.dims()), dy}},
      };
      for (const auto& [op, inputs] : ops) {
        INFO(op);
        std::vector<float> first;
        for (int call = 0; call < 3; ++call) {
          auto out = kernels::run_kernel(conv_node(op, dtype::float32, c, nchw), inputs, &two);
          REQUIRE(out.ok());
          std::vector<float> values((*out)[0].data<float>(), (*out)[0].data<float>() + (*out)[0].num_elements());
          if (call == 0) first = values;
          else CHECK(values == first);
        }
      }
    }
  }
}

TEST_CASE("Conv2DBackpropFilter on im2col and the direct kernels gives the same bits on any pool size") {
  // double always runs on im2col + gemm; float where TROUPE_CONV fixes im2col or direct
  // (oneDNN splits the batch by the pool's threads, so its sums depend on the pool size).
  const char* path = std::getenv("TROUPE_CONV");
  const bool float_too = path != nullptr && (std::string(path) == "im2col" || std::string(path) == "direct");
  std::mt19937 rng(42);
  const conv_case c{16, 14, 14, 6, 5, 5, 16, 1, 1, 1, 1, "VALID"};
  ref_conv ref(c);
  tensor_shape filter_shape{c.k_h, c.k_w, c.in_c, c.out_c};
  const std::vector<double> x = random_values(c.batch * c.in_h * c.in_w * c.in_c, rng);
  const std::vector<double> dy = random_values(c.batch * ref.g.out_h * ref.g.out_w * c.out_c, rng);
  auto check = [&]<class T>() {
    INFO(dtype_name(dtype_of<T>));
    tensor x_t = image_tensor<T>(x, {c.batch, c.in_h, c.in_w, c.in_c}, false);
    tensor dy_t = image_tensor<T>(dy, {c.batch, ref.g.out_h, ref.g.out_w, c.out_c}, false);
    std::vector<T> first;
    for (int threads : {1, 2, 3}) {
      compute_pool pool(threads);
      auto df = kernels::run_kernel(conv_node("Conv2DBackpropFilter", dtype_of<T>, c, false),
                                    {x_t, sizes_tensor(filter_shape.dims()), dy_t}, &pool);
      REQUIRE(df.ok());
      const tensor& grad = (*df)[0];
      std::vector<T> got(grad.data<T>(), grad.data<T>() + grad.num_elements());
      if (first.empty()) first = got;
      else CHECK(got == first);
    }
  };
  check.template operator()<double>();
  if (float_too) check.template operator()<float>();
}

// sum(w * Conv2D(x, f)) for double tensors.
double weighted_conv(const conv_case& c, const tensor& x, const tensor& f,
                     const std::vector<double>& w) {
  auto y = kernels::run_kernel(conv_node("Conv2D", dtype::float64, c, false), {x, f});
  REQUIRE(y.ok());
  double total = 0;
  for (std::size_t i = 0; i < w.size(); ++i) total += w[i] * (*y)[0].data<double>()[i];
  return total;
}

// d/dv sum(w * conv) by central differences, perturbing each element of `v` in turn.
std::vector<double> numeric_gradient(const std::function<double()>& loss, tensor& v) {
  const double eps = 1e-6;
  std::vector<double> out;
  for (double& e : v.flat<double>()) {
    double saved = e;
    e = saved + eps;
    double plus = loss();
    e = saved - eps;
    double minus = loss();
    e = saved;
    out.push_back((plus - minus) / (2 * eps));
  }
  return out;
}

TEST_CASE("Conv2D backprops match central differences of the forward kernel") {
  std::mt19937 rng(42);
  const std::vector<conv_case> cases = {
      {2, 5, 6, 2, 3, 3, 3, 1, 1, 1, 1, "SAME"},
      {1, 7, 6, 2, 3, 2, 2, 2, 2, 1, 1, "SAME"},
      {2, 7, 7, 1, 2, 3, 2, 1, 2, 2, 1, "VALID"},
      {1, 5, 4, 2, 2, 2, 2, 2, 1, 1, 1, "EXPLICIT", {0, 1, 2, 0}},
  };
  for (const conv_case& c : cases) {
    INFO(describe(c));
    ref_geometry g = ref_geometry_of(c);
    tensor x = flat_tensor<double>(random_values(c.batch * c.in_h * c.in_w * c.in_c, rng),
                                   {c.batch, c.in_h, c.in_w, c.in_c});
    tensor f = flat_tensor<double>(random_values(c.k_h * c.k_w * c.in_c * c.out_c, rng),
                                   {c.k_h, c.k_w, c.in_c, c.out_c});
    std::vector<double> w = random_values(c.batch * g.out_h * g.out_w * c.out_c, rng);
    tensor w_t = flat_tensor<double>(w, {c.batch, g.out_h, g.out_w, c.out_c});
    auto loss = [&] { return weighted_conv(c, x, f, w); };

    auto dx = kernels::run_kernel(conv_node("Conv2DBackpropInput", dtype::float64, c, false),
                                  {sizes_tensor(x.shape().dims()), f, w_t});
    REQUIRE(dx.ok());
    check_close(flat_values<double>((*dx)[0]), numeric_gradient(loss, x), 1e-7, "d input");
    auto df = kernels::run_kernel(conv_node("Conv2DBackpropFilter", dtype::float64, c, false),
                                  {x, sizes_tensor(f.shape().dims()), w_t});
    REQUIRE(df.ok());
    check_close(flat_values<double>((*df)[0]), numeric_gradient(loss, f), 1e-7, "d filter");
  }
}

// ---- Gradient functions, through a graph. ----

// Evaluates every node of g in topological order with the CPU kernels, feeding
// placeholders by name; returns the value of `fetch`.
tensor evaluate(const graph::graph& g, const std::map<std::string, tensor>& feeds,
                const graph::output& fetch) {
  std::vector<std::vector<tensor>> values(static_cast<std::size_t>(g.num_nodes()));
  for (int id : g.topological_order()) {
    const graph::node& n = g.get(id);
    auto& out = values[static_cast<std::size_t>(id)];
    if (n.op_name() == "Placeholder") {
      out = {feeds.at(n.name())};
      continue;
    }
    std::vector<tensor> inputs;
    for (const graph::endpoint& e : n.inputs) {
      inputs.push_back(values[static_cast<std::size_t>(e.node)][static_cast<std::size_t>(e.index)]);
    }
    auto result = kernels::run_kernel(n.def, inputs);
    INFO("node " << n.name());
    REQUIRE(result.ok());
    out = std::move(*result);
  }
  const graph::node* n = g.find(fetch.node);
  REQUIRE(n != nullptr);
  return values[static_cast<std::size_t>(n->id)][static_cast<std::size_t>(fetch.index)];
}

// d sum(w * op(x[, f])) / d x[, f] from add_gradients, against central differences.
void check_graph_gradient(const std::string& op, std::map<std::string, tf::AttrValue> attrs,
                          std::vector<tensor> args, std::mt19937& rng) {
  INFO(op);
  auto root = graph::scope::new_root();
  std::vector<graph::output> xs;
  std::vector<graph::input> inputs;
  std::map<std::string, tensor> feeds;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string name = str_cat("arg", i);
    xs.push_back(ops::placeholder(root.with_name(name), dtype::float64, args[i].shape()));
    inputs.emplace_back(xs.back());
    feeds[name] = args[i];
  }
  graph::output y = root.add(op, inputs, attrs).out();
  REQUIRE(root.ok());
  REQUIRE(y.shape.fully_defined());
  std::vector<double> w = random_values(y.shape.num_elements(), rng);
  feeds["w"] = flat_tensor<double>(w, y.shape.to_shape());
  graph::output w_in = ops::placeholder(root.with_name("w"), dtype::float64, y.shape);
  auto grads = graph::add_gradients(root, {y}, xs, {w_in});
  REQUIRE(grads.ok());
  auto g = root.to_graph();
  REQUIRE(g.ok());

  tf::NodeDef forward = g->find(y.node)->def;
  for (std::size_t i = 0; i < args.size(); ++i) {
    INFO("argument " << i);
    REQUIRE((*grads)[i].valid());
    tensor analytic = evaluate(*g, feeds, (*grads)[i]);
    auto loss = [&] {
      std::vector<tensor> values;
      for (std::size_t j = 0; j < args.size(); ++j) values.push_back(feeds[str_cat("arg", j)]);
      auto out = kernels::run_kernel(forward, values);
      REQUIRE(out.ok());
      double total = 0;
      for (std::size_t k = 0; k < w.size(); ++k) total += w[k] * (*out)[0].data<double>()[k];
      return total;
    };
    check_close(flat_values<double>(analytic), numeric_gradient(loss, feeds[str_cat("arg", i)]),
                1e-7, op + " gradient");
  }
}

std::map<std::string, tf::AttrValue> window(std::vector<std::int64_t> strides, std::string padding,
                                            std::string data_format = "NHWC") {
  return {{"strides", graph::attr_value(strides)},
          {"padding", graph::attr_value(padding)},
          {"data_format", graph::attr_value(data_format)}};
}

TEST_CASE("Conv2D and pooling gradients built by add_gradients match central differences") {
  std::mt19937 rng(42);
  auto image = [&](tensor_shape s) {
    return flat_tensor<double>(random_values(s.num_elements(), rng), s);
  };
  SECTION("Conv2D, NHWC, stride 2, SAME") {
    check_graph_gradient("Conv2D", window({1, 2, 2, 1}, "SAME"),
                         {image({2, 5, 6, 2}), image({3, 3, 2, 3})}, rng);
  }
  SECTION("Conv2D, NCHW, dilated, VALID") {
    auto attrs = window({1, 1, 1, 1}, "VALID", "NCHW");
    attrs["dilations"] = graph::attr_value(std::vector<std::int64_t>{1, 1, 2, 1});
    check_graph_gradient("Conv2D", attrs, {image({1, 2, 7, 5}), image({2, 3, 2, 2})}, rng);
  }
  SECTION("second order: Conv2DBackpropInput and Conv2DBackpropFilter") {
    auto attrs = window({1, 2, 1, 1}, "SAME");
    // Differentiate w.r.t. filter and out_backprop, with the sizes as constant inputs.
    auto root_check = [&](const std::string& op, tensor sizes, tensor a, tensor b, int sizes_at) {
      auto root = graph::scope::new_root();
      graph::output pa = ops::placeholder(root.with_name("a"), dtype::float64, a.shape());
      graph::output pb = ops::placeholder(root.with_name("b"), dtype::float64, b.shape());
      graph::output ps = ops::constant(root, sizes);
      std::vector<graph::input> in = sizes_at == 0 ? std::vector<graph::input>{ps, pa, pb}
                                                   : std::vector<graph::input>{pa, ps, pb};
      graph::output y = root.add(op, in, attrs).out();
      REQUIRE(root.ok());
      std::vector<double> w = random_values(y.shape.num_elements(), rng);
      graph::output w_in = ops::placeholder(root.with_name("w"), dtype::float64, y.shape);
      auto grads = graph::add_gradients(root, {y}, {pa, pb}, {w_in});
      REQUIRE(grads.ok());
      auto g = root.to_graph();
      REQUIRE(g.ok());
      std::map<std::string, tensor> feeds = {
          {"a", a}, {"b", b}, {"w", flat_tensor<double>(w, y.shape.to_shape())}};
      tf::NodeDef forward = g->find(y.node)->def;
      for (const char* which : {"a", "b"}) {
        INFO(op << " d " << which);
        tensor analytic = evaluate(*g, feeds, (*grads)[which[0] == 'a' ? 0 : 1]);
        auto loss = [&] {
          std::vector<tensor> args = sizes_at == 0
                                         ? std::vector<tensor>{sizes, feeds["a"], feeds["b"]}
                                         : std::vector<tensor>{feeds["a"], sizes, feeds["b"]};
          auto out = kernels::run_kernel(forward, args);
          REQUIRE(out.ok());
          double total = 0;
          for (std::size_t k = 0; k < w.size(); ++k) total += w[k] * (*out)[0].data<double>()[k];
          return total;
        };
        check_close(flat_values<double>(analytic), numeric_gradient(loss, feeds[which]), 1e-7,
                    op + " second-order gradient");
      }
    };
    // Forward: input [1,5,4,2], filter [3,2,2,3], output [1,3,4,3].
    root_check("Conv2DBackpropInput", sizes_tensor({1, 5, 4, 2}), image({3, 2, 2, 3}),
               image({1, 3, 4, 3}), 0);
    root_check("Conv2DBackpropFilter", sizes_tensor({3, 2, 2, 3}), image({1, 5, 4, 2}),
               image({1, 3, 4, 3}), 1);
  }
  SECTION("MaxPool, SAME, overlapping windows") {
    auto attrs = window({1, 2, 2, 1}, "SAME");
    attrs["ksize"] = graph::attr_value(std::vector<std::int64_t>{1, 3, 3, 1});
    check_graph_gradient("MaxPool", attrs, {image({2, 5, 6, 3})}, rng);
  }
  SECTION("AvgPool, NCHW, VALID") {
    auto attrs = window({1, 1, 2, 1}, "VALID", "NCHW");
    attrs["ksize"] = graph::attr_value(std::vector<std::int64_t>{1, 1, 2, 3});
    check_graph_gradient("AvgPool", attrs, {image({2, 3, 6, 5})}, rng);
  }
}

// ---- Errors. ----

TEST_CASE("Conv2D errors name the shapes, strides and padding") {
  conv_case c{1, 5, 5, 3, 3, 3, 4, 1, 1, 1, 1, "VALID"};
  tensor x(dtype::float32, {1, 5, 5, 3});
  tensor f(dtype::float32, {3, 3, 3, 4});
  SECTION("mismatched channels") {
    auto out = kernels::run_kernel(conv_node("Conv2D", dtype::float32, c, false),
                                   {x, tensor(dtype::float32, {3, 3, 2, 4})});
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().error_code() == code::invalid_argument);
    CHECK_THAT(out.error().message(), Catch::Contains("'conv'") && Catch::Contains("[1,5,5,3]") &&
                                          Catch::Contains("[3,3,2,4]") && Catch::Contains("channels"));
  }
  SECTION("strides of the wrong length or on the batch dimension") {
    tf::NodeDef node = conv_node("Conv2D", dtype::float32, c, false);
    (*node.mutable_attr())["strides"] = graph::attr_value(std::vector<std::int64_t>{1, 2, 2});
    auto out = kernels::run_kernel(node, {x, f});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("strides") && Catch::Contains("[1,2,2]") &&
                                          Catch::Contains("4 entries"));
    (*node.mutable_attr())["strides"] = graph::attr_value(std::vector<std::int64_t>{2, 1, 1, 1});
    out = kernels::run_kernel(node, {x, f});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("batch and channel"));
    (*node.mutable_attr())["strides"] = graph::attr_value(std::vector<std::int64_t>{1, 0, 1, 1});
    CHECK_FALSE(kernels::run_kernel(node, {x, f}).ok());
  }
  SECTION("a filter larger than the input with VALID padding") {
    auto out = kernels::run_kernel(conv_node("Conv2D", dtype::float32, c, false),
                                   {tensor(dtype::float32, {1, 2, 5, 3}), f});
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().error_code() == code::invalid_argument);
    CHECK_THAT(out.error().message(), Catch::Contains("height") && Catch::Contains("VALID") &&
                                          Catch::Contains("[1,2,5,3]") && Catch::Contains("[3,3,3,4]"));
    // SAME pads instead.
    c.padding = "SAME";
    CHECK(kernels::run_kernel(conv_node("Conv2D", dtype::float32, c, false),
                              {tensor::zeros(dtype::float32, {1, 2, 5, 3}), tensor::zeros(dtype::float32, {3, 3, 3, 4})})
              .ok());
  }
  SECTION("ranks") {
    auto out = kernels::run_kernel(conv_node("Conv2D", dtype::float32, c, false),
                                   {tensor(dtype::float32, {5, 5, 3}), f});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("4-D"));
  }
  SECTION("explicit_paddings") {
    c.padding = "EXPLICIT";
    c.pads = {1, 1, 1, 1};
    tf::NodeDef node = conv_node("Conv2D", dtype::float32, c, false);
    (*node.mutable_attr())["explicit_paddings"] = graph::attr_value(std::vector<std::int64_t>{1, 1, 1, 1});
    auto out = kernels::run_kernel(node, {x, f});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("explicit_paddings"));
  }
  SECTION("backprops check their operands") {
    auto out = kernels::run_kernel(conv_node("Conv2DBackpropInput", dtype::float32, c, false),
                                   {sizes_tensor({1, 5, 5}), f, tensor(dtype::float32, {1, 3, 3, 4})});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("input_sizes"));
    out = kernels::run_kernel(conv_node("Conv2DBackpropInput", dtype::float32, c, false),
                              {sizes_tensor({1, 5, 5, 3}), f, tensor(dtype::float32, {1, 4, 3, 4})});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("out_backprop") && Catch::Contains("[1,4,3,4]") &&
                                          Catch::Contains("[1,3,3,4]"));
    out = kernels::run_kernel(conv_node("Conv2DBackpropFilter", dtype::float32, c, false),
                              {x, sizes_tensor({3, 3, 3, 5}), tensor(dtype::float32, {1, 3, 3, 4})});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("out_backprop"));
  }
}

TEST_CASE("Conv2D of empty tensors") {
  conv_case c{0, 5, 5, 3, 3, 3, 4, 1, 1, 1, 1, "SAME"};
  auto y = kernels::run_kernel(conv_node("Conv2D", dtype::float32, c, false),
                               {tensor(dtype::float32, {0, 5, 5, 3}), tensor::zeros(dtype::float32, {3, 3, 3, 4})});
  REQUIRE(y.ok());
  CHECK((*y)[0].shape() == tensor_shape{0, 5, 5, 4});
  auto df = kernels::run_kernel(conv_node("Conv2DBackpropFilter", dtype::float32, c, false),
                                {tensor(dtype::float32, {0, 5, 5, 3}), sizes_tensor({3, 3, 3, 4}),
                                 tensor(dtype::float32, {0, 5, 5, 4})});
  REQUIRE(df.ok());
  for (float v : (*df)[0].flat<float>()) CHECK(v == 0.0f);
  c.in_c = 0;
  y = kernels::run_kernel(conv_node("Conv2D", dtype::float32, c, false),
                          {tensor(dtype::float32, {1, 5, 5, 0}), tensor(dtype::float32, {3, 3, 0, 4})});
  REQUIRE(y.ok());
  for (float v : (*y)[0].flat<float>()) CHECK(v == 0.0f);
}

// ---- Shape functions ----

result<std::vector<partial_shape>> infer(const tf::NodeDef& node, std::vector<partial_shape> inputs,
                                         std::vector<const tensor*> values = {}) {
  const graph::op_def* op = graph::op_registry::builtin().find(node.op());
  REQUIRE(op != nullptr);
  REQUIRE(op->shape);
  tf::NodeDef full = node;
  REQUIRE(graph::add_defaults_and_validate_attrs(*op, &full).ok());
  std::vector<dtype> input_types, output_types;
  REQUIRE(graph::input_output_types(*op, full, &input_types, &output_types).ok());
  values.resize(inputs.size(), nullptr);
  graph::shape_context ctx(full, *op, std::move(inputs), values, input_types,
                           static_cast<int>(output_types.size()));
  status s = op->shape(ctx);
  if (!s.ok()) return s;
  return ctx.outputs();
}

TEST_CASE("conv shape functions") {
  conv_case same{1, 1, 1, 1, 1, 1, 1, 2, 2, 1, 1, "SAME"};
  tf::NodeDef conv = conv_node("Conv2D", dtype::float32, same, false);
  CHECK((*infer(conv, {{-1, 28, 27, 3}, {5, 5, 3, 32}}))[0] == partial_shape{-1, 14, 14, 32});
  CHECK((*infer(conv, {{8, -1, 27, -1}, {5, 5, 3, 32}}))[0] == partial_shape{8, -1, 14, 32});
  CHECK((*infer(conv, {partial_shape(), {5, 5, 3, 32}}))[0] == partial_shape{-1, -1, -1, 32});
  auto bad = infer(conv, {{1, 28, 28, 3}, {5, 5, 4, 32}});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("'conv'") && Catch::Contains("[1,28,28,3]") &&
                                        Catch::Contains("[5,5,4,32]"));
  CHECK_FALSE(infer(conv, {{1, 28, 28}, {5, 5, 3, 32}}).ok());

  conv_case valid{1, 1, 1, 1, 1, 1, 1, 4, 4, 1, 1, "VALID"};
  tf::NodeDef alex = conv_node("Conv2D", dtype::float32, valid, true);
  CHECK((*infer(alex, {{16, 3, 227, 227}, {11, 11, 3, 64}}))[0] == partial_shape{16, 64, 55, 55});
  bad = infer(alex, {{16, 3, 10, 227}, {11, 11, 3, 64}});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("height") && Catch::Contains("VALID") &&
                                        Catch::Contains("strides 4x4"));

  valid.stride_h = valid.stride_w = 1;
  valid.dilation_h = 2;
  tf::NodeDef dilated = conv_node("Conv2D", dtype::float32, valid, false);
  CHECK((*infer(dilated, {{1, 10, 10, 1}, {3, 3, 1, 1}}))[0] == partial_shape{1, 6, 8, 1});

  tf::NodeDef bad_strides = conv;
  (*bad_strides.mutable_attr())["strides"] = graph::attr_value(std::vector<std::int64_t>{1, 1});
  bad = infer(bad_strides, {{1, 28, 28, 3}, {5, 5, 3, 32}});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("strides"));

  tensor sizes = sizes_tensor({2, 9, 9, 3});
  tf::NodeDef backprop_input = conv_node("Conv2DBackpropInput", dtype::float32, same, false);
  CHECK((*infer(backprop_input, {{4}, {3, 3, 3, 8}, {2, 5, 5, 8}}, {&sizes}))[0] ==
        partial_shape{2, 9, 9, 3});
  CHECK((*infer(backprop_input, {{4}, {3, 3, 3, 8}, {2, 5, 5, 8}}))[0] == partial_shape{2, -1, -1, 3});
  CHECK_FALSE(infer(backprop_input, {{4}, {3, 3, 3, 8}, {2, 4, 5, 8}}, {&sizes}).ok());

  tensor filter_sizes = sizes_tensor({3, 3, 3, 8});
  tf::NodeDef backprop_filter = conv_node("Conv2DBackpropFilter", dtype::float32, same, false);
  CHECK((*infer(backprop_filter, {{2, 9, 9, 3}, {4}, {2, 5, 5, 8}}, {nullptr, &filter_sizes}))[0] ==
        partial_shape{3, 3, 3, 8});
  CHECK((*infer(backprop_filter, {{2, 9, 9, 3}, {4}, {2, 5, 5, 8}}))[0] == partial_shape{-1, -1, 3, 8});
}

}  // namespace
}  // namespace troupe
