// Reductions, softmax and index kernels on the GPU (contracts in gpu_reduction_launch.h).
//
// A reduction is one of two kernels, by layout, plus an optional second pass:
//   - rows (inner == 1): a group of threads per row: as many lanes as a row of up to 32
//     values has, a warp for rows of up to 512 (4096 when there are enough rows to fill the
//     GPU), else the whole block for each chunk of the row (the softmax family picks its
//     groups the same way);
//   - columns (inner > 1): a block is a tile of tile_width adjacent columns (a power of
//     two covering inner, at most 32) by 256 / tile_width rows, so that a warp reads whole
//     runs of memory even when inner is 2; the tile's rows are combined in shared memory.
// With few outputs the reduced dimension is cut into chunks ("splits") whose partial
// accumulators go to scratch memory; finish_partials then combines each output's chunks in
// order. Every combination order is fixed by the sizes alone, so results are reproducible.
//
// A reducer is a struct of static device functions: identity, from (an element and its
// index along the reduced dimension), combine (associative and commutative, so that any
// tree order gives the sequential result for integers, arg-reductions and max/min), and
// store (the accumulator converted to the output type).
#include <cuda_runtime.h>
#include <cstdint>

#include <limits>
#include <type_traits>

#include "kernels/cuda/gpu_reduction_launch.h"

namespace troupe::kernels::gpu {

namespace {

using std::int64_t;

constexpr int k_block = 256;
constexpr int k_warps = k_block / 32;
constexpr unsigned k_full_mask = 0xffffffffu;

__host__ __device__ inline int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over n items: enough to fill any GPU, never above the
// grid limit.
unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(n <= 0 ? 1 : smaller(ceil_div(n, k_block), int64_t{1} << 20));
}

template <class T>
__device__ T lowest_of() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}
template <class T>
__device__ T highest_of() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::max();
}
template <class T>
__device__ bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<T>) return x != x;
  else return false;
}

__device__ inline float exp_of(float x) { return expf(x); }
__device__ inline double exp_of(double x) { return exp(x); }
__device__ inline float log_of(float x) { return logf(x); }
__device__ inline double log_of(double x) { return log(x); }

// ---- Reducers ----

// What a reducer's store needs beyond the accumulator.
struct finish_params {
  int64_t count = 0;     // elements reduced into each output (Mean's divisor)
  bool mean = false;     // divide sums by count
  bool index64 = false;  // arg-reductions write int64 (else int32)
};

template <class T>
using sum_acc_t = std::conditional_t<std::is_floating_point_v<T>, T, unsigned long long>;
// Float products accumulate in double (the CPU's in float): a tree of float products near
// 1 rounds down systematically (the tiny cross term breaks ties downward), about 1e-3 over
// 1e6 factors, where the CPU's long sequential lanes stay within 1e-5 of the exact product.
template <class T>
using prod_acc_t = std::conditional_t<std::is_floating_point_v<T>, double, unsigned long long>;

template <class T>
struct sum_reducer {
  using value = T;
  using acc = sum_acc_t<T>;
  __device__ static acc identity() { return acc(0); }
  __device__ static acc from(T x, int64_t) { return static_cast<acc>(x); }
  __device__ static acc combine(acc a, acc b) { return a + b; }
  __device__ static void store(void* out, int64_t i, acc a, const finish_params& p) {
    T* o = static_cast<T*>(out);
    if (!p.mean) o[i] = static_cast<T>(a);
    else if constexpr (std::is_floating_point_v<T>) o[i] = a / static_cast<T>(p.count);
    else o[i] = p.count == 0 ? T(0) : static_cast<T>(static_cast<long long>(a) / p.count);
  }
};

template <class T>
struct prod_reducer {
  using value = T;
  using acc = prod_acc_t<T>;
  __device__ static acc identity() { return acc(1); }
  __device__ static acc from(T x, int64_t) { return static_cast<acc>(x); }
  __device__ static acc combine(acc a, acc b) { return a * b; }
  __device__ static void store(void* out, int64_t i, acc a, const finish_params&) {
    static_cast<T*>(out)[i] = static_cast<T>(a);
  }
};

