// core/npy: hostile .npy files (lying sizes, malformed headers) give errors naming the
// file and what is wrong, and nothing is allocated from a header before its size has been
// checked against the bytes present. (Round trips and numpy's spellings: core_test.cc.)
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "core/buffer.h"
#include "core/memory.h"
#include "core/npy.h"

namespace troupe {
namespace {

// A version 1.0 .npy file with `dict` as its header (padded as numpy pads it) and `data`.
std::string npy_file(const std::string& dict, const std::string& data) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header + data;
}

std::string header_with_shape(const std::string& descr, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
}

// The message of the error parsing `bytes` as "bad.npy" (fails the test when it parses).
std::string error_of(const std::string& bytes) {
  auto t = parse_npy(bytes, "bad.npy");
  if (t.ok()) FAIL("parsed as " << t->debug_string());
  return t.error().message();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("A .npy header claiming 10^12 elements is refused before anything is allocated", "[npy]") {
  std::string bytes = npy_file(header_with_shape("<f4", "(1000000000000,)"), std::string(16, '\0'));
  std::int64_t before = get_allocator_stats().allocations;
  auto t = parse_npy(bytes, "huge.npy");
  std::int64_t after = get_allocator_stats().allocations;
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().error_code() == code::invalid_argument);
  CHECK(t.error().message() ==
        "huge.npy: .npy data is 16 bytes but shape [1000000000000] of float needs 4000000000000");
  CHECK(after == before);
}

TEST_CASE("A .npy size whose byte count wraps around 2^64 is refused", "[npy]") {
  // 2^61 doubles are 2^64 bytes: 0 modulo 2^64, the number of data bytes present.
  std::string bytes = npy_file(header_with_shape("<f8", "(2305843009213693952,)"), "");
  std::int64_t before = get_allocator_stats().allocations;
  std::string e = error_of(bytes);
  CHECK(get_allocator_stats().allocations == before);
  CHECK(e == "bad.npy: .npy data is 0 bytes but shape [2305843009213693952] of double needs "
             "2305843009213693952 x 8");
  // Sizes whose product overflows int64, and sizes beyond int64 themselves.
  CHECK(contains(error_of(npy_file(header_with_shape("|u1", "(4294967296, 4294967296)"), "")),
                 "has more than 2^63 elements"));
  CHECK(contains(error_of(npy_file(header_with_shape("|u1", "(99999999999999999999,)"), "")),
                 "bad.npy: .npy shape has a size above 2^63"));
}

TEST_CASE("Malformed .npy headers say what was expected where", "[npy]") {
  // The header the first fuzzer run found: 'shape' with no value (it threw out_of_range).
  CHECK(error_of(npy_file("{'descr': '<u2', 'fortran_order': False, 'shape':}", "")) ==
        "bad.npy: malformed .npy header: expected a tuple of sizes for 'shape' at byte 49 of "
        "{'descr': '<u2', 'fortran_order': False, 'shape':}");
  CHECK(contains(error_of(npy_file(header_with_shape("<f4", "3"), "")),
                 "expected a tuple of sizes for 'shape'"));
  CHECK(contains(error_of(npy_file(header_with_shape("<f4", "(3)"), std::string(12, '\0'))),
                 "expected '(N,)' for a one-dimensional 'shape'"));
  CHECK(contains(error_of(npy_file(header_with_shape("<f4", "(-3,)"), "")),
                 "expected a size (a whole number >= 0) in 'shape'"));
  CHECK(contains(error_of(npy_file(header_with_shape("<f4", "(2 3)"), "")),
                 "expected ',' or ')' in 'shape'"));
  CHECK(contains(error_of(npy_file("{'descr': '<f4', 'shape': (1,), }", std::string(4, '\0'))),
                 "bad.npy: .npy header has no 'fortran_order' entry"));
  CHECK(contains(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), "
                                   "'extra': 1}", "")),
                 "has an unknown key 'extra' (valid: 'descr', 'fortran_order', 'shape')"));
  CHECK(contains(error_of(npy_file("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, "
                                   "'shape': (), }", "")),
                 "has a second 'descr'"));
  CHECK(contains(error_of(npy_file("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (), }", "")),
                 "expected True or False for 'fortran_order'"));
  CHECK(error_of(npy_file("{'descr': '<f4, 'fortran_order': False, 'shape': (), }", "")) ==
        "bad.npy: malformed .npy header: expected ',' or '}' at byte 17 of "
        "{'descr': '<f4, 'fortran_order': False, 'shape': (), }");
  CHECK(contains(error_of(npy_file(header_with_shape("<f4", "()") + " trailing", "")),
                 "expected the end of the header after '}'"));

  // A header length beyond the file, an unknown version.
  std::string good = npy_file(header_with_shape("<f4", "(1,)"), std::string(4, '\0'));
  std::string long_header = good;
  long_header[8] = '\xff';
  long_header[9] = '\xff';
  CHECK(contains(error_of(long_header), "bad.npy: truncated .npy header: it declares 65535 bytes"));
  std::string version = good;
  version[6] = 4;
  CHECK(error_of(version) == "bad.npy: unsupported .npy version 4 (valid: 1, 2, 3)");
  // Data bytes beyond what the shape needs.
  CHECK(error_of(good + "xx") == "bad.npy: .npy data is 6 bytes but shape [1] of float needs 4");
}

TEST_CASE("A .npy bool array reads non-zero bytes as true", "[npy]") {
  auto t = parse_npy(npy_file(header_with_shape("|b1", "(3,)"), std::string("\x00\x02\xff", 3)),
                     "b.npy");
  REQUIRE(t.ok());
  const auto* bytes = static_cast<const std::uint8_t*>(t->raw_data());
  CHECK(bytes[0] == 0);
  CHECK(bytes[1] == 1);
  CHECK(bytes[2] == 1);
}

TEST_CASE("A .npy array over the memory limit is RESOURCE_EXHAUSTED, not an exception", "[npy]") {
  std::string bytes = npy_file(header_with_shape("|u1", "(4096,)"), std::string(4096, '\x01'));
  auto small = memory_account::create("small", 1024, &memory_account::process());
  account_scope scope(small.get());
  auto t = parse_npy(bytes, "big.npy");
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().error_code() == code::resource_exhausted);
  CHECK(t.error().message().rfind("big.npy: cannot allocate uint8 [4096]", 0) == 0);
}

}  // namespace troupe
