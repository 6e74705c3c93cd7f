// MaxPool, MaxPoolGrad, AvgPool, AvgPoolGrad: the kernels against direct loops in double
// on a table of shapes (SAME/VALID/EXPLICIT, strides smaller and larger than the window,
// windows larger than the input), both data formats and both dtypes; the gradients
// against central differences of the forward kernels; tie-breaking; the error paths and
// the shape functions. Random data from seed 42. (The gradient functions registered
// beside the schemas are checked through a graph in conv_kernels_test.cc.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

struct pool_case {
  std::int64_t batch, in_h, in_w, channels, k_h, k_w, stride_h, stride_w;
  std::string padding;
  std::vector<std::int64_t> pads = {};  // EXPLICIT: top, bottom, left, right
};

std::string describe(const pool_case& c) {
  return str_cat("input ", c.batch, "x", c.in_h, "x", c.in_w, "x", c.channels, ", ksize ", c.k_h,
                 "x", c.k_w, ", strides ", c.stride_h, "x", c.stride_w, ", ", c.padding);
}

// Output size and padding before in one dimension (TensorFlow's documented rules).
void ref_dim(const pool_case& c, std::int64_t in, std::int64_t k, std::int64_t s,
             std::int64_t before, std::int64_t after, std::int64_t* out, std::int64_t* pad) {
  if (c.padding == "VALID") {
    *out = (in - k) / s + 1;
    *pad = 0;
  } else if (c.padding == "SAME") {
    *out = (in + s - 1) / s;
    *pad = std::max<std::int64_t>(0, (*out - 1) * s + k - in) / 2;
  } else {
    *out = (in + before + after - k) / s + 1;
    *pad = before;
  }
}

struct ref_pool {
  const pool_case& c;
  std::int64_t out_h = 0, out_w = 0, pad_top = 0, pad_left = 0;
  explicit ref_pool(const pool_case& cc) : c(cc) {
    ref_dim(c, c.in_h, c.k_h, c.stride_h, c.pads.empty() ? 0 : c.pads[0],
            c.pads.empty() ? 0 : c.pads[1], &out_h, &pad_top);
    ref_dim(c, c.in_w, c.k_w, c.stride_w, c.pads.empty() ? 0 : c.pads[2],
            c.pads.empty() ? 0 : c.pads[3], &out_w, &pad_left);
  }
  std::int64_t in_at(std::int64_t n, std::int64_t y, std::int64_t x, std::int64_t ch) const {
    return ((n * c.in_h + y) * c.in_w + x) * c.channels + ch;
  }
  std::int64_t out_at(std::int64_t n, std::int64_t y, std::int64_t x, std::int64_t ch) const {
    return ((n * out_h + y) * out_w + x) * c.channels + ch;
  }
  // Calls fn(out_index, in_indices) with the in-bounds inputs of each output, row-major.
  template <class F>
  void for_each_window(F fn) const {
    for (std::int64_t n = 0; n < c.batch; ++n)
      for (std::int64_t oy = 0; oy < out_h; ++oy)
        for (std::int64_t ox = 0; ox < out_w; ++ox)
          for (std::int64_t ch = 0; ch < c.channels; ++ch) {
            std::vector<std::int64_t> in;
            for (std::int64_t ky = 0; ky < c.k_h; ++ky)
              for (std::int64_t kx = 0; kx < c.k_w; ++kx) {
                std::int64_t y = oy * c.stride_h - pad_top + ky, x = ox * c.stride_w - pad_left + kx;
                if (y >= 0 && y < c.in_h && x >= 0 && x < c.in_w) in.push_back(in_at(n, y, x, ch));
              }
            fn(out_at(n, oy, ox, ch), in);
          }
  }
  std::size_t out_size() const { return static_cast<std::size_t>(c.batch * out_h * out_w * c.channels); }
  std::size_t in_size() const { return static_cast<std::size_t>(c.batch * c.in_h * c.in_w * c.channels); }

