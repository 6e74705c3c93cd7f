// The launch geometry that the element-wise device code shares (gpu_cwise_launch.cu,
// gpu_training_launch.cu): blocks of k_threads threads, at most k_max_blocks of them, each
// thread looping grid-stride over 64-bit indices, so any size works with a bounded grid.
// Only for .cu files (nvcc).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace troupe::kernels::gpu::grid {

inline constexpr int k_threads = 256;
// Enough blocks to fill any current GPU several times over; larger inputs loop.
inline constexpr std::int64_t k_max_blocks = 4096;

inline unsigned blocks_for(std::int64_t work) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((work + k_threads - 1) / k_threads, 1, k_max_blocks));
}

__device__ __forceinline__ std::int64_t thread_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t thread_count() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

}  // namespace troupe::kernels::gpu::grid
