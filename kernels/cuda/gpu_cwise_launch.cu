// The device code behind gpu_cwise_launch.h: element-wise maps, broadcasting binary and
// ternary ops, Cast, Fill, AddN and BiasAddGrad's reduction.
//
// Kernels are few and generic: an op is a code switched on per element (the switch is
// uniform across a warp, so it costs a few instructions, not divergence), templated only on
// the element type. Every kernel loops grid-stride over 64-bit indices, so any size works
// with a bounded grid. The broadcasting launcher picks one of three kernels by geometry:
//
//   flat     rank 1: same shapes, or a scalar on either side; 4 elements per step with
//            vector loads and stores when every pointer is aligned for them
//   rows     at least k_rows_min_cols in the last dimension: a row or column vector
//            against a matrix ([N,C] + [C], [N,C] * [N,1], [N,1] - [1,C]), NCHW's bias; a
//            2-d grid over rows and columns, dividing once per row
//   strided  anything else, up to k_max_broadcast_rank collapsed dimensions; each output
//            index is split into coordinates by multiply-shift division (fast_divmod)
#include "kernels/cuda/gpu_cwise_launch.h"
#include "kernels/cuda/gpu_grid.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace troupe::kernels::gpu {

namespace {

using grid::blocks_for;
using grid::k_max_blocks;
using grid::k_threads;
using grid::thread_count;
using grid::thread_index;
// Below this many columns the rows kernel would leave most of each warp idle.
constexpr std::int64_t k_rows_min_cols = 64;

// --- Arithmetic as the CPU kernels do it -------------------------------------------------

// Integers are computed in an unsigned type, so that overflow wraps instead of being
// undefined.
template <class T>
using wide_unsigned = std::conditional_t<sizeof(T) <= 4, std::uint32_t, std::uint64_t>;

template <class T>
__device__ __forceinline__ T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<wide_unsigned<T>>(a) + static_cast<wide_unsigned<T>>(b));
  } else {
    return a + b;
  }
}
template <class T>
__device__ __forceinline__ T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<wide_unsigned<T>>(a) - static_cast<wide_unsigned<T>>(b));
  } else {
    return a - b;
  }
}
template <class T>
__device__ __forceinline__ T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<wide_unsigned<T>>(a) * static_cast<wide_unsigned<T>>(b));
  } else {
    return a * b;
  }
}

// CUDA's math functions by precision (the C names, so that no overload is ambiguous).
__device__ __forceinline__ float math_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double math_abs(double x) { return fabs(x); }
__device__ __forceinline__ float math_exp(float x) { return expf(x); }
__device__ __forceinline__ double math_exp(double x) { return exp(x); }
__device__ __forceinline__ float math_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double math_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float math_log(float x) { return logf(x); }
__device__ __forceinline__ double math_log(double x) { return log(x); }
__device__ __forceinline__ float math_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double math_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float math_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double math_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float math_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double math_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float math_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double math_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float math_floor(float x) { return floorf(x); }
__device__ __forceinline__ double math_floor(double x) { return floor(x); }
__device__ __forceinline__ float math_fmod(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double math_fmod(double x, double y) { return fmod(x, y); }

template <class T>
__device__ T unary_apply(unary_op op, T x, float alpha) {
  switch (op) {
    case unary_op::neg: return wrap_sub(T(0), x);
    case unary_op::abs:
      if constexpr (std::is_floating_point_v<T>) return math_abs(x);
      else return x < T(0) ? wrap_sub(T(0), x) : x;
    case unary_op::sign: return static_cast<T>((x > T(0)) - (x < T(0)));
    case unary_op::square: return wrap_mul(x, x);
    case unary_op::relu: return x < T(0) ? T(0) : x;  // keeps NaN
    case unary_op::relu6: return x < T(0) ? T(0) : (x > T(6) ? T(6) : x);
    case unary_op::reciprocal:
      if constexpr (std::is_integral_v<T>) return x == T(0) ? T(0) : static_cast<T>(T(1) / x);
      else return T(1) / x;
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case unary_op::exp: return math_exp(x);
      case unary_op::log: return math_log(x);
      case unary_op::sqrt: return math_sqrt(x);
      case unary_op::rsqrt: return T(1) / math_sqrt(x);
      case unary_op::tanh: return math_tanh(x);
      case unary_op::sigmoid: return T(1) / (T(1) + math_exp(-x));
      case unary_op::elu: return x < T(0) ? math_expm1(x) : x;
      case unary_op::leaky_relu: return x > T(0) ? x : x * static_cast<T>(alpha);
      case unary_op::softplus: {
        // TensorFlow's thresholds: x itself where exp(x) swamps the 1, exp(x) where the 1
        // swamps exp(x).
        const T threshold = math_log(std::numeric_limits<T>::epsilon()) + T(2);
        if (x > -threshold) return x;
        if (x < threshold) return math_exp(x);
        return math_log1p(math_exp(x));
      }
      default: break;
    }
  }
  return x;  // not reached: floating-point ops are registered for floating types only
}

