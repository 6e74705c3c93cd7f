// The CUDA code behind the GPU reduction, softmax and index kernels
// (gpu_reduction_kernels.cc), as plain C++ launch functions: device pointers, sizes and the
// stream to enqueue on. Nothing here waits for the GPU or checks launch errors (the caller
// reads cudaGetLastError once after its launches), and nothing allocates: a reduction that
// needs scratch memory says how much in its plan, and the caller passes it in.
//
//   reduce_plan plan = plan_reduction<float>(reduce_kind::sum, outer, reduce, inner, sm_count);
//   tensor scratch = ... plan.scratch_bytes of device memory ...;
//   launch_reduction<float>(plan, in, out, scratch_data, /*index64=*/false, stream);
//
// Reductions work on a row-major [outer, reduce, inner] block and produce [outer, inner]:
// callers collapse the reduced dimensions into one run first (transposing with
// launch_permute when they are not adjacent). T is float, double, int32_t or int64_t
// (float and double only for l2_loss). Accumulators are those of the CPU kernels: floats in
// their own type (L2Loss in double), integer Sum, Mean and Prod in uint64, which wraps
// exactly as the narrow type does and gives Mean the truncated quotient of the true sum;
// except float Prod, in double (see prod_acc_t).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace troupe::kernels::gpu {

enum class reduce_kind {
  sum,
  mean,     // the sum divided by `reduce` (NaN for floats and 0 for integers when empty)
  prod,
  max,      // NaN wins; -inf (lowest for integers) when empty
  min,      // NaN wins; +inf (max for integers) when empty
  arg_max,  // the index along `reduce` (first of equal values; the first NaN wins)
  arg_min,
  l2_loss,  // sum(x^2) / 2, accumulated in double
};

// How one reduction runs. Either every output is made by one warp or block (splits == 1),
// or the reduced dimension is cut into `splits` chunks whose partial results (in scratch)
// a second kernel combines: that is what keeps the GPU busy when there are few outputs.
struct reduce_plan {
  reduce_kind kind = reduce_kind::sum;
  std::int64_t outer = 1, reduce = 0, inner = 1;
  int row_threads = 1;        // inner == 1: threads per row (1 to 32), or 256 per row chunk
  int tile_width = 1;         // inner > 1: a block is tile_width columns by 256 / tile_width rows
  std::int64_t splits = 1;    // chunks of the reduced dimension per output
  std::int64_t chunk = 0;     // reduced elements per chunk
  std::size_t scratch_bytes = 0;
};

// REQUIRES: outer >= 1, inner >= 1, reduce >= 0 (0: every output is the empty result).
template <class T>
reduce_plan plan_reduction(reduce_kind kind, std::int64_t outer, std::int64_t reduce, std::int64_t inner,
                           int sm_count);
// Writes outer * inner results to `out`: T, or int32/int64 indices (index64) for arg_max
// and arg_min. `scratch` holds plan.scratch_bytes (may be null when that is 0).
template <class T>
void launch_reduction(const reduce_plan& plan, const T* in, void* out, void* scratch, bool index64,
                      cudaStream_t stream);

// out = in transposed: output dimension k is input dimension perm[k]. Elements of 1, 2, 4
// or 8 bytes; REQUIRES: 1 <= rank <= k_max_permute_rank.
inline constexpr int k_max_permute_rank = 16;
void launch_permute(const void* in, void* out, std::size_t element_size, int rank, const std::int64_t* dims,
                    const int* perm, cudaStream_t stream);

// Softmax (log == false) or LogSoftmax of each row of `classes` values; stable: each row is
// shifted by its maximum first. T is float or double.
template <class T>
void launch_softmax(const T* logits, T* out, std::int64_t rows, std::int64_t classes, bool log,
                    cudaStream_t stream);

// A [rows, classes] matrix read with strides (0 broadcasts a dimension of size 1).
template <class T>
struct strided_matrix {
  const T* data;
  std::int64_t row_stride;
  std::int64_t column_stride;
};

// SoftmaxCrossEntropyWithLogits: loss[r] = sum(labels * (log(sum(exp(x - max))) - (x - max))),
// backprop = softmax(x) - labels, for [rows, classes] features and labels.
template <class T>
void launch_softmax_xent(strided_matrix<T> features, strided_matrix<T> labels, T* loss, T* backprop,
                         std::int64_t rows, std::int64_t classes, cudaStream_t stream);

// SparseSoftmaxCrossEntropyWithLogits with int32 (or int64: labels64) labels. A label
// outside [0, classes) makes its loss and backprop row NaN (TensorFlow's GPU behaviour: the
// kernel cannot fail the step without waiting for the GPU).
template <class T>
void launch_sparse_softmax_xent(const T* features, const void* labels, bool labels64, T* loss, T* backprop,
                                std::int64_t rows, std::int64_t classes, cudaStream_t stream);

// The integer types index operands come in.
enum class index_kind { uint8, int8, int32, int64 };

// GatherV2: out[o, j, :] = params[o, indices[j], :] with params seen as [outer, rows, a
// row of `row_bytes` bytes], moved in the widest units (up to 16 bytes) that the rows'
// size and params' address allow; an index outside [0, rows) gives a row of zeros
// (TensorFlow's GPU behaviour).
void launch_gather(const void* params, const void* indices, index_kind indices_kind, void* out,
                   std::size_t row_bytes, std::int64_t outer, std::int64_t rows, std::int64_t count,
                   cudaStream_t stream);

// UnsortedSegmentSum: out[ids[j], i] += data[j, i] with atomic adds into `out` (which the
// caller zeroes); ids outside [0, num_segments) are skipped. T is float, double, int32_t
// or int64_t.
template <class T>
void launch_unsorted_segment_sum(const T* data, const void* ids, index_kind ids_kind, T* out,
                                 std::int64_t num_ids, std::int64_t inner, std::int64_t num_segments,
                                 cudaStream_t stream);

// OneHot: out[p, d, s] = indices[p, s] == d ? on : off, elements of 1, 2, 4 or 8 bytes
// (on_bits and off_bits hold the values' bytes in their low bytes).
void launch_one_hot(const void* indices, index_kind indices_kind, void* out, std::size_t element_size,
                    std::int64_t prefix, std::int64_t depth, std::int64_t suffix, std::uint64_t on_bits,
                    std::uint64_t off_bits, cudaStream_t stream);

}  // namespace troupe::kernels::gpu
