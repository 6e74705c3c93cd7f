// GPU kernels on cuDNN's legacy API: Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter,
// MaxPool, MaxPoolGrad, AvgPool, AvgPoolGrad, LRN, LRNGrad, FusedBatchNormV3 and
// FusedBatchNormGradV3, for float and double, with the semantics, attribute checks and
// error messages of the CPU kernels (kernels/cpu/conv_kernels.cc, pool_kernels.cc,
// nn2_kernels.cc; window attributes and TensorFlow's padding rules from
// kernels/cpu/spatial.h).
//
// Layouts. cuDNN addresses images through strided descriptors, so NHWC and NCHW tensors
// are handed over as they lie. TensorFlow's HWIO filter is none of cuDNN's filter layouts:
// it is copied (cudnnTransformTensor over a strided view of it) to KCRS for NCHW or KRSC
// for NHWC, and filter gradients are copied back. Where cuDNN cannot work in the caller's
// layout (no usable convolution algorithm in NHWC, a pooling that answers NOT_SUPPORTED),
// the kernel computes in NCHW through packed copies, and remembers that. LRN and batch
// norm see their tensors as packed NCHW [outer, channels, inner, 1], which is the memory
// of either layout.
//
// Padding. cuDNN pads both sides alike. A convolution whose padding differs before and
// after (SAME with an odd total, EXPLICIT) gets the smaller of the two from cuDNN and the
// rest as zeros in a padded copy of its input (whose gradient it computes and crops).
// Pooling with SAME padding gets the padding before and TensorFlow's output size, which
// may reach one row or column past cuDNN's own formula: cuDNN clips those windows to the
// input, as TensorFlow's GPU kernels rely on (padded positions never win a max and are not
// counted in an average). MaxPool's EXPLICIT padding, which may leave windows entirely in
// padding, becomes a copy padded with lowest(): what the CPU kernel gives such windows,
// and a value that no input loses to.
//
// Semantics kept from the CPU kernels: MaxPoolGrad recomputes the maxima from orig_input
// (orig_output is only checked for its shape). LRN's alpha is not divided by the window
// size (cuDNN's is, so it gets alpha * (2 * depth_radius + 1)); LRN outside cuDNN's range
// (depth_radius > 7, bias < 1e-5, beta < 0.01) runs the CUDA kernels of
// gpu_cudnn_launch.h. FusedBatchNormV3 gives the biased batch variance in reserve_space_2
// and the Bessel-corrected one (blended by exponential_avg_factor) in batch_variance; its
// gradient normalizes with the given reserve spaces, not with statistics of x.
//
// Convolution algorithms. An algorithm is usable when cuDNN supports it for the geometry,
// it needs at most k_max_workspace bytes of workspace and it computes float32 exactly
// (CUDNN_FMA_MATH) unless TROUPE_ALLOW_TF32=1 allows TensorFloat-32. The first time a kernel
// sees a geometry (batch included) it measures, as TensorFlow's autotuner does:
// cudnnFind*AlgorithmEx times every algorithm on the kernel's own operands (the trials
// write the output, which the real call then overwrites), and the fastest usable one is
// kept per kernel and geometry. Measuring waits for the GPU, once per geometry; until a
// geometry is measured, estimated_ns() calls the kernel expensive, so that the executor
// runs it on the compute pool and not inline on an actor's thread. Where measuring fails
// or finds nothing usable, and for every geometry when TROUPE_CUDNN_AUTOTUNE=0, cuDNN's
// heuristics (cudnnGet*Algorithm_v7, which run nothing on the GPU) choose: their
// first-ranked usable algorithm. The heuristics also choose the layout: the caller's, or
// NCHW when they find nothing usable in NHWC.
//
// Threads. A device's cuDNN handle serves every thread that runs its kernels, and cuDNN
// forbids using one handle from two threads at once: the kernels hold the device's
// cudnn_mutex() while they talk to cuDNN (they only enqueue, so it is held for
// microseconds, except while a geometry is measured).
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/switches.h"
#include "kernels/cpu/spatial.h"
#include "kernels/cuda/gpu_cudnn_launch.h"
#include "kernels/cuda/gpu_kernel.h"
#include "kernels/kernel_registry.h"
#include "kernels/shape_checks.h"

namespace troupe::kernels {

namespace {

using gpu::allow_tf32;
using gpu::cuda_status;
using gpu::cudnn_status;

// float32 computed exactly (no TensorFloat-32: allow_tf32() is off), as on the CPU.
template <class T>
bool exact_float32() {
  return std::is_same_v<T, float> && !allow_tf32();
}

// True unless env TROUPE_CUDNN_AUTOTUNE=0: convolution algorithms are chosen by measuring them.
bool autotune() {
  static const bool on = env_switch("TROUPE_CUDNN_AUTOTUNE", true);
  return on;
}

// The legacy API's sizes and strides are ints: every tensor it sees has at most this many elements.
constexpr std::int64_t k_max_cudnn_elements = INT_MAX;
// The most workspace a convolution algorithm may ask for.
constexpr std::size_t k_max_workspace = std::size_t{1} << 30;
// A convolution's estimated_ns once its algorithm is known: enqueuing takes microseconds.
constexpr double k_enqueue_ns = 5000;

template <class T>
constexpr cudnnDataType_t cudnn_type = std::is_same_v<T, float> ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;

// cuDNN's blend factors (result = one * computed + zero * previous), in the data's type.
template <class T>
constexpr T k_one = 1;
template <class T>
constexpr T k_zero = 0;

// Owns one cuDNN descriptor; users check created() first (a failed creation leaves none).
template <class Handle, cudnnStatus_t (*create)(Handle*), cudnnStatus_t (*destroy)(Handle)>
class cudnn_descriptor {
 public:
  cudnn_descriptor() : created_(create(&handle_)) {}
  ~cudnn_descriptor() {
    if (created_ == CUDNN_STATUS_SUCCESS) destroy(handle_);
  }
  cudnn_descriptor(const cudnn_descriptor&) = delete;
  cudnn_descriptor& operator=(const cudnn_descriptor&) = delete;

  status created() const { return cudnn_status(created_, "creating a cuDNN descriptor"); }
  Handle get() const { return handle_; }

