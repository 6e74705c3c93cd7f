// Element-wise CPU kernels against a plain reference loop.
//
// Each op is one row of a table (unary, binary); every row runs on every dtype it has
// kernels for, over a list of shapes covering the broadcasting corners (scalars, [3,1]
// x [1,4], rank mismatch, empty tensors), large shapes that parallel_for splits, and
// random shapes. Every case runs twice: with inputs the test still holds (the kernel must
// not write into them) and with inputs handed over (the kernel may reuse their buffers).
// The reference computes in double with numpy broadcasting written out index by index.
// Random values come from std::mt19937 seeded with k_seed.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/kernel_registry.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

constexpr std::uint32_t k_seed = 42;

const std::vector<dtype> k_float = {dtype::float32, dtype::float64};
const std::vector<dtype> k_signed = {dtype::float32, dtype::float64, dtype::int8,
                                     dtype::int16,   dtype::int32,   dtype::int64};
const std::vector<dtype> k_real = {dtype::float32, dtype::float64, dtype::int8,  dtype::int16,
                                   dtype::int32,   dtype::int64,   dtype::uint8, dtype::uint16};
const std::vector<dtype> k_all = {dtype::float32, dtype::float64, dtype::int8,
                                  dtype::int16,   dtype::int32,   dtype::int64,
                                  dtype::uint8,   dtype::uint16,  dtype::bool_};

// Four threads, so that large tensors are split into several blocks even on small machines.
compute_pool& test_pool() {
  static compute_pool pool(4, "cwise-test");
  return pool;
}

// --- Values ------------------------------------------------------------------------------

enum class domain {
  any,       // floats: multiples of 1/4 in [-3, 3] (so comparisons see ties); ints: small
  positive,  // > 0 (Log, Sqrt, Rsqrt)
  nonzero,   // divisors
};

tensor random_tensor(dtype type, const tensor_shape& shape, domain d, std::mt19937& rng) {
  tensor t(type, shape);
  visit_dtype(type, [&]<class T>() {
    T* data = t.data<T>();
    for (std::int64_t i = 0; i < t.num_elements(); ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        data[i] = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
      } else if constexpr (std::is_floating_point_v<T>) {
        if (d == domain::positive) {
          data[i] = static_cast<T>(std::uniform_real_distribution<double>(0.05, 5.0)(rng));
        } else {
          int q = std::uniform_int_distribution<int>(-12, 12)(rng);
          if (d == domain::nonzero && q == 0) q = 5;
          data[i] = static_cast<T>(q / 4.0);
        }
      } else {
        int lo = std::is_signed_v<T> ? -10 : 0;
        if (d == domain::positive) lo = 1;
        int v = std::uniform_int_distribution<int>(lo, 20)(rng);
        if (d == domain::nonzero && v == 0) v = 7;
        data[i] = static_cast<T>(v);
      }
    }
  });
  return t;
}

std::vector<double> to_doubles(const tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.num_elements()));
  visit_dtype(t.type(), [&]<class T>() {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(t.data<T>()[i]);
  });
  return out;
}

// An exact reference value as the integer dtype T stores it: truncated toward zero, then
// wrapped (two's complement), as the kernels' integer arithmetic does.
template <class T>
T to_integer(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return static_cast<T>(static_cast<std::int64_t>(v));
  }
}

// Empty when `got` has dtype `type`, shape `shape` and the values `want` (within a
// relative 1e-5 for float, 1e-12 for double; NaN matches NaN); else the first mismatch.
std::string mismatch(const tensor& got, dtype type, const tensor_shape& shape,
                     const std::vector<double>& want) {
  if (!got.initialized()) return "output is uninitialized";
  if (got.type() != type) {
    return str_cat("dtype ", dtype_name(got.type()), ", want ", dtype_name(type));
  }
  if (got.shape() != shape) return str_cat("shape ", got.shape(), ", want ", shape);
  std::string error;
  visit_dtype(type, [&]<class T>() {
    const T* data = got.data<T>();
    for (std::size_t i = 0; i < want.size(); ++i) {
      bool same;
      if constexpr (std::is_floating_point_v<T>) {
        double tolerance = std::is_same_v<T, float> ? 1e-5 : 1e-12;
        double g = data[i];
        double w = static_cast<T>(want[i]);
        same = (std::isnan(g) && std::isnan(w)) || g == w ||
               std::abs(g - w) <= tolerance * std::max(1.0, std::abs(w));
      } else {
        same = data[i] == to_integer<T>(want[i]);
      }
      if (!same) {
        error = str_cat("element ", i, " is ", static_cast<double>(data[i]), ", want ", want[i],
                        " (", got.debug_string(), ")");
        return;
      }
    }
  });
  return error;
}

// --- Reference broadcasting --------------------------------------------------------------

result<tensor_shape> reference_broadcast(const std::vector<tensor_shape>& shapes) {
  int rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.rank());
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank), 1);
  for (const auto& s : shapes) {
    for (int i = 0; i < s.rank(); ++i) {
      auto& d = dims[static_cast<std::size_t>(rank - s.rank() + i)];
      std::int64_t sd = s.dim(i);
      if (sd == d || sd == 1) continue;
      if (d != 1) return invalid_argument_error("incompatible");
      d = sd;
    }
  }
  return tensor_shape(dims);
}

// The flat index into an operand of shape `s` for the output multi-index `index`.
std::int64_t source_index(const std::vector<std::int64_t>& index, const tensor_shape& s) {
  std::int64_t flat = 0;
  int offset = static_cast<int>(index.size()) - s.rank();
  for (int i = 0; i < s.rank(); ++i) {
    std::int64_t d = s.dim(i);
    flat = flat * d + (d == 1 ? 0 : index[static_cast<std::size_t>(offset + i)]);
  }
  return flat;
}

