// checkpoint/checkpoint.h: round trips of every storable dtype, restores across shardings,
// the commit protocol under a failure at every file operation of a save (a full disk, an
// I/O error, a crash that leaves its files behind), damaged files, retention, bad requests.
#include "tests/temp_dir.h"
#include "checkpoint/checkpoint.h"

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/file.h"

namespace troupe::checkpoint {
namespace {

namespace fs = std::filesystem;

using troupe::testing::temp_dir;

tensor iota_tensor(dtype type, tensor_shape shape, int seed) {
  tensor t(type, std::move(shape));
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  std::mt19937 rng(static_cast<unsigned>(seed));
  for (std::size_t i = 0; i < t.byte_size(); ++i) bytes[i] = static_cast<unsigned char>(rng());
  if (type == dtype::bool_) {
    for (std::size_t i = 0; i < t.byte_size(); ++i) bytes[i] &= 1;
  }
  if (type == dtype::float32) {
    auto values = t.flat<float>();
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(seed) + 0.25f * static_cast<float>(i);
  }
  return t;
}

// The box [start, start + extent) of `whole` (row-major copy).
tensor box_of(const tensor& whole, const std::vector<std::int64_t>& start, const tensor_shape& extent) {
  tensor out(whole.type(), extent);
  const int rank = whole.rank();
  const std::size_t element = dtype_size(whole.type());
  if (out.num_elements() == 0) return out;
  if (rank == 0) {
    std::memcpy(out.raw_data(), whole.raw_data(), element);
    return out;
  }
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
  const auto* from = static_cast<const unsigned char*>(whole.raw_data());
  auto* to = static_cast<unsigned char*>(out.raw_data());
  for (std::int64_t n = 0; n < out.num_elements(); ++n) {
    std::int64_t offset = 0;
    for (int d = 0; d < rank; ++d) offset = offset * whole.dim(d) + start[static_cast<std::size_t>(d)] + index[static_cast<std::size_t>(d)];
    std::memcpy(to + static_cast<std::size_t>(n) * element, from + static_cast<std::size_t>(offset) * element, element);
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < extent.dim(d)) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  return out;
}

// `whole` saved as `shards` slices along dimension 0 (as PS shards hold a partitioned variable).
variable sharded(const std::string& name, const tensor& whole, int shards) {
  variable v{name, whole.type(), whole.shape(), {}};
  if (whole.rank() == 0) {
    v.slices.push_back({{}, whole});
    return v;
  }
  const std::int64_t rows = whole.dim(0);
  std::int64_t begin = 0;
  for (int s = 0; s < shards; ++s) {
    const std::int64_t count = rows / shards + (s < rows % shards ? 1 : 0);
    std::vector<std::int64_t> start(static_cast<std::size_t>(whole.rank()), 0);
    start[0] = begin;
    tensor_shape extent = whole.shape();
    extent.set_dim(0, count);
    v.slices.push_back({start, box_of(whole, start, extent)});
    begin += count;
  }
  return v;
}

TEST_CASE("every storable dtype round-trips, whole and by slices", "[checkpoint]") {
  temp_dir dir;
  auto d = directory::open(dir.path);
  REQUIRE(d.ok());
  snapshot s;
  s.global_step = 42;
  std::vector<tensor> values;
  int seed = 1;
  for (dtype t : {dtype::float32, dtype::float64, dtype::int8, dtype::int16, dtype::int32, dtype::int64, dtype::uint8,
                  dtype::uint16, dtype::uint32, dtype::uint64, dtype::bool_, dtype::float16, dtype::bfloat16,
                  dtype::complex64, dtype::complex128}) {
    tensor whole = iota_tensor(t, {7, 3}, seed++);
    values.push_back(whole);
    s.variables.push_back(sharded(str_cat("layer", seed, "/", dtype_name(t)), whole, 2));
  }
  const tensor scalar = tensor::scalar<float>(3.5f);
  const tensor empty = iota_tensor(dtype::float32, {0, 4}, 9);
  const tensor big = iota_tensor(dtype::float32, {3000, 700}, 10);  // several chunks
  s.variables.push_back({"scalar", dtype::float32, {}, {{{}, scalar}}});
  s.variables.push_back({"empty", dtype::float32, {0, 4}, {{{0, 0}, empty}}});
  s.variables.push_back(sharded("big", big, 3));
  s.state.push_back({"input/position", tensor::scalar<std::int64_t>(12345)});
  s.state.push_back({"random/philox", iota_tensor(dtype::uint32, {4}, 11)});
  auto saved = d->save(s);
  INFO((saved.ok() ? std::string() : saved.error().message()));
  REQUIRE(saved.ok());
  CHECK(saved->step == 42);
  CHECK(fs::exists(dir.path + "/ckpt-42.h5"));

  auto r = reader::open(saved->path);
  REQUIRE(r.ok());
  CHECK(r->global_step() == 42);
  CHECK(r->verify().ok());
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO(s.variables[i].name);
    auto back = r->read(s.variables[i].name);
    REQUIRE(back.ok());
    CHECK(back->equals(values[i]));
    auto middle = r->read(s.variables[i].name, {2, 1}, {4, 2});
    REQUIRE(middle.ok());
    CHECK(middle->equals(box_of(values[i], {2, 1}, {4, 2})));
  }
  CHECK(r->read("scalar")->equals(scalar));
  CHECK(r->read("empty")->equals(empty));
  CHECK(r->read("big")->equals(big));
  CHECK(r->read("big", {999, 100}, {1002, 600})->equals(box_of(big, {999, 100}, {1002, 600})));
  CHECK(r->state("input/position")->scalar_value<std::int64_t>() == 12345);
  CHECK(r->state("random/philox")->equals(s.state[1].second));
  const variable_info* info = r->find("big");
  REQUIRE(info != nullptr);
  CHECK(info->shape == tensor_shape({3000, 700}));
  REQUIRE(info->saved_slices.size() == 3);
  CHECK(info->saved_slices[1].first == std::vector<std::int64_t>{1000, 0});
  CHECK(info->saved_slices[1].second == tensor_shape({1000, 700}));
}

TEST_CASE("a variable whose name extends another's (an optimizer slot) is stored under slots/", "[checkpoint]") {
  temp_dir dir;
  auto d = directory::open(dir.path);
  REQUIRE(d.ok());
  tensor w = iota_tensor(dtype::float32, {4, 2}, 1);
  tensor m = iota_tensor(dtype::float32, {4, 2}, 100);
  REQUIRE(d->save({3, {sharded("dense/kernel", w, 2), sharded("dense/kernel/Adam", m, 1)}, {}}).ok());
  auto r = reader::open(dir.path + "/ckpt-3.h5");
  REQUIRE(r.ok());
  REQUIRE(r->find("dense/kernel") != nullptr);
  REQUIRE(r->find("dense/kernel/Adam") != nullptr);
  CHECK(r->find("dense/kernel")->dataset == "variables/dense/kernel");
  CHECK(r->find("dense/kernel/Adam")->dataset == "slots/dense/kernel/Adam");
  auto back_w = r->read("dense/kernel");
  auto back_m = r->read("dense/kernel/Adam", {1, 0}, {2, 2});
  REQUIRE(back_w.ok());
  REQUIRE(back_m.ok());
  CHECK(back_w->equals(w));
  CHECK(back_m->flat<float>()[0] == m.flat<float>()[2]);
  CHECK(r->verify().ok());
}

TEST_CASE("a checkpoint restores onto another sharding: 2 -> 3, 3 -> 1, embedding 4 -> 2", "[checkpoint]") {
  temp_dir dir;
  auto d = directory::open(dir.path);
  REQUIRE(d.ok());
  const tensor w = iota_tensor(dtype::float32, {10, 6}, 3);
  const tensor b = iota_tensor(dtype::float32, {6}, 4);
  const tensor embedding = iota_tensor(dtype::float32, {103, 8}, 5);
  snapshot s{7, {sharded("w", w, 2), sharded("b", b, 3), sharded("embedding", embedding, 4)}, {}};
  REQUIRE(d->save(s).ok());
  std::vector<std::string> warnings;
  auto r = d->open_latest(&warnings);
  REQUIRE(r.ok());
  CHECK(warnings.empty());
  for (const auto& [name, whole, shards] : {std::tuple{"w", w, 3}, std::tuple{"b", b, 1}, std::tuple{"embedding", embedding, 2}}) {
    INFO(name << " onto " << shards << " shards");
    const variable target = sharded(name, whole, shards);
    std::vector<slice_request> requests;
    for (const slice& piece : target.slices) {
      requests.push_back({name, whole.type(), whole.shape(), piece.start, piece.value.shape()});
    }
    auto restored = read_all(*r, requests);
    REQUIRE(restored.ok());
    for (std::size_t i = 0; i < requests.size(); ++i) CHECK((*restored)[i].equals(target.slices[i].value));
  }
}

TEST_CASE("bad requests name the variable and the file and return nothing", "[checkpoint]") {
  temp_dir dir;
  auto d = directory::open(dir.path);
  REQUIRE(d.ok());
  const tensor w = iota_tensor(dtype::float32, {4, 2}, 3);
  REQUIRE(d->save({1, {sharded("w", w, 1)}, {}}).ok());
  auto r = reader::open(dir.path + "/ckpt-1.h5");
  REQUIRE(r.ok());
  const slice_request good{"w", dtype::float32, {4, 2}, {0, 0}, {4, 2}};
  auto missing = read_all(*r, {good, {"v", dtype::float32, {4, 2}, {0, 0}, {4, 2}}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().error_code() == code::not_found);
  CHECK(missing.error().message().find("'v'") != std::string::npos);
  CHECK(missing.error().message().find("ckpt-1.h5") != std::string::npos);
  auto wrong_type = read_all(*r, {{"w", dtype::float64, {4, 2}, {0, 0}, {4, 2}}});
  REQUIRE_FALSE(wrong_type.ok());
  INFO(wrong_type.error().message());
  CHECK(wrong_type.error().message().find("double") != std::string::npos);
  auto wrong_shape = read_all(*r, {{"w", dtype::float32, {4, 3}, {0, 0}, {4, 3}}});
  REQUIRE_FALSE(wrong_shape.ok());
  CHECK(wrong_shape.error().message().find("[4,2]") != std::string::npos);
  auto outside = r->read("w", {3, 0}, {2, 2});
  REQUIRE_FALSE(outside.ok());
  CHECK(outside.error().message().find("outside") != std::string::npos);

  // Saving bad snapshots commits nothing.
  CHECK_FALSE(d->save({2, {{"gap", dtype::float32, {4}, {{{0}, iota_tensor(dtype::float32, {3}, 1)}}}}, {}}).ok());
  CHECK_FALSE(d->save({2, {{"x", dtype::float32, {4}, {{{0}, iota_tensor(dtype::float32, {4}, 1)},
                                                        {{2}, iota_tensor(dtype::float32, {2}, 1)}}}}, {}}).ok());
  CHECK_FALSE(d->save({2, {{"../up", dtype::float32, {}, {{{}, tensor::scalar<float>(1)}}}}, {}}).ok());
  // "a/b/c" extends both "a" and "a/b": it has no place (a/b/c alone with a would be a slot).
  auto nested = d->save({2, {sharded("a", w, 1), sharded("a/b", w, 1), sharded("a/b/c", w, 1)}, {}});
  REQUIRE_FALSE(nested.ok());
  CHECK(nested.error().message().find("'a/b/c' extends two saved variables, 'a' and 'a/b'") != std::string::npos);
  auto still = d->list();
  REQUIRE(still.ok());
  REQUIRE(still->size() == 1);
  CHECK(still->front().step == 1);

  // Files that are not checkpoints.
  write_file(dir.path + "/garbage.h5", "not an HDF5 file at all").ok();
  auto garbage = reader::open(dir.path + "/garbage.h5");
  REQUIRE_FALSE(garbage.ok());
  CHECK(garbage.error().error_code() == code::data_loss);
  CHECK(garbage.error().message().find("garbage.h5") != std::string::npos);
  auto absent = reader::open(dir.path + "/absent.h5");
  REQUIRE_FALSE(absent.ok());
  CHECK(absent.error().message().find("absent.h5") != std::string::npos);
}

TEST_CASE("one directory saves a large, then a small, then a large checkpoint; each reads back exactly", "[checkpoint]") {
  // The memory a checkpoint is built in is reused: nothing of an earlier one may leak in.
  temp_dir dir;
  auto d = directory::open(dir.path);
  const tensor large = iota_tensor(dtype::float32, {2000, 300}, 1);
  const tensor small = iota_tensor(dtype::int64, {10, 3}, 2);
  const tensor other = iota_tensor(dtype::float64, {700, 301}, 3);
  REQUIRE(d->save({1, {sharded("a", large, 3)}, {}}).ok());
  REQUIRE(d->save({2, {sharded("b", small, 2)}, {{"s", tensor::scalar<std::int64_t>(5)}}}).ok());
  REQUIRE(d->save({3, {sharded("c", other, 4)}, {}}).ok());
  for (const auto& [step, name, value] : {std::tuple{1, "a", large}, std::tuple{2, "b", small}, std::tuple{3, "c", other}}) {
    INFO("step " << step);
    auto r = reader::open(str_cat(dir.path, "/ckpt-", step, ".h5"));
    REQUIRE(r.ok());
    CHECK(r->verify().ok());
    CHECK(r->variables().size() == 1);
    CHECK(r->read(name)->equals(value));
  }
  CHECK(fs::file_size(dir.path + "/ckpt-2.h5") < 100000);  // the small one is small
}

TEST_CASE("keep: only the newest checkpoints stay, older ones go after a commit", "[checkpoint]") {
  temp_dir dir;
  auto d = directory::open(dir.path, {.keep = 3});
  REQUIRE(d.ok());
  for (int step = 100; step <= 500; step += 100) {
    REQUIRE(d->save({step, {sharded("w", iota_tensor(dtype::float32, {5}, step), 1)}, {}}).ok());
  }
  auto entries = d->list();
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 3);
  CHECK((*entries)[0].step == 500);
  CHECK((*entries)[2].step == 300);
  CHECK_FALSE(fs::exists(dir.path + "/ckpt-200.h5"));
  CHECK(fs::exists(dir.path + "/ckpt-300.h5"));
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path)) ++files;
  CHECK(files == 4);  // three checkpoints and the manifest
}