 private:
  Handle handle_{};
  cudnnStatus_t created_;
};
using tensor_descriptor =
    cudnn_descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using filter_descriptor =
    cudnn_descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using convolution_descriptor =
    cudnn_descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using pooling_descriptor =
    cudnn_descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using lrn_descriptor = cudnn_descriptor<cudnnLRNDescriptor_t, cudnnCreateLRNDescriptor, cudnnDestroyLRNDescriptor>;

// Images as cuDNN addresses them, whatever their layout: sizes (batch, channels, height,
// width), strides in elements, and where element (0, 0, 0, 0) lies in the buffer.
struct image_view {
  std::int64_t n = 0, c = 0, h = 0, w = 0;
  std::int64_t stride_n = 0, stride_c = 0, stride_h = 0, stride_w = 0;
  std::int64_t offset = 0;
  std::int64_t elements() const { return n * c * h * w; }
};

image_view packed_images(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, bool nchw) {
  if (nchw) return {n, c, h, w, c * h * w, h * w, w, 1, 0};
  return {n, c, h, w, h * w * c, 1, w * c, c, 0};
}

// The h x w images at (top, left) inside `outer` (a padded copy of them).
image_view inner_images(image_view outer, std::int64_t h, std::int64_t w, std::int64_t top, std::int64_t left) {
  outer.offset += top * outer.stride_h + left * outer.stride_w;
  outer.h = h;
  outer.w = w;
  return outer;
}

// TensorFlow's HWIO filter [height, width, in, out] seen as cuDNN's (K = out, C = in, R, S).
image_view hwio_filter(std::int64_t height, std::int64_t width, std::int64_t in, std::int64_t out) {
  return {out, in, height, width, 1, out, width * in * out, in * out, 0};
}

template <class T>
T* at(T* data, const image_view& v) {
  return data + v.offset;
}

status describe(const tensor_descriptor& d, cudnnDataType_t type, const image_view& v) {
  TROUPE_RETURN_IF_ERROR(d.created());
  auto i = [](std::int64_t x) { return static_cast<int>(x); };
  return cudnn_status(cudnnSetTensor4dDescriptorEx(d.get(), type, i(v.n), i(v.c), i(v.h), i(v.w), i(v.stride_n),
                                                   i(v.stride_c), i(v.stride_h), i(v.stride_w)),
                      "cudnnSetTensor4dDescriptorEx");
}

// dst (as `to` sees it) = src (as `from` sees it): the same images in another layout or place.
template <class T>
status copy_images(cudnnHandle_t handle, const image_view& from, const T* src, const image_view& to, T* dst) {
  tensor_descriptor a, b;
  TROUPE_RETURN_IF_ERROR(describe(a, cudnn_type<T>, from));
  TROUPE_RETURN_IF_ERROR(describe(b, cudnn_type<T>, to));
  return cudnn_status(cudnnTransformTensor(handle, &k_one<T>, a.get(), at(src, from), &k_zero<T>, b.get(), at(dst, to)),
                      "cudnnTransformTensor");
}

// A 4-element int32 shape operand (input_sizes, filter_sizes, orig_input_shape), in host
// memory; false after failing ctx.
bool read_sizes(kernel_context& ctx, int index, std::string_view what, tensor_shape* out) {
  const tensor& t = ctx.input(index);
  if (t.rank() != 1 || t.num_elements() != 4) {
    ctx.fail_invalid_argument(what, " must be a vector of 4 sizes but has shape ", t.shape());
    return false;
  }
  std::vector<std::int64_t> dims = index_values(t);
  for (std::int64_t d : dims) {
    if (d < 0) {
      ctx.fail_invalid_argument(what, " ", t.debug_string(), " has a negative size");
      return false;
    }
  }
  *out = tensor_shape(std::move(dims));
  return true;
}

// The same operand for estimated_ns(): its 4 sizes, or nullopt when it is not such a host tensor.
std::optional<tensor_shape> host_sizes(const tensor& t) {
  if (!t.initialized() || !t.on_host() || t.rank() != 1 || t.num_elements() != 4) return std::nullopt;
  std::vector<std::int64_t> dims = index_values(t);  // empty unless int32 or int64
  if (dims.size() != 4 || std::ranges::any_of(dims, [](std::int64_t d) { return d < 0; })) return std::nullopt;
  return tensor_shape(std::move(dims));
}

// The padding after the input in one dimension (window_output_size gives the one before).
std::int64_t padding_after(const window_options& o, std::int64_t in, std::int64_t out, std::int64_t window,
                           std::int64_t dilation, std::int64_t stride, std::int64_t before,
                           std::int64_t explicit_after) {
  switch (o.padding) {
    case padding_kind::valid:
      return 0;
    case padding_kind::same:
      return std::max<std::int64_t>(0, (out - 1) * stride + (window - 1) * dilation + 1 - in) - before;
    case padding_kind::explicit_:
      return explicit_after;
  }
  return 0;
}

// What the kernels share: the device's cuDNN handle and temporaries on its stream.
class cudnn_kernel : public gpu::gpu_kernel {
 public:
  using gpu_kernel::gpu_kernel;

 protected:
  cudnnHandle_t handle() const { return gpu().cudnn(); }

  // A packed temporary for the images of `v`.
  template <class T>
  tensor temp_images(const image_view& v) const {
    return allocate_temp(dtype_of<T>, tensor_shape{v.elements()});
  }
  status zero(void* data, std::size_t bytes) const {
    return cuda_status(cudaMemsetAsync(data, 0, bytes, stream()), "cudaMemsetAsync");
  }
  status copy_bytes(void* dst, const void* src, std::size_t bytes) const {
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()), "cudaMemcpyAsync");
  }
};

// --- Convolutions ---------------------------------------------------------------------------

enum class conv_pass { forward, backward_data, backward_filter };

// A convolution's geometry and how cuDNN gets its padding.
struct conv_geometry {
  window_geometry g;  // NHWC terms, the padding before
  std::int64_t out_c = 0;
  std::int64_t pad_bottom = 0, pad_right = 0;

  // cuDNN pads each dimension by min(before, after) on both sides; the rest is added as
  // zeros to a copy of the input.
  std::int64_t pad_h() const { return std::min(g.pad_top, pad_bottom); }
  std::int64_t pad_w() const { return std::min(g.pad_left, pad_right); }
  std::int64_t extra_top() const { return g.pad_top - pad_h(); }
  std::int64_t extra_left() const { return g.pad_left - pad_w(); }
  std::int64_t padded_h() const { return g.in_h + g.pad_top + pad_bottom - 2 * pad_h(); }
  std::int64_t padded_w() const { return g.in_w + g.pad_left + pad_right - 2 * pad_w(); }
  bool asymmetric() const { return g.pad_top != pad_bottom || g.pad_left != pad_right; }
  std::int64_t patch() const { return g.window_h * g.window_w * g.channels; }
};

// How one geometry runs: the layout cuDNN computes in and its algorithm.
struct conv_algorithm {
  bool nchw = false;
  int algo = 0;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::size_t workspace = 0;
};

// One convolution described to cuDNN in one layout: the (padded) input x, the filter w,
// the output y (or their gradients), packed, and the convolution itself.
struct conv_descriptors {
  bool nchw = false;
  image_view x_view, y_view, w_view;
  tensor_descriptor x, y;
  filter_descriptor w;
  convolution_descriptor conv;
};

template <class T>
status describe_convolution(const conv_geometry& cg, bool nchw, conv_descriptors* d) {
  const window_geometry& g = cg.g;
  auto i = [](std::int64_t x) { return static_cast<int>(x); };
  d->nchw = nchw;
  d->x_view = packed_images(g.batch, g.channels, cg.padded_h(), cg.padded_w(), nchw);
  d->y_view = packed_images(g.batch, cg.out_c, g.out_h, g.out_w, nchw);
  d->w_view = packed_images(cg.out_c, g.channels, g.window_h, g.window_w, nchw);  // KCRS or KRSC
  TROUPE_RETURN_IF_ERROR(describe(d->x, cudnn_type<T>, d->x_view));
  TROUPE_RETURN_IF_ERROR(describe(d->y, cudnn_type<T>, d->y_view));
  TROUPE_RETURN_IF_ERROR(d->w.created());
  TROUPE_RETURN_IF_ERROR(
      cudnn_status(cudnnSetFilter4dDescriptor(d->w.get(), cudnn_type<T>, nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC,
                                              i(cg.out_c), i(g.channels), i(g.window_h), i(g.window_w)),
                   "cudnnSetFilter4dDescriptor"));
  TROUPE_RETURN_IF_ERROR(d->conv.created());
  TROUPE_RETURN_IF_ERROR(cudnn_status(
      cudnnSetConvolution2dDescriptor(d->conv.get(), i(cg.pad_h()), i(cg.pad_w()), i(g.stride_h), i(g.stride_w),
                                      i(g.dilation_h), i(g.dilation_w), CUDNN_CROSS_CORRELATION, cudnn_type<T>),
      "cudnnSetConvolution2dDescriptor"));
  // The heuristics rank only algorithms of this math type (FMA: no tensor-core rounding).
  return cudnn_status(
      cudnnSetConvolutionMathType(d->conv.get(), exact_float32<T>() ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH),
      "cudnnSetConvolutionMathType");
}

// Those of cuDNN's algorithms, in its order, that run here within k_max_workspace, in exact
// float32 when `exact`, and never on inputs converted down to half precision.
template <class Perf>
std::vector<conv_algorithm> usable(const Perf* perf, int count, bool nchw, bool exact) {
  std::vector<conv_algorithm> found;
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > k_max_workspace) continue;
    if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || (exact && p.mathType != CUDNN_FMA_MATH)) continue;
    found.push_back({nchw, static_cast<int>(p.algo), p.mathType, p.memory});
  }
  return found;
}

