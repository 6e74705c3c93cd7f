// The kernels of kernels/cpu/nn2_kernels.cc against double-precision reference loops on
// random shapes (seed 42): activations and their *Grad ops, Reciprocal, Pow, FloorDiv and
// FloorMod (TensorFlow's signs for negative operands, integer edge cases), ClipByValue,
// L2Loss, LRN and FusedBatchNormV3 (LRNGrad and FusedBatchNormGradV3 against central
// differences of the reference forward loops); error paths and shape functions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iomanip>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

using attrs = std::vector<std::pair<std::string, tf::AttrValue>>;

tf::NodeDef make_node(const std::string& op, dtype type, const attrs& extra = {}) {
  tf::NodeDef node;
  node.set_name(op);
  node.set_op(op);
  (*node.mutable_attr())["T"] = graph::attr_value(type);
  for (const auto& [name, value] : extra) (*node.mutable_attr())[name] = value;
  return node;
}

std::vector<tensor> run(const tf::NodeDef& node, const std::vector<tensor>& inputs) {
  auto out = kernels::run_kernel(node, inputs);
  if (!out.ok()) FAIL(out.error());
  return std::move(*out);
}

template <class T>
tensor random_tensor(const tensor_shape& shape, std::mt19937& rng, double lo = -1, double hi = 1) {
  tensor t(dtype_of<T>, shape);
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (T& x : t.flat<T>()) x = static_cast<T>(dist(rng));
  } else {
    std::uniform_int_distribution<int> dist(static_cast<int>(lo), static_cast<int>(hi));
    for (T& x : t.flat<T>()) x = static_cast<T>(dist(rng));
  }
  return t;
}

tensor_shape random_shape(std::mt19937& rng, int max_rank = 4, int max_dim = 5) {
  std::uniform_int_distribution<int> rank_dist(0, max_rank), dim_dist(0, max_dim);
  tensor_shape shape;
  int rank = rank_dist(rng);
  for (int i = 0; i < rank; ++i) shape.add_dim(dim_dist(rng));
  return shape;
}

template <class T>
std::vector<double> as_doubles(const tensor& t) {
  std::vector<double> out;
  for (T v : t.flat<T>()) out.push_back(static_cast<double>(v));
  return out;
}

// Checks got[i] against want[i] within rel * max(1, |want[i]|) (NaN matches NaN).
template <class T>
void check_close(const tensor& got, const tensor_shape& shape, const std::vector<double>& want,
                 double rel) {
  REQUIRE(got.type() == dtype_of<T>);
  REQUIRE(got.shape() == shape);
  REQUIRE(static_cast<std::size_t>(got.num_elements()) == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    double g = static_cast<double>(got.data<T>()[i]);
    if (std::isnan(want[i]) && std::isnan(g)) continue;
    double tolerance = rel * std::max(1.0, std::abs(want[i]));
    if (!(std::abs(g - want[i]) <= tolerance)) {
      FAIL_CHECK("output[" << i << "] = " << std::setprecision(17) << g << ", want " << want[i] << " (tolerance "
                           << tolerance << ")");
      return;
    }
  }
}

template <class T>
double tolerance_for() {
  return std::is_same_v<T, float> ? 2e-5 : std::is_same_v<T, double> ? 1e-12 : 0.0;
}

// ---- Activations, Reciprocal and their gradient ops ----

using unary_reference = std::function<double(double)>;
using binary_reference = std::function<double(double, double)>;

template <class T>
void check_unary(const std::string& op, const unary_reference& ref, double lo, double hi,
                 const attrs& extra = {}) {
  std::mt19937 rng(42);
  INFO(op << " " << dtype_name(dtype_of<T>) << ", seed 42");
  for (int trial = 0; trial < 20; ++trial) {
    tensor x = random_tensor<T>(random_shape(rng), rng, lo, hi);
    std::vector<double> want;
    for (double v : as_doubles<T>(x)) want.push_back(ref(v));
    tensor_shape shape = x.shape();
    auto out = run(make_node(op, dtype_of<T>, extra), {x});
    check_close<T>(out[0], shape, want, tolerance_for<T>());
  }
}

template <class T>
void check_same_shape_binary(const std::string& op, const binary_reference& ref, double lo,
                             double hi, const attrs& extra = {}) {
  std::mt19937 rng(42);
  INFO(op << " " << dtype_name(dtype_of<T>) << ", seed 42");
  for (int trial = 0; trial < 20; ++trial) {
    tensor_shape shape = random_shape(rng);
    tensor a = random_tensor<T>(shape, rng, -2, 2);
    tensor b = random_tensor<T>(shape, rng, lo, hi);
    std::vector<double> av = as_doubles<T>(a), bv = as_doubles<T>(b), want;
    for (std::size_t i = 0; i < av.size(); ++i) want.push_back(ref(av[i], bv[i]));
    auto out = run(make_node(op, dtype_of<T>, extra), {a, b});
    check_close<T>(out[0], shape, want, tolerance_for<T>());
  }
}

