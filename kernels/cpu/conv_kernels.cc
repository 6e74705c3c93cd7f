// CPU kernels: Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter (float, double) as
// im2col + gemm on NHWC images; NCHW is transposed to NHWC and back (float32 NCHW goes to
// oneDNN untransposed first).
//
// With the HWIO filter seen as a [K = kh*kw*in_c, out_c] matrix and the patches of the
// input as an [M = batch*out_h*out_w, K] matrix (one row per output pixel, laid out
// [kh, kw, in_c] like the filter), the three ops are gemms:
//
//   Conv2D                output[M, out_c]    = patches * filter
//   Conv2DBackpropInput   d_patches[M, K]     = out_backprop * filter^T, then col2im adds
//                                               each patch row back into its window
//   Conv2DBackpropFilter  d_filter[K, out_c]  = patches^T * out_backprop
//
// A 1x1 filter with stride 1 and no padding needs no patches: the NHWC input already is
// the [M, in_c] matrix. Otherwise the patches are built a chunk of rows at a time (about
// k_chunk_bytes, so they stay in cache between im2col and the gemm's packing) with the
// rows of a chunk split over the compute pool; each gemm runs on one thread (OpenBLAS, or
// for float oneDNN's sgemm when MatMul measured it faster: kernels/cpu/gemm_backend.h). float32
// convolutions run on oneDNN (kernels/cpu/onednn_conv.h), here, or for the forward pass and
// the filter gradient on the direct AVX-512 kernels (kernels/cpu/direct_conv.h),
// whichever each pass and geometry measures fastest on its first call (fastest_path);
// TROUPE_CONV=onednn, im2col or direct fixes the path. Measured on LeNet and AlexNet layers
// against PyTorch in bench/conv_bench.cc and bench/peers/conv_peer.py.
#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/direct_conv.h"
#include "kernels/cpu/fastest.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/onednn_conv.h"
#include "kernels/cpu/spatial.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