// A file system that fails its n-th operation. `crash`: every later operation fails too,
// as if the process died there (nothing is cleaned up).
class failing_file_system final : public file_system {
 public:
  failing_file_system(int fail_at, bool crash, code error) : fail_at_(fail_at), crash_(crash), error_(error) {}
  int operations() const { return count_; }

  result<std::unique_ptr<writable_file>> create(const std::string& path) override {
    TROUPE_RETURN_IF_ERROR(step("create", path));
    auto file = real().create(path);
    if (!file.ok()) return file.error();
    return std::unique_ptr<writable_file>(new failing_file(this, std::move(*file), path));
  }
  status rename(const std::string& from, const std::string& to) override {
    TROUPE_RETURN_IF_ERROR(step("rename", to));
    return real().rename(from, to);
  }
  status remove(const std::string& path) override {
    TROUPE_RETURN_IF_ERROR(step("remove", path));
    return real().remove(path);
  }
  status sync_dir(const std::string& dir) override {
    TROUPE_RETURN_IF_ERROR(step("sync_dir", dir));
    return real().sync_dir(dir);
  }
  status create_dir(const std::string& dir) override { return real().create_dir(dir); }
  result<std::vector<std::string>> list_dir(const std::string& dir) override { return real().list_dir(dir); }
  result<std::int64_t> file_size(const std::string& path) override { return real().file_size(path); }

