// A checkpoint read by Debian's h5py (python3-h5py, installed by tools/setup.sh), as
// doc/checkpoints.md shows: every variable's whole value at variables/<name>, whatever the
// sharding it was saved from, with its attributes; state under state/<name>. Skipped when
// /usr/bin/python3 cannot import h5py. Also a checkpoint rewritten by h5py in HDF5's 1.8
// format (older troupes') restores, and damaged, is caught by its CRC-32C first.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <complex>
#include <cstring>
#include <cstdlib>
#include <filesystem>

#include <google/protobuf/util/json_util.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/manifest.pb.h"
#include "core/crc32c.h"
#include "core/file.h"
#include "tests/skip.h"

namespace troupe::checkpoint {
namespace {

const troupe::testing::skip_when no_h5py([]() -> std::optional<std::string> {
  if (std::system("/usr/bin/python3 -c 'import h5py, numpy' > /dev/null 2>&1") != 0) {
    return "/usr/bin/python3 cannot import h5py (apt-get install python3-h5py; tools/setup.sh does)";
  }
  return std::nullopt;
});

constexpr const char* k_script = R"(
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
w = f["variables/layer/w"]
assert np.array_equal(w[...], np.arange(12, dtype=np.float32).reshape(4, 3) * 0.5), w[...]
assert w.dtype == np.float32
assert w.attrs["dtype"] == "float", w.attrs["dtype"]
assert list(w.attrs["shape"]) == [4, 3]
assert w.attrs["global_step"] == 77
assert w.attrs["saved_slices"].tolist() == [[0, 0, 2, 3], [2, 0, 2, 3]], w.attrs["saved_slices"]
assert f.attrs["global_step"] == 77 and f.attrs["format"] == "troupe-checkpoint"
m = f["variables/mask"][...]
assert m.dtype == np.bool_ and m.tolist() == [True, False, True], m
h = f["variables/half"][...]
assert h.dtype == np.float16 and h.tolist() == [1.5, -2.0], h
c = f["variables/complex"][...]
assert c.dtype == np.complex64 and c.tolist() == [1 + 2j, -3 + 0.5j], c
assert f["variables/step_size"][()] == np.float64(0.125)
assert f["state/input/position"][()] == 9
# Chunks troupe wrote itself (several 360-word blocks, a partial last chunk, rows from
# three shards in one chunk): HDF5's own Fletcher32 filter checks them as h5py reads.
big = f["variables/big"]
assert big.chunks == (3495, 300), big.chunks
assert np.array_equal(big[...], (np.arange(4001 * 300, dtype=np.float32) * 0.5).reshape(4001, 300)), "big"
assert f["variables/big"].fletcher32
print("ok")
)";

TEST_CASE("h5py reads a sharded checkpoint as the whole variables", "[checkpoint]") {
  const std::string dir = (std::filesystem::temp_directory_path() / ("troupe_h5py_" + std::to_string(::getpid()))).string();
  auto d = directory::open(dir);
  REQUIRE(d.ok());
  std::vector<float> top = {0, 0.5, 1, 1.5, 2, 2.5}, bottom = {3, 3.5, 4, 4.5, 5, 5.5};
  snapshot s;
  s.global_step = 77;
  s.variables.push_back({"layer/w", dtype::float32, {4, 3},
                         {{{0, 0}, tensor::from_vector<float>(top, {2, 3})},
                          {{2, 0}, tensor::from_vector<float>(bottom, {2, 3})}}});
  tensor mask(dtype::bool_, {3});
  mask.data<bool>()[0] = true;
  mask.data<bool>()[1] = false;
  mask.data<bool>()[2] = true;
  s.variables.push_back({"mask", dtype::bool_, {3}, {{{0}, mask}}});
  tensor half(dtype::float16, {2});
  const std::uint16_t half_bits[2] = {0x3e00, 0xc000};  // 1.5, -2.0
  std::memcpy(half.raw_data(), half_bits, sizeof(half_bits));
  s.variables.push_back({"half", dtype::float16, {2}, {{{0}, half}}});
  tensor complex(dtype::complex64, {2});
  const std::complex<float> complex_values[2] = {{1, 2}, {-3, 0.5}};
  std::memcpy(complex.raw_data(), complex_values, sizeof(complex_values));
  s.variables.push_back({"complex", dtype::complex64, {2}, {{{0}, complex}}});
  s.variables.push_back({"step_size", dtype::float64, {}, {{{}, tensor::scalar<double>(0.125)}}});
  s.state.push_back({"input/position", tensor::scalar<std::int64_t>(9)});
  // 4001 x 300 float32 (4.8 MB; chunks of 3495 rows: one whole, one partial) from shards
  // of 1500, 1500 and 1001 rows (the first chunk holds rows of all three).
  std::vector<float> big(4001 * 300);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  variable big_variable{"big", dtype::float32, {4001, 300}, {}};
  for (const auto& [begin, rows] : {std::pair{0, 1500}, std::pair{1500, 1500}, std::pair{3000, 1001}}) {
    std::vector<float> part(big.begin() + begin * 300, big.begin() + (begin + rows) * 300);
    big_variable.slices.push_back({{begin, 0}, tensor::from_vector<float>(part, {rows, 300})});
  }
  s.variables.push_back(big_variable);
  auto saved = d->save(s);
  REQUIRE(saved.ok());
  const std::string script = dir + "/check.py";
  REQUIRE(write_file(script, k_script).ok());
  const std::string command = "/usr/bin/python3 " + script + " " + saved->path + " > " + dir + "/out.txt 2>&1";
  const int rc = std::system(command.c_str());
  auto out = read_file(dir + "/out.txt");
  INFO((out.ok() ? *out : std::string("no output")));
  CHECK(rc == 0);
  std::filesystem::remove_all(dir);
}

// Rewrites a checkpoint in HDF5's 1.8 format, as troupes before the 1.10 format wrote them
// (superblock version 0, no metadata checksums).
constexpr const char* k_downgrade = R"(
import sys, h5py
src = h5py.File(sys.argv[1], "r")
dst = h5py.File(sys.argv[2], "w", libver="earliest")
for k, v in src.attrs.items():
    dst.attrs[k] = v
for g in ("variables", "slots", "state"):
    src.copy(src[g], dst, name=g)
dst.close()
print("ok")
)";

