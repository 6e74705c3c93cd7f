// core/idx: IDX files of every type code round-trip (big-endian on disk), gzip or plain;
// damaged files (bad magic, bad type code, truncated header or data, trailing bytes,
// truncated or corrupt gzip) and mismatched image/label pairs give errors naming the file.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "core/file.h"
#include "core/idx.h"
#include "core/memory.h"
#include "core/tensor.h"

using namespace troupe;

namespace {

// gzip(1)-compatible compression of `bytes`.
std::string gzip(const std::string& bytes) {
  z_stream stream{};
  REQUIRE(deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&stream, bytes.size()) + 64, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&stream, Z_FINISH) == Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

std::string temp_dir() {
  auto dir = std::filesystem::temp_directory_path() /
             ("troupe_idx_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string write_temp(const std::string& name, const std::string& contents) {
  std::string path = temp_dir() + "/" + name;
  REQUIRE(write_file(path, contents).ok());
  return path;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("IDX round-trips every type code, big-endian on disk", "[idx]") {
  tensor u8 = tensor::from_vector<std::uint8_t>({1, 2, 3, 250, 4, 5}, {2, 3});
  tensor i8 = tensor::from_vector<std::int8_t>({-1, 2, -128}, {3});
  tensor i16 = tensor::from_vector<std::int16_t>({-2, 300, 0x1234}, {3, 1});
  tensor i32 = tensor::from_vector<std::int32_t>({-70000, 1, 0x01020304, 7}, {2, 2});
  tensor f32 = tensor::from_vector<float>({1.5f, -2.25f}, {1, 2});
  tensor f64 = tensor::from_vector<double>({3.125, -1e100}, {2});
  for (const tensor& t : {u8, i8, i16, i32, f32, f64}) {
    INFO(t.debug_string());
    std::string bytes = to_idx_bytes(t);
    CHECK(bytes[0] == 0);
    CHECK(bytes[1] == 0);
    CHECK(static_cast<unsigned char>(bytes[2]) == idx_type_code(t.type()));
    CHECK(bytes[3] == t.rank());
    auto back = parse_idx(bytes, "t.idx");
    REQUIRE(back.ok());
    CHECK(back->equals(t));
    auto via_gzip = parse_idx(*gunzip(gzip(bytes), "t.idx.gz"), "t.idx.gz");
    REQUIRE(via_gzip.ok());
    CHECK(via_gzip->equals(t));
  }
  // The first element of i32 is stored most significant byte first.
  std::string bytes = to_idx_bytes(i32);
  CHECK(static_cast<unsigned char>(bytes[4 + 8 + 8]) == 0x01);   // 0x01020304 at element 2
  CHECK(static_cast<unsigned char>(bytes[4 + 8 + 11]) == 0x04);
  CHECK(idx_type_code(dtype::int64) == 0);
}

TEST_CASE("read_idx reads gzip and plain files alike", "[idx]") {
  tensor t = tensor::from_vector<std::uint8_t>({9, 8, 7, 6, 5, 4}, {3, 2});
  std::string plain = write_temp("plain-idx2-ubyte", to_idx_bytes(t));
  std::string gz = write_temp("gz-idx2-ubyte.gz", gzip(to_idx_bytes(t)));
  // Two gzip members back to back decompress to the concatenation, as with gzip(1).
  std::string idx = to_idx_bytes(t);
  std::string two_members = gzip(idx.substr(0, 7)) + gzip(idx.substr(7));
  std::string multi = write_temp("multi-idx2-ubyte.gz", two_members);
  for (const std::string& path : {plain, gz, multi}) {
    INFO(path);
    auto back = read_idx(path);
    REQUIRE(back.ok());
    CHECK(back->equals(t));
  }
}

TEST_CASE("Damaged IDX files give errors naming the file and what is wrong", "[idx]") {
  tensor t = tensor::from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  std::string good = to_idx_bytes(t);
  struct damage {
    std::string name;
    std::string bytes;
    std::string expected;
  };
  std::string bad_magic = good;
  bad_magic[0] = 0x13;
  std::string bad_type = good;
  bad_type[2] = 0x0A;
  std::string zero_rank = good.substr(0, 4);
  zero_rank[3] = 0;
  std::string huge = good;
  huge[4] = 0x7f;  // first dimension ~2^31: must not be allocated
  std::string gz = gzip(good);
  std::string corrupt_gz = gz;
  corrupt_gz[gz.size() - 6] ^= 0x55;  // inside the CRC32 of the trailer
  std::vector<damage> cases = {
      {"short", good.substr(0, 3), "too short for an IDX magic number"},
      {"bad-magic", bad_magic, "bad magic number 0x1300"},
      {"bad-type", bad_type, "unknown IDX type code 0xa"},
      {"zero-rank", zero_rank, "0 dimensions"},
      {"short-header", good.substr(0, 9), "header declares 2 dimensions (12 bytes)"},
      {"short-data", good.substr(0, good.size() - 1), "is truncated: its header declares int32 [2,3]"},
      {"huge", huge, "is truncated"},
      {"trailing", good + "xy", "2 unexpected bytes after the data"},
      {"truncated.gz", gz.substr(0, gz.size() / 2), "is truncated: the gzip data ends"},
      {"corrupt.gz", corrupt_gz, "corrupt gzip data"},
      {"trailing.gz", gz + "junk", "4 unexpected bytes after the gzip data"},
  };
  for (const auto& c : cases) {
    std::string path = write_temp(c.name, c.bytes);
    auto r = read_idx(path);
    INFO(c.name << ": " << (r.ok() ? std::string("ok") : r.error().to_string()));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::data_loss);
    CHECK(contains(r.error().message(), "'" + path + "'"));
    CHECK(contains(r.error().message(), c.expected));
  }
  auto missing = read_idx(temp_dir() + "/no-such-file");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().error_code() == code::not_found);
  CHECK(contains(missing.error().message(), "no-such-file"));
}

TEST_CASE("An IDX file over the memory limit is RESOURCE_EXHAUSTED, not an exception", "[idx]") {
  std::string bytes = to_idx_bytes(tensor::zeros(dtype::uint8, {4, 32, 32}));
  auto small = memory_account::create("small", 1024, &memory_account::process());
  account_scope scope(small.get());
  auto t = parse_idx(bytes, "big.idx");
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().error_code() == code::resource_exhausted);
  CHECK(t.error().message().rfind("'big.idx': cannot allocate uint8 [4,32,32]", 0) == 0);
}

