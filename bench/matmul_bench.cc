// MatMul throughput: troupe's MatMul kernel against a raw cblas_sgemm call on the same
// matrices, square N x N float32, with one and two threads, in the same run.
//
// The kernel is built once (kernel_registry::builtin().create) and only compute() is timed,
// so the figures measure the kernel and its dispatch, not node setup. Each benchmark
// reports GFLOP/s (2 N^3 per product) as a rate counter; the ratio troupe / sgemm is the
// overhead of going through troupe. OpenBLAS's thread count is global: the sgemm baseline
// sets it to the benchmark's thread count, and the kernel sets it to its pool's size.
//
//   build-nn/bench/bench_matmul --benchmark_counters_tabular=true
//
// Say which OPENBLAS_CORETYPE the run used when quoting figures (this environment sets
// Haswell).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/kernel_registry.h"

namespace troupe {
namespace {

tensor random_matrix(std::int64_t n, std::mt19937& rng) {
  tensor t(dtype::float32, {n, n});
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : t.flat<float>()) x = dist(rng);
  return t;
}

void set_flops(benchmark::State& state, std::int64_t n) {
  double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}

}  // namespace

// Args: N, threads.
void BM_troupe_matmul(benchmark::State& state) {
  std::int64_t n = state.range(0);
  int threads = static_cast<int>(state.range(1));
  compute_pool pool(threads);
  std::mt19937 rng(42);
  std::vector<tensor> inputs = {random_matrix(n, rng), random_matrix(n, rng)};

  tf::NodeDef node;
  node.set_name("matmul");
  node.set_op("MatMul");
  (*node.mutable_attr())["T"] = graph::attr_value(dtype::float32);
  const graph::op_def* op = graph::op_registry::builtin().find("MatMul");
  if (op == nullptr || !graph::add_defaults_and_validate_attrs(*op, &node).ok()) {
    state.SkipWithError("MatMul is not registered");
    return;
  }
  std::vector<dtype> output_types = {dtype::float32};
  auto kernel = kernels::kernel_registry::builtin().create(
      "CPU", node, *op, {dtype::float32, dtype::float32}, output_types);
  if (!kernel.ok()) {
    state.SkipWithError(kernel.error().to_string().c_str());
    return;
  }
  kernels::step_info step;
  step.pool = &pool;
  std::vector<tensor> outputs(1);
  for (auto _ : state) {
    kernels::kernel_context ctx(inputs, outputs, output_types, step);
    (*kernel)->compute(ctx);
    if (!ctx.ok()) {
      state.SkipWithError(ctx.get_status().to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(outputs[0].raw_data());
  }
  set_flops(state, n);
}

// The baseline: sgemm into a preallocated output.
void BM_cblas_sgemm(benchmark::State& state) {
  std::int64_t n = state.range(0);
  int threads = static_cast<int>(state.range(1));
  openblas_set_num_threads(threads);
  std::mt19937 rng(42);
  tensor a = random_matrix(n, rng), b = random_matrix(n, rng);
  tensor c(dtype::float32, {n, n});
  int size = static_cast<int>(n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, size, size, size, 1.0f,
                a.data<float>(), size, b.data<float>(), size, 0.0f, c.data<float>(), size);
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_flops(state, n);
}

// kernels::parallel_gemm (what MatMul, the convolutions and the fused LSTM call) on the
// models' non-square products. Args: m, n, k, transpose_a, transpose_b, threads.
void BM_troupe_gemm(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  compute_pool pool(static_cast<int>(state.range(5)));
  std::mt19937 rng(42);
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)), c(static_cast<std::size_t>(m * n));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  for (auto _ : state) {
    kernels::parallel_gemm<float>(pool, ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f,
                                  c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace troupe

// Registered by hand so that each troupe figure runs right after its baseline.
int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (int threads : {1, 2}) {
    for (int n : {256, 1024, 2048}) {
      for (auto [name, fn] : {std::pair{"cblas_sgemm", &troupe::BM_cblas_sgemm},
                              std::pair{"troupe_MatMul", &troupe::BM_troupe_matmul}}) {
        benchmark::RegisterBenchmark(name, fn)
            ->ArgNames({"N", "threads"})
            ->Args({n, threads})
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  // The LSTM language model's products (logits, their two gradients; the fused LSTM's input
  // projection, weight gradient and one step) and the MLP's first layer.
  const std::vector<std::vector<std::int64_t>> shapes = {
      {640, 10000, 512, 0, 0}, {640, 512, 10000, 0, 1}, {512, 10000, 640, 1, 0},
      {640, 2048, 512, 0, 0},  {1024, 2048, 640, 1, 0}, {640, 512, 2048, 0, 1}, {32, 256, 512, 0, 0},
      {32, 512, 2048, 0, 1},   {32, 512, 2048, 0, 0},   {32, 256, 2048, 0, 1},
      {64, 512, 784, 0, 0},    {784, 512, 64, 1, 0}};
  for (int threads : {1, 2}) {
    for (auto shape : shapes) {
      shape.push_back(threads);
      benchmark::RegisterBenchmark("troupe_gemm", &troupe::BM_troupe_gemm)
          ->ArgNames({"m", "n", "k", "ta", "tb", "threads"})
          ->Args(shape)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