// What a measurement runs on: the pass's operands in d's layout, in the order cudnnFind*Ex
// takes them (x and w forward, w and dy for the data gradient, x and dy for the filter
// gradient), its output, which the trials overwrite, and the workspace they share.
struct conv_trial {
  const void* inputs[2] = {};
  void* output = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

// The usable algorithms for d: ranked by cuDNN's heuristics when `trial` is null, else
// timed on its operands (which waits for the GPU) and fastest first.
template <class T>
status find_algorithms(cudnnHandle_t handle, conv_pass pass, const conv_descriptors& d, const conv_trial* trial,
                       std::vector<conv_algorithm>* found) {
  const bool exact = exact_float32<T>();
  const conv_trial& t = trial != nullptr ? *trial : conv_trial{};
  int count = 0;
  switch (pass) {
    case conv_pass::forward: {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
      const int n = static_cast<int>(perf.size());
      TROUPE_RETURN_IF_ERROR(
          trial == nullptr
              ? cudnn_status(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x.get(), d.w.get(), d.conv.get(),
                                                                    d.y.get(), n, &count, perf.data()),
                             "cudnnGetConvolutionForwardAlgorithm_v7")
              : cudnn_status(cudnnFindConvolutionForwardAlgorithmEx(
                                 handle, d.x.get(), t.inputs[0], d.w.get(), t.inputs[1], d.conv.get(), d.y.get(),
                                 t.output, n, &count, perf.data(), t.workspace, t.workspace_bytes),
                             "cudnnFindConvolutionForwardAlgorithmEx"));
      *found = usable(perf.data(), count, d.nchw, exact);
      return status();
    }
    case conv_pass::backward_data: {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf{};
      const int n = static_cast<int>(perf.size());
      TROUPE_RETURN_IF_ERROR(
          trial == nullptr
              ? cudnn_status(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w.get(), d.y.get(), d.conv.get(),
                                                                         d.x.get(), n, &count, perf.data()),
                             "cudnnGetConvolutionBackwardDataAlgorithm_v7")
              : cudnn_status(cudnnFindConvolutionBackwardDataAlgorithmEx(
                                 handle, d.w.get(), t.inputs[0], d.y.get(), t.inputs[1], d.conv.get(), d.x.get(),
                                 t.output, n, &count, perf.data(), t.workspace, t.workspace_bytes),
                             "cudnnFindConvolutionBackwardDataAlgorithmEx"));
      *found = usable(perf.data(), count, d.nchw, exact);
      return status();
    }
    case conv_pass::backward_filter: {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf{};
      const int n = static_cast<int>(perf.size());
      TROUPE_RETURN_IF_ERROR(
          trial == nullptr
              ? cudnn_status(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x.get(), d.y.get(), d.conv.get(),
                                                                           d.w.get(), n, &count, perf.data()),
                             "cudnnGetConvolutionBackwardFilterAlgorithm_v7")
              : cudnn_status(cudnnFindConvolutionBackwardFilterAlgorithmEx(
                                 handle, d.x.get(), t.inputs[0], d.y.get(), t.inputs[1], d.conv.get(), d.w.get(),
                                 t.output, n, &count, perf.data(), t.workspace, t.workspace_bytes),
                             "cudnnFindConvolutionBackwardFilterAlgorithmEx"));
      *found = usable(perf.data(), count, d.nchw, exact);
      return status();
    }
  }
  return status();
}

// What the three convolution kernels share: the window attributes, the checks that turn
// input shapes into a geometry (the CPU kernels' messages), the algorithm of each geometry,
// and the copies between the caller's tensors and what cuDNN computes with.
template <class T>
class conv_kernel_base : public cudnn_kernel {
 public:
  explicit conv_kernel_base(kernel_construction& c) : cudnn_kernel(c) {
    status s = read_window_options(c.node(), /*with_dilations=*/true, /*with_ksize=*/false, &options_);
    if (!s.ok()) c.fail(std::move(s));
  }

  // Each kernel's estimated_ns() asks estimate() about its geometry.
  bool estimate_depends_on_inputs() const override { return true; }

 protected:
  // Cheap for a geometry whose algorithm is known; expensive while it is still to be
  // measured, and for inputs that make no geometry (compute() reports them).
  double estimate(const tensor_shape& input, const tensor_shape& filter) const {
    if (!autotune()) return k_enqueue_ns;
    conv_geometry cg;
    if (!geometry(input, "input", filter, &cg).ok()) return k_expensive_ns;
    std::lock_guard lock(algorithms_mutex_);
    return algorithms_.contains(cache_key(cg)) ? k_enqueue_ns : k_expensive_ns;
  }

  // The geometry for an input shape (in data_format) and an HWIO filter shape; `what_input`
  // names the input in errors.
  status geometry(const tensor_shape& input, std::string_view what_input, const tensor_shape& filter,
                  conv_geometry* cg) const {
    if (input.rank() != 4) {
      return invalid_argument_error(what_input, " must be 4-D (", format(), ") but is ", input);
    }
    if (filter.rank() != 4) {
      return invalid_argument_error("filter must be 4-D [height, width, in_channels, out_channels] but is ", filter);
    }
    tensor_shape nhwc = to_nhwc_shape(input, options_.nchw);
    if (nhwc.dim(3) != filter.dim(2)) {
      return invalid_argument_error(what_input, " ", input, " (", format(), ") has ", nhwc.dim(3),
                                    " channels but filter ", filter, " expects ", filter.dim(2),
                                    " (grouped convolution is not supported)");
    }
    window_geometry& g = cg->g;
    status st = make_window_geometry(nhwc.dim(0), nhwc.dim(1), nhwc.dim(2), nhwc.dim(3), filter.dim(0), filter.dim(1),
                                     options_, &g);
    if (!st.ok()) {
      return invalid_argument_error(what_input, " ", input, " (", format(), "), filter ", filter, ", ",
                                    options_.describe(), ": ", st.message());
    }
    cg->out_c = filter.dim(3);
    cg->pad_bottom =
        padding_after(options_, g.in_h, g.out_h, g.window_h, g.dilation_h, g.stride_h, g.pad_top, options_.pad_bottom);
    cg->pad_right =
        padding_after(options_, g.in_w, g.out_w, g.window_w, g.dilation_w, g.stride_w, g.pad_left, options_.pad_right);
    const std::int64_t largest =
        std::max({g.batch * g.channels * cg->padded_h() * cg->padded_w(), g.batch * cg->out_c * g.out_h * g.out_w,
                  filter.num_elements(), g.stride_h, g.stride_w, g.dilation_h, g.dilation_w});
    if (largest > k_max_cudnn_elements) {
      return unimplemented_error(op(), " of ", what_input, " ", input, " with filter ", filter,
                                 ": a size or stride exceeds the 32-bit range of cuDNN");
    }
    return status();
  }

  tensor_shape output_shape(const conv_geometry& cg) const {
    return from_nhwc_shape(tensor_shape{cg.g.batch, cg.g.out_h, cg.g.out_w, cg.out_c}, options_.nchw);
  }

  // Checks out_backprop has the forward output's shape.
  bool check_out_backprop(kernel_context& ctx, const conv_geometry& cg, const tensor_shape& got) const {
    tensor_shape want = output_shape(cg);
    if (got != want) {
      ctx.fail_invalid_argument("out_backprop ", got, " must have the forward output's shape ", want, " (", format(),
                                ", ", options_.describe(), ")");
      return false;
    }
    return true;
  }

  // Describes the convolution to cuDNN in the layout of its algorithm and gives the
  // algorithm: the one kept for the geometry or, on its first call, the heuristics' choice
  // (in the caller's layout, or in NCHW when they have nothing usable in NHWC). When that
  // choice is to be measured, *trial_workspace is set to the workspace every algorithm the
  // heuristics found usable fits in, and the caller stages its operands in d's layout and
  // calls measure(). REQUIRES: cudnn_mutex() is held.
  status plan(conv_pass pass, const conv_geometry& cg, conv_descriptors* d, conv_algorithm* a,
              std::optional<std::size_t>* trial_workspace) const {
    {
      std::lock_guard lock(algorithms_mutex_);
      auto it = algorithms_.find(cache_key(cg));
      if (it != algorithms_.end()) {
        *a = it->second;
        TROUPE_RETURN_IF_ERROR(describe_convolution<T>(cg, a->nchw, d));
        return use_math(*d, *a);
      }
    }
    for (bool nchw : {options_.nchw, true}) {
      TROUPE_RETURN_IF_ERROR(describe_convolution<T>(cg, nchw, d));
      std::vector<conv_algorithm> ranked;
      TROUPE_RETURN_IF_ERROR(find_algorithms<T>(handle(), pass, *d, nullptr, &ranked));
      if (!ranked.empty()) {
        *a = ranked.front();
        if (!autotune()) return keep(cg, *d, *a);
        *trial_workspace = std::ranges::max(ranked, {}, &conv_algorithm::workspace).workspace;
        return status();
      }
      if (nchw) break;
    }
    return unimplemented_error(op(), ": cuDNN has no ", exact_float32<T>() ? "exact float32 " : "",
                               "algorithm for input ", input_shape(cg), " and filter [", cg.g.window_h, ",",
                               cg.g.window_w, ",", cg.g.channels, ",", cg.out_c, "] (", format(), ", ",
                               options_.describe(), ") within ", k_max_workspace >> 20, " MiB of workspace");
  }

