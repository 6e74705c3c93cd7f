// CPU kernels: MatMul. int32 and int64 use Eigen's blocked product, split over the compute
// pool by rows of the product. float and double use whichever of OpenBLAS (sgemm / dgemm),
// that same Eigen path and, for float, oneDNN's sgemm is fastest on this machine, decided
// by measurement: the first floating-point MatMul times each on a 512 x 512 x 512 product
// (about 15 ms, once per process and dtype). Which one wins depends on the kernels in use:
// with its AVX-512 kernel OpenBLAS is fast, but under OPENBLAS_CORETYPE=Haswell (set on
// these machines) it runs at half speed; oneDNN's JIT sgemm reached 150-175 GFLOP/s on one
// core here against Eigen's 80-125 on the LSTM's and the dense layers' shapes.
// TROUPE_GEMM=openblas, eigen or onednn overrides the choice (onednn: float only).
//
// OpenBLAS keeps one process-wide thread count. The kernel sets it to the compute pool's
// thread count the first time it sees that pool size (kernels/cpu/blas.h), so OpenBLAS
// and the pool share one thread budget instead of each assuming the machine.
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <vector>

#include "core/tensor_eigen.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/fastest.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/onednn.h"
#include "kernels/shape_checks.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

namespace {

// Splits a product's C [m, n] over the pool: one block per pool thread, not more (each
// block packs all of the other operand again: eight row blocks of the LSTM's [640, 512] x
// [512, 10000] logits read the 20 MB weight eight times), along C's longer dimension (the
// MLP's [64, 784] x [784, 512] split into rows was 8 products of 8 rows), column bounds in
// multiples of `column_align`. Calls fn(by_columns, begin, end) for each nonempty block;
// `total_ns` is the whole product's estimated cost.
template <class F>
void for_each_product_block(compute_pool& pool, std::int64_t m, std::int64_t n, std::int64_t column_align,
                            double total_ns, const F& fn) {
  const int blocks = pool.num_threads();
  const bool by_columns = n > m;
  auto bound = [&](std::int64_t block) {
    if (!by_columns) return m * block / blocks;
    return std::min(n, (n * block / blocks + column_align - 1) / column_align * column_align);
  };
  pool.parallel_for(blocks, total_ns / blocks, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t block = first; block < last; ++block) {
      const std::int64_t begin = bound(block), end = bound(block + 1);
      if (begin < end) fn(by_columns, begin, end);
    }
  });
}

// Eigen products, C split over the pool as parallel_gemm splits it (AlexNet's [16, 9216] x
// [9216, 4096] in row blocks read the 151 MB weight once per two rows).
template <class T>
void eigen_matmul(const tensor& a, const tensor& b, bool transpose_a, bool transpose_b,
                    tensor& product, compute_pool& pool) {
  auto a_matrix = matrix_view<T>(a);
  auto b_matrix = matrix_view<T>(b);
  auto c_matrix = matrix_view<T>(product);
  std::int64_t m = product.dim(0);
  std::int64_t n = product.dim(1);
  std::int64_t k = transpose_a ? a.dim(0) : a.dim(1);
  auto block = [&](bool by_columns, std::int64_t begin, std::int64_t end) {
    auto multiply = [&](const auto& op_a, const auto& op_b) {
      if (by_columns) {
        c_matrix.middleCols(begin, end - begin).noalias() = op_a * op_b.middleCols(begin, end - begin);
      } else {
        c_matrix.middleRows(begin, end - begin).noalias() = op_a.middleRows(begin, end - begin) * op_b;
      }
    };
    auto with_b = [&](const auto& op_a) {
      if (transpose_b) multiply(op_a, b_matrix.transpose());
      else multiply(op_a, b_matrix);
    };
    if (transpose_a) with_b(a_matrix.transpose());
    else with_b(a_matrix);
  };
  // ~1 ns per multiply-add for Eigen's integer kernels, ~0.01 ns for vectorized floats.
  const double ns_per_madd = std::is_floating_point_v<T> ? 0.01 : 1.0;
  for_each_product_block(pool, m, n, 1, static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * ns_per_madd,
                         block);
}