 private:
  class failing_file final : public writable_file {
   public:
    failing_file(failing_file_system* fs, std::unique_ptr<writable_file> file, std::string path)
        : fs_(fs), file_(std::move(file)), path_(std::move(path)) {}
    status append(std::string_view bytes) override {
      // A failed append writes half of what it was given, as a full disk does.
      status s = fs_->step("append", path_);
      if (!s.ok()) {
        (void)file_->append(bytes.substr(0, bytes.size() / 2));
        return s;
      }
      return file_->append(bytes);
    }
    status write_at(std::int64_t offset, std::string_view bytes) override {
      status s = fs_->step("write_at", path_);
      if (!s.ok()) {
        (void)file_->write_at(offset, bytes.substr(0, bytes.size() / 2));
        return s;
      }
      return file_->write_at(offset, bytes);
    }
    status sync() override {
      TROUPE_RETURN_IF_ERROR(fs_->step("sync", path_));
      return file_->sync();
    }
    status close() override {
      TROUPE_RETURN_IF_ERROR(fs_->step("close", path_));
      return file_->close();
    }

   private:
    failing_file_system* fs_;
    std::unique_ptr<writable_file> file_;
    std::string path_;
  };

  status step(const char* what, const std::string& path) {
    const int n = count_++;
    if (n == fail_at_ || (crash_ && n > fail_at_)) {
      return status(error_, str_cat("injected failure of ", what, " '", path, "'"));
    }
    return status();
  }

