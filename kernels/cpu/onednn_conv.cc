// oneDNN convolutions: see onednn_conv.h for the contract and the thread budget.
#include "kernels/cpu/onednn_conv.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/onednn.h"

namespace troupe::kernels::onednn {

namespace {

using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

// One pass of one geometry at one batch size, ready to run.
struct primitive_entry {
  dnnl::primitive primitive;
  // The layout the primitive wants its filter (forward, backward_data) or writes its
  // filter gradient (backward_weights) in; equal to `user_weights` when no reorder is due.
  dnnl::memory::desc weights;
  dnnl::memory::desc user_weights;
  // The activations: src/diff_src and dst/diff_dst, NHWC. (Measured: letting oneDNN pick
  // blocked layouts and reordering each chunk in and out was no faster on LeNet layers,
  // and only pays for backward_data with many channels.)
  dnnl::memory::desc src, dst;
  // backward_data's diff_src/diff_dst in the blocked layout it chose, when it chose one;
  // a chunk is reordered into and out of it.
  dnnl::memory::desc blocked_src, blocked_dst;
  dnnl::memory::desc scratchpad;
  bool reorder_weights() const { return weights != user_weights; }
};

primitive_cache<primitive_entry>::key make_key(conv_pass pass, const window_geometry& g,
                                               std::int64_t batch, std::int64_t out_c) {
  return {static_cast<std::int64_t>(pass), batch, g.in_h, g.in_w, g.channels, g.window_h,
          g.window_w, out_c, g.stride_h, g.stride_w, g.dilation_h, g.dilation_w, g.pad_top,
          g.pad_left, g.out_h, g.out_w};
}

// Builds the primitive of `pass` for `g` at `batch` images; null when oneDNN has none.
std::shared_ptr<primitive_entry> build(conv_pass pass, const window_geometry& g,
                                       std::int64_t batch, std::int64_t out_c) {
  const dnnl::engine& engine = cpu_engine();
  const auto f32 = dnnl::memory::data_type::f32;
  const dims src_dims{batch, g.channels, g.in_h, g.in_w};
  const dims weights_dims{out_c, g.channels, g.window_h, g.window_w};
  const dims dst_dims{batch, out_c, g.out_h, g.out_w};
  const dims strides{g.stride_h, g.stride_w};
  const dims dilates{g.dilation_h - 1, g.dilation_w - 1};
  const dims padding_l{g.pad_top, g.pad_left};
  // The far padding that makes oneDNN's output size TensorFlow's (it may be negative when
  // VALID drops trailing input rows).
  const dims padding_r{
      (g.out_h - 1) * g.stride_h + (g.window_h - 1) * g.dilation_h + 1 - g.in_h - g.pad_top,
      (g.out_w - 1) * g.stride_w + (g.window_w - 1) * g.dilation_w + 1 - g.in_w - g.pad_left};
  const dnnl::memory::desc src(src_dims, f32, tag::nhwc);
  const dnnl::memory::desc dst(dst_dims, f32, tag::nhwc);
  const dnnl::memory::desc any_weights(weights_dims, f32, tag::any);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

  auto entry = std::make_shared<primitive_entry>();
  entry->user_weights = dnnl::memory::desc(weights_dims, f32, tag::hwio);
  entry->src = src;
  entry->dst = dst;
  try {
    dnnl::convolution_forward::desc forward_desc(
        dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, any_weights,
        dst, strides, dilates, padding_l, padding_r);
    dnnl::convolution_forward::primitive_desc forward(forward_desc, attr, engine,
                                                      /*allow_empty=*/true);
    if (!forward) return nullptr;
    switch (pass) {
      case conv_pass::forward:
        entry->primitive = dnnl::convolution_forward(forward);
        entry->weights = forward.weights_desc();
        entry->scratchpad = forward.scratchpad_desc();
        break;
      case conv_pass::backward_data: {
        // Measured (bench_conv, quiet machine): with many input channels oneDNN's
        // backward-data kernel is faster on its blocked layout, reorders in and out
        // included (AlexNet conv3, 192 channels: 20 ms against 24-27 ms NHWC, PyTorch 19.7);
        // with fewer it is no faster (conv2, 64 channels) or slower (32 channels).
        const bool any = g.channels >= 128;
        const dnnl::memory::desc any_src(src_dims, f32, tag::any), any_dst(dst_dims, f32, tag::any);
        dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, any ? any_src : src,
                                                   any_weights, any ? any_dst : dst, strides, dilates, padding_l,
                                                   padding_r);
        dnnl::convolution_backward_data::primitive_desc pd(desc, attr, engine, forward,
                                                           /*allow_empty=*/true);
        if (!pd) return nullptr;
        entry->primitive = dnnl::convolution_backward_data(pd);
        entry->weights = pd.weights_desc();
        if (pd.diff_src_desc() != src) entry->blocked_src = pd.diff_src_desc();
        if (pd.diff_dst_desc() != dst) entry->blocked_dst = pd.diff_dst_desc();
        entry->scratchpad = pd.scratchpad_desc();
        break;
      }
      case conv_pass::backward_weights: {
        dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, src,
                                                      any_weights, dst, strides, dilates,
                                                      padding_l, padding_r);
        dnnl::convolution_backward_weights::primitive_desc pd(desc, attr, engine, forward,
                                                              /*allow_empty=*/true);
        if (!pd) return nullptr;
        entry->primitive = dnnl::convolution_backward_weights(pd);
        entry->weights = pd.diff_weights_desc();
        entry->scratchpad = pd.scratchpad_desc();
        break;
      }
    }
  } catch (const dnnl::error&) {
    return nullptr;  // oneDNN rejects the geometry (e.g. a negative far padding it cannot do)
  }
  return entry;
}

