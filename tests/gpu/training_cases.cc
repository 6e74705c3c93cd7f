// Consistency cases of the training updates a GPU applies to its variables
// (gpu_device::apply_update against kernels::apply_training_update): every optimizer, with
// and without its variants, float and double, empty, odd and multi-block sizes; the
// assign updates also for integers (wrapping); an embedding's scatter-add and gather.
// (Bad operands get the same errors on both:
// the GPU's update makes kernels::check_training_update's checks.)
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "kernels/cuda/gpu_device.h"
#include "kernels/training_ops.h"
#include "tests/gpu/consistency.h"

namespace troupe::testing {

namespace {

// A scalar hyper-parameter of dtype `type`.
tensor scalar_of(dtype type, double v) {
  return type == dtype::float32 ? tensor::scalar<float>(static_cast<float>(v)) : tensor::scalar<double>(v);
}

}  // namespace

void training_cases() {
  consistency_rng rng(19);
  const tensor none;  // a variable's place among the inputs
  for (dtype type : {dtype::float32, dtype::float64}) {
    const tolerance tol = type == dtype::float32 ? k_float32 : k_float64;
    for (const tensor_shape& shape : {tensor_shape{0}, tensor_shape{7}, tensor_shape{33, 65}, tensor_shape{300, 1000}}) {
      const std::string at = str_cat(dtype_name(type), " ", shape.to_string());
      auto value = [&] { return rng.uniform(type, shape, -1, 1); };
      auto positive = [&] { return rng.uniform(type, shape, 0.1, 1); };  // accumulators, second moments
      auto s = [&](double v) { return scalar_of(type, v); };
      check_update_consistency("ResourceApplyGradientDescent " + at, {"ResourceApplyGradientDescent"}, {value()},
                               {none, s(0.1), value()}, tol);
      for (bool nesterov : {false, true}) {
        kernels::training_update u{"ResourceApplyMomentum", nesterov};
        check_update_consistency(str_cat("ResourceApplyMomentum nesterov=", nesterov, " ", at), u, {value(), value()},
                                 {none, none, s(0.05), value(), s(0.9)}, tol);
        kernels::training_update adam{"ResourceApplyAdam", nesterov};
        check_update_consistency(str_cat("ResourceApplyAdam nesterov=", nesterov, " ", at), adam,
                                 {value(), value(), positive()},
                                 {none, none, none, s(0.9 * 0.9), s(0.999 * 0.999), s(0.01), s(0.9), s(0.999),
                                  s(1e-7), value()},
                                 tol);
      }
      for (bool slots : {true, false}) {
        kernels::training_update u{"ResourceApplyAdagrad", false, slots};
        check_update_consistency(str_cat("ResourceApplyAdagrad update_slots=", slots, " ", at), u,
                                 {value(), positive()}, {none, none, s(0.1), value()}, tol);
      }
      check_update_consistency("ResourceApplyRMSProp " + at, {"ResourceApplyRMSProp"},
                               {value(), positive(), value()},
                               {none, none, none, s(0.01), s(0.9), s(0.5), s(1e-7), value()}, tol);
    }
  }
  // The product update (a dense layer's weights by gradient descent), each transposition.
  for (dtype type : {dtype::float32, dtype::float64}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const std::int64_t m = 37, n = 65, k = 129;
        kernels::training_update u{"TroupeApplyGradientDescentMatMul"};
        u.transpose_a = ta;
        u.transpose_b = tb;
        check_update_consistency(str_cat("TroupeApplyGradientDescentMatMul ", dtype_name(type), " transpose_a=", ta,
                                         " transpose_b=", tb),
                                 u, {rng.uniform(type, {m, n})},
                                 {tensor(), scalar_of(type, 0.1), rng.uniform(type, ta ? tensor_shape{k, m} : tensor_shape{m, k}),
                                  rng.uniform(type, tb ? tensor_shape{n, k} : tensor_shape{k, n})},
                                 type == dtype::float32 ? k_float32_sum : k_float64);
      }
    }
  }
  // An embedding's sparse update and its lookup: rows scattered (repeated indices add up,
  // in any order: float sums within a few ulps) and gathered, both index types.
  for (dtype index : {dtype::int32, dtype::int64}) {
    for (dtype type : {dtype::float32, dtype::float64, dtype::int32}) {
      const tensor_shape table{50, 33};
      tensor ids = rng.uniform(index, {7, 3}, 0, 49);
      const std::string at = str_cat(dtype_name(type), " indices ", dtype_name(index));
      check_update_consistency("ResourceScatterAdd " + at, {"ResourceScatterAdd"}, {rng.uniform(type, table, -9, 9)},
                               {tensor(), ids, rng.uniform(type, {7, 3, 33}, -9, 9)},
                               type == dtype::int32 ? k_exact : (type == dtype::float32 ? k_float32_sum : k_float64));
      check_update_consistency("ResourceScatterAdd of a scalar " + at, {"ResourceScatterAdd"},
                               {rng.uniform(type, table, -9, 9)}, {tensor(), ids, rng.uniform(type, {}, -9, 9)},
                               type == dtype::int32 ? k_exact : (type == dtype::float32 ? k_float32_sum : k_float64));
      check_gather_consistency("ResourceGather " + at, rng.uniform(type, table, -9, 9), ids);
    }
  }
  for (dtype type : {dtype::float32, dtype::float64, dtype::int32, dtype::int64}) {
    const bool integer = type == dtype::int32 || type == dtype::int64;
    // Integers near the ends of their range, so that some sums wrap.
    const double lo = integer ? (type == dtype::int32 ? -2147483000.0 : -9.2e18) : -1;
    for (const char* op : {"AssignAddVariableOp", "AssignSubVariableOp"}) {
      check_update_consistency(str_cat(op, " ", dtype_name(type)), {op}, {rng.uniform(type, {129}, lo, -lo)},
                               {tensor(), rng.uniform(type, {129}, lo, -lo)}, integer ? k_exact : k_float32);
    }
  }
}

}  // namespace troupe::testing
