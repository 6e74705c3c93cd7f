// The direct float32 convolutions of direct_conv.h: AVX-512 register tiles. The kernels
// (the anonymous namespace) are compiled for AVX-512F by target pragma, whatever the rest
// of the build targets, and run only where the processor has it; the entry points below
// them are compiled for the build's target and check.
#include "kernels/cpu/direct_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_features.h"

namespace troupe::kernels::direct_conv {

#pragma GCC push_options
#pragma GCC target("avx512f")
namespace {

constexpr int k_lanes = k_avx512_float_lanes;
constexpr int k_max_vectors = 4;  // output channels per tile: 4 vectors of 16
// The filter gradient's output rows per group: their out_backprop and input rows, about
// this many bytes, stay in the L2 cache while every tile passes over them.
constexpr std::int64_t k_group_bytes = 512 << 10;

// Tile rows (output pixels in the forward pass, filter rows in the filter gradient) for
// a tile `vectors` wide: as many as keep rows x vectors accumulators, the loaded vectors
// and one broadcast within the 32 vector registers.
constexpr int tile_rows(int vectors) {
  return vectors == 4 ? 6 : vectors == 3 ? 8 : vectors == 2 ? 12 : 14;
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// What both passes share: the geometry's per-row input offsets and the range of output
// columns whose windows lie inside the image.
struct layout {
  const window_geometry& g;
  std::int64_t out_c;
  std::int64_t rows;     // KH * KW * C
  std::int64_t step;     // stride_w * C: the input offset between neighbouring output columns
  std::int64_t row_len;  // W * C: one input image row
  // Per filter row r = (kh, kw, ci): kh, kw, and its input offset within an image row
  // at ow = 0, (kw * dilation_w - pad_left) * C + ci (negative inside the left padding).
  std::vector<std::int64_t> kh, kw, column;
  // Per filter column kw: the output columns [begin, end) at which it reads inside the image.
  std::vector<std::int64_t> begin_of, end_of;
  // Zeros standing in for input rows in the padding: zero_origin[column[r] + ow * step]
  // is readable for every output column inside the image.
  std::vector<float> zero_buffer;
  const float* zero_origin;

  layout(const window_geometry& geometry, std::int64_t oc)
      : g(geometry),
        out_c(oc),
        rows(g.window_h * g.window_w * g.channels),
        step(g.stride_w * g.channels),
        row_len(g.in_w * g.channels),
        zero_buffer(static_cast<std::size_t>(g.pad_left * g.channels + row_len), 0.0f),
        zero_origin(zero_buffer.data() + g.pad_left * g.channels) {
    kh.reserve(rows);
    kw.reserve(rows);
    column.reserve(rows);
    for (std::int64_t y = 0; y < g.window_h; ++y) {
      for (std::int64_t x = 0; x < g.window_w; ++x) {
        for (std::int64_t c = 0; c < g.channels; ++c) {
          kh.push_back(y);
          kw.push_back(x);
          column.push_back((x * g.dilation_w - g.pad_left) * g.channels + c);
        }
      }
    }
    for (std::int64_t x = 0; x < g.window_w; ++x) {
      const std::int64_t begin = std::clamp<std::int64_t>(
          floor_div(g.pad_left - x * g.dilation_w + g.stride_w - 1, g.stride_w), 0, g.out_w);
      begin_of.push_back(begin);
      end_of.push_back(std::clamp<std::int64_t>(
          floor_div(g.in_w - 1 + g.pad_left - x * g.dilation_w, g.stride_w) + 1, begin, g.out_w));
    }
  }

  // The input row that filter row `r` meets at output row (n, oh), or nullptr in the padding.
  const float* input_row(const float* input, std::int64_t n, std::int64_t oh, std::int64_t r) const {
    const std::int64_t ih = oh * g.stride_h - g.pad_top + kh[r] * g.dilation_h;
    if (ih < 0 || ih >= g.in_h) return nullptr;
    return input + (n * g.in_h + ih) * row_len;
  }
  bool inside(std::int64_t ow, std::int64_t x) const {
    const std::int64_t ix = ow * g.stride_w - g.pad_left + x * g.dilation_w;
    return ix >= 0 && ix < g.in_w;
  }
};

// Vector k of a tile V vectors wide at p: 16 lanes, but only `tail` in the last unless
// the tile is Full (its mask then a constant the compiler drops).
template <int V, bool Full>
inline __mmask16 lane_mask(int k, int tail) {
  return first_lanes(!Full && k == V - 1 ? tail : k_lanes);
}
template <int V, bool Full>
inline __m512 load_lanes(const float* p, int k, int tail) {
  return _mm512_maskz_loadu_ps(lane_mask<V, Full>(k, tail), p + k * k_lanes);
}
template <int V, bool Full>
inline void store_lanes(float* p, int k, int tail, __m512 v) {
  _mm512_mask_storeu_ps(p + k * k_lanes, lane_mask<V, Full>(k, tail), v);
}

// Output channels [co0, co0 + 16 * V) (the last vector `tail` lanes; Full: 16) of output
// pixels [ow0, ow0 + tile_rows(V)) in row (n, oh). Checked: some of the tile's pixels lie
// past the row's end or some window reaches into the left or right padding.
template <int V, bool Full, bool Checked>
void forward_tile(const layout& l, const float* input, const float* filter, float* output,
                  std::int64_t n, std::int64_t oh, std::int64_t ow0, std::int64_t co0, int tail) {
  constexpr int P = tile_rows(V);
  const window_geometry& g = l.g;
  const std::int64_t step = l.step, out_c = l.out_c;
  const int pixels = Checked ? static_cast<int>(std::min<std::int64_t>(P, g.out_w - ow0)) : P;
  float* out = output + ((n * g.out_h + oh) * g.out_w + ow0) * out_c + co0;
  __m512 acc[P][V];
#pragma GCC unroll 16
  for (int i = 0; i < P; ++i) {
#pragma GCC unroll 4
    for (int k = 0; k < V; ++k) acc[i][k] = _mm512_setzero_ps();
  }
  const std::int64_t per_kh = g.window_w * g.channels;
  for (std::int64_t y = 0; y < g.window_h; ++y) {
    const float* row = l.input_row(input, n, oh, y * per_kh);
    if (row == nullptr) continue;
    const float* at = row + ow0 * step;
    const float* w = filter + y * per_kh * out_c + co0;
    for (std::int64_t j = 0; j < per_kh; ++j, w += out_c) {
      __m512 wv[V];
#pragma GCC unroll 4
      for (int k = 0; k < V; ++k) wv[k] = load_lanes<V, Full>(w, k, tail);
      const float* x = at + l.column[j];
#pragma GCC unroll 16
      for (int i = 0; i < P; ++i) {
        __m512 b;
        if constexpr (Checked) {
          b = i < pixels && l.inside(ow0 + i, l.kw[j]) ? _mm512_set1_ps(x[i * step]) : _mm512_setzero_ps();
        } else {
          b = _mm512_set1_ps(x[i * step]);
        }
#pragma GCC unroll 4
        for (int k = 0; k < V; ++k) acc[i][k] = _mm512_fmadd_ps(b, wv[k], acc[i][k]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < P; ++i) {
    if (Checked && i >= pixels) break;
#pragma GCC unroll 4
    for (int k = 0; k < V; ++k) {
      store_lanes<V, Full>(out + i * out_c, k, tail, acc[i][k]);
    }
  }
}

template <int V, bool Full>
void forward_row(const layout& l, const float* input, const float* filter, float* output,
                 std::int64_t n, std::int64_t oh, std::int64_t co0, int tail) {
  constexpr int P = tile_rows(V);
  // Tiles inside [begin, end) read only inside the image for every filter column.
  const std::int64_t begin = l.begin_of.front();
  const std::int64_t end = l.end_of.back();
  for (std::int64_t ow0 = 0; ow0 < l.g.out_w; ow0 += P) {
    if (ow0 >= begin && ow0 + P <= end) {
      forward_tile<V, Full, false>(l, input, filter, output, n, oh, ow0, co0, tail);
    } else {
      forward_tile<V, Full, true>(l, input, filter, output, n, oh, ow0, co0, tail);
    }
  }
}

// Adds the products of output rows [row_begin, row_end) (rows n * OH + oh) to filter rows
// [r0, r0 + tile_rows(V)) (rows past the last are padding of the tile) at output channels
// [co0, co0 + 16 * V), holding the tile in registers throughout.
template <int V, bool Full>
void filter_tile(const layout& l, const float* input, const float* out_backprop, float* filter_grad,
                 std::int64_t row_begin, std::int64_t row_end, std::int64_t r0, std::int64_t co0,
                 int tail) {
  constexpr int R = tile_rows(V);
  const window_geometry& g = l.g;
  const int real_rows = static_cast<int>(std::min<std::int64_t>(R, l.rows - r0));
  std::int64_t x_of[R];  // each tile row's filter column
  std::int64_t begin = 0, end = g.out_w;  // the output columns where every tile row reads inside the image
#pragma GCC unroll 16
  for (int j = 0; j < R; ++j) {
    x_of[j] = l.kw[std::min(r0 + j, l.rows - 1)];
    begin = std::max(begin, l.begin_of[x_of[j]]);
    end = std::min(end, l.end_of[x_of[j]]);
  }
  end = std::max(begin, end);
  const std::int64_t step = l.step, out_c = l.out_c;
  float* grad = filter_grad + r0 * out_c + co0;
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int j = 0; j < R; ++j) {
#pragma GCC unroll 4
    for (int k = 0; k < V; ++k) {
      acc[j][k] = j < real_rows ? load_lanes<V, Full>(grad + j * out_c, k, tail) : _mm512_setzero_ps();
    }
  }
  // Each tile row's input row below the window's top row, and its offset within a row.
  std::int64_t below[R], column[R];
#pragma GCC unroll 16
  for (int j = 0; j < R; ++j) {
    const std::int64_t r = std::min(r0 + j, l.rows - 1);
    below[j] = l.kh[r] * g.dilation_h;
    column[j] = l.column[r];
  }
  for (std::int64_t row = row_begin; row < row_end; ++row) {
    const std::int64_t n = row / g.out_h, oh = row % g.out_h;
    const std::int64_t top = oh * g.stride_h - g.pad_top;
    const float* image = input + n * g.in_h * l.row_len;
    const float* at[R];
    bool live[R];  // a real filter row (not padding of the tile) whose input row lies inside the image
#pragma GCC unroll 16
    for (int j = 0; j < R; ++j) {
      const std::int64_t ih = top + below[j];
      live[j] = j < real_rows && ih >= 0 && ih < g.in_h;
      at[j] = (live[j] ? image + ih * l.row_len : l.zero_origin) + column[j];
    }
    const float* dy = out_backprop + row * g.out_w * out_c + co0;
    // Left of `begin` and right of `end` some windows reach into the padding: checked.
    auto checked = [&](std::int64_t ow) {
      __m512 d[V];
#pragma GCC unroll 4
      for (int k = 0; k < V; ++k) d[k] = load_lanes<V, Full>(dy + ow * out_c, k, tail);
#pragma GCC unroll 16
      for (int j = 0; j < R; ++j) {
        if (!live[j] || !l.inside(ow, x_of[j])) continue;
        const __m512 b = _mm512_set1_ps(at[j][ow * step]);
#pragma GCC unroll 4
        for (int k = 0; k < V; ++k) acc[j][k] = _mm512_fmadd_ps(b, d[k], acc[j][k]);
      }
    };
    for (std::int64_t ow = 0; ow < begin; ++ow) checked(ow);
    const float* d_at = dy + begin * out_c;
    const float* const d_end = dy + end * out_c;
    for (std::int64_t off = begin * step; d_at < d_end; d_at += out_c, off += step) {
      __m512 d[V];
#pragma GCC unroll 4
      for (int k = 0; k < V; ++k) d[k] = load_lanes<V, Full>(d_at, k, tail);
#pragma GCC unroll 16
      for (int j = 0; j < R; ++j) {
        const __m512 b = _mm512_set1_ps(at[j][off]);
#pragma GCC unroll 4
        for (int k = 0; k < V; ++k) acc[j][k] = _mm512_fmadd_ps(b, d[k], acc[j][k]);
      }
    }
    for (std::int64_t ow = end; ow < g.out_w; ++ow) checked(ow);
  }
#pragma GCC unroll 16
  for (int j = 0; j < real_rows; ++j) {
#pragma GCC unroll 4
    for (int k = 0; k < V; ++k) {
      store_lanes<V, Full>(grad + j * out_c, k, tail, acc[j][k]);
    }
  }
}

// The output channels in tiles of up to k_max_vectors vectors: (first channel, vectors).
struct channel_block {
  std::int64_t co0;
  int vectors;
};
std::vector<channel_block> channel_blocks(std::int64_t out_c) {
  std::vector<channel_block> blocks;
  const std::int64_t vectors = (out_c + k_lanes - 1) / k_lanes;
  for (std::int64_t v = 0; v < vectors; v += k_max_vectors) {
    blocks.push_back({v * k_lanes, static_cast<int>(std::min<std::int64_t>(k_max_vectors, vectors - v))});
  }
  return blocks;
}

// Lanes of the last vector of the block starting at co0 (16 unless it holds the last channel).
int tail_of(const channel_block& b, std::int64_t out_c) {
  const std::int64_t last = out_c - (b.co0 + (b.vectors - 1) * k_lanes);
  return static_cast<int>(std::min<std::int64_t>(k_lanes, last));
}

// Nanoseconds for `flops` on one core, for the pool's cost estimates (about 100 GFLOP/s).
double flops_ns(double flops) { return flops / 100.0; }

}  // namespace
#pragma GCC pop_options

bool available() { return has_avx512f(); }

void forward(const window_geometry& g, std::int64_t out_c, const float* input, const float* filter, float* output,
             compute_pool& pool) {
  const layout l(g, out_c);
  const std::vector<channel_block> blocks = channel_blocks(out_c);
  const double row_flops = 2.0 * static_cast<double>(g.out_w * out_c * l.rows);
  pool.parallel_for(g.batch * g.out_h, flops_ns(row_flops), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t n = row / g.out_h, oh = row % g.out_h;
      for (const channel_block& b : blocks) {
        const int tail = tail_of(b, out_c);
        const bool full = tail == k_lanes;
#define TROUPE_FORWARD_ROW(V)                                                 \
  (full ? forward_row<V, true>(l, input, filter, output, n, oh, b.co0, tail) \
        : forward_row<V, false>(l, input, filter, output, n, oh, b.co0, tail))
        switch (b.vectors) {
          case 4: TROUPE_FORWARD_ROW(4); break;
          case 3: TROUPE_FORWARD_ROW(3); break;
          case 2: TROUPE_FORWARD_ROW(2); break;
          default: TROUPE_FORWARD_ROW(1); break;
        }
#undef TROUPE_FORWARD_ROW
      }
    }
  });
}

void backprop_filter(const window_geometry& g, std::int64_t out_c, const float* input, const float* out_backprop,
                     float* filter_grad, compute_pool& pool) {
  const layout l(g, out_c);
  std::fill_n(filter_grad, l.rows * out_c, 0.0f);
  // Tiles (filter rows x output channels) own disjoint parts of the gradient, so threads
  // split the tiles, and each thread walks every output row with its tiles.
  struct tile {
    std::int64_t r0;
    channel_block block;
  };
  std::vector<tile> tiles;
  for (const channel_block& b : channel_blocks(out_c)) {
    const int rows = tile_rows(b.vectors);
    for (std::int64_t r0 = 0; r0 < l.rows; r0 += rows) tiles.push_back({r0, b});
  }
  // Output rows in groups, each group's out_backprop (and input rows) kept in cache while
  // the thread's tiles pass over it.
  const std::int64_t row_bytes = (g.out_w * out_c + g.stride_h * l.row_len) * static_cast<std::int64_t>(sizeof(float));
  const std::int64_t group = std::max<std::int64_t>(1, k_group_bytes / row_bytes);
  const std::int64_t out_rows = g.batch * g.out_h;
  const double tile_flops =
      2.0 * static_cast<double>(out_rows * g.out_w) * tile_rows(k_max_vectors) * k_max_vectors * k_lanes;
  pool.parallel_for(static_cast<std::int64_t>(tiles.size()), flops_ns(tile_flops),
                    [&](std::int64_t begin, std::int64_t end) {
                      for (std::int64_t row = 0; row < out_rows; row += group) {
                        const std::int64_t row_end = std::min(out_rows, row + group);
                        for (std::int64_t t = begin; t < end; ++t) {
                          const tile& e = tiles[static_cast<std::size_t>(t)];
                          const int tail = tail_of(e.block, out_c);
                          const bool full = tail == k_lanes;
#define TROUPE_FILTER_TILE(V)                                                                          \
  (full ? filter_tile<V, true>(l, input, out_backprop, filter_grad, row, row_end, e.r0, e.block.co0, tail) \
        : filter_tile<V, false>(l, input, out_backprop, filter_grad, row, row_end, e.r0, e.block.co0, tail))
                          switch (e.block.vectors) {
                            case 4: TROUPE_FILTER_TILE(4); break;
                            case 3: TROUPE_FILTER_TILE(3); break;
                            case 2: TROUPE_FILTER_TILE(2); break;
                            default: TROUPE_FILTER_TILE(1); break;
                          }
#undef TROUPE_FILTER_TILE
                        }
                      }
                    });
}

}  // namespace troupe::kernels::direct_conv
