// CRC-32C (Castagnoli, the checksum of iSCSI, ext4 and TensorFlow's checkpoints), with the
// SSE4.2 crc32 instruction where the processor has it (every x86-64 with AVX2 does; three
// streams at once on large buffers) and a table otherwise.
//
//   std::uint32_t crc = crc32c_extend(0, data, size);   // extend: crc32c_extend(crc, more, n)
//   crc32c_combine(crc32c(A), crc32c(B), size of B) == crc32c(A followed by B)
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe {

// The CRC-32C of `crc`'s bytes followed by these (`crc` 0 for a start).
std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t size);

// The CRC-32C of two byte strings one after the other, from the CRC-32C of each and the
// second's length: pieces of a file checksummed apart (by several threads, or in any
// order) give the whole file's.
std::uint32_t crc32c_combine(std::uint32_t first, std::uint32_t second, std::uint64_t second_size);

}  // namespace troupe
