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

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t extend_sse42(std::uint32_t crc, const unsigned char* p,
                                                             std::size_t size) {
  std::uint64_t c = crc;
  while (size >= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    size -= 8;
  }
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

}  // namespace troupe