// Integer quotient truncating toward zero; the most negative value over -1 wraps.
template <class T>
__device__ __forceinline__ T divide(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == T(0)) return T(0);
    if (b == T(-1)) return wrap_sub(T(0), a);
    return static_cast<T>(a / b);
  } else {
    return a / b;
  }
}

template <class T>
__device__ T floor_divide(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == T(0)) return T(0);
    if (b == T(-1)) return wrap_sub(T(0), a);
    T q = static_cast<T>(a / b);
    if (a % b != 0 && ((a < 0) != (b < 0))) --q;
    return q;
  } else {
    return math_floor(a / b);
  }
}

// a - floor(a / b) * b: the result takes the divisor's sign.
template <class T>
__device__ T floor_modulo(T a, T b) {
  T trunc_mod;
  if constexpr (std::is_integral_v<T>) {
    if (b == T(0) || b == T(-1)) return T(0);
    trunc_mod = static_cast<T>(a % b);
  } else {
    trunc_mod = math_fmod(a, b);
  }
  if (trunc_mod != T(0) && ((b < T(0)) != (trunc_mod < T(0)))) return static_cast<T>(trunc_mod + b);
  return trunc_mod;
}

// Integers: exact powers by squaring (wrapping).
template <class T>
__device__ T power(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    if (y < T(0)) {
      if (x == T(1)) return T(1);
      if (x == T(-1)) return (y & T(1)) != T(0) ? T(-1) : T(1);
      return T(0);
    }
    T result = 1;
    T base = x;
    for (T e = y; e > 0; e /= 2) {
      if (e % 2 != 0) result = wrap_mul(result, base);
      base = wrap_mul(base, base);
    }
    return result;
  } else {
    return math_pow(x, y);
  }
}

// Maximum and Minimum propagate NaN.
template <class T>
__device__ __forceinline__ T maximum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a > b ? a : b;
}
template <class T>
__device__ __forceinline__ T minimum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? a : b;
}

// Products are grouped as the CPU kernels group them.
template <class T>
__device__ T binary_apply(binary_op op, T a, T b, float alpha) {
  switch (op) {
    case binary_op::add: return wrap_add(a, b);
    case binary_op::sub: return wrap_sub(a, b);
    case binary_op::mul: return wrap_mul(a, b);
    case binary_op::div: return divide(a, b);
    case binary_op::maximum: return maximum(a, b);
    case binary_op::minimum: return minimum(a, b);
    case binary_op::pow: return power(a, b);
    case binary_op::floor_div: return floor_divide(a, b);
    case binary_op::floor_mod: return floor_modulo(a, b);
    case binary_op::relu_grad: return b > T(0) ? a : T(0);
    case binary_op::relu6_grad: return b > T(0) && b < T(6) ? a : T(0);
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case binary_op::elu_grad: return b < T(0) ? a * (b + T(1)) : a;
      case binary_op::leaky_relu_grad: return b > T(0) ? a : a * static_cast<T>(alpha);
      case binary_op::softplus_grad: return a / (T(1) + math_exp(-b));
      case binary_op::tanh_grad: return b * (T(1) - a * a);
      case binary_op::sigmoid_grad: return b * a * (T(1) - a);
      case binary_op::sqrt_grad: return b * T(0.5) / a;
      case binary_op::rsqrt_grad: return b * T(-0.5) * a * a * a;
      case binary_op::reciprocal_grad: return -b * a * a;
      default: break;
    }
  }
  return a;  // not reached: floating-point ops are registered for floating types only
}

template <class T>
__device__ __forceinline__ bool compare_apply(compare_op op, T a, T b) {
  switch (op) {
    case compare_op::equal: return a == b;
    case compare_op::not_equal: return a != b;
    case compare_op::less: return a < b;
    case compare_op::less_equal: return a <= b;
    case compare_op::greater: return a > b;
    case compare_op::greater_equal: return a >= b;
  }
  return false;
}