// Calls f(output flat index, source flat index per operand) over the broadcast output.
void for_each_broadcast(
    const tensor_shape& out, const std::vector<tensor_shape>& shapes,
    const std::function<void(std::int64_t, const std::vector<std::int64_t>&)>& f) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(out.rank()), 0);
  std::vector<std::int64_t> sources(shapes.size());
  for (std::int64_t flat = 0; flat < out.num_elements(); ++flat) {
    std::int64_t rest = flat;
    for (int i = out.rank() - 1; i >= 0; --i) {
      index[static_cast<std::size_t>(i)] = rest % out.dim(i);
      rest /= out.dim(i);
    }
    for (std::size_t k = 0; k < shapes.size(); ++k) sources[k] = source_index(index, shapes[k]);
    f(flat, sources);
  }
}

// --- Running kernels ---------------------------------------------------------------------

using attr_list = std::vector<std::pair<std::string, tf::AttrValue>>;

tf::NodeDef make_node(const std::string& op, const attr_list& attrs) {
  tf::NodeDef node;
  node.set_name(op + "_test");
  node.set_op(op);
  for (const auto& [name, value] : attrs) (*node.mutable_attr())[name] = value;
  return node;
}

attr_list type_attr(dtype t) { return {{"T", graph::attr_value(t)}}; }

// Runs the node with inputs the caller keeps (checking they come back unchanged), or,
// when `donate`, with private copies the kernel may overwrite.
result<tensor> run(const tf::NodeDef& node, const std::vector<tensor>& inputs, bool donate) {
  std::vector<tensor> given;
  std::vector<tensor> snapshots;
  for (const auto& t : inputs) {
    given.push_back(donate ? t.deep_copy() : t);
    snapshots.push_back(t.deep_copy());
  }
  auto out = kernels::run_kernel(node, given, &test_pool());
  given.clear();
  if (!donate) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      INFO("input " << i << " of " << node.op() << " was modified in place");
      CHECK(inputs[i].equals(snapshots[i]));
    }
  }
  if (!out.ok()) return out.error();
  if (out->size() != 1) return internal_error("expected one output, got ", out->size());
  return (*out)[0];
}

// --- Shapes ------------------------------------------------------------------------------

struct shape_pair {
  tensor_shape x;
  tensor_shape y;
  bool large = false;  // run only for a few dtypes: the reference loop is slow
};

std::vector<shape_pair> binary_shapes() {
  std::vector<shape_pair> shapes = {
      {{}, {}},
      {{5}, {5}},
      {{2, 3}, {2, 3}},
      {{3, 1}, {1, 4}},
      {{1, 4}, {3, 1}},
      {{}, {2, 3}},
      {{2, 3}, {}},
      {{1}, {3, 4}},
      {{3, 4}, {1, 1, 1}},  // one element, but adds a dimension: not the scalar path
      {{2, 3, 4}, {4}},
      {{4}, {2, 3, 4}},
      {{2, 3, 4}, {3, 1}},
      {{2, 1, 3}, {4, 1}},
      {{2, 3, 4, 5}, {3, 1, 5}},
      {{5, 1, 1, 7}, {1, 6, 1, 7}},
      {{1, 1, 7}, {7}},
      {{0, 3}, {1, 3}},
      {{1, 3}, {0, 3}},
      {{0, 3}, {}},
      {{0}, {0}},
      {{2, 0, 3}, {2, 1, 3}},
      {{600, 257}, {600, 257}, true},
      {{600, 257}, {257}, true},
      {{600, 1}, {1, 257}, true},
      {{}, {600, 257}, true},
  };
  // Random broadcast-compatible pairs: each operand drops leading dimensions and sets
  // some dimensions to 1.
  std::mt19937 rng(k_seed);
  for (int c = 0; c < 20; ++c) {
    int rank = std::uniform_int_distribution<int>(1, 5)(rng);
    std::vector<std::int64_t> out;
    for (int i = 0; i < rank; ++i) out.push_back(std::uniform_int_distribution<int>(1, 4)(rng));
    auto operand = [&] {
      int drop = std::uniform_int_distribution<int>(0, rank)(rng);
      std::vector<std::int64_t> dims;
      for (int i = drop; i < rank; ++i) {
        bool one = std::uniform_int_distribution<int>(0, 2)(rng) == 0;
        dims.push_back(one ? 1 : out[static_cast<std::size_t>(i)]);
      }
      return tensor_shape(dims);
    };
    tensor_shape x = operand();
    tensor_shape y = operand();
    shapes.push_back({x, y});
  }
  return shapes;
}

std::vector<tensor_shape> unary_shapes() {
  return {{}, {1}, {7}, {3, 4}, {2, 0, 5}, {0}, {2, 3, 4, 5}, {1000, 300}};
}

bool runs_large(dtype t) { return t == dtype::float32 || t == dtype::int32; }

// --- The op tables -----------------------------------------------------------------------

struct unary_row {
  const char* op;
  const std::vector<dtype>* types;
  domain values;
  double (*reference)(double);
};

const unary_row k_unary_ops[] = {
    {"Neg", &k_signed, domain::any, [](double x) { return -x; }},
    {"Abs", &k_signed, domain::any, [](double x) { return std::abs(x); }},
    {"Square", &k_real, domain::any, [](double x) { return x * x; }},
    {"Sqrt", &k_float, domain::positive, [](double x) { return std::sqrt(x); }},
    {"Rsqrt", &k_float, domain::positive, [](double x) { return 1 / std::sqrt(x); }},
    {"Exp", &k_float, domain::any, [](double x) { return std::exp(x); }},
    {"Log", &k_float, domain::positive, [](double x) { return std::log(x); }},
    {"Tanh", &k_float, domain::any, [](double x) { return std::tanh(x); }},
    {"Sigmoid", &k_float, domain::any, [](double x) { return 1 / (1 + std::exp(-x)); }},
    {"Relu", &k_real, domain::any, [](double x) { return x < 0 ? 0.0 : x; }},
};

