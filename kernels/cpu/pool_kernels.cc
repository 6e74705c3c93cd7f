// CPU kernels: MaxPool, MaxPoolGrad, AvgPool, AvgPoolGrad (float, double) on NHWC images;
// NCHW is transposed to NHWC and back.
//
// Direct loops, vectorized over the channels of one pixel (contiguous in NHWC); float
// MaxPool and MaxPoolGrad run on AVX-512 where the processor has it, 16 channels at a
// time under a lane mask (so that LeNet's 6 channels vectorize too), with the same results
// bit for bit. The forward ops split output rows over the compute pool; the gradients
// split images, since windows of one image overlap and their gradients add up.
//
// TensorFlow's semantics: padded positions never win a max and are not counted in an
// average (AvgPool with SAME padding divides by the number of real inputs under the
// window). MaxPoolGrad recomputes the argmax from orig_input (orig_output is only checked
// for its shape) and sends each gradient to the first maximum in row-major window order.
#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/spatial.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

namespace {

// An output pixel's window clipped to the image: input rows [y0, y1), columns [x0, x1).
struct window_box {
  std::int64_t y0, y1, x0, x1;
  bool empty() const { return y0 >= y1 || x0 >= x1; }
};

// The in-bounds window of output position `o` in one dimension: [begin, end).
inline void window_range(std::int64_t o, std::int64_t stride, std::int64_t pad,
                         std::int64_t window, std::int64_t in, std::int64_t* begin,
                         std::int64_t* end) {
  std::int64_t start = o * stride - pad;
  *begin = std::max<std::int64_t>(start, 0);
  *end = std::min<std::int64_t>(start + window, in);
}

// Calls fn(ox, window) for the pixels of output row oy, left to right. Always inlined,
// also into the AVX-512 kernels below (a callee built for less may be), so that fn is too.
template <class Fn>
[[gnu::always_inline]] inline void for_each_window_in_row(const window_geometry& g, std::int64_t oy, const Fn& fn) {
  window_box w{};
  window_range(oy, g.stride_h, g.pad_top, g.window_h, g.in_h, &w.y0, &w.y1);
  for (std::int64_t ox = 0; ox < g.out_w; ++ox) {
    window_range(ox, g.stride_w, g.pad_left, g.window_w, g.in_w, &w.x0, &w.x1);
    fn(ox, w);
  }
}

// Calls fn(oy, ox, window) for every output pixel of one image, row-major.
template <class Fn>
[[gnu::always_inline]] inline void for_each_window(const window_geometry& g, const Fn& fn) {
  for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
    for_each_window_in_row(g, oy, [&](std::int64_t ox, const window_box& w) { fn(oy, ox, w); });
  }
}

// The forward ops' split: output rows r = n * out_h + oy over the pool, row(n, oy, r).
template <class Row>
void for_each_output_row(const window_geometry& g, compute_pool& pool, double cost_per_row, const Row& row) {
  pool.parallel_for(g.batch * g.out_h, cost_per_row, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) row(r / g.out_h, r % g.out_h, r);
  });
}

// The gradients' split: images over the pool (windows of one image overlap and their
// gradients add up), image(n).
template <class Image>
void for_each_image(const window_geometry& g, compute_pool& pool, double cost_per_image, const Image& image) {
  pool.parallel_for(g.batch, cost_per_image, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t n = b; n < e; ++n) image(n);
  });
}

#pragma GCC push_options
#pragma GCC target("avx512f")
// GCC 12 warns that _mm512_max_ps's _mm512_undefined_ps() "may be used uninitialized"
// when the build does not target AVX-512; the value is never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

constexpr int k_lanes = k_avx512_float_lanes;
constexpr int k_max_vectors = 4;  // channels per pass over a window: up to 64

// The max of channels [i, i + 16 * V) over window `w` of `image`, V independent chains:
// vmaxps(v, m) is v > m ? v : m lane by lane, the scalar loop's select, so NaN never wins
// and an all-NaN window gives lowest() as there.
template <int V>
inline void window_max(const window_geometry& g, const float* image, const window_box& w, std::int64_t i,
                       const __mmask16* lanes, __m512* m) {
#pragma GCC unroll 4
  for (int k = 0; k < V; ++k) m[k] = _mm512_set1_ps(std::numeric_limits<float>::lowest());
  for (std::int64_t y = w.y0; y < w.y1; ++y) {
    const float* row = image + y * g.in_w * g.channels + i;
    for (std::int64_t x = w.x0; x < w.x1; ++x) {
#pragma GCC unroll 4
      for (int k = 0; k < V; ++k) {
        m[k] = _mm512_max_ps(_mm512_maskz_loadu_ps(lanes[k], row + x * g.channels + k * k_lanes), m[k]);
      }
    }
  }
}

