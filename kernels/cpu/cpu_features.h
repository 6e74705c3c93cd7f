// What the processor can run, checked once at run time. Kernels compiled for a wider
// vector unit than the build targets (by `#pragma GCC target`, so that one binary runs
// anywhere) are called only where these say so.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <cstdlib>

#include "core/switches.h"

namespace troupe::kernels {

// Floats in one AVX-512 vector.
constexpr int k_avx512_float_lanes = 16;

// The bits of an AVX-512 lane mask (__mmask16) selecting the first n lanes: all 16 for
// n >= 16, none for n <= 0. Plain integer arithmetic: callable from code of any target.
constexpr std::uint16_t first_lanes(std::int64_t n) {
  if (n >= k_avx512_float_lanes) return 0xFFFF;
  return n <= 0 ? 0 : static_cast<std::uint16_t>((1u << n) - 1u);
}

// True when the environment variable TROUPE_HIDE_AVX512 is set (to anything but "" or
// "0"): every runtime dispatch of troupe then acts as on a processor without AVX-512 (its
// own kernels, and oneDNN, whose instruction set is capped at AVX2 before its first use),
// so that a machine with AVX-512 also tests what an AVX2 machine runs. OpenBLAS picks its
// kernels when the library loads: set OPENBLAS_CORETYPE=Haswell beside it (CTest does).
inline bool avx512_hidden() {
  static const bool hidden = env_switch("TROUPE_HIDE_AVX512", false);
  return hidden;
}

// True when the processor itself runs AVX-512F, hidden or not.
inline bool processor_has_avx512f() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
}

// True when AVX-512F kernels may run: the processor has it and TROUPE_HIDE_AVX512 does
// not hide it. Every runtime dispatch asks this.
inline bool has_avx512f() { return processor_has_avx512f() && !avx512_hidden(); }

}  // namespace troupe::kernels