// Max (Max = true) or Min; a NaN anywhere makes the result NaN, as on the CPU.
template <class T, bool Max>
struct extremum_reducer {
  using value = T;
  using acc = T;
  __device__ static acc identity() { return Max ? lowest_of<T>() : highest_of<T>(); }
  __device__ static acc from(T x, int64_t) { return x; }
  __device__ static acc combine(acc a, acc b) { return ((Max ? b > a : b < a) || is_nan(b)) ? b : a; }
  __device__ static void store(void* out, int64_t i, acc a, const finish_params&) { static_cast<T*>(out)[i] = a; }
};

template <class T>
struct arg_acc {
  T value;
  long long index;
};

// ArgMax (Max = true) or ArgMin: the best value with the lowest index; NaN beats numbers
// (the first NaN wins, as on the CPU). The identity's index is larger than any real one,
// so it loses every tie.
template <class T, bool Max>
struct arg_reducer {
  using value = T;
  using acc = arg_acc<T>;
  __device__ static acc identity() {
    return {Max ? lowest_of<T>() : highest_of<T>(), std::numeric_limits<long long>::max()};
  }
  __device__ static acc from(T x, int64_t i) { return {x, i}; }
  __device__ static acc combine(acc a, acc b) {
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return b.index < a.index ? b : a;
      return a_nan ? a : b;
    }
    if (Max ? b.value > a.value : b.value < a.value) return b;
    return (b.value == a.value && b.index < a.index) ? b : a;
  }
  __device__ static void store(void* out, int64_t i, acc a, const finish_params& p) {
    if (p.index64) static_cast<long long*>(out)[i] = a.index;
    else static_cast<int*>(out)[i] = static_cast<int>(a.index);
  }
};

// L2Loss: squares summed in double whatever T, as on the CPU.
template <class T>
struct l2_reducer {
  using value = T;
  using acc = double;
  __device__ static acc identity() { return 0; }
  __device__ static acc from(T x, int64_t) { return static_cast<double>(x) * static_cast<double>(x); }
  __device__ static acc combine(acc a, acc b) { return a + b; }
  __device__ static void store(void* out, int64_t i, acc a, const finish_params&) {
    static_cast<T*>(out)[i] = static_cast<T>(a / 2);
  }
};

// Where a reduction kernel writes: the final outputs, or (partial != null) accumulators
// for finish_partials.
template <class R>
struct reduce_target {
  void* out;
  typename R::acc* partial;
  finish_params finish;
  __device__ void store(int64_t i, typename R::acc a) const {
    if (partial != nullptr) partial[i] = a;
    else R::store(out, i, a, finish);
  }
};

// ---- Combining across threads ----

template <class A>
__device__ A shuffle_xor(A v, int mask) {
  if constexpr (std::is_arithmetic_v<A>) {
    return __shfl_xor_sync(k_full_mask, v, mask);
  } else {
    A r;
    r.value = __shfl_xor_sync(k_full_mask, v.value, mask);
    r.index = __shfl_xor_sync(k_full_mask, v.index, mask);
    return r;
  }
}

// Rows of a block are handled by groups of row_threads consecutive threads: a power of two
// up to 32 (part of a warp) or k_block (the whole block).
__host__ __device__ inline int rows_per_block(int row_threads) { return k_block / row_threads; }

// The threads per row for rows of n values: the power of two covering n, at most a warp,
// while n <= most (the longest row a warp should take on); the whole block beyond.
int row_threads_for(int64_t n, int64_t most) {
  if (n > most) return k_block;
  int t = 1;
  while (t < 32 && t < n) t *= 2;
  return t;
}