  int fail_at_;
  bool crash_;
  code error_;
  int count_ = 0;
};

TEST_CASE("a save that fails at any file operation leaves the committed checkpoints intact", "[checkpoint]") {
  const tensor old_value = iota_tensor(dtype::float32, {64, 16}, 1);
  const tensor new_value = iota_tensor(dtype::float32, {64, 16}, 2);
  // How many operations a save takes.
  int operations = 0;
  {
    temp_dir dir;
    failing_file_system counting(1 << 30, false, code::data_loss);
    auto d = directory::open(dir.path, {}, counting);
    REQUIRE(d->save({1, {sharded("w", old_value, 2)}, {}}).ok());
    const int before = counting.operations();
    REQUIRE(d->save({2, {sharded("w", new_value, 2)}, {}}).ok());
    operations = counting.operations() - before;
  }
  REQUIRE(operations >= 7);
  for (const bool crash : {false, true}) {
    for (const code error : {code::resource_exhausted, code::data_loss}) {
      for (int at = 0; at < operations; ++at) {
        INFO("failing operation " << at << (crash ? " (crash)" : "") << " with " << code_name(error));
        temp_dir dir;
        {
          auto d = directory::open(dir.path);
          REQUIRE(d->save({1, {sharded("w", old_value, 2)}, {}}).ok());
        }
        failing_file_system failing(at, crash, error);
        auto d = directory::open(dir.path, {}, failing);
        auto saved = d->save({2, {sharded("w", new_value, 2)}, {}});
        // After the process "restarts": the newest committed checkpoint is the old one or,
        // when the failure came after the commit point, the new one; either reads back whole.
        auto again = directory::open(dir.path);
        std::vector<std::string> warnings;
        auto latest = again->open_latest(&warnings);
        REQUIRE(latest.ok());
        CHECK(warnings.empty());
        if (!saved.ok()) {
          CHECK(saved.error().message().find("injected") != std::string::npos);
          if (latest->global_step() == 1) CHECK(latest->read("w")->equals(old_value));
        }
        if (latest->global_step() == 2) {
          CHECK(latest->read("w")->equals(new_value));
        } else {
          CHECK(latest->global_step() == 1);
          CHECK(latest->read("w")->equals(old_value));
        }
        if (saved.ok()) CHECK(latest->global_step() == 2);
        // And the next save cleans up what the failure left.
        REQUIRE(again->save({3, {sharded("w", new_value, 1)}, {}}).ok());
        for (const auto& entry : fs::directory_iterator(dir.path)) {
          const std::string name = entry.path().filename().string();
          CHECK(name.find(".tmp-") == std::string::npos);
        }
      }
    }
  }
}