// One element converted from S to D. Floating point to integer saturates, NaN gives 0.
template <class D, class S>
__device__ __forceinline__ D cast_value(S v) {
  if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    constexpr S lowest = static_cast<S>(std::numeric_limits<D>::lowest());
    constexpr S above_max = static_cast<S>(std::numeric_limits<D>::max()) + S(1);
    if (!(v == v)) return D(0);
    if (v <= lowest) return std::numeric_limits<D>::lowest();
    if (v >= above_max) return std::numeric_limits<D>::max();
    return static_cast<D>(v);
  } else {
    return static_cast<D>(v);
  }
}

// An operand element through the read-only data cache: kernels never write their operands,
// so the compiler may issue a thread's loads ahead of its stores.
template <class T>
__device__ __forceinline__ T load(const T* p) {
  if constexpr (std::is_same_v<T, bool>) {
    return __ldg(reinterpret_cast<const unsigned char*>(p)) != 0;
  } else {
    return __ldg(p);
  }
}

// --- Element functors --------------------------------------------------------------------
//
// A map functor computes y from x. A broadcast functor holds its operands' pointers and
// computes one output element from each operand's offset (operator()); a two-operand one
// also names its operand type and apply(a, b), for the flat kernel's vector loads.

template <class T>
struct unary_fn {
  unary_op op;
  float alpha;
  __device__ T operator()(T x) const { return unary_apply(op, x, alpha); }
};

template <class S, class D>
struct cast_fn {
  __device__ D operator()(S x) const { return cast_value<D>(x); }
};

template <class T>
struct arithmetic_fn {
  static constexpr int arity = 2;
  using in_type = T;
  using out_type = T;
  binary_op op;
  float alpha;
  const T* x;
  const T* y;
  __device__ T apply(T a, T b) const { return binary_apply(op, a, b, alpha); }
  __device__ T operator()(const std::int64_t (&at)[2]) const { return apply(load(x + at[0]), load(y + at[1])); }
};

template <class T>
struct compare_fn {
  static constexpr int arity = 2;
  using in_type = T;
  using out_type = bool;
  compare_op op;
  const T* x;
  const T* y;
  __device__ bool apply(T a, T b) const { return compare_apply(op, a, b); }
  __device__ bool operator()(const std::int64_t (&at)[2]) const { return apply(load(x + at[0]), load(y + at[1])); }
};

template <class T>
struct select_fn {
  static constexpr int arity = 3;
  using out_type = T;
  const bool* condition;
  const T* t;
  const T* e;
  __device__ T operator()(const std::int64_t (&at)[3]) const {
    return load(condition + at[0]) ? load(t + at[1]) : load(e + at[2]);
  }
};

template <class T>
struct clip_fn {
  static constexpr int arity = 3;
  using out_type = T;
  const T* t;
  const T* lo;
  const T* hi;
  __device__ T operator()(const std::int64_t (&at)[3]) const {
    T v = load(t + at[0]);
    const T l = load(lo + at[1]);
    const T h = load(hi + at[2]);
    v = h < v ? h : v;
    return v < l ? l : v;
  }
};

// --- Flat kernels ------------------------------------------------------------------------

// k_pack elements moved by one vector load or store (16 bytes of float or int32).
constexpr int k_pack = 4;
template <class T>
struct alignas(sizeof(T) * k_pack) pack {
  T v[k_pack];
};

template <class T>
bool pack_aligned(const T* p) {
  return reinterpret_cast<std::uintptr_t>(p) % alignof(pack<T>) == 0;
}

// y[i] = fn(x[i]). The first `packs` packs go by vectors, the rest one by one.
template <class In, class Out, class Fn>
__global__ void map_kernel(Fn fn, const In* x, Out* y, std::int64_t n, std::int64_t packs) {
  const auto* xp = reinterpret_cast<const pack<In>*>(x);
  auto* yp = reinterpret_cast<pack<Out>*>(y);
  for (std::int64_t p = thread_index(); p < packs; p += thread_count()) {
    const pack<In> a = xp[p];
    pack<Out> b;
#pragma unroll
    for (int k = 0; k < k_pack; ++k) b.v[k] = fn(a.v[k]);
    yp[p] = b;
  }
  for (std::int64_t i = packs * k_pack + thread_index(); i < n; i += thread_count()) y[i] = fn(x[i]);
}

template <class In, class Out, class Fn>
void launch_map(Fn fn, const In* x, Out* y, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const std::int64_t packs = pack_aligned(x) && pack_aligned(y) ? n / k_pack : 0;
  map_kernel<In, Out, Fn><<<blocks_for(std::max(packs, n - packs * k_pack)), k_threads, 0, stream>>>(fn, x, y, n, packs);
}

