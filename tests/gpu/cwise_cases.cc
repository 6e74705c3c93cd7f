// GPU element-wise kernels (kernels/cuda/gpu_cwise_kernels.cc) against the CPU's: every op
// and dtype registered on the GPU, over shapes that reach each path of the launchers
// (kernels/cuda/gpu_cwise_launch.cu): scalars and equal shapes (flat, with and without a
// vector tail), rows against row and column vectors of >= 64 columns (rows), everything
// else up to 8 collapsed dimensions (strided), empty tensors, ~1e6 elements of odd sizes.
//
// Inputs stay in each op's domain (positive for Log, Sqrt, Rsqrt; divisors away from zero,
// which the GPU cannot refuse without waiting for it). Tolerances: k_exact for integers and
// booleans; k_float32 and k_float64 for element-wise floating point, transcendental ops
// included: CUDA's exp, log, tanh, pow, ... and Eigen's vectorized ones on the CPU are each
// within a few ulps, and k_float32's 1e-5 relative is ~80 float ulps; k_float32_sum for
// BiasAddGrad, whose sums are added in another order.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "graph/attr.h"
#include "tests/gpu/consistency.h"

namespace troupe::testing {

namespace {

using graph::attr_value;

const dtype k_real[] = {dtype::float32, dtype::float64, dtype::int32, dtype::int64};
const dtype k_floating[] = {dtype::float32, dtype::float64};
const dtype k_numeric[] = {dtype::float32, dtype::float64, dtype::int32, dtype::int64, dtype::bool_};

// ~1e6 elements, neither dimension a multiple of 4 (the flat kernels' vector width).
const tensor_shape k_large{1009, 1013};

tolerance tolerance_for(dtype type) {
  if (type == dtype::float32) return k_float32;
  if (type == dtype::float64) return k_float64;
  return k_exact;
}

bool is_float(dtype type) { return type == dtype::float32 || type == dtype::float64; }

tf::NodeDef typed(const std::string& op, dtype type) { return node(op, {{"T", attr_value(type)}}); }

// "Add(T=float) float[3,1] float[1,4]".
std::string describe(const tf::NodeDef& n, const std::vector<tensor>& inputs) {
  std::string name = n.op();
  name += '(';
  for (const auto& attr : n.attr()) {
    if (name.back() != '(') name += ", ";
    name.append(attr.first).append("=").append(graph::attr_value_to_string(attr.second));
  }
  name += ')';
  for (const tensor& t : inputs) name.append(" ").append(dtype_name(t.type())).append(t.shape().to_string());
  return name;
}

void check(const tf::NodeDef& n, std::vector<tensor> inputs, tolerance tol) {
  std::string name = describe(n, inputs);
  check_consistency({std::move(name), n, std::move(inputs), tol});
}

void check_error(const tf::NodeDef& n, std::vector<tensor> inputs, const std::string& message) {
  std::string name = describe(n, inputs);
  check_gpu_error({std::move(name), n, std::move(inputs), k_exact}, message);
}

// A tensor of `type` holding `values` (each representable in it).
tensor values_of_type(dtype type, const std::vector<double>& values, tensor_shape shape) {
  tensor t(type, std::move(shape));
  visit_dtype(type, [&]<class T>() {
    for (std::size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = static_cast<T>(values[i]);
  });
  return t;
}
tensor values_of_type(dtype type, const std::vector<double>& values) {
  return values_of_type(type, values, tensor_shape{static_cast<std::int64_t>(values.size())});
}

// Magnitudes uniform in [lo, hi] with random signs: divisors and reciprocals away from 0.
tensor away_from_zero(consistency_rng& rng, dtype type, tensor_shape shape, double lo, double hi) {
  tensor t = rng.uniform(type, std::move(shape), lo, hi);
  std::bernoulli_distribution negative(0.5);
  visit_dtype(type, [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      for (T& x : t.flat<T>()) x = negative(rng.engine()) ? static_cast<T>(-x) : x;
    }
  });
  return t;
}

// Whole numbers in [-2, 2] of any type: comparisons and Sign meet equal values and zeros.
tensor small_integers(consistency_rng& rng, dtype type, tensor_shape shape) {
  tensor t = rng.uniform(type, std::move(shape), -2.5, 2.5);
  visit_dtype(type, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      for (T& x : t.flat<T>()) x = std::round(x);
    } else if constexpr (!std::is_same_v<T, bool>) {
      std::uniform_int_distribution<int> d(-2, 2);
      for (T& x : t.flat<T>()) x = static_cast<T>(d(rng.engine()));
    }
  });
  return t;
}