TEST_CASE("a save whose writes fail (file size limit: EFBIG) commits nothing and leaves nothing", "[checkpoint]") {
  temp_dir dir;
  auto d = directory::open(dir.path);
  const tensor small = iota_tensor(dtype::float32, {16}, 1);
  REQUIRE(d->save({1, {sharded("w", small, 1)}, {}}).ok());
  // Writes past 256 KB fail with EFBIG (SIGXFSZ ignored), as a full disk fails them; the
  // process must go on (HDF5 1.10 itself crashes at exit after a failed write of its own,
  // which is why it never writes files here).
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old_limit{};
  getrlimit(RLIMIT_FSIZE, &old_limit);
  rlimit limit = old_limit;
  limit.rlim_cur = 256 << 10;
  setrlimit(RLIMIT_FSIZE, &limit);
  auto saved = d->save({2, {sharded("w", iota_tensor(dtype::float32, {1 << 20}, 2), 2)}, {}});
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, SIG_DFL);
  REQUIRE_FALSE(saved.ok());
  CHECK(saved.error().message().find(dir.path) != std::string::npos);
  std::vector<std::string> warnings;
  auto latest = d->open_latest(&warnings);
  REQUIRE(latest.ok());
  CHECK(latest->global_step() == 1);
  CHECK(latest->read("w")->equals(small));
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    CHECK(entry.path().filename().string().find(".tmp-") == std::string::npos);
  }
}