template <int V>
void max_pool_pixel(const window_geometry& g, const float* image, const window_box& w, std::int64_t i, float* out) {
  __mmask16 lanes[V];
  __m512 m[V];
#pragma GCC unroll 4
  for (int k = 0; k < V; ++k) lanes[k] = first_lanes(g.channels - i - k * k_lanes);
  window_max<V>(g, image, w, i, lanes, m);
#pragma GCC unroll 4
  for (int k = 0; k < V; ++k) _mm512_mask_storeu_ps(out + i + k * k_lanes, lanes[k], m[k]);
}

// max_pool_grad's argmax for one window and channels [i, i + 16 * V), without branches
// (the winner of a window is random, so a branch on it mispredicts): the window's max m,
// then the first position in row-major order that equals it takes the gradient (the
// scalar loop's first strict improvement); where m is lowest() (no value above it, or all
// NaN) the window's first position does, as there. Tiles: the windows tile the image, so
// each position is written once, gradient or zero; otherwise windows add, in the same
// order as the scalar loop.
template <int V, bool Tiles>
void max_pool_grad_pixel(const window_geometry& g, const float* image, const float* g_out, float* image_grad,
                         const window_box& w, std::int64_t i) {
  const std::int64_t c = g.channels;
  const __m512 lowest = _mm512_set1_ps(std::numeric_limits<float>::lowest());
  __mmask16 lanes[V], pending[V], first[V];
  __m512 m[V], d[V];
#pragma GCC unroll 4
  for (int k = 0; k < V; ++k) lanes[k] = first_lanes(c - i - k * k_lanes);
  window_max<V>(g, image, w, i, lanes, m);
#pragma GCC unroll 4
  for (int k = 0; k < V; ++k) {
    // 0 + d, as the scalar loop's zeroed gradient plus d (-0 becomes +0).
    d[k] = _mm512_add_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(lanes[k], g_out + i + k * k_lanes));
    pending[k] = _mm512_mask_cmp_ps_mask(lanes[k], m[k], lowest, _CMP_GT_OQ);
    first[k] = static_cast<__mmask16>(lanes[k] & ~pending[k]);  // lanes the first position takes anyway
  }
  for (std::int64_t y = w.y0; y < w.y1; ++y) {
    for (std::int64_t x = w.x0; x < w.x1; ++x) {
      const std::int64_t at = (y * g.in_w + x) * c + i;
#pragma GCC unroll 4
      for (int k = 0; k < V; ++k) {
        const std::int64_t a = at + k * k_lanes;
        const __mmask16 hit = static_cast<__mmask16>(
            _mm512_mask_cmp_ps_mask(pending[k], _mm512_maskz_loadu_ps(lanes[k], image + a), m[k], _CMP_EQ_OQ) |
            first[k]);
        pending[k] = static_cast<__mmask16>(pending[k] & ~hit);
        first[k] = 0;
        if constexpr (Tiles) {
          _mm512_mask_storeu_ps(image_grad + a, lanes[k], _mm512_maskz_mov_ps(hit, d[k]));
        } else {
          _mm512_mask_storeu_ps(image_grad + a, hit, _mm512_add_ps(_mm512_maskz_loadu_ps(hit, image_grad + a), d[k]));
        }
      }
    }
  }
}

// Calls fn.template operator()<V>(i) for the channel groups [i, i + 16 * V) covering c.
template <class Fn>
inline void for_channel_groups(std::int64_t c, const Fn& fn) {
  for (std::int64_t i = 0; i < c; i += k_max_vectors * k_lanes) {
    switch (std::min<std::int64_t>(k_max_vectors, (c - i + k_lanes - 1) / k_lanes)) {
      case 4: fn.template operator()<4>(i); break;
      case 3: fn.template operator()<3>(i); break;
      case 2: fn.template operator()<2>(i); break;
      default: fn.template operator()<1>(i); break;
    }
  }
}