// Shape pairs reaching every broadcasting path (collapsed geometry in the comments).
const std::pair<tensor_shape, tensor_shape> k_broadcasts[] = {
    {{}, {}},                                                  // one element
    {{7}, {}},                                                 // flat, scalar on the right
    {{}, {2, 5}},                                              // flat, scalar on the left
    {{3, 1}, {1, 4}},                                          // strided [3,4], outer product
    {{2, 3, 5}, {5}},                                          // strided [6,5], rank mismatch
    {{4, 1, 6}, {3, 1}},                                       // strided [4,3,6], both broadcast
    {{2, 1, 3, 1, 2, 1, 3, 1}, {1, 4, 1, 5, 1, 2, 1, 3}},      // strided, 8 dimensions
    {{0, 3}, {3}},                                             // empty
    {{129, 67}, {67}},                                         // rows, row vector
    {{67, 1}, {67, 129}},                                      // rows, column vector on the left
    {k_large, k_large},                                        // flat, large
    {k_large, {1009, 1}},                                      // rows, large
};

// --- Binary ops ----------------------------------------------------------------------------

// Inputs for `op` of `type` and shape: x, then y.
using input_maker = tensor (*)(consistency_rng&, dtype, tensor_shape, bool is_y);

tensor wide_values(consistency_rng& rng, dtype type, tensor_shape shape, bool) {
  // Integers over most of their range, so that sums and products wrap around.
  if (type == dtype::int32) return rng.uniform(type, std::move(shape), -2e9, 2e9);
  if (type == dtype::int64) return rng.uniform(type, std::move(shape), -4e18, 4e18);
  return rng.uniform(type, std::move(shape), -10, 10);
}
tensor division_values(consistency_rng& rng, dtype type, tensor_shape shape, bool is_y) {
  if (is_y) return is_float(type) ? away_from_zero(rng, type, std::move(shape), 0.25, 4) :
                                    away_from_zero(rng, type, std::move(shape), 1, 20);
  return rng.uniform(type, std::move(shape), -1000, 1000);
}
tensor pow_values(consistency_rng& rng, dtype type, tensor_shape shape, bool is_y) {
  // Floats: positive bases; integers: exponents >= 0 (6^12 wraps int32).
  if (is_float(type)) return is_y ? rng.uniform(type, std::move(shape), -3, 3) : rng.uniform(type, std::move(shape), 0.1, 3);
  return is_y ? rng.uniform(type, std::move(shape), 0, 12) : rng.uniform(type, std::move(shape), -6, 6);
}
tensor comparison_values(consistency_rng& rng, dtype type, tensor_shape shape, bool) {
  return small_integers(rng, type, std::move(shape));
}