template <class T>
__global__ void fill_kernel(T value, T* y, std::int64_t n, std::int64_t packs) {
  pack<T> v;
#pragma unroll
  for (int k = 0; k < k_pack; ++k) v.v[k] = value;
  auto* yp = reinterpret_cast<pack<T>*>(y);
  for (std::int64_t p = thread_index(); p < packs; p += thread_count()) yp[p] = v;
  for (std::int64_t i = packs * k_pack + thread_index(); i < n; i += thread_count()) y[i] = value;
}

// z[i] = fn.apply(x[i * x_step], y[i * y_step]), each step 0 (a single value) or 1.
template <class Fn>
__global__ void binary_flat_kernel(Fn fn, typename Fn::out_type* z, std::int64_t n, int x_step, int y_step,
                                   std::int64_t packs) {
  using T = typename Fn::in_type;
  using Out = typename Fn::out_type;
  const T x0 = fn.x[0];
  const T y0 = fn.y[0];
  const auto* xp = reinterpret_cast<const pack<T>*>(fn.x);
  const auto* yp = reinterpret_cast<const pack<T>*>(fn.y);
  auto* zp = reinterpret_cast<pack<Out>*>(z);
  for (std::int64_t p = thread_index(); p < packs; p += thread_count()) {
    pack<T> a, b;
    if (x_step != 0) {
      a = xp[p];
    } else {
#pragma unroll
      for (int k = 0; k < k_pack; ++k) a.v[k] = x0;
    }
    if (y_step != 0) {
      b = yp[p];
    } else {
#pragma unroll
      for (int k = 0; k < k_pack; ++k) b.v[k] = y0;
    }
    pack<Out> c;
#pragma unroll
    for (int k = 0; k < k_pack; ++k) c.v[k] = fn.apply(a.v[k], b.v[k]);
    zp[p] = c;
  }
  for (std::int64_t i = packs * k_pack + thread_index(); i < n; i += thread_count()) {
    z[i] = fn.apply(x_step != 0 ? fn.x[i] : x0, y_step != 0 ? fn.y[i] : y0);
  }
}

// --- Broadcasting kernels ----------------------------------------------------------------

// Division of unsigned 64-bit numbers by a fixed divisor as a multiply-high and shifts
// (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994,
// figure 4.1): exact for every dividend below 2^64.
struct fast_divmod {
  std::uint64_t divisor;
  std::uint64_t magic;
  unsigned shift1;
  unsigned shift2;

  static fast_divmod make(std::uint64_t d) {
    unsigned l = 0;  // ceil(log2(d))
    while (l < 64 && (std::uint64_t{1} << l) < d) ++l;
    using u128 = unsigned __int128;
    const u128 numerator = (u128{1} << 64) * ((u128{1} << l) - d);
    return {d, static_cast<std::uint64_t>(numerator / d + 1), std::min(l, 1u), l > 0 ? l - 1 : 0};
  }
  __device__ __forceinline__ std::uint64_t divide(std::uint64_t n) const {
    const std::uint64_t t = __umul64hi(magic, n);
    return (t + ((n - t) >> shift1)) >> shift2;
  }
};

// broadcast_geometry with a divider per dimension.
template <int K>
struct strided_geometry {
  int rank;
  fast_divmod dims[k_max_broadcast_rank];
  std::int64_t strides[K][k_max_broadcast_rank];
};

template <int K>
strided_geometry<K> strided(const broadcast_geometry<K>& g) {
  strided_geometry<K> s{};
  s.rank = g.rank;
  for (int d = 0; d < k_max_broadcast_rank; ++d) {
    s.dims[d] = fast_divmod::make(d < g.rank ? static_cast<std::uint64_t>(g.dims[d]) : 1);
    for (int k = 0; k < K; ++k) s.strides[k][d] = g.strides[k][d];
  }
  return s;
}

// Each operand's offset of element i of the row-major array of g's first `rank` dims.
template <int K>
__device__ __forceinline__ void offsets_of(std::uint64_t i, const strided_geometry<K>& g, int rank,
                                           std::int64_t (&at)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) at[k] = 0;
#pragma unroll
  for (int d = k_max_broadcast_rank - 1; d > 0; --d) {
    if (d >= rank) continue;
    const std::uint64_t q = g.dims[d].divide(i);
    const auto coordinate = static_cast<std::int64_t>(i - q * g.dims[d].divisor);
#pragma unroll
    for (int k = 0; k < K; ++k) at[k] += coordinate * g.strides[k][d];
    i = q;
  }
#pragma unroll
  for (int k = 0; k < K; ++k) at[k] += static_cast<std::int64_t>(i) * g.strides[k][0];
}

