// MatMul on the GPU through cuBLAS (float32, float64). cuBLAS is column-major: the
// row-major product C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T,
// which reads the same bytes with the operands swapped, so nothing is transposed in memory.
// float32 products use TensorFloat-32 only when allow_tf32() (gpu_device.h).
#include <cstdint>
#include <limits>

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

}  // namespace

void register_gpu_matmul_kernels(kernel_registry& registry) {
  add_typed_kernels<gpu_matmul_kernel, type_list<float, double>>(registry, "MatMul", "T", "GPU");
}

}  // namespace troupe::kernels