void max_pool_avx512(const window_geometry& g, const float* input, float* output, compute_pool& pool) {
  const std::int64_t c = g.channels;
  const double cost = static_cast<double>(g.out_w * g.window_h * g.window_w * c) * 0.1;
  for_each_output_row(g, pool, cost, [&](std::int64_t n, std::int64_t oy, std::int64_t r) {
    const float* image = input + n * g.in_h * g.in_w * c;
    for_each_window_in_row(g, oy, [&](std::int64_t ox, const window_box& w) {
      float* out = output + (r * g.out_w + ox) * c;
      for_channel_groups(c, [&]<int V>(std::int64_t i) { max_pool_pixel<V>(g, image, w, i, out); });
    });
  });
}

void max_pool_grad_avx512(const window_geometry& g, const float* input, const float* grad, float* input_grad,
                          compute_pool& pool) {
  const std::int64_t c = g.channels;
  const std::int64_t image_size = g.in_h * g.in_w * c;
  const bool tiles = g.window_h == g.stride_h && g.window_w == g.stride_w && g.pad_top == 0 && g.pad_left == 0 &&
                     g.out_h * g.stride_h == g.in_h && g.out_w * g.stride_w == g.in_w;
  const double cost = static_cast<double>(g.out_h * g.out_w * g.window_h * g.window_w * c) * 0.1;
  for_each_image(g, pool, cost, [&](std::int64_t n) {
    const float* image = input + n * image_size;
    float* image_grad = input_grad + n * image_size;
    if (!tiles) std::fill_n(image_grad, image_size, 0.0f);
    for_each_window(g, [&](std::int64_t oy, std::int64_t ox, const window_box& w) {
      if (w.empty()) return;  // a window entirely in the padding
      const float* g_out = grad + ((n * g.out_h + oy) * g.out_w + ox) * c;
      for_channel_groups(c, [&]<int V>(std::int64_t i) {
        if (tiles) max_pool_grad_pixel<V, true>(g, image, g_out, image_grad, w, i);
        else max_pool_grad_pixel<V, false>(g, image, g_out, image_grad, w, i);
      });
    });
  });
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

template <class T>
void max_pool(const window_geometry& g, const T* input, T* output, compute_pool& pool) {
  if constexpr (std::is_same_v<T, float>) {
    if (has_avx512f()) return max_pool_avx512(g, input, output, pool);
  }
  const std::int64_t c = g.channels;
  const double cost = static_cast<double>(g.out_w * g.window_h * g.window_w * c) * 0.3;
  for_each_output_row(g, pool, cost, [&](std::int64_t n, std::int64_t oy, std::int64_t r) {
    const T* image = input + n * g.in_h * g.in_w * c;
    for_each_window_in_row(g, oy, [&](std::int64_t ox, const window_box& w) {
      T* out = output + (r * g.out_w + ox) * c;
      std::fill_n(out, c, std::numeric_limits<T>::lowest());
      for (std::int64_t y = w.y0; y < w.y1; ++y) {
        for (std::int64_t x = w.x0; x < w.x1; ++x) {
          const T* in = image + (y * g.in_w + x) * c;
          for (std::int64_t i = 0; i < c; ++i) out[i] = in[i] > out[i] ? in[i] : out[i];
        }
      }
    });
  });
}

// For each output pixel and channel, the argmax of the window is kept in registers and
// updated by selects (no branch to mispredict: the winner of a window is random), then
// the output gradient is added at it.
template <class T>
void max_pool_grad(const window_geometry& g, const T* input, const T* grad, T* input_grad,
                   compute_pool& pool) {
  if constexpr (std::is_same_v<T, float>) {
    if (has_avx512f()) return max_pool_grad_avx512(g, input, grad, input_grad, pool);
  }
  const std::int64_t c = g.channels;
  const std::int64_t image_size = g.in_h * g.in_w * c;
  const double cost = static_cast<double>(g.out_h * g.out_w * g.window_h * g.window_w * c) * 0.3;
  for_each_image(g, pool, cost, [&](std::int64_t n) {
    const T* image = input + n * image_size;
    T* image_grad = input_grad + n * image_size;
    std::fill_n(image_grad, image_size, T(0));
    for_each_window(g, [&](std::int64_t oy, std::int64_t ox, const window_box& w) {
      if (w.empty()) return;  // a window entirely in the padding
      const T* g_out = grad + ((n * g.out_h + oy) * g.out_w + ox) * c;
      for (std::int64_t i = 0; i < c; ++i) {
        T best = std::numeric_limits<T>::lowest();
        std::int64_t best_at = (w.y0 * g.in_w + w.x0) * c + i;
        for (std::int64_t y = w.y0; y < w.y1; ++y) {
          for (std::int64_t x = w.x0; x < w.x1; ++x) {
            const std::int64_t at = (y * g.in_w + x) * c + i;
            const T v = image[at];
            const bool greater = v > best;
            best = greater ? v : best;
            best_at = greater ? at : best_at;
          }
        }
        image_grad[best_at] += g_out[i];
      }
    });
  });
}

template <class T>
void avg_pool(const window_geometry& g, const T* input, T* output, compute_pool& pool) {
  const std::int64_t c = g.channels;
  const double cost = static_cast<double>(g.out_w * g.window_h * g.window_w * c) * 0.3;
  for_each_output_row(g, pool, cost, [&](std::int64_t n, std::int64_t oy, std::int64_t r) {
    const T* image = input + n * g.in_h * g.in_w * c;
    for_each_window_in_row(g, oy, [&](std::int64_t ox, const window_box& w) {
      T* out = output + (r * g.out_w + ox) * c;
      std::fill_n(out, c, T(0));
      for (std::int64_t y = w.y0; y < w.y1; ++y) {
        for (std::int64_t x = w.x0; x < w.x1; ++x) {
          const T* in = image + (y * g.in_w + x) * c;
          for (std::int64_t i = 0; i < c; ++i) out[i] += in[i];
        }
      }
      const std::int64_t count = w.empty() ? 0 : (w.y1 - w.y0) * (w.x1 - w.x0);
      const T scale = count > 0 ? T(1) / static_cast<T>(count) : T(0);
      for (std::int64_t i = 0; i < c; ++i) out[i] *= scale;
    });
  });
}

template <class T>
void avg_pool_grad(const window_geometry& g, const T* grad, T* input_grad, compute_pool& pool) {
  const std::int64_t c = g.channels;
  const std::int64_t image_size = g.in_h * g.in_w * c;
  const double cost = static_cast<double>(g.out_h * g.out_w * g.window_h * g.window_w * c) * 0.3;
  for_each_image(g, pool, cost, [&](std::int64_t n) {
    T* image_grad = input_grad + n * image_size;
    std::fill_n(image_grad, image_size, T(0));
    for_each_window(g, [&](std::int64_t oy, std::int64_t ox, const window_box& w) {
      if (w.empty()) return;
      const T scale = T(1) / static_cast<T>((w.y1 - w.y0) * (w.x1 - w.x0));
      const T* g_out = grad + ((n * g.out_h + oy) * g.out_w + ox) * c;
      for (std::int64_t y = w.y0; y < w.y1; ++y) {
        for (std::int64_t x = w.x0; x < w.x1; ++x) {
          T* to = image_grad + (y * g.in_w + x) * c;
          for (std::int64_t i = 0; i < c; ++i) to[i] += g_out[i] * scale;
        }
      }
    });
  });
}

// What every pooling kernel shares: the validated window attributes and the geometry of
// an input shape.
class pool_kernel_base : public op_kernel {
 public:
  explicit pool_kernel_base(kernel_construction& c) : op_kernel(c) {
    status s = read_window_options(c.node(), /*with_dilations=*/false, /*with_ksize=*/true,
                                   &options_);
    if (!s.ok()) c.fail(std::move(s));
  }

 protected:
  // The geometry for an input of `shape` (in data_format); false after failing ctx.
  bool make_geometry(kernel_context& ctx, const tensor_shape& shape, std::string_view what,
                     window_geometry* g) const {
    return succeeded(ctx, pool_geometry(options_, shape, what, g));
  }

  tensor_shape output_shape(const window_geometry& g) const { return pooled_shape(options_, g); }

  // Checks a gradient-side operand has the pooled output's shape.
  bool check_pooled_shape(kernel_context& ctx, const window_geometry& g, std::string_view what,
                          const tensor_shape& got) const {
    return succeeded(ctx, kernels::check_pooled_shape(options_, g, what, got));
  }

  // Runs `body(nhwc_out)` into `out`, through an NHWC scratch tensor when NCHW.
  template <class T, class Body>
  void into_output(tensor& out, const tensor_shape& nhwc, compute_pool& pool, Body body) const {
    if (!options_.nchw) {
      body(out.data<T>());
      return;
    }
    tensor scratch(dtype_of<T>, nhwc);
    body(scratch.data<T>());
    transpose_images<T>(scratch.data<T>(), out.data<T>(), nhwc, false, pool);
  }

  window_options options_;

 private:
  static bool succeeded(kernel_context& ctx, status s) {
    if (s.ok()) return true;
    ctx.fail(std::move(s));
    return false;
  }
};

template <class T>
class max_pool_kernel final : public pool_kernel_base {
 public:
  using pool_kernel_base::pool_kernel_base;

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    window_geometry g;
    if (!make_geometry(ctx, input.shape(), "input", &g)) return;
    tensor& output = ctx.allocate_output(0, output_shape(g));
    if (output.num_elements() == 0) return;
    compute_pool& pool = ctx.pool();
    tensor in = nhwc_view<T>(input, options_.nchw, pool);
    into_output<T>(output, tensor_shape{g.batch, g.out_h, g.out_w, g.channels}, pool,
                   [&](T* out) { max_pool(g, in.data<T>(), out, pool); });
  }
};