double softplus_reference(double x) { return x > 30 ? x : std::log1p(std::exp(x)); }

TEMPLATE_TEST_CASE("activations and their gradient ops match reference loops", "[nn2]", float,
                   double) {
  using T = TestType;
  check_unary<T>("Relu6", [](double x) { return std::min(std::max(x, 0.0), 6.0); }, -3, 9);
  check_same_shape_binary<T>("Relu6Grad", [](double g, double f) { return f > 0 && f < 6 ? g : 0; },
                             -3, 9);
  check_unary<T>("Elu", [](double x) { return x < 0 ? std::expm1(x) : x; }, -4, 4);
  check_same_shape_binary<T>("EluGrad", [](double g, double y) { return y < 0 ? g * (y + 1) : g; },
                             -1, 3);
  check_unary<T>("Softplus", softplus_reference, -5, 5);
  check_unary<T>("Softplus", softplus_reference, -100, 100);  // the thresholds
  check_same_shape_binary<T>("SoftplusGrad",
                             [](double g, double f) { return g / (1 + std::exp(-f)); }, -5, 5);
  check_unary<T>("LeakyRelu", [](double x) { return x > 0 ? x : static_cast<double>(0.2f) * x; }, -3, 3);
  check_unary<T>("LeakyRelu", [](double x) { return x > 0 ? x : 0.5 * x; },
                 -3, 3, {{"alpha", graph::attr_value(0.5f)}});
  check_same_shape_binary<T>("LeakyReluGrad",
                             [](double g, double f) { return f > 0 ? g : static_cast<double>(0.2f) * g; },
                             -3, 3);
  check_unary<T>("Reciprocal", [](double x) { return 1 / x; }, 0.25, 4);
  check_unary<T>("Reciprocal", [](double x) { return 1 / x; }, -4, -0.25);
  check_same_shape_binary<T>("ReciprocalGrad", [](double y, double dy) { return -dy * y * y; }, -3, 3);
}

TEST_CASE("Relu6 on integers; integer Reciprocal refuses zero", "[nn2]") {
  auto x = tensor::from_vector<std::int32_t>({-5, 0, 3, 6, 7, 100});
  auto out = run(make_node("Relu6", dtype::int32), {x});
  CHECK(std::vector<std::int32_t>(out[0].flat<std::int32_t>().begin(), out[0].flat<std::int32_t>().end()) ==
        std::vector<std::int32_t>({0, 0, 3, 6, 6, 6}));
  auto r = run(make_node("Reciprocal", dtype::int64), {tensor::from_vector<std::int64_t>({1, -1, 2})});
  CHECK(r[0].data<std::int64_t>()[0] == 1);
  CHECK(r[0].data<std::int64_t>()[1] == -1);
  CHECK(r[0].data<std::int64_t>()[2] == 0);
  auto zero = kernels::run_kernel(make_node("Reciprocal", dtype::int32),
                                  {tensor::from_vector<std::int32_t>({1, 0})});
  REQUIRE_FALSE(zero.ok());
  CHECK_THAT(zero.error().message(), Catch::Contains("division by zero"));
  auto mismatch = kernels::run_kernel(make_node("EluGrad", dtype::float32),
                                      {tensor::zeros(dtype::float32, {2, 3}),
                                       tensor::zeros(dtype::float32, {3, 2})});
  REQUIRE_FALSE(mismatch.ok());
  CHECK_THAT(mismatch.error().message(), Catch::Contains("[2,3]") && Catch::Contains("[3,2]"));
}

// ---- Broadcasting binary ops ----

// Broadcasts x and y (numpy rules) and applies ref in double, in output order.
std::vector<double> broadcast_reference(const std::vector<double>& x, const tensor_shape& xs,
                                        const std::vector<double>& y, const tensor_shape& ys,
                                        const tensor_shape& out, const binary_reference& ref) {
  std::vector<double> result;
  int rank = out.rank();
  auto offset = [&](const tensor_shape& s, const std::vector<std::int64_t>& index) {
    std::int64_t o = 0;
    for (int i = 0; i < s.rank(); ++i) {
      std::int64_t d = s.dim(i);
      std::int64_t k = index[static_cast<std::size_t>(rank - s.rank() + i)];
      o = o * d + (d == 1 ? 0 : k);
    }
    return o;
  };
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
  for (std::int64_t n = 0; n < out.num_elements(); ++n) {
    std::int64_t rest = n;
    for (int i = rank - 1; i >= 0; --i) {
      index[static_cast<std::size_t>(i)] = rest % out.dim(i);
      rest /= out.dim(i);
    }
    result.push_back(ref(x[static_cast<std::size_t>(offset(xs, index))],
                         y[static_cast<std::size_t>(offset(ys, index))]));
  }
  return result;
}

