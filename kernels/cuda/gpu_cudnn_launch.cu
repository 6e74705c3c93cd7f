// The launch functions of kernels/cuda/gpu_cudnn_launch.h: one thread per element (or per
// channel) in grid-stride loops, arithmetic in double as the CPU kernels do it.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/gpu_cudnn_launch.h"

namespace troupe::kernels::gpu {

namespace {

constexpr int k_threads = 256;
constexpr std::int64_t k_max_blocks = 4096;  // the loops stride over the rest

int blocks_for(std::int64_t n) {
  std::int64_t blocks = (n + k_threads - 1) / k_threads;
  return static_cast<int>(blocks < k_max_blocks ? blocks : k_max_blocks);
}

__device__ std::int64_t first_index() { return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ std::int64_t index_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

// bias + alpha * the sum of the squares of row[] over the window around depth d.
template <class T>
__device__ double lrn_norm(const T* row, std::int64_t d, std::int64_t depth, std::int64_t radius, double bias,
                           double alpha) {
  const std::int64_t begin = d - radius > 0 ? d - radius : 0;
  const std::int64_t end = d + radius + 1 < depth ? d + radius + 1 : depth;
  double sum = 0;
  for (std::int64_t k = begin; k < end; ++k) sum += static_cast<double>(row[k]) * static_cast<double>(row[k]);
  return bias + alpha * sum;
}

template <class T>
__global__ void lrn_kernel(const T* x, T* y, std::int64_t n, std::int64_t depth, std::int64_t radius, double bias,
                           double alpha, double beta) {
  for (std::int64_t i = first_index(); i < n; i += index_stride()) {
    const std::int64_t d = i % depth;
    const double norm = lrn_norm(x + (i - d), d, depth, radius, bias, alpha);
    y[i] = static_cast<T>(static_cast<double>(x[i]) * pow(norm, -beta));
  }
}

template <class T>
__global__ void lrn_grad_kernel(const T* dy, const T* x, const T* y, T* dx, std::int64_t n, std::int64_t depth,
                                std::int64_t radius, double bias, double alpha, double beta) {
  for (std::int64_t i = first_index(); i < n; i += index_stride()) {
    const std::int64_t k = i % depth;
    const std::int64_t row = i - k;
    const std::int64_t begin = k - radius > 0 ? k - radius : 0;
    const std::int64_t end = k + radius + 1 < depth ? k + radius + 1 : depth;
    double cross = 0;  // sum of dy[j] y[j] / norm_j over the depths j whose window holds k
    double own = 0;    // dy[k] norm_k^-beta
    for (std::int64_t j = begin; j < end; ++j) {
      const double norm = lrn_norm(x + row, j, depth, radius, bias, alpha);
      const double g = static_cast<double>(dy[row + j]);
      cross += g * static_cast<double>(y[row + j]) / norm;
      if (j == k) own = g * pow(norm, -beta);
    }
    dx[i] = static_cast<T>(own - 2.0 * alpha * beta * static_cast<double>(x[i]) * cross);
  }
}

template <class T>
__global__ void batch_norm_statistics_kernel(const T* mean, const T* inv_std, const T* mean_in, const T* variance_in,
                                             std::int64_t channels, std::int64_t count, double factor, double epsilon,
                                             T* batch_mean, T* batch_variance, T* saved_mean, T* saved_variance) {
  for (std::int64_t c = first_index(); c < channels; c += index_stride()) {
    double m = nan(""), variance = nan("");
    if (count > 0) {
      m = static_cast<double>(mean[c]);
      const double inv = static_cast<double>(inv_std[c]);
      variance = 1.0 / (inv * inv) - epsilon;
      if (variance < 0) variance = 0;  // rounding below a zero variance
    }
    const double bessel = static_cast<double>(count) / static_cast<double>(count - 1 > 1 ? count - 1 : 1);
    const double unbiased = variance * bessel;
    saved_mean[c] = static_cast<T>(m);
    saved_variance[c] = static_cast<T>(variance);
    if (factor == 1.0) {
      batch_mean[c] = static_cast<T>(m);
      batch_variance[c] = static_cast<T>(unbiased);
    } else {
      batch_mean[c] = static_cast<T>((1 - factor) * static_cast<double>(mean_in[c]) + factor * m);
      batch_variance[c] = static_cast<T>((1 - factor) * static_cast<double>(variance_in[c]) + factor * unbiased);
    }
  }
}

template <class T>
__global__ void inverse_std_kernel(const T* variance, double epsilon, std::int64_t channels, T* inv_std) {
  for (std::int64_t c = first_index(); c < channels; c += index_stride()) {
    inv_std[c] = static_cast<T>(1.0 / sqrt(static_cast<double>(variance[c]) + epsilon));
  }
}

template <class T>
__global__ void batch_norm_inference_grad_kernel(const T* dy, const T* scale, const T* variance, double epsilon,
                                                 std::int64_t n, std::int64_t channels, std::int64_t inner, T* dx) {
  for (std::int64_t i = first_index(); i < n; i += index_stride()) {
    const std::int64_t c = (i / inner) % channels;
    const double k = static_cast<double>(scale[c]) / sqrt(static_cast<double>(variance[c]) + epsilon);
    dx[i] = static_cast<T>(k * static_cast<double>(dy[i]));
  }
}

}  // namespace

template <class T>
void launch_lrn(const T* x, T* y, std::int64_t rows, std::int64_t depth, std::int64_t radius, double bias, double alpha,
                double beta, cudaStream_t stream) {
  const std::int64_t n = rows * depth;
  if (n == 0) return;
  lrn_kernel<<<blocks_for(n), k_threads, 0, stream>>>(x, y, n, depth, radius, bias, alpha, beta);
}

template <class T>
void launch_lrn_grad(const T* dy, const T* x, const T* y, T* dx, std::int64_t rows, std::int64_t depth,
                     std::int64_t radius, double bias, double alpha, double beta, cudaStream_t stream) {
  const std::int64_t n = rows * depth;
  if (n == 0) return;
  lrn_grad_kernel<<<blocks_for(n), k_threads, 0, stream>>>(dy, x, y, dx, n, depth, radius, bias, alpha, beta);
}

template <class T>
void launch_batch_norm_statistics(const T* mean, const T* inv_std, const T* mean_in, const T* variance_in,
                                  std::int64_t channels, std::int64_t count, double factor, double epsilon,
                                  T* batch_mean, T* batch_variance, T* saved_mean, T* saved_variance,
                                  cudaStream_t stream) {
  if (channels == 0) return;
  batch_norm_statistics_kernel<<<blocks_for(channels), k_threads, 0, stream>>>(
      mean, inv_std, mean_in, variance_in, channels, count, factor, epsilon, batch_mean, batch_variance, saved_mean,
      saved_variance);
}

template <class T>
void launch_inverse_std(const T* variance, double epsilon, std::int64_t channels, T* inv_std, cudaStream_t stream) {
  if (channels == 0) return;
  inverse_std_kernel<<<blocks_for(channels), k_threads, 0, stream>>>(variance, epsilon, channels, inv_std);
}

template <class T>
void launch_batch_norm_inference_grad(const T* dy, const T* scale, const T* variance, double epsilon,
                                      std::int64_t outer, std::int64_t channels, std::int64_t inner, T* dx,
                                      cudaStream_t stream) {
  const std::int64_t n = outer * channels * inner;
  if (n == 0) return;
  batch_norm_inference_grad_kernel<<<blocks_for(n), k_threads, 0, stream>>>(dy, scale, variance, epsilon, n, channels,
                                                                            inner, dx);
}

// The dtypes the kernels use.
template void launch_lrn<float>(const float*, float*, std::int64_t, std::int64_t, std::int64_t, double, double, double,
                                cudaStream_t);
template void launch_lrn_grad<float>(const float*, const float*, const float*, float*, std::int64_t, std::int64_t,
                                     std::int64_t, double, double, double, cudaStream_t);
template void launch_batch_norm_statistics<float>(const float*, const float*, const float*, const float*, std::int64_t,
                                                  std::int64_t, double, double, float*, float*, float*, float*,
                                                  cudaStream_t);
template void launch_inverse_std<float>(const float*, double, std::int64_t, float*, cudaStream_t);
template void launch_batch_norm_inference_grad<float>(const float*, const float*, const float*, double, std::int64_t,
                                                      std::int64_t, std::int64_t, float*, cudaStream_t);
template void launch_lrn<double>(const double*, double*, std::int64_t, std::int64_t, std::int64_t, double, double,
                                 double, cudaStream_t);
template void launch_lrn_grad<double>(const double*, const double*, const double*, double*, std::int64_t, std::int64_t,
                                      std::int64_t, double, double, double, cudaStream_t);
template void launch_batch_norm_statistics<double>(const double*, const double*, const double*, const double*,
                                                   std::int64_t, std::int64_t, double, double, double*, double*,
                                                   double*, double*, cudaStream_t);
template void launch_inverse_std<double>(const double*, double, std::int64_t, double*, cudaStream_t);
template void launch_batch_norm_inference_grad<double>(const double*, const double*, const double*, double,
                                                       std::int64_t, std::int64_t, std::int64_t, double*, cudaStream_t);

}  // namespace troupe::kernels::gpu