template <class T>
class max_pool_grad_kernel final : public pool_kernel_base {
 public:
  using pool_kernel_base::pool_kernel_base;

  void compute(kernel_context& ctx) override {
    const tensor& orig_input = ctx.input(0);
    window_geometry g;
    if (!make_geometry(ctx, orig_input.shape(), "orig_input", &g)) return;
    if (!check_pooled_shape(ctx, g, "orig_output", ctx.input(1).shape())) return;
    if (!check_pooled_shape(ctx, g, "grad", ctx.input(2).shape())) return;
    tensor& output = ctx.allocate_output(0, orig_input.shape());
    if (output.num_elements() == 0) return;
    compute_pool& pool = ctx.pool();
    tensor in = nhwc_view<T>(orig_input, options_.nchw, pool);
    tensor grad = nhwc_view<T>(ctx.input(2), options_.nchw, pool);
    into_output<T>(output, in.shape(), pool, [&](T* out) {
      max_pool_grad(g, in.data<T>(), grad.data<T>(), out, pool);
    });
  }
};

template <class T>
class avg_pool_kernel final : public pool_kernel_base {
 public:
  using pool_kernel_base::pool_kernel_base;

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    window_geometry g;
    if (!make_geometry(ctx, input.shape(), "value", &g)) return;
    tensor& output = ctx.allocate_output(0, output_shape(g));
    if (output.num_elements() == 0) return;
    compute_pool& pool = ctx.pool();
    tensor in = nhwc_view<T>(input, options_.nchw, pool);
    into_output<T>(output, tensor_shape{g.batch, g.out_h, g.out_w, g.channels}, pool,
                   [&](T* out) { avg_pool(g, in.data<T>(), out, pool); });
  }
};