enum class gemm_backend { openblas, eigen, onednn };

// C[m, n] = alpha op(A) op(B) + beta C, row-major, with one of the BLAS-like backends on
// this thread. False when oneDNN reported an error.
template <class T>
bool library_gemm(gemm_backend backend, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                  std::int64_t k, T alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
                  std::int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (backend == gemm_backend::onednn) {
      onednn::single_threaded_openmp();
      return dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
                        ldc) == dnnl_success;
    }
  }
  use_openblas_threads(1);
  blas_gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return true;
}

// Times the backends on one product of T and returns the fastest.
template <class T>
gemm_backend measure_gemm_backend() {
  if (const char* forced = std::getenv("TROUPE_GEMM")) {
    if (std::string_view(forced) == "eigen") return gemm_backend::eigen;
    if (std::string_view(forced) == "openblas") return gemm_backend::openblas;
    if (std::string_view(forced) == "onednn" && std::is_same_v<T, float>) return gemm_backend::onednn;
  }
  constexpr std::int64_t k_size = 512;
  tensor a(dtype_of<T>, {k_size, k_size});
  for (std::int64_t i = 0; i < a.num_elements(); ++i) a.data<T>()[i] = static_cast<T>(i % 7) * T(0.25);
  tensor c(dtype_of<T>, {k_size, k_size});
  compute_pool one_thread(1);
  use_openblas_threads(1);
  // Each backend once untimed, then the best of four interleaved rounds.
  std::vector<gemm_backend> backends = {gemm_backend::openblas, gemm_backend::eigen};
  if constexpr (std::is_same_v<T, float>) backends.push_back(gemm_backend::onednn);
  std::vector<std::function<void()>> runs;
  for (gemm_backend backend : backends) {
    if (backend == gemm_backend::eigen) {
      runs.push_back([&] { eigen_matmul<T>(a, a, false, false, c, one_thread); });
    } else {
      runs.push_back([&, backend] {
        library_gemm<T>(backend, false, false, k_size, k_size, k_size, T(1), a.data<T>(), k_size, a.data<T>(),
                        k_size, T(0), c.data<T>(), k_size);
      });
    }
  }
  return backends[fastest_candidate(runs, /*rounds=*/4)];
}

template <class T>
gemm_backend float_gemm_backend() {
  static const gemm_backend backend = measure_gemm_backend<T>();
  return backend;
}

}  // namespace

bool float_gemm_on_onednn() { return float_gemm_backend<float>() == gemm_backend::onednn; }

