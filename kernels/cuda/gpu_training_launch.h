// Training updates on the GPU behind plain C++ launch functions, for gpu_device::apply_update
// (kernels/cuda/gpu_training.cc). The device code lives in gpu_training_launch.cu.
//
//   launch_apply_momentum<float>(var, accum, lr, grad, momentum, /*nesterov=*/false, n, stream);
//
// Contract of every launcher: pointers are device memory, the hyper-parameters too (one
// element each, read by every thread, as TensorFlow's GPU kernels read them: a learning
// rate that a variable holds never leaves the GPU); var and its slots are updated in
// place, element by element, with the formulas of kernels/training_ops.h written in the
// same order as the CPU's (so float32 results round alike but for fused multiply-adds
// and square roots: within a few ulps); the work is enqueued on `stream` and the call
// returns at once; nothing is launched for zero elements. Each template is instantiated in
// the .cu for float and double only (the assign updates also for int32 and int64).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace troupe::kernels::gpu {

// var -= alpha * delta
template <class T>
void launch_apply_gradient_descent(T* var, const T* alpha, const T* delta, std::int64_t n, cudaStream_t stream);

// accum = accum * momentum + grad; var -= lr * accum (nesterov: var -= grad * lr + accum * momentum * lr)
template <class T>
void launch_apply_momentum(T* var, T* accum, const T* lr, const T* grad, const T* momentum, bool nesterov,
                           std::int64_t n, cudaStream_t stream);

// accum += grad^2 (when update_slots); var -= grad * lr / sqrt(accum)
template <class T>
void launch_apply_adagrad(T* var, T* accum, const T* lr, const T* grad, bool update_slots, std::int64_t n,
                          cudaStream_t stream);

// m += (grad - m) * (1 - beta1); v += (grad^2 - v) * (1 - beta2);
// var -= m * alpha / (sqrt(v) + epsilon), alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
// (nesterov: (grad * (1 - beta1) + beta1 * m) in place of m).
template <class T>
void launch_apply_adam(T* var, T* m, T* v, const T* beta1_power, const T* beta2_power, const T* lr, const T* beta1,
                       const T* beta2, const T* epsilon, const T* grad, bool nesterov, std::int64_t n,
                       cudaStream_t stream);

// ms += (grad^2 - ms) * (1 - rho); mom = mom * momentum + grad * lr / sqrt(ms + epsilon); var -= mom
template <class T>
void launch_apply_rms_prop(T* var, T* ms, T* mom, const T* lr, const T* rho, const T* momentum, const T* epsilon,
                           const T* grad, std::int64_t n, cudaStream_t stream);

// var += value, or var -= value; integers wrap around. float, double, int32, int64.
template <class T>
void launch_assign_update(T* var, const T* value, bool subtract, std::int64_t n, cudaStream_t stream);

// ResourceScatterAdd: var[indices[i], :] += updates[i, :] (or the scalar updates[0] when
// `scalar_update`) with atomic adds, so repeated indices add up; var is seen as [rows,
// inner]; an index outside [0, rows) is skipped (TensorFlow's GPU behaviour: the CPU
// refuses it). Integers wrap. indices int32 or int64 (indices64). float, double, int32, int64.
template <class T>
void launch_scatter_add(T* var, std::int64_t rows, std::int64_t inner, const void* indices, bool indices64,
                        std::int64_t count, const T* updates, bool scalar_update, cudaStream_t stream);

}  // namespace troupe::kernels::gpu