  // Times the algorithms for d on `trial`'s operands with `workspace_bytes` of workspace
  // (which waits for the GPU) and keeps the fastest usable one for the geometry, or *a, the
  // heuristics' choice, when measuring fails or finds nothing usable. Sets d's math type to
  // the one kept. REQUIRES: cudnn_mutex() is held; plan() asked for the measurement.
  status measure(conv_pass pass, const conv_geometry& cg, const conv_descriptors& d, conv_trial trial,
                 std::size_t workspace_bytes, conv_algorithm* a) const {
    tensor workspace;
    std::vector<conv_algorithm> timed;
    status s = catch_exceptions([&] { workspace = gpu().scratch(workspace_bytes); });  // fails when memory is short
    if (s.ok()) {
      trial.workspace = workspace.raw_data();
      trial.workspace_bytes = workspace_bytes;
      s = find_algorithms<T>(handle(), pass, d, &trial, &timed);
    }
    if (s.ok() && !timed.empty()) *a = timed.front();
    return keep(cg, d, *a);
  }

  // The caller's tensors as cuDNN sees them.
  image_view user_input(const conv_geometry& cg) const {
    return packed_images(cg.g.batch, cg.g.channels, cg.g.in_h, cg.g.in_w, options_.nchw);
  }
  image_view user_output(const conv_geometry& cg) const {
    return packed_images(cg.g.batch, cg.out_c, cg.g.out_h, cg.g.out_w, options_.nchw);
  }
  static image_view user_filter(const conv_geometry& cg) {
    return hwio_filter(cg.g.window_h, cg.g.window_w, cg.g.channels, cg.out_c);
  }
  // Where the input lies in d's (padded) input.
  static image_view input_inside(const conv_geometry& cg, const conv_descriptors& d) {
    return inner_images(d.x_view, cg.g.in_h, cg.g.in_w, cg.extra_top(), cg.extra_left());
  }
  // True when cuDNN's input (or input gradient) is a copy: another layout, or padding.
  bool input_copied(const conv_geometry& cg, const conv_descriptors& d) const {
    return d.nchw != options_.nchw || cg.asymmetric();
  }

  // The input as cuDNN takes it: `x`, or a copy in d's layout, padded with zeros.
  status stage_input(const conv_geometry& cg, const conv_descriptors& d, const T* x, tensor* copy,
                     const T** staged) const {
    *staged = x;
    if (!input_copied(cg, d)) return status();
    *copy = temp_images<T>(d.x_view);
    if (cg.asymmetric()) TROUPE_RETURN_IF_ERROR(zero(copy->raw_data(), copy->byte_size()));
    TROUPE_RETURN_IF_ERROR(copy_images(handle(), user_input(cg), x, input_inside(cg, d), copy->data<T>()));
    *staged = copy->data<T>();
    return status();
  }
  // The output gradient as cuDNN takes it: `dy`, or a copy in d's layout.
  status stage_output(const conv_geometry& cg, const conv_descriptors& d, const T* dy, tensor* copy,
                      const T** staged) const {
    *staged = dy;
    if (d.nchw == options_.nchw) return status();
    *copy = temp_images<T>(d.y_view);
    TROUPE_RETURN_IF_ERROR(copy_images(handle(), user_output(cg), dy, d.y_view, copy->data<T>()));
    *staged = copy->data<T>();
    return status();
  }
  // The HWIO filter copied to cuDNN's layout for d.
  status stage_filter(const conv_geometry& cg, const conv_descriptors& d, const T* w, tensor* copy) const {
    *copy = temp_images<T>(d.w_view);
    return copy_images(handle(), user_filter(cg), w, d.w_view, copy->data<T>());
  }

  tensor_shape input_shape(const conv_geometry& cg) const {
    return from_nhwc_shape(tensor_shape{cg.g.batch, cg.g.in_h, cg.g.in_w, cg.g.channels}, options_.nchw);
  }
  const char* format() const { return options_.nchw ? "NCHW" : "NHWC"; }

  window_options options_;

 private:
  using algorithm_key = std::array<std::int64_t, 15>;
  static algorithm_key cache_key(const conv_geometry& cg) { return prefixed_key<1>({cg.g.batch}, cg.g, cg.out_c); }

  // Keeps `a` for cg's geometry and sets d's math type to a's.
  status keep(const conv_geometry& cg, const conv_descriptors& d, const conv_algorithm& a) const {
    {
      std::lock_guard lock(algorithms_mutex_);
      algorithms_[cache_key(cg)] = a;
    }
    return use_math(d, a);
  }
  static status use_math(const conv_descriptors& d, const conv_algorithm& a) {
    return cudnn_status(cudnnSetConvolutionMathType(d.conv.get(), a.math), "cudnnSetConvolutionMathType");
  }

  mutable std::mutex algorithms_mutex_;
  mutable std::map<algorithm_key, conv_algorithm> algorithms_;  // by batch and geometry
};

template <class T>
class conv2d_kernel final : public conv_kernel_base<T> {
 public:
  using conv_kernel_base<T>::conv_kernel_base;

  double estimated_ns(std::span<const tensor> inputs) const override {
    return inputs.size() == 2 ? this->estimate(inputs[0].shape(), inputs[1].shape()) : this->k_expensive_ns;
  }

  void compute(kernel_context& ctx) override {
    if (!this->begin(ctx)) return;
    const tensor& input = ctx.input(0);
    const tensor& filter = ctx.input(1);
    conv_geometry cg;
    if (!this->check(ctx, this->geometry(input.shape(), "input", filter.shape(), &cg))) return;
    tensor& output = this->allocate_output(ctx, 0, this->output_shape(cg));
    if (output.num_elements() == 0) return;
    if (cg.patch() == 0) {
      this->check(ctx, this->zero(output.raw_data(), output.byte_size()));
      return;
    }
    this->check(ctx, enqueue(cg, input.data<T>(), filter.data<T>(), output.data<T>()));
  }

 private:
  status enqueue(const conv_geometry& cg, const T* x, const T* w, T* y) const {
    std::lock_guard lock(this->gpu().cudnn_mutex());
    conv_descriptors d;
    conv_algorithm a;
    std::optional<std::size_t> trial_workspace;
    TROUPE_RETURN_IF_ERROR(this->plan(conv_pass::forward, cg, &d, &a, &trial_workspace));
    tensor x_copy, w_copy, y_copy;
    const T* x_in = nullptr;
    TROUPE_RETURN_IF_ERROR(this->stage_input(cg, d, x, &x_copy, &x_in));
    TROUPE_RETURN_IF_ERROR(this->stage_filter(cg, d, w, &w_copy));
    const bool relayout = d.nchw != this->options_.nchw;
    if (relayout) y_copy = this->template temp_images<T>(d.y_view);
    T* y_out = relayout ? y_copy.data<T>() : y;
    if (trial_workspace) {
      TROUPE_RETURN_IF_ERROR(
          this->measure(conv_pass::forward, cg, d, {{x_in, w_copy.data<T>()}, y_out}, *trial_workspace, &a));
    }
    tensor workspace = this->gpu().scratch(a.workspace);
    TROUPE_RETURN_IF_ERROR(
        cudnn_status(cudnnConvolutionForward(this->handle(), &k_one<T>, d.x.get(), x_in, d.w.get(), w_copy.data<T>(),
                                             d.conv.get(), static_cast<cudnnConvolutionFwdAlgo_t>(a.algo),
                                             workspace.raw_data(), a.workspace, &k_zero<T>, d.y.get(), y_out),
                     "cudnnConvolutionForward"));
    if (!relayout) return status();
    return copy_images(this->handle(), d.y_view, y_out, this->user_output(cg), y);
  }
};

template <class T>
class conv2d_backprop_input_kernel final : public conv_kernel_base<T> {
 public:
  explicit conv2d_backprop_input_kernel(kernel_construction& c) : conv_kernel_base<T>(c) {
    this->declare_host_memory_input(0);  // input_sizes
  }

  double estimated_ns(std::span<const tensor> inputs) const override {
    std::optional<tensor_shape> input_sizes = inputs.size() == 3 ? host_sizes(inputs[0]) : std::nullopt;
    return input_sizes ? this->estimate(*input_sizes, inputs[1].shape()) : this->k_expensive_ns;
  }

  void compute(kernel_context& ctx) override {
    if (!this->begin(ctx)) return;
    tensor_shape input_sizes;
    if (!read_sizes(ctx, 0, "input_sizes", &input_sizes)) return;
    const tensor& filter = ctx.input(1);
    const tensor& out_backprop = ctx.input(2);
    conv_geometry cg;
    if (!this->check(ctx, this->geometry(input_sizes, "input_sizes", filter.shape(), &cg))) return;
    if (!this->check_out_backprop(ctx, cg, out_backprop.shape())) return;
    tensor& input_grad = this->allocate_output(ctx, 0, input_sizes);
    if (input_grad.num_elements() == 0) return;
    if (out_backprop.num_elements() == 0 || cg.patch() == 0) {
      this->check(ctx, this->zero(input_grad.raw_data(), input_grad.byte_size()));
      return;
    }
    this->check(ctx, enqueue(cg, filter.data<T>(), out_backprop.data<T>(), input_grad.data<T>()));
  }