// Combines v over one row's group of row_threads threads. Every thread of the group gets the
// same result (the butterfly gives each lane the same tree, with commuted operands). All
// threads of the block must call it together; `shared` holds k_warps values.
template <class R, class A = typename R::acc>
__device__ A group_combine(A v, int row_threads, A* shared) {
  for (int mask = (row_threads < 32 ? row_threads : 32) / 2; mask > 0; mask /= 2) {
    v = R::combine(v, shuffle_xor(v, mask));
  }
  if (row_threads <= 32) return v;
  __syncthreads();  // the previous call's readers are done with `shared`
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  v = shared[0];
  for (int w = 1; w < k_warps; ++w) v = R::combine(v, shared[w]);
  return v;
}

// ---- Reduction kernels ----

// Combines x[r * stride] for r = first, first + step, ... < end into a, issuing four loads
// before combining them (memory latency, not arithmetic, bounds a reduction).
template <class R>
__device__ typename R::acc accumulate(typename R::acc a, const typename R::value* x, int64_t stride, int64_t first,
                                      int64_t end, int64_t step) {
  int64_t r = first;
  for (; r + 3 * step < end; r += 4 * step) {
    const typename R::value v0 = x[r * stride], v1 = x[(r + step) * stride], v2 = x[(r + 2 * step) * stride],
                            v3 = x[(r + 3 * step) * stride];
    a = R::combine(a, R::from(v0, r));
    a = R::combine(a, R::from(v1, r + step));
    a = R::combine(a, R::from(v2, r + 2 * step));
    a = R::combine(a, R::from(v3, r + 3 * step));
  }
  for (; r < end; r += step) a = R::combine(a, R::from(x[r * stride], r));
  return a;
}

// inner == 1: unit u = (row, split) reduces [split * chunk, +chunk) of row `row`.
template <class R>
__global__ void __launch_bounds__(k_block)
    reduce_rows(const typename R::value* in, int64_t rows, int64_t reduce, int64_t splits, int64_t chunk,
                int row_threads, reduce_target<R> target) {
  using A = typename R::acc;
  __shared__ A shared[k_warps];
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * rows_per_block(row_threads) + threadIdx.x / row_threads;
  const bool active = unit < rows * splits;
  A a = R::identity();
  if (active) {
    const int64_t row = unit / splits, begin = unit % splits * chunk, end = smaller(reduce, begin + chunk);
    a = accumulate<R>(a, in + row * reduce, 1, begin + threadIdx.x % row_threads, end, row_threads);
  }
  a = group_combine<R>(a, row_threads, shared);
  if (active && threadIdx.x % row_threads == 0) target.store(unit, a);
}

// inner > 1: block b = ((o, tile), split); thread (x, y) walks rows y, y + ty, ... of its
// chunk in column tile * tx + x. Partials are laid out [split, outer * inner].
template <class R>
__global__ void __launch_bounds__(k_block)
    reduce_columns(const typename R::value* in, int64_t outer, int64_t reduce, int64_t inner, int64_t tiles,
                   int64_t splits, int64_t chunk, reduce_target<R> target) {
  using A = typename R::acc;
  __shared__ A shared[k_block];
  const int tx = static_cast<int>(blockDim.x), ty = static_cast<int>(blockDim.y);
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y);
  int64_t b = blockIdx.x;
  const int64_t split = b % splits;
  b /= splits;
  const int64_t column = b % tiles * tx + x, o = b / tiles;
  A a = R::identity();
  if (column < inner) {
    const int64_t begin = split * chunk, end = smaller(reduce, begin + chunk);
    a = accumulate<R>(a, in + o * reduce * inner + column, inner, begin + y, end, ty);
  }
  shared[y * tx + x] = a;
  __syncthreads();
  for (int s = ty / 2; s > 0; s /= 2) {
    if (y < s) shared[y * tx + x] = R::combine(shared[y * tx + x], shared[(y + s) * tx + x]);
    __syncthreads();
  }
  if (y == 0 && column < inner) target.store(split * outer * inner + o * inner + column, shared[x]);
}

