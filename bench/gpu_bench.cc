// GPU kernels against the libraries alone, in the same run (issue 19's targets):
//
//   matmul   MatMul 4096^3 float32 through troupe's kernel against cublasGemmEx alone on
//            the same operands, exact float32 and TensorFloat-32 (target: >= 90%);
//   conv     Conv2D and both backprops on AlexNet's layers (batch 128, NHWC, float32)
//            through troupe's kernels against cuDNN alone with its fastest algorithm
//            for the same math (target: >= 90%);
//   dispatch one-element kernels enqueued back to back through troupe's kernel interface:
//            enqueues per second and the host's microseconds per enqueue;
//   executor a chain of 1000 one-element Neg nodes run as one step by a session on the GPU
//            (each node's kernel launched by the executor) and on the CPU alone: the
//            microseconds per node, step time over nodes;
//   models   training steps through a session on the GPU: AlexNet at batch 128 and the
//            LSTM language model (bench/models.h), ms per step (PyTorch's on the same GPU:
//            bench/peers/gpu_models_torch.py; tools/gpu_check.sh puts them side by side).
//
//   build/bench/bench_gpu [--repeats=20] [--smoke] [--no-models]
//   build/bench/bench_gpu --models-on-cpu [--smoke]   # only the models, on the CPU: a dry run
//
// Times are medians of `--repeats` runs, each timed with CUDA events on the compute stream
// after warm-up runs; inputs are random (never zeros). Prints one JSON object. Without a
// GPU it prints {"skipped": "..."} and exits 77.
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "actors/session.h"
#include "bench/models.h"
#include "graph/attr.h"
#include "graph/ops.h"
#include "kernels/cuda/gpu_device.h"
#include "kernels/cuda/gpu_runner.h"