struct broadcast_pair {
  tensor_shape x, y, out;
};

std::vector<broadcast_pair> broadcast_pairs() {
  return {{{2, 3}, {2, 3}, {2, 3}}, {{2, 3}, {3}, {2, 3}},   {{2, 1}, {1, 3}, {2, 3}},
          {{}, {4, 2}, {4, 2}},     {{3, 1, 2}, {4, 1}, {3, 4, 2}}, {{0, 3}, {3}, {0, 3}},
          {{5}, {}, {5}}};
}

template <class T>
void check_broadcast_op(const std::string& op, const binary_reference& ref, double x_lo,
                        double x_hi, double y_lo, double y_hi) {
  std::mt19937 rng(42);
  for (const auto& p : broadcast_pairs()) {
    INFO(op << " " << dtype_name(dtype_of<T>) << " " << p.x << " with " << p.y << ", seed 42");
    tensor x = random_tensor<T>(p.x, rng, x_lo, x_hi);
    tensor y = random_tensor<T>(p.y, rng, y_lo, y_hi);
    if constexpr (std::is_integral_v<T>) {  // no zero divisors
      for (T& v : y.flat<T>()) if (v == 0) v = 1;
    }
    auto want = broadcast_reference(as_doubles<T>(x), p.x, as_doubles<T>(y), p.y, p.out, ref);
    auto out = run(make_node(op, dtype_of<T>), {x, y});
    check_close<T>(out[0], p.out, want, std::is_integral_v<T> ? 0.0 : 4 * tolerance_for<T>());
  }
}

double floor_div_reference(double x, double y) { return std::floor(x / y); }
double floor_mod_reference(double x, double y) { return x - std::floor(x / y) * y; }

TEMPLATE_TEST_CASE("Pow, FloorDiv and FloorMod broadcast and match reference loops", "[nn2]",
                   float, double, std::int32_t, std::int64_t) {
  using T = TestType;
  auto pow_ref = [](double x, double y) { return std::pow(x, y); };
  if constexpr (std::is_floating_point_v<T>) {
    check_broadcast_op<T>("Pow", pow_ref, 0.1, 3, -2, 2);
    check_broadcast_op<T>("FloorDiv", floor_div_reference, -10, 10, -3, 3);
    check_broadcast_op<T>("FloorMod", floor_mod_reference, -10, 10, -3, 3);
  } else {
    check_broadcast_op<T>("Pow", pow_ref, -5, 5, 0, 5);
    check_broadcast_op<T>("FloorDiv", floor_div_reference, -20, 20, -6, 6);
    check_broadcast_op<T>("FloorMod", floor_mod_reference, -20, 20, -6, 6);
  }
}

TEST_CASE("FloorDiv and FloorMod follow TensorFlow for negative operands", "[nn2]") {
  auto x = tensor::from_vector<std::int32_t>({7, -7, 7, -7, 6, -6, 0});
  auto y = tensor::from_vector<std::int32_t>({2, 2, -2, -2, 3, -3, -5});
  auto div = run(make_node("FloorDiv", dtype::int32), {x, y});
  auto mod = run(make_node("FloorMod", dtype::int32), {x, y});
  std::vector<std::int32_t> want_div = {3, -4, -4, 3, 2, 2, 0};
  std::vector<std::int32_t> want_mod = {1, 1, -1, -1, 0, 0, 0};
  for (std::size_t i = 0; i < want_div.size(); ++i) {
    INFO(x.data<std::int32_t>()[i] << " and " << y.data<std::int32_t>()[i]);
    CHECK(div[0].data<std::int32_t>()[i] == want_div[i]);
    CHECK(mod[0].data<std::int32_t>()[i] == want_mod[i]);
  }
  // Floats: the remainder takes the divisor's sign.
  auto fx = tensor::from_vector<float>({-7.5f, 7.5f, -7.5f});
  auto fy = tensor::from_vector<float>({2.0f, -2.0f, -2.0f});
  auto fmod = run(make_node("FloorMod", dtype::float32), {fx, fy});
  CHECK(fmod[0].data<float>()[0] == 0.5f);
  CHECK(fmod[0].data<float>()[1] == -0.5f);
  CHECK(fmod[0].data<float>()[2] == -1.5f);
  auto fdiv = run(make_node("FloorDiv", dtype::float32), {fx, fy});
  CHECK(fdiv[0].data<float>()[0] == -4.0f);
  CHECK(fdiv[0].data<float>()[1] == -4.0f);
  CHECK(fdiv[0].data<float>()[2] == 3.0f);
  // The most negative value by -1: the quotient wraps, the remainder is 0.
  constexpr auto lowest = std::numeric_limits<std::int32_t>::lowest();
  auto edge_x = tensor::from_vector<std::int32_t>({lowest});
  auto edge_y = tensor::from_vector<std::int32_t>({-1});
  CHECK(run(make_node("FloorDiv", dtype::int32), {edge_x, edge_y})[0].data<std::int32_t>()[0] == lowest);
  CHECK(run(make_node("FloorMod", dtype::int32), {edge_x, edge_y})[0].data<std::int32_t>()[0] == 0);
  // Unsigned.
  auto ux = tensor::from_vector<std::uint8_t>({200, 7});
  auto uy = tensor::from_vector<std::uint8_t>({7, 200});
  auto umod = run(make_node("FloorMod", dtype::uint8), {ux, uy});
  CHECK(umod[0].data<std::uint8_t>()[0] == 200 % 7);
  CHECK(umod[0].data<std::uint8_t>()[1] == 7);
}

