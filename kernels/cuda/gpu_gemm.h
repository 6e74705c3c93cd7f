// The one cuBLAS product behind MatMul, BatchMatMul (gpu_matmul_kernels.cc) and the GPU's
// product update of a variable (gpu_training.cc). float32 uses TensorFloat-32 only when
// allow_tf32() (gpu_device.h).
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "kernels/cuda/gpu_device.h"

namespace troupe::kernels::gpu {

// out = op(x) op(y) for `batches` matrices [m, k] x [k, n] -> [m, n], row-major, each
// operand's matrices `x_step` / `y_step` matrices apart (0: one matrix for every product),
// on the compute stream. REQUIRES: m, n, k >= 1 and all within int. float and double.
template <class T>
cublasStatus_t gemm(gpu_device& gpu, bool adj_x, bool adj_y, std::int64_t m, std::int64_t n, std::int64_t k,
                    const T* x, long long x_step, const T* y, long long y_step, T* out, std::int64_t batches);

}  // namespace troupe::kernels::gpu