 private:
  status enqueue(const conv_geometry& cg, const T* w, const T* dy, T* dx) const {
    std::lock_guard lock(this->gpu().cudnn_mutex());
    conv_descriptors d;
    conv_algorithm a;
    std::optional<std::size_t> trial_workspace;
    TROUPE_RETURN_IF_ERROR(this->plan(conv_pass::backward_data, cg, &d, &a, &trial_workspace));
    tensor w_copy, dy_copy, dx_copy;
    const T* dy_in = nullptr;
    TROUPE_RETURN_IF_ERROR(this->stage_filter(cg, d, w, &w_copy));
    TROUPE_RETURN_IF_ERROR(this->stage_output(cg, d, dy, &dy_copy, &dy_in));
    // A copied input's gradient is computed for the copy, then cropped to the caller's.
    const bool copied = this->input_copied(cg, d);
    if (copied) dx_copy = this->template temp_images<T>(d.x_view);
    T* dx_out = copied ? dx_copy.data<T>() : dx;
    if (trial_workspace) {  // the trials write dx_out, which the real call overwrites
      TROUPE_RETURN_IF_ERROR(
          this->measure(conv_pass::backward_data, cg, d, {{w_copy.data<T>(), dy_in}, dx_out}, *trial_workspace, &a));
    }
    tensor workspace = this->gpu().scratch(a.workspace);
    TROUPE_RETURN_IF_ERROR(cudnn_status(
        cudnnConvolutionBackwardData(this->handle(), &k_one<T>, d.w.get(), w_copy.data<T>(), d.y.get(), dy_in,
                                     d.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo),
                                     workspace.raw_data(), a.workspace, &k_zero<T>, d.x.get(), dx_out),
        "cudnnConvolutionBackwardData"));
    if (!copied) return status();
    return copy_images(this->handle(), this->input_inside(cg, d), dx_out, this->user_input(cg), dx);
  }
};

template <class T>
class conv2d_backprop_filter_kernel final : public conv_kernel_base<T> {
 public:
  explicit conv2d_backprop_filter_kernel(kernel_construction& c) : conv_kernel_base<T>(c) {
    this->declare_host_memory_input(1);  // filter_sizes
  }

  double estimated_ns(std::span<const tensor> inputs) const override {
    std::optional<tensor_shape> filter_sizes = inputs.size() == 3 ? host_sizes(inputs[1]) : std::nullopt;
    return filter_sizes ? this->estimate(inputs[0].shape(), *filter_sizes) : this->k_expensive_ns;
  }

  void compute(kernel_context& ctx) override {
    if (!this->begin(ctx)) return;
    const tensor& input = ctx.input(0);
    tensor_shape filter_sizes;
    if (!read_sizes(ctx, 1, "filter_sizes", &filter_sizes)) return;
    const tensor& out_backprop = ctx.input(2);
    conv_geometry cg;
    if (!this->check(ctx, this->geometry(input.shape(), "input", filter_sizes, &cg))) return;
    if (!this->check_out_backprop(ctx, cg, out_backprop.shape())) return;
    tensor& filter_grad = this->allocate_output(ctx, 0, filter_sizes);
    if (filter_grad.num_elements() == 0) return;
    if (out_backprop.num_elements() == 0) {  // no output pixels: nothing to sum
      this->check(ctx, this->zero(filter_grad.raw_data(), filter_grad.byte_size()));
      return;
    }
    this->check(ctx, enqueue(cg, input.data<T>(), out_backprop.data<T>(), filter_grad.data<T>()));
  }

 private:
  status enqueue(const conv_geometry& cg, const T* x, const T* dy, T* dw) const {
    std::lock_guard lock(this->gpu().cudnn_mutex());
    conv_descriptors d;
    conv_algorithm a;
    std::optional<std::size_t> trial_workspace;
    TROUPE_RETURN_IF_ERROR(this->plan(conv_pass::backward_filter, cg, &d, &a, &trial_workspace));
    tensor x_copy, dy_copy;
    const T* x_in = nullptr;
    const T* dy_in = nullptr;
    TROUPE_RETURN_IF_ERROR(this->stage_input(cg, d, x, &x_copy, &x_in));
    TROUPE_RETURN_IF_ERROR(this->stage_output(cg, d, dy, &dy_copy, &dy_in));
    tensor dw_copy = this->template temp_images<T>(d.w_view);
    if (trial_workspace) {  // the trials write dw_copy, which the real call overwrites
      TROUPE_RETURN_IF_ERROR(this->measure(conv_pass::backward_filter, cg, d, {{x_in, dy_in}, dw_copy.data<T>()},
                                           *trial_workspace, &a));
    }
    tensor workspace = this->gpu().scratch(a.workspace);
    TROUPE_RETURN_IF_ERROR(cudnn_status(
        cudnnConvolutionBackwardFilter(this->handle(), &k_one<T>, d.x.get(), x_in, d.y.get(), dy_in, d.conv.get(),
                                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), workspace.raw_data(),
                                       a.workspace, &k_zero<T>, d.w.get(), dw_copy.data<T>()),
        "cudnnConvolutionBackwardFilter"));
    return copy_images(this->handle(), d.w_view, dw_copy.data<T>(), this->user_filter(cg), dw);
  }
};

// --- Pooling --------------------------------------------------------------------------------

// The four pooling kernels: the window attributes, the CPU kernels' checks, and one
// enqueue for a forward pass (x -> y) or a gradient (dy -> dx; max pooling also reads x).
template <class T>
class pool_kernel_base : public cudnn_kernel {
 public:
  pool_kernel_base(kernel_construction& c, bool max) : cudnn_kernel(c), max_(max) {
    status s = read_window_options(c.node(), /*with_dilations=*/false, /*with_ksize=*/true, &options_);
    if (!s.ok()) c.fail(std::move(s));
  }

 protected:
  // The geometry for an input of `shape` (in data_format); false after failing ctx.
  bool make_geometry(kernel_context& ctx, const tensor_shape& shape, std::string_view what, window_geometry* g) const {
    if (!check(ctx, pool_geometry(options_, shape, what, g))) return false;
    const std::int64_t largest =
        std::max({padded_input(*g, true).elements(), g->batch * g->channels * g->out_h * g->out_w, options_.window_h,
                  options_.window_w, options_.stride_h, options_.stride_w});
    if (largest > k_max_cudnn_elements) {
      ctx.fail(
          unimplemented_error(op(), " of ", what, " ", shape, ": a size or stride exceeds the 32-bit range of cuDNN"));
      return false;
    }
    return true;
  }

  tensor_shape output_shape(const window_geometry& g) const { return pooled_shape(options_, g); }

  // Checks a gradient-side operand has the pooled output's shape.
  bool check_pooled_shape(kernel_context& ctx, const window_geometry& g, std::string_view what,
                          const tensor_shape& got) const {
    return check(ctx, kernels::check_pooled_shape(options_, g, what, got));
  }

  // Enqueues y = pool(x) (dy null) or dx = the gradient for dy (x: max pooling's input,
  // null for average pooling) into `out`, in the caller's layout if cuDNN can.
  status enqueue(const window_geometry& g, const T* x, const T* dy, T* out) const {
    std::lock_guard lock(this->gpu().cudnn_mutex());
    const bool nchw = options_.nchw || nchw_only_.load();
    cudnnStatus_t call = CUDNN_STATUS_SUCCESS;
    status s = enqueue_in(nchw, g, x, dy, out, &call);
    if (nchw || call != CUDNN_STATUS_NOT_SUPPORTED) return s;
    nchw_only_ = true;  // cuDNN does not pool NHWC images of this dtype: NCHW copies from now on
    return enqueue_in(true, g, x, dy, out, &call);
  }

  window_options options_;

 private:
  // EXPLICIT padding: the input is copied into a buffer padded with lowest().
  bool padded_copy() const { return options_.padding == padding_kind::explicit_; }

  // The input images as cuDNN pools them in layout `nchw`.
  image_view padded_input(const window_geometry& g, bool nchw) const {
    if (!padded_copy()) return packed_images(g.batch, g.channels, g.in_h, g.in_w, nchw);
    return packed_images(g.batch, g.channels, g.in_h + options_.pad_top + options_.pad_bottom,
                         g.in_w + options_.pad_left + options_.pad_right, nchw);
  }

