// CPU kernels: Sum, Mean, Max, Min, Prod, ArgMax, ArgMin, All, Any; the scans Cumsum and
// Cumprod.
//
// How a reduction runs. The axes are normalized (negative ones counted from the end,
// repeats rejected), then the input's dimensions are collapsed: size-1 dimensions vanish
// and neighbours that are both reduced or both kept merge. What is left alternates kept
// and reduced groups. Each pass reduces the last reduced group, seen as a contiguous
// [outer, reduce, inner] block, until no reduced group is left; one pass covers the common
// cases (all axes, the last axes, the first axes, one middle run).
//
// A pass either reads each row of `reduce` contiguous values (inner == 1), with several
// accumulators so the compiler vectorizes, or adds whole rows of `inner` values into an
// output block (inner > 1). Work is split over output blocks, or, when there are too few
// of those to keep the pool busy, over chunks of the reduced dimension with a final
// combine.
//
// Accumulators: floating types accumulate in their own type, as TensorFlow does. Integer
// Sum, Prod and Mean accumulate in uint64, which wraps exactly as the narrow type would
// for Sum and Prod, and gives Mean the truncated quotient of the true sum (TensorFlow
// accumulates in the narrow type, so an int8 Mean can differ there; the exact value is
// the more useful one). Max and Min over floats propagate NaN. The Mean of an empty set
// is NaN for floats and 0 for integers (TensorFlow divides by zero).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/kernel_registry.h"
#include "kernels/shape_checks.h"