namespace {

// The patch buffer of one chunk: big enough for gemms of a few hundred rows, small enough
// to stay in the L2/L3 caches between im2col and the gemm.
constexpr std::int64_t k_chunk_bytes = 1 << 20;

struct conv_shape {
  window_geometry g;
  std::int64_t out_c = 0;
  std::int64_t rows() const { return g.batch * g.out_h * g.out_w; }   // M
  std::int64_t patch() const { return g.window_h * g.window_w * g.channels; }  // K
  // A 1x1 filter at stride 1 without padding: the input is the patch matrix.
  bool pointwise() const {
    return g.window_h == 1 && g.window_w == 1 && g.stride_h == 1 && g.stride_w == 1 &&
           g.pad_top == 0 && g.pad_left == 0 && g.out_h == g.in_h && g.out_w == g.in_w;
  }
};

// Writes patch rows [row_begin, row_end) of the NHWC input to `patches` (row-major, K
// columns), zeros where the window hangs over the padding.
template <class T>
void im2col(const conv_shape& s, const T* input, std::int64_t row_begin, std::int64_t row_end,
            T* patches) {
  const window_geometry& g = s.g;
  const std::int64_t k = s.patch();
  const std::int64_t c = g.channels;
  const std::int64_t window_row = g.window_w * c;
  std::int64_t ox = row_begin % g.out_w;
  std::int64_t oy = (row_begin / g.out_w) % g.out_h;
  std::int64_t n = row_begin / (g.out_w * g.out_h);
  for (std::int64_t row = row_begin; row < row_end; ++row) {
    T* dst = patches + (row - row_begin) * k;
    const T* image = input + n * g.in_h * g.in_w * c;
    const std::int64_t iy0 = oy * g.stride_h - g.pad_top;
    const std::int64_t ix0 = ox * g.stride_w - g.pad_left;
    for (std::int64_t ky = 0; ky < g.window_h; ++ky) {
      T* dst_row = dst + ky * window_row;
      const std::int64_t iy = iy0 + ky * g.dilation_h;
      if (iy < 0 || iy >= g.in_h) {
        std::fill_n(dst_row, window_row, T(0));
        continue;
      }
      const T* src_row = image + iy * g.in_w * c;
      if (g.dilation_w == 1) {
        // The in-bounds part of the window's row is contiguous in NHWC.
        std::int64_t kx_begin = std::clamp<std::int64_t>(-ix0, 0, g.window_w);
        std::int64_t kx_end = std::clamp<std::int64_t>(g.in_w - ix0, kx_begin, g.window_w);
        std::fill_n(dst_row, kx_begin * c, T(0));
        std::memcpy(dst_row + kx_begin * c, src_row + (ix0 + kx_begin) * c,
                    static_cast<std::size_t>((kx_end - kx_begin) * c) * sizeof(T));
        std::fill_n(dst_row + kx_end * c, (g.window_w - kx_end) * c, T(0));
      } else {
        for (std::int64_t kx = 0; kx < g.window_w; ++kx) {
          const std::int64_t ix = ix0 + kx * g.dilation_w;
          if (ix < 0 || ix >= g.in_w) std::fill_n(dst_row + kx * c, c, T(0));
          else std::memcpy(dst_row + kx * c, src_row + ix * c, static_cast<std::size_t>(c) * sizeof(T));
        }
      }
    }
    if (++ox == g.out_w) {
      ox = 0;
      if (++oy == g.out_h) {
        oy = 0;
        ++n;
      }
    }
  }
}

// Adds patch rows [row_begin, row_end) back into their windows of the NHWC input gradient
// (the adjoint of im2col). REQUIRES: no other thread writes the same images meanwhile.
template <class T>
void col2im(const conv_shape& s, const T* patches, std::int64_t row_begin, std::int64_t row_end,
            T* input_grad) {
  const window_geometry& g = s.g;
  const std::int64_t k = s.patch();
  const std::int64_t c = g.channels;
  const std::int64_t window_row = g.window_w * c;
  std::int64_t ox = row_begin % g.out_w;
  std::int64_t oy = (row_begin / g.out_w) % g.out_h;
  std::int64_t n = row_begin / (g.out_w * g.out_h);
  for (std::int64_t row = row_begin; row < row_end; ++row) {
    const T* src = patches + (row - row_begin) * k;
    T* image = input_grad + n * g.in_h * g.in_w * c;
    const std::int64_t iy0 = oy * g.stride_h - g.pad_top;
    const std::int64_t ix0 = ox * g.stride_w - g.pad_left;
    for (std::int64_t ky = 0; ky < g.window_h; ++ky) {
      const std::int64_t iy = iy0 + ky * g.dilation_h;
      if (iy < 0 || iy >= g.in_h) continue;
      const T* src_row = src + ky * window_row;
      T* dst_row = image + iy * g.in_w * c;
      if (g.dilation_w == 1) {
        std::int64_t kx_begin = std::clamp<std::int64_t>(-ix0, 0, g.window_w);
        std::int64_t kx_end = std::clamp<std::int64_t>(g.in_w - ix0, kx_begin, g.window_w);
        const T* from = src_row + kx_begin * c;
        T* to = dst_row + (ix0 + kx_begin) * c;
        for (std::int64_t i = 0, e = (kx_end - kx_begin) * c; i < e; ++i) to[i] += from[i];
      } else {
        for (std::int64_t kx = 0; kx < g.window_w; ++kx) {
          const std::int64_t ix = ix0 + kx * g.dilation_w;
          if (ix < 0 || ix >= g.in_w) continue;
          const T* from = src_row + kx * c;
          T* to = dst_row + ix * c;
          for (std::int64_t i = 0; i < c; ++i) to[i] += from[i];
        }
      }
    }
    if (++ox == g.out_w) {
      ox = 0;
      if (++oy == g.out_h) {
        oy = 0;
        ++n;
      }
    }
  }
}

// Rows of the patch matrix per chunk.
template <class T>
std::int64_t chunk_rows(const conv_shape& s) {
  return std::max<std::int64_t>(1, k_chunk_bytes / (s.patch() * static_cast<std::int64_t>(sizeof(T))));
}

// The thread budget: OpenBLAS runs single-threaded and the work is split into blocks
// of chunks over the compute pool, so concurrent convolutions (a backward pass runs the
// input and filter gradients at once) share the pool's threads instead of each starting
// OpenBLAS threads that spin against each other on two cores.

// Calls fn(begin, end, scratch) for row ranges of at most `chunk` rows covering [0, m),
// in parallel over the pool; each block has its own scratch of chunk * k elements.
template <class T, class Fn>
void for_each_chunk(std::int64_t m, std::int64_t chunk, std::int64_t k, double cost_per_chunk,
                    compute_pool& pool, const Fn& fn) {
  const std::int64_t chunks = (m + chunk - 1) / chunk;
  pool.parallel_for(chunks, cost_per_chunk, [&](std::int64_t c0, std::int64_t c1) {
    tensor scratch(dtype_of<T>, tensor_shape{chunk * k});
    for (std::int64_t c = c0; c < c1; ++c) {
      fn(c * chunk, std::min(m, (c + 1) * chunk), scratch.data<T>());
    }
  });
}

// onednn::convolve for float; unimplemented for other types.
template <class T>
status onednn_convolve(onednn::conv_pass pass, const conv_shape& s, const T* a, const T* b, T* out,
                       compute_pool& pool, onednn::image_layout layout = onednn::image_layout::nhwc) {
  if constexpr (std::is_same_v<T, float>) {
    return onednn::convolve(pass, s.g, s.out_c, layout, a, b, out, pool);
  } else {
    return unimplemented_error("oneDNN convolutions are float32 only");
  }
}

// Runs `pass` on NCHW images through oneDNN when T is float, TROUPE_CONV allows it and
// oneDNN has a primitive for the geometry (one of its candidates works on NHWC, so this
// is never slower than transposing to the NHWC path); true when it did (`*error` is its
// status), false when the caller should transpose to NHWC instead.
template <class T>
bool try_onednn_nchw(onednn::conv_pass pass, const conv_shape& s, const T* a, const T* b, T* out,
                     compute_pool& pool, status* error) {
  if (!std::is_same_v<T, float>) return false;
  const auto& setting = onednn::conv_path_setting();
  if (!setting.ok()) {
    *error = setting.error();
    return true;
  }
  // A fixed direct path runs (or refuses to run) on NHWC, like im2col.
  if (*setting == onednn::conv_path::im2col ||
      (*setting == onednn::conv_path::direct && pass != onednn::conv_pass::backward_data)) {
    return false;
  }
  status st = onednn_convolve(pass, s, a, b, out, pool, onednn::image_layout::nchw);
  if (st.error_code() == code::unimplemented) return false;
  *error = std::move(st);
  return true;
}

// Which path each float32 NHWC pass and geometry measured faster at each pool size, once
// per process.
class measured_paths {
 public:
  using key = std::array<std::int64_t, 17>;
  static key make_key(onednn::conv_pass pass, const conv_shape& s, int threads) {
    return prefixed_key<3>({static_cast<std::int64_t>(pass), threads, s.g.batch}, s.g, s.out_c);
  }
  std::optional<onednn::conv_path> find(const key& k) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = paths_.find(k);
    if (it == paths_.end()) return std::nullopt;
    return it->second;
  }
  // Keeps the first answer for `k` (two threads may measure the same geometry at once).
  void remember(const key& k, onednn::conv_path path) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (paths_.size() >= 4096) paths_.clear();
    paths_.emplace(k, path);
  }

 private:
  std::mutex mutex_;
  std::map<key, onednn::conv_path> paths_;
};