TEST_CASE("integer FloorDiv, FloorMod and Pow refuse bad divisors and exponents", "[nn2]") {
  auto x = tensor::from_vector<std::int32_t>({4, 5});
  for (const char* op : {"FloorDiv", "FloorMod"}) {
    auto r = kernels::run_kernel(make_node(op, dtype::int32), {x, tensor::from_vector<std::int32_t>({1, 0})});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message(), Catch::Contains("division by zero"));
  }
  auto p = kernels::run_kernel(make_node("Pow", dtype::int64),
                               {tensor::from_vector<std::int64_t>({2}), tensor::from_vector<std::int64_t>({-1})});
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.error().message(), Catch::Contains("negative integer powers"));
  auto bad = kernels::run_kernel(make_node("Pow", dtype::float32),
                                 {tensor::zeros(dtype::float32, {2, 3}), tensor::zeros(dtype::float32, {2})});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("Incompatible shapes"));
}

// ---- ClipByValue, L2Loss ----

TEMPLATE_TEST_CASE("ClipByValue clips to broadcast bounds", "[nn2]", float, double, std::int32_t) {
  using T = TestType;
  std::mt19937 rng(42);
  struct clip_case {
    tensor_shape t, lo, hi;
  };
  for (const auto& c : std::vector<clip_case>{{{2, 3}, {}, {}}, {{2, 3}, {2, 3}, {3}},
                                              {{4, 1, 2}, {1, 2}, {}}, {{0, 2}, {}, {2}}}) {
    INFO(dtype_name(dtype_of<T>) << " t " << c.t << ", min " << c.lo << ", max " << c.hi);
    tensor t = random_tensor<T>(c.t, rng, -10, 10);
    tensor lo = random_tensor<T>(c.lo, rng, -6, 0);
    tensor hi = random_tensor<T>(c.hi, rng, 0, 6);
    auto lo_b = broadcast_reference(as_doubles<T>(t), c.t, as_doubles<T>(lo), c.lo, c.t,
                                    [](double, double l) { return l; });
    auto hi_b = broadcast_reference(as_doubles<T>(t), c.t, as_doubles<T>(hi), c.hi, c.t,
                                    [](double, double h) { return h; });
    auto tv = as_doubles<T>(t);
    std::vector<double> want;
    for (std::size_t i = 0; i < tv.size(); ++i) want.push_back(std::max(std::min(tv[i], hi_b[i]), lo_b[i]));
    auto out = run(make_node("ClipByValue", dtype_of<T>), {t, lo, hi});
    check_close<T>(out[0], c.t, want, 0.0);
  }
  auto bad = kernels::run_kernel(make_node("ClipByValue", dtype_of<T>),
                                 {tensor::zeros(dtype_of<T>, {2, 3}), tensor::zeros(dtype_of<T>, {2, 2, 3}),
                                  tensor::zeros(dtype_of<T>, {})});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("[2,2,3]") && Catch::Contains("[2,3]"));
}

TEMPLATE_TEST_CASE("L2Loss is half the sum of squares", "[nn2]", float, double) {
  using T = TestType;
  std::mt19937 rng(42);
  for (int trial = 0; trial < 10; ++trial) {
    tensor t = random_tensor<T>(random_shape(rng), rng, -3, 3);
    double want = 0;
    for (double v : as_doubles<T>(t)) want += v * v / 2;
    auto out = run(make_node("L2Loss", dtype_of<T>), {t});
    check_close<T>(out[0], tensor_shape{}, {want}, tolerance_for<T>());
  }
}

// ---- LRN ----