  std::vector<double> max(const std::vector<double>& x) const {
    std::vector<double> y(out_size());
    for_each_window([&](std::int64_t o, const std::vector<std::int64_t>& in) {
      double m = -std::numeric_limits<double>::infinity();
      for (auto i : in) m = std::max(m, x[static_cast<std::size_t>(i)]);
      y[static_cast<std::size_t>(o)] = m;
    });
    return y;
  }
  std::vector<double> max_grad(const std::vector<double>& x, const std::vector<double>& dy) const {
    std::vector<double> dx(in_size(), 0.0);
    for_each_window([&](std::int64_t o, const std::vector<std::int64_t>& in) {
      if (in.empty()) return;
      std::int64_t best = in[0];
      for (auto i : in) if (x[static_cast<std::size_t>(i)] > x[static_cast<std::size_t>(best)]) best = i;
      dx[static_cast<std::size_t>(best)] += dy[static_cast<std::size_t>(o)];
    });
    return dx;
  }
  std::vector<double> avg(const std::vector<double>& x) const {
    std::vector<double> y(out_size());
    for_each_window([&](std::int64_t o, const std::vector<std::int64_t>& in) {
      double sum = 0;
      for (auto i : in) sum += x[static_cast<std::size_t>(i)];
      y[static_cast<std::size_t>(o)] = sum / static_cast<double>(in.size());
    });
    return y;
  }
  std::vector<double> avg_grad(const std::vector<double>& dy) const {
    std::vector<double> dx(in_size(), 0.0);
    for_each_window([&](std::int64_t o, const std::vector<std::int64_t>& in) {
      for (auto i : in) dx[static_cast<std::size_t>(i)] += dy[static_cast<std::size_t>(o)] / static_cast<double>(in.size());
    });
    return dx;
  }
};

std::vector<double> random_values(std::size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(count);
  for (double& x : v) x = dist(rng);
  return v;
}

// NHWC values into a tensor of NHWC or NCHW layout, and back.
template <class T>
tensor image_tensor(const std::vector<double>& values, std::int64_t n, std::int64_t h,
                    std::int64_t w, std::int64_t c, bool nchw) {
  tensor t(dtype_of<T>, nchw ? tensor_shape{n, c, h, w} : tensor_shape{n, h, w, c});
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x)
        for (std::int64_t ch = 0; ch < c; ++ch) {
          std::int64_t from = ((b * h + y) * w + x) * c + ch;
          std::int64_t to = nchw ? ((b * c + ch) * h + y) * w + x : from;
          t.data<T>()[to] = static_cast<T>(values[static_cast<std::size_t>(from)]);
        }
  return t;
}
template <class T>
std::vector<double> image_values(const tensor& t, bool nchw) {
  std::int64_t n = t.dim(0), c = nchw ? t.dim(1) : t.dim(3), h = nchw ? t.dim(2) : t.dim(1),
               w = nchw ? t.dim(3) : t.dim(2);
  std::vector<double> out(static_cast<std::size_t>(t.num_elements()));
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x)
        for (std::int64_t ch = 0; ch < c; ++ch) {
          std::int64_t to = ((b * h + y) * w + x) * c + ch;
          std::int64_t from = nchw ? ((b * c + ch) * h + y) * w + x : to;
          out[static_cast<std::size_t>(to)] = static_cast<double>(t.data<T>()[from]);
        }
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double rel,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= rel * std::max(1.0, std::abs(want[i])))) {
      FAIL_CHECK(what << ": element " << i << " = " << got[i] << ", want " << want[i]
                      << " (seed 42)");
      return;
    }
  }
}