// Runs one pass on NHWC images by oneDNN (`on_onednn`, returning its status), by im2col +
// gemm (`on_im2col`) or, where given and the processor has AVX-512, by the direct kernel
// (`on_direct`, kernels/cpu/direct_conv.h), whichever is fastest for the geometry: all
// run and are timed (fastest_candidate, two rounds) on its first call, the fastest writes
// the output last, and later calls of the geometry take that path. Measured here: oneDNN
// wins most layers by 2-3x, but im2col + gemm won AlexNet conv1's input gradient (11x11
// windows at stride 4 over 3 channels) by 40%, the direct kernel its filter gradient, and
// which one wins moves with the processor. TROUPE_CONV=onednn, im2col or direct fixes the
// path. double always takes im2col + gemm.
template <class T, class OneDnn, class Im2col>
status fastest_path(onednn::conv_pass pass, const conv_shape& s, compute_pool& pool, OneDnn&& on_onednn,
                    Im2col&& on_im2col, const std::function<void()>& on_direct = {}) {
  if constexpr (!std::is_same_v<T, float>) {
    on_im2col();
    return status();
  } else {
    using onednn::conv_path;
    const bool direct_runs = on_direct && direct_conv::available();
    const auto& configured = onednn::conv_path_setting();
    if (!configured.ok()) return configured.error();
    conv_path setting = *configured;
    if (setting == conv_path::direct && !on_direct) setting = conv_path::tuned;  // no direct input gradient
    if (setting == conv_path::direct && !direct_runs) {
      return failed_precondition_error("TROUPE_CONV=direct, but the direct convolution kernels need AVX-512F, which ",
                                       avx512_hidden() ? "TROUPE_HIDE_AVX512 hides" : "this processor lacks",
                                       "; unset it or choose onednn or im2col");
    }
    static measured_paths* paths = new measured_paths();  // never destroyed: used until exit
    const measured_paths::key k = measured_paths::make_key(pass, s, pool.num_threads());
    const std::optional<conv_path> known = setting == conv_path::tuned ? paths->find(k) : std::optional(setting);
    if (known == conv_path::im2col) {
      on_im2col();
      return status();
    }
    if (known == conv_path::direct) {
      on_direct();
      return status();
    }
    status st = on_onednn();  // on a first call, builds (and tunes) oneDNN's primitives
    const bool onednn_runs = st.error_code() != code::unimplemented;
    if (known.has_value() || (onednn_runs && !st.ok())) {
      if (onednn_runs) return st;
      paths->remember(k, conv_path::im2col);
      on_im2col();
      return status();
    }
    // The candidates, oneDNN last when it has a primitive, so its output stands unless
    // another wins and runs once more.
    std::vector<std::pair<conv_path, std::function<void()>>> options{{conv_path::im2col, on_im2col}};
    if (direct_runs) options.emplace_back(conv_path::direct, on_direct);
    if (onednn_runs) {
      options.emplace_back(conv_path::onednn, [&] {
        if (status again = on_onednn(); !again.ok() && st.ok()) st = std::move(again);
      });
    }
    std::size_t fastest = 0;
    if (options.size() > 1) {
      std::vector<std::function<void()>> runs;
      for (const auto& option : options) runs.push_back(option.second);
      fastest = fastest_candidate(runs, /*rounds=*/2);
      if (!st.ok()) return st;
    }
    paths->remember(k, options[fastest].first);
    if (options.size() == 1 || fastest + 1 != options.size()) options[fastest].second();
    return status();
  }
}