struct lrn_params {
  std::int64_t depth_radius = 5;
  double bias = 1, alpha = 1, beta = 0.5;
  attrs node_attrs() const {
    return {{"depth_radius", graph::attr_value(depth_radius)},
            {"bias", graph::attr_value(static_cast<float>(bias))},
            {"alpha", graph::attr_value(static_cast<float>(alpha))},
            {"beta", graph::attr_value(static_cast<float>(beta))}};
  }
};

std::vector<double> lrn_reference(const std::vector<double>& x, std::int64_t depth, const lrn_params& p) {
  std::vector<double> y(x.size());
  auto rows = static_cast<std::int64_t>(x.size()) / depth;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t d = 0; d < depth; ++d) {
      double sum = 0;
      for (std::int64_t k = std::max<std::int64_t>(0, d - p.depth_radius);
           k <= std::min(depth - 1, d + p.depth_radius); ++k) {
        sum += x[r * depth + k] * x[r * depth + k];
      }
      y[r * depth + d] = x[r * depth + d] / std::pow(p.bias + p.alpha * sum, p.beta);
    }
  }
  return y;
}

// The float32 round trip of a parameter, as the kernel sees it.
lrn_params as_float(lrn_params p) {
  p.bias = static_cast<float>(p.bias);
  p.alpha = static_cast<float>(p.alpha);
  p.beta = static_cast<float>(p.beta);
  return p;
}

TEMPLATE_TEST_CASE("LRN and LRNGrad match the reference and its central differences", "[nn2]",
                   float, double) {
  using T = TestType;
  std::mt19937 rng(42);
  for (const lrn_params& raw : {lrn_params{}, lrn_params{2, 2.0, 0.3, 0.75}, lrn_params{0, 1.5, 1e-3, 1.0}}) {
    lrn_params p = as_float(raw);
    for (const tensor_shape& shape : {tensor_shape{1, 2, 2, 7}, tensor_shape{2, 1, 3, 12},
                                      tensor_shape{1, 1, 1, 1}, tensor_shape{0, 2, 2, 3}}) {
      INFO(dtype_name(dtype_of<T>) << " " << shape << " depth_radius " << p.depth_radius);
      tensor x = random_tensor<T>(shape, rng, -2, 2);
      std::int64_t depth = shape.dim(3);
      auto xv = as_doubles<T>(x);
      auto out = run(make_node("LRN", dtype_of<T>, p.node_attrs()), {x});
      check_close<T>(out[0], shape, lrn_reference(xv, depth, p), std::is_same_v<T, float> ? 1e-4 : 1e-7);

      // d/dx of sum(dy * lrn(x)) by central differences of the reference.
      tensor dy = random_tensor<T>(shape, rng, -1, 1);
      auto dyv = as_doubles<T>(dy);
      std::vector<double> want(xv.size());
      const double eps = 1e-6;
      for (std::size_t i = 0; i < xv.size(); ++i) {
        auto plus = xv, minus = xv;
        plus[i] += eps;
        minus[i] -= eps;
        auto yp = lrn_reference(plus, depth, p), ym = lrn_reference(minus, depth, p);
        double d = 0;
        for (std::size_t k = 0; k < xv.size(); ++k) d += dyv[k] * (yp[k] - ym[k]);
        want[i] = d / (2 * eps);
      }
      auto grad = run(make_node("LRNGrad", dtype_of<T>, p.node_attrs()), {dy, x, out[0]});
      check_close<T>(grad[0], shape, want, std::is_same_v<T, float> ? 1e-4 : 1e-7);
    }
  }
  auto bad = kernels::run_kernel(make_node("LRN", dtype_of<T>), {tensor::zeros(dtype_of<T>, {2, 3})});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("4-dimensional"));
}

// ---- FusedBatchNormV3 ----

struct batch_norm_case {
  tensor_shape shape;
  std::string format;
};

// The [outer, channels, inner] view of shape for a data format.
void layout(const tensor_shape& shape, const std::string& format, std::int64_t* outer,
            std::int64_t* channels, std::int64_t* inner) {
  int channel_dim = format[1] == 'C' ? 1 : shape.rank() - 1;
  *outer = *inner = 1;
  for (int i = 0; i < shape.rank(); ++i) {
    if (i < channel_dim) *outer *= shape.dim(i);
    else if (i == channel_dim) *channels = shape.dim(i);
    else *inner *= shape.dim(i);
  }
}

struct batch_norm_reference {
  std::vector<double> y, mean, biased_variance;
};

