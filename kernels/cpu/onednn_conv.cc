// oneDNN convolutions: see onednn_conv.h for the contract and the thread budget.
#include "kernels/cpu/onednn_conv.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fastest.h"
#include "kernels/cpu/onednn.h"

namespace troupe::kernels::onednn {

namespace {

using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

// One pass of one geometry at one batch size, ready to run.
struct primitive_entry {
  dnnl::primitive primitive;
  dnnl::memory::desc scratchpad;
  // The filter (forward, backward_data) or filter gradient (backward_weights) in the
  // layout the primitive chose, and the reorder from HWIO to it (to HWIO from it for
  // backward_weights); the reorder is empty when the layouts agree.
  dnnl::memory::desc weights;
  prepared_reorder weights_reorder;
  // The activations: src/diff_src and dst/diff_dst in the layouts the primitive takes, and
  // the reorders of a chunk between the caller's layout and them: into the primitive's
  // layout for its inputs, out of it for its output (empty when the layouts agree).
  dnnl::memory::desc src, dst;
  prepared_reorder src_reorder, dst_reorder;
};

// One pass of one geometry at one batch size, on images in one layout.
struct conv_spec {
  conv_pass pass;
  window_geometry g;  // g.batch is the whole batch; `batch` the chunk's
  std::int64_t batch, out_c;
  image_layout layout;
};

// The kinds of primitive a pass may run on (each chunk's images reordered in and out of
// the primitive's layouts where they differ from the caller's):
//   nhwc       direct convolution on NHWC images;
//   nchw       direct convolution on NCHW images;
//   preferred  direct convolution on the activation layouts oneDNN prefers for the
//              geometry (blocked ones such as nChw16c, or plain ones);
//   winograd   Winograd's minimal filtering (F(4x4, 3x3): fewer multiplications, float
//              rounding slightly further from the exact sum) on its preferred layouts;
//              oneDNN has it for 3x3 windows at stride 1 on AVX-512 processors only.
enum class variant { nhwc, nchw, preferred, winograd };

primitive_cache<primitive_entry>::key make_key(const conv_spec& c) {
  return prefixed_key<2>({static_cast<std::int64_t>(c.pass) * 2 + static_cast<std::int64_t>(c.layout), c.batch},
                         c.g, c.out_c);
}

// Builds the primitive of `c` as `kind`; null when oneDNN has none.
std::shared_ptr<primitive_entry> build(const conv_spec& c, variant kind) {
  const conv_pass pass = c.pass;
  const window_geometry& g = c.g;
  const std::int64_t batch = c.batch, out_c = c.out_c;
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
  const tag given = c.layout == image_layout::nchw ? tag::nchw : tag::nhwc;
  const dnnl::memory::desc given_src(src_dims, f32, given), given_dst(dst_dims, f32, given);
  const dnnl::memory::desc hwio(weights_dims, f32, tag::hwio);
  const dnnl::memory::desc any_weights(weights_dims, f32, tag::any);
  const dnnl::algorithm algorithm = kind == variant::winograd ? dnnl::algorithm::convolution_winograd
                                                              : dnnl::algorithm::convolution_direct;
  const tag wanted = kind == variant::nhwc ? tag::nhwc : kind == variant::nchw ? tag::nchw : tag::any;
  const dnnl::memory::desc src(src_dims, f32, wanted), dst(dst_dims, f32, wanted);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

  auto entry = std::make_shared<primitive_entry>();
  try {
    // The forward descriptor: the primitive of the forward pass, and the hint the backward
    // passes are built with.
    dnnl::convolution_forward::desc forward_desc(
        dnnl::prop_kind::forward_training, algorithm, src, any_weights,
        dst, strides, dilates, padding_l, padding_r);
    dnnl::convolution_forward::primitive_desc forward(forward_desc, attr, engine,
                                                      /*allow_empty=*/true);
    if (!forward) return nullptr;
    switch (pass) {
      case conv_pass::forward:
        entry->primitive = dnnl::convolution_forward(forward);
        entry->weights = forward.weights_desc();
        entry->src = forward.src_desc();
        entry->dst = forward.dst_desc();
        entry->scratchpad = forward.scratchpad_desc();
        entry->weights_reorder = prepared_reorder(hwio, entry->weights);
        entry->src_reorder = prepared_reorder(given_src, entry->src);
        entry->dst_reorder = prepared_reorder(entry->dst, given_dst);
        break;
      case conv_pass::backward_data: {
        dnnl::convolution_backward_data::desc desc(algorithm, src,
                                                   any_weights, dst, strides, dilates,
                                                   padding_l, padding_r);
        dnnl::convolution_backward_data::primitive_desc pd(desc, attr, engine, forward,
                                                           /*allow_empty=*/true);
        if (!pd) return nullptr;
        entry->primitive = dnnl::convolution_backward_data(pd);
        entry->weights = pd.weights_desc();
        entry->src = pd.diff_src_desc();
        entry->dst = pd.diff_dst_desc();
        entry->scratchpad = pd.scratchpad_desc();
        entry->weights_reorder = prepared_reorder(hwio, entry->weights);
        entry->src_reorder = prepared_reorder(entry->src, given_src);
        entry->dst_reorder = prepared_reorder(given_dst, entry->dst);
        break;
      }
      case conv_pass::backward_weights: {
        dnnl::convolution_backward_weights::desc desc(algorithm, src,
                                                      any_weights, dst, strides, dilates,
                                                      padding_l, padding_r);
        dnnl::convolution_backward_weights::primitive_desc pd(desc, attr, engine, forward,
                                                              /*allow_empty=*/true);
        if (!pd) return nullptr;
        entry->primitive = dnnl::convolution_backward_weights(pd);
        entry->weights = pd.diff_weights_desc();
        entry->src = pd.src_desc();
        entry->dst = pd.diff_dst_desc();
        entry->scratchpad = pd.scratchpad_desc();
        entry->weights_reorder = prepared_reorder(entry->weights, hwio);
        entry->src_reorder = prepared_reorder(given_src, entry->src);
        entry->dst_reorder = prepared_reorder(given_dst, entry->dst);
        break;
      }
    }
  } catch (const dnnl::error&) {
    return nullptr;  // oneDNN rejects the geometry (e.g. a negative far padding it cannot do)
  }
  return entry;
}

void run(const primitive_entry& e, std::unordered_map<int, dnnl::memory> args) {
  execute(e.primitive, e.scratchpad, std::move(args));
}

// Where a chunk's activations live for the primitive: in place (the caller's layout), or a buffer of the
// primitive's layout that an input is reordered into, or an output reordered out of.
const float* input(const prepared_reorder& r, const float* given, tensor& buffer) {
  if (r.empty()) return given;
  buffer = float_buffer(r.to());
  r.run(given, buffer.data<float>());
  return buffer.data<float>();
}
float* output(const prepared_reorder& r, float* given, tensor& buffer) {
  if (r.empty()) return given;
  buffer = float_buffer(r.from());
  return buffer.data<float>();
}

// Runs `e` on one chunk, with the operands of convolve() for that chunk (images in the
// caller's layout, the filter in e.weights' layout) and writes `out` (for
// backward_weights, the chunk's filter gradient in e.weights' layout).
void run_chunk(conv_pass pass, const primitive_entry& e, const float* a, const float* b, float* out) {
  tensor src_buffer, dst_buffer;
  switch (pass) {
    case conv_pass::forward: {
      float* dst = output(e.dst_reorder, out, dst_buffer);
      run(e, {{DNNL_ARG_SRC, memory(e.src, input(e.src_reorder, a, src_buffer))},
              {DNNL_ARG_WEIGHTS, memory(e.weights, b)},
              {DNNL_ARG_DST, memory(e.dst, dst)}});
      if (dst != out) e.dst_reorder.run(dst, out);
      break;
    }
    case conv_pass::backward_data: {
      float* diff_src = output(e.src_reorder, out, src_buffer);
      run(e, {{DNNL_ARG_DIFF_DST, memory(e.dst, input(e.dst_reorder, b, dst_buffer))},
              {DNNL_ARG_WEIGHTS, memory(e.weights, a)},
              {DNNL_ARG_DIFF_SRC, memory(e.src, diff_src)}});
      if (diff_src != out) e.src_reorder.run(diff_src, out);
      break;
    }
    case conv_pass::backward_weights:
      run(e, {{DNNL_ARG_SRC, memory(e.src, input(e.src_reorder, a, src_buffer))},
              {DNNL_ARG_DIFF_DST, memory(e.dst, input(e.dst_reorder, b, dst_buffer))},
              {DNNL_ARG_DIFF_WEIGHTS, memory(e.weights, out)}});
      break;
  }
}

// The fastest of `candidates` (not empty) on one chunk of `c`, reorders of the images
// included, over three rounds (fastest_candidate). The data is a constant: timing does not
// depend on it. Throws dnnl::error.
std::shared_ptr<primitive_entry> fastest(const conv_spec& c,
                                         const std::vector<std::shared_ptr<primitive_entry>>& candidates) {
  const window_geometry& g = c.g;
  const std::int64_t image_size = c.batch * g.in_h * g.in_w * g.channels;
  const std::int64_t output_size = c.batch * g.out_h * g.out_w * c.out_c;
  std::int64_t weights_size = 0;
  for (const auto& e : candidates) {
    weights_size = std::max(weights_size, static_cast<std::int64_t>(e->weights.get_size() / sizeof(float)));
  }
  auto filled = [](std::int64_t floats) {
    tensor t(dtype::float32, tensor_shape{floats});
    std::fill_n(t.data<float>(), floats, 0.5f);
    return t;
  };
  tensor a, b, out;
  switch (c.pass) {
    case conv_pass::forward:
      a = filled(image_size), b = filled(weights_size), out = filled(output_size);
      break;
    case conv_pass::backward_data:
      a = filled(weights_size), b = filled(output_size), out = filled(image_size);
      break;
    case conv_pass::backward_weights:
      a = filled(image_size), b = filled(output_size), out = filled(weights_size);
      break;
  }
  std::vector<std::function<void()>> runs;
  for (const auto& e : candidates) {
    runs.push_back([&, entry = e.get()] { run_chunk(c.pass, *entry, a.data<float>(), b.data<float>(), out.data<float>()); });
  }
  return candidates[fastest_candidate(runs, /*rounds=*/3)];
}

// The choice environment variable `name` names among `choices`: nullopt when it is unset
// or "tuned"; any other value is an error naming the variable and the accepted values.
template <class E>
result<std::optional<E>> env_choice(const char* name, std::initializer_list<std::pair<const char*, E>> choices) {
  const char* v = std::getenv(name);
  if (v == nullptr || std::string(v) == "tuned") return std::optional<E>();
  std::string accepted;
  for (const auto& [text, value] : choices) {
    if (std::string(v) == text) return std::optional<E>(value);
    accepted = accepted + text + ", ";
  }
  return invalid_argument_error(name, "=", v, " is not a choice: expected ", accepted, "or tuned");
}

// TROUPE_CONV_VARIANT: "nhwc", "nchw", "preferred" or "winograd" fix one variant for
// every primitive (winograd: where the geometry has no Winograd primitive, 3x3 windows
// at stride 1, nhwc); tests cover each path this way. Unset (or "tuned"): each geometry
// measures them.
const result<std::optional<variant>>& forced_variant() {
  static const auto forced = env_choice<variant>("TROUPE_CONV_VARIANT", {{"nhwc", variant::nhwc},
                                                                          {"nchw", variant::nchw},
                                                                          {"preferred", variant::preferred},
                                                                          {"winograd", variant::winograd}});
  return forced;
}

// The fastest primitive for `c` among the variants oneDNN has, by measurement: which one
// wins depends on the geometry and on the processor, so no fixed rule holds (on this
// project's Xeon with AVX-512, blocked layouts won LeNet's forward pass by 10-20% and lost
// AlexNet conv2's by 30%, and Winograd took a third off AlexNet conv3; on an AMD Zen 5,
// blocked layouts won only backward-data with many channels). Null when oneDNN has none.
std::shared_ptr<primitive_entry> build_fastest(const conv_spec& c) {
  if (const auto& forced = *forced_variant()) {
    auto entry = build(c, *forced);
    return entry != nullptr || *forced != variant::winograd ? entry : build(c, variant::nhwc);
  }
  std::vector<std::shared_ptr<primitive_entry>> candidates;
  for (const variant kind : {variant::nhwc, variant::nchw, variant::preferred, variant::winograd}) {
    if (auto entry = build(c, kind)) candidates.push_back(std::move(entry));
  }
  if (candidates.size() <= 1) return candidates.empty() ? nullptr : candidates.front();
  try {
    return fastest(c, candidates);
  } catch (const dnnl::error&) {
    // One failed to run: keep the first, whose failure (if it is the one) convolve()
    // reports with its message.
    return candidates.front();
  }
}

// The cached primitive for `c` (built on first use); null when oneDNN has none.
std::shared_ptr<primitive_entry> find(const conv_spec& c) {
  // Never destroyed: primitives must not outlive the engine at exit (cpu_engine()).
  static auto* cache = new primitive_cache<primitive_entry>();
  return cache->find(make_key(c), [&] { return build_fastest(c); });
}

}  // namespace

const result<conv_path>& conv_path_setting() {
  static const result<conv_path> setting = []() -> result<conv_path> {
    auto choice = env_choice<conv_path>("TROUPE_CONV", {{"onednn", conv_path::onednn},
                                                         {"im2col", conv_path::im2col},
                                                         {"direct", conv_path::direct}});
    if (!choice.ok()) return choice.error();
    return choice->value_or(conv_path::tuned);
  }();
  return setting;
}

bool has_winograd() {
  static const bool yes = [] {
    window_geometry g;
    g.batch = 1;
    g.in_h = g.in_w = g.out_h = g.out_w = 8;
    g.channels = 16;
    g.window_h = g.window_w = 3;
    g.pad_top = g.pad_left = 1;
    try {
      return build({conv_pass::forward, g, 1, 16, image_layout::nhwc}, variant::winograd) != nullptr;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return yes;
}

status forced_variant_status() {
  const auto& forced = forced_variant();
  if (!forced.ok()) return forced.error();
  if (*forced == variant::winograd && !has_winograd()) {
    return failed_precondition_error("TROUPE_CONV_VARIANT=winograd, but oneDNN has no Winograd convolution on this "
                                     "processor (it needs AVX-512, which ",
                                     avx512_hidden() ? "TROUPE_HIDE_AVX512 hides" : "this processor lacks",
                                     "); unset it or choose nhwc, nchw or preferred");
  }
  return status();
}

status convolve(conv_pass pass, const window_geometry& g, std::int64_t out_c,
                image_layout layout, const float* a, const float* b, float* out,
                compute_pool& pool) {
  TROUPE_RETURN_IF_ERROR(forced_variant_status());
  single_threaded_openmp();
  const batch_split split = split_batch(g.batch, pool.num_threads());
  // Build (or find) the primitives of both chunk sizes before any work starts, so that a
  // geometry oneDNN cannot do falls back before anything was written.
  const std::int64_t last_size = split.size(split.chunks - 1, g.batch);
  auto full = find({pass, g, split.per_chunk, out_c, layout});
  auto last = last_size == split.per_chunk ? full : find({pass, g, last_size, out_c, layout});
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
      if (pass == conv_pass::backward_weights || e.weights_reorder.empty()) return user_filter;
      buffer = float_buffer(e.weights);
      e.weights_reorder.run(user_filter, buffer.data<float>());
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
            run_chunk(pass, e, a + first * in_image, filter, out + first * out_image);
            break;
          case conv_pass::backward_data:
            run_chunk(pass, e, filter, b + first * out_image, out + first * in_image);
            break;
          case conv_pass::backward_weights: {
            tensor& partial = partials[static_cast<std::size_t>(c)];
            partial = float_buffer(e.weights);
            run_chunk(pass, e, a + first * in_image, b + first * out_image, partial.data<float>());
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
        if (!e.weights_reorder.empty()) e.weights_reorder.run(partial, target);
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
