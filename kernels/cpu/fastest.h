// Picking the fastest of several ways to compute the same thing by timing them, as the
// CPU kernels do once per process: MatMul's gemm library (matmul_kernels.cc), a
// convolution's path (conv_kernels.cc) and its oneDNN primitive (onednn_conv.cc).
//
// Under a simulation (core/env.h) nothing is timed: the first candidate is the choice,
// so that a seed replays the same numbers on any machine (the wall clock would pick by
// this machine's load).
//
// Thread safety: as safe as the candidates are.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

#include "core/env.h"

namespace troupe::kernels {

// Runs each of `candidates` once untimed (warming caches and the allocator), then times
// `rounds` rounds in which each runs once in turn, so that a burst of noise from elsewhere
// on the machine hits all alike, and returns the index of the candidate with the fastest
// round. The last candidate is the last to run. Exceptions from a candidate propagate.
// REQUIRES: !candidates.empty(), rounds >= 1.
inline std::size_t fastest_candidate(const std::vector<std::function<void()>>& candidates, int rounds) {
  if (env::simulated()) return 0;
  for (const auto& run : candidates) run();
  std::vector<double> best(candidates.size(), 0);
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      candidates[i]();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (round == 0 || seconds < best[i]) best[i] = seconds;
    }
  }
  return static_cast<std::size_t>(std::min_element(best.begin(), best.end()) - best.begin());
}

}  // namespace troupe::kernels