void binary_cases(consistency_rng& rng) {
  const std::pair<const char*, input_maker> ops[] = {
      {"Add", wide_values},         {"AddV2", wide_values},       {"Sub", wide_values},
      {"Mul", wide_values},         {"Maximum", wide_values},     {"Minimum", wide_values},
      {"RealDiv", division_values}, {"FloorDiv", division_values}, {"FloorMod", division_values},
      {"Pow", pow_values},
  };
  for (const auto& [op, make] : ops) {
    for (dtype type : k_real) {
      for (const auto& [x, y] : k_broadcasts) {
        check(typed(op, type), {make(rng, type, x, false), make(rng, type, y, true)}, tolerance_for(type));
      }
    }
  }
  for (const char* op : {"Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual"}) {
    for (dtype type : k_numeric) {
      if (type == dtype::bool_ && std::string(op) != "Equal" && std::string(op) != "NotEqual") continue;
      for (const auto& [x, y] : k_broadcasts) {
        check(typed(op, type), {comparison_values(rng, type, x, false), comparison_values(rng, type, y, true)},
              k_exact);
      }
    }
  }

  // Corners: NaN through Maximum and Minimum; integer quotients of every sign, the most
  // negative value over -1 (wraps), floor rounding; negative bases and fractional powers
  // (NaN on both sides).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (dtype type : k_floating) {
    for (const char* op : {"Maximum", "Minimum"}) {
      check(typed(op, type), {values_of_type(type, {nan, 1, nan, -2, 3}), values_of_type(type, {2, nan, nan, -1, 3})},
            tolerance_for(type));
    }
    check(typed("Pow", type), {rng.uniform(type, {5, 7}, -3, 3), rng.uniform(type, {5, 7}, -3, 3)},
          tolerance_for(type));
    check(typed("Pow", type), {rng.uniform(type, {5, 7}, -3, 3), small_integers(rng, type, {5, 7})},
          tolerance_for(type));
  }
  const double int32_min = std::numeric_limits<std::int32_t>::min();
  for (dtype type : {dtype::int32, dtype::int64}) {
    const double most_negative = type == dtype::int32 ? int32_min : -9223372036854775808.0;
    tensor x = values_of_type(type, {most_negative, -7, 7, -7, 7, 0, 6, -6, 5});
    tensor y = values_of_type(type, {-1, 2, -2, -2, 2, 3, 3, 3, -1});
    for (const char* op : {"RealDiv", "FloorDiv", "FloorMod"}) check(typed(op, type), {x, y}, k_exact);
  }

  // Equal and NotEqual of shapes that do not broadcast, allowed: a scalar on both sides.
  for (const char* op : {"Equal", "NotEqual"}) {
    tf::NodeDef n = node(op, {{"T", attr_value(dtype::float32)}, {"incompatible_shape_error", attr_value(false)}});
    check(n, {rng.uniform(dtype::float32, {2, 3}), rng.uniform(dtype::float32, {4})}, k_exact);
  }

  check_error(typed("Add", dtype::float32),
              {rng.uniform(dtype::float32, {2, 3}), rng.uniform(dtype::float32, {4})},
              "Incompatible shapes: [2,3] vs. [4]");
  check_error(typed("Less", dtype::int32), {rng.uniform(dtype::int32, {5}), rng.uniform(dtype::int32, {3, 4})},
              "Incompatible shapes: [5] vs. [3,4]");
  // Nine dimensions that no neighbour merging reduces: more than the GPU kernels take.
  check_error(typed("Mul", dtype::float32),
              {rng.uniform(dtype::float32, {2, 1, 2, 1, 2, 1, 2, 1, 2}),
               rng.uniform(dtype::float32, {1, 2, 1, 2, 1, 2, 1, 2, 1})},
              "the most the GPU kernels take");
}

// --- Unary ops -----------------------------------------------------------------------------

const tensor_shape k_unary_shapes[] = {{}, {7}, {33, 65}, {0, 4}, k_large};