tf::NodeDef pool_node(const std::string& op, dtype type, const pool_case& c, bool nchw) {
  tf::NodeDef node;
  node.set_name("pool");
  node.set_op(op);
  auto& attrs = *node.mutable_attr();
  attrs["T"] = graph::attr_value(type);
  auto per_dim = [&](std::int64_t h, std::int64_t w) {
    return graph::attr_value(nchw ? std::vector<std::int64_t>{1, 1, h, w}
                                  : std::vector<std::int64_t>{1, h, w, 1});
  };
  attrs["ksize"] = per_dim(c.k_h, c.k_w);
  attrs["strides"] = per_dim(c.stride_h, c.stride_w);
  attrs["padding"] = graph::attr_value(c.padding);
  attrs["data_format"] = graph::attr_value(nchw ? "NCHW" : "NHWC");
  if (c.padding == "EXPLICIT") {
    attrs["explicit_paddings"] = graph::attr_value(
        nchw ? std::vector<std::int64_t>{0, 0, 0, 0, c.pads[0], c.pads[1], c.pads[2], c.pads[3]}
             : std::vector<std::int64_t>{0, 0, c.pads[0], c.pads[1], c.pads[2], c.pads[3], 0, 0});
  }
  return node;
}

tensor sizes_tensor(const tensor_shape& s) {
  std::vector<std::int32_t> v(s.dims().begin(), s.dims().end());
  return tensor::from_vector<std::int32_t>(v);
}

const std::vector<pool_case>& pool_cases() {
  static const std::vector<pool_case> cases = {
      {2, 28, 28, 32, 2, 2, 2, 2, "SAME"},  // LeNet pool
      {1, 7, 9, 3, 2, 2, 2, 2, "VALID"},
      {2, 7, 9, 3, 3, 3, 2, 2, "SAME"},     // overlapping windows (AlexNet style)
      {3, 13, 13, 5, 3, 3, 2, 2, "VALID"},
      {2, 6, 5, 2, 3, 2, 1, 1, "SAME"},
      {1, 5, 5, 1, 2, 3, 3, 3, "SAME"},     // stride larger than the window
      {2, 3, 4, 2, 5, 5, 1, 1, "SAME"},     // window larger than the input
      {1, 4, 4, 3, 4, 4, 1, 1, "VALID"},    // one window covering everything
      {2, 28, 28, 6, 2, 2, 2, 2, "VALID"},  // LeNet pool1: windows tile the image, 6 channels
      {1, 8, 8, 20, 2, 2, 2, 2, "VALID"},   // tiling, 20 channels: a vector and 4 lanes
      {2, 13, 13, 70, 3, 3, 2, 2, "VALID"}, // overlapping, 70 channels: 64 and 6
  };
  return cases;
}

template <class T>
void check_pool_case(const pool_case& c, bool nchw, bool with_max_only_cases, compute_pool& pool,
                     std::mt19937& rng) {
  INFO(describe(c) << (nchw ? ", NCHW" : ", NHWC") << ", " << dtype_name(dtype_of<T>));
  ref_pool ref(c);
  std::vector<double> x = random_values(ref.in_size(), rng);
  std::vector<double> dy = random_values(ref.out_size(), rng);
  tensor x_t = image_tensor<T>(x, c.batch, c.in_h, c.in_w, c.channels, nchw);
  tensor dy_t = image_tensor<T>(dy, c.batch, ref.out_h, ref.out_w, c.channels, nchw);
  const double rel = std::is_same_v<T, float> ? 1e-6 : 1e-13;

  auto y = kernels::run_kernel(pool_node("MaxPool", dtype_of<T>, c, nchw), {x_t}, &pool);
  REQUIRE(y.ok());
  REQUIRE((*y)[0].shape() == dy_t.shape());
  check_close(image_values<T>((*y)[0], nchw), ref.max(image_values<T>(x_t, nchw)), 0.0, "MaxPool");
  auto dx = kernels::run_kernel(pool_node("MaxPoolGrad", dtype_of<T>, c, nchw), {x_t, (*y)[0], dy_t},
                                &pool);
  REQUIRE(dx.ok());
  REQUIRE((*dx)[0].shape() == x_t.shape());
  // The reference picks argmaxes from the values as rounded to T.
  check_close(image_values<T>((*dx)[0], nchw), ref.max_grad(image_values<T>(x_t, nchw), dy), rel,
              "MaxPoolGrad");
  if (with_max_only_cases) return;

  y = kernels::run_kernel(pool_node("AvgPool", dtype_of<T>, c, nchw), {x_t}, &pool);
  REQUIRE(y.ok());
  check_close(image_values<T>((*y)[0], nchw), ref.avg(x), rel, "AvgPool");
  dx = kernels::run_kernel(pool_node("AvgPoolGrad", dtype_of<T>, c, nchw),
                           {sizes_tensor(x_t.shape()), dy_t}, &pool);
  REQUIRE(dx.ok());
  REQUIRE((*dx)[0].shape() == x_t.shape());
  check_close(image_values<T>((*dx)[0], nchw), ref.avg_grad(dy), rel, "AvgPoolGrad");
}