// Rows along the last dimension: a thread finds its row's offsets once (dividing by the
// outer dimensions), then walks columns blockIdx.x * blockDim.x + threadIdx.x + j * (a
// grid row's width) of it, so that a warp reads 32 consecutive elements of each operand
// that the columns move along.
template <class Fn>
__global__ void rows_kernel(Fn fn, typename Fn::out_type* z, std::int64_t rows, std::int64_t cols,
                            strided_geometry<Fn::arity> g) {
  constexpr int K = Fn::arity;
  const int last = g.rank - 1;
  std::int64_t column_stride[K];  // g.strides[k][last], read with constant indices only
#pragma unroll
  for (int d = 0; d < k_max_broadcast_rank; ++d) {
    if (d != last) continue;
#pragma unroll
    for (int k = 0; k < K; ++k) column_stride[k] = g.strides[k][d];
  }
  const std::int64_t first_column = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t column_step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<std::int64_t>(gridDim.y) * blockDim.y) {
    std::int64_t row[K];
    offsets_of(static_cast<std::uint64_t>(r), g, last, row);
    typename Fn::out_type* out = z + r * cols;
#pragma unroll 4
    for (std::int64_t c = first_column; c < cols; c += column_step) {
      std::int64_t at[K];
#pragma unroll
      for (int k = 0; k < K; ++k) at[k] = row[k] + c * column_stride[k];
      out[c] = fn(at);
    }
  }
}

template <class Fn>
__global__ void strided_kernel(Fn fn, typename Fn::out_type* z, std::int64_t n, strided_geometry<Fn::arity> g) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    std::int64_t at[Fn::arity];
    offsets_of(static_cast<std::uint64_t>(i), g, g.rank, at);
    z[i] = fn(at);
  }
}

template <class Fn>
void launch_broadcast(Fn fn, const broadcast_geometry<Fn::arity>& g, typename Fn::out_type* z, cudaStream_t stream) {
  std::int64_t n = 1;
  for (int d = 0; d < g.rank; ++d) n *= g.dims[d];
  if (n == 0) return;
  if constexpr (Fn::arity == 2) {
    if (g.rank == 1) {  // strides are 0 or 1
      const bool x_step = g.strides[0][0] != 0, y_step = g.strides[1][0] != 0;
      const bool aligned = (!x_step || pack_aligned(fn.x)) && (!y_step || pack_aligned(fn.y)) && pack_aligned(z);
      const std::int64_t packs = aligned ? n / k_pack : 0;
      binary_flat_kernel<Fn><<<blocks_for(std::max(packs, n - packs * k_pack)), k_threads, 0, stream>>>(
          fn, z, n, x_step, y_step, packs);
      return;
    }
  }
  const std::int64_t cols = g.dims[g.rank - 1];
  if (g.rank >= 2 && cols >= k_rows_min_cols) {
    // A block spans up to k_threads columns of k_threads / width rows. Few rows get more
    // blocks along the columns; many rows loop (each thread walks several columns of a
    // row, dividing once, and several rows).
    const std::int64_t rows = n / cols;
    const unsigned width = static_cast<unsigned>(std::min<std::int64_t>(k_threads, (cols + 31) / 32 * 32));
    const dim3 block(width, k_threads / width);
    const std::int64_t row_blocks = std::min<std::int64_t>((rows + block.y - 1) / block.y, k_max_blocks);
    const std::int64_t column_blocks =
        std::clamp<std::int64_t>(k_max_blocks / row_blocks, 1, (cols + width - 1) / width);
    rows_kernel<Fn><<<dim3(static_cast<unsigned>(column_blocks), static_cast<unsigned>(row_blocks)), block, 0,
                      stream>>>(fn, z, rows, cols, strided(g));
    return;
  }
  strided_kernel<Fn><<<blocks_for(n), k_threads, 0, stream>>>(fn, z, n, strided(g));
}

// --- AddN --------------------------------------------------------------------------------

constexpr int k_max_add_terms = 8;  // input pointers per launch

template <class T>
struct add_terms {
  const T* in[k_max_add_terms];
  int count;
};

// out = in[0] + in[1] + ... + in[count - 1], in order (in[0] may be out itself). The loop
// is unrolled so that the pointers stay in registers, not a local copy of the array.
template <class T>
__global__ void add_n_kernel(add_terms<T> terms, T* out, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_count()) {
    T sum = terms.in[0][i];
#pragma unroll
    for (int k = 1; k < k_max_add_terms; ++k) {
      if (k < terms.count) sum = wrap_add(sum, terms.in[k][i]);
    }
    out[i] = sum;
  }
}