// output[M, out_c] = patches(input) * filter.
template <class T>
void im2col_forward(const conv_shape& s, const T* input, const T* filter, T* output,
                    compute_pool& pool) {
  const std::int64_t m = s.rows(), k = s.patch(), n = s.out_c;
  if (s.pointwise()) {
    pool.parallel_for(m, gemm_ns(1, n, k), [&](std::int64_t b, std::int64_t e) {
      gemm(false, false, e - b, n, k, T(1), input + b * k, k, filter, n, T(0), output + b * n, n);
    });
    return;
  }
  const std::int64_t chunk = std::min(chunk_rows<T>(s), m);
  for_each_chunk<T>(m, chunk, k, gemm_ns(chunk, n, k) + 0.3 * static_cast<double>(chunk * k), pool,
                    [&](std::int64_t begin, std::int64_t end, T* patches) {
                      im2col(s, input, begin, end, patches);
                      gemm(false, false, end - begin, n, k, T(1), patches, k, filter, n, T(0),
                                output + begin * n, n);
                    });
}

template <class T>
status conv_forward(const conv_shape& s, const T* input, const T* filter, T* output,
                    compute_pool& pool) {
  std::function<void()> direct;
  if constexpr (std::is_same_v<T, float>) {
    direct = [&] { direct_conv::forward(s.g, s.out_c, input, filter, output, pool); };
  }
  return fastest_path<T>(
      onednn::conv_pass::forward, s, pool,
      [&] { return onednn_convolve(onednn::conv_pass::forward, s, input, filter, output, pool); },
      [&] { im2col_forward(s, input, filter, output, pool); }, direct);
}

