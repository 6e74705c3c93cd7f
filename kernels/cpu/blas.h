// OpenBLAS for CPU kernels: one thread budget shared with the compute pool, and a row-major
// gemm overloaded for float and double.
//
// OpenBLAS keeps one process-wide thread count. Kernels call use_openblas_threads with
// their compute pool's size before a BLAS call, so OpenBLAS and the pool share one thread
// budget instead of each assuming the whole machine (two threads fighting over two cores
// are slower than one). The check is one relaxed atomic load when nothing changes.
#pragma once

#include <cblas.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace troupe::kernels {

// Makes OpenBLAS use `threads` threads. Cheap when nothing changes.
inline void use_openblas_threads(int threads) {
  static std::atomic<int> current{0};
  if (current.load(std::memory_order_relaxed) == threads) return;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (current.load(std::memory_order_relaxed) == threads) return;
  openblas_set_num_threads(threads);
  current.store(threads, std::memory_order_relaxed);
}

// C[m, n] = alpha * op(A) * op(B) + beta * C, all row-major with leading dimensions.
// REQUIRES: every size and leading dimension fits in blasint.
inline void blas_gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                      std::int64_t k, float alpha, const float* a, std::int64_t lda,
                      const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}
inline void blas_gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                      std::int64_t k, double alpha, const double* a, std::int64_t lda,
                      const double* b, std::int64_t ldb, double beta, double* c,
                      std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

}  // namespace troupe::kernels
