// The device code behind gpu_training_launch.h: one grid-stride kernel per update, each
// element computed as the CPU's kernels/cpu/training_ops.cc computes it.
#include "kernels/cuda/gpu_training_launch.h"
#include "kernels/cuda/gpu_grid.cuh"

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace troupe::kernels::gpu {

namespace {

using grid::blocks_for;
using grid::k_threads;
using grid::thread_count;
using grid::thread_index;

__device__ __forceinline__ float root(float x) { return sqrtf(x); }
__device__ __forceinline__ double root(double x) { return sqrt(x); }

template <class T>
__global__ void gradient_descent_kernel(T* var, const T* alpha_p, const T* delta, std::int64_t n) {
  const T alpha = *alpha_p;
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) var[i] -= delta[i] * alpha;
}

template <class T>
__global__ void momentum_kernel(T* var, T* accum, const T* lr_p, const T* grad, const T* momentum_p, bool nesterov,
                                std::int64_t n) {
  const T lr = *lr_p, momentum = *momentum_p;
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    const T g = grad[i];
    const T a = accum[i] * momentum + g;
    accum[i] = a;
    if (nesterov) {
      var[i] -= g * lr + a * momentum * lr;
    } else {
      var[i] -= a * lr;
    }
  }
}

template <class T>
__global__ void adagrad_kernel(T* var, T* accum, const T* lr_p, const T* grad, bool update_slots, std::int64_t n) {
  const T lr = *lr_p;
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    const T g = grad[i];
    T a = accum[i];
    if (update_slots) {
      a += g * g;
      accum[i] = a;
    }
    var[i] -= g * lr * (T(1) / root(a));
  }
}

template <class T>
__global__ void adam_kernel(T* var, T* m, T* v, const T* beta1_power, const T* beta2_power, const T* lr,
                            const T* beta1_p, const T* beta2_p, const T* epsilon_p, const T* grad, bool nesterov,
                            std::int64_t n) {
  // As the CPU computes it, once per thread: lr * sqrt(1 - beta2_power) / (1 - beta1_power).
  const T alpha = *lr * root(T(1) - *beta2_power) / (T(1) - *beta1_power);
  const T beta1 = *beta1_p, beta2 = *beta2_p, epsilon = *epsilon_p;
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    const T g = grad[i];
    T mi = m[i];
    T vi = v[i];
    mi += (g - mi) * (T(1) - beta1);
    vi += (g * g - vi) * (T(1) - beta2);
    m[i] = mi;
    v[i] = vi;
    if (nesterov) {
      var[i] -= ((g * (T(1) - beta1) + beta1 * mi) * alpha) / (root(vi) + epsilon);
    } else {
      var[i] -= (mi * alpha) / (root(vi) + epsilon);
    }
  }
}

template <class T>
__global__ void rms_prop_kernel(T* var, T* ms, T* mom, const T* lr_p, const T* rho_p, const T* momentum_p,
                                const T* epsilon_p, const T* grad, std::int64_t n) {
  const T lr = *lr_p, rho = *rho_p, momentum = *momentum_p, epsilon = *epsilon_p;
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    const T g = grad[i];
    T s = ms[i];
    s += (g * g - s) * (T(1) - rho);
    ms[i] = s;
    const T next = mom[i] * momentum + (g * lr) / root(s + epsilon);
    mom[i] = next;
    var[i] -= next;
  }
}

// Integers in an unsigned type of their width, so that overflow wraps.
template <class T>
__device__ __forceinline__ T wrapped(T a, T b, bool subtract) {
  if constexpr (std::is_integral_v<T>) {
    using u = std::make_unsigned_t<T>;
    return static_cast<T>(subtract ? static_cast<u>(a) - static_cast<u>(b) : static_cast<u>(a) + static_cast<u>(b));
  } else {
    return subtract ? a - b : a + b;
  }
}

template <class T>
__global__ void assign_update_kernel(T* var, const T* value, bool subtract, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) var[i] = wrapped(var[i], value[i], subtract);
}

// An atomic add that wraps for integers (64-bit ones through unsigned long long).
template <class T>
__device__ __forceinline__ void atomic_add(T* at, T v) {
  if constexpr (std::is_same_v<T, std::int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(at), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, std::int32_t>) {
    atomicAdd(reinterpret_cast<unsigned int*>(at), static_cast<unsigned int>(v));
  } else {
    atomicAdd(at, v);
  }
}

template <class T, class Index>
__global__ void scatter_add_kernel(T* var, std::int64_t rows, std::int64_t inner, const Index* indices,
                                   std::int64_t count, const T* updates, bool scalar_update) {
  const std::int64_t n = count * inner;
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    const std::int64_t j = i / inner, k = i - j * inner;
    const std::int64_t row = static_cast<std::int64_t>(indices[j]);
    if (row < 0 || row >= rows) continue;
    atomic_add(var + row * inner + k, scalar_update ? updates[0] : updates[i]);
  }
}

}  // namespace