  // enqueue() computing in layout `nchw`; *call is the status of the last pooling call.
  status enqueue_in(bool nchw, const window_geometry& g, const T* x, const T* dy, T* out, cudnnStatus_t* call) const {
    const bool padded = padded_copy();
    const bool relayout = nchw != options_.nchw;
    const bool copied = padded || relayout;  // cuDNN's input (gradient) is a copy
    const image_view user_in = packed_images(g.batch, g.channels, g.in_h, g.in_w, options_.nchw);
    const image_view user_out = packed_images(g.batch, g.channels, g.out_h, g.out_w, options_.nchw);
    const image_view in = padded_input(g, nchw);
    const image_view inside =
        inner_images(in, g.in_h, g.in_w, padded ? options_.pad_top : 0, padded ? options_.pad_left : 0);
    const image_view pooled = packed_images(g.batch, g.channels, g.out_h, g.out_w, nchw);
    tensor_descriptor in_desc, pooled_desc;
    pooling_descriptor pooling;
    TROUPE_RETURN_IF_ERROR(describe(in_desc, cudnn_type<T>, in));
    TROUPE_RETURN_IF_ERROR(describe(pooled_desc, cudnn_type<T>, pooled));
    TROUPE_RETURN_IF_ERROR(pooling.created());
    const cudnnPoolingMode_t mode = !max_           ? CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
                                    : dy == nullptr ? CUDNN_POOLING_MAX
                                                    : CUDNN_POOLING_MAX_DETERMINISTIC;
    auto i = [](std::int64_t v) { return static_cast<int>(v); };
    TROUPE_RETURN_IF_ERROR(
        cudnn_status(cudnnSetPooling2dDescriptor(pooling.get(), mode, CUDNN_NOT_PROPAGATE_NAN, i(g.window_h),
                                                 i(g.window_w), padded ? 0 : i(g.pad_top), padded ? 0 : i(g.pad_left),
                                                 i(g.stride_h), i(g.stride_w)),
                     "cudnnSetPooling2dDescriptor"));

    tensor x_copy;
    const T* x_in = x;
    if (x != nullptr && copied) {
      x_copy = temp_images<T>(in);
      if (padded) {
        const T lowest = std::numeric_limits<T>::lowest();
        TROUPE_RETURN_IF_ERROR(
            cudnn_status(cudnnSetTensor(handle(), in_desc.get(), x_copy.raw_data(), &lowest), "cudnnSetTensor"));
      }
      TROUPE_RETURN_IF_ERROR(copy_images(handle(), user_in, x, inside, x_copy.data<T>()));
      x_in = x_copy.data<T>();
    }
    auto pool_forward = [&](T* y) {
      *call = cudnnPoolingForward(handle(), pooling.get(), &k_one<T>, in_desc.get(), x_in, &k_zero<T>,
                                  pooled_desc.get(), y);
      return cudnn_status(*call, "cudnnPoolingForward");
    };

    if (dy == nullptr) {
      tensor y_copy;
      if (relayout) y_copy = temp_images<T>(pooled);
      T* y = relayout ? y_copy.data<T>() : out;
      TROUPE_RETURN_IF_ERROR(pool_forward(y));
      return relayout ? copy_images(handle(), pooled, static_cast<const T*>(y), user_out, out) : status();
    }

    tensor dy_copy, dx_copy, y_copy;
    const T* dy_in = dy;
    if (relayout) {
      dy_copy = temp_images<T>(pooled);
      TROUPE_RETURN_IF_ERROR(copy_images(handle(), user_out, dy, pooled, dy_copy.data<T>()));
      dy_in = dy_copy.data<T>();
    }
    if (copied) dx_copy = temp_images<T>(in);
    T* dx = copied ? dx_copy.data<T>() : out;
    // Max pooling sends each gradient to where x equals its window's max: y is recomputed
    // from x. Average pooling reads neither x nor y, but cuDNN wants pointers: dx and dy.
    const T* y = dy_in;
    const T* x_arg = dx;
    if (max_) {
      y_copy = temp_images<T>(pooled);
      TROUPE_RETURN_IF_ERROR(pool_forward(y_copy.data<T>()));
      y = y_copy.data<T>();
      x_arg = x_in;
    }
    *call = cudnnPoolingBackward(handle(), pooling.get(), &k_one<T>, pooled_desc.get(), y, pooled_desc.get(), dy_in,
                                 in_desc.get(), x_arg, &k_zero<T>, in_desc.get(), dx);
    TROUPE_RETURN_IF_ERROR(cudnn_status(*call, "cudnnPoolingBackward"));
    return copied ? copy_images(handle(), inside, static_cast<const T*>(dx), user_in, out) : status();
  }

  const bool max_;
  mutable std::atomic<bool> nchw_only_{false};
};

template <class T>
class max_pool_kernel final : public pool_kernel_base<T> {
 public:
  explicit max_pool_kernel(kernel_construction& c) : pool_kernel_base<T>(c, /*max=*/true) {}

  void compute(kernel_context& ctx) override {
    if (!this->begin(ctx)) return;
    const tensor& input = ctx.input(0);
    window_geometry g;
    if (!this->make_geometry(ctx, input.shape(), "input", &g)) return;
    tensor& output = this->allocate_output(ctx, 0, this->output_shape(g));
    if (output.num_elements() == 0) return;
    this->check(ctx, this->enqueue(g, input.data<T>(), nullptr, output.data<T>()));
  }
};

template <class T>
class max_pool_grad_kernel final : public pool_kernel_base<T> {
 public:
  explicit max_pool_grad_kernel(kernel_construction& c) : pool_kernel_base<T>(c, /*max=*/true) {}

  void compute(kernel_context& ctx) override {
    if (!this->begin(ctx)) return;
    const tensor& orig_input = ctx.input(0);
    window_geometry g;
    if (!this->make_geometry(ctx, orig_input.shape(), "orig_input", &g)) return;
    if (!this->check_pooled_shape(ctx, g, "orig_output", ctx.input(1).shape())) return;
    if (!this->check_pooled_shape(ctx, g, "grad", ctx.input(2).shape())) return;
    tensor& output = this->allocate_output(ctx, 0, orig_input.shape());
    if (output.num_elements() == 0) return;
    this->check(ctx, this->enqueue(g, orig_input.data<T>(), ctx.input(2).data<T>(), output.data<T>()));
  }
};

template <class T>
class avg_pool_kernel final : public pool_kernel_base<T> {
 public:
  explicit avg_pool_kernel(kernel_construction& c) : pool_kernel_base<T>(c, /*max=*/false) {}

  void compute(kernel_context& ctx) override {
    if (!this->begin(ctx)) return;
    const tensor& input = ctx.input(0);
    window_geometry g;
    if (!this->make_geometry(ctx, input.shape(), "value", &g)) return;
    tensor& output = this->allocate_output(ctx, 0, this->output_shape(g));
    if (output.num_elements() == 0) return;
    this->check(ctx, this->enqueue(g, input.data<T>(), nullptr, output.data<T>()));
  }
};

template <class T>
class avg_pool_grad_kernel final : public pool_kernel_base<T> {
 public:
  explicit avg_pool_grad_kernel(kernel_construction& c) : pool_kernel_base<T>(c, /*max=*/false) {
    this->declare_host_memory_input(0);  // orig_input_shape
  }

  void compute(kernel_context& ctx) override {
    if (!this->begin(ctx)) return;
    tensor_shape input_shape;
    if (!read_sizes(ctx, 0, "orig_input_shape", &input_shape)) return;
    window_geometry g;
    if (!this->make_geometry(ctx, input_shape, "orig_input_shape", &g)) return;
    if (!this->check_pooled_shape(ctx, g, "grad", ctx.input(1).shape())) return;
    tensor& output = this->allocate_output(ctx, 0, input_shape);
    if (output.num_elements() == 0) return;
    this->check(ctx, this->enqueue(g, nullptr, ctx.input(1).data<T>(), output.data<T>()));
  }
};

// --- LRN ------------------------------------------------------------------------------------

// LRN over the last dimension of an NHWC tensor, seen by cuDNN as packed NCHW
// [rows, depth, 1, 1] (cross-channel LRN mixes only the depths of one row).
template <class T>
class lrn_kernel_base : public cudnn_kernel {
 public:
  explicit lrn_kernel_base(kernel_construction& c) : cudnn_kernel(c) {
    if (!c.get_attr("depth_radius", &depth_radius_) || !c.get_attr("bias", &bias_) || !c.get_attr("alpha", &alpha_) ||
        !c.get_attr("beta", &beta_)) {
      return;
    }
    if (depth_radius_ < 0) {
      c.fail(invalid_argument_error("depth_radius must be >= 0, but is ", depth_radius_));
    }
  }

