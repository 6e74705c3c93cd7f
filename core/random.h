// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers:
// as easy as 1, 2, 3", SC 2011), the generator TensorFlow's random ops use, with the
// conversions TensorFlow applies (uniform floats from the mantissa bits, Box-Muller
// normals). Being counter-based, any block of the stream can be produced independently:
// kernels fill large tensors in parallel and still get the same values for a seed.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace troupe {

class philox {
 public:
  using block = std::array<std::uint32_t, 4>;

  philox() = default;
  // seed -> key, seed2 -> high half of the counter (as TensorFlow's PhiloxRandom).
  philox(std::uint64_t seed, std::uint64_t seed2) {
    key_ = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
    counter_ = {0, 0, static_cast<std::uint32_t>(seed2), static_cast<std::uint32_t>(seed2 >> 32)};
  }

  // Advances the 128-bit counter by `blocks`.
  void skip(std::uint64_t blocks) {
    std::uint64_t lo = (std::uint64_t{counter_[1]} << 32) | counter_[0];
    std::uint64_t new_lo = lo + blocks;
    counter_[0] = static_cast<std::uint32_t>(new_lo);
    counter_[1] = static_cast<std::uint32_t>(new_lo >> 32);
    if (new_lo < lo) {
      if (++counter_[2] == 0) ++counter_[3];
    }
  }

  // The whole state (key, then counter), to save it and make the same stream again.
  using words = std::array<std::uint32_t, 6>;
  words state() const { return {key_[0], key_[1], counter_[0], counter_[1], counter_[2], counter_[3]}; }
  static philox from_state(const words& w) {
    philox p;
    p.key_ = {w[0], w[1]};
    p.counter_ = {w[2], w[3], w[4], w[5]};
    return p;
  }

  // The next block of four 32-bit values.
  block next() {
    block ctr = counter_;
    std::array<std::uint32_t, 2> key = key_;
    for (int round = 0; round < 10; ++round) {
      std::uint64_t p0 = std::uint64_t{k_m0} * ctr[0];
      std::uint64_t p1 = std::uint64_t{k_m1} * ctr[2];
      ctr = {static_cast<std::uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<std::uint32_t>(p1),
             static_cast<std::uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<std::uint32_t>(p0)};
      key[0] += k_w0;
      key[1] += k_w1;
    }
    skip(1);
    return ctr;
  }

 private:
  static constexpr std::uint32_t k_m0 = 0xD2511F53;
  static constexpr std::uint32_t k_m1 = 0xCD9E8D57;
  static constexpr std::uint32_t k_w0 = 0x9E3779B9;
  static constexpr std::uint32_t k_w1 = 0xBB67AE85;

  std::array<std::uint32_t, 4> counter_{};
  std::array<std::uint32_t, 2> key_{};
};

// Uniform in [0, 1) from the 23 low bits of x.
inline float uint32_to_float(std::uint32_t x) {
  std::uint32_t bits = (127u << 23) | (x & 0x7fffffu);
  float f;
  static_assert(sizeof f == sizeof bits);
  __builtin_memcpy(&f, &bits, sizeof f);
  return f - 1.0f;
}

// Uniform in [0, 1) from 52 bits of (hi, lo).
inline double uint64_to_double(std::uint32_t hi, std::uint32_t lo) {
  std::uint64_t mantissa = ((std::uint64_t{hi} & 0xfffffu) << 32) | lo;
  std::uint64_t bits = (std::uint64_t{1023} << 52) | mantissa;
  double d;
  __builtin_memcpy(&d, &bits, sizeof d);
  return d - 1.0;
}

// Two standard normals from two uniform draws (Box-Muller).
inline std::array<double, 2> box_muller(double u1, double u2) {
  constexpr double k_epsilon = 1e-7;
  constexpr double k_two_pi = 6.283185307179586;
  if (u1 < k_epsilon) u1 = k_epsilon;
  double radius = std::sqrt(-2.0 * std::log(u1));
  double angle = k_two_pi * u2;
  return {std::sin(angle) * radius, std::cos(angle) * radius};
}

// A fresh non-deterministic 64-bit seed (for ops whose seed and seed2 are both 0).
std::uint64_t random_seed();

}  // namespace troupe
