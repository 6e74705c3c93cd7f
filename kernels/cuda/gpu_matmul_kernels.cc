// MatMul, BatchMatMulV2 and BatchMatMul on the GPU through cuBLAS (float32, float64). cuBLAS is column-major: the
// row-major product C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T,
// which reads the same bytes with the operands swapped, so nothing is transposed in memory.
// float32 products use TensorFloat-32 only when allow_tf32() (gpu_device.h).
#include <cstdint>
#include <limits>

#include "kernels/batch_matmul.h"
#include "kernels/cuda/gpu_kernel.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

namespace {

template <class T>
class gpu_matmul_kernel final : public gpu::gpu_kernel {
 public:
  explicit gpu_matmul_kernel(kernel_construction& c) : gpu_kernel(c) {
    c.get_attrs("transpose_a", &transpose_a_, "transpose_b", &transpose_b_);
  }

  void compute(kernel_context& ctx) override {
    const tensor& a = ctx.input(0);
    const tensor& b = ctx.input(1);
    if (a.rank() != 2 || b.rank() != 2) {
      ctx.fail(invalid_argument_error("MatMul needs matrices, but a is ", a.shape(), " and b is ", b.shape()));
      return;
    }
    const std::int64_t m = a.dim(transpose_a_ ? 1 : 0), k = a.dim(transpose_a_ ? 0 : 1);
    const std::int64_t k_b = b.dim(transpose_b_ ? 1 : 0), n = b.dim(transpose_b_ ? 0 : 1);
    if (k != k_b) {
      ctx.fail(invalid_argument_error("matrix size-incompatible: a ", a.shape(), transpose_a_ ? " (transposed)" : "",
                                      " has inner dimension ", k, " but b ", b.shape(),
                                      transpose_b_ ? " (transposed)" : "", " has inner dimension ", k_b));
      return;
    }
    constexpr std::int64_t k_max = std::numeric_limits<int>::max();
    if (m > k_max || n > k_max || k > k_max) {
      ctx.fail(unimplemented_error("MatMul of a ", a.shape(), " and b ", b.shape(),
                                   ": a dimension exceeds cuBLAS's 32-bit index range"));
      return;
    }
    if (!begin(ctx)) return;
    tensor& product = allocate_output(ctx, 0, tensor_shape{m, n});
    if (m == 0 || n == 0) return;
    if (k == 0) {
      check(ctx, cudaMemsetAsync(product.raw_data(), 0, product.byte_size(), stream()), "MatMul: zeroing");
      return;
    }
    constexpr bool is_float = std::is_same_v<T, float>;
    const cudaDataType_t type = is_float ? CUDA_R_32F : CUDA_R_64F;
    const cublasComputeType_t compute_type =
        is_float ? (gpu::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F) : CUBLAS_COMPUTE_64F;
    const T one = 1, zero = 0;
    check(ctx,
          cublasGemmEx(gpu().cublas(), transpose_b_ ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a_ ? CUBLAS_OP_T : CUBLAS_OP_N,
                       static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, b.raw_data(), type,
                       static_cast<int>(b.dim(1)), a.raw_data(), type, static_cast<int>(a.dim(1)), &zero,
                       product.raw_data(), type, static_cast<int>(n), compute_type, CUBLAS_GEMM_DEFAULT),
          "MatMul: cublasGemmEx");
  }