// The cached primitive of `pass` for `g` at `batch` images (built on first use); null
// when oneDNN has none.
std::shared_ptr<primitive_entry> find(conv_pass pass, const window_geometry& g,
                                      std::int64_t batch, std::int64_t out_c) {
  // Never destroyed: primitives must not outlive the engine at exit (cpu_engine()).
  static auto* cache = new primitive_cache<primitive_entry>();
  return cache->find(make_key(pass, g, batch, out_c), [&] { return build(pass, g, batch, out_c); });
}

void run(const primitive_entry& e, std::unordered_map<int, dnnl::memory> args) {
  execute(e.primitive, e.scratchpad, std::move(args));
}

}  // namespace

bool conv_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("TROUPE_CONV");
    return v == nullptr || std::string(v) != "im2col";
  }();
  return enabled;
}

status convolve(conv_pass pass, const window_geometry& g, std::int64_t out_c, const float* a,
                const float* b, float* out, compute_pool& pool) {
  // Measured (bench/conv_bench.cc, oneDNN 2.6): its NHWC backward-data kernel for a
  // single input channel is 3x slower than im2col + gemm with 32 output channels (and
  // slightly faster with 6); a first layer's input gradient is rarely needed anyway.
  if (pass == conv_pass::backward_data && g.channels == 1 && out_c > 8) {
    return unimplemented_error("im2col is faster for this backward-data geometry");
  }
  single_threaded_openmp();
  const batch_split split = split_batch(g.batch, pool.num_threads());
  // Build (or find) the primitives of both chunk sizes before any work starts, so that a
  // geometry oneDNN cannot do falls back before anything was written.
  const std::int64_t last_size = split.size(split.chunks - 1, g.batch);
  auto full = find(pass, g, split.per_chunk, out_c);
  auto last = last_size == split.per_chunk ? full : find(pass, g, last_size, out_c);
  if (full == nullptr || last == nullptr) {
    return unimplemented_error("oneDNN has no convolution for this geometry");
  }
  const std::int64_t in_image = g.in_h * g.in_w * g.channels;
  const std::int64_t out_image = g.out_h * g.out_w * out_c;
  const std::int64_t weights_size = g.window_h * g.window_w * g.channels * out_c;
  try {
    // The filter in each primitive's layout (forward, backward_data).
    // Temporary buffers are tensors: the tensor allocator keeps freed buffers for reuse,
    // where fresh pages from the system would cost more than AlexNet's reorders themselves.
    tensor full_weights, last_weights;
    const float* user_filter = pass == conv_pass::forward ? b : a;
    auto filter_for = [&](const primitive_entry& e, tensor& buffer) -> const float* {
      if (pass == conv_pass::backward_weights || !e.reorder_weights()) return user_filter;
      buffer = float_buffer(e.weights);
      reorder(e.user_weights, user_filter, e.weights, buffer.data<float>());
      return buffer.data<float>();
    };
    const float* full_filter = filter_for(*full, full_weights);
    const float* last_filter = last == full ? full_filter : filter_for(*last, last_weights);
    // The filter gradients of the chunks, in their primitives' layout.
    std::vector<tensor> partials;
    if (pass == conv_pass::backward_weights) partials.resize(static_cast<std::size_t>(split.chunks));
    pool.parallel_for(split.chunks, 1e9, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) {
        const bool is_full = split.size(c, g.batch) == split.per_chunk;
        const primitive_entry& e = is_full ? *full : *last;
        const float* filter = is_full ? full_filter : last_filter;
        const std::int64_t first = c * split.per_chunk;
        switch (pass) {
          case conv_pass::forward:
            run(e, {{DNNL_ARG_SRC, memory(e.src, a + first * in_image)},
                    {DNNL_ARG_WEIGHTS, memory(e.weights, filter)},
                    {DNNL_ARG_DST, memory(e.dst, out + first * out_image)}});
            break;
          case conv_pass::backward_data: {
            const float* diff_dst = b + first * out_image;
            float* diff_src = out + first * in_image;
            tensor blocked_dst, blocked_src;
            if (e.blocked_dst.get_size() > 0) {
              blocked_dst = float_buffer(e.blocked_dst);
              reorder(e.dst, diff_dst, e.blocked_dst, blocked_dst.data<float>());
            }
            if (e.blocked_src.get_size() > 0) blocked_src = float_buffer(e.blocked_src);
            run(e, {{DNNL_ARG_DIFF_DST, blocked_dst.initialized() ? memory(e.blocked_dst, blocked_dst.data<float>())
                                                                  : memory(e.dst, diff_dst)},
                    {DNNL_ARG_WEIGHTS, memory(e.weights, filter)},
                    {DNNL_ARG_DIFF_SRC, blocked_src.initialized() ? memory(e.blocked_src, blocked_src.data<float>())
                                                                  : memory(e.src, diff_src)}});
            if (blocked_src.initialized()) reorder(e.blocked_src, blocked_src.data<float>(), e.src, diff_src);
            break;
          }
          case conv_pass::backward_weights: {
            tensor& partial = partials[static_cast<std::size_t>(c)];
            partial = float_buffer(e.weights);
            run(e, {{DNNL_ARG_SRC, memory(e.src, a + first * in_image)},
                    {DNNL_ARG_DIFF_DST, memory(e.dst, b + first * out_image)},
                    {DNNL_ARG_DIFF_WEIGHTS, memory(e.weights, partial.data<float>())}});
            break;
          }
        }
      }
    });
    if (pass == conv_pass::backward_weights) {
      // out = sum of the chunks' gradients, each reordered to HWIO.
      tensor hwio;
      if (split.chunks > 1) hwio = tensor(dtype::float32, tensor_shape{weights_size});
      for (std::int64_t c = 0; c < split.chunks; ++c) {
        const primitive_entry& e = split.size(c, g.batch) == split.per_chunk ? *full : *last;
        const float* partial = partials[static_cast<std::size_t>(c)].data<float>();
        float* target = c == 0 ? out : hwio.data<float>();
        if (e.reorder_weights()) reorder(e.weights, partial, e.user_weights, target);
        else std::copy_n(partial, weights_size, target);
        if (c > 0) {
          for (std::int64_t i = 0; i < weights_size; ++i) out[i] += target[i];
        }
      }
    }
  } catch (const dnnl::error& e) {
    return internal_error("oneDNN convolution failed: ", e.what());
  }
  return status();
}

}  // namespace troupe::kernels::onednn