namespace troupe::kernels {

namespace {

using reduction_types = type_list<float, double, std::int8_t, std::int16_t, std::int32_t,
                                  std::int64_t, std::uint8_t, std::uint16_t>;

// ---- Reducers: identity, combine, and the conversion from and to the element type. ----

template <class T>
using wide_accumulator = std::conditional_t<std::is_floating_point_v<T>, T, std::uint64_t>;

template <class T>
struct sum_reducer {
  using acc = wide_accumulator<T>;
  static acc identity() { return acc(0); }
  static acc from(T x) { return static_cast<acc>(x); }
  static acc combine(acc a, acc b) { return a + b; }
  static T finish(acc a, std::int64_t /*count*/) { return static_cast<T>(a); }
};

template <class T>
struct prod_reducer {
  using acc = wide_accumulator<T>;
  static acc identity() { return acc(1); }
  static acc from(T x) { return static_cast<acc>(x); }
  static acc combine(acc a, acc b) { return a * b; }
  static T finish(acc a, std::int64_t /*count*/) { return static_cast<T>(a); }
};

template <class T>
struct mean_reducer {
  using acc = wide_accumulator<T>;
  static acc identity() { return acc(0); }
  static acc from(T x) { return static_cast<acc>(x); }
  static acc combine(acc a, acc b) { return a + b; }
  static T finish(acc a, std::int64_t count) {
    if constexpr (std::is_floating_point_v<T>) {
      return a / static_cast<T>(count);
    } else {
      if (count == 0) return T(0);
      return static_cast<T>(static_cast<std::int64_t>(a) / count);
    }
  }
};

template <class T>
struct max_reducer {
  using acc = T;
  static acc identity() {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  static acc from(T x) { return x; }
  static acc combine(acc a, acc b) {
    if constexpr (std::is_floating_point_v<T>) return (b > a || b != b) ? b : a;
    else return b > a ? b : a;
  }
  static T finish(acc a, std::int64_t) { return a; }
};

template <class T>
struct min_reducer {
  using acc = T;
  static acc identity() {
    if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
  static acc from(T x) { return x; }
  static acc combine(acc a, acc b) {
    if constexpr (std::is_floating_point_v<T>) return (b < a || b != b) ? b : a;
    else return b < a ? b : a;
  }
  static T finish(acc a, std::int64_t) { return a; }
};

// All and Any over booleans, accumulated in bytes (a std::vector<bool> has no data()).
template <class T>
struct all_reducer {
  using acc = std::uint8_t;
  static acc identity() { return 1; }
  static acc from(T x) { return x ? 1 : 0; }
  static acc combine(acc a, acc b) { return a & b; }
  static T finish(acc a, std::int64_t) { return a != 0; }
};

template <class T>
struct any_reducer {
  using acc = std::uint8_t;
  static acc identity() { return 0; }
  static acc from(T x) { return x ? 1 : 0; }
  static acc combine(acc a, acc b) { return a | b; }
  static T finish(acc a, std::int64_t) { return a != 0; }
};

// ---- One pass: [outer, reduce, inner] -> [outer, inner], in the accumulator type. ----

template <class R, class In>
typename R::acc load(In x) {
  if constexpr (std::is_same_v<In, typename R::acc>) return x;
  else return R::from(x);
}

// The reduction of n contiguous values.
template <class R, class In>
typename R::acc reduce_contiguous(const In* x, std::int64_t n) {
  using acc = typename R::acc;
  constexpr int k_lanes = 128 / sizeof(acc);  // two 512-bit vectors of accumulators
  acc lanes[k_lanes];
  for (auto& l : lanes) l = R::identity();
  std::int64_t i = 0;
  for (; i + k_lanes <= n; i += k_lanes) {
    for (int l = 0; l < k_lanes; ++l) lanes[l] = R::combine(lanes[l], load<R>(x[i + l]));
  }
  acc total = R::identity();
  for (; i < n; ++i) total = R::combine(total, load<R>(x[i]));
  for (int l = 0; l < k_lanes; ++l) total = R::combine(total, lanes[l]);
  return total;
}

// Combines rows [r0, r1) of outer slice `o`, columns [j0, j1), into dst[j0, j1).
template <class R, class In>
void accumulate(const In* in, typename R::acc* dst, std::int64_t reduce, std::int64_t inner,
                std::int64_t o, std::int64_t r0, std::int64_t r1, std::int64_t j0,
                std::int64_t j1) {
  const In* slice = in + o * reduce * inner;
  if (inner == 1) {
    dst[0] = R::combine(dst[0], reduce_contiguous<R>(slice + r0, r1 - r0));
    return;
  }
  for (std::int64_t r = r0; r < r1; ++r) {
    const In* row = slice + r * inner;
    for (std::int64_t j = j0; j < j1; ++j) dst[j] = R::combine(dst[j], load<R>(row[j]));
  }
}

template <class R, class In>
void reduce_pass(const In* in, typename R::acc* out, std::int64_t outer, std::int64_t reduce,
                 std::int64_t inner, compute_pool& pool) {
  using acc = typename R::acc;
  constexpr std::int64_t k_block = 1024;           // output columns per unit of work
  constexpr std::int64_t k_min_chunk = 4096;       // elements per chunk of `reduce`
  constexpr double k_ns_per_element = 0.25;
  std::int64_t width = std::min(inner, k_block);
  std::int64_t col_blocks = (inner + k_block - 1) / k_block;
  std::int64_t units = outer * col_blocks;
  int threads = pool.num_threads();
  auto unit_columns = [&](std::int64_t u, std::int64_t* o, std::int64_t* j0, std::int64_t* j1) {
    *o = u / col_blocks;
    *j0 = (u % col_blocks) * k_block;
    *j1 = std::min(inner, *j0 + k_block);
  };

  std::int64_t chunks = std::min<std::int64_t>(4 * threads, reduce * width / k_min_chunk);
  if (threads == 1 || units >= 2 * threads || chunks < 2) {
    pool.parallel_for(units, static_cast<double>(reduce * width) * k_ns_per_element,
                      [&](std::int64_t begin, std::int64_t end) {
                        for (std::int64_t u = begin; u < end; ++u) {
                          std::int64_t o, j0, j1;
                          unit_columns(u, &o, &j0, &j1);
                          acc* dst = out + o * inner;
                          std::fill(dst + j0, dst + j1, R::identity());
                          accumulate<R>(in, dst, reduce, inner, o, 0, reduce, j0, j1);
                        }
                      });
    return;
  }
  // Few outputs, long reductions: each chunk of `reduce` fills its own partial result.
  std::int64_t size = outer * inner;
  std::vector<acc> partial(static_cast<std::size_t>(chunks * size), R::identity());
  std::int64_t rows_per_chunk = (reduce + chunks - 1) / chunks;
  pool.parallel_for(chunks, static_cast<double>(rows_per_chunk * width * units) * k_ns_per_element,
                    [&](std::int64_t begin, std::int64_t end) {
                      for (std::int64_t c = begin; c < end; ++c) {
                        std::int64_t r0 = c * rows_per_chunk;
                        std::int64_t r1 = std::min(reduce, r0 + rows_per_chunk);
                        for (std::int64_t u = 0; u < units; ++u) {
                          std::int64_t o, j0, j1;
                          unit_columns(u, &o, &j0, &j1);
                          accumulate<R>(in, partial.data() + c * size + o * inner, reduce,
                                        inner, o, r0, r1, j0, j1);
                        }
                      }
                    });
  for (std::int64_t i = 0; i < size; ++i) {
    acc a = R::identity();
    for (std::int64_t c = 0; c < chunks; ++c) a = R::combine(a, partial[c * size + i]);
    out[i] = a;
  }
}

// ---- Sum, Mean, Max, Min, Prod. ----

template <class T, template <class> class Reducer>
class reduction_kernel final : public op_kernel {
 public:
  using R = Reducer<T>;
  using acc = typename R::acc;

