// The cuDNN-backed GPU kernels (kernels/cuda/gpu_cudnn_kernels.cc) against the CPU's:
// Conv2D and both its gradients, MaxPool, AvgPool and their gradients, LRN and LRNGrad
// (inside and outside cuDNN's range), FusedBatchNormV3 and FusedBatchNormGradV3 (training,
// with and without running averages, and inference); NHWC and NCHW (NDHWC and NCDHW for
// batch norm); VALID, SAME (with odd padding totals, which cuDNN cannot pad itself) and
// EXPLICIT padding; strides 1 and 2, dilations, 1x1, 3x3, 5x5 and non-square windows, odd
// sizes, batch 1 and more; float32, and float64 on a sample; then bad inputs, which fail
// with the CPU kernels' messages. Inputs are scaled so that outputs stay near 1.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/attr.h"
#include "kernels/kernel_runner.h"
#include "tests/gpu/consistency.h"

namespace troupe::testing {

namespace {

using graph::attr_value;
using dims = std::vector<std::int64_t>;

const char* format_name(bool nchw) { return nchw ? "NCHW" : "NHWC"; }
const char* type_name(dtype type) { return type == dtype::float32 ? "float32" : "float64"; }
tolerance sum_tolerance(dtype type) { return type == dtype::float32 ? k_float32_sum : k_float64; }

// An image shape in data_format order.
tensor_shape images(std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, bool nchw) {
  return nchw ? tensor_shape{n, c, h, w} : tensor_shape{n, h, w, c};
}
// A per-dimension attribute (strides, dilations, ksize) of spatial value v.
dims spatial(std::int64_t v, bool nchw) { return nchw ? dims{1, 1, v, v} : dims{1, v, v, 1}; }
dims spatial(std::int64_t h, std::int64_t w, bool nchw) { return nchw ? dims{1, 1, h, w} : dims{1, h, w, 1}; }

// explicit_paddings for (top, bottom, left, right), in data_format order; empty otherwise.
dims explicit_paddings(const dims& pads, bool nchw) {
  if (pads.empty()) return {};
  return nchw ? dims{0, 0, 0, 0, pads[0], pads[1], pads[2], pads[3]}
              : dims{0, 0, pads[0], pads[1], pads[2], pads[3], 0, 0};
}

// TensorFlow's output size of one spatial dimension.
std::int64_t output_size(std::int64_t in, std::int64_t window, std::int64_t stride, std::int64_t dilation,
                         const std::string& padding, std::int64_t before, std::int64_t after) {
  const std::int64_t effective = (window - 1) * dilation + 1;
  if (padding == "SAME") return (in + stride - 1) / stride;
  if (padding == "VALID") return (in - effective + stride) / stride;
  return (in + before + after - effective) / stride + 1;
}

tensor int32_vector(const tensor_shape& shape) {
  std::vector<std::int32_t> values;
  for (int i = 0; i < shape.rank(); ++i) values.push_back(static_cast<std::int32_t>(shape.dim(i)));
  return tensor::from_vector<std::int32_t>(values, tensor_shape{shape.rank()});
}

// The CPU kernel's first output: realistic forward outputs for the gradient ops.
tensor cpu_output(const tf::NodeDef& node, const std::vector<tensor>& inputs) {
  auto out = kernels::run_kernel(node, inputs);
  if (!out.ok()) FAIL("the CPU kernel of " << node.op() << " failed: " << out.error().to_string());
  return (*out)[0];
}

// --- Convolutions -------------------------------------------------------------------------------

struct conv_case {
  std::int64_t batch, h, w, in_c, k_h, k_w, out_c, stride, dilation;
  std::string padding;  // VALID, SAME or EXPLICIT
  dims pads = {};       // EXPLICIT: top, bottom, left, right
};

void conv_cases_for(const conv_case& c, dtype type, bool nchw, consistency_rng& rng) {
  const std::int64_t before_h = c.pads.empty() ? 0 : c.pads[0], after_h = c.pads.empty() ? 0 : c.pads[1];
  const std::int64_t before_w = c.pads.empty() ? 0 : c.pads[2], after_w = c.pads.empty() ? 0 : c.pads[3];
  const std::int64_t out_h = output_size(c.h, c.k_h, c.stride, c.dilation, c.padding, before_h, after_h);
  const std::int64_t out_w = output_size(c.w, c.k_w, c.stride, c.dilation, c.padding, before_w, after_w);
  const tensor_shape input_shape = images(c.batch, c.h, c.w, c.in_c, nchw);
  const tensor_shape filter_shape{c.k_h, c.k_w, c.in_c, c.out_c};
  const tensor_shape output_shape = images(c.batch, out_h, out_w, c.out_c, nchw);
  const std::string name = str_cat(type_name(type), " ", format_name(nchw), " input ", input_shape, ", filter ",
                                   filter_shape, ", stride ", c.stride, ", dilation ", c.dilation, ", ", c.padding);
  auto conv_node = [&](const std::string& op) {
    return node(op, {{"T", attr_value(type)},
                     {"strides", attr_value(spatial(c.stride, nchw))},
                     {"dilations", attr_value(spatial(c.dilation, nchw))},
                     {"padding", attr_value(c.padding)},
                     {"explicit_paddings", attr_value(explicit_paddings(c.pads, nchw))},
                     {"data_format", attr_value(format_name(nchw))}});
  };
  // Sums of k_h * k_w * in_c products (forward) or k_h * k_w * out_c (input gradient) of
  // values in [-1, 1] times the filter's scale stay near 1; the filter gradient's sums of
  // batch * out_h * out_w products get out_backprop scaled down for the same.
  const double filter_scale = 1.0 / std::sqrt(static_cast<double>(c.k_h * c.k_w * std::max(c.in_c, c.out_c)));
  const double backprop_scale = 1.0 / std::sqrt(static_cast<double>(c.batch * out_h * out_w));
  const tensor input = rng.uniform(type, input_shape);
  const tensor filter = rng.uniform(type, filter_shape, -filter_scale, filter_scale);
  const tensor out_backprop = rng.uniform(type, output_shape);
  const tolerance tol = sum_tolerance(type);
  check_consistency({"Conv2D " + name, conv_node("Conv2D"), {input, filter}, tol});
  check_consistency({"Conv2DBackpropInput " + name,
                     conv_node("Conv2DBackpropInput"),
                     {int32_vector(input_shape), filter, out_backprop},
                     tol});
  check_consistency(
      {"Conv2DBackpropFilter " + name,
       conv_node("Conv2DBackpropFilter"),
       {input, int32_vector(filter_shape), rng.uniform(type, output_shape, -backprop_scale, backprop_scale)},
       tol});
}

void convolution_cases() {
  const std::vector<conv_case> cases = {
      {1, 5, 5, 1, 3, 3, 1, 1, 1, "VALID"},
      {2, 7, 9, 3, 3, 3, 4, 1, 1, "SAME"},
      {2, 8, 7, 4, 3, 3, 5, 2, 1, "SAME"},  // height padding 0 before, 1 after
      {3, 11, 10, 5, 5, 5, 6, 2, 1, "VALID"},
      {4, 16, 16, 32, 5, 5, 32, 2, 1, "SAME"},  // padding 1 before, 2 after
      {2, 6, 6, 8, 1, 1, 16, 1, 1, "VALID"},    // pointwise
      {1, 9, 9, 3, 1, 1, 4, 2, 1, "SAME"},
      {2, 10, 11, 3, 3, 3, 4, 1, 2, "SAME"},  // dilated
      {2, 9, 8, 3, 3, 2, 4, 1, 2, "VALID"},
      {2, 7, 6, 3, 3, 3, 5, 1, 1, "EXPLICIT", {1, 2, 0, 3}},
      {1, 6, 6, 2, 3, 3, 3, 2, 1, "EXPLICIT", {1, 1, 2, 2}},
      {8, 32, 32, 64, 3, 3, 64, 1, 1, "SAME"},
  };
  consistency_rng rng(1101);
  for (bool nchw : {false, true}) {
    for (const conv_case& c : cases) conv_cases_for(c, dtype::float32, nchw, rng);
    for (int i : {1, 2, 7, 9}) conv_cases_for(cases[static_cast<std::size_t>(i)], dtype::float64, nchw, rng);
  }
}

// --- Pooling ------------------------------------------------------------------------------------

struct pool_case {
  std::int64_t batch, h, w, c, k_h, k_w, stride;
  std::string padding;
  dims pads = {};  // EXPLICIT (max pooling only): top, bottom, left, right
};

void pool_cases_for(const pool_case& c, dtype type, bool nchw, consistency_rng& rng) {
  const bool explicit_padding = c.padding == "EXPLICIT";
  const std::int64_t out_h = output_size(c.h, c.k_h, c.stride, 1, c.padding, explicit_padding ? c.pads[0] : 0,
                                         explicit_padding ? c.pads[1] : 0);
  const std::int64_t out_w = output_size(c.w, c.k_w, c.stride, 1, c.padding, explicit_padding ? c.pads[2] : 0,
                                         explicit_padding ? c.pads[3] : 0);
  const tensor_shape input_shape = images(c.batch, c.h, c.w, c.c, nchw);
  const tensor_shape output_shape = images(c.batch, out_h, out_w, c.c, nchw);
  const std::string name = str_cat(type_name(type), " ", format_name(nchw), " input ", input_shape, ", ksize ", c.k_h,
                                   "x", c.k_w, ", stride ", c.stride, ", ", c.padding);
  auto pool_node = [&](const std::string& op) {
    tf::NodeDef n = node(op, {{"T", attr_value(type)},
                              {"ksize", attr_value(spatial(c.k_h, c.k_w, nchw))},
                              {"strides", attr_value(spatial(c.stride, nchw))},
                              {"padding", attr_value(c.padding)},
                              {"data_format", attr_value(format_name(nchw))}});
    if (explicit_padding) (*n.mutable_attr())["explicit_paddings"] = attr_value(explicit_paddings(c.pads, nchw));
    return n;
  };
  const tensor input = rng.uniform(type, input_shape);
  const tensor grad = rng.uniform(type, output_shape);
  const tolerance tol = sum_tolerance(type);
  check_consistency({"MaxPool " + name, pool_node("MaxPool"), {input}, tol});
  check_consistency(
      {"MaxPoolGrad " + name, pool_node("MaxPoolGrad"), {input, cpu_output(pool_node("MaxPool"), {input}), grad}, tol});
  if (explicit_padding) return;  // AvgPool has no EXPLICIT padding
  check_consistency({"AvgPool " + name, pool_node("AvgPool"), {input}, tol});
  check_consistency({"AvgPoolGrad " + name, pool_node("AvgPoolGrad"), {int32_vector(input_shape), grad}, tol});
}

void pooling_cases() {
  const std::vector<pool_case> cases = {
      {1, 4, 4, 1, 2, 2, 2, "VALID"},
      {2, 8, 9, 3, 3, 3, 2, "SAME"},  // height padding 0 before, 1 after: one output row past cuDNN's formula
      {3, 10, 10, 5, 3, 3, 1, "SAME"},
      {2, 11, 11, 4, 2, 2, 2, "SAME"},
      {2, 9, 7, 6, 3, 2, 2, "VALID"},
      {4, 12, 12, 16, 5, 5, 1, "SAME"},
      {8, 32, 32, 64, 3, 3, 2, "SAME"},
      {2, 7, 6, 3, 3, 3, 2, "EXPLICIT", {1, 2, 0, 1}},
      {1, 4, 4, 2, 2, 2, 2, "EXPLICIT", {2, 0, 0, 2}},  // windows entirely in the padding
  };
  consistency_rng rng(1102);
  for (bool nchw : {false, true}) {
    for (const pool_case& c : cases) pool_cases_for(c, dtype::float32, nchw, rng);
    for (int i : {1, 3, 7}) pool_cases_for(cases[static_cast<std::size_t>(i)], dtype::float64, nchw, rng);
  }
}

// --- LRN ----------------------------------------------------------------------------------------

struct lrn_case {
  std::int64_t depth_radius;
  float bias, alpha, beta;
};

void lrn_cases() {
  const std::vector<lrn_case> cases = {
      {2, 1.0f, 0.1f, 0.75f},                            // cuDNN
      {5, 2.0f, 0.05f, 0.5f},  {7, 1.0f, 0.02f, 0.75f},  // cuDNN's widest window
      {0, 1.0f, 0.5f, 0.5f},   {8, 1.0f, 0.05f, 0.75f},  // the CUDA kernels: window too wide for cuDNN,
      {2, 1.0f, 0.1f, 0.005f},                           // beta too small,
      {3, 1e-6f, 0.5f, 0.75f},                           // bias too small
  };
  const std::vector<tensor_shape> shapes = {{1, 3, 3, 7}, {2, 5, 6, 16}, {4, 8, 8, 32}};
  consistency_rng rng(1103);
  for (dtype type : {dtype::float32, dtype::float64}) {
    for (const lrn_case& c : cases) {
      for (const tensor_shape& shape : shapes) {
        auto lrn_node = [&](const std::string& op) {
          return node(op, {{"T", attr_value(type)},
                           {"depth_radius", attr_value(c.depth_radius)},
                           {"bias", attr_value(c.bias)},
                           {"alpha", attr_value(c.alpha)},
                           {"beta", attr_value(c.beta)}});
        };
        const std::string name = str_cat(type_name(type), " ", shape, ", depth_radius ", c.depth_radius, ", bias ",
                                         c.bias, ", alpha ", c.alpha, ", beta ", c.beta);
        const tensor x = rng.uniform(type, shape);
        const tolerance tol = sum_tolerance(type);
        check_consistency({"LRN " + name, lrn_node("LRN"), {x}, tol});
        check_consistency({"LRNGrad " + name,
                           lrn_node("LRNGrad"),
                           {rng.uniform(type, shape), x, cpu_output(lrn_node("LRN"), {x})},
                           tol});
      }
    }
  }
}

// --- Batch norm ---------------------------------------------------------------------------------

struct batch_norm_case {
  std::string data_format;
  tensor_shape x;
};

std::int64_t channels_of(const batch_norm_case& c) {
  return c.data_format[1] == 'C' ? c.x.dim(1) : c.x.dim(c.x.rank() - 1);
}

void batch_norm_cases_for(const batch_norm_case& c, dtype type, consistency_rng& rng) {
  const tensor_shape vector{channels_of(c)};
  const tolerance tol = sum_tolerance(type);
  auto bn_node = [&](const std::string& op, bool training, float factor) {
    tf::NodeDef n = node(op, {{"T", attr_value(type)},
                              {"U", attr_value(type)},
                              {"epsilon", attr_value(0.001f)},
                              {"data_format", attr_value(c.data_format)},
                              {"is_training", attr_value(training)}});
    if (op == "FusedBatchNormV3") (*n.mutable_attr())["exponential_avg_factor"] = attr_value(factor);
    return n;
  };
  // x off centre, so that the mean matters; positive variances.
  const tensor x = rng.uniform(type, c.x, -1, 3);
  const tensor scale = rng.uniform(type, vector, 0.5, 1.5);
  const tensor offset = rng.uniform(type, vector, -0.5, 0.5);
  const tensor mean = rng.uniform(type, vector, 0, 2);
  const tensor variance = rng.uniform(type, vector, 0.5, 2.5);
  const tensor empty(type, tensor_shape{0});
  const std::string name = str_cat(type_name(type), " ", c.data_format, " x ", c.x);
  check_consistency({"FusedBatchNormV3 training " + name,
                     bn_node("FusedBatchNormV3", true, 1.0f),
                     {x, scale, offset, empty, empty},
                     tol});
  check_consistency({"FusedBatchNormV3 training, exponential_avg_factor 0.3, " + name,
                     bn_node("FusedBatchNormV3", true, 0.3f),
                     {x, scale, offset, mean, variance},
                     tol});
  check_consistency({"FusedBatchNormV3 inference " + name,
                     bn_node("FusedBatchNormV3", false, 1.0f),
                     {x, scale, offset, mean, variance},
                     tol});
  const tensor dy = rng.uniform(type, c.x);
  const tensor reserve_3 = rng.uniform(type, tensor_shape{});  // unread
  for (bool training : {true, false}) {
    check_consistency({str_cat("FusedBatchNormGradV3 ", training ? "training " : "inference ", name),
                       bn_node("FusedBatchNormGradV3", training, 1.0f),
                       {dy, x, scale, mean, variance, reserve_3},
                       tol});
  }
}

void batch_norm_cases() {
  const std::vector<batch_norm_case> cases = {
      {"NHWC", {4, 6, 5, 8}},     {"NCHW", {4, 8, 6, 5}},    {"NHWC", {1, 1, 1, 3}},    {"NDHWC", {2, 3, 4, 5, 6}},
      {"NCDHW", {2, 6, 3, 4, 5}}, {"NHWC", {8, 32, 32, 64}}, {"NCHW", {8, 64, 32, 32}},
  };
  consistency_rng rng(1104);
  for (const batch_norm_case& c : cases) batch_norm_cases_for(c, dtype::float32, rng);
  for (int i : {0, 1, 4}) batch_norm_cases_for(cases[static_cast<std::size_t>(i)], dtype::float64, rng);
}

// --- Bad input ----------------------------------------------------------------------------------

void error_cases() {
  consistency_rng rng(1105);
  const tensor_shape vector{8};
  auto conv_node = [](const std::string& op) {
    return node(op, {{"T", attr_value(dtype::float32)},
                     {"strides", attr_value(dims{1, 1, 1, 1})},
                     {"padding", attr_value("VALID")}});
  };
  check_gpu_error({"Conv2D with 3 input channels and a filter for 4",
                   conv_node("Conv2D"),
                   {rng.uniform(dtype::float32, {1, 5, 5, 3}), rng.uniform(dtype::float32, {3, 3, 4, 2})},
                   k_float32},
                  "has 3 channels but filter [3,3,4,2] expects 4");
  check_gpu_error({"Conv2D with a filter larger than its VALID input",
                   conv_node("Conv2D"),
                   {rng.uniform(dtype::float32, {1, 2, 2, 1}), rng.uniform(dtype::float32, {3, 3, 1, 1})},
                   k_float32},
                  "is larger than the input's height");
  check_gpu_error({"Conv2DBackpropInput with out_backprop of the wrong shape",
                   conv_node("Conv2DBackpropInput"),
                   {int32_vector({1, 5, 5, 2}), rng.uniform(dtype::float32, {3, 3, 2, 4}),
                    rng.uniform(dtype::float32, {1, 3, 3, 5})},
                   k_float32},
                  "must have the forward output's shape");
  auto max_pool = [](const std::string& op) {
    return node(op, {{"T", attr_value(dtype::float32)},
                     {"ksize", attr_value(dims{1, 2, 2, 1})},
                     {"strides", attr_value(dims{1, 2, 2, 1})},
                     {"padding", attr_value("VALID")}});
  };
  check_gpu_error({"MaxPool of a 3-D input", max_pool("MaxPool"), {rng.uniform(dtype::float32, {4, 4, 2})}, k_float32},
                  "input must be 4-D (NHWC)");
  check_gpu_error({"MaxPoolGrad with grad of the wrong shape",
                   max_pool("MaxPoolGrad"),
                   {rng.uniform(dtype::float32, {1, 4, 4, 2}), rng.uniform(dtype::float32, {1, 2, 2, 2}),
                    rng.uniform(dtype::float32, {1, 3, 3, 2})},
                   k_float32},
                  "must have the pooled output's shape");
  check_gpu_error(
      {"AvgPoolGrad with a negative size",
       node("AvgPoolGrad", {{"T", attr_value(dtype::float32)},
                            {"ksize", attr_value(dims{1, 2, 2, 1})},
                            {"strides", attr_value(dims{1, 2, 2, 1})},
                            {"padding", attr_value("VALID")}}),
       {tensor::from_vector<std::int32_t>({1, -4, 4, 2}, tensor_shape{4}), rng.uniform(dtype::float32, {1, 2, 2, 2})},
       k_float32},
      "has a negative size");
  check_gpu_error({"LRN of a 3-D input",
                   node("LRN", {{"T", attr_value(dtype::float32)}}),
                   {rng.uniform(dtype::float32, {4, 4, 8})},
                   k_float32},
                  "LRN input must be 4-dimensional (NHWC)");
  auto bn = [](const std::string& op) {
    return node(op, {{"T", attr_value(dtype::float32)}, {"U", attr_value(dtype::float32)}});
  };
  check_gpu_error(
      {"FusedBatchNormV3 with a scale for 7 channels of 8",
       bn("FusedBatchNormV3"),
       {rng.uniform(dtype::float32, {2, 3, 3, 8}), rng.uniform(dtype::float32, {7}),
        rng.uniform(dtype::float32, vector), rng.uniform(dtype::float32, vector), rng.uniform(dtype::float32, vector)},
       k_float32},
      "scale must be a vector of 8 elements");
  check_gpu_error({"FusedBatchNormGradV3 with y_backprop of the wrong shape",
                   bn("FusedBatchNormGradV3"),
                   {rng.uniform(dtype::float32, {2, 3, 3, 4}), rng.uniform(dtype::float32, {2, 3, 3, 8}),
                    rng.uniform(dtype::float32, vector), rng.uniform(dtype::float32, vector),
                    rng.uniform(dtype::float32, vector), rng.uniform(dtype::float32, {})},
                   k_float32},
                  "must have the shape of x");
}

}  // namespace

void cudnn_cases() {
  convolution_cases();
  pooling_cases();
  lrn_cases();
  batch_norm_cases();
  error_cases();
}

}  // namespace troupe::testing