// input_grad = col2im(out_backprop * filter^T).
template <class T>
void im2col_backprop_input(const conv_shape& s, const T* filter, const T* out_backprop,
                           T* input_grad, compute_pool& pool) {
  const window_geometry& g = s.g;
  const std::int64_t m = s.rows(), k = s.patch(), n = s.out_c;
  if (s.pointwise()) {
    pool.parallel_for(m, gemm_ns(1, k, n), [&](std::int64_t b, std::int64_t e) {
      gemm(false, true, e - b, k, n, T(1), out_backprop + b * n, n, filter, n, T(0), input_grad + b * k, k);
    });
    return;
  }
  // Windows of one image overlap, so blocks are whole images: each block zeroes and
  // accumulates only its own images' gradients.
  const std::int64_t per_image = g.out_h * g.out_w;
  const std::int64_t image_size = g.in_h * g.in_w * g.channels;
  const std::int64_t chunk = std::min(chunk_rows<T>(s), m);
  pool.parallel_for(g.batch, gemm_ns(per_image, k, n) + static_cast<double>(per_image * k),
                    [&](std::int64_t i0, std::int64_t i1) {
                      std::fill_n(input_grad + i0 * image_size, (i1 - i0) * image_size, T(0));
                      tensor scratch(dtype_of<T>, tensor_shape{chunk * k});
                      T* d_patches = scratch.data<T>();
                      const std::int64_t last = i1 * per_image;
                      for (std::int64_t begin = i0 * per_image; begin < last; begin += chunk) {
                        std::int64_t end = std::min(last, begin + chunk);
                        gemm(false, true, end - begin, k, n, T(1), out_backprop + begin * n, n, filter,
                                  n, T(0), d_patches, k);
                        col2im(s, d_patches, begin, end, input_grad);
                      }
                    });
}

template <class T>
status conv_backprop_input(const conv_shape& s, const T* filter, const T* out_backprop,
                           T* input_grad, compute_pool& pool) {
  return fastest_path<T>(
      onednn::conv_pass::backward_data, s, pool,
      [&] { return onednn_convolve(onednn::conv_pass::backward_data, s, filter, out_backprop, input_grad, pool); },
      [&] { im2col_backprop_input(s, filter, out_backprop, input_grad, pool); });
}