  explicit reduction_kernel(kernel_construction& c) : op_kernel(c) {
    c.get_attr("keep_dims", &keep_dims_);
  }

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    auto geometry = reduction_geometry_of(input.shape(), ctx.input(1), keep_dims_);
    if (!geometry.ok()) return ctx.fail(geometry.error());
    const std::int64_t count = geometry->count;
    std::vector<dim_group> groups = std::move(geometry->groups);
    if (geometry->reduced_groups == 0) {  // nothing to combine: every output is one input
      ctx.set_output(0, input.reshaped(geometry->output));
      return;
    }
    tensor& output = ctx.allocate_output(0, geometry->output);
    std::int64_t out_size = output.num_elements();
    if (out_size == 0) return;
    T* out = output.data<T>();
    if (input.num_elements() == 0) {  // a reduced dimension is empty
      std::fill_n(out, out_size, R::finish(R::identity(), count));
      return;
    }

    compute_pool& pool = ctx.pool();
    std::vector<acc> buffers[2];
    const acc* current = nullptr;  // the previous pass's result, or null before the first
    int flip = 0;
    for (;;) {
      std::size_t g = groups.size();
      while (g > 0 && !groups[g - 1].reduced) --g;
      --g;  // the last reduced group
      std::int64_t outer = 1, inner = 1;
      for (std::size_t i = 0; i < g; ++i) outer *= groups[i].size;
      for (std::size_t i = g + 1; i < groups.size(); ++i) inner *= groups[i].size;
      std::int64_t reduce = groups[g].size;
      groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(g));
      if (g > 0 && g < groups.size() && groups[g - 1].reduced == groups[g].reduced) {
        groups[g - 1].size *= groups[g].size;
        groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(g));
      }
      bool last = std::none_of(groups.begin(), groups.end(),
                               [](const dim_group& d) { return d.reduced; });
      acc* dst;
      if (last && std::is_same_v<acc, T>) {
        dst = reinterpret_cast<acc*>(out);  // the same type: write the output directly
      } else {
        buffers[flip].resize(static_cast<std::size_t>(outer * inner));
        dst = buffers[flip].data();
      }
      if (current == nullptr) reduce_pass<R>(input.data<T>(), dst, outer, reduce, inner, pool);
      else reduce_pass<R>(current, dst, outer, reduce, inner, pool);
      current = dst;
      flip ^= 1;
      if (last) break;
    }
    finish(current, out, out_size, count, pool);
  }

 private:
  // out[i] = R::finish(result[i]); `result` may alias `out` when acc is T.
  static void finish(const acc* result, T* out, std::int64_t size, std::int64_t count,
                     compute_pool& pool) {
    bool trivial = std::is_same_v<acc, T> && !std::is_same_v<R, mean_reducer<T>>;
    if (trivial && static_cast<const void*>(result) == static_cast<const void*>(out)) return;
    pool.parallel_for(size, 1.0, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = R::finish(result[i], count);
    });
  }

  bool keep_dims_ = false;
};

// ---- ArgMax, ArgMin. ----

template <class T, bool Max>
bool better(T x, T best) {
  if constexpr (std::is_floating_point_v<T>) {
    // The first NaN wins, as in numpy.
    if (best != best) return false;
    if (x != x) return true;
  }
  return Max ? x > best : x < best;
}

template <class T, bool Max>
class arg_reduction_kernel final : public op_kernel {
 public:
  explicit arg_reduction_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    auto g = arg_reduction_geometry_of(op(), input.shape(), ctx.input(1));
    if (!g.ok()) return ctx.fail(g.error());
    tensor& output = ctx.allocate_output(0, g->output);
    if (output.num_elements() == 0) return;
    if (ctx.output_type(0) == dtype::int32 && g->reduce > std::numeric_limits<std::int32_t>::max()) {
      ctx.fail(invalid_argument_error("dimension ", g->axis, " of input ", input.shape(),
                                      " is too long for an int32 output_type"));
      return;
    }
    visit_dtype<index_types>(ctx.output_type(0), [&]<class I>() {
      run<I>(input.data<T>(), output.data<I>(), g->outer, g->reduce, g->inner, ctx.pool());
    });
  }

 private:
  template <class I>
  static void run(const T* in, I* out, std::int64_t outer, std::int64_t reduce,
                  std::int64_t inner, compute_pool& pool) {
    constexpr std::int64_t k_block = 256;
    std::int64_t col_blocks = (inner + k_block - 1) / k_block;
    double cost = static_cast<double>(reduce * std::min(inner, k_block)) * 0.5;
    pool.parallel_for(outer * col_blocks, cost, [&](std::int64_t begin, std::int64_t end) {
      T best[k_block];
      for (std::int64_t u = begin; u < end; ++u) {
        std::int64_t o = u / col_blocks;
        std::int64_t j0 = (u % col_blocks) * k_block;
        std::int64_t width = std::min(inner, j0 + k_block) - j0;
        const T* slice = in + o * reduce * inner + j0;
        I* dst = out + o * inner + j0;
        for (std::int64_t j = 0; j < width; ++j) {
          best[j] = slice[j];
          dst[j] = 0;
        }
        for (std::int64_t r = 1; r < reduce; ++r) {
          const T* row = slice + r * inner;
          for (std::int64_t j = 0; j < width; ++j) {
            if (better<T, Max>(row[j], best[j])) {
              best[j] = row[j];
              dst[j] = static_cast<I>(r);
            }
          }
        }
      }
    });
  }
};

