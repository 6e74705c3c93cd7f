// Fuzz target: a .npy file (`troupe eval --feed x=X.npy`), read by core/npy.h. A tensor
// read must not be larger than the file, must hold only 0 or 1 in a bool array, and must
// come back unchanged from serialize_npy.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/npy.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace troupe;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  auto t = parse_npy(bytes, "fuzz.npy");
  if (!fuzz::loaded_or_named(t, "fuzz.npy")) return 0;
  fuzz::require(t->byte_size() <= size, "a tensor larger than the file it came from",
                t->shape().to_string());
  if (t->type() == dtype::bool_) {
    const auto* b = static_cast<const std::uint8_t*>(t->raw_data());
    for (std::size_t i = 0; i < t->byte_size(); ++i) {
      fuzz::require(b[i] <= 1, "a bool element that is neither 0 nor 1");
    }
  }
  auto again = parse_npy(serialize_npy(*t), "again.npy");
  fuzz::require(again.ok(), "serialize_npy wrote what parse_npy rejects",
                again.ok() ? "" : again.error().message());
  fuzz::require(again->equals(*t), "a tensor changed on a round trip through serialize_npy");
  return 0;
}