namespace troupe::bench {
namespace {

using kernels::gpu::gpu_device;

[[noreturn]] void die(const std::string& what) {
  std::cerr << "bench_gpu: " << what << "\n";
  std::exit(1);
}
void ok_or_die(const status& s) {
  if (!s.ok()) die(s.to_string());
}
void cuda_or_die(cudaError_t e, const char* what) { ok_or_die(kernels::gpu::cuda_status(e, what)); }
void cudnn_or_die(cudnnStatus_t e, const char* what) { ok_or_die(kernels::gpu::cudnn_status(e, what)); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Median milliseconds of `repeats` runs of fn on the compute stream, after 3 warm-ups.
double time_ms(gpu_device& dev, int repeats, const std::function<void()>& fn) {
  cudaEvent_t start, stop;
  cuda_or_die(cudaEventCreate(&start), "cudaEventCreate");
  cuda_or_die(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) fn();
  ok_or_die(dev.synchronize());
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    cuda_or_die(cudaEventRecord(start, dev.compute_stream()), "cudaEventRecord");
    fn();
    cuda_or_die(cudaEventRecord(stop, dev.compute_stream()), "cudaEventRecord");
    cuda_or_die(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    cuda_or_die(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  ok_or_die(dev.synchronize());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(ms);
}

tensor random_device_tensor(gpu_device& dev, tensor_shape shape, std::mt19937& rng, float scale) {
  tensor host(dtype::float32, std::move(shape));
  std::uniform_real_distribution<float> d(-scale, scale);
  for (float& x : host.flat<float>()) x = d(rng);
  auto t = dev.to_device(host);
  ok_or_die(t.to_status());
  return *t;
}

tf::NodeDef make_node(const std::string& op, std::initializer_list<std::pair<std::string, tf::AttrValue>> attrs) {
  tf::NodeDef n;
  n.set_name(op);
  n.set_op(op);
  for (const auto& [name, value] : attrs) (*n.mutable_attr())[name] = value;
  return n;
}

// Median ms of one troupe kernel enqueue on `inputs` (device or host-memory tensors).
double time_troupe(gpu_device& dev, int repeats, const tf::NodeDef& node, const std::vector<tensor>& inputs) {
  auto k = kernels::gpu::prepare_gpu_kernel(dev, node, inputs);
  ok_or_die(k.to_status());
  return time_ms(dev, repeats, [&] { ok_or_die(kernels::gpu::enqueue(*k, inputs).to_status()); });
}

std::string json_number(double v) {
  std::ostringstream out;
  out.precision(4);
  out << v;
  return out.str();
}

struct row {
  std::string name;
  double troupe_ms, library_ms, flops;
  std::string json() const {
    return str_cat("{\"name\": \"", name, "\", \"troupe_ms\": ", json_number(troupe_ms),
                   ", \"library_ms\": ", json_number(library_ms), ", \"troupe_tflops\": ",
                   json_number(flops / troupe_ms / 1e9), ", \"library_tflops\": ", json_number(flops / library_ms / 1e9),
                   ", \"ratio\": ", json_number(library_ms / troupe_ms), "}");
  }
};

row bench_matmul(gpu_device& dev, int repeats, std::int64_t n, std::mt19937& rng) {
  tensor a = random_device_tensor(dev, {n, n}, rng, 1), b = random_device_tensor(dev, {n, n}, rng, 1);
  tensor c = dev.allocate(dtype::float32, {n, n});
  // TensorFloat-32 is the process's choice (TROUPE_ALLOW_TF32): the library gets the same.
  const bool tf32 = kernels::gpu::allow_tf32();
  const double troupe = time_troupe(dev, repeats,
                                    make_node("MatMul", {{"T", graph::attr_value(dtype::float32)}}), {a, b});
  cublasHandle_t handle;
  ok_or_die(kernels::gpu::cublas_status(cublasCreate(&handle), "cublasCreate"));
  cublasSetStream(handle, dev.compute_stream());
  const float one = 1, zero = 0;
  const int ni = static_cast<int>(n);
  const double library = time_ms(dev, repeats, [&] {
    ok_or_die(kernels::gpu::cublas_status(
        cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one, b.raw_data(), CUDA_R_32F, ni, a.raw_data(),
                     CUDA_R_32F, ni, &zero, c.raw_data(), CUDA_R_32F, ni,
                     tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx"));
  });
  cublasDestroy(handle);
  return {str_cat("MatMul ", n, "^3 float32", tf32 ? " TF32" : ""), troupe, library, 2.0 * n * n * n};
}

// One convolution geometry, NHWC float32, filter HWIO (TensorFlow's layouts).
struct conv_geometry {
  std::string name;
  std::int64_t batch, height, width, in_channels, filter, out_channels, stride;
  bool same;
};

// cuDNN alone: the fastest algorithm cudnnFind* reports for these descriptors and math,
// its workspace preallocated; the filter in cuDNN's own NHWC layout (KRSC).
struct cudnn_conv {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  std::int64_t out_h, out_w;
};

std::vector<row> bench_conv(gpu_device& dev, int repeats, const conv_geometry& g, std::mt19937& rng) {
  const std::int64_t pad_h = g.same ? std::max<std::int64_t>((((g.height + g.stride - 1) / g.stride) - 1) * g.stride + g.filter - g.height, 0) : 0;
  const std::int64_t pad_w = g.same ? std::max<std::int64_t>((((g.width + g.stride - 1) / g.stride) - 1) * g.stride + g.filter - g.width, 0) : 0;
  cudnn_conv d{};
  cudnn_or_die(cudnnCreateTensorDescriptor(&d.x), "descriptor");
  cudnn_or_die(cudnnCreateTensorDescriptor(&d.y), "descriptor");
  cudnn_or_die(cudnnCreateFilterDescriptor(&d.w), "descriptor");
  cudnn_or_die(cudnnCreateConvolutionDescriptor(&d.conv), "descriptor");
  cudnn_or_die(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, g.batch, g.in_channels, g.height,
                                          g.width), "x descriptor");
  cudnn_or_die(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, g.out_channels, g.in_channels,
                                          g.filter, g.filter), "w descriptor");
  // cuDNN pads symmetrically: SAME geometries here have even total padding.
  cudnn_or_die(cudnnSetConvolution2dDescriptor(d.conv, pad_h / 2, pad_w / 2, g.stride, g.stride, 1, 1,
                                               CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT), "conv descriptor");
  cudnn_or_die(cudnnSetConvolutionMathType(d.conv, kernels::gpu::allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH),
               "math type");
  int n, c, h, w;
  cudnn_or_die(cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &n, &c, &h, &w), "output dim");
  cudnn_or_die(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n, c, h, w), "y descriptor");
  const double flops = 2.0 * g.batch * h * w * g.out_channels * g.in_channels * g.filter * g.filter;

  tensor x = random_device_tensor(dev, {g.batch, g.height, g.width, g.in_channels}, rng, 1);
  tensor filter = random_device_tensor(dev, {g.filter, g.filter, g.in_channels, g.out_channels}, rng, 0.1f);
  tensor filter_krsc = random_device_tensor(dev, {g.out_channels, g.filter, g.filter, g.in_channels}, rng, 0.1f);
  tensor dy = random_device_tensor(dev, {g.batch, h, w, g.out_channels}, rng, 1);
  tensor y = dev.allocate(dtype::float32, {g.batch, h, w, g.out_channels});
  tensor dx = dev.allocate(dtype::float32, x.shape());
  tensor dw = dev.allocate(dtype::float32, filter_krsc.shape());

  cudnnHandle_t handle = dev.cudnn();
  const float one = 1, zero = 0;
  constexpr int k_algos = 16;
  int found = 0;
  tensor workspace;
  auto ensure_workspace = [&](std::size_t bytes) {
    if (!workspace.initialized() || workspace.byte_size() < bytes) workspace = dev.scratch(std::max<std::size_t>(bytes, 1));
  };
  cudnnConvolutionFwdAlgoPerf_t fwd[k_algos];
  cudnn_or_die(cudnnFindConvolutionForwardAlgorithm(handle, d.x, d.w, d.conv, d.y, k_algos, &found, fwd), "find fwd");
  cudnnConvolutionBwdDataAlgoPerf_t bwd_data[k_algos];
  cudnn_or_die(cudnnFindConvolutionBackwardDataAlgorithm(handle, d.w, d.y, d.conv, d.x, k_algos, &found, bwd_data),
               "find bwd data");
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[k_algos];
  cudnn_or_die(cudnnFindConvolutionBackwardFilterAlgorithm(handle, d.x, d.y, d.conv, d.w, k_algos, &found, bwd_filter),
               "find bwd filter");
  ensure_workspace(std::max({fwd[0].memory, bwd_data[0].memory, bwd_filter[0].memory}));

  const std::string padding = g.same ? "SAME" : "VALID";
  auto conv_node = [&](const std::string& op) {
    return make_node(op, {{"T", graph::attr_value(dtype::float32)},
                          {"strides", graph::attr_value(std::vector<std::int64_t>{1, g.stride, g.stride, 1})},
                          {"padding", graph::attr_value(padding)},
                          {"data_format", graph::attr_value("NHWC")}});
  };
  auto shape_tensor = [](const tensor_shape& s) {
    std::vector<std::int32_t> dims;
    for (int i = 0; i < s.rank(); ++i) dims.push_back(static_cast<std::int32_t>(s.dim(i)));
    return tensor::from_vector<std::int32_t>(dims);
  };
  std::vector<row> rows;
  rows.push_back({g.name + " Conv2D", time_troupe(dev, repeats, conv_node("Conv2D"), {x, filter}),
                  time_ms(dev, repeats, [&] {
                    cudnn_or_die(cudnnConvolutionForward(handle, &one, d.x, x.raw_data(), d.w, filter_krsc.raw_data(),
                                                         d.conv, fwd[0].algo, workspace.raw_data(),
                                                         workspace.byte_size(), &zero, d.y, y.raw_data()),
                                 "forward");
                  }),
                  flops});
  rows.push_back({g.name + " Conv2DBackpropInput",
                  time_troupe(dev, repeats, conv_node("Conv2DBackpropInput"), {shape_tensor(x.shape()), filter, dy}),
                  time_ms(dev, repeats, [&] {
                    cudnn_or_die(cudnnConvolutionBackwardData(handle, &one, d.w, filter_krsc.raw_data(), d.y,
                                                              dy.raw_data(), d.conv, bwd_data[0].algo,
                                                              workspace.raw_data(), workspace.byte_size(), &zero, d.x,
                                                              dx.raw_data()),
                                 "backward data");
                  }),
                  flops});
  rows.push_back({g.name + " Conv2DBackpropFilter",
                  time_troupe(dev, repeats, conv_node("Conv2DBackpropFilter"), {x, shape_tensor(filter.shape()), dy}),
                  time_ms(dev, repeats, [&] {
                    cudnn_or_die(cudnnConvolutionBackwardFilter(handle, &one, d.x, x.raw_data(), d.y, dy.raw_data(),
                                                                d.conv, bwd_filter[0].algo, workspace.raw_data(),
                                                                workspace.byte_size(), &zero, d.w, dw.raw_data()),
                                 "backward filter");
                  }),
                  flops});
  cudnnDestroyTensorDescriptor(d.x);
  cudnnDestroyTensorDescriptor(d.y);
  cudnnDestroyFilterDescriptor(d.w);
  cudnnDestroyConvolutionDescriptor(d.conv);
  return rows;
}

// One-element AddV2 enqueued `count` times: the GPU's throughput of tiny kernels through
// troupe's kernel interface, and the host's cost per enqueue.
std::string bench_dispatch(gpu_device& dev, int count) {
  tensor one = tensor::from_vector<float>({1.0f});
  auto a = dev.to_device(one);
  ok_or_die(a.to_status());
  std::vector<tensor> inputs{*a, *a};
  auto k = kernels::gpu::prepare_gpu_kernel(dev, make_node("AddV2", {{"T", graph::attr_value(dtype::float32)}}),
                                            inputs);
  ok_or_die(k.to_status());
  for (int i = 0; i < 100; ++i) ok_or_die(kernels::gpu::enqueue(*k, inputs).to_status());
  ok_or_die(dev.synchronize());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) ok_or_die(kernels::gpu::enqueue(*k, inputs).to_status());
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ok_or_die(dev.synchronize());
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return str_cat("{\"kernels\": ", count, ", \"host_us_per_enqueue\": ", json_number(host_s / count * 1e6),
                 ", \"us_per_kernel\": ", json_number(total_s / count * 1e6), ", \"kernels_per_second\": ",
                 json_number(count / total_s), "}");
}

// Microseconds per node of a chain of `n` Neg nodes run as one step (median of steps),
// on the machine's GPU (gpus = 1) or on the CPU (gpus = 0).
double executor_us_per_node(int gpus, int n, int steps) {
  auto root = graph::scope::new_root();
  graph::output y = ops::placeholder(root.with_name("x"), dtype::float32, {1});
  for (int i = 0; i < n; ++i) y = ops::neg(root.with_name(str_cat("n", i)), y);
  auto g = root.to_graph();
  ok_or_die(g.to_status());
  actors::session_options o;
  o.gpus = gpus;
  auto s = actors::session::create(std::move(*g), o);
  ok_or_die(s.to_status());
  const actors::feed_list feeds{{"x", tensor::from_vector<float>({1.0f})}};
  const std::vector<std::string> fetches{y.name()};
  for (int i = 0; i < 3; ++i) ok_or_die((*s)->run(feeds, fetches).to_status());
  std::vector<double> us;
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto r = (*s)->run(feeds, fetches);
    ok_or_die(r.to_status());
    if (r->at(0).scalar_value<float>() != (n % 2 == 0 ? 1.0f : -1.0f)) die("the Neg chain computed a wrong value");
    us.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1e6 / n);
  }
  return median(us);
}