// Output i combines partial[i * output_stride + s * split_stride] for s < splits, in
// order; splits == 0 writes the empty reduction's result.
template <class R>
__global__ void finish_partials(const typename R::acc* partial, int64_t outputs, int64_t splits,
                                int64_t output_stride, int64_t split_stride, reduce_target<R> target) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < outputs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    typename R::acc a = R::identity();
    for (int64_t s = 0; s < splits; ++s) a = R::combine(a, partial[i * output_stride + s * split_stride]);
    target.store(i, a);
  }
}

template <class R>
void run_reduction(const reduce_plan& p, const typename R::value* in, void* out, void* scratch, bool index64,
                   cudaStream_t stream) {
  using A = typename R::acc;
  const finish_params finish{p.reduce, p.kind == reduce_kind::mean, index64};
  const reduce_target<R> final_target{out, nullptr, finish};
  const int64_t outputs = p.outer * p.inner;
  if (p.reduce == 0) {
    finish_partials<R><<<blocks_for(outputs), k_block, 0, stream>>>(nullptr, outputs, 0, 0, 0, final_target);
    return;
  }
  A* partial = static_cast<A*>(scratch);
  const reduce_target<R> first_target = p.splits > 1 ? reduce_target<R>{out, partial, finish} : final_target;
  if (p.inner == 1) {
    const int64_t blocks = ceil_div(p.outer * p.splits, rows_per_block(p.row_threads));
    reduce_rows<R><<<static_cast<unsigned>(blocks), k_block, 0, stream>>>(in, p.outer, p.reduce, p.splits, p.chunk,
                                                                           p.row_threads, first_target);
    if (p.splits > 1) {
      finish_partials<R><<<blocks_for(outputs), k_block, 0, stream>>>(partial, outputs, p.splits, p.splits, 1,
                                                                      final_target);
    }
  } else {
    const int64_t tiles = ceil_div(p.inner, p.tile_width);
    const dim3 threads(static_cast<unsigned>(p.tile_width), static_cast<unsigned>(k_block / p.tile_width));
    reduce_columns<R><<<static_cast<unsigned>(p.outer * tiles * p.splits), threads, 0, stream>>>(
        in, p.outer, p.reduce, p.inner, tiles, p.splits, p.chunk, first_target);
    if (p.splits > 1) {
      finish_partials<R><<<blocks_for(outputs), k_block, 0, stream>>>(partial, outputs, p.splits, 1, outputs,
                                                                      final_target);
    }
  }
}

// Calls f(R{}) with the reducer of `kind` for elements of type T.
template <class T, class F>
void visit_reducer(reduce_kind kind, F&& f) {
  switch (kind) {
    case reduce_kind::sum:
    case reduce_kind::mean: f(sum_reducer<T>{}); break;
    case reduce_kind::prod: f(prod_reducer<T>{}); break;
    case reduce_kind::max: f(extremum_reducer<T, true>{}); break;
    case reduce_kind::min: f(extremum_reducer<T, false>{}); break;
    case reduce_kind::arg_max: f(arg_reducer<T, true>{}); break;
    case reduce_kind::arg_min: f(arg_reducer<T, false>{}); break;
    case reduce_kind::l2_loss:
      if constexpr (std::is_floating_point_v<T>) f(l2_reducer<T>{});
      break;
  }
}

// ---- Permute ----

struct permute_geometry {
  int rank;
  int64_t out_dims[k_max_permute_rank];
  int64_t in_strides[k_max_permute_rank];  // the input stride of output dimension k
};

template <class E>
__global__ void permute(const E* in, E* out, int64_t total, permute_geometry g) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, offset = 0;
    for (int k = g.rank - 1; k >= 0; --k) {
      offset += rest % g.out_dims[k] * g.in_strides[k];
      rest /= g.out_dims[k];
    }
    out[i] = in[offset];
  }
}

// ---- Softmax family: a group of threads per row (row_threads_for), three passes ----