// filter_grad[K, out_c] = patches(input)^T * out_backprop.
//
// The rows are summed in groups of chunks fixed by the shape (about 8 groups, whatever
// the thread count): each group into its own partial gradient (the gemm accumulating
// chunk after chunk), the partials then added in group order, so that the result has the
// same bits on every run and pool size.
template <class T>
void im2col_backprop_filter(const conv_shape& s, const T* input, const T* out_backprop,
                            T* filter_grad, compute_pool& pool) {
  const std::int64_t m = s.rows(), k = s.patch(), n = s.out_c;
  std::fill_n(filter_grad, k * n, T(0));
  if (m == 0 || k == 0 || n == 0) return;
  const std::int64_t chunk = std::min(chunk_rows<T>(s), m);
  const std::int64_t chunks = (m + chunk - 1) / chunk;
  const std::int64_t chunks_per_group = std::max<std::int64_t>(1, chunks / 8);
  const std::int64_t groups = (chunks + chunks_per_group - 1) / chunks_per_group;
  std::vector<T> partials(static_cast<std::size_t>(groups * k * n));
  const bool pointwise = s.pointwise();
  const double group_ns =
      static_cast<double>(chunks_per_group) * (gemm_ns(chunk, n, k) + 0.3 * static_cast<double>(chunk * k));
  pool.parallel_for(groups, group_ns,
                    [&](std::int64_t g0, std::int64_t g1) {
                      tensor scratch(dtype_of<T>, tensor_shape{pointwise ? 0 : chunk * k});
                      T* patches = scratch.data<T>();
                      for (std::int64_t group = g0; group < g1; ++group) {
                        T* partial = partials.data() + group * k * n;
                        const std::int64_t c0 = group * chunks_per_group;
                        const std::int64_t c1 = std::min(chunks, c0 + chunks_per_group);
                        for (std::int64_t c = c0; c < c1; ++c) {
                          const std::int64_t begin = c * chunk, end = std::min(m, begin + chunk);
                          // A 1x1 filter at stride 1: the input rows are the patches.
                          const T* rows = pointwise ? input + begin * k : patches;
                          if (!pointwise) im2col(s, input, begin, end, patches);
                          gemm(true, false, k, n, end - begin, T(1), rows, k, out_backprop + begin * n, n,
                                    c == c0 ? T(0) : T(1), partial, n);
                        }
                      }
                    });
  for (std::int64_t group = 0; group < groups; ++group) {
    const T* partial = partials.data() + group * k * n;
    for (std::int64_t i = 0; i < k * n; ++i) filter_grad[i] += partial[i];
  }
}

template <class T>
status conv_backprop_filter(const conv_shape& s, const T* input, const T* out_backprop,
                            T* filter_grad, compute_pool& pool) {
  if (s.rows() == 0 || s.patch() == 0 || s.out_c == 0) {
    im2col_backprop_filter(s, input, out_backprop, filter_grad, pool);  // zeros
    return status();
  }
  std::function<void()> direct;
  if constexpr (std::is_same_v<T, float>) {
    direct = [&] { direct_conv::backprop_filter(s.g, s.out_c, input, out_backprop, filter_grad, pool); };
  }
  return fastest_path<T>(
      onednn::conv_pass::backward_weights, s, pool,
      [&] { return onednn_convolve(onednn::conv_pass::backward_weights, s, input, out_backprop, filter_grad, pool); },
      [&] { im2col_backprop_filter(s, input, out_backprop, filter_grad, pool); }, direct);
}

// True when `s` is ok; otherwise fails ctx with it.
inline bool succeeded(kernel_context& ctx, status s) {
  if (s.ok()) return true;
  ctx.fail(std::move(s));
  return false;
}

// What every convolution kernel shares: the validated window attributes, and the checks
// that turn input shapes into a conv_shape.
class conv_kernel_base : public op_kernel {
 public:
  explicit conv_kernel_base(kernel_construction& c) : op_kernel(c) {
    status s = read_window_options(c.node(), /*with_dilations=*/true, /*with_ksize=*/false,
                                   &options_);
    if (!s.ok()) c.fail(std::move(s));
  }

 protected:
  // The shape for an (NHWC-or-NCHW) input shape and an HWIO filter shape; `what_input`
  // names the input in errors. False after failing ctx.
  bool make_shape(kernel_context& ctx, const tensor_shape& input, std::string_view what_input,
                  const tensor_shape& filter, conv_shape* s) const {
    if (input.rank() != 4) {
      ctx.fail_invalid_argument(what_input, " must be 4-D (", format(), ") but is ", input);
      return false;
    }
    if (filter.rank() != 4) {
      ctx.fail_invalid_argument("filter must be 4-D [height, width, in_channels, out_channels] "
                                "but is ", filter);
      return false;
    }
    tensor_shape nhwc = to_nhwc_shape(input, options_.nchw);
    if (nhwc.dim(3) != filter.dim(2)) {
      ctx.fail_invalid_argument(what_input, " ", input, " (", format(), ") has ", nhwc.dim(3),
                                " channels but filter ", filter, " expects ", filter.dim(2),
                                " (grouped convolution is not supported)");
      return false;
    }
    constexpr std::int64_t k_blas_max = std::numeric_limits<blasint>::max();
    if (filter.dim(0) * filter.dim(1) * filter.dim(2) > k_blas_max || filter.dim(3) > k_blas_max ||
        nhwc.dim(1) * nhwc.dim(2) * nhwc.dim(3) > k_blas_max) {
      ctx.fail(unimplemented_error("Conv2D of ", input, " with filter ", filter,
                                   ": a dimension exceeds the BLAS index range"));
      return false;
    }
    status st = make_window_geometry(nhwc.dim(0), nhwc.dim(1), nhwc.dim(2), nhwc.dim(3),
                                     filter.dim(0), filter.dim(1), options_, &s->g);
    if (!st.ok()) {
      ctx.fail_invalid_argument(what_input, " ", input, " (", format(), "), filter ", filter,
                                ", ", options_.describe(), ": ", st.message());
      return false;
    }
    s->out_c = filter.dim(3);
    return true;
  }

