// The GPU consistency test's harness (as ggml's test-backend-ops): one case is a node (op
// and attributes) and host inputs drawn from a fixed seed; check_consistency runs it with
// the CPU kernel and with the GPU kernel and compares every output element-wise within
// the case's tolerance (exact for integers and booleans; NaN matches only NaN).
//
//   consistency_rng rng(7);
//   check_consistency({"Relu [3,5]", node("Relu", {{"T", dtype::float32}}),
//                      {rng.uniform(dtype::float32, {3, 5}, -1, 1)}, k_float32});
//
// Gradients are checked through the gradient ops' own kernels (ReluGrad,
// Conv2DBackpropInput, ...), each a case of its own. The cases live in tests/gpu/*_cases.cc,
// one function per file, listed in consistency_test.cc; they are linked into one
// executable that skips (CTest SKIPPED) on a machine without a GPU.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "graph/attr.h"
#include "graph/proto/node_def.pb.h"
#include "kernels/device.h"

namespace troupe::testing {

// |gpu - cpu| <= atol + rtol * |cpu| for every element.
struct tolerance {
  double rtol = 0;
  double atol = 0;
};
// float32 kernels that compute the same way on both sides (element-wise): a few ulps.
inline constexpr tolerance k_float32{1e-5, 1e-6};
// float32 kernels whose summation order differs (reductions, matrix products,
// convolutions); the inputs of such cases are scaled so that values stay near 1.
inline constexpr tolerance k_float32_sum{1e-4, 1e-4};
inline constexpr tolerance k_float64{1e-12, 1e-13};
inline constexpr tolerance k_exact{0, 0};

struct consistency_case {
  std::string name;  // what is being checked: op, dtype, shapes, attributes
  tf::NodeDef node;
  std::vector<tensor> inputs;
  tolerance tol;
};

// A NodeDef of `op` with attributes (graph::attr_value converts the values).
tf::NodeDef node(const std::string& op, std::initializer_list<std::pair<std::string, tf::AttrValue>> attrs);

// Random host tensors from a fixed seed.
class consistency_rng {
 public:
  explicit consistency_rng(std::uint32_t seed) : engine_(seed) {}
  // Uniform in [lo, hi) for floating types; integers in [lo, hi]; booleans fair.
  tensor uniform(dtype type, tensor_shape shape, double lo = -1, double hi = 1);
  std::mt19937& engine() { return engine_; }

 private:
  std::mt19937 engine_;
};

// Runs the case on the CPU and on GPU 0 and REQUIREs that both succeed and agree, naming
// the case, the output, the worst element's index and both values on failure.
void check_consistency(const consistency_case& c);

// A training update (kernels/device.h) on the CPU (kernels::apply_training_update) and on
// GPU 0 (its apply_update, every operand copied in), each from its own copy of `vars`;
// compares the variables after it. `inputs` as the op's kernel has them, an uninitialized
// tensor at each variable's place.
void check_update_consistency(const std::string& name, const kernels::training_update& update,
                              const std::vector<tensor>& vars, const std::vector<tensor>& inputs, tolerance tol);

// ResourceGather's rows on GPU 0 (accelerator::gather) against kernels::gather: exact.
void check_gather_consistency(const std::string& name, const tensor& params, const tensor& indices);

// Runs the case on the GPU only and REQUIREs that it fails with an error whose message
// contains `message` (bad input gets a clear error on the GPU too, never a crash).
void check_gpu_error(const consistency_case& c, const std::string& message);

}  // namespace troupe::testing