int softmax_row_threads(int64_t rows, int64_t classes) { return row_threads_for(classes, rows >= 8192 ? 1024 : 256); }

unsigned softmax_blocks(int64_t rows, int row_threads) {
  return static_cast<unsigned>(ceil_div(rows, rows_per_block(row_threads)));
}

// The row this thread works on, its first column and its column step.
struct row_slot {
  int64_t row;
  int64_t first;
  int step;
  bool leader;  // writes the row's scalar results
};

__device__ row_slot row_slot_of(int row_threads) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block(row_threads) + threadIdx.x / row_threads;
  const int64_t first = threadIdx.x % row_threads;
  return {row, first, row_threads, first == 0};
}

// The row's maximum and sum(exp(x - max)) for x = value(j), j < classes.
template <class T, class Value>
__device__ void row_max_and_sum(Value value, int64_t classes, const row_slot& s, int row_threads, T* shared,
                                T* max, T* sum) {
  T m = lowest_of<T>();
  for (int64_t j = s.first; j < classes; j += s.step) m = extremum_reducer<T, true>::combine(m, value(j));
  m = group_combine<extremum_reducer<T, true>>(m, row_threads, shared);
  T e = 0;
  for (int64_t j = s.first; j < classes; j += s.step) e += exp_of(value(j) - m);
  *max = m;
  *sum = group_combine<sum_reducer<T>>(e, row_threads, shared);
}

template <class T>
__global__ void __launch_bounds__(k_block)
    softmax_rows(const T* in, T* out, int64_t rows, int64_t classes, int row_threads, bool log) {
  __shared__ T shared[k_warps];
  const row_slot s = row_slot_of(row_threads);
  const bool active = s.row < rows;
  const T* x = in + (active ? s.row : 0) * classes;
  T* y = out + (active ? s.row : 0) * classes;
  T max, sum;
  row_max_and_sum<T>([=](int64_t j) { return active ? x[j] : T(0); }, classes, s, row_threads, shared, &max, &sum);
  if (!active) return;
  if (log) {
    const T log_sum = log_of(sum);
    for (int64_t j = s.first; j < classes; j += s.step) y[j] = (x[j] - max) - log_sum;
  } else {
    const T inverse = T(1) / sum;
    for (int64_t j = s.first; j < classes; j += s.step) y[j] = exp_of(x[j] - max) * inverse;
  }
}

template <class T>
__global__ void __launch_bounds__(k_block)
    softmax_xent_rows(strided_matrix<T> features, strided_matrix<T> labels, T* loss, T* backprop, int64_t rows,
                      int64_t classes, int row_threads) {
  __shared__ T shared[k_warps];
  const row_slot s = row_slot_of(row_threads);
  const bool active = s.row < rows;
  const int64_t r = active ? s.row : 0;
  auto x = [&](int64_t j) { return features.data[r * features.row_stride + j * features.column_stride]; };
  T max, sum;
  row_max_and_sum<T>([=](int64_t j) { return active ? x(j) : T(0); }, classes, s, row_threads, shared, &max,
                     &sum);
  const T log_sum = log_of(sum), inverse = T(1) / sum;
  T l = 0;
  if (active) {
    T* g = backprop + r * classes;
    for (int64_t j = s.first; j < classes; j += s.step) {
      const T shifted = x(j) - max, p = labels.data[r * labels.row_stride + j * labels.column_stride];
      l += p * (log_sum - shifted);
      g[j] = exp_of(shifted) * inverse - p;
    }
  }
  l = group_combine<sum_reducer<T>>(l, row_threads, shared);
  if (active && s.leader) loss[r] = l;
}