// --- BiasAddGrad -------------------------------------------------------------------------

constexpr int k_tile_cols = 32;                       // a column sums block: one warp wide
constexpr int k_tile_rows = k_threads / k_tile_cols;  // and this many rows at once
constexpr std::int64_t k_reduce_blocks = 1024;      // aim: several blocks per multiprocessor
constexpr std::int64_t k_min_rows_per_split = 64;
constexpr std::int64_t k_min_elements_per_split = 4096;

// How the reduction is split: `splits` blocks per channel (tile), each summing `chunk`
// rows (inner = 1) or flattened (outer, inner) elements (inner > 1).
struct bias_grad_plan {
  std::int64_t splits = 1;
  std::int64_t chunk = 0;
};

bias_grad_plan plan_bias_grad(std::int64_t outer, std::int64_t channels, std::int64_t inner) {
  const std::int64_t count = outer * inner;  // summed per channel
  const std::int64_t per_split = inner == 1 ? k_min_rows_per_split : k_min_elements_per_split;
  const std::int64_t blocks_per_split = inner == 1 ? (channels + k_tile_cols - 1) / k_tile_cols : channels;
  std::int64_t splits = std::min((count + per_split - 1) / per_split,
                                 (k_reduce_blocks + blocks_per_split - 1) / std::max<std::int64_t>(1, blocks_per_split));
  splits = std::clamp<std::int64_t>(splits, 1, 65535);  // gridDim.y
  const std::int64_t chunk = (count + splits - 1) / splits;
  return {chunk == 0 ? 1 : (count + chunk - 1) / chunk, chunk};
}

// Tree sum of one value per thread; the result is valid in thread 0.
template <class T>
__device__ T block_sum(T value, T* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int s = k_threads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] = wrap_add(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  return shared[0];
}

// inner = 1: column sums of [rows, channels]. Block (k_tile_cols, k_tile_rows) sums the
// tile of columns blockIdx.x over the rows of split blockIdx.y into sums[blockIdx.y][c].
template <class T>
__global__ void bias_grad_columns_kernel(const T* grad, std::int64_t rows, std::int64_t channels, std::int64_t chunk,
                                         T* sums) {
  __shared__ T partial[k_tile_rows][k_tile_cols];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * k_tile_cols + threadIdx.x;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * chunk;
  const std::int64_t end = std::min(rows, begin + chunk);
  T sum = T(0);
  if (c < channels) {
    for (std::int64_t r = begin + threadIdx.y; r < end; r += k_tile_rows) sum = wrap_add(sum, grad[r * channels + c]);
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    for (int k = 1; k < k_tile_rows; ++k) sum = wrap_add(sum, partial[k][threadIdx.x]);
    sums[static_cast<std::int64_t>(blockIdx.y) * channels + c] = sum;
  }
}

// inner > 1: block (blockIdx.x = channel, blockIdx.y = split) sums the split's elements j
// of the channel's flattened (outer, inner) positions; consecutive threads read
// consecutive positions, contiguous within each run of `inner`.
template <class T>
__global__ void bias_grad_inner_kernel(const T* grad, std::int64_t channels, std::int64_t inner, std::int64_t count,
                                       std::int64_t chunk, T* sums) {
  __shared__ T shared[k_threads];
  const std::int64_t c = blockIdx.x;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * chunk;
  const std::int64_t end = std::min(count, begin + chunk);
  T sum = T(0);
  std::int64_t j = begin + threadIdx.x;
  if (j < end) {
    // (o, i) of j, then advanced by blockDim.x positions per step without dividing.
    std::int64_t o = j / inner, i = j % inner;
    const std::int64_t step_o = k_threads / inner, step_i = k_threads % inner;
    for (; j < end; j += k_threads) {
      sum = wrap_add(sum, grad[(o * channels + c) * inner + i]);
      o += step_o;
      i += step_i;
      if (i >= inner) {
        i -= inner;
        ++o;
      }
    }
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) sums[static_cast<std::int64_t>(blockIdx.y) * channels + c] = sum;
}

// out[c] = sums[0][c] + ... + sums[splits - 1][c], in that order.
template <class T>
__global__ void sum_splits_kernel(const T* sums, std::int64_t splits, std::int64_t channels, T* out) {
  for (std::int64_t c = thread_index(); c < channels; c += thread_count()) {
    T sum = sums[c];
    for (std::int64_t k = 1; k < splits; ++k) sum = wrap_add(sum, sums[k * channels + c]);
    out[c] = sum;
  }
}

