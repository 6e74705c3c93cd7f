// The floating-point environment of kernel work: subnormal floats flushed to zero.
//
// A float32 below 2^-126 (1.2e-38) in magnitude is subnormal. x86 processors compute
// with one through a microcode assist of about a hundred cycles where a normal number
// takes one, so a kernel whose inputs or results are subnormal can run tens of times
// slower. Training makes them: a momentum or Adam slot of a weight whose gradient is
// mostly zero (an MLP's weights of the border pixels of MNIST-like images) decays
// geometrically, through the subnormal range, toward zero (measured: the momentum update
// of a 784x512 weight took 1.9 ms of CPU instead of 0.17 with 8 asynchronous workers).
// TensorFlow runs every kernel with subnormals flushed (port::ScopedFlushDenormal in its
// executor and thread pools), and so does troupe: kernel work runs inside a
// flush_denormals scope, which sets the processor's flush-to-zero (results) and
// denormals-are-zero (inputs) modes and restores the thread's previous mode at its end.
// kernels::catch_exceptions, through which the executor and every other place that runs
// kernel work go, opens one, and compute_pool::parallel_for's helper threads take their
// caller's mode. A client's thread keeps its own mode outside kernels.
//
//   {
//     flush_denormals scope;
//     volatile float tiny = 1e-30f;
//     float x = tiny * 1e-10f;  // 0, not 1e-40
//   }
//
// Elsewhere than x86 the scope changes nothing (troupe's kernels target x86-64).
// Thread safety: the mode is per thread; a scope is used on the thread that opened it.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace troupe {

class flush_denormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  // MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6) bits.
  static constexpr unsigned k_mode_bits = 0x8040;
  flush_denormals() noexcept : saved_(_mm_getcsr()) {
    if ((saved_ & k_mode_bits) != k_mode_bits) _mm_setcsr(saved_ | k_mode_bits);
  }
  ~flush_denormals() {
    if ((saved_ & k_mode_bits) != k_mode_bits) _mm_setcsr(saved_);
  }
  // Whether this thread flushes subnormals now.
  static bool active() noexcept { return (_mm_getcsr() & k_mode_bits) == k_mode_bits; }

 private:
  unsigned saved_;
#else
  flush_denormals() noexcept = default;
  static bool active() noexcept { return false; }
#endif

 public:
  flush_denormals(const flush_denormals&) = delete;
  flush_denormals& operator=(const flush_denormals&) = delete;
};

}  // namespace troupe