  tensor_shape output_shape(const conv_shape& s) const {
    return from_nhwc_shape(tensor_shape{s.g.batch, s.g.out_h, s.g.out_w, s.out_c}, options_.nchw);
  }
  tensor_shape input_shape(const conv_shape& s) const {
    return from_nhwc_shape(tensor_shape{s.g.batch, s.g.in_h, s.g.in_w, s.g.channels},
                           options_.nchw);
  }

  // A 4-element int32 shape operand (input_sizes, filter_sizes), or false after failing ctx.
  static bool read_sizes(kernel_context& ctx, int index, std::string_view what,
                         tensor_shape* out) {
    const tensor& t = ctx.input(index);
    if (t.rank() != 1 || t.num_elements() != 4) {
      ctx.fail_invalid_argument(what, " must be a vector of 4 sizes but has shape ", t.shape());
      return false;
    }
    std::vector<std::int64_t> dims;
    for (std::int32_t d : t.flat<std::int32_t>()) {
      if (d < 0) {
        ctx.fail_invalid_argument(what, " ", t.debug_string(), " has a negative size");
        return false;
      }
      dims.push_back(d);
    }
    *out = tensor_shape(std::move(dims));
    return true;
  }

  // Checks out_backprop has the forward output's shape.
  bool check_out_backprop(kernel_context& ctx, const conv_shape& s, const tensor_shape& got) const {
    tensor_shape want = output_shape(s);
    if (got != want) {
      ctx.fail_invalid_argument("out_backprop ", got, " must have the forward output's shape ",
                                want, " (", format(), ", ", options_.describe(), ")");
      return false;
    }
    return true;
  }

  const char* format() const { return options_.nchw ? "NCHW" : "NHWC"; }

  window_options options_;
};

template <class T>
class conv2d_kernel final : public conv_kernel_base {
 public:
  using conv_kernel_base::conv_kernel_base;

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    const tensor& filter = ctx.input(1);
    conv_shape s;
    if (!make_shape(ctx, input.shape(), "input", filter.shape(), &s)) return;
    tensor& output = ctx.allocate_output(0, output_shape(s));
    if (output.num_elements() == 0) return;
    if (s.patch() == 0) {
      std::fill_n(output.data<T>(), output.num_elements(), T(0));
      return;
    }
    compute_pool& pool = ctx.pool();
    if (status st; options_.nchw && try_onednn_nchw(onednn::conv_pass::forward, s, input.data<T>(), filter.data<T>(),
                                                    output.data<T>(), pool, &st)) {
      succeeded(ctx, std::move(st));
      return;
    }
    use_openblas_threads(1);
    tensor nhwc_input = nhwc_view<T>(input, options_.nchw, pool);
    if (!options_.nchw) {
      succeeded(ctx, conv_forward(s, nhwc_input.data<T>(), filter.data<T>(), output.data<T>(), pool));
      return;
    }
    tensor nhwc_output(dtype_of<T>, tensor_shape{s.g.batch, s.g.out_h, s.g.out_w, s.out_c});
    if (!succeeded(ctx, conv_forward(s, nhwc_input.data<T>(), filter.data<T>(),
                                        nhwc_output.data<T>(), pool))) {
      return;
    }
    transpose_images<T>(nhwc_output.data<T>(), output.data<T>(), nhwc_output.shape(), false, pool);
  }
};