TEST_CASE("pooling kernels match direct loops") {
  std::mt19937 rng(42);
  compute_pool one(1), three(3);
  for (const pool_case& c : pool_cases()) {
    for (bool nchw : {false, true}) {
      check_pool_case<float>(c, nchw, false, one, rng);
      check_pool_case<double>(c, nchw, false, three, rng);
    }
  }
  // EXPLICIT padding (MaxPool and MaxPoolGrad only, as in TensorFlow).
  for (bool nchw : {false, true}) {
    check_pool_case<float>({2, 5, 6, 2, 3, 3, 2, 2, "EXPLICIT", {1, 0, 2, 1}}, nchw, true, one, rng);
  }
}

// d sum(w * op(x)) / dx by central differences of the forward kernel.
std::vector<double> numeric_gradient(const tf::NodeDef& forward, tensor x,
                                     const std::vector<double>& w) {
  auto loss = [&] {
    auto y = kernels::run_kernel(forward, {x});
    REQUIRE(y.ok());
    double total = 0;
    for (std::size_t i = 0; i < w.size(); ++i) total += w[i] * (*y)[0].data<double>()[i];
    return total;
  };
  const double eps = 1e-6;
  std::vector<double> out;
  for (double& e : x.flat<double>()) {
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

TEST_CASE("pooling gradients match central differences of the forward kernels") {
  std::mt19937 rng(42);
  for (const pool_case& c : {pool_case{2, 5, 6, 3, 3, 3, 2, 2, "SAME"},
                             pool_case{1, 7, 5, 2, 2, 3, 2, 1, "VALID"}}) {
    INFO(describe(c));
    ref_pool ref(c);
    // Distinct values at least 1e-3 apart, so a perturbation of 1e-6 never changes an argmax.
    std::vector<double> x(ref.in_size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1e-3 * static_cast<double>(i);
    std::shuffle(x.begin(), x.end(), rng);
    std::vector<double> w = random_values(ref.out_size(), rng);
    tensor x_t = image_tensor<double>(x, c.batch, c.in_h, c.in_w, c.channels, false);
    tensor w_t = image_tensor<double>(w, c.batch, ref.out_h, ref.out_w, c.channels, false);

    tf::NodeDef max_pool = pool_node("MaxPool", dtype::float64, c, false);
    auto y = kernels::run_kernel(max_pool, {x_t});
    REQUIRE(y.ok());
    auto dx = kernels::run_kernel(pool_node("MaxPoolGrad", dtype::float64, c, false), {x_t, (*y)[0], w_t});
    REQUIRE(dx.ok());
    check_close(image_values<double>((*dx)[0], false), numeric_gradient(max_pool, x_t, w), 1e-7,
                "MaxPoolGrad");

    tf::NodeDef avg_pool = pool_node("AvgPool", dtype::float64, c, false);
    dx = kernels::run_kernel(pool_node("AvgPoolGrad", dtype::float64, c, false),
                             {sizes_tensor(x_t.shape()), w_t});
    REQUIRE(dx.ok());
    check_close(image_values<double>((*dx)[0], false), numeric_gradient(avg_pool, x_t, w), 1e-7,
                "AvgPoolGrad");
  }
}

TEST_CASE("MaxPoolGrad sends a tied maximum's gradient to the first in the window") {
  pool_case c{1, 2, 2, 1, 2, 2, 1, 1, "VALID"};
  tensor x = tensor::from_vector<float>({0, 5, 5, 5}, {1, 2, 2, 1});
  tensor y = tensor::from_vector<float>({5}, {1, 1, 1, 1});
  tensor dy = tensor::from_vector<float>({2}, {1, 1, 1, 1});
  auto dx = kernels::run_kernel(pool_node("MaxPoolGrad", dtype::float32, c, false), {x, y, dy});
  REQUIRE(dx.ok());
  CHECK(std::vector<float>((*dx)[0].flat<float>().begin(), (*dx)[0].flat<float>().end()) ==
        std::vector<float>{0, 2, 0, 0});
}

TEST_CASE("float max pooling treats NaN, infinities, signed zeros and ties as the double loop does") {
  // float MaxPool and MaxPoolGrad run vectorized where the processor has AVX-512, double
  // always on the scalar loop; on values exact in both types the results must agree: NaN
  // never wins (an all-NaN window gives lowest() and sends its gradient to its first
  // position), ties go to the first position, and gradients are small integers so that
  // sums are exact.
  std::mt19937 rng(42);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> specials = {nan, nan, -inf, inf, 0.0, -0.0, 0.5, 0.5, -0.5, 1.0};
  for (const pool_case& c : {pool_case{2, 6, 6, 18, 2, 2, 2, 2, "VALID"}, pool_case{2, 7, 7, 18, 3, 3, 2, 2, "SAME"}}) {
    INFO(describe(c));
    ref_pool ref(c);
    std::vector<double> x(ref.in_size()), dy(ref.out_size());
    std::uniform_int_distribution<std::size_t> pick(0, specials.size() - 1);
    std::uniform_int_distribution<int> small(-3, 3);
    for (double& v : x) v = specials[pick(rng)];
    for (std::size_t i = 0; i < 4 * 4 * 18; ++i) x[i] = nan;  // windows of only NaN in the first image
    for (double& v : dy) v = small(rng);
    compute_pool one(1);
    auto run = [&](dtype type, const std::vector<double>& values, const std::vector<double>& grads) {
      tensor xt = type == dtype::float32 ? image_tensor<float>(values, c.batch, c.in_h, c.in_w, c.channels, false)
                                         : image_tensor<double>(values, c.batch, c.in_h, c.in_w, c.channels, false);
      tensor dyt = type == dtype::float32 ? image_tensor<float>(grads, c.batch, ref.out_h, ref.out_w, c.channels, false)
                                          : image_tensor<double>(grads, c.batch, ref.out_h, ref.out_w, c.channels, false);
      auto y = kernels::run_kernel(pool_node("MaxPool", type, c, false), {xt}, &one);
      REQUIRE(y.ok());
      auto dx = kernels::run_kernel(pool_node("MaxPoolGrad", type, c, false), {xt, (*y)[0], dyt}, &one);
      REQUIRE(dx.ok());
      return type == dtype::float32
                 ? std::pair(image_values<float>((*y)[0], false), image_values<float>((*dx)[0], false))
                 : std::pair(image_values<double>((*y)[0], false), image_values<double>((*dx)[0], false));
    };
    const auto [y32, dx32] = run(dtype::float32, x, dy);
    const auto [y64, dx64] = run(dtype::float64, x, dy);
    REQUIRE(y32.size() == y64.size());
    for (std::size_t i = 0; i < y64.size(); ++i) {
      INFO("MaxPool output " << i);
      if (y64[i] == std::numeric_limits<double>::lowest()) CHECK(y32[i] == std::numeric_limits<float>::lowest());
      else CHECK(y32[i] == y64[i]);
    }
    CHECK(y64.front() == std::numeric_limits<double>::lowest());  // the all-NaN window
    CHECK(dx32 == dx64);
  }
}

TEST_CASE("pooling errors name the shapes, ksize, strides and padding") {
  pool_case c{1, 4, 4, 2, 3, 3, 1, 1, "VALID"};
  tensor x(dtype::float32, {1, 4, 4, 2});
  SECTION("a window larger than the input with VALID padding") {
    auto out = kernels::run_kernel(pool_node("MaxPool", dtype::float32, c, false),
                                   {tensor(dtype::float32, {1, 2, 4, 2})});
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().error_code() == code::invalid_argument);
    CHECK_THAT(out.error().message(), Catch::Contains("'pool'") && Catch::Contains("[1,2,4,2]") &&
                                          Catch::Contains("ksize 3x3") && Catch::Contains("VALID"));
  }
  SECTION("ksize on the batch dimension") {
    tf::NodeDef node = pool_node("AvgPool", dtype::float32, c, false);
    (*node.mutable_attr())["ksize"] = graph::attr_value(std::vector<std::int64_t>{2, 1, 1, 1});
    auto out = kernels::run_kernel(node, {x});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("ksize") && Catch::Contains("batch and channel"));
  }
  SECTION("ranks and gradient shapes") {
    auto out = kernels::run_kernel(pool_node("MaxPool", dtype::float32, c, false),
                                   {tensor(dtype::float32, {4, 4, 2})});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("4-D"));
    out = kernels::run_kernel(pool_node("MaxPoolGrad", dtype::float32, c, false),
                              {x, tensor(dtype::float32, {1, 2, 2, 2}), tensor(dtype::float32, {1, 3, 2, 2})});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("grad") && Catch::Contains("[1,3,2,2]") &&
                                          Catch::Contains("[1,2,2,2]"));
    out = kernels::run_kernel(pool_node("AvgPoolGrad", dtype::float32, c, false),
                              {tensor::from_vector<std::int32_t>({1, 4, 4}), tensor(dtype::float32, {1, 2, 2, 2})});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("orig_input_shape"));
  }
}

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