// Points the manifest entry of `path` at its size and CRC-32C now.
void recommit(const std::string& dir, const std::string& path) {
  auto text = read_file(dir + "/manifest.json");
  REQUIRE(text.ok());
  proto::manifest m;
  REQUIRE(google::protobuf::util::JsonStringToMessage(*text, &m).ok());
  auto bytes = read_file(path);
  REQUIRE(bytes.ok());
  for (auto& entry : *m.mutable_checkpoints()) {
    if (dir + "/" + entry.file() != path) continue;
    entry.set_bytes(static_cast<std::int64_t>(bytes->size()));
    entry.set_crc32c(crc32c_extend(0, bytes->data(), bytes->size()));
  }
  std::string json;
  REQUIRE(google::protobuf::util::MessageToJsonString(m, &json).ok());
  const status written = write_file(dir + "/manifest.json", json);
  INFO(written.message());
  REQUIRE(written.ok());
}

TEST_CASE("a checkpoint in HDF5's 1.8 format restores; damaged, its CRC-32C finds it before HDF5 reads it",
          "[checkpoint]") {
  const std::string dir = (std::filesystem::temp_directory_path() / ("troupe_h5old_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  auto d = directory::open(dir);
  REQUIRE(d.ok());
  std::vector<float> values(600);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const tensor first = tensor::from_vector<float>(values, {200, 3});
  for (float& v : values) v = -v;
  const tensor second = tensor::from_vector<float>(values, {200, 3});
  REQUIRE(d->save({1, {{"w", dtype::float32, {200, 3}, {{{0, 0}, first}}}}, {{"position", tensor::scalar<std::int64_t>(1)}}}).ok());
  auto saved = d->save({2, {{"w", dtype::float32, {200, 3}, {{{0, 0}, second}}}}, {{"position", tensor::scalar<std::int64_t>(4)}}});
  REQUIRE(saved.ok());
  const std::string old = dir + "/old.h5", script = dir + "/downgrade.py";
  REQUIRE(write_file(script, k_downgrade).ok());
  REQUIRE(std::system(("/usr/bin/python3 " + script + " " + saved->path + " " + old + " > /dev/null 2>&1").c_str()) == 0);
  std::filesystem::rename(old, saved->path);
  auto head = read_file(saved->path);
  REQUIRE(head.ok());
  REQUIRE(head->size() > 9);
  CHECK((*head)[8] == 0);  // superblock version 0
  recommit(dir, saved->path);

  const restore_request request{{{"w", dtype::float32, {200, 3}, {0, 0}, {200, 3}}}, {"position"}};
  std::vector<std::string> warnings;
  auto restored = d->restore_latest(request, &warnings);
  REQUIRE(restored.ok());
  CHECK(restored->global_step == 2);
  CHECK(restored->variables[0].equals(second));
  CHECK(restored->state[0].scalar_value<std::int64_t>() == 4);
  CHECK(warnings.empty());

  // Damage in its metadata (past the superblock: object headers, the heap): without
  // metadata checksums HDF5 might read it as it is, so the CRC-32C must find it first.
  std::string damaged = *head;
  for (std::size_t at = 200; at < 1200 && at < damaged.size(); ++at) damaged[at] = static_cast<char>(damaged[at] ^ 0x5a);
  REQUIRE(write_file(saved->path, damaged).ok());
  auto fallback = d->restore_latest(request, &warnings);
  REQUIRE(fallback.ok());
  CHECK(fallback->global_step == 1);
  CHECK(fallback->variables[0].equals(first));
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("ckpt-2.h5") && Catch::Contains("CRC-32C"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe::checkpoint