enum class damage_kind { flip_data, truncate, flip_metadata };

void damage(const std::string& path, damage_kind kind) {
  const auto size = fs::file_size(path);
  if (kind == damage_kind::truncate) {
    fs::resize_file(path, size / 2);
    return;
  }
  // Flip bytes in the middle of the file (inside a chunk of data), or in its first 64
  // bytes (HDF5's superblock).
  const std::uintmax_t from = kind == damage_kind::flip_data ? size / 2 : 0;
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  for (std::uintmax_t at = from; at < from + 64; ++at) {
    file.seekg(static_cast<std::streamoff>(at));
    const int c = file.get();
    file.seekp(static_cast<std::streamoff>(at));
    file.put(static_cast<char>(c ^ 0x5a));
  }
}

TEST_CASE("a damaged or truncated latest checkpoint falls back to the previous one with a warning", "[checkpoint]") {
  for (const damage_kind kind : {damage_kind::flip_data, damage_kind::truncate, damage_kind::flip_metadata}) {
    INFO("damage " << static_cast<int>(kind));
    temp_dir dir;
    auto d = directory::open(dir.path);
    const tensor first = iota_tensor(dtype::float32, {512, 64}, 1);
    const tensor second = iota_tensor(dtype::float32, {512, 64}, 2);
    REQUIRE(d->save({10, {sharded("w", first, 1)}, {}}).ok());
    REQUIRE(d->save({20, {sharded("w", second, 1)}, {}}).ok());
    damage(dir.path + "/ckpt-20.h5", kind);
    std::vector<std::string> warnings;
    auto latest = d->open_latest(&warnings);
    REQUIRE(latest.ok());
    CHECK(latest->global_step() == 10);
    CHECK(latest->read("w")->equals(first));
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("ckpt-20.h5") != std::string::npos);
    // Reading the damaged one directly is an error naming it, never wrong values or a
    // crash (the file's own checksums, without the manifest's).
    auto direct = reader::open(dir.path + "/ckpt-20.h5");
    auto value = direct.ok() ? direct->read("w") : result<tensor>(direct.error());
    REQUIRE_FALSE(value.ok());
    CHECK(value.error().error_code() == code::data_loss);
    CHECK(value.error().message().find("ckpt-20.h5") != std::string::npos);
    if (kind == damage_kind::flip_data) {
      // Found by troupe's chunk reader, which checks HDF5's checksum itself.
      CHECK(value.error().message().find("Fletcher32 checksum does not match") != std::string::npos);
    }
    damage(dir.path + "/ckpt-10.h5", kind);
    warnings.clear();
    auto none = d->open_latest(&warnings);
    REQUIRE_FALSE(none.ok());
    CHECK(none.error().error_code() == code::data_loss);
    CHECK(warnings.size() == 2);
  }
}

TEST_CASE("a byte flipped anywhere in a checkpoint is an error or harmless, never wrong values or a crash",
          "[checkpoint]") {
  // The file's own checksums alone, as restores rely on them while the whole-file CRC-32C
  // is still being checked: HDF5's over its metadata (the 1.10 format), Fletcher32 over
  // chunks, CRC-32C over scalars. Mostly metadata: several small variables and a state
  // scalar.
  temp_dir dir;
  auto d = directory::open(dir.path);
  const tensor a = iota_tensor(dtype::float32, {40, 3}, 1);
  const tensor b = iota_tensor(dtype::int64, {7}, 2);
  const tensor c = tensor::scalar<double>(2.5);
  REQUIRE(d->save({5, {sharded("a", a, 2), sharded("b", b, 1), {"c", dtype::float64, {}, {{{}, c}}}},
                   {{"position", tensor::scalar<std::int64_t>(42)}}}).ok());
  const std::string path = dir.path + "/ckpt-5.h5";
  std::ifstream in(path, std::ios::binary);
  const std::string original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(original.size() > 1000);
  const std::string copy = dir.path + "/flipped.h5";
  int errors = 0, harmless = 0;
  for (std::size_t at = 0; at < original.size(); at += 3) {
    std::string bytes = original;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
    REQUIRE(write_file(copy, bytes).ok());
    auto r = reader::open(copy);
    status outcome = r.ok() ? r->verify() : r.error();
    if (outcome.ok()) {
      auto got_a = r->read("a");
      auto got_b = r->read("b");
      auto got_c = r->read("c");
      auto got_position = r->state("position");
      outcome = !got_a.ok() ? got_a.error() : !got_b.ok() ? got_b.error() : !got_c.ok() ? got_c.error()
                                                                          : !got_position.ok() ? got_position.error()
                                                                                               : status();
      if (outcome.ok()) {
        INFO("byte " << at << " of " << original.size());
        CHECK(got_a->equals(a));
        CHECK(got_b->equals(b));
        CHECK(got_c->equals(c));
        CHECK(got_position->scalar_value<std::int64_t>() == 42);
        CHECK(r->global_step() == 5);
        ++harmless;
        continue;
      }
    }
    INFO("byte " << at << ": " << outcome.message());
    CHECK(outcome.error_code() == code::data_loss);
    ++errors;
  }
  CHECK(errors > 0);
}