struct binary_row {
  const char* op;
  const std::vector<dtype>* types;
  domain rhs_values;
  bool bool_output;
  double (*reference)(double, double);  // integer results are truncated and wrapped
};

const binary_row k_binary_ops[] = {
    {"Add", &k_real, domain::any, false, [](double a, double b) { return a + b; }},
    {"AddV2", &k_real, domain::any, false, [](double a, double b) { return a + b; }},
    {"Sub", &k_real, domain::any, false, [](double a, double b) { return a - b; }},
    {"Mul", &k_real, domain::any, false, [](double a, double b) { return a * b; }},
    {"RealDiv", &k_real, domain::nonzero, false, [](double a, double b) { return a / b; }},
    {"Maximum", &k_real, domain::any, false, [](double a, double b) { return std::max(a, b); }},
    {"Minimum", &k_real, domain::any, false, [](double a, double b) { return std::min(a, b); }},
    {"Equal", &k_all, domain::any, true, [](double a, double b) { return double(a == b); }},
    {"NotEqual", &k_all, domain::any, true, [](double a, double b) { return double(a != b); }},
    {"Less", &k_real, domain::any, true, [](double a, double b) { return double(a < b); }},
    {"LessEqual", &k_real, domain::any, true, [](double a, double b) { return double(a <= b); }},
    {"Greater", &k_real, domain::any, true, [](double a, double b) { return double(a > b); }},
    {"GreaterEqual", &k_real, domain::any, true, [](double a, double b) { return double(a >= b); }},
};

// --- Tests -------------------------------------------------------------------------------

TEST_CASE("unary ops match the reference on every dtype and shape", "[cwise]") {
  std::mt19937 rng(k_seed);
  for (const auto& row : k_unary_ops) {
    for (dtype type : *row.types) {
      for (const auto& shape : unary_shapes()) {
        if (shape.num_elements() > 10000 && !runs_large(type)) continue;
        tensor x = random_tensor(type, shape, row.values, rng);
        std::vector<double> want = to_doubles(x);
        for (double& v : want) v = row.reference(v);
        for (bool donate : {false, true}) {
          INFO(row.op << " " << dtype_name(type) << " " << shape << (donate ? " donated" : "")
                      << " seed " << k_seed);
          auto y = run(make_node(row.op, type_attr(type)), {x}, donate);
          REQUIRE(y.ok());
          CHECK(mismatch(*y, type, shape, want) == "");
        }
      }
    }
  }
}

TEST_CASE("binary ops match the reference with numpy broadcasting", "[cwise]") {
  std::mt19937 rng(k_seed);
  const auto shapes = binary_shapes();
  for (const auto& row : k_binary_ops) {
    for (dtype type : *row.types) {
      for (const auto& [xs, ys, large] : shapes) {
        if (large && !runs_large(type)) continue;
        tensor x = random_tensor(type, xs, domain::any, rng);
        tensor y = random_tensor(type, ys, row.rhs_values, rng);
        auto out_shape = reference_broadcast({xs, ys});
        REQUIRE(out_shape.ok());
        std::vector<double> xv = to_doubles(x);
        std::vector<double> yv = to_doubles(y);
        std::vector<double> want(static_cast<std::size_t>(out_shape->num_elements()));
        for_each_broadcast(*out_shape, {xs, ys}, [&](std::int64_t o, const auto& in) {
          want[static_cast<std::size_t>(o)] = row.reference(xv[static_cast<std::size_t>(in[0])],
                                                            yv[static_cast<std::size_t>(in[1])]);
        });
        dtype out_type = row.bool_output ? dtype::bool_ : type;
        for (bool donate : {false, true}) {
          INFO(row.op << " " << dtype_name(type) << " " << xs << " x " << ys
                      << (donate ? " donated" : "") << " seed " << k_seed);
          auto z = run(make_node(row.op, type_attr(type)), {x, y}, donate);
          if (!z.ok()) FAIL(z.error().to_string());
          CHECK(mismatch(*z, out_type, *out_shape, want) == "");
        }
      }
    }
  }
}

TEST_CASE("a kernel reuses an input buffer only when nothing else holds it", "[cwise]") {
  tensor x = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  tensor y = tensor::from_vector<float>({10, 20, 30}, {3});
  auto node = make_node("Add", type_attr(dtype::float32));
  std::vector<double> want = {11, 22, 33, 14, 25, 36};

  SECTION("held inputs are left alone") {
    auto out = kernels::run_kernel(node, {x, y}, &test_pool());
    REQUIRE(out.ok());
    CHECK_FALSE((*out)[0].shares_buffer_with(x));
    CHECK(mismatch((*out)[0], dtype::float32, {2, 3}, want) == "");
    CHECK(x.equals(tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})));
  }
  SECTION("a donated input of the output's size is reused") {
    std::vector<tensor> inputs;
    inputs.push_back(x.deep_copy());
    inputs.push_back(y.deep_copy());
    auto out = kernels::run_kernel(node, inputs, &test_pool());
    REQUIRE(out.ok());
    CHECK((*out)[0].shares_buffer_with(inputs[0]));
    CHECK(mismatch((*out)[0], dtype::float32, {2, 3}, want) == "");
  }
  SECTION("the broadcast operand is never reused") {
    std::vector<tensor> inputs;
    inputs.push_back(y.deep_copy());  // [3], broadcast against [2,3]
    inputs.push_back(x);              // held by the test too
    auto out = kernels::run_kernel(node, inputs, &test_pool());
    REQUIRE(out.ok());
    CHECK_FALSE((*out)[0].shares_buffer_with(inputs[0]));
    CHECK_FALSE((*out)[0].shares_buffer_with(x));
    CHECK(mismatch((*out)[0], dtype::float32, {2, 3}, want) == "");
  }
  SECTION("a comparison never reuses an input of another dtype") {
    std::vector<tensor> inputs;
    inputs.push_back(x.deep_copy());
    inputs.push_back(x.deep_copy());
    auto out =
        kernels::run_kernel(make_node("Equal", type_attr(dtype::float32)), inputs, &test_pool());
    REQUIRE(out.ok());
    CHECK_FALSE((*out)[0].shares_buffer_with(inputs[0]));
    CHECK(mismatch((*out)[0], dtype::bool_, {2, 3}, {1, 1, 1, 1, 1, 1}) == "");
  }
}

