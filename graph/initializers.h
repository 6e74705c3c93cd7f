// Initializers: subgraphs that compute a variable's initial value.
//
//   auto root = graph::scope::new_root();
//   output w0 = init::glorot_uniform(root, {784, 128}, dtype::float32, /*seed=*/7);
//   output b0 = init::zeros(root, {128}, dtype::float32);
//   // Layers take an initializer as a value and call it with a seed of their own:
//   init::initializer kernel_init = init::truncated_normal_initializer(0.1);
//
// Determinism: a random initializer's values depend only on (seed, shape, dtype). Its
// random op carries seed = k_graph_seed (87654321, TensorFlow's default graph-level seed)
// and seed2 = the given seed, as TensorFlow does when only an op-level seed is set, so
// every seed, 0 included, is reproducible. make_variable and the layers in graph/nn.h
// derive a distinct seed per variable from the variable's name (graph/variables.h).
//
// Distributions (fan_in, fan_out as Keras computes them: for a shape [..., in, out] the
// product of the leading dimensions times in and times out; [n]: n and n; []: 1 and 1):
//   zeros, constant(value)     Fill
//   random_normal(stddev)      stddev * RandomStandardNormal
//   truncated_normal(stddev)   stddev * TruncatedNormal (redrawn beyond 2 stddev)
//   glorot_uniform             uniform in [-l, l), l = sqrt(6 / (fan_in + fan_out))
//   he_normal                  truncated normal, stddev sqrt(2 / fan_in) / 0.8796256610342398
//                              (Keras' variance scaling: the truncation's variance loss undone)
//
// Errors (a random initializer for a non-float dtype, a negative stddev) are recorded in
// the scope, as every builder error is; the returned output is then invalid.
#pragma once

#include <cstdint>
#include <functional>

#include "graph/builder.h"

namespace troupe::init {

using graph::output;
using graph::scope;

// TensorFlow's default graph-level seed, the `seed` attribute of every random initializer.
inline constexpr std::int64_t k_graph_seed = 87654321;

output zeros(const scope& s, const tensor_shape& shape, dtype type);
output constant(const scope& s, const tensor_shape& shape, dtype type, double value);
output random_normal(const scope& s, const tensor_shape& shape, dtype type, double stddev,
                     std::int64_t seed);
output truncated_normal(const scope& s, const tensor_shape& shape, dtype type, double stddev,
                        std::int64_t seed);
output glorot_uniform(const scope& s, const tensor_shape& shape, dtype type, std::int64_t seed);
output he_normal(const scope& s, const tensor_shape& shape, dtype type, std::int64_t seed);

// An initializer as a value: builds the initial value of a variable of `shape` and
// `type` with `seed` (ignored by the deterministic ones).
using initializer =
    std::function<output(const scope& s, const tensor_shape& shape, dtype type, std::int64_t seed)>;

initializer zeros_initializer();
initializer constant_initializer(double value);
initializer random_normal_initializer(double stddev);
initializer truncated_normal_initializer(double stddev);
initializer glorot_uniform_initializer();
initializer he_normal_initializer();

// (fan_in, fan_out) of a weight shape, as above.
std::pair<double, double> fans(const tensor_shape& shape);

}  // namespace troupe::init