TEST_CASE("read_idx_examples checks that images and labels belong together", "[idx]") {
  tensor images = tensor::zeros(dtype::uint8, {4, 2, 2});
  std::string images_path = write_temp("ex-images", to_idx_bytes(images));
  std::string labels_path =
      write_temp("ex-labels", to_idx_bytes(tensor::from_vector<std::uint8_t>({1, 2, 3, 4})));
  std::string short_labels =
      write_temp("ex-short-labels", to_idx_bytes(tensor::from_vector<std::uint8_t>({1, 2, 3})));
  std::string matrix_labels = write_temp("ex-matrix-labels", to_idx_bytes(images));

  auto good = read_idx_examples(images_path, labels_path);
  REQUIRE(good.ok());
  CHECK(good->images.shape() == tensor_shape{4, 2, 2});
  CHECK(good->labels.shape() == tensor_shape{4});

  auto mismatch = read_idx_examples(images_path, short_labels);
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.error().error_code() == code::invalid_argument);
  CHECK(contains(mismatch.error().message(), "'" + short_labels + "' has 3 labels"));
  CHECK(contains(mismatch.error().message(), "'" + images_path + "' has 4 examples"));

  auto not_vector = read_idx_examples(images_path, matrix_labels);
  REQUIRE_FALSE(not_vector.ok());
  CHECK(contains(not_vector.error().message(), "should hold a vector of labels"));
  std::filesystem::remove_all(temp_dir());
}