TEST_CASE("incompatible shapes are an INVALID_ARGUMENT naming both shapes", "[cwise]") {
  for (const char* op : {"Add", "Mul", "Maximum", "Less", "Equal"}) {
    INFO(op);
    auto z =
        run(make_node(op, type_attr(dtype::float32)),
            {tensor::zeros(dtype::float32, {2, 3}), tensor::zeros(dtype::float32, {4})}, false);
    REQUIRE_FALSE(z.ok());
    CHECK(z.error().error_code() == code::invalid_argument);
    CHECK_THAT(z.error().message(), Catch::Contains("[2,3]") && Catch::Contains("[4]") &&
                                        Catch::Contains("Incompatible shapes"));
  }
  // Zero-sized dimensions broadcast only against 1.
  auto z = run(make_node("Sub", type_attr(dtype::int32)),
               {tensor::zeros(dtype::int32, {0, 3}), tensor::zeros(dtype::int32, {2, 3})}, false);
  REQUIRE_FALSE(z.ok());
  CHECK(z.error().error_code() == code::invalid_argument);
  CHECK_THAT(z.error().message(), Catch::Contains("[0,3]") && Catch::Contains("[2,3]"));
}

TEST_CASE("Equal and NotEqual honour incompatible_shape_error", "[cwise]") {
  tensor x = tensor::zeros(dtype::int32, {2, 3});
  tensor y = tensor::zeros(dtype::int32, {4});
  for (auto [op, want] : {std::pair{"Equal", 0.0}, std::pair{"NotEqual", 1.0}}) {
    INFO(op);
    attr_list attrs = type_attr(dtype::int32);
    attrs.push_back({"incompatible_shape_error", graph::attr_value(false)});
    auto z = run(make_node(op, attrs), {x, y}, false);
    REQUIRE(z.ok());
    CHECK(mismatch(*z, dtype::bool_, {}, {want}) == "");
    // Compatible shapes are unaffected by the attribute.
    auto same = run(make_node(op, attrs), {x, x}, false);
    REQUIRE(same.ok());
    CHECK(mismatch(*same, dtype::bool_, {2, 3}, std::vector<double>(6, 1 - want)) == "");
    auto strict = run(make_node(op, type_attr(dtype::int32)), {x, y}, false);
    REQUIRE_FALSE(strict.ok());
    CHECK(strict.error().error_code() == code::invalid_argument);
  }
}

TEST_CASE("integer arithmetic wraps and integer division by zero fails", "[cwise]") {
  constexpr std::int32_t max32 = std::numeric_limits<std::int32_t>::max();
  constexpr std::int32_t min32 = std::numeric_limits<std::int32_t>::min();
  auto binary = [](const char* op, tensor x, tensor y) {
    auto z = run(make_node(op, type_attr(x.type())), {x, y}, false);
    REQUIRE(z.ok());
    return *z;
  };
  auto unary = [](const char* op, tensor x) {
    auto y = run(make_node(op, type_attr(x.type())), {x}, false);
    REQUIRE(y.ok());
    return *y;
  };
  CHECK(binary("Add", tensor::scalar<std::int32_t>(max32), tensor::scalar<std::int32_t>(1))
            .scalar_value<std::int32_t>() == min32);
  CHECK(binary("Sub", tensor::scalar<std::int32_t>(min32), tensor::scalar<std::int32_t>(1))
            .scalar_value<std::int32_t>() == max32);
  CHECK(binary("Mul", tensor::scalar<std::int8_t>(100), tensor::scalar<std::int8_t>(3))
            .scalar_value<std::int8_t>() == static_cast<std::int8_t>(300 - 256));
  CHECK(binary("Mul", tensor::scalar<std::uint16_t>(65535), tensor::scalar<std::uint16_t>(65535))
            .scalar_value<std::uint16_t>() == 1);
  CHECK(binary("RealDiv", tensor::scalar<std::int32_t>(min32), tensor::scalar<std::int32_t>(-1))
            .scalar_value<std::int32_t>() == min32);
  CHECK(binary("RealDiv", tensor::scalar<std::int32_t>(-7), tensor::scalar<std::int32_t>(2))
            .scalar_value<std::int32_t>() == -3);
  CHECK(unary("Neg", tensor::scalar<std::int32_t>(min32)).scalar_value<std::int32_t>() == min32);
  CHECK(unary("Abs", tensor::scalar<std::int8_t>(-128)).scalar_value<std::int8_t>() == -128);

  for (dtype type : {dtype::int32, dtype::uint8, dtype::int64}) {
    INFO(dtype_name(type));
    tensor x = tensor::zeros(type, {2, 2});
    tensor y = tensor::zeros(type, {2});
    auto z = run(make_node("RealDiv", type_attr(type)), {x, y}, false);
    REQUIRE_FALSE(z.ok());
    CHECK(z.error().error_code() == code::invalid_argument);
    CHECK_THAT(z.error().message(), Catch::Contains("division by zero"));
  }
  // An empty output divides nothing, so a zero divisor is no error.
  auto empty =
      run(make_node("RealDiv", type_attr(dtype::int32)),
          {tensor::zeros(dtype::int32, {0, 2}), tensor::zeros(dtype::int32, {1, 2})}, false);
  REQUIRE(empty.ok());
  CHECK(empty->shape() == tensor_shape{0, 2});
  // Floating point division by zero is IEEE's.
  auto inf = binary("RealDiv", tensor::scalar<float>(1), tensor::scalar<float>(0));
  CHECK(std::isinf(inf.scalar_value<float>()));
}

