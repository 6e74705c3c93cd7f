// CRC-32C (Castagnoli, the checksum of iSCSI, ext4 and TensorFlow's checkpoints), with the
// SSE4.2 crc32 instruction where the processor has it (every x86-64 with AVX2 does; about
// 8 GB/s) and a table otherwise.
//
//   std::uint32_t crc = crc32c_extend(0, data, size);   // extend: crc32c_extend(crc, more, n)
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe {

// The CRC-32C of `crc`'s bytes followed by these (`crc` 0 for a start).
std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t size);

}  // namespace troupe
