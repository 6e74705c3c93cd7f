#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace troupe {
namespace {

constexpr std::uint32_t k_polynomial = 0x82f63b78;  // reflected Castagnoli

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ k_polynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr auto k_table = make_table();

std::uint32_t extend_table(std::uint32_t crc, const unsigned char* p, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) crc = k_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

// Polynomials modulo the Castagnoli polynomial in the reflected order the CRC register
// holds them: the coefficient of x^0 is bit 31, of x^31 bit 0.
constexpr std::uint32_t k_one = 0x80000000u;  // x^0

// a * b mod P.
std::uint32_t multiply(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (std::uint32_t term = k_one; term != 0; term >>= 1) {
    if ((a & term) != 0) product ^= b;
    b = (b & 1) != 0 ? (b >> 1) ^ k_polynomial : b >> 1;  // b * x
  }
  return product;
}

// x^(8 * bytes) mod P: what a register is multiplied by when `bytes` zero bytes go through it.
std::uint32_t shift_by(std::uint64_t bytes) {
  std::uint32_t power = k_one;
  std::uint32_t square = k_one >> 8;  // x^8
  for (; bytes != 0; bytes >>= 1) {
    if ((bytes & 1) != 0) power = multiply(power, square);
    square = multiply(square, square);
  }
  return power;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint64_t words_sse42(std::uint64_t c, const unsigned char* p,
                                                            std::size_t words) {
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t word;
    std::memcpy(&word, p + 8 * i, 8);
    c = _mm_crc32_u64(c, word);
  }
  return c;
}

// The crc32 instruction takes three cycles and starts one a cycle: three independent
// streams over consecutive blocks, joined by shifting the first two past the others.
constexpr std::size_t k_stream_bytes = 16 << 10;

__attribute__((target("sse4.2"))) std::uint32_t extend_sse42(std::uint32_t crc, const unsigned char* p,
                                                             std::size_t size) {
  std::uint64_t c = crc;
  if (size >= 3 * k_stream_bytes) {
    static const std::uint32_t shift_one = shift_by(k_stream_bytes);
    static const std::uint32_t shift_two = shift_by(2 * k_stream_bytes);
    while (size >= 3 * k_stream_bytes) {
      std::uint64_t a = c, b = 0, d = 0;
      const unsigned char* pa = p;
      const unsigned char* pb = p + k_stream_bytes;
      const unsigned char* pd = p + 2 * k_stream_bytes;
      for (std::size_t i = 0; i < k_stream_bytes; i += 8) {
        std::uint64_t wa, wb, wd;
        std::memcpy(&wa, pa + i, 8);
        std::memcpy(&wb, pb + i, 8);
        std::memcpy(&wd, pd + i, 8);
        a = _mm_crc32_u64(a, wa);
        b = _mm_crc32_u64(b, wb);
        d = _mm_crc32_u64(d, wd);
      }
      c = multiply(shift_two, static_cast<std::uint32_t>(a)) ^ multiply(shift_one, static_cast<std::uint32_t>(b)) ^
          static_cast<std::uint32_t>(d);
      p += 3 * k_stream_bytes;
      size -= 3 * k_stream_bytes;
    }
  }
  c = words_sse42(c, p, size / 8);
  p += size / 8 * 8;
  size %= 8;
  std::uint32_t c32 = static_cast<std::uint32_t>(c);
  while (size > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --size;
  }
  return c32;
}
#endif

}  // namespace

std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  crc = has_sse42 ? extend_sse42(crc, p, size) : extend_table(crc, p, size);
#else
  crc = extend_table(crc, p, size);
#endif
  return ~crc;
}

// The register is linear in its start and in the data: the first string's register shifted
// past the second's bytes, plus the second's from zero. The pre- and post-inversions of the
// two cancel in the sum.
std::uint32_t crc32c_combine(std::uint32_t first, std::uint32_t second, std::uint64_t second_size) {
  return multiply(shift_by(second_size), first) ^ second;
}

}  // namespace troupe