TEST_CASE("NaN propagates through Maximum, Minimum and Relu", "[cwise]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  tensor x = tensor::from_vector<float>({nan, 1, nan, -2});
  tensor y = tensor::from_vector<float>({1, nan, nan, 3});
  for (const char* op : {"Maximum", "Minimum"}) {
    INFO(op);
    auto z = run(make_node(op, type_attr(dtype::float32)), {x, y}, false);
    REQUIRE(z.ok());
    for (int i = 0; i < 3; ++i) CHECK(std::isnan(z->data<float>()[i]));
    CHECK(z->data<float>()[3] == (std::string(op) == "Maximum" ? 3.0f : -2.0f));
  }
  auto r = run(make_node("Relu", type_attr(dtype::float32)), {x}, false);
  REQUIRE(r.ok());
  CHECK(std::isnan(r->data<float>()[0]));
  CHECK(r->data<float>()[3] == 0.0f);
}

// Select's reference: condition of t's shape, a vector over t's first dimension, or a
// scalar.
std::vector<double> select_reference(const tensor& cond, const tensor& t, const tensor& e) {
  std::vector<double> c = to_doubles(cond);
  std::vector<double> tv = to_doubles(t);
  std::vector<double> ev = to_doubles(e);
  std::vector<double> out(tv.size());
  std::int64_t slice = cond.rank() == 0            ? static_cast<std::int64_t>(tv.size())
                       : cond.shape() == t.shape() ? 1
                       : t.dim(0) == 0             ? 1
                                                   : t.num_elements() / t.dim(0);
  for (std::size_t i = 0; i < out.size(); ++i) {
    bool pick = cond.rank() == 0 ? c[0] != 0 : c[i / static_cast<std::size_t>(slice)] != 0;
    out[i] = pick ? tv[i] : ev[i];
  }
  return out;
}

TEST_CASE("Select chooses by an element-wise, per-row or scalar condition", "[cwise]") {
  std::mt19937 rng(k_seed);
  struct select_shapes {
    tensor_shape cond;
    tensor_shape t;
  };
  const select_shapes cases[] = {
      {{}, {}},      {{4}, {4}},       {{2, 3}, {2, 3}}, {{3}, {3, 2, 2}},    {{}, {2, 3}},
      {{0}, {0, 5}}, {{2, 0}, {2, 0}}, {{5}, {5, 1}},    {{400}, {400, 300}},
  };
  for (dtype type : k_all) {
    for (const auto& [cs, ts] : cases) {
      tensor cond = random_tensor(dtype::bool_, cs, domain::any, rng);
      tensor t = random_tensor(type, ts, domain::any, rng);
      tensor e = random_tensor(type, ts, domain::any, rng);
      std::vector<double> want = select_reference(cond, t, e);
      for (bool donate : {false, true}) {
        INFO("Select " << dtype_name(type) << " cond " << cs << " t " << ts
                       << (donate ? " donated" : "") << " seed " << k_seed);
        auto out = run(make_node("Select", type_attr(type)), {cond, t, e}, donate);
        REQUIRE(out.ok());
        CHECK(mismatch(*out, type, ts, want) == "");
      }
    }
  }
  SECTION("errors name the shapes") {
    auto node = make_node("Select", type_attr(dtype::float32));
    auto mismatched = run(node,
                          {tensor::zeros(dtype::bool_, {2}), tensor::zeros(dtype::float32, {2, 3}),
                           tensor::zeros(dtype::float32, {3, 2})},
                          false);
    REQUIRE_FALSE(mismatched.ok());
    CHECK(mismatched.error().error_code() == code::invalid_argument);
    CHECK_THAT(mismatched.error().message(), Catch::Contains("[2,3]") && Catch::Contains("[3,2]"));
    auto bad_cond = run(node,
                        {tensor::zeros(dtype::bool_, {3}), tensor::zeros(dtype::float32, {2, 3}),
                         tensor::zeros(dtype::float32, {2, 3})},
                        false);
    REQUIRE_FALSE(bad_cond.ok());
    CHECK(bad_cond.error().error_code() == code::invalid_argument);
    CHECK_THAT(bad_cond.error().message(), Catch::Contains("[3]") && Catch::Contains("[2,3]"));
  }
}

