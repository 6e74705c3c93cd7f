// CPU kernels: MatMul. float and double go to OpenBLAS (sgemm / dgemm); int32 and int64 to
// Eigen's blocked product, split over the compute pool by rows of the product.
//
// OpenBLAS keeps one process-wide thread count. The kernel sets it to the compute pool's
// thread count the first time it sees that pool size (kernels/cpu/blas.h), so OpenBLAS
// and the pool share one thread budget instead of each assuming the machine.
#include <cblas.h>

#include <algorithm>
#include <limits>

#include "core/tensor_eigen.h"
#include "kernels/cpu/blas.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

namespace {

// C[m, n] = op(A) * op(B) for row-major A, B with leading dimensions lda, ldb.
void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), 0.0f, c,
              static_cast<blasint>(n));
}
void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double* c) {
  cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), 0.0, c,
              static_cast<blasint>(n));
}

// Integer products: Eigen, with rows of C split over the pool.
template <class T>
void integer_matmul(const tensor& a, const tensor& b, bool transpose_a, bool transpose_b,
                    tensor& product, compute_pool& pool) {
  auto a_matrix = matrix_view<T>(a);
  auto b_matrix = matrix_view<T>(b);
  auto c_matrix = matrix_view<T>(product);
  std::int64_t m = product.dim(0);
  std::int64_t n = product.dim(1);
  std::int64_t k = transpose_a ? a.dim(0) : a.dim(1);
  auto rows = [&](std::int64_t begin, std::int64_t end) {
    auto c_rows = c_matrix.middleRows(begin, end - begin);
    auto multiply = [&](const auto& op_a) {
      auto a_rows = op_a.middleRows(begin, end - begin);
      if (transpose_b) c_rows.noalias() = a_rows * b_matrix.transpose();
      else c_rows.noalias() = a_rows * b_matrix;
    };
    if (transpose_a) multiply(a_matrix.transpose());
    else multiply(a_matrix);
  };
  // ~1 ns per multiply-add for Eigen's integer kernels.
  pool.parallel_for(m, static_cast<double>(n) * static_cast<double>(k), rows);
}

template <class T>
class matmul_kernel final : public op_kernel {
 public:
  explicit matmul_kernel(kernel_construction& c) : op_kernel(c) {
    c.get_attr("transpose_a", &transpose_a_);
    c.get_attr("transpose_b", &transpose_b_);
  }

  void compute(kernel_context& ctx) override {
    const tensor& a = ctx.input(0);
    const tensor& b = ctx.input(1);
    if (a.rank() != 2 || b.rank() != 2) {
      ctx.fail(invalid_argument_error("MatMul needs matrices, but a is ", a.shape(), " and b is ",
                                      b.shape()));
      return;
    }
    std::int64_t m = a.dim(transpose_a_ ? 1 : 0);
    std::int64_t k = a.dim(transpose_a_ ? 0 : 1);
    std::int64_t k_b = b.dim(transpose_b_ ? 1 : 0);
    std::int64_t n = b.dim(transpose_b_ ? 0 : 1);
    if (k != k_b) {
      ctx.fail(invalid_argument_error(
          "matrix size-incompatible: a ", a.shape(), transpose_a_ ? " (transposed)" : "",
          " has inner dimension ", k, " but b ", b.shape(), transpose_b_ ? " (transposed)" : "",
          " has inner dimension ", k_b));
      return;
    }
    constexpr std::int64_t k_blas_max = std::numeric_limits<blasint>::max();
    if (std::is_floating_point_v<T> &&
        (m > k_blas_max || n > k_blas_max || k > k_blas_max || a.dim(1) > k_blas_max ||
         b.dim(1) > k_blas_max)) {
      ctx.fail(unimplemented_error("MatMul of a ", a.shape(), " and b ", b.shape(),
                                   ": a dimension exceeds the BLAS index range"));
      return;
    }
    tensor& product = ctx.allocate_output(0, tensor_shape{m, n});
    if (m == 0 || n == 0) return;
    if (k == 0) {
      std::fill_n(product.data<T>(), m * n, T(0));
      return;
    }
    if constexpr (std::is_floating_point_v<T>) {
      use_openblas_threads(ctx.pool().num_threads());
      gemm(transpose_a_, transpose_b_, m, n, k, a.data<T>(), a.dim(1), b.data<T>(), b.dim(1),
           product.data<T>());
    } else {
      integer_matmul<T>(a, b, transpose_a_, transpose_b_, product, ctx.pool());
    }
  }

 private:
  bool transpose_a_ = false;
  bool transpose_b_ = false;
};

}  // namespace

void register_matmul_kernels(kernel_registry& registry) {
  add_typed_kernels<matmul_kernel, type_list<float, double, std::int32_t, std::int64_t>>(
      registry, "MatMul");
}

}  // namespace troupe::kernels
