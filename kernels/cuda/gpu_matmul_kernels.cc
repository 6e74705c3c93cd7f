// MatMul, BatchMatMulV2 and BatchMatMul on the GPU through cuBLAS (float32, float64), all
// through gemm() (gpu_gemm.h). float32 products use TensorFloat-32 only when allow_tf32()
// (gpu_device.h).
#include <cstdint>
#include <limits>

#include "kernels/shape_checks.h"
#include "kernels/cuda/gpu_gemm.h"
#include "kernels/cuda/gpu_kernel.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels::gpu {

// As the column-major product out^T = op(y)^T op(x)^T: operands swapped, nothing
// transposed in memory.
template <class T>
cublasStatus_t gemm(gpu_device& gpu, bool adj_x, bool adj_y, std::int64_t m, std::int64_t n, std::int64_t k,
                    const T* x, long long x_step, const T* y, long long y_step, T* out, std::int64_t batches) {
  constexpr bool is_float = std::is_same_v<T, float>;
  const cudaDataType_t type = is_float ? CUDA_R_32F : CUDA_R_64F;
  const cublasComputeType_t compute =
      is_float ? (allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F) : CUBLAS_COMPUTE_64F;
  const cublasOperation_t op_x = adj_x ? CUBLAS_OP_T : CUBLAS_OP_N, op_y = adj_y ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const int ldx = adj_x ? mi : ki, ldy = adj_y ? ki : ni;  // row lengths of the stored matrices
  const T one = 1, zero = 0;
  if (batches == 1) {
    return cublasGemmEx(gpu.cublas(), op_y, op_x, ni, mi, ki, &one, y, type, ldy, x, type, ldx, &zero, out, type, ni,
                        compute, CUBLAS_GEMM_DEFAULT);
  }
  return cublasGemmStridedBatchedEx(gpu.cublas(), op_y, op_x, ni, mi, ki, &one, y, type, ldy, y_step * k * n, x, type,
                                    ldx, x_step * m * k, &zero, out, type, ni, static_cast<long long>(m) * n,
                                    static_cast<int>(batches), compute, CUBLAS_GEMM_DEFAULT);
}

template cublasStatus_t gemm<float>(gpu_device&, bool, bool, std::int64_t, std::int64_t, std::int64_t, const float*,
                                    long long, const float*, long long, float*, std::int64_t);
template cublasStatus_t gemm<double>(gpu_device&, bool, bool, std::int64_t, std::int64_t, std::int64_t, const double*,
                                     long long, const double*, long long, double*, std::int64_t);

}  // namespace troupe::kernels::gpu

namespace troupe::kernels {

using gpu::gemm;

namespace {

constexpr std::int64_t k_cublas_max = std::numeric_limits<int>::max();

template <class T>
class gpu_matmul_kernel final : public gpu::gpu_kernel {
 public:
  explicit gpu_matmul_kernel(kernel_construction& c) : gpu_kernel(c) {
    c.get_attrs("transpose_a", &transpose_a_, "transpose_b", &transpose_b_);
  }

  void compute(kernel_context& ctx) override {
    const tensor& a = ctx.input(0);
    const tensor& b = ctx.input(1);
    auto g = matmul_geometry_of(a.shape(), b.shape(), transpose_a_, transpose_b_);
    if (!g.ok()) {
      ctx.fail(g.error());
      return;
    }
    if (g->m > k_cublas_max || g->n > k_cublas_max || g->k > k_cublas_max) {
      ctx.fail(unimplemented_error("MatMul of a ", a.shape(), " and b ", b.shape(),
                                   ": a dimension exceeds cuBLAS's 32-bit index range"));
      return;
    }
    if (!begin(ctx)) return;
    tensor& product = allocate_output(ctx, 0, tensor_shape{g->m, g->n});
    if (g->m == 0 || g->n == 0) return;
    if (g->k == 0) {
      check(ctx, cudaMemsetAsync(product.raw_data(), 0, product.byte_size(), stream()), "MatMul: zeroing");
      return;
    }
    check(ctx,
          gemm<T>(gpu(), transpose_a_, transpose_b_, g->m, g->n, g->k, a.data<T>(), 0, b.data<T>(), 0,
                  product.data<T>(), 1),
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
    if (g->m > k_cublas_max || g->n > k_cublas_max || g->k > k_cublas_max || g->batches > k_cublas_max) {
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
    const std::int64_t m = g->m, n = g->n, k = g->k;
    const T* xd = x.data<T>();
    const T* yd = y.data<T>();
    T* od = out.data<T>();
    // The matrices apart from one product to the next, when that is constant.
    auto step_of = [](const std::vector<std::int64_t>& index, long long* step) {
      *step = index.size() > 1 ? static_cast<long long>(index[1] - index[0]) : 0;
      for (std::size_t b = 0; b < index.size(); ++b) {
        if (index[b] != index[0] + static_cast<std::int64_t>(b) * *step) return false;
      }
      return true;
    };
    long long x_step = 0, y_step = 0;
    if (step_of(g->x_batch, &x_step) && step_of(g->y_batch, &y_step)) {
      check(ctx,
            gemm<T>(gpu(), adj_x_, adj_y_, m, n, k, xd + g->x_batch[0] * m * k, x_step, yd + g->y_batch[0] * k * n,
                    y_step, od, g->batches),
            "BatchMatMul: cublasGemmStridedBatchedEx");
      return;
    }
    for (std::int64_t b = 0; b < g->batches; ++b) {
      const auto u = static_cast<std::size_t>(b);
      if (!check(ctx,
                 gemm<T>(gpu(), adj_x_, adj_y_, m, n, k, xd + g->x_batch[u] * m * k, 0, yd + g->y_batch[u] * k * n, 0,
                         od + b * m * n, 1),
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