TEST_CASE("SelectV2 broadcasts condition, t and e together", "[cwise]") {
  std::mt19937 rng(k_seed);
  struct select_shapes {
    tensor_shape cond, t, e;
  };
  const select_shapes cases[] = {
      {{}, {}, {}},
      {{2, 3}, {2, 3}, {2, 3}},
      {{}, {2, 3}, {2, 3}},
      {{3, 1}, {1, 4}, {}},
      {{2, 3}, {3}, {2, 1}},
      {{4}, {3, 1}, {1}},
      {{0, 3}, {1, 3}, {3}},
      {{2, 1, 3}, {4, 1}, {}},
      {{1, 1}, {2, 5}, {2, 5}},
      {{300, 1}, {1, 400}, {300, 400}},
  };
  for (dtype type : k_all) {
    for (const auto& [cs, ts, es] : cases) {
      tensor cond = random_tensor(dtype::bool_, cs, domain::any, rng);
      tensor t = random_tensor(type, ts, domain::any, rng);
      tensor e = random_tensor(type, es, domain::any, rng);
      auto out_shape = reference_broadcast({cs, ts, es});
      REQUIRE(out_shape.ok());
      std::vector<double> c = to_doubles(cond), tv = to_doubles(t), ev = to_doubles(e);
      std::vector<double> want(static_cast<std::size_t>(out_shape->num_elements()));
      for_each_broadcast(*out_shape, {cs, ts, es}, [&](std::int64_t o, const auto& in) {
        auto at = [&](std::size_t k) { return static_cast<std::size_t>(in[k]); };
        want[static_cast<std::size_t>(o)] = c[at(0)] != 0 ? tv[at(1)] : ev[at(2)];
      });
      for (bool donate : {false, true}) {
        INFO("SelectV2 " << dtype_name(type) << " " << cs << " " << ts << " " << es
                         << (donate ? " donated" : "") << " seed " << k_seed);
        auto out = run(make_node("SelectV2", type_attr(type)), {cond, t, e}, donate);
        REQUIRE(out.ok());
        CHECK(mismatch(*out, type, *out_shape, want) == "");
      }
    }
  }
  auto bad = run(make_node("SelectV2", type_attr(dtype::int32)),
                 {tensor::zeros(dtype::bool_, {2}), tensor::zeros(dtype::int32, {3}),
                  tensor::zeros(dtype::int32, {})},
                 false);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().error_code() == code::invalid_argument);
  CHECK_THAT(bad.error().message(), Catch::Contains("[2]") && Catch::Contains("[3]"));
}

// What Cast gives for v: truncation toward zero, saturation from floating point to
// integers (NaN to 0), two's complement wrapping between integers, v != 0 for bool.
double cast_reference(double v, dtype from, dtype to) {
  if (to == dtype::bool_) return v != 0;
  if (!is_integer(to)) return v;  // mismatch() rounds it to float when `to` is
  double lo = 0, hi = 0;
  visit_dtype(to, [&]<class T>() {
    lo = static_cast<double>(std::numeric_limits<T>::lowest());
    hi = static_cast<double>(std::numeric_limits<T>::max());
  });
  if (is_floating(from)) {
    if (std::isnan(v)) return 0;
    return std::clamp(std::trunc(v), lo, hi);
  }
  return v;  // mismatch() wraps integers to the dtype
}

TEST_CASE("Cast converts between every pair of dtypes", "[cwise]") {
  std::mt19937 rng(k_seed);
  for (dtype from : k_all) {
    tensor x = random_tensor(from, {3, 5}, domain::any, rng);
    for (dtype to : k_all) {
      std::vector<double> want = to_doubles(x);
      for (double& v : want) v = cast_reference(v, from, to);
      for (bool donate : {false, true}) {
        INFO("Cast " << dtype_name(from) << " -> " << dtype_name(to) << " " << x.debug_string()
                     << (donate ? " donated" : ""));
        auto node =
            make_node("Cast", {{"SrcT", graph::attr_value(from)}, {"DstT", graph::attr_value(to)}});
        auto y = run(node, {x}, donate);
        REQUIRE(y.ok());
        CHECK(mismatch(*y, to, x.shape(), want) == "");
      }
    }
  }
  SECTION("out of range values") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    tensor f = tensor::from_vector<float>({nan, 1e10f, -1e10f, -2.75f, 2.75f, 300.0f});
    auto cast = [&](const tensor& x, dtype to) {
      auto node = make_node(
          "Cast", {{"SrcT", graph::attr_value(x.type())}, {"DstT", graph::attr_value(to)}});
      auto y = run(node, {x}, false);
      REQUIRE(y.ok());
      return to_doubles(*y);
    };
    CHECK(cast(f, dtype::int32) == std::vector<double>{0, 2147483647.0, -2147483648.0, -2, 2, 300});
    CHECK(cast(f, dtype::uint8) == std::vector<double>{0, 255, 0, 0, 2, 255});
    CHECK(cast(f, dtype::int64) == std::vector<double>{0, 1e10, -1e10, -2, 2, 300});
    tensor i = tensor::from_vector<std::int32_t>({300, -1, 65536, 0});
    CHECK(cast(i, dtype::uint8) == std::vector<double>{44, 255, 0, 0});
    CHECK(cast(i, dtype::uint16) == std::vector<double>{300, 65535, 0, 0});
    CHECK(cast(i, dtype::bool_) == std::vector<double>{1, 1, 1, 0});
  }
}

TEST_CASE("ZerosLike and OnesLike fill every dtype", "[cwise]") {
  std::mt19937 rng(k_seed);
  for (dtype type : k_all) {
    for (const tensor_shape& shape : {tensor_shape{}, tensor_shape{0, 4}, tensor_shape{3, 7}}) {
      tensor x = random_tensor(type, shape, domain::any, rng);
      for (auto [op, value] : {std::pair{"ZerosLike", 0.0}, std::pair{"OnesLike", 1.0}}) {
        for (bool donate : {false, true}) {
          INFO(op << " " << dtype_name(type) << " " << shape << (donate ? " donated" : ""));
          auto y = run(make_node(op, type_attr(type)), {x}, donate);
          REQUIRE(y.ok());
          CHECK(mismatch(*y, type, shape,
                         std::vector<double>(static_cast<std::size_t>(shape.num_elements()),
                                             value)) == "");
        }
      }
    }
  }
}