template <class T>
__global__ void __launch_bounds__(k_block)
    sparse_softmax_xent_rows(const T* features, const void* labels, bool labels64, T* loss, T* backprop,
                             int64_t rows, int64_t classes, int row_threads) {
  __shared__ T shared[k_warps];
  const row_slot s = row_slot_of(row_threads);
  const bool active = s.row < rows;
  const int64_t r = active ? s.row : 0;
  const T* x = features + r * classes;
  T max, sum;
  row_max_and_sum<T>([=](int64_t j) { return active ? x[j] : T(0); }, classes, s, row_threads, shared, &max,
                     &sum);
  if (!active) return;
  const int64_t label = labels64 ? static_cast<const long long*>(labels)[r] : static_cast<const int*>(labels)[r];
  const bool valid = label >= 0 && label < classes;
  const T nan = std::numeric_limits<T>::quiet_NaN(), inverse = T(1) / sum;
  T* g = backprop + r * classes;
  for (int64_t j = s.first; j < classes; j += s.step) {
    g[j] = valid ? exp_of(x[j] - max) * inverse - (j == label ? T(1) : T(0)) : nan;
  }
  if (s.leader) loss[r] = valid ? log_of(sum) - (x[label] - max) : nan;
}

// ---- Index ops ----

__device__ inline int64_t index_at(const void* p, index_kind kind, int64_t i) {
  switch (kind) {
    case index_kind::uint8: return static_cast<const unsigned char*>(p)[i];
    case index_kind::int8: return static_cast<const signed char*>(p)[i];
    case index_kind::int32: return static_cast<const int*>(p)[i];
    default: return static_cast<const long long*>(p)[i];
  }
}

template <class E>
__global__ void gather(const E* params, const void* indices, index_kind kind, E* out, int64_t rows, int64_t count,
                       int64_t inner, int64_t total) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = k % inner, t = k / inner, j = t % count, o = t / count;
    const int64_t index = index_at(indices, kind, j);
    out[k] = index >= 0 && index < rows ? params[(o * rows + index) * inner + i] : E{};
  }
}

__device__ inline void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ inline void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int* p, int v) { atomicAdd(p, v); }
__device__ inline void atomic_add(long* p, long v) {  // int64_t: two's complement wraps alike
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

template <class T>
__global__ void unsorted_segment_sum(const T* data, const void* ids, index_kind kind, T* out, int64_t inner,
                                     int64_t num_segments, int64_t total) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t segment = index_at(ids, kind, k / inner);
    if (segment >= 0 && segment < num_segments) atomic_add(out + segment * inner + k % inner, data[k]);
  }
}

template <class E>
__global__ void one_hot(const void* indices, index_kind kind, E* out, int64_t depth, int64_t suffix, int64_t total,
                        E on, E off) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = k % suffix, t = k / suffix, d = t % depth, p = t / depth;
    out[k] = index_at(indices, kind, p * suffix + s) == d ? on : off;
  }
}

// Calls f(E{}) with the unsigned type of `bytes` bytes (uint4 for 16).
template <class F>
void visit_unit(std::size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(std::uint8_t{}); break;
    case 2: f(std::uint16_t{}); break;
    case 4: f(std::uint32_t{}); break;
    case 8: f(std::uint64_t{}); break;
    default: f(uint4{}); break;
  }
}

}  // namespace

template <class T>
reduce_plan plan_reduction(reduce_kind kind, int64_t outer, int64_t reduce, int64_t inner, int sm_count) {
  reduce_plan p;
  p.kind = kind;
  p.outer = outer;
  p.reduce = reduce;
  p.inner = inner;
  p.chunk = reduce;
  if (reduce == 0) return p;
  // Eight blocks of 256 threads fill an SM (2048 resident threads): the reduced dimension
  // is chunked only when the outputs alone give fewer blocks than that.
  const int64_t target_blocks = int64_t{8} * (sm_count > 0 ? sm_count : 1);
  int64_t units, max_splits;
  if (inner == 1) {
    // Short rows, or rows enough to fill the GPU with warps: a group of threads per row.
    p.row_threads = row_threads_for(reduce, outer >= k_warps * target_blocks ? 4096 : 512);
    if (p.row_threads < k_block) return p;
    units = outer;
    max_splits = ceil_div(reduce, k_block * 8);  // at least 8 elements per thread
  } else {
    while (p.tile_width < 32 && p.tile_width < inner) p.tile_width *= 2;
    units = outer * ceil_div(inner, p.tile_width);
    max_splits = ceil_div(reduce, (k_block / p.tile_width) * 8);
  }
  const int64_t splits = smaller(max_splits, ceil_div(target_blocks, units));
  if (splits <= 1) return p;
  p.chunk = ceil_div(reduce, splits);
  p.splits = ceil_div(reduce, p.chunk);  // no empty chunk
  if (p.splits > 1) {
    visit_reducer<T>(kind, [&](auto r) {
      p.scratch_bytes = static_cast<std::size_t>(p.splits * outer * inner) * sizeof(typename decltype(r)::acc);
    });
  }
  return p;
}