// Calls f(T{}) for the C++ type of `t`.
template <class F>
void visit_element(element_type t, F&& f) {
  switch (t) {
    case element_type::float32: f(float{}); break;
    case element_type::float64: f(double{}); break;
    case element_type::int32: f(std::int32_t{}); break;
    case element_type::int64: f(std::int64_t{}); break;
    case element_type::bool_: f(bool{}); break;
  }
}

}  // namespace

// --- Launchers ---------------------------------------------------------------------------

template <class T>
void launch_unary(unary_op op, float alpha, const T* x, T* y, std::int64_t n, cudaStream_t stream) {
  launch_map(unary_fn<T>{op, alpha}, x, y, n, stream);
}

template <class T>
void launch_binary(binary_op op, float alpha, const broadcast_geometry<2>& g, const T* x, const T* y, T* z,
                   cudaStream_t stream) {
  launch_broadcast(arithmetic_fn<T>{op, alpha, x, y}, g, z, stream);
}

template <class T>
void launch_compare(compare_op op, const broadcast_geometry<2>& g, const T* x, const T* y, bool* z,
                    cudaStream_t stream) {
  launch_broadcast(compare_fn<T>{op, x, y}, g, z, stream);
}

template <class T>
void launch_select(const broadcast_geometry<3>& g, const bool* condition, const T* t, const T* e, T* out,
                   cudaStream_t stream) {
  launch_broadcast(select_fn<T>{condition, t, e}, g, out, stream);
}

template <class T>
void launch_clip(const broadcast_geometry<3>& g, const T* t, const T* lo, const T* hi, T* out, cudaStream_t stream) {
  launch_broadcast(clip_fn<T>{t, lo, hi}, g, out, stream);
}

void launch_cast(element_type from, element_type to, const void* x, void* y, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  visit_element(from, [&](auto source) {
    visit_element(to, [&](auto destination) {
      using S = decltype(source);
      using D = decltype(destination);
      if constexpr (std::is_same_v<S, D>) {
        cudaMemcpyAsync(y, x, static_cast<std::size_t>(n) * sizeof(S), cudaMemcpyDeviceToDevice, stream);
      } else {
        launch_map(cast_fn<S, D>{}, static_cast<const S*>(x), static_cast<D*>(y), n, stream);
      }
    });
  });
}

template <class T>
void launch_fill(T value, T* y, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const std::int64_t packs = pack_aligned(y) ? n / k_pack : 0;
  fill_kernel<T><<<blocks_for(std::max(packs, n - packs * k_pack)), k_threads, 0, stream>>>(value, y, n, packs);
}

template <class T>
void launch_add_n(const T* const* inputs, int count, T* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  // The first launch adds up to k_max_add_terms inputs; each later one adds more to out.
  int next = 0;
  while (next < count) {
    add_terms<T> terms{};
    if (next > 0) terms.in[terms.count++] = out;
    while (terms.count < k_max_add_terms && next < count) terms.in[terms.count++] = inputs[next++];
    add_n_kernel<T><<<blocks_for(n), k_threads, 0, stream>>>(terms, out, n);
  }
}

std::int64_t bias_grad_scratch(std::int64_t outer, std::int64_t channels, std::int64_t inner) {
  if (outer * inner == 0 || channels == 0) return 0;
  const bias_grad_plan plan = plan_bias_grad(outer, channels, inner);
  return plan.splits > 1 ? plan.splits * channels : 0;
}

template <class T>
void launch_bias_grad(const T* grad, std::int64_t outer, std::int64_t channels, std::int64_t inner, T* scratch,
                      T* out, cudaStream_t stream) {
  if (channels == 0) return;
  const std::int64_t count = outer * inner;
  if (count == 0) return launch_fill(T(0), out, channels, stream);
  const bias_grad_plan plan = plan_bias_grad(outer, channels, inner);
  T* sums = plan.splits > 1 ? scratch : out;
  const auto splits = static_cast<unsigned>(plan.splits);
  if (inner == 1) {
    const auto tiles = static_cast<unsigned>((channels + k_tile_cols - 1) / k_tile_cols);
    bias_grad_columns_kernel<T><<<dim3(tiles, splits), dim3(k_tile_cols, k_tile_rows), 0, stream>>>(
        grad, outer, channels, plan.chunk, sums);
  } else {
    bias_grad_inner_kernel<T><<<dim3(static_cast<unsigned>(channels), splits), k_threads, 0, stream>>>(
        grad, channels, inner, count, plan.chunk, sums);
  }
  if (plan.splits > 1) {
    sum_splits_kernel<T><<<blocks_for(channels), k_threads, 0, stream>>>(scratch, plan.splits, channels, out);
  }
}