TEST_CASE("AddN sums any number of inputs of one shape", "[cwise]") {
  std::mt19937 rng(k_seed);
  for (dtype type : k_real) {
    for (int n = 1; n <= 5; ++n) {
      for (const tensor_shape& shape :
           {tensor_shape{}, tensor_shape{0}, tensor_shape{4, 5}, tensor_shape{300, 500}}) {
        if (shape.num_elements() > 10000 && !runs_large(type)) continue;
        std::vector<tensor> inputs;
        std::vector<double> want(static_cast<std::size_t>(shape.num_elements()), 0.0);
        for (int k = 0; k < n; ++k) {
          inputs.push_back(random_tensor(type, shape, domain::any, rng));
          std::vector<double> v = to_doubles(inputs.back());
          for (std::size_t i = 0; i < want.size(); ++i) want[i] += v[i];
        }
        attr_list attrs = type_attr(type);
        attrs.push_back({"N", graph::attr_value(n)});
        for (bool donate : {false, true}) {
          INFO("AddN " << dtype_name(type) << " N=" << n << " " << shape
                       << (donate ? " donated" : "") << " seed " << k_seed);
          auto sum = run(make_node("AddN", attrs), inputs, donate);
          REQUIRE(sum.ok());
          CHECK(mismatch(*sum, type, shape, want) == "");
        }
      }
    }
  }
  attr_list attrs = type_attr(dtype::float32);
  attrs.push_back({"N", graph::attr_value(2)});
  auto bad =
      run(make_node("AddN", attrs),
          {tensor::zeros(dtype::float32, {2, 3}), tensor::zeros(dtype::float32, {3, 2})}, false);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().error_code() == code::invalid_argument);
  CHECK_THAT(bad.error().message(), Catch::Contains("[2,3]") && Catch::Contains("[3,2]"));
}

TEST_CASE("dtypes without a kernel are reported", "[cwise]") {
  SECTION("a dtype the schema refuses is INVALID_ARGUMENT naming the allowed ones") {
    auto z = run(make_node("Add", type_attr(dtype::bool_)),
                 {tensor::zeros(dtype::bool_, {2}), tensor::zeros(dtype::bool_, {2})}, false);
    REQUIRE_FALSE(z.ok());
    CHECK(z.error().error_code() == code::invalid_argument);
    CHECK_THAT(z.error().message(), Catch::Contains("bool") && Catch::Contains("float"));
  }
  SECTION("a dtype the schema allows but no kernel computes is NOT_FOUND") {
    for (const char* op : {"Select", "SelectV2"}) {
      INFO(op);
      auto out = run(make_node(op, type_attr(dtype::complex64)),
                     {tensor::zeros(dtype::bool_, {2}), tensor::zeros(dtype::complex64, {2}),
                      tensor::zeros(dtype::complex64, {2})},
                     false);
      REQUIRE_FALSE(out.ok());
      CHECK(out.error().error_code() == code::not_found);
      CHECK_THAT(out.error().message(), Catch::Contains("complex64"));
    }
    auto zeros = run(make_node("ZerosLike", type_attr(dtype::complex64)),
                     {tensor::zeros(dtype::complex64, {2})}, false);
    REQUIRE_FALSE(zeros.ok());
    CHECK(zeros.error().error_code() == code::not_found);
    auto cast = run(make_node("Cast", {{"SrcT", graph::attr_value(dtype::float32)},
                                       {"DstT", graph::attr_value(dtype::complex64)}}),
                    {tensor::zeros(dtype::float32, {2})}, false);
    REQUIRE_FALSE(cast.ok());
    CHECK(cast.error().error_code() == code::not_found);
    CHECK_THAT(cast.error().message(), Catch::Contains("float") && Catch::Contains("complex64"));
  }
}

TEST_CASE("element-wise kernels run inline when small and on the pool when large", "[cwise]") {
  auto& ops = graph::op_registry::builtin();
  for (const char* op : {"Add", "Exp", "Select", "SelectV2", "AddN", "ZerosLike"}) {
    INFO(op);
    tf::NodeDef node = make_node(op, type_attr(dtype::float32));
    if (std::string(op) == "AddN") (*node.mutable_attr())["N"] = graph::attr_value(2);
    const graph::op_def* def = ops.find(op);
    REQUIRE(def != nullptr);
    REQUIRE(graph::add_defaults_and_validate_attrs(*def, &node).ok());
    std::vector<dtype> in, out;
    REQUIRE(graph::input_output_types(*def, node, &in, &out).ok());
    auto kernel = kernels::kernel_registry::builtin().create("CPU", node, *def, in, out);
    REQUIRE(kernel.ok());
    const int arity = std::string(op) == "ZerosLike" || std::string(op) == "Exp" ? 1
                      : std::string(op) == "Add" || std::string(op) == "AddN" ? 2 : 3;
    auto inputs = [&](std::int64_t n) {
      std::vector<tensor> v(static_cast<std::size_t>(arity), tensor(dtype::float32, {n}));
      if (std::string(op).starts_with("Select")) v[0] = tensor(dtype::bool_, {n});
      return v;
    };
    CHECK((*kernel)->estimated_ns(inputs(100)) <= kernels::op_kernel::k_inline_ns);
    CHECK((*kernel)->estimated_ns(inputs(10000000)) > kernels::op_kernel::k_inline_ns);
    // A broadcast's cost is its result's, not its inputs'.
    if (arity == 2) {
      std::vector<tensor> outer = {tensor(dtype::float32, {4000, 1}), tensor(dtype::float32, {1, 4000})};
      CHECK((*kernel)->estimated_ns(outer) > kernels::op_kernel::k_inline_ns);
    }
  }
}

