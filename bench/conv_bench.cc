// Conv2D throughput on LeNet and AlexNet layers: troupe's Conv2D, Conv2DBackpropInput and
// Conv2DBackpropFilter kernels (float32, one thread) on NHWC images (troupe_<op>) and on
// NCHW images (troupe_NCHW_<op>, PyTorch's layout), each beside a baseline measured
// in the same run: one cblas_sgemm of the layer's im2col product ([batch*out_h*out_w,
// kh*kw*in_c] x [kh*kw*in_c, out_c]), the floor for an im2col + gemm kernel. The ratio
// kernel / sgemm is what im2col, col2im and chunking cost on top of the gemm.
//
// The kernel is built once (kernel_registry::builtin().create) and only compute() is timed.
// Each figure carries GFLOP/s (2 * M * K * N per pass, the same for all three ops).
//
//   build-conv/bench/bench_conv --benchmark_counters_tabular=true
//
// The PyTorch peer for the same layers is bench/peers/conv_peer.py. Say which
// OPENBLAS_CORETYPE the run used when quoting figures (this environment sets Haswell).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "kernels/kernel_registry.h"

namespace troupe {
namespace {

struct layer {
  const char* name;
  std::int64_t batch, in_h, in_w, in_c, k, out_c, stride;
  const char* padding;
  std::int64_t out_h() const {
    return std::string(padding) == "SAME" ? (in_h + stride - 1) / stride : (in_h - k) / stride + 1;
  }
  std::int64_t out_w() const {
    return std::string(padding) == "SAME" ? (in_w + stride - 1) / stride : (in_w - k) / stride + 1;
  }
  double flops() const {
    return 2.0 * static_cast<double>(batch * out_h() * out_w()) *
           static_cast<double>(k * k * in_c) * static_cast<double>(out_c);
  }
};

const layer k_layers[] = {
    {"lenet_conv1", 64, 28, 28, 1, 5, 6, 1, "SAME"},
    {"lenet_conv2", 64, 14, 14, 6, 5, 16, 1, "VALID"},
    {"cnn_conv1", 64, 28, 28, 1, 5, 32, 1, "SAME"},
    {"cnn_conv2", 64, 14, 14, 32, 5, 64, 1, "SAME"},
    {"alexnet_conv1", 16, 224, 224, 3, 11, 64, 4, "VALID"},
    {"alexnet_conv2", 16, 27, 27, 64, 5, 192, 1, "SAME"},
    {"alexnet_conv3", 16, 13, 13, 192, 3, 384, 1, "SAME"},
};

tensor random_tensor(tensor_shape shape, std::mt19937& rng) {
  tensor t(dtype::float32, std::move(shape));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : t.flat<float>()) x = dist(rng);
  return t;
}

tensor sizes(const tensor_shape& s) {
  std::vector<std::int32_t> v(s.dims().begin(), s.dims().end());
  return tensor::from_vector<std::int32_t>(v);
}

void set_flops(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// Args: layer index, threads. `op` is Conv2D, Conv2DBackpropInput or Conv2DBackpropFilter;
// `nchw` picks the images' layout.
void run_conv_op(benchmark::State& state, const std::string& op, bool nchw) {
  const layer& l = k_layers[state.range(0)];
  int threads = static_cast<int>(state.range(1));
  compute_pool pool(threads);
  std::mt19937 rng(42);
  tensor_shape input_shape = nchw ? tensor_shape{l.batch, l.in_c, l.in_h, l.in_w}
                                  : tensor_shape{l.batch, l.in_h, l.in_w, l.in_c};
  tensor_shape filter_shape{l.k, l.k, l.in_c, l.out_c};
  tensor_shape output_shape = nchw ? tensor_shape{l.batch, l.out_c, l.out_h(), l.out_w()}
                                   : tensor_shape{l.batch, l.out_h(), l.out_w(), l.out_c};
  std::vector<tensor> inputs;
  std::vector<dtype> input_types;
  if (op == "Conv2D") {
    inputs = {random_tensor(input_shape, rng), random_tensor(filter_shape, rng)};
    input_types = {dtype::float32, dtype::float32};
  } else if (op == "Conv2DBackpropInput") {
    inputs = {sizes(input_shape), random_tensor(filter_shape, rng), random_tensor(output_shape, rng)};
    input_types = {dtype::int32, dtype::float32, dtype::float32};
  } else {
    inputs = {random_tensor(input_shape, rng), sizes(filter_shape), random_tensor(output_shape, rng)};
    input_types = {dtype::float32, dtype::int32, dtype::float32};
  }

  tf::NodeDef node;
  node.set_name("conv");
  node.set_op(op);
  (*node.mutable_attr())["T"] = graph::attr_value(dtype::float32);
  (*node.mutable_attr())["strides"] = graph::attr_value(
      nchw ? std::vector<std::int64_t>{1, 1, l.stride, l.stride} : std::vector<std::int64_t>{1, l.stride, l.stride, 1});
  (*node.mutable_attr())["data_format"] = graph::attr_value(nchw ? "NCHW" : "NHWC");
  (*node.mutable_attr())["padding"] = graph::attr_value(l.padding);
  const graph::op_def* def = graph::op_registry::builtin().find(op);
  if (def == nullptr || !graph::add_defaults_and_validate_attrs(*def, &node).ok()) {
    state.SkipWithError((op + " is not registered").c_str());
    return;
  }
  std::vector<dtype> output_types = {dtype::float32};
  auto kernel = kernels::kernel_registry::builtin().create("CPU", node, *def, input_types,
                                                           output_types);
  if (!kernel.ok()) {
    state.SkipWithError(kernel.error().to_string().c_str());
    return;
  }
  kernels::step_info step;
  step.pool = &pool;
  std::vector<tensor> outputs(1);
  {
    // Untimed: the first run builds the layer's oneDNN primitives, timing both layouts.
    kernels::kernel_context ctx(inputs, outputs, output_types, step);
    (*kernel)->compute(ctx);
  }
  for (auto _ : state) {
    kernels::kernel_context ctx(inputs, outputs, output_types, step);
    (*kernel)->compute(ctx);
    if (!ctx.ok()) {
      state.SkipWithError(ctx.get_status().to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(outputs[0].raw_data());
  }
  set_flops(state, l.flops());
}

void BM_troupe_Conv2D(benchmark::State& state) { run_conv_op(state, "Conv2D", false); }
void BM_troupe_Conv2DBackpropInput(benchmark::State& state) {
  run_conv_op(state, "Conv2DBackpropInput", false);
}
void BM_troupe_Conv2DBackpropFilter(benchmark::State& state) {
  run_conv_op(state, "Conv2DBackpropFilter", false);
}
void BM_troupe_NCHW_Conv2D(benchmark::State& state) { run_conv_op(state, "Conv2D", true); }
void BM_troupe_NCHW_Conv2DBackpropInput(benchmark::State& state) {
  run_conv_op(state, "Conv2DBackpropInput", true);
}
void BM_troupe_NCHW_Conv2DBackpropFilter(benchmark::State& state) {
  run_conv_op(state, "Conv2DBackpropFilter", true);
}

// The baseline: the layer's im2col gemm alone, on preallocated matrices.
void BM_sgemm_im2col_product(benchmark::State& state) {
  const layer& l = k_layers[state.range(0)];
  openblas_set_num_threads(static_cast<int>(state.range(1)));
  std::int64_t m = l.batch * l.out_h() * l.out_w(), k = l.k * l.k * l.in_c, n = l.out_c;
  std::mt19937 rng(42);
  tensor a = random_tensor({m, k}, rng), b = random_tensor({k, n}, rng);
  tensor c(dtype::float32, {m, n});
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, a.data<float>(),
                static_cast<int>(k), b.data<float>(), static_cast<int>(n), 0.0f,
                c.data<float>(), static_cast<int>(n));
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_flops(state, l.flops());
}

}  // namespace
}  // namespace troupe

// Registered by hand so that each layer's figures run next to its baseline.
int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  using fn = void (*)(benchmark::State&);
  const std::pair<const char*, fn> runs[] = {
      {"sgemm_im2col_product", &troupe::BM_sgemm_im2col_product},
      {"troupe_Conv2D", &troupe::BM_troupe_Conv2D},
      {"troupe_Conv2DBackpropInput", &troupe::BM_troupe_Conv2DBackpropInput},
      {"troupe_Conv2DBackpropFilter", &troupe::BM_troupe_Conv2DBackpropFilter},
      {"troupe_NCHW_Conv2D", &troupe::BM_troupe_NCHW_Conv2D},
      {"troupe_NCHW_Conv2DBackpropInput", &troupe::BM_troupe_NCHW_Conv2DBackpropInput},
      {"troupe_NCHW_Conv2DBackpropFilter", &troupe::BM_troupe_NCHW_Conv2DBackpropFilter},
  };
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(std::size(troupe::k_layers)); ++i) {
    for (auto [name, f] : runs) {
      benchmark::RegisterBenchmark((std::string(name) + "/" + troupe::k_layers[i].name).c_str(), f)
          ->ArgNames({"layer", "threads"})
          ->Args({i, 1})
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