// Normalizes with the batch statistics (training) or the given ones.
batch_norm_reference batch_norm(const std::vector<double>& x, const tensor_shape& shape,
                                const std::string& format, const std::vector<double>& scale,
                                const std::vector<double>& offset, double epsilon,
                                const std::vector<double>* mean_in = nullptr,
                                const std::vector<double>* variance_in = nullptr) {
  std::int64_t outer, channels, inner;
  layout(shape, format, &outer, &channels, &inner);
  auto index = [&](std::int64_t o, std::int64_t c, std::int64_t k) {
    return static_cast<std::size_t>((o * channels + c) * inner + k);
  };
  batch_norm_reference r;
  r.y.resize(x.size());
  for (std::int64_t c = 0; c < channels; ++c) {
    double mean = 0, variance = 0;
    double n = static_cast<double>(outer * inner);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t k = 0; k < inner; ++k) mean += x[index(o, c, k)] / n;
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t k = 0; k < inner; ++k) variance += (x[index(o, c, k)] - mean) * (x[index(o, c, k)] - mean) / n;
    r.mean.push_back(mean);
    r.biased_variance.push_back(variance);
    if (mean_in != nullptr) {
      mean = (*mean_in)[static_cast<std::size_t>(c)];
      variance = (*variance_in)[static_cast<std::size_t>(c)];
    }
    auto u = static_cast<std::size_t>(c);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t k = 0; k < inner; ++k)
        r.y[index(o, c, k)] = (x[index(o, c, k)] - mean) / std::sqrt(variance + epsilon) * scale[u] + offset[u];
  }
  return r;
}

std::vector<batch_norm_case> batch_norm_cases() {
  return {{{2, 3, 3, 4}, "NHWC"}, {{2, 4, 3, 3}, "NCHW"}, {{1, 1, 5, 2}, "NHWC"},
          {{2, 2, 1, 2, 3}, "NDHWC"}, {{3, 2, 2, 1, 2}, "NCDHW"}};
}

tf::NodeDef batch_norm_node(const std::string& op, dtype type, const std::string& format,
                            bool is_training, float epsilon = 1e-3f) {
  tf::NodeDef node = make_node(op, type,
                               {{"U", graph::attr_value(type)},
                                {"data_format", graph::attr_value(format)},
                                {"is_training", graph::attr_value(is_training)},
                                {"epsilon", graph::attr_value(epsilon)}});
  return node;
}