void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  // oneDNN when measured fastest; OpenBLAS also when oneDNN reports an error.
  if (float_gemm_on_onednn() &&
      library_gemm(gemm_backend::onednn, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) {
    return;
  }
  library_gemm(gemm_backend::openblas, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
          std::int64_t ldc) {
  library_gemm(gemm_backend::openblas, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void parallel_gemm(compute_pool& pool, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                   std::int64_t k, T alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta,
                   T* c, std::int64_t ldc) {
  for_each_product_block(pool, m, n, 16, gemm_ns(m, n, k), [&](bool by_columns, std::int64_t begin, std::int64_t end) {
    if (by_columns) {
      // Columns [begin, end) of op(B) and C: a column offset, or a row offset when transposed.
      const T* b_columns = transpose_b ? b + begin * ldb : b + begin;
      gemm(transpose_a, transpose_b, m, end - begin, k, alpha, a, lda, b_columns, ldb, beta, c + begin, ldc);
    } else {
      // Rows [begin, end) of op(A) and C: a row offset, or a column offset when transposed.
      const T* a_rows = transpose_a ? a + begin : a + begin * lda;
      gemm(transpose_a, transpose_b, end - begin, n, k, alpha, a_rows, lda, b, ldb, beta, c + begin * ldc, ldc);
    }
  });
}

template void parallel_gemm<float>(compute_pool&, bool, bool, std::int64_t, std::int64_t, std::int64_t, float,
                                   const float*, std::int64_t, const float*, std::int64_t, float, float*,
                                   std::int64_t);
template void parallel_gemm<double>(compute_pool&, bool, bool, std::int64_t, std::int64_t, std::int64_t, double,
                                    const double*, std::int64_t, const double*, std::int64_t, double, double*,
                                    std::int64_t);

namespace {

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
    auto g = matmul_geometry_of(a.shape(), b.shape(), transpose_a_, transpose_b_);
    if (!g.ok()) {
      ctx.fail(g.error());
      return;
    }
    const std::int64_t m = g->m, n = g->n, k = g->k;
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
      const gemm_backend backend = float_gemm_backend<T>();
      if (backend == gemm_backend::eigen) {
        eigen_matmul<T>(a, b, transpose_a_, transpose_b_, product, ctx.pool());
        return;
      }
      // One thread budget: the library runs single-threaded on row blocks over the compute
      // pool, so concurrent kernels never start threads that spin against the pool's.
      parallel_gemm<T>(ctx.pool(), transpose_a_, transpose_b_, m, n, k, T(1), a.data<T>(), a.dim(1), b.data<T>(),
                       b.dim(1), T(0), product.data<T>(), n);
    } else {
      eigen_matmul<T>(a, b, transpose_a_, transpose_b_, product, ctx.pool());
    }
  }

 private:
  bool transpose_a_ = false;
  bool transpose_b_ = false;
};

// BatchMatMulV2 (batch dimensions broadcast) and BatchMatMul (they must be equal): one
// Eigen product per output matrix, the matrices spread over the pool.
template <class T, bool Broadcast>
class batch_matmul_kernel final : public op_kernel {
 public:
  explicit batch_matmul_kernel(kernel_construction& c) : op_kernel(c) {
    c.get_attrs("adj_x", &adj_x_, "adj_y", &adj_y_);
  }

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    const tensor& y = ctx.input(1);
    auto g = batch_matmul_geometry(x.shape(), y.shape(), adj_x_, adj_y_, Broadcast);
    if (!g.ok()) {
      ctx.fail(g.error());
      return;
    }
    tensor& out = ctx.allocate_output(0, g->output);
    if (out.num_elements() == 0) return;
    using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const std::int64_t m = g->m, n = g->n, k = g->k;
    const T* xd = x.data<T>();
    const T* yd = y.data<T>();
    T* od = out.data<T>();
    auto multiply = [&](std::int64_t b) {
      Eigen::Map<matrix> o(od + b * m * n, m, n);
      if (k == 0) {
        o.setZero();
        return;
      }
      Eigen::Map<const matrix> xm(xd + g->x_batch[static_cast<std::size_t>(b)] * m * k, adj_x_ ? k : m, adj_x_ ? m : k);
      Eigen::Map<const matrix> ym(yd + g->y_batch[static_cast<std::size_t>(b)] * k * n, adj_y_ ? n : k, adj_y_ ? k : n);
      if (adj_x_ && adj_y_) o.noalias() = xm.transpose() * ym.transpose();
      else if (adj_x_) o.noalias() = xm.transpose() * ym;
      else if (adj_y_) o.noalias() = xm * ym.transpose();
      else o.noalias() = xm * ym;
    };
    const double ns_per_madd = std::is_floating_point_v<T> ? 0.02 : 1.0;
    ctx.pool().parallel_for(g->batches, static_cast<double>(m * n * k) * ns_per_madd,
                            [&](std::int64_t begin, std::int64_t end) {
                              for (std::int64_t b = begin; b < end; ++b) multiply(b);
                            });
  }

 private:
  bool adj_x_ = false;
  bool adj_y_ = false;
};

template <class T>
using batch_matmul_v2_kernel = batch_matmul_kernel<T, true>;
template <class T>
using batch_matmul_v1_kernel = batch_matmul_kernel<T, false>;

}  // namespace

void register_matmul_kernels(kernel_registry& registry) {
  using types = type_list<float, double, std::int32_t, std::int64_t>;
  add_typed_kernels<matmul_kernel, types>(registry, "MatMul");
  add_typed_kernels<batch_matmul_v2_kernel, types>(registry, "BatchMatMulV2");
  add_typed_kernels<batch_matmul_v1_kernel, types>(registry, "BatchMatMul");
}

}  // namespace troupe::kernels