// --- Instantiations: the types gpu_cwise_launch.h promises -------------------------------

template void launch_unary(unary_op, float, const float*, float*, std::int64_t, cudaStream_t);
template void launch_unary(unary_op, float, const double*, double*, std::int64_t, cudaStream_t);
template void launch_unary(unary_op, float, const std::int32_t*, std::int32_t*, std::int64_t, cudaStream_t);
template void launch_unary(unary_op, float, const std::int64_t*, std::int64_t*, std::int64_t, cudaStream_t);

template void launch_binary(binary_op, float, const broadcast_geometry<2>&, const float*, const float*, float*,
                            cudaStream_t);
template void launch_binary(binary_op, float, const broadcast_geometry<2>&, const double*, const double*, double*,
                            cudaStream_t);
template void launch_binary(binary_op, float, const broadcast_geometry<2>&, const std::int32_t*, const std::int32_t*,
                            std::int32_t*, cudaStream_t);
template void launch_binary(binary_op, float, const broadcast_geometry<2>&, const std::int64_t*, const std::int64_t*,
                            std::int64_t*, cudaStream_t);

template void launch_compare(compare_op, const broadcast_geometry<2>&, const float*, const float*, bool*, cudaStream_t);
template void launch_compare(compare_op, const broadcast_geometry<2>&, const double*, const double*, bool*,
                             cudaStream_t);
template void launch_compare(compare_op, const broadcast_geometry<2>&, const std::int32_t*, const std::int32_t*, bool*,
                             cudaStream_t);
template void launch_compare(compare_op, const broadcast_geometry<2>&, const std::int64_t*, const std::int64_t*, bool*,
                             cudaStream_t);
template void launch_compare(compare_op, const broadcast_geometry<2>&, const bool*, const bool*, bool*, cudaStream_t);

template void launch_select(const broadcast_geometry<3>&, const bool*, const float*, const float*, float*,
                            cudaStream_t);
template void launch_select(const broadcast_geometry<3>&, const bool*, const double*, const double*, double*,
                            cudaStream_t);
template void launch_select(const broadcast_geometry<3>&, const bool*, const std::int32_t*, const std::int32_t*,
                            std::int32_t*, cudaStream_t);
template void launch_select(const broadcast_geometry<3>&, const bool*, const std::int64_t*, const std::int64_t*,
                            std::int64_t*, cudaStream_t);
template void launch_select(const broadcast_geometry<3>&, const bool*, const bool*, const bool*, bool*, cudaStream_t);

template void launch_clip(const broadcast_geometry<3>&, const float*, const float*, const float*, float*,
                          cudaStream_t);
template void launch_clip(const broadcast_geometry<3>&, const double*, const double*, const double*, double*,
                          cudaStream_t);
template void launch_clip(const broadcast_geometry<3>&, const std::int32_t*, const std::int32_t*, const std::int32_t*,
                          std::int32_t*, cudaStream_t);
template void launch_clip(const broadcast_geometry<3>&, const std::int64_t*, const std::int64_t*, const std::int64_t*,
                          std::int64_t*, cudaStream_t);

template void launch_fill(float, float*, std::int64_t, cudaStream_t);
template void launch_fill(double, double*, std::int64_t, cudaStream_t);
template void launch_fill(std::int32_t, std::int32_t*, std::int64_t, cudaStream_t);
template void launch_fill(std::int64_t, std::int64_t*, std::int64_t, cudaStream_t);
template void launch_fill(bool, bool*, std::int64_t, cudaStream_t);

template void launch_add_n(const float* const*, int, float*, std::int64_t, cudaStream_t);
template void launch_add_n(const double* const*, int, double*, std::int64_t, cudaStream_t);
template void launch_add_n(const std::int32_t* const*, int, std::int32_t*, std::int64_t, cudaStream_t);
template void launch_add_n(const std::int64_t* const*, int, std::int64_t*, std::int64_t, cudaStream_t);

template void launch_bias_grad(const float*, std::int64_t, std::int64_t, std::int64_t, float*, float*, cudaStream_t);
template void launch_bias_grad(const double*, std::int64_t, std::int64_t, std::int64_t, double*, double*,
                               cudaStream_t);
template void launch_bias_grad(const std::int32_t*, std::int64_t, std::int64_t, std::int64_t, std::int32_t*,
                               std::int32_t*, cudaStream_t);
template void launch_bias_grad(const std::int64_t*, std::int64_t, std::int64_t, std::int64_t, std::int64_t*,
                               std::int64_t*, cudaStream_t);

}  // namespace troupe::kernels::gpu