template <class T>
void launch_reduction(const reduce_plan& plan, const T* in, void* out, void* scratch, bool index64,
                      cudaStream_t stream) {
  visit_reducer<T>(plan.kind, [&](auto r) { run_reduction<decltype(r)>(plan, in, out, scratch, index64, stream); });
}

void launch_permute(const void* in, void* out, std::size_t element_size, int rank, const int64_t* dims,
                    const int* perm, cudaStream_t stream) {
  permute_geometry g{};
  g.rank = rank;
  int64_t in_strides[k_max_permute_rank];
  int64_t total = 1;
  for (int k = rank - 1; k >= 0; --k) {
    in_strides[k] = total;
    total *= dims[k];
  }
  for (int k = 0; k < rank; ++k) {
    g.out_dims[k] = dims[perm[k]];
    g.in_strides[k] = in_strides[perm[k]];
  }
  visit_unit(element_size, [&](auto unit) {
    using E = decltype(unit);
    if constexpr (!std::is_same_v<E, uint4>) {
      permute<E><<<blocks_for(total), k_block, 0, stream>>>(static_cast<const E*>(in), static_cast<E*>(out), total,
                                                            g);
    }
  });
}

template <class T>
void launch_softmax(const T* logits, T* out, int64_t rows, int64_t classes, bool log, cudaStream_t stream) {
  const int t = softmax_row_threads(rows, classes);
  softmax_rows<T><<<softmax_blocks(rows, t), k_block, 0, stream>>>(logits, out, rows, classes, t, log);
}

template <class T>
void launch_softmax_xent(strided_matrix<T> features, strided_matrix<T> labels, T* loss, T* backprop, int64_t rows,
                         int64_t classes, cudaStream_t stream) {
  const int t = softmax_row_threads(rows, classes);
  softmax_xent_rows<T><<<softmax_blocks(rows, t), k_block, 0, stream>>>(features, labels, loss, backprop, rows,
                                                                        classes, t);
}

template <class T>
void launch_sparse_softmax_xent(const T* features, const void* labels, bool labels64, T* loss, T* backprop,
                                int64_t rows, int64_t classes, cudaStream_t stream) {
  const int t = softmax_row_threads(rows, classes);
  sparse_softmax_xent_rows<T><<<softmax_blocks(rows, t), k_block, 0, stream>>>(features, labels, labels64, loss,
                                                                               backprop, rows, classes, t);
}

void launch_gather(const void* params, const void* indices, index_kind indices_kind, void* out,
                   std::size_t row_bytes, int64_t outer, int64_t rows, int64_t count, cudaStream_t stream) {
  // Rows move as units of the widest power of two (at most 16 bytes) that divides the
  // row's bytes and params' address (a view may start anywhere), whatever the dtype.
  const auto address = reinterpret_cast<std::uintptr_t>(params);
  std::size_t unit_bytes = 16;
  while (row_bytes % unit_bytes != 0 || address % unit_bytes != 0) unit_bytes /= 2;
  const int64_t inner = static_cast<int64_t>(row_bytes / unit_bytes);
  const int64_t total = outer * count * inner;
  visit_unit(unit_bytes, [&](auto unit) {
    using E = decltype(unit);
    gather<E><<<blocks_for(total), k_block, 0, stream>>>(static_cast<const E*>(params), indices, indices_kind,
                                                         static_cast<E*>(out), rows, count, inner, total);
  });
}

