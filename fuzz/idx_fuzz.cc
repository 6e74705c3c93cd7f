// Fuzz target: an IDX file, gzip-compressed or plain, as core/idx.h's read_idx reads the
// dataset files (gunzip when the bytes start with the gzip magic, then parse_idx). A
// tensor read must serialize (to_idx_bytes) back to exactly the bytes it came from.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/idx.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace troupe;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::string plain;
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    auto inflated = gunzip(bytes, "fuzz.idx.gz");
    if (!inflated.ok()) {
      fuzz::require(inflated.error().message().find("'fuzz.idx.gz'") != std::string::npos,
                    "a gzip error that does not name the file", inflated.error().message());
      return 0;
    }
    plain = std::move(*inflated);
    bytes = plain;
  }
  auto t = parse_idx(bytes, "fuzz.idx");
  if (!t.ok()) {
    fuzz::require(t.error().message().find("'fuzz.idx'") != std::string::npos,
                  "an IDX error that does not name the file", t.error().message());
    return 0;
  }
  fuzz::require(to_idx_bytes(*t) == bytes, "to_idx_bytes does not give back the IDX bytes read");
  return 0;
}
