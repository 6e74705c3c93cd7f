// The machine's fp32 FMA peak, measured: each thread runs chains of independent fused
// multiply-adds on the widest vectors the compiler targets (-march=native: 512-bit with
// AVX-512, else 256-bit), enough chains in flight to cover the FMA latency on two ports.
// Every FMA counts 2 flops per lane. The figure is the ceiling for any kernel on this
// machine; the report sets GEMM and model throughput against it.
//
//   build/bench/bench_fma_peak [--threads=1,2] [--seconds=0.5]
//
// Prints one JSON object: {"vector_bits": 512, "results": [{"threads": 1, "gflops": ...}]}.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

#if defined(__AVX512F__)
using vec = __m512;
constexpr int k_lanes = 16;
inline vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
inline vec splat(float x) { return _mm512_set1_ps(x); }
inline float first(vec v) { return _mm512_cvtss_f32(v); }
#elif defined(__FMA__)
using vec = __m256;
constexpr int k_lanes = 8;
inline vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
inline vec splat(float x) { return _mm256_set1_ps(x); }
inline float first(vec v) { return _mm256_cvtss_f32(v); }
#else
#error "bench_fma_peak needs FMA (build with -march=native on an x86-64 machine with FMA)"
#endif

constexpr int k_chains = 12;       // > latency (4) x ports (2), with room to spare
constexpr long k_inner = 1 << 14;  // FMAs per chain between clock reads

// Runs FMA chains until `stop`; returns the number of inner blocks done.
long spin(const std::atomic<bool>& stop, float* sink) {
  vec acc[k_chains];
  for (int i = 0; i < k_chains; ++i) acc[i] = splat(1.0f + 0.001f * static_cast<float>(i));
  const vec a = splat(0.999999f), b = splat(1e-7f);
  long blocks = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    for (long n = 0; n < k_inner; ++n) {
      for (int i = 0; i < k_chains; ++i) acc[i] = fma(acc[i], a, b);
    }
    ++blocks;
  }
  float s = 0;
  for (int i = 0; i < k_chains; ++i) s += first(acc[i]);
  *sink = s;
  return blocks;
}

double measure(int threads, double seconds) {
  std::atomic<bool> stop{false};
  std::vector<long> blocks(static_cast<std::size_t>(threads));
  std::vector<float> sinks(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] { blocks[static_cast<std::size_t>(t)] = spin(stop, &sinks[static_cast<std::size_t>(t)]); });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : pool) th.join();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double total = 0;
  for (long b : blocks) total += static_cast<double>(b);
  return total * k_inner * k_chains * k_lanes * 2.0 / elapsed / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  double seconds = 0.5;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    try {
      if (arg.rfind("--threads=", 0) == 0) {
        threads.clear();
        std::stringstream in(arg.substr(10));
        for (std::string part; std::getline(in, part, ',');) threads.push_back(std::stoi(part));
      } else if (arg.rfind("--seconds=", 0) == 0) {
        seconds = std::stod(arg.substr(10));
      } else {
        std::cerr << "bench_fma_peak: unknown flag '" << arg << "' (valid: --threads=LIST, --seconds=S)\n";
        return 2;
      }
    } catch (const std::exception&) {
      std::cerr << "bench_fma_peak: bad value in '" << arg << "'\n";
      return 2;
    }
  }
  std::printf("{\"vector_bits\": %d, \"results\": [", k_lanes * 32);
  for (std::size_t i = 0; i < threads.size(); ++i) {
    double gflops = measure(std::max(1, threads[i]), seconds);
    std::printf("%s{\"threads\": %d, \"gflops\": %.1f}", i == 0 ? "" : ", ", threads[i], gflops);
  }
  std::printf("]}\n");
  return 0;
}