TEST_CASE("pool shape functions") {
  pool_case same{1, 1, 1, 1, 3, 3, 2, 2, "SAME"};
  tf::NodeDef max_pool = pool_node("MaxPool", dtype::float32, same, false);
  CHECK((*infer(max_pool, {{-1, 28, 27, 32}}))[0] == partial_shape{-1, 14, 14, 32});
  tf::NodeDef avg_nchw = pool_node("AvgPool", dtype::float32, pool_case{1, 1, 1, 1, 3, 3, 2, 2, "VALID"}, true);
  CHECK((*infer(avg_nchw, {{16, 64, 55, 55}}))[0] == partial_shape{16, 64, 27, 27});
  auto bad = infer(avg_nchw, {{16, 64, 2, 55}});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("'pool'") && Catch::Contains("[16,64,2,55]") &&
                                        Catch::Contains("ksize 3x3"));

  tf::NodeDef grad = pool_node("MaxPoolGrad", dtype::float32, same, false);
  CHECK((*infer(grad, {{2, 9, 9, 3}, {2, 5, 5, 3}, {2, 5, 5, 3}}))[0] == partial_shape{2, 9, 9, 3});
  CHECK_FALSE(infer(grad, {{2, 9, 9, 3}, {2, 5, 5, 3}, {2, 4, 5, 3}}).ok());

  tensor sizes = sizes_tensor({2, 9, 9, 3});
  tf::NodeDef avg_grad = pool_node("AvgPoolGrad", dtype::float32, same, false);
  CHECK((*infer(avg_grad, {{4}, {2, 5, 5, 3}}, {&sizes}))[0] == partial_shape{2, 9, 9, 3});
  CHECK((*infer(avg_grad, {{4}, {2, 5, 5, 3}}))[0] == partial_shape{-1, -1, -1, -1});
  CHECK_FALSE(infer(avg_grad, {{4}, {2, 6, 5, 3}}, {&sizes}).ok());
}

}  // namespace
}  // namespace troupe
