// What the processor can run, checked once at run time. Kernels compiled for a wider
// vector unit than the build targets (by `#pragma GCC target`, so that one binary runs
// anywhere) are called only where these say so.
//
// Thread safety: every function may be called from any thread.
#pragma once

namespace troupe::kernels {

// True when the processor runs AVX-512F.
inline bool has_avx512f() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
}

}  // namespace troupe::kernels