TEMPLATE_TEST_CASE("FusedBatchNormV3 in training and inference", "[nn2]", float, double) {
  using T = TestType;
  std::mt19937 rng(42);
  const double epsilon = static_cast<float>(1e-3f);
  const double tolerance = std::is_same_v<T, float> ? 1e-4 : 1e-10;
  for (const auto& c : batch_norm_cases()) {
    INFO(dtype_name(dtype_of<T>) << " " << c.shape << " " << c.format);
    std::int64_t outer, channels, inner;
    layout(c.shape, c.format, &outer, &channels, &inner);
    tensor_shape vector{channels};
    tensor x = random_tensor<T>(c.shape, rng, -3, 5);
    tensor scale = random_tensor<T>(vector, rng, 0.5, 2);
    tensor offset = random_tensor<T>(vector, rng, -1, 1);
    tensor mean = random_tensor<T>(vector, rng, -1, 1);
    tensor variance = random_tensor<T>(vector, rng, 0.5, 2);
    auto xv = as_doubles<T>(x), sv = as_doubles<T>(scale), ov = as_doubles<T>(offset);
    auto mv = as_doubles<T>(mean), vv = as_doubles<T>(variance);
    const double n = static_cast<double>(outer * inner);

    SECTION("training") {
      auto ref = batch_norm(xv, c.shape, c.format, sv, ov, epsilon);
      std::vector<double> bessel;
      for (double v : ref.biased_variance) bessel.push_back(v * n / std::max(n - 1, 1.0));
      // The running statistics are not read: empty ones are fine.
      tensor empty = tensor::zeros(dtype_of<T>, {0});
      auto out = run(batch_norm_node("FusedBatchNormV3", dtype_of<T>, c.format, true),
                     {x, scale, offset, empty, empty});
      REQUIRE(out.size() == 6);
      check_close<T>(out[0], c.shape, ref.y, tolerance);
      check_close<T>(out[1], vector, ref.mean, tolerance);
      check_close<T>(out[2], vector, bessel, tolerance);
      check_close<T>(out[3], vector, ref.mean, tolerance);
      check_close<T>(out[4], vector, ref.biased_variance, tolerance);
      CHECK(out[5].shape() == tensor_shape{});
    }
    SECTION("training with exponential_avg_factor 0.25") {
      auto ref = batch_norm(xv, c.shape, c.format, sv, ov, epsilon);
      std::vector<double> want_mean, want_variance;
      for (std::size_t i = 0; i < mv.size(); ++i) {
        want_mean.push_back(0.75 * mv[i] + 0.25 * ref.mean[i]);
        want_variance.push_back(0.75 * vv[i] + 0.25 * ref.biased_variance[i] * n / std::max(n - 1, 1.0));
      }
      tf::NodeDef node = batch_norm_node("FusedBatchNormV3", dtype_of<T>, c.format, true);
      (*node.mutable_attr())["exponential_avg_factor"] = graph::attr_value(0.25f);
      auto out = run(node, {x, scale, offset, mean, variance});
      check_close<T>(out[0], c.shape, ref.y, tolerance);
      check_close<T>(out[1], vector, want_mean, tolerance);
      check_close<T>(out[2], vector, want_variance, tolerance);
      check_close<T>(out[4], vector, ref.biased_variance, tolerance);
    }
    SECTION("inference") {
      auto ref = batch_norm(xv, c.shape, c.format, sv, ov, epsilon, &mv, &vv);
      auto out = run(batch_norm_node("FusedBatchNormV3", dtype_of<T>, c.format, false),
                     {x, scale, offset, mean, variance});
      check_close<T>(out[0], c.shape, ref.y, tolerance);
      check_close<T>(out[1], vector, mv, 0.0);
      check_close<T>(out[2], vector, vv, 0.0);
      check_close<T>(out[3], vector, mv, 0.0);
      check_close<T>(out[4], vector, vv, 0.0);
    }
    SECTION("FusedBatchNormGradV3 against central differences") {
      for (bool is_training : {true, false}) {
        INFO("is_training " << is_training);
        tensor dy = random_tensor<T>(c.shape, rng, -1, 1);
        auto dyv = as_doubles<T>(dy);
        auto forward = run(batch_norm_node("FusedBatchNormV3", dtype_of<T>, c.format, is_training),
                           {x, scale, offset, mean, variance});
        // loss(x, scale, offset) = sum(dy * y).
        auto loss = [&](const std::vector<double>& xs, const std::vector<double>& ss,
                        const std::vector<double>& os) {
          auto r = is_training ? batch_norm(xs, c.shape, c.format, ss, os, epsilon)
                               : batch_norm(xs, c.shape, c.format, ss, os, epsilon, &mv, &vv);
          double total = 0;
          for (std::size_t i = 0; i < r.y.size(); ++i) total += dyv[i] * r.y[i];
          return total;
        };
        const double eps = 1e-6;
        auto numeric = [&](std::vector<double> v, int which) {
          std::vector<double> out(v.size());
          for (std::size_t i = 0; i < v.size(); ++i) {
            auto plus = v, minus = v;
            plus[i] += eps;
            minus[i] -= eps;
            auto at = [&](const std::vector<double>& w) {
              return which == 0 ? loss(w, sv, ov) : which == 1 ? loss(xv, w, ov) : loss(xv, sv, w);
            };
            out[i] = (at(plus) - at(minus)) / (2 * eps);
          }
          return out;
        };
        auto grad = run(batch_norm_node("FusedBatchNormGradV3", dtype_of<T>, c.format, is_training),
                        {dy, x, scale, is_training ? forward[3] : mean,
                         is_training ? forward[4] : variance, forward[5]});
        REQUIRE(grad.size() == 5);
        const double grad_tolerance = std::is_same_v<T, float> ? 2e-3 : 1e-6;
        check_close<T>(grad[0], c.shape, numeric(xv, 0), grad_tolerance);
        check_close<T>(grad[1], vector, numeric(sv, 1), grad_tolerance);
        check_close<T>(grad[2], vector, numeric(ov, 2), grad_tolerance);
        CHECK(grad[3].shape() == tensor_shape{0});
        CHECK(grad[4].shape() == tensor_shape{0});
      }
    }
  }
}

TEST_CASE("FusedBatchNormV3 reports bad shapes and formats", "[nn2]") {
  tensor x = tensor::zeros(dtype::float32, {2, 2, 2, 3});
  tensor v3 = tensor::zeros(dtype::float32, {3});
  tensor v4 = tensor::zeros(dtype::float32, {4});
  auto bad_scale = kernels::run_kernel(batch_norm_node("FusedBatchNormV3", dtype::float32, "NHWC", true),
                                       {x, v4, v3, v3, v3});
  REQUIRE_FALSE(bad_scale.ok());
  CHECK_THAT(bad_scale.error().message(), Catch::Contains("scale") && Catch::Contains("[4]"));
  // Inference reads mean and variance: they must have one element per channel.
  auto bad_mean = kernels::run_kernel(batch_norm_node("FusedBatchNormV3", dtype::float32, "NHWC", false),
                                      {x, v3, v3, tensor::zeros(dtype::float32, {0}), v3});
  REQUIRE_FALSE(bad_mean.ok());
  CHECK_THAT(bad_mean.error().message(), Catch::Contains("mean"));
  auto bad_rank = kernels::run_kernel(batch_norm_node("FusedBatchNormV3", dtype::float32, "NDHWC", true),
                                      {x, v3, v3, v3, v3});
  REQUIRE_FALSE(bad_rank.ok());
  CHECK_THAT(bad_rank.error().message(), Catch::Contains("5-dimensional"));
  // An empty batch in training gives NaN statistics.
  auto empty = run(batch_norm_node("FusedBatchNormV3", dtype::float32, "NHWC", true),
                   {tensor::zeros(dtype::float32, {0, 2, 2, 3}), v3, v3, v3, v3});
  CHECK(empty[0].shape() == tensor_shape{0, 2, 2, 3});
  CHECK(std::isnan(empty[1].data<float>()[0]));
}