 protected:
  // Whether cuDNN computes this LRN: its window of at most CUDNN_LRN_MAX_N depths, its
  // bounds on bias and beta, its int sizes; otherwise the kernels of gpu_cudnn_launch.h do.
  bool cudnn_can(std::int64_t elements) const {
    return 2 * depth_radius_ + 1 <= CUDNN_LRN_MAX_N && bias_ >= CUDNN_LRN_MIN_K && beta_ >= CUDNN_LRN_MIN_BETA &&
           elements <= k_max_cudnn_elements;
  }

  // Describes rows x depth values and the LRN to cuDNN.
  status describe_lrn(std::int64_t rows, std::int64_t depth, tensor_descriptor* data, lrn_descriptor* lrn) const {
    TROUPE_RETURN_IF_ERROR(describe(*data, cudnn_type<T>, packed_images(rows, depth, 1, 1, true)));
    TROUPE_RETURN_IF_ERROR(lrn->created());
    const auto n = static_cast<unsigned>(2 * depth_radius_ + 1);
    return cudnn_status(cudnnSetLRNDescriptor(lrn->get(), n, static_cast<double>(alpha_) * n,
                                              static_cast<double>(beta_), static_cast<double>(bias_)),
                        "cudnnSetLRNDescriptor");
  }

  std::int64_t depth_radius_ = 5;
  float bias_ = 1, alpha_ = 1, beta_ = 0.5f;
};

// output = input / (bias + alpha * sum over the depth window of input^2)^beta.
template <class T>
class lrn_kernel final : public lrn_kernel_base<T> {
 public:
  using lrn_kernel_base<T>::lrn_kernel_base;

  void compute(kernel_context& ctx) override {
    if (!this->begin(ctx)) return;
    const tensor& in = ctx.input(0);
    if (in.rank() != 4) {
      return ctx.fail_invalid_argument("LRN input must be 4-dimensional (NHWC), but is ", in.shape());
    }
    tensor& out = this->allocate_output(ctx, 0, in.shape());
    if (out.num_elements() == 0) return;
    const std::int64_t depth = in.dim(3);
    this->check(ctx, enqueue(in.num_elements() / depth, depth, in.data<T>(), out.data<T>()));
  }

 private:
  status enqueue(std::int64_t rows, std::int64_t depth, const T* x, T* y) const {
    if (this->cudnn_can(rows * depth)) {
      std::lock_guard lock(this->gpu().cudnn_mutex());
      tensor_descriptor data;
      lrn_descriptor lrn;
      TROUPE_RETURN_IF_ERROR(this->describe_lrn(rows, depth, &data, &lrn));
      cudnnStatus_t e = cudnnLRNCrossChannelForward(this->handle(), lrn.get(), CUDNN_LRN_CROSS_CHANNEL_DIM1, &k_one<T>,
                                                    data.get(), x, &k_zero<T>, data.get(), y);
      if (e != CUDNN_STATUS_NOT_SUPPORTED) return cudnn_status(e, "cudnnLRNCrossChannelForward");
    }
    gpu::launch_lrn<T>(x, y, rows, depth, this->depth_radius_, this->bias_, this->alpha_, this->beta_, this->stream());
    return cuda_status(cudaGetLastError(), "launching LRN");
  }
};

// LRNGrad(input_grads, input_image, output_image).
template <class T>
class lrn_grad_kernel final : public lrn_kernel_base<T> {
 public:
  using lrn_kernel_base<T>::lrn_kernel_base;

  void compute(kernel_context& ctx) override {
    if (!this->begin(ctx)) return;
    const tensor& dy = ctx.input(0);
    const tensor& in = ctx.input(1);
    const tensor& out = ctx.input(2);
    if (in.rank() != 4 || dy.shape() != in.shape() || out.shape() != in.shape()) {
      return ctx.fail_invalid_argument(
          "LRNGrad inputs must be 4-dimensional (NHWC) and of one shape, but input_grads is ", dy.shape(),
          ", input_image ", in.shape(), " and output_image ", out.shape());
    }
    tensor& result = this->allocate_output(ctx, 0, in.shape());
    if (result.num_elements() == 0) return;
    const std::int64_t depth = in.dim(3);
    this->check(ctx,
                enqueue(in.num_elements() / depth, depth, dy.data<T>(), in.data<T>(), out.data<T>(), result.data<T>()));
  }

 private:
  status enqueue(std::int64_t rows, std::int64_t depth, const T* dy, const T* x, const T* y, T* dx) const {
    if (this->cudnn_can(rows * depth)) {
      std::lock_guard lock(this->gpu().cudnn_mutex());
      tensor_descriptor data;
      lrn_descriptor lrn;
      TROUPE_RETURN_IF_ERROR(this->describe_lrn(rows, depth, &data, &lrn));
      cudnnStatus_t e =
          cudnnLRNCrossChannelBackward(this->handle(), lrn.get(), CUDNN_LRN_CROSS_CHANNEL_DIM1, &k_one<T>, data.get(),
                                       y, data.get(), dy, data.get(), x, &k_zero<T>, data.get(), dx);
      if (e != CUDNN_STATUS_NOT_SUPPORTED) return cudnn_status(e, "cudnnLRNCrossChannelBackward");
    }
    gpu::launch_lrn_grad<T>(dy, x, y, dx, rows, depth, this->depth_radius_, this->bias_, this->alpha_, this->beta_,
                            this->stream());
    return cuda_status(cudaGetLastError(), "launching LRNGrad");
  }
};

// --- FusedBatchNormV3 and its gradient ------------------------------------------------------

// The attributes, the operand checks and x's [outer, channels, inner] layout are the CPU
// kernels' (kernels/shape_checks.h); cuDNN adds a limit on x's size.
template <class T>
class batch_norm_kernel_base : public cudnn_kernel {
 public:
  explicit batch_norm_kernel_base(kernel_construction& c) : cudnn_kernel(c) {
    if (status s = read_batch_norm_options(c.node(), &options_); !s.ok()) c.fail(std::move(s));
  }

 protected:
  status within_cudnn(const tensor& x) const {
    if (x.num_elements() > k_max_cudnn_elements) {
      return unimplemented_error(op(), " of x ", x.shape(), ": more elements than cuDNN's 32-bit sizes reach");
    }
    return status();
  }

  // x as cuDNN sees it, packed NCHW [outer, channels, inner, 1] (the memory of either
  // layout), and the per-channel vectors' [1, channels, 1, 1].
  status describe_batch_norm(const channel_layout& l, tensor_descriptor* x, tensor_descriptor* per_channel) const {
    TROUPE_RETURN_IF_ERROR(describe(*x, cudnn_type<T>, packed_images(l.outer, l.channels, l.inner, 1, true)));
    TROUPE_RETURN_IF_ERROR(per_channel->created());
    return cudnn_status(cudnnDeriveBNTensorDescriptor(per_channel->get(), x->get(), CUDNN_BATCHNORM_SPATIAL),
                        "cudnnDeriveBNTensorDescriptor");
  }

  double epsilon() const { return static_cast<double>(options_.epsilon); }

  batch_norm_options options_;
};

// Outputs: y, batch_mean, batch_variance, reserve_space_1 (the mean used), reserve_space_2
// (the variance used: biased in training), reserve_space_3 (an unused scalar 0).
template <class T>
class fused_batch_norm_kernel final : public batch_norm_kernel_base<T> {
 public:
  explicit fused_batch_norm_kernel(kernel_construction& c) : batch_norm_kernel_base<T>(c) {
    c.get_attr("exponential_avg_factor", &exponential_avg_factor_);
  }

  void compute(kernel_context& ctx) override {
    if (!this->begin(ctx)) return;
    const tensor& x = ctx.input(0);
    // In training with exponential_avg_factor 1 the running statistics are not read and
    // may be empty.
    const bool reads_statistics = !this->options_.is_training || exponential_avg_factor_ != 1.0f;
    auto layout = batch_norm_layout(this->op(), this->options_, x, ctx.input(1), ctx.input(2), ctx.input(3),
                                    ctx.input(4), reads_statistics);
    if (!layout.ok()) return ctx.fail(layout.error());
    if (status s = this->within_cudnn(x); !s.ok()) return ctx.fail(std::move(s));
    const std::int64_t channels = layout->channels;

    outputs out;
    out.y = this->allocate_output(ctx, 0, x.shape()).template data<T>();
    for (int i = 1; i <= 4; ++i) {
      out.statistics[i - 1] = this->allocate_output(ctx, i, tensor_shape{channels}).template data<T>();
    }
    tensor& reserve_3 = this->allocate_output(ctx, 5, tensor_shape{});
    if (!this->check(ctx, this->zero(reserve_3.raw_data(), reserve_3.byte_size()))) return;
    if (channels == 0) return;
    this->check(ctx, this->options_.is_training ? train(ctx, *layout, out) : infer(ctx, *layout, out));
  }