void unary_cases(consistency_rng& rng) {
  struct domain {
    const char* op;
    double lo, hi;
  };
  const domain real_ops[] = {{"Neg", -10, 10}, {"Abs", -10, 10}, {"Square", -1000, 1000}, {"Relu", -10, 10},
                             {"Relu6", -10, 10}};
  for (const auto& [op, lo, hi] : real_ops) {
    for (dtype type : k_real) {
      for (const tensor_shape& shape : k_unary_shapes) {
        check(typed(op, type), {rng.uniform(type, shape, lo, hi)}, tolerance_for(type));
      }
    }
  }
  for (dtype type : k_real) {
    for (const tensor_shape& shape : k_unary_shapes) {
      check(typed("Sign", type), {small_integers(rng, type, shape)}, k_exact);
      // Integers: 1 / x truncates to 0 except for 1 and -1.
      check(typed("Reciprocal", type),
            {is_float(type) ? away_from_zero(rng, type, shape, 0.1, 10) : away_from_zero(rng, type, shape, 1, 3)},
            tolerance_for(type));
    }
  }
  const domain float_ops[] = {{"Exp", -20, 20},      {"Log", 0.01, 100},   {"Sqrt", 0.01, 100},
                              {"Rsqrt", 0.01, 100},  {"Tanh", -10, 10},    {"Sigmoid", -10, 10},
                              {"Elu", -5, 5},        {"LeakyRelu", -5, 5}};
  for (const auto& [op, lo, hi] : float_ops) {
    for (dtype type : k_floating) {
      for (const tensor_shape& shape : k_unary_shapes) {
        check(typed(op, type), {rng.uniform(type, shape, lo, hi)}, tolerance_for(type));
      }
    }
  }
  for (dtype type : k_floating) {
    // Across both of TensorFlow's thresholds: +-13.9 for float, +-34 for double.
    const double reach = type == dtype::float32 ? 20 : 40;
    for (const tensor_shape& shape : k_unary_shapes) {
      check(typed("Softplus", type), {rng.uniform(type, shape, -reach, reach)}, tolerance_for(type));
    }
    check(node("LeakyRelu", {{"T", attr_value(type)}, {"alpha", attr_value(0.01f)}}),
          {rng.uniform(type, {33, 65}, -5, 5)}, tolerance_for(type));
    // NaN, infinities and signed zeros through the ops that take any value (not through
    // transcendental ones: Eigen's vectorized versions clamp their arguments, so what they
    // give for NaN is not specified).
    const double inf = std::numeric_limits<double>::infinity();
    tensor special = values_of_type(type, {std::nan(""), inf, -inf, 0.0, -0.0, 6, 7, -1});
    for (const char* op : {"Neg", "Abs", "Sign", "Square", "Relu", "Relu6"}) {
      check(typed(op, type), {special}, tolerance_for(type));
    }
  }
  // Integer corners: the most negative value negates and squares by wrapping around.
  for (dtype type : {dtype::int32, dtype::int64}) {
    const double most_negative = type == dtype::int32 ? -2147483648.0 : -9223372036854775808.0;
    const double square_wraps = type == dtype::int32 ? 46341 : 3037000500.0;
    tensor corners = values_of_type(type, {most_negative, -1, 0, 1, 65536, square_wraps});
    for (const char* op : {"Neg", "Abs", "Square", "Sign"}) check(typed(op, type), {corners}, k_exact);
  }
}

// --- Gradient ops --------------------------------------------------------------------------

void gradient_cases(consistency_rng& rng) {
  // (op, input 0's range, input 1's range): the forward op's output or features where the
  // op reads them, gradients in [-1, 1].
  struct grad {
    const char* op;
    double lo0, hi0, lo1, hi1;
  };
  const grad real_grads[] = {{"ReluGrad", -1, 1, -1, 1}, {"Relu6Grad", -1, 1, -2, 8}};
  const grad float_grads[] = {
      {"EluGrad", -1, 1, -1, 3},      {"LeakyReluGrad", -1, 1, -1, 1}, {"SoftplusGrad", -1, 1, -10, 10},
      {"TanhGrad", -1, 1, -1, 1},     {"SigmoidGrad", 0, 1, -1, 1},    {"SqrtGrad", 0.1, 10, -1, 1},
      {"RsqrtGrad", -3, 3, -1, 1},    {"ReciprocalGrad", -3, 3, -1, 1},
  };
  auto run = [&](const grad& g, dtype type) {
    for (const tensor_shape& shape : k_unary_shapes) {
      // Integers: whole numbers from the same ranges.
      check(typed(g.op, type), {rng.uniform(type, shape, g.lo0, g.hi0), rng.uniform(type, shape, g.lo1, g.hi1)},
            tolerance_for(type));
    }
  };
  for (const grad& g : real_grads) {
    for (dtype type : k_real) run(g, type);
  }
  for (const grad& g : float_grads) {
    for (dtype type : k_floating) run(g, type);
  }
  for (dtype type : k_floating) {
    check(node("LeakyReluGrad", {{"T", attr_value(type)}, {"alpha", attr_value(0.3f)}}),
          {rng.uniform(type, {33, 65}), rng.uniform(type, {33, 65})}, tolerance_for(type));
  }
  check_error(typed("ReluGrad", dtype::float32), {rng.uniform(dtype::float32, {2, 3}), rng.uniform(dtype::float32, {3, 2})},
              "ReluGrad inputs must have the same shape, but have [2,3] and [3,2]");
}

// --- Cast, Fill, ZerosLike, OnesLike, AddN -------------------------------------------------

