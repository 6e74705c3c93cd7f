// Products of raw row-major matrices, shared by the kernels that multiply them (MatMul,
// the im2col convolutions, the fused LSTM). MatMul measures OpenBLAS, Eigen and oneDNN's
// sgemm once per process (kernels/cpu/matmul_kernels.cc, TROUPE_GEMM overrides); `gemm`
// follows its answer where it can (oneDNN or OpenBLAS: it has no Eigen path).
//
// One thread budget: `gemm` runs on the calling thread only (OpenBLAS and oneDNN's OpenMP
// both at one thread); kernels split their products over the compute pool themselves
// (`parallel_gemm`, or blocks of their own).
//
// Thread safety: may be called from any thread.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace troupe::kernels {

// True when MatMul's measurement (made on the first call, ~15 ms) chose oneDNN's sgemm
// for float32.
bool float_gemm_on_onednn();

// C[m, n] = alpha op(A) op(B) + beta C, row-major with leading dimensions, on this
// thread: float on oneDNN's sgemm when MatMul's measurement chose it (OpenBLAS if oneDNN
// reports an error), otherwise and for double on OpenBLAS. With beta 0, C's old contents
// are ignored (may be uninitialized).
// REQUIRES: sizes and leading dimensions fit in a 32-bit int.
void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc);
void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
          std::int64_t ldc);

// `gemm` with the rows of C split over the pool.
template <class T>
void parallel_gemm(compute_pool& pool, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                   std::int64_t k, T alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta,
                   T* c, std::int64_t ldc);

// Nanoseconds for a product of m x n x k on one core (about 50 GFLOP/s), for the pool's
// cost estimates.
inline double gemm_ns(std::int64_t m, std::int64_t n, std::int64_t k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / 50.0;
}

}  // namespace troupe::kernels