template <class T>
using sum_kernel = reduction_kernel<T, sum_reducer>;
template <class T>
using mean_kernel = reduction_kernel<T, mean_reducer>;
template <class T>
using max_kernel = reduction_kernel<T, max_reducer>;
template <class T>
using min_kernel = reduction_kernel<T, min_reducer>;
template <class T>
using prod_kernel = reduction_kernel<T, prod_reducer>;
template <class T>
using arg_max_kernel = arg_reduction_kernel<T, true>;
template <class T>
using arg_min_kernel = arg_reduction_kernel<T, false>;

// ---- Scans: Cumsum, Cumprod. ----
//
// The input seen as [outer, n, inner] around the axis; each (outer, inner) line is scanned
// in order (or backwards, `reverse`), each output holding the sum or product of the
// elements before it (`exclusive`) or up to it.

template <class T, bool Product>
class scan_kernel final : public op_kernel {
 public:
  explicit scan_kernel(kernel_construction& c) : op_kernel(c) {
    c.get_attrs("exclusive", &exclusive_, "reverse", &reverse_);
  }

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    const tensor& axis_input = ctx.input(1);
    if (axis_input.rank() != 0) {
      ctx.fail_invalid_argument("axis must be a scalar, but has shape ", axis_input.shape().to_string());
      return;
    }
    std::int64_t axis = index_values(axis_input)[0];
    if (axis < -x.rank() || axis >= x.rank()) {
      ctx.fail_invalid_argument("axis ", axis, " is out of range for an input of shape ", x.shape().to_string(),
                                " (valid: [", -x.rank(), ", ", x.rank(), "))");
      return;
    }
    if (axis < 0) axis += x.rank();
    std::int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= x.dim(d);
    for (int d = static_cast<int>(axis) + 1; d < x.rank(); ++d) inner *= x.dim(d);
    const std::int64_t n = x.dim(static_cast<int>(axis));
    tensor& y = ctx.allocate_output(0, x.shape());
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t i = 0; i < inner; ++i) {
        T acc = Product ? T(1) : T(0);
        for (std::int64_t step = 0; step < n; ++step) {
          const std::int64_t k = reverse_ ? n - 1 - step : step;
          const std::int64_t at = (o * n + k) * inner + i;
          if (exclusive_) out[at] = acc;
          acc = Product ? static_cast<T>(acc * in[at]) : static_cast<T>(acc + in[at]);
          if (!exclusive_) out[at] = acc;
        }
      }
    }
  }

 private:
  bool exclusive_ = false;
  bool reverse_ = false;
};

template <class T>
using cumsum_kernel = scan_kernel<T, false>;
template <class T>
using cumprod_kernel = scan_kernel<T, true>;

}  // namespace

void register_reduction_kernels(kernel_registry& registry) {
  add_reduction_kernels<sum_kernel, reduction_types>(registry, "Sum", "CPU");
  add_reduction_kernels<mean_kernel, reduction_types>(registry, "Mean", "CPU");
  add_reduction_kernels<max_kernel, reduction_types>(registry, "Max", "CPU");
  add_reduction_kernels<min_kernel, reduction_types>(registry, "Min", "CPU");
  add_reduction_kernels<prod_kernel, reduction_types>(registry, "Prod", "CPU");
  add_reduction_kernels<arg_max_kernel, reduction_types>(registry, "ArgMax", "CPU");
  add_reduction_kernels<arg_min_kernel, reduction_types>(registry, "ArgMin", "CPU");
  // All and Any: booleans only, no type attribute.
  registry.add("All", "CPU", {}, make_kernel<reduction_kernel<bool, all_reducer>>);
  registry.add("Any", "CPU", {}, make_kernel<reduction_kernel<bool, any_reducer>>);
  add_reduction_kernels<cumsum_kernel, reduction_types>(registry, "Cumsum", "CPU");
  add_reduction_kernels<cumprod_kernel, reduction_types>(registry, "Cumprod", "CPU");
}

}  // namespace troupe::kernels