 private:
  struct outputs {
    T* y = nullptr;
    T* statistics[4] = {};  // batch_mean, batch_variance, saved mean, saved variance
  };

  status train(kernel_context& ctx, const channel_layout& l, const outputs& out) const {
    const bool blend = exponential_avg_factor_ != 1.0f;
    tensor batch = this->allocate_temp(dtype_of<T>, tensor_shape{2 * l.channels});  // mean, 1 / sqrt(var + eps)
    T* mean = batch.data<T>();
    T* inv_std = mean + l.channels;
    if (l.per_channel() > 0) {
      std::lock_guard lock(this->gpu().cudnn_mutex());
      tensor_descriptor x_desc, channel_desc;
      TROUPE_RETURN_IF_ERROR(this->describe_batch_norm(l, &x_desc, &channel_desc));
      // No running averages (null, factor 1): the kernel below blends as the CPU does.
      TROUPE_RETURN_IF_ERROR(cudnn_status(
          cudnnBatchNormalizationForwardTraining(this->handle(), CUDNN_BATCHNORM_SPATIAL, &k_one<T>, &k_zero<T>,
                                                 x_desc.get(), ctx.input(0).data<T>(), x_desc.get(), out.y,
                                                 channel_desc.get(), ctx.input(1).data<T>(), ctx.input(2).data<T>(),
                                                 1.0, nullptr, nullptr, this->epsilon(), mean, inv_std),
          "cudnnBatchNormalizationForwardTraining"));
    }
    gpu::launch_batch_norm_statistics<T>(mean, inv_std, blend ? ctx.input(3).data<T>() : nullptr,
                                         blend ? ctx.input(4).data<T>() : nullptr, l.channels, l.per_channel(),
                                         exponential_avg_factor_, this->epsilon(), out.statistics[0], out.statistics[1],
                                         out.statistics[2], out.statistics[3], this->stream());
    return cuda_status(cudaGetLastError(), "launching the batch statistics");
  }

  status infer(kernel_context& ctx, const channel_layout& l, const outputs& out) const {
    const T* mean = ctx.input(3).data<T>();
    const T* variance = ctx.input(4).data<T>();
    if (l.per_channel() > 0) {
      std::lock_guard lock(this->gpu().cudnn_mutex());
      tensor_descriptor x_desc, channel_desc;
      TROUPE_RETURN_IF_ERROR(this->describe_batch_norm(l, &x_desc, &channel_desc));
      TROUPE_RETURN_IF_ERROR(cudnn_status(
          cudnnBatchNormalizationForwardInference(this->handle(), CUDNN_BATCHNORM_SPATIAL, &k_one<T>, &k_zero<T>,
                                                  x_desc.get(), ctx.input(0).data<T>(), x_desc.get(), out.y,
                                                  channel_desc.get(), ctx.input(1).data<T>(), ctx.input(2).data<T>(),
                                                  mean, variance, this->epsilon()),
          "cudnnBatchNormalizationForwardInference"));
    }
    const std::size_t bytes = static_cast<std::size_t>(l.channels) * sizeof(T);
    for (int i = 0; i < 4; ++i) {
      TROUPE_RETURN_IF_ERROR(this->copy_bytes(out.statistics[i], i % 2 == 0 ? mean : variance, bytes));
    }
    return status();
  }

  float exponential_avg_factor_ = 1.0f;
};

// FusedBatchNormGradV3(y_backprop, x, scale, reserve_space_1, reserve_space_2,
// reserve_space_3) -> x_backprop, scale_backprop, offset_backprop, reserve_space_4,
// reserve_space_5 (both empty), normalizing with the mean and variance of the reserve
// spaces. cuDNN's backward pass is training mode's; in inference mode x_backprop is
// then overwritten with dy * scale / sqrt(variance + epsilon).
template <class T>
class fused_batch_norm_grad_kernel final : public batch_norm_kernel_base<T> {
 public:
  using batch_norm_kernel_base<T>::batch_norm_kernel_base;

  void compute(kernel_context& ctx) override {
    if (!this->begin(ctx)) return;
    const tensor& dy = ctx.input(0);
    const tensor& x = ctx.input(1);
    auto layout = batch_norm_grad_layout(this->op(), this->options_, dy, x, ctx.input(2), ctx.input(3), ctx.input(4));
    if (!layout.ok()) return ctx.fail(layout.error());
    if (status s = this->within_cudnn(x); !s.ok()) return ctx.fail(std::move(s));
    const channel_layout l = *layout;

    tensor& dx = this->allocate_output(ctx, 0, x.shape());
    tensor& dscale = this->allocate_output(ctx, 1, tensor_shape{l.channels});
    tensor& doffset = this->allocate_output(ctx, 2, tensor_shape{l.channels});
    this->allocate_output(ctx, 3, tensor_shape{0});
    this->allocate_output(ctx, 4, tensor_shape{0});
    if (l.channels == 0) return;
    if (l.per_channel() == 0) {  // sums over nothing
      if (this->check(ctx, this->zero(dscale.raw_data(), dscale.byte_size()))) {
        this->check(ctx, this->zero(doffset.raw_data(), doffset.byte_size()));
      }
      return;
    }
    this->check(ctx, enqueue(ctx, l, dx.data<T>(), dscale.data<T>(), doffset.data<T>()));
  }

 private:
  status enqueue(kernel_context& ctx, const channel_layout& l, T* dx, T* dscale, T* doffset) const {
    const T* dy = ctx.input(0).data<T>();
    const T* scale = ctx.input(2).data<T>();
    const T* variance = ctx.input(4).data<T>();
    tensor inv_std = this->allocate_temp(dtype_of<T>, tensor_shape{l.channels});
    gpu::launch_inverse_std<T>(variance, this->epsilon(), l.channels, inv_std.data<T>(), this->stream());
    TROUPE_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "launching the inverse standard deviation"));
    {
      std::lock_guard lock(this->gpu().cudnn_mutex());
      tensor_descriptor x_desc, channel_desc;
      TROUPE_RETURN_IF_ERROR(this->describe_batch_norm(l, &x_desc, &channel_desc));
      TROUPE_RETURN_IF_ERROR(cudnn_status(
          cudnnBatchNormalizationBackward(this->handle(), CUDNN_BATCHNORM_SPATIAL, &k_one<T>, &k_zero<T>, &k_one<T>,
                                          &k_zero<T>, x_desc.get(), ctx.input(1).data<T>(), x_desc.get(), dy,
                                          x_desc.get(), dx, channel_desc.get(), scale, dscale, doffset, this->epsilon(),
                                          ctx.input(3).data<T>(), inv_std.data<T>()),
          "cudnnBatchNormalizationBackward"));
    }
    if (this->options_.is_training) return status();
    gpu::launch_batch_norm_inference_grad<T>(dy, scale, variance, this->epsilon(), l.outer, l.channels, l.inner, dx,
                                             this->stream());
    return cuda_status(cudaGetLastError(), "launching the inference-mode input gradient");
  }
};

}  // namespace

void register_gpu_cudnn_kernels(kernel_registry& registry) {
  using types = type_list<float, double>;
  add_typed_kernels<conv2d_kernel, types>(registry, "Conv2D", "T", "GPU");
  add_typed_kernels<conv2d_backprop_input_kernel, types>(registry, "Conv2DBackpropInput", "T", "GPU");
  add_typed_kernels<conv2d_backprop_filter_kernel, types>(registry, "Conv2DBackpropFilter", "T", "GPU");
  add_typed_kernels<max_pool_kernel, types>(registry, "MaxPool", "T", "GPU");
  add_typed_kernels<max_pool_grad_kernel, types>(registry, "MaxPoolGrad", "T", "GPU");
  add_typed_kernels<avg_pool_kernel, types>(registry, "AvgPool", "T", "GPU");
  add_typed_kernels<avg_pool_grad_kernel, types>(registry, "AvgPoolGrad", "T", "GPU");
  add_typed_kernels<lrn_kernel, types>(registry, "LRN", "T", "GPU");
  add_typed_kernels<lrn_grad_kernel, types>(registry, "LRNGrad", "T", "GPU");
  for_each_type<types>([&]<class T>() {
    const std::vector<type_constraint> t_and_u = {{"T", dtype_of<T>}, {"U", dtype_of<T>}};
    registry.add("FusedBatchNormV3", "GPU", t_and_u, make_kernel<fused_batch_norm_kernel<T>>);
    registry.add("FusedBatchNormGradV3", "GPU", t_and_u, make_kernel<fused_batch_norm_grad_kernel<T>>);
  });
}

}  // namespace troupe::kernels
