// Element-wise GPU work behind plain C++ launch functions, for gpu_cwise_kernels.cc. The
// device code lives in gpu_cwise_launch.cu, which nvcc compiles as C++17: this header uses
// nothing but CUDA runtime types and fixed-size integers.
//
//   broadcast_geometry<2> g = ...;  // the collapsed output dims, each operand's strides
//   launch_binary<float>(binary_op::add, 0.f, g, x, y, z, stream);
//   check_launch(ctx, "Add");       // cudaGetLastError: the launch's own error, if any
//
// Contract of every launcher: pointers are device memory (values passed by value or in
// host arrays are said so); outputs do not overlap inputs; the work is enqueued on `stream`
// and the call returns at once; nothing is launched for zero elements. Each template is
// instantiated in the .cu for the element types listed beside it only (a missing one is a
// link error).
//
// Semantics are the CPU kernels' (kernels/cpu/cwise_kernels.cc, nn2_kernels.cc,
// grad_kernels.cc, array_kernels.cc, nn_kernels.cc): integers wrap (two's complement);
// integer quotients truncate (RealDiv) or floor (FloorDiv, FloorMod); Maximum and Minimum
// propagate NaN; Cast from floating point to integers saturates and maps NaN to 0. One
// difference: where the CPU refuses an input after reading its values (an integer divisor
// of 0, an integer raised to a negative power), a GPU kernel cannot read them without
// waiting for the GPU, so it computes a defined value instead: an integer x / 0, x // 0,
// x % 0 and 1 / 0 give 0; an integer x to a negative power gives the truncated quotient
// 1 / x^-y (1 for x = 1, +-1 for x = -1, otherwise 0).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace troupe::kernels::gpu {

// y = op(x). float, double, int32, int64 (the floating-point-only ops for float and double).
enum class unary_op : int {
  neg, abs, sign, square, relu, relu6, reciprocal,              // every type
  exp, log, sqrt, rsqrt, tanh, sigmoid, elu, leaky_relu, softplus,  // floating point
};

// z = op(x, y). The *_grad ops take (gradients, features) or, for tanh, sigmoid, sqrt,
// rsqrt and reciprocal, (y, dy) with y the forward op's output, as their CPU kernels do.
enum class binary_op : int {
  add, sub, mul, div, maximum, minimum, pow, floor_div, floor_mod, relu_grad, relu6_grad,  // every type
  elu_grad, leaky_relu_grad, softplus_grad, tanh_grad, sigmoid_grad, sqrt_grad, rsqrt_grad,
  reciprocal_grad,  // floating point
};

// z = op(x, y) as bool.
enum class compare_op : int { equal, not_equal, less, less_equal, greater, greater_equal };

// The most dimensions a broadcast may have after collapsing (gpu_cwise_kernels.cc refuses
// more).
inline constexpr int k_max_broadcast_rank = 8;

// How K operands map onto an output of row-major dims: element (i_0, ..., i_rank-1) of the
// output reads element sum_d i_d * strides[k][d] of operand k. Collapsed: no dimension is
// 1 unless rank is 1, and no two neighbours could be merged into one.
template <int K>
struct broadcast_geometry {
  int rank = 1;
  std::int64_t dims[k_max_broadcast_rank] = {1};
  std::int64_t strides[K][k_max_broadcast_rank] = {};  // in elements; 0 where k repeats
};

// float, double, int32, int64. alpha: LeakyRelu's slope (ignored by the other ops).
template <class T>
void launch_unary(unary_op op, float alpha, const T* x, T* y, std::int64_t n, cudaStream_t stream);

// float, double, int32, int64. alpha: LeakyReluGrad's slope.
template <class T>
void launch_binary(binary_op op, float alpha, const broadcast_geometry<2>& g, const T* x, const T* y, T* z,
                   cudaStream_t stream);

// float, double, int32, int64, bool.
template <class T>
void launch_compare(compare_op op, const broadcast_geometry<2>& g, const T* x, const T* y, bool* z,
                    cudaStream_t stream);

// out = condition ? t : e, the three broadcast by g. float, double, int32, int64, bool.
template <class T>
void launch_select(const broadcast_geometry<3>& g, const bool* condition, const T* t, const T* e, T* out,
                   cudaStream_t stream);

// out = max(min(t, hi), lo), the three broadcast by g. float, double, int32, int64.
template <class T>
void launch_clip(const broadcast_geometry<3>& g, const T* t, const T* lo, const T* hi, T* out, cudaStream_t stream);

// The element types Cast converts between.
enum class element_type : int { float32, float64, int32, int64, bool_ };

// y = x converted from `from` to `to` (a copy when they are equal).
void launch_cast(element_type from, element_type to, const void* x, void* y, std::int64_t n, cudaStream_t stream);

// y[i] = value. float, double, int32, int64, bool.
template <class T>
void launch_fill(T value, T* y, std::int64_t n, cudaStream_t stream);

// out = inputs[0] + ... + inputs[count - 1], added in that order. `inputs` is a host array
// of `count` >= 1 device pointers (read before the call returns). float, double, int32, int64.
template <class T>
void launch_add_n(const T* const* inputs, int count, T* out, std::int64_t n, cudaStream_t stream);

// BiasAddGrad: out[c] = the sum of grad[o][c][i] over o < outer and i < inner, for
// grad viewed as [outer, channels, inner] (NHWC: inner = 1; NCHW: outer = batch). Rows of
// partial sums go to scratch first when the work is split: bias_grad_scratch says how
// many elements of T it needs (0: none; then `scratch` may be null). Deterministic: the
// same input gives the same bits on every run. float, double, int32, int64.
std::int64_t bias_grad_scratch(std::int64_t outer, std::int64_t channels, std::int64_t inner);
template <class T>
void launch_bias_grad(const T* grad, std::int64_t outer, std::int64_t channels, std::int64_t inner, T* scratch,
                      T* out, cudaStream_t stream);

}  // namespace troupe::kernels::gpu