TEST_CASE("restore_latest reads once, falls back past damage, and stops at a mismatch", "[checkpoint]") {
  temp_dir dir;
  auto d = directory::open(dir.path);
  const tensor first = iota_tensor(dtype::float32, {300, 40}, 1);
  const tensor second = iota_tensor(dtype::float32, {300, 40}, 2);
  REQUIRE(d->save({10, {sharded("w", first, 2)}, {{"position", tensor::scalar<std::int64_t>(10)}}}).ok());
  REQUIRE(d->save({20, {sharded("w", second, 3)}, {{"position", tensor::scalar<std::int64_t>(20)}}}).ok());
  const restore_request request{{{"w", dtype::float32, {300, 40}, {0, 0}, {150, 40}},
                                 {"w", dtype::float32, {300, 40}, {150, 0}, {150, 40}}},
                                {"position"}};
  std::vector<std::string> warnings;
  auto newest = d->restore_latest(request, &warnings);
  REQUIRE(newest.ok());
  CHECK(newest->global_step == 20);
  CHECK(newest->variables[1].equals(box_of(second, {150, 0}, {150, 40})));
  CHECK(newest->state[0].scalar_value<std::int64_t>() == 20);
  CHECK(warnings.empty());
  damage(dir.path + "/ckpt-20.h5", damage_kind::flip_data);
  auto older = d->restore_latest(request, &warnings);
  REQUIRE(older.ok());
  CHECK(older->global_step == 10);
  CHECK(older->variables[0].equals(box_of(first, {0, 0}, {150, 40})));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("ckpt-20.h5") != std::string::npos);
  // A variable the checkpoints do not have is the caller's mistake, not damage: no fallback.
  warnings.clear();
  auto mismatch = d->restore_latest({{{"w", dtype::float32, {301, 40}, {0, 0}, {1, 40}}}, {}}, &warnings);
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.error().error_code() == code::invalid_argument);
  CHECK(mismatch.error().message().find("'w'") != std::string::npos);
}

// Flips one byte of the first occurrence of `text` in the file; false when absent.
bool flip_text(const std::string& path, const std::string& text) {
  auto bytes = read_file(path);
  if (!bytes.ok()) return false;
  const std::size_t at = bytes->find(text);
  if (at == std::string::npos) return false;
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(at + 1));
  file.put(static_cast<char>((*bytes)[at + 1] ^ 0x20));
  return static_cast<bool>(file);
}

