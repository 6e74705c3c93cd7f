// Training updates: the math behind ResourceApply*, ResourceScatterAdd, ResourceGather
// and AssignAdd/AssignSubVariableOp, as plain functions on tensors (no actors, no
// kernels). The variable-shard actor owns a variable's buffers and calls these with
// exclusive access.
//
//   tensor var = ..., m = ..., v = ...;                 // float or double, one shape
//   status s = kernels::apply_adam(var, m, v, beta1_power, beta2_power, lr, beta1, beta2,
//                                  epsilon, grad, /*use_nesterov=*/false, &pool);
//   if (!s.ok()) ...                                     // nothing was changed
//
// Contract, for every function that takes a `tensor&`:
//   1. It updates that tensor's bytes (and its slots') IN PLACE and never reallocates.
//      REQUIRES: the caller holds the only reference to those buffers while the call runs
//      (no reader keeps a snapshot that shares them).
//   2. It validates everything first and changes nothing when it returns an error: a
//      dtype or shape mismatch names the function, the argument and both shapes/dtypes.
//   3. Hyper-parameters (lr, momentum, beta1, ...) are scalars of var's dtype; as in
//      TensorFlow's kernels a shape [1] is accepted as a scalar too.
//   4. var, slots and grad have one dtype, float32 or float64, and one shape.
//   5. With a pool, large tensors are split over its threads (the result does not depend
//      on the number of threads: every element is computed the same way).
//
// The formulas are TensorFlow's CPU kernels' (training_ops.cc), written the same way so
// that float32 results round alike:
//   gradient descent  var -= alpha * delta
//   momentum          accum = accum * momentum + grad
//                     var -= lr * accum                        (use_nesterov = false)
//                     var -= lr * grad + lr * momentum * accum (use_nesterov = true)
//   adagrad           accum += grad^2                          (only when update_slots)
//                     var -= lr * grad / sqrt(accum)
//   adam              lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
//                     m += (grad - m) * (1 - beta1)            (= beta1 m + (1 - beta1) grad)
//                     v += (grad^2 - v) * (1 - beta2)
//                     var -= lr_t * m / (sqrt(v) + epsilon)    (use_nesterov = false)
//                     var -= lr_t * (beta1 m + (1 - beta1) grad) / (sqrt(v) + epsilon)
//   rms_prop          ms += (grad^2 - ms) * (1 - rho)          (not centered)
//                     mom = mom * momentum + lr * grad / sqrt(ms + epsilon)
//                     var -= mom
//
// Thread safety: calls on distinct tensors may run concurrently.
#pragma once

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/device.h"

#include <span>
#include <vector>

namespace troupe::kernels {

[[nodiscard]] status apply_gradient_descent(tensor& var, const tensor& alpha, const tensor& delta,
                                            compute_pool* pool = nullptr);

// var -= alpha * op(a) op(b) (op: transposed when transpose_a / transpose_b): gradient
// descent whose gradient is a product, accumulated into var by one gemm (alpha -alpha,
// beta 1) without materializing the gradient. a and b have var's dtype and rank 2, and
// the product has var's shape. Rounds differently from apply_gradient_descent of the
// product (the sum is not rounded to the gradient's dtype on its own first).
[[nodiscard]] status apply_gradient_descent_matmul(tensor& var, const tensor& alpha, const tensor& a,
                                                   const tensor& b, bool transpose_a, bool transpose_b,
                                                   compute_pool* pool = nullptr);
// Its checks alone (what it refuses, with the same errors), for devices that compute it
// their own way.
[[nodiscard]] status check_gradient_descent_matmul(const tensor& var, const tensor& alpha, const tensor& a,
                                                   const tensor& b, bool transpose_a, bool transpose_b);

[[nodiscard]] status apply_momentum(tensor& var, tensor& accum, const tensor& lr, const tensor& grad,
                                    const tensor& momentum, bool use_nesterov,
                                    compute_pool* pool = nullptr);

[[nodiscard]] status apply_adagrad(tensor& var, tensor& accum, const tensor& lr, const tensor& grad,
                                   bool update_slots, compute_pool* pool = nullptr);

[[nodiscard]] status apply_adam(tensor& var, tensor& m, tensor& v, const tensor& beta1_power,
                                const tensor& beta2_power, const tensor& lr, const tensor& beta1,
                                const tensor& beta2, const tensor& epsilon, const tensor& grad,
                                bool use_nesterov, compute_pool* pool = nullptr);

[[nodiscard]] status apply_rms_prop(tensor& var, tensor& ms, tensor& mom, const tensor& lr,
                                    const tensor& rho, const tensor& momentum,
                                    const tensor& epsilon, const tensor& grad,
                                    compute_pool* pool = nullptr);

// var += value and var -= value (AssignAdd/AssignSubVariableOp): one shape, one dtype
// among float, double, int32, int64 (integers wrap around).
[[nodiscard]] status assign_add(tensor& var, const tensor& value, compute_pool* pool = nullptr);
[[nodiscard]] status assign_sub(tensor& var, const tensor& value, compute_pool* pool = nullptr);

// A whole update op (kernels/device.h's training_update: ResourceApply*, AssignAdd/Sub)
// on its variables (`vars`, in the op's input order) and the op's inputs as its kernel has
// them (the variables' handles at their positions, then hyper-parameters and gradient by
// position). check_training_update makes the checks only (every device's update makes the
// same ones, with the same errors, before it computes); apply_training_update checks and
// computes on host memory with the functions above.
[[nodiscard]] status check_training_update(const training_update& update, std::vector<tensor>& vars,
                                           std::span<const tensor> inputs);
[[nodiscard]] status apply_training_update(const training_update& update, std::vector<tensor>& vars,
                                           std::span<const tensor> inputs, compute_pool* pool = nullptr);

// ResourceScatterAdd: var[indices[i], ...] += updates[i, ...] for every position i of
// `indices` (int32 or int64, any rank); repeated indices add up. `updates` has shape
// indices.shape + var.shape[1:], or is a scalar added to every indexed row. var has rank
// >= 1 and dtype float, double, int32 or int64. An index outside [0, var.dim(0)) is
// invalid_argument naming it, and nothing is changed.
[[nodiscard]] status scatter_add(tensor& var, const tensor& indices, const tensor& updates,
                                 compute_pool* pool = nullptr);
// scatter_add's checks but the indices' values (a device reads those itself: it skips
// rows outside var, as TensorFlow's GPU kernel does).
[[nodiscard]] status check_scatter_add(const tensor& var, const tensor& indices, const tensor& updates);

// ResourceGather / GatherV2 on axis batch_dims: a new tensor of shape
// params.shape[:batch_dims] + indices.shape[batch_dims:] + params.shape[batch_dims + 1:]
// whose rows are params' rows at `indices` (int32 or int64), within each batch. Any dtype
// with a fixed size. REQUIRES nothing: bad ranks, batch shapes and out-of-range indices
// are invalid_argument.
[[nodiscard]] result<tensor> gather(const tensor& params, const tensor& indices, int batch_dims = 0);

}  // namespace troupe::kernels
