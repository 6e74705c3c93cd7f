#include "graph/initializers.h"

#include <cmath>
#include <vector>

#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/ops.h"

namespace troupe::init {

using graph::attr_value;

namespace {

// The shape as an int32 vector constant (the `shape`/`dims` input of Fill and the
// random ops).
output shape_constant(const scope& s, const tensor_shape& shape) {
  std::vector<std::int32_t> dims;
  for (std::int64_t d : shape.dims()) dims.push_back(static_cast<std::int32_t>(d));
  return ops::constant(s, tensor::from_vector(dims, tensor_shape{static_cast<std::int64_t>(dims.size())}));
}

bool check_float(const scope& s, const char* what, dtype type) {
  if (type == dtype::float32 || type == dtype::float64) return true;
  s.record(invalid_argument_error("initializer ", what, ": dtype ", dtype_name(type),
                                  " is not float or double"));
  return false;
}

// A random op with TensorFlow's op-level-seed convention.
output random(const scope& s, const char* op, const tensor_shape& shape, dtype type,
              std::int64_t seed) {
  return s.add(op, {shape_constant(s, shape)},
               {{"dtype", attr_value(type)},
                {"seed", attr_value(k_graph_seed)},
                {"seed2", attr_value(seed)}})
      .out();
}

output scaled_normal(const scope& s, const char* what, const char* op, const tensor_shape& shape,
                     dtype type, double stddev, std::int64_t seed) {
  if (!check_float(s, what, type)) return output{};
  if (!(stddev >= 0)) {
    s.record(invalid_argument_error("initializer ", what, ": stddev is ", stddev, " but must be >= 0"));
    return output{};
  }
  return ops::mul(s, random(s, op, shape, type, seed), graph::scalar_of(s, type, stddev));
}

}  // namespace

std::pair<double, double> fans(const tensor_shape& shape) {
  const int rank = shape.rank();
  if (rank == 0) return {1.0, 1.0};
  if (rank == 1) return {static_cast<double>(shape.dim(0)), static_cast<double>(shape.dim(0))};
  double receptive = 1;
  for (int i = 0; i < rank - 2; ++i) receptive *= static_cast<double>(shape.dim(i));
  return {static_cast<double>(shape.dim(rank - 2)) * receptive,
          static_cast<double>(shape.dim(rank - 1)) * receptive};
}

output zeros(const scope& s, const tensor_shape& shape, dtype type) {
  return constant(s, shape, type, 0.0);
}

output constant(const scope& s, const tensor_shape& shape, dtype type, double value) {
  output v = graph::scalar_of(s, type, value);
  if (shape.rank() == 0) return v;
  return ops::fill(s, shape_constant(s, shape), v);
}

output random_normal(const scope& s, const tensor_shape& shape, dtype type, double stddev,
                     std::int64_t seed) {
  return scaled_normal(s, "random_normal", "RandomStandardNormal", shape, type, stddev, seed);
}

output truncated_normal(const scope& s, const tensor_shape& shape, dtype type, double stddev,
                        std::int64_t seed) {
  return scaled_normal(s, "truncated_normal", "TruncatedNormal", shape, type, stddev, seed);
}

output glorot_uniform(const scope& s, const tensor_shape& shape, dtype type, std::int64_t seed) {
  if (!check_float(s, "glorot_uniform", type)) return output{};
  auto [fan_in, fan_out] = fans(shape);
  const double limit = std::sqrt(6.0 / std::max(1.0, fan_in + fan_out));
  output u = random(s, "RandomUniform", shape, type, seed);
  return ops::sub(s, ops::mul(s, u, graph::scalar_of(s, type, 2 * limit)),
                  graph::scalar_of(s, type, limit));
}

output he_normal(const scope& s, const tensor_shape& shape, dtype type, std::int64_t seed) {
  // The standard deviation of a unit normal truncated to [-2, 2].
  constexpr double truncated_stddev = 0.87962566103423978;
  auto [fan_in, fan_out] = fans(shape);
  const double stddev = std::sqrt(2.0 / std::max(1.0, fan_in)) / truncated_stddev;
  return scaled_normal(s, "he_normal", "TruncatedNormal", shape, type, stddev, seed);
}

initializer zeros_initializer() {
  return [](const scope& s, const tensor_shape& shape, dtype type, std::int64_t) {
    return zeros(s, shape, type);
  };
}

initializer constant_initializer(double value) {
  return [value](const scope& s, const tensor_shape& shape, dtype type, std::int64_t) {
    return constant(s, shape, type, value);
  };
}

initializer random_normal_initializer(double stddev) {
  return [stddev](const scope& s, const tensor_shape& shape, dtype type, std::int64_t seed) {
    return random_normal(s, shape, type, stddev, seed);
  };
}

initializer truncated_normal_initializer(double stddev) {
  return [stddev](const scope& s, const tensor_shape& shape, dtype type, std::int64_t seed) {
    return truncated_normal(s, shape, type, stddev, seed);
  };
}

initializer glorot_uniform_initializer() {
  return [](const scope& s, const tensor_shape& shape, dtype type, std::int64_t seed) {
    return glorot_uniform(s, shape, type, seed);
  };
}

initializer he_normal_initializer() {
  return [](const scope& s, const tensor_shape& shape, dtype type, std::int64_t seed) {
    return he_normal(s, shape, type, seed);
  };
}

}  // namespace troupe::init