TEST_CASE("a large restore reads on several threads, checks the whole file once, and falls back past damage",
          "[checkpoint]") {
  // 2 x 48 MB: enough for every reading thread. Boxes cut across chunks (rows at 2000 and
  // 4000, chunks of 512 rows) and along columns, so that chunks go both straight into the
  // output and through a buffer.
  temp_dir dir;
  auto d = directory::open(dir.path);
  const tensor a = iota_tensor(dtype::float32, {6000, 2048}, 3);
  const tensor b = iota_tensor(dtype::float32, {6000, 2048}, 4);
  REQUIRE(d->save({1, {sharded("a", a, 2), sharded("b", b, 1)}, {}}).ok());
  REQUIRE(d->save({2, {sharded("a", b, 3), sharded("b", a, 2)}, {}}).ok());
  const restore_request request{{{"a", dtype::float32, {6000, 2048}, {0, 0}, {2000, 2048}},
                                 {"a", dtype::float32, {6000, 2048}, {2000, 0}, {4000, 2048}},
                                 {"b", dtype::float32, {6000, 2048}, {0, 1000}, {6000, 1048}},
                                 {"b", dtype::float32, {6000, 2048}, {0, 0}, {6000, 1000}}},
                                {}};
  std::vector<std::string> warnings;
  auto newest = d->restore_latest(request, &warnings);
  REQUIRE(newest.ok());
  CHECK(warnings.empty());
  CHECK(newest->global_step == 2);
  CHECK(newest->variables[0].equals(box_of(b, {0, 0}, {2000, 2048})));
  CHECK(newest->variables[1].equals(box_of(b, {2000, 0}, {4000, 2048})));
  CHECK(newest->variables[2].equals(box_of(a, {0, 1000}, {6000, 1048})));
  CHECK(newest->variables[3].equals(box_of(a, {0, 0}, {6000, 1000})));
  newest = restored();
  // Damage no checksum of HDF5's covers (the text attribute kept for people): only the
  // whole-file CRC-32C, put together from the chunks' and the rest's, finds it.
  const std::string path = dir.path + "/ckpt-2.h5";
  REQUIRE(flip_text(path, "troupe-checkpoint"));
  auto older = d->restore_latest(request, &warnings);
  REQUIRE(older.ok());
  CHECK(older->global_step == 1);
  CHECK(older->variables[2].equals(box_of(b, {0, 1000}, {6000, 1048})));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("ckpt-2.h5") != std::string::npos);
  CHECK(warnings[0].find("CRC-32C") != std::string::npos);
  // A chunk damaged in the last quarter of the file (the second reading thread's part).
  warnings.clear();
  older = restored();
  const std::string first_path = dir.path + "/ckpt-1.h5";
  {
    const auto size = fs::file_size(first_path);
    std::fstream file(first_path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(size * 3 / 4));
    const int c = file.get();
    file.seekp(static_cast<std::streamoff>(size * 3 / 4));
    file.put(static_cast<char>(c ^ 1));
  }
  auto none = d->restore_latest(request, &warnings);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().error_code() == code::data_loss);
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[1].find("ckpt-1.h5") != std::string::npos);
  CHECK(warnings[1].find("Fletcher32") != std::string::npos);
}

TEST_CASE("a damaged manifest is an error naming it; an empty directory has no checkpoint", "[checkpoint]") {
  temp_dir dir;
  auto d = directory::open(dir.path);
  std::vector<std::string> warnings;
  auto none = d->open_latest(&warnings);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().error_code() == code::not_found);
  REQUIRE(write_file(dir.path + "/manifest.json", "{ \"checkpoints\": [ {").ok());
  auto listed = d->list();
  REQUIRE_FALSE(listed.ok());
  CHECK(listed.error().message().find("manifest.json") != std::string::npos);

  // A manifest naming a file that is not its entry's step's data file in the directory:
  // refused, before a save could delete it as a checkpoint beyond `keep` (the manifest
  // itself, with every checkpoint it names after it).
  for (const auto& [step, file] : std::vector<std::pair<std::string, std::string>>{
           {"1", "manifest.json"}, {"1", ".."}, {"7", "ckpt-3.h5"}, {"-5", "ckpt--5.h5"}, {"2", "../ckpt-2.h5"}}) {
    const std::string manifest = "{\"format\": \"troupe-checkpoints\", \"version\": 1, \"checkpoints\": [{\"step\": \"" +
                                 step + "\", \"file\": \"" + file + "\", \"bytes\": \"10\"}]}";
    REQUIRE(write_file(dir.path + "/manifest.json", manifest).ok());
    auto odd = d->list();
    INFO(manifest);
    REQUIRE_FALSE(odd.ok());
    CHECK(odd.error().error_code() == code::data_loss);
    CHECK_THAT(odd.error().message(), Catch::Contains("manifest.json") && Catch::Contains("'" + file + "'"));
    snapshot s;
    s.global_step = 3;
    s.state.emplace_back("w", tensor::from_vector<float>({1, 2}));
    auto saved = d->save(s);
    REQUIRE_FALSE(saved.ok());
    CHECK(saved.error().error_code() == code::data_loss);
    CHECK(std::filesystem::exists(dir.path + "/manifest.json"));
  }
}

}  // namespace
}  // namespace troupe::checkpoint
