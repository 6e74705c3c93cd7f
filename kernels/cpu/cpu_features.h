// What the processor can run, checked once at run time. Kernels compiled for a wider
// vector unit than the build targets (by `#pragma GCC target`, so that one binary runs
// anywhere) are called only where these say so.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>

namespace troupe::kernels {

// Floats in one AVX-512 vector.
constexpr int k_avx512_float_lanes = 16;

// The bits of an AVX-512 lane mask (__mmask16) selecting the first n lanes: all 16 for
// n >= 16, none for n <= 0. Plain integer arithmetic: callable from code of any target.
constexpr std::uint16_t first_lanes(std::int64_t n) {
  if (n >= k_avx512_float_lanes) return 0xFFFF;
  return n <= 0 ? 0 : static_cast<std::uint16_t>((1u << n) - 1u);
}

// True when the processor runs AVX-512F.
inline bool has_avx512f() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
}

}  // namespace troupe::kernels