template <class T>
class avg_pool_grad_kernel final : public pool_kernel_base {
 public:
  using pool_kernel_base::pool_kernel_base;

  void compute(kernel_context& ctx) override {
    const tensor& sizes = ctx.input(0);
    if (sizes.rank() != 1 || sizes.num_elements() != 4) {
      ctx.fail_invalid_argument("orig_input_shape must be a vector of 4 sizes but has shape ",
                                sizes.shape());
      return;
    }
    std::vector<std::int64_t> dims;
    for (std::int32_t d : sizes.flat<std::int32_t>()) {
      if (d < 0) {
        ctx.fail_invalid_argument("orig_input_shape ", sizes.debug_string(),
                                  " has a negative size");
        return;
      }
      dims.push_back(d);
    }
    tensor_shape input_shape(std::move(dims));
    window_geometry g;
    if (!make_geometry(ctx, input_shape, "orig_input_shape", &g)) return;
    if (!check_pooled_shape(ctx, g, "grad", ctx.input(1).shape())) return;
    tensor& output = ctx.allocate_output(0, input_shape);
    if (output.num_elements() == 0) return;
    compute_pool& pool = ctx.pool();
    tensor grad = nhwc_view<T>(ctx.input(1), options_.nchw, pool);
    into_output<T>(output, to_nhwc_shape(input_shape, options_.nchw), pool,
                   [&](T* out) { avg_pool_grad(g, grad.data<T>(), out, pool); });
  }
};

}  // namespace

void register_pool_kernels(kernel_registry& registry) {
  using types = type_list<float, double>;
  add_typed_kernels<max_pool_kernel, types>(registry, "MaxPool");
  add_typed_kernels<max_pool_grad_kernel, types>(registry, "MaxPoolGrad");
  add_typed_kernels<avg_pool_kernel, types>(registry, "AvgPool");
  add_typed_kernels<avg_pool_grad_kernel, types>(registry, "AvgPoolGrad");
}

}  // namespace troupe::kernels
