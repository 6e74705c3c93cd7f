// The CUDA code beside the cuDNN kernels (kernels/cuda/gpu_cudnn_kernels.cc): what cuDNN
// does not do the way the CPU kernels define it. Plain C++ launch functions over device
// pointers, enqueued on `stream` (they never wait); T is float or double. After a launch
// the caller checks cudaGetLastError().
//
//   LRN with a window, bias or beta outside cuDNN's range (radius > 7, bias < 1e-5,
//   beta < 0.01), and its gradient: over the last dimension of [rows, depth] row-major
//   data, with sums in double as the CPU kernels have them.
//
//   Batch norm's per-channel statistics in the CPU kernel's terms (cuDNN gives the mean
//   and 1 / sqrt(variance + epsilon)), the inverse standard deviation the gradient hands
//   to cuDNN, and the inference-mode input gradient (cuDNN's backward pass knows only
//   training mode).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace troupe::kernels::gpu {

// y = x / (bias + alpha * sum over [d - radius, d + radius] of x^2)^beta along each row.
template <class T>
void launch_lrn(const T* x, T* y, std::int64_t rows, std::int64_t depth, std::int64_t radius, double bias, double alpha,
                double beta, cudaStream_t stream);

// dx[k] = dy[k] * norm_k^-beta - 2 alpha beta x[k] * sum over j within radius of k of
// dy[j] y[j] / norm_j, with norm_j = bias + alpha * (sum of x^2 over j's window).
template <class T>
void launch_lrn_grad(const T* dy, const T* x, const T* y, T* dx, std::int64_t rows, std::int64_t depth,
                     std::int64_t radius, double bias, double alpha, double beta, cudaStream_t stream);

// For each of `channels` channels, from the batch's mean and inverse standard deviation
// over `count` values (as cuDNN's training pass saves them; unread when count is 0, which
// gives NaN statistics):
//   saved_mean = mean, saved_variance = 1 / inv_std^2 - epsilon (the biased variance),
//   batch_mean = (1 - factor) * mean_in + factor * mean,
//   batch_variance = (1 - factor) * variance_in + factor * unbiased variance,
// where factor 1 reads neither mean_in nor variance_in (they may be null).
template <class T>
void launch_batch_norm_statistics(const T* mean, const T* inv_std, const T* mean_in, const T* variance_in,
                                  std::int64_t channels, std::int64_t count, double factor, double epsilon,
                                  T* batch_mean, T* batch_variance, T* saved_mean, T* saved_variance,
                                  cudaStream_t stream);

// inv_std = 1 / sqrt(variance + epsilon), per channel.
template <class T>
void launch_inverse_std(const T* variance, double epsilon, std::int64_t channels, T* inv_std, cudaStream_t stream);

// dx = dy * scale[c] / sqrt(variance[c] + epsilon) over x seen as [outer, channels, inner].
template <class T>
void launch_batch_norm_inference_grad(const T* dy, const T* scale, const T* variance, double epsilon,
                                      std::int64_t outer, std::int64_t channels, std::int64_t inner, T* dx,
                                      cudaStream_t stream);

}  // namespace troupe::kernels::gpu