void cast_cases(consistency_rng& rng) {
  const double inf = std::numeric_limits<double>::infinity();
  // Rounding toward zero, saturation, NaN to 0, booleans from zeros. (Nothing beyond
  // float's range but infinities: converting such a double to float is undefined in C++.)
  const std::vector<double> special = {0,   -0.0, 0.5,  -0.5,  1.7, -1.7, 2.5,          65537.25,
                                       3e9, -3e9, 1e20, -1e20, inf, -inf, std::nan(""), 1e-30};
  for (dtype from : k_numeric) {
    for (dtype to : k_numeric) {
      tf::NodeDef n = node("Cast", {{"SrcT", attr_value(from)}, {"DstT", attr_value(to)}});
      // Sources over most of int32 (and far beyond it for int64 and floating point), so
      // that narrowing wraps or saturates.
      const double reach = from == dtype::int32 ? 2e9 : 1e12;
      for (const tensor_shape& shape : {tensor_shape{0}, tensor_shape{33, 65}, k_large}) {
        check(n, {rng.uniform(from, shape, -reach, reach)}, tolerance_for(to));
      }
      check(n, {rng.uniform(from, {33, 65}, -3, 3)}, tolerance_for(to));  // small: zeros, booleans
      if (is_float(from)) check(n, {values_of_type(from, special)}, tolerance_for(to));
    }
  }
}

void fill_cases(consistency_rng& rng) {
  for (dtype type : k_numeric) {
    for (dtype index : {dtype::int32, dtype::int64}) {
      tf::NodeDef n = node("Fill", {{"T", attr_value(type)}, {"index_type", attr_value(index)}});
      for (const std::vector<double>& dims : {std::vector<double>{2, 3, 4}, {0, 5}, {}, {1009, 1013}}) {
        check(n, {values_of_type(index, dims), rng.uniform(type, {}, -100, 100)}, tolerance_for(type));
      }
    }
    for (const char* op : {"ZerosLike", "OnesLike"}) {
      for (const tensor_shape& shape : {tensor_shape{}, tensor_shape{0}, tensor_shape{3, 5}, k_large}) {
        check(typed(op, type), {rng.uniform(type, shape)}, k_exact);
      }
    }
  }
}

void add_n_cases(consistency_rng& rng) {
  // The GPU adds in input order, as the CPU: floating-point sums agree to the bit.
  for (dtype type : k_real) {
    auto sum_of = [&](int n, const tensor_shape& shape) {
      std::vector<tensor> inputs;
      for (int i = 0; i < n; ++i) inputs.push_back(wide_values(rng, type, shape, false));
      check(node("AddN", {{"T", attr_value(type)}, {"N", attr_value(n)}}), std::move(inputs), tolerance_for(type));
    };
    for (int n : {1, 2, 3, 8, 9, 17}) sum_of(n, {33, 65});
    sum_of(3, k_large);
    sum_of(2, {0, 3});
    sum_of(4, {});
  }
}

// --- BiasAdd, BiasAddGrad ------------------------------------------------------------------

void bias_cases(consistency_rng& rng) {
  struct layout {
    const char* format;
    tensor_shape shape;
  };
  const layout adds[] = {
      {"NHWC", {4, 6}},        // strided [4,6]
      {"NHWC", {2, 3, 5, 70}}, // rows [30,70], row vector
      {"NHWC", k_large},       // rows, large
      {"NHWC", {0, 5}},        // empty
      {"NCHW", {2, 6, 5, 7}},  // strided [2,6,35]
      {"NCHW", {1, 70, 100}},  // rows [70,100], column vector
      {"NCHW", {3, 4}},        // rank 2: channels last
      {"NCHW", {8, 3, 1, 1}},  // strided [8,3]
  };
  // Gradients: NHWC sums columns (split over rows when there are many); NCHW sums each
  // channel's (batch, spatial) positions, split over them when there are many.
  const layout grads[] = {
      {"NHWC", {7, 3}},    {"NHWC", {2, 3, 5, 6}}, {"NHWC", {1000, 70}},    {"NHWC", {100000, 3}},
      {"NHWC", {4, 0}},    {"NHWC", {0, 4}},       {"NCHW", {2, 6, 5, 7}},  {"NCHW", {1, 3, 30000}},
      {"NCHW", {64, 16, 9}}, {"NCHW", {8, 300, 2}}, {"NCHW", {3, 5, 1000}}, {"NCHW", {0, 4, 3}},
      {"NCHW", {2, 3}},
  };
  for (dtype type : k_real) {
    for (const auto& [format, shape] : adds) {
      const std::int64_t channels = std::string(format) == "NHWC" ? shape.dim(shape.rank() - 1) : shape.dim(1);
      check(node("BiasAdd", {{"T", attr_value(type)}, {"data_format", attr_value(format)}}),
            {wide_values(rng, type, shape, false), wide_values(rng, type, {channels}, false)}, tolerance_for(type));
    }
    for (const auto& [format, shape] : grads) {
      // Floats: values in [0, 1], so that no sum cancels and the relative tolerance holds
      // whatever order the sums are added in.
      tensor grad = is_float(type) ? rng.uniform(type, shape, 0, 1) : rng.uniform(type, shape, -100, 100);
      check(node("BiasAddGrad", {{"T", attr_value(type)}, {"data_format", attr_value(format)}}), {grad},
            type == dtype::float32 ? k_float32_sum : tolerance_for(type));
    }
  }
}