// A model's training step on the machine's GPU through a session (the nodes with GPU
// kernels there, their variables too when every op on them has one; gpus = 1), as JSON:
// the median of `samples` samples of `steps` steps each, after the initializer and three
// warm-up steps (the convolutions' algorithms measured then). A session's step returns
// once the GPU work it queued has run.
std::string model_json(const std::string& name, const training_model& m, int gpus, int steps, int samples) {
  ok_or_die(m.root.get_status());
  auto g = m.root.to_graph();
  ok_or_die(g.to_status());
  actors::session_options o;
  o.gpus = gpus;
  auto s = actors::session::create(std::move(*g), o);
  ok_or_die(s.to_status());
  ok_or_die((*s)->run({}, {}, {m.init_op}).to_status());
  std::size_t next = 0;
  auto step = [&] {
    ok_or_die((*s)->run(m.batches[next], {}, {m.train_op}).to_status());
    next = (next + 1) % m.batches.size();
  };
  for (int i = 0; i < 3; ++i) step();
  std::vector<double> ms;
  for (int k = 0; k < samples; ++k) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps);
  }
  std::string list;
  for (double x : ms) list += str_cat(list.empty() ? "" : ", ", json_number(x));
  const double median_ms = median(ms);
  return str_cat("{\"name\": \"", name, "\", \"ms_per_step\": ", json_number(median_ms), ", \"items_per_s\": ",
                 json_number(static_cast<double>(m.items_per_step) / median_ms * 1e3), ", \"samples_ms\": [", list,
                 "]}");
}