template <class T>
void launch_scatter_add(T* var, std::int64_t rows, std::int64_t inner, const void* indices, bool indices64,
                        std::int64_t count, const T* updates, bool scalar_update, cudaStream_t stream) {
  if (count == 0 || inner == 0) return;
  if (indices64) {
    scatter_add_kernel<T, std::int64_t><<<blocks_for(count * inner), k_threads, 0, stream>>>(
        var, rows, inner, static_cast<const std::int64_t*>(indices), count, updates, scalar_update);
  } else {
    scatter_add_kernel<T, std::int32_t><<<blocks_for(count * inner), k_threads, 0, stream>>>(
        var, rows, inner, static_cast<const std::int32_t*>(indices), count, updates, scalar_update);
  }
}

template <class T>
void launch_apply_gradient_descent(T* var, const T* alpha, const T* delta, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gradient_descent_kernel<T><<<blocks_for(n), k_threads, 0, stream>>>(var, alpha, delta, n);
}

template <class T>
void launch_apply_momentum(T* var, T* accum, const T* lr, const T* grad, const T* momentum, bool nesterov,
                           std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  momentum_kernel<T><<<blocks_for(n), k_threads, 0, stream>>>(var, accum, lr, grad, momentum, nesterov, n);
}

template <class T>
void launch_apply_adagrad(T* var, T* accum, const T* lr, const T* grad, bool update_slots, std::int64_t n,
                          cudaStream_t stream) {
  if (n == 0) return;
  adagrad_kernel<T><<<blocks_for(n), k_threads, 0, stream>>>(var, accum, lr, grad, update_slots, n);
}

template <class T>
void launch_apply_adam(T* var, T* m, T* v, const T* beta1_power, const T* beta2_power, const T* lr, const T* beta1,
                       const T* beta2, const T* epsilon, const T* grad, bool nesterov, std::int64_t n,
                       cudaStream_t stream) {
  if (n == 0) return;
  adam_kernel<T><<<blocks_for(n), k_threads, 0, stream>>>(var, m, v, beta1_power, beta2_power, lr, beta1, beta2,
                                                          epsilon, grad, nesterov, n);
}

template <class T>
void launch_apply_rms_prop(T* var, T* ms, T* mom, const T* lr, const T* rho, const T* momentum, const T* epsilon,
                           const T* grad, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  rms_prop_kernel<T><<<blocks_for(n), k_threads, 0, stream>>>(var, ms, mom, lr, rho, momentum, epsilon, grad, n);
}

template <class T>
void launch_assign_update(T* var, const T* value, bool subtract, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  assign_update_kernel<T><<<blocks_for(n), k_threads, 0, stream>>>(var, value, subtract, n);
}

#define TROUPE_TRAINING_LAUNCHERS(T)                                                                               \
  template void launch_apply_gradient_descent<T>(T*, const T*, const T*, std::int64_t, cudaStream_t);            \
  template void launch_apply_momentum<T>(T*, T*, const T*, const T*, const T*, bool, std::int64_t, cudaStream_t); \
  template void launch_apply_adagrad<T>(T*, T*, const T*, const T*, bool, std::int64_t, cudaStream_t);           \
  template void launch_apply_adam<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*,      \
                                     const T*, bool, std::int64_t, cudaStream_t);                                  \
  template void launch_apply_rms_prop<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,            \
                                         std::int64_t, cudaStream_t);
TROUPE_TRAINING_LAUNCHERS(float)
TROUPE_TRAINING_LAUNCHERS(double)
#undef TROUPE_TRAINING_LAUNCHERS
template void launch_assign_update<float>(float*, const float*, bool, std::int64_t, cudaStream_t);
template void launch_assign_update<double>(double*, const double*, bool, std::int64_t, cudaStream_t);
template void launch_assign_update<std::int32_t>(std::int32_t*, const std::int32_t*, bool, std::int64_t, cudaStream_t);
template void launch_assign_update<std::int64_t>(std::int64_t*, const std::int64_t*, bool, std::int64_t, cudaStream_t);
#define TROUPE_SCATTER_ADD(T)                                                                                  \
  template void launch_scatter_add<T>(T*, std::int64_t, std::int64_t, const void*, bool, std::int64_t, const T*, \
                                      bool, cudaStream_t);
TROUPE_SCATTER_ADD(float)
TROUPE_SCATTER_ADD(double)
TROUPE_SCATTER_ADD(std::int32_t)
TROUPE_SCATTER_ADD(std::int64_t)
#undef TROUPE_SCATTER_ADD

}  // namespace troupe::kernels::gpu