TEST_CASE("broadcast_plan walks any slice of the output", "[cwise][broadcast]") {
  // Every [begin, end) slice must visit the same offsets the reference computes.
  const std::vector<std::array<tensor_shape, 2>> cases = {
      {tensor_shape{2, 3, 4}, tensor_shape{4}},
      {tensor_shape{3, 1}, tensor_shape{1, 4}},
      {tensor_shape{2, 1, 3}, tensor_shape{4, 1}},
      {tensor_shape{}, tensor_shape{5}},
      {tensor_shape{1, 1}, tensor_shape{}},
      {tensor_shape{5, 1, 1, 7}, tensor_shape{1, 6, 1, 7}},
      {tensor_shape{2, 3, 1, 2}, tensor_shape{3, 2, 1}},
  };
  for (const auto& shapes : cases) {
    INFO(shapes[0] << " x " << shapes[1]);
    auto plan = kernels::broadcast_plan<2>::make(shapes);
    REQUIRE(plan.ok());
    auto out = reference_broadcast({shapes[0], shapes[1]});
    REQUIRE(out.ok());
    CHECK(plan->output_shape() == *out);
    std::vector<std::array<std::int64_t, 2>> want;
    for_each_broadcast(*out, {shapes[0], shapes[1]}, [&](std::int64_t, const auto& in) {
      want.push_back({in[0], in[1]});
    });
    const std::int64_t n = out->num_elements();
    for (std::int64_t begin = 0; begin <= n; ++begin) {
      for (std::int64_t end = begin; end <= n; ++end) {
        std::vector<std::array<std::int64_t, 2>> got;
        std::int64_t next = begin;
        bool in_order = true;
        plan->for_each_run(begin, end,
                           [&](std::int64_t o, const std::array<std::int64_t, 2>& in,
                               std::int64_t length, const std::array<std::int64_t, 2>& step) {
                             in_order = in_order && o == next && length > 0;
                             next += length;
                             for (std::int64_t i = 0; i < length; ++i) {
                               got.push_back({in[0] + i * step[0], in[1] + i * step[1]});
                             }
                           });
        INFO("slice [" << begin << ", " << end << ")");
        REQUIRE(in_order);
        REQUIRE(next == end);
        REQUIRE(std::equal(got.begin(), got.end(), want.begin() + begin));
      }
    }
  }
}

TEST_CASE("math op shape functions", "[cwise][shape]") {
  auto& ops = graph::op_registry::builtin();
  auto infer = [&](const std::string& op, const attr_list& attrs, std::vector<partial_shape> inputs,
                   std::vector<dtype> types) {
    tf::NodeDef node = make_node(op, attrs);
    const graph::op_def* def = ops.find(op);
    REQUIRE(def != nullptr);
    REQUIRE(graph::add_defaults_and_validate_attrs(*def, &node).ok());
    std::vector<const tensor*> values(inputs.size(), nullptr);
    graph::shape_context ctx(node, *def, std::move(inputs), values, std::move(types), 1);
    status s = def->shape(ctx);
    return s.ok() ? result<partial_shape>(ctx.outputs()[0]) : result<partial_shape>(s);
  };
  auto f = dtype::float32;
  auto add = infer("Add", type_attr(f), {partial_shape{-1, 3}, partial_shape{4, 1}}, {f, f});
  REQUIRE(add.ok());
  CHECK(*add == partial_shape{4, 3});
  CHECK_FALSE(infer("Mul", type_attr(f), {partial_shape{2, 3}, partial_shape{4}}, {f, f}).ok());

  attr_list lenient = type_attr(f);
  lenient.push_back({"incompatible_shape_error", graph::attr_value(false)});
  auto eq = infer("Equal", lenient, {partial_shape{2, 3}, partial_shape{4}}, {f, f});
  REQUIRE(eq.ok());
  CHECK_FALSE(eq->known_rank());

  auto b = dtype::bool_;
  auto sel = infer("Select", type_attr(f),
                   {partial_shape{-1}, partial_shape{5, -1}, partial_shape{-1, 2}}, {b, f, f});
  REQUIRE(sel.ok());
  CHECK(*sel == partial_shape{5, 2});
  CHECK_FALSE(infer("Select", type_attr(f),
                    {partial_shape{3}, partial_shape{5, 2}, partial_shape{5, 2}}, {b, f, f})
                  .ok());
  auto sel2 =
      infer("SelectV2", type_attr(f),
            {partial_shape{3, 1}, partial_shape{1, 4}, partial_shape(std::vector<std::int64_t>{})},
            {b, f, f});  // partial_shape{} would be an unknown shape
  REQUIRE(sel2.ok());
  CHECK(*sel2 == partial_shape{3, 4});

  attr_list add_n = type_attr(f);
  add_n.push_back({"N", graph::attr_value(3)});
  auto sum =
      infer("AddN", add_n, {partial_shape{-1, 3}, partial_shape{2, -1}, partial_shape::unknown()},
            {f, f, f});
  REQUIRE(sum.ok());
  CHECK(*sum == partial_shape{2, 3});

  auto cast = infer("Cast", {{"SrcT", graph::attr_value(f)}, {"DstT", graph::attr_value(b)}},
                    {partial_shape{7, -1}}, {f});
  REQUIRE(cast.ok());
  CHECK(*cast == partial_shape{7, -1});
}

}  // namespace
}  // namespace troupe