template <class T>
void launch_unsorted_segment_sum(const T* data, const void* ids, index_kind ids_kind, T* out, int64_t num_ids,
                                 int64_t inner, int64_t num_segments, cudaStream_t stream) {
  const int64_t total = num_ids * inner;
  unsorted_segment_sum<T><<<blocks_for(total), k_block, 0, stream>>>(data, ids, ids_kind, out, inner, num_segments,
                                                                     total);
}

void launch_one_hot(const void* indices, index_kind indices_kind, void* out, std::size_t element_size,
                    int64_t prefix, int64_t depth, int64_t suffix, std::uint64_t on_bits, std::uint64_t off_bits,
                    cudaStream_t stream) {
  const int64_t total = prefix * depth * suffix;
  visit_unit(element_size, [&](auto unit) {
    using E = decltype(unit);
    if constexpr (!std::is_same_v<E, uint4>) {
      one_hot<E><<<blocks_for(total), k_block, 0, stream>>>(indices, indices_kind, static_cast<E*>(out), depth,
                                                            suffix, total, static_cast<E>(on_bits),
                                                            static_cast<E>(off_bits));
    }
  });
}

// The element types the launch functions serve.
template reduce_plan plan_reduction<float>(reduce_kind, int64_t, int64_t, int64_t, int);
template reduce_plan plan_reduction<double>(reduce_kind, int64_t, int64_t, int64_t, int);
template reduce_plan plan_reduction<std::int32_t>(reduce_kind, int64_t, int64_t, int64_t, int);
template reduce_plan plan_reduction<std::int64_t>(reduce_kind, int64_t, int64_t, int64_t, int);
template void launch_reduction<float>(const reduce_plan&, const float*, void*, void*, bool, cudaStream_t);
template void launch_reduction<double>(const reduce_plan&, const double*, void*, void*, bool, cudaStream_t);
template void launch_reduction<std::int32_t>(const reduce_plan&, const std::int32_t*, void*, void*, bool,
                                             cudaStream_t);
template void launch_reduction<std::int64_t>(const reduce_plan&, const std::int64_t*, void*, void*, bool,
                                             cudaStream_t);
template void launch_unsorted_segment_sum<float>(const float*, const void*, index_kind, float*, int64_t, int64_t,
                                                 int64_t, cudaStream_t);
template void launch_unsorted_segment_sum<double>(const double*, const void*, index_kind, double*, int64_t,
                                                  int64_t, int64_t, cudaStream_t);
template void launch_unsorted_segment_sum<std::int32_t>(const std::int32_t*, const void*, index_kind,
                                                        std::int32_t*, int64_t, int64_t, int64_t, cudaStream_t);
template void launch_unsorted_segment_sum<std::int64_t>(const std::int64_t*, const void*, index_kind,
                                                        std::int64_t*, int64_t, int64_t, int64_t, cudaStream_t);
template void launch_softmax<float>(const float*, float*, int64_t, int64_t, bool, cudaStream_t);
template void launch_softmax<double>(const double*, double*, int64_t, int64_t, bool, cudaStream_t);
template void launch_softmax_xent<float>(strided_matrix<float>, strided_matrix<float>, float*, float*, int64_t,
                                         int64_t, cudaStream_t);
template void launch_softmax_xent<double>(strided_matrix<double>, strided_matrix<double>, double*, double*,
                                          int64_t, int64_t, cudaStream_t);
template void launch_sparse_softmax_xent<float>(const float*, const void*, bool, float*, float*, int64_t, int64_t,
                                                cudaStream_t);
template void launch_sparse_softmax_xent<double>(const double*, const void*, bool, double*, double*, int64_t,
                                                 int64_t, cudaStream_t);

}  // namespace troupe::kernels::gpu