// --- ClipByValue, Select, SelectV2 ---------------------------------------------------------

void clip_and_select_cases(consistency_rng& rng) {
  struct shapes3 {
    tensor_shape a, b, c;
  };
  const shapes3 clips[] = {
      {{3, 4}, {}, {}},       {{3, 4}, {3, 4}, {4}},   {{5, 2, 3}, {2, 1}, {3}},
      {{}, {}, {}},           {k_large, {}, {1013}},  {{0, 3}, {}, {3}},
  };
  for (dtype type : k_real) {
    for (const auto& [t, lo, hi] : clips) {
      // Bounds that sometimes cross (lo > hi gives lo, as on the CPU).
      check(typed("ClipByValue", type),
            {rng.uniform(type, t, -10, 10), rng.uniform(type, lo, -8, 2), rng.uniform(type, hi, -2, 8)},
            k_exact);
    }
  }
  check_error(typed("ClipByValue", dtype::float32),
              {rng.uniform(dtype::float32, {3, 4}), rng.uniform(dtype::float32, {2, 3, 4}),
               rng.uniform(dtype::float32, {})},
              "must broadcast to the shape of t");

  // Select: the condition is t's shape, a scalar, or a vector along t's first dimension.
  const std::pair<tensor_shape, tensor_shape> selects[] = {
      {{3, 4}, {3, 4}}, {{}, {2, 3}}, {{4}, {4, 3, 2}}, {{0}, {0, 3}}, {k_large, k_large}, {{5}, {5}},
  };
  const shapes3 selects_v2[] = {
      {{3, 1}, {1, 4}, {}}, {{}, {5}, {5}}, {{2, 1, 3}, {4, 1}, {3}}, {{1013}, k_large, {}}, {{0, 1}, {3}, {}},
  };
  for (dtype type : k_numeric) {
    for (const auto& [cond, t] : selects) {
      check(typed("Select", type),
            {rng.uniform(dtype::bool_, cond), rng.uniform(type, t, -100, 100), rng.uniform(type, t, -100, 100)},
            k_exact);
    }
    for (const auto& [cond, t, e] : selects_v2) {
      check(typed("SelectV2", type),
            {rng.uniform(dtype::bool_, cond), rng.uniform(type, t, -100, 100), rng.uniform(type, e, -100, 100)},
            k_exact);
    }
  }
  check_error(typed("Select", dtype::float32),
              {rng.uniform(dtype::bool_, {2, 3}), rng.uniform(dtype::float32, {2, 3}),
               rng.uniform(dtype::float32, {3, 2})},
              "'t' and 'e' must have the same shape");
  check_error(typed("Select", dtype::float32),
              {rng.uniform(dtype::bool_, {3}), rng.uniform(dtype::float32, {4, 3}), rng.uniform(dtype::float32, {4, 3})},
              "'condition' of shape [3] must be a scalar");
  check_error(typed("SelectV2", dtype::int32),
              {rng.uniform(dtype::bool_, {2}), rng.uniform(dtype::int32, {3}), rng.uniform(dtype::int32, {})},
              "Incompatible shapes: [2] vs. [3] vs. []");
}

}  // namespace

void cwise_cases() {
  consistency_rng rng(20261203);
  binary_cases(rng);
  unary_cases(rng);
  gradient_cases(rng);
  cast_cases(rng);
  fill_cases(rng);
  add_n_cases(rng);
  bias_cases(rng);
  clip_and_select_cases(rng);
}

}  // namespace troupe::testing