// ---- Shape functions ----

result<std::vector<partial_shape>> infer(const tf::NodeDef& node, std::vector<partial_shape> inputs) {
  const graph::op_def* op = graph::op_registry::builtin().find(node.op());
  REQUIRE(op != nullptr);
  REQUIRE(op->shape);
  tf::NodeDef full = node;
  REQUIRE(graph::add_defaults_and_validate_attrs(*op, &full).ok());
  std::vector<dtype> input_types, output_types;
  REQUIRE(graph::input_output_types(*op, full, &input_types, &output_types).ok());
  std::vector<const tensor*> values(inputs.size(), nullptr);
  graph::shape_context ctx(full, *op, std::move(inputs), values, input_types,
                           static_cast<int>(output_types.size()));
  status s = op->shape(ctx);
  if (!s.ok()) return s;
  return ctx.outputs();
}

TEST_CASE("nn2 shape functions", "[nn2]") {
  CHECK((*infer(make_node("Relu6", dtype::float32), {{-1, 5}}))[0] == partial_shape{-1, 5});
  CHECK((*infer(make_node("EluGrad", dtype::float32), {{-1, 5}, {3, -1}}))[0] == partial_shape{3, 5});
  CHECK_FALSE(infer(make_node("LeakyReluGrad", dtype::float32), {{2, 5}, {3, 5}}).ok());
  CHECK((*infer(make_node("Pow", dtype::float32), {{2, 1}, {3}}))[0] == partial_shape{2, 3});
  CHECK_FALSE(infer(make_node("FloorMod", dtype::int32), {{2}, {3}}).ok());
  CHECK((*infer(make_node("L2Loss", dtype::float32), {{4, 5}}))[0] == partial_shape(std::vector<std::int64_t>{}));

  tf::NodeDef clip = make_node("ClipByValue", dtype::float32);
  CHECK((*infer(clip, {{2, 3}, {}, {3}}))[0] == partial_shape{2, 3});
  auto bad_clip = infer(clip, {{2, 3}, {4, 2, 3}, {}});
  REQUIRE_FALSE(bad_clip.ok());
  CHECK_THAT(bad_clip.error().message(), Catch::Contains("clip_value_min"));

  CHECK((*infer(make_node("LRN", dtype::float32), {partial_shape::unknown()}))[0] ==
        partial_shape::unknown_of_rank(4));
  CHECK_FALSE(infer(make_node("LRN", dtype::float32), {{2, 3}}).ok());
  CHECK((*infer(make_node("LRNGrad", dtype::float32), {{-1, 2, 2, 3}, {4, -1, 2, 3}, partial_shape::unknown()}))[0] ==
        partial_shape{4, 2, 2, 3});

  tf::NodeDef bn = batch_norm_node("FusedBatchNormV3", dtype::float32, "NCHW", true);
  auto out = infer(bn, {{-1, 3, 4, 4}, {-1}, {3}, {0}, {0}});
  REQUIRE(out.ok());
  CHECK((*out)[0] == partial_shape{-1, 3, 4, 4});
  for (int i = 1; i <= 4; ++i) CHECK((*out)[static_cast<std::size_t>(i)] == partial_shape{3});
  CHECK_FALSE(infer(bn, {{2, 3, 4, 4}, {4}, {3}, {0}, {0}}).ok());
  CHECK_FALSE(infer(batch_norm_node("FusedBatchNormV3", dtype::float32, "NHWC", false),
                    {{2, 4, 4, 3}, {3}, {3}, {0}, {3}}).ok());

  tf::NodeDef bn_grad = batch_norm_node("FusedBatchNormGradV3", dtype::float32, "NHWC", true);
  auto g = infer(bn_grad, {{2, -1, 4, 3}, {-1, 4, 4, -1}, {3}, {3}, {3}, partial_shape::unknown()});
  REQUIRE(g.ok());
  CHECK((*g)[0] == partial_shape{2, 4, 4, 3});
  CHECK((*g)[1] == partial_shape{3});
  CHECK((*g)[3] == partial_shape{0});
}

}  // namespace
}  // namespace troupe