template <class T>
class conv2d_backprop_input_kernel final : public conv_kernel_base {
 public:
  using conv_kernel_base::conv_kernel_base;

  void compute(kernel_context& ctx) override {
    tensor_shape input_sizes;
    if (!read_sizes(ctx, 0, "input_sizes", &input_sizes)) return;
    const tensor& filter = ctx.input(1);
    const tensor& out_backprop = ctx.input(2);
    conv_shape s;
    if (!make_shape(ctx, input_sizes, "input_sizes", filter.shape(), &s)) return;
    if (!check_out_backprop(ctx, s, out_backprop.shape())) return;
    tensor& input_grad = ctx.allocate_output(0, input_sizes);
    if (input_grad.num_elements() == 0) return;
    if (out_backprop.num_elements() == 0 || s.patch() == 0) {
      std::fill_n(input_grad.data<T>(), input_grad.num_elements(), T(0));
      return;
    }
    compute_pool& pool = ctx.pool();
    if (status st; options_.nchw && try_onednn_nchw(onednn::conv_pass::backward_data, s, filter.data<T>(),
                                                    out_backprop.data<T>(), input_grad.data<T>(), pool, &st)) {
      succeeded(ctx, std::move(st));
      return;
    }
    use_openblas_threads(1);
    tensor nhwc_backprop = nhwc_view<T>(out_backprop, options_.nchw, pool);
    if (!options_.nchw) {
      succeeded(ctx, conv_backprop_input(s, filter.data<T>(), nhwc_backprop.data<T>(),
                                            input_grad.data<T>(), pool));
      return;
    }
    tensor nhwc_grad(dtype_of<T>, to_nhwc_shape(input_sizes, true));
    if (!succeeded(ctx, conv_backprop_input(s, filter.data<T>(), nhwc_backprop.data<T>(),
                                               nhwc_grad.data<T>(), pool))) {
      return;
    }
    transpose_images<T>(nhwc_grad.data<T>(), input_grad.data<T>(), nhwc_grad.shape(), false, pool);
  }
};

template <class T>
class conv2d_backprop_filter_kernel final : public conv_kernel_base {
 public:
  using conv_kernel_base::conv_kernel_base;

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    tensor_shape filter_sizes;
    if (!read_sizes(ctx, 1, "filter_sizes", &filter_sizes)) return;
    const tensor& out_backprop = ctx.input(2);
    conv_shape s;
    if (!make_shape(ctx, input.shape(), "input", filter_sizes, &s)) return;
    if (!check_out_backprop(ctx, s, out_backprop.shape())) return;
    tensor& filter_grad = ctx.allocate_output(0, filter_sizes);
    if (filter_grad.num_elements() == 0) return;
    compute_pool& pool = ctx.pool();
    if (status st; options_.nchw && s.rows() > 0 &&
                   try_onednn_nchw(onednn::conv_pass::backward_weights, s, input.data<T>(),
                                                    out_backprop.data<T>(), filter_grad.data<T>(), pool, &st)) {
      succeeded(ctx, std::move(st));
      return;
    }
    use_openblas_threads(1);
    tensor nhwc_input = nhwc_view<T>(input, options_.nchw, pool);
    tensor nhwc_backprop = nhwc_view<T>(out_backprop, options_.nchw, pool);
    succeeded(ctx, conv_backprop_filter(s, nhwc_input.data<T>(), nhwc_backprop.data<T>(),
                                           filter_grad.data<T>(), pool));
  }
};

}  // namespace

void register_conv_kernels(kernel_registry& registry) {
  using types = type_list<float, double>;
  add_typed_kernels<conv2d_kernel, types>(registry, "Conv2D");
  add_typed_kernels<conv2d_backprop_input_kernel, types>(registry, "Conv2DBackpropInput");
  add_typed_kernels<conv2d_backprop_filter_kernel, types>(registry, "Conv2DBackpropFilter");
}

}  // namespace troupe::kernels