// The training steps of issue 19 (PyTorch's: bench/peers/gpu_models_torch.py): AlexNet at
// batch 128, and the LSTM language model with the full softmax, its cells unrolled
// (BlockLSTM has no GPU kernel).
std::string models_json(int gpus, bool smoke) {
  const int steps = smoke ? 1 : 10, samples = smoke ? 1 : 5;
  const std::int64_t batch = smoke ? 2 : 128;
  return str_cat("[\n  ", model_json(str_cat("alexnet_batch", batch), build_alexnet(batch), gpus, steps, samples),
                 ",\n  ", model_json("lstm_lm_full", build_lm(/*sampled=*/false, /*fused=*/false), gpus, steps, samples),
                 "]");
}

int run(int argc, char** argv) {
  int repeats = 20;
  bool smoke = false;
  bool models = true, cpu_models = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--repeats=", 0) == 0) {
      repeats = std::max(1, std::atoi(arg.c_str() + 10));
    } else if (arg == "--smoke") {
      smoke = true;
      setenv("TROUPE_BENCH_SMOKE", "1", 1);  // the models' small shapes (bench/models.h)
    } else if (arg == "--no-models") {
      models = false;
    } else if (arg == "--models-on-cpu") {
      cpu_models = true;
    } else {
      die(str_cat("unknown argument '", arg, "' (flags: --repeats=N, --smoke, --no-models, --models-on-cpu)"));
    }
  }
  if (cpu_models) {  // a dry run of the models' harness where there is no GPU
    std::cout << "{\"device\": \"cpu\", \"models\": " << models_json(0, smoke) << "}\n";
    return 0;
  }
  if (kernels::gpu::device_count() == 0) {
    std::cout << "{\"skipped\": \"" << kernels::gpu::no_gpu_reason() << "\"}\n";
    return 77;
  }
  auto dev = gpu_device::create("/job:localhost/replica:0/task:0/device:GPU:0", 0);
  ok_or_die(dev.to_status());
  gpu_device& gpu = **dev;
  std::mt19937 rng(5);
  std::vector<row> rows;
  const bool tf32 = kernels::gpu::allow_tf32();
  rows.push_back(bench_matmul(gpu, repeats, smoke ? 256 : 4096, rng));
  const std::vector<conv_geometry> convs = {
      {"alexnet_conv1", 128, 224, 224, 3, 11, 64, 4, false},
      {"alexnet_conv2", 128, 27, 27, 64, 5, 192, 1, true},
      {"alexnet_conv3", 128, 13, 13, 192, 3, 384, 1, true},
      {"alexnet_conv4", 128, 13, 13, 384, 3, 256, 1, true},
  };
  for (const auto& g : convs) {
    conv_geometry s = g;
    if (smoke) s.batch = 2;
    for (row& r : bench_conv(gpu, repeats, s, rng)) rows.push_back(r);
  }
  std::string out = str_cat("{\"device\": \"", gpu.properties().name, "\", \"tf32\": ", tf32 ? "true" : "false",
                            ", \"repeats\": ", repeats, ", \"kernels\": [");
  for (std::size_t i = 0; i < rows.size(); ++i) out += (i == 0 ? "\n  " : ",\n  ") + rows[i].json();
  out += str_cat("],\n \"dispatch\": ", bench_dispatch(gpu, smoke ? 1000 : 100000));
  const int chain = smoke ? 50 : 1000, steps = smoke ? 3 : 20;
  out += str_cat(",\n \"executor\": {\"nodes\": ", chain, ", \"gpu_us_per_node\": ",
                 json_number(executor_us_per_node(1, chain, steps)), ", \"cpu_us_per_node\": ",
                 json_number(executor_us_per_node(0, chain, steps)), "}");
  if (models) out += str_cat(",\n \"models\": ", models_json(1, smoke));
  out += "}\n";
  std::cout << out;
  return 0;
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) { return troupe::bench::run(argc, argv); }