 private:
  bool transpose_a_ = false;
  bool transpose_b_ = false;
};

// BatchMatMulV2 / BatchMatMul: one strided-batched cuBLAS call when each side's matrices
// are evenly spaced along the output's batch (equal batch shapes, or a side broadcast
// whole, stride 0), else one product per output matrix.
template <class T, bool Broadcast>
class gpu_batch_matmul_kernel final : public gpu::gpu_kernel {
 public:
  explicit gpu_batch_matmul_kernel(kernel_construction& c) : gpu_kernel(c) {
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
    constexpr std::int64_t k_max = std::numeric_limits<int>::max();
    if (g->m > k_max || g->n > k_max || g->k > k_max || g->batches > k_max) {
      ctx.fail(unimplemented_error("BatchMatMul of x ", x.shape(), " and y ", y.shape(),
                                   ": a dimension exceeds cuBLAS's 32-bit index range"));
      return;
    }
    if (!begin(ctx)) return;
    tensor& out = allocate_output(ctx, 0, g->output);
    if (out.num_elements() == 0) return;
    if (g->k == 0) {
      check(ctx, cudaMemsetAsync(out.raw_data(), 0, out.byte_size(), stream()), "BatchMatMul: zeroing");
      return;
    }
    const int m = static_cast<int>(g->m), n = static_cast<int>(g->n), k = static_cast<int>(g->k);
    constexpr bool is_float = std::is_same_v<T, float>;
    const cudaDataType_t type = is_float ? CUDA_R_32F : CUDA_R_64F;
    const cublasComputeType_t compute_type =
        is_float ? (gpu::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F) : CUBLAS_COMPUTE_64F;
    const cublasOperation_t op_x = adj_x_ ? CUBLAS_OP_T : CUBLAS_OP_N, op_y = adj_y_ ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int ldx = adj_x_ ? m : k, ldy = adj_y_ ? k : n;  // row lengths of the stored matrices
    const long long x_size = static_cast<long long>(m) * k, y_size = static_cast<long long>(k) * n,
                    out_size = static_cast<long long>(m) * n;
    const T one = 1, zero = 0;
    const T* xd = x.data<T>();
    const T* yd = y.data<T>();
    T* od = out.data<T>();
    // As MatMul: the column-major product out^T = op(y)^T op(x)^T, operands swapped.
    auto stride_of = [&](const std::vector<std::int64_t>& index, long long* stride) {
      *stride = index.size() > 1 ? static_cast<long long>(index[1] - index[0]) : 0;
      for (std::size_t b = 0; b < index.size(); ++b) {
        if (index[b] != index[0] + static_cast<std::int64_t>(b) * *stride) return false;
      }
      return true;
    };
    long long x_step = 0, y_step = 0;
    if (stride_of(g->x_batch, &x_step) && stride_of(g->y_batch, &y_step)) {
      check(ctx,
            cublasGemmStridedBatchedEx(gpu().cublas(), op_y, op_x, n, m, k, &one, yd + g->y_batch[0] * y_size, type,
                                       ldy, y_step * y_size, xd + g->x_batch[0] * x_size, type, ldx, x_step * x_size,
                                       &zero, od, type, n, out_size, static_cast<int>(g->batches), compute_type,
                                       CUBLAS_GEMM_DEFAULT),
            "BatchMatMul: cublasGemmStridedBatchedEx");
      return;
    }
    for (std::int64_t b = 0; b < g->batches; ++b) {
      const auto u = static_cast<std::size_t>(b);
      if (!check(ctx,
                 cublasGemmEx(gpu().cublas(), op_y, op_x, n, m, k, &one, yd + g->y_batch[u] * y_size, type, ldy,
                              xd + g->x_batch[u] * x_size, type, ldx, &zero, od + b * out_size, type, n, compute_type,
                              CUBLAS_GEMM_DEFAULT),
                 "BatchMatMul: cublasGemmEx")) {
        return;
      }
    }
  }

 private:
  bool adj_x_ = false;
  bool adj_y_ = false;
};

template <class T>
using gpu_batch_matmul_v2_kernel = gpu_batch_matmul_kernel<T, true>;
template <class T>
using gpu_batch_matmul_v1_kernel = gpu_batch_matmul_kernel<T, false>;

}  // namespace

void register_gpu_matmul_kernels(kernel_registry& registry) {
  using types = type_list<float, double>;
  add_typed_kernels<gpu_matmul_kernel, types>(registry, "MatMul", "T", "GPU");
  add_typed_kernels<gpu_batch_matmul_v2_kernel, types>(registry, "BatchMatMulV2", "T", "GPU");
  add_typed_kernels<gpu_batch_matmul_v1_kernel, types>(registry, "BatchMatMul", "T", "GPU");
}

}  // namespace troupe::kernels
