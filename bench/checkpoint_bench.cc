// Checkpoint save and restore against the machine's own sequential file bandwidth,
// measured in the same run on the same directory (issue 14's target: >= 80%).
//
//   build/bench/bench_checkpoint --megabytes=1024 [--dir=/tmp] [--shards=2] [--rounds=3]
//
// The model is float32 variables of 64 MB (the last smaller), each saved as `--shards`
// slices along its first dimension as PS shards hold them. Baselines: one file of the
// same size written with write_durably (write, fdatasync, rename, directory fsync) and read
// back whole with read(2). Save is directory::save (HDF5 builds the file in memory while
// its chunks go to the file; then the rest, fsync, rename, commit) of a later checkpoint
// of the model (first_save_s: its first, which also pays for fresh memory to build the
// file in); restore is restore_latest of every variable onto the same sharding (every
// checksum checked, the whole file's CRC too; first_restore_s: the first round's, which
// also pays the first touch of the memory restored into); restore_verify_s is open_latest alone
// (verifies the whole file, as `inspect DIR` does). Before each read the file's pages are
// dropped from the page cache (posix_fadvise), so reads come from the disk as a restarted
// task's would. The disk's speed drifts, so `--rounds` rounds each measure everything
// once, side by side, and each figure is the median of its rounds. Prints one JSON
// object: seconds and MB/s of each, save/write and restore/read ratios.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/file.h"

namespace troupe::bench {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string list(const std::vector<double>& v) {
  std::string out;
  for (double x : v) out += (out.empty() ? "" : " ") + std::to_string(x).substr(0, 5);
  return "[" + out + "]";
}

void drop_cached(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

int run(std::int64_t megabytes, const std::string& parent, int shards, int rounds) {
  const std::string dir = parent + "/troupe_bench_checkpoint_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::int64_t bytes = megabytes << 20;
  const std::int64_t columns = 1024;
  checkpoint::snapshot model;
  model.global_step = 1;
  std::vector<checkpoint::slice_request> requests;
  for (std::int64_t done = 0, index = 0; done < bytes; ++index) {
    const std::int64_t rows = std::min<std::int64_t>(64 << 20, bytes - done) / (columns * 4);
    if (rows <= 0) break;
    checkpoint::variable v{"layer" + std::to_string(index) + "/kernel", dtype::float32, {rows, columns}, {}};
    for (int s = 0, begin = 0; s < shards; ++s) {
      const int count = static_cast<int>(rows / shards + (s < rows % shards ? 1 : 0));
      tensor piece(dtype::float32, {count, columns});
      auto values = piece.flat<float>();
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f;
      v.slices.push_back({{begin, 0}, piece});
      requests.push_back({v.name, dtype::float32, v.shape, {begin, 0}, {count, columns}});
      begin += count;
    }
    done += rows * columns * 4;
    model.variables.push_back(std::move(v));
  }
  auto d = checkpoint::directory::open(dir);
  if (!d.ok()) return std::cerr << d.error() << "\n", 1;

  // The first save builds the file in fresh memory; later ones reuse it (steady state).
  auto t0 = clock_type::now();
  auto first_saved = d->save(model);
  if (!first_saved.ok()) return std::cerr << first_saved.error() << "\n", 1;
  const double first_save = seconds_since(t0);
  std::int64_t file_bytes = first_saved->bytes;

  // Rounds of: baseline write and read, save, restore, verify. Each read follows its own
  // write (a virtual disk's host may cache what was written last: both reads find the
  // same). The disk's speed drifts over seconds, so each figure is its median over the
  // rounds, and each ratio is of medians taken side by side.
  const std::string raw_path = dir + "/raw.bin";
  std::vector<double> raw_write, save, raw_read, restore, verify;
  for (int round = 0; round < rounds; ++round) {
    {
      // Baseline: the same number of bytes as one durable file.
      std::string raw(static_cast<std::size_t>(bytes), '\x5a');
      t0 = clock_type::now();
      if (auto s = write_durably(file_system::real(), raw_path, raw); !s.ok()) return std::cerr << s << "\n", 1;
      raw_write.push_back(seconds_since(t0));
    }
    drop_cached(raw_path);
    {
      // Plain read(2) into one buffer: the fastest a reader of the whole file can be.
      std::string back(static_cast<std::size_t>(bytes), '\0');
      t0 = clock_type::now();
      const int fd = ::open(raw_path.c_str(), O_RDONLY);
      std::size_t got = 0;
      while (fd >= 0 && got < back.size()) {
        const ssize_t n = ::read(fd, back.data() + got, back.size() - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      if (fd >= 0) ::close(fd);
      if (got != back.size()) return std::cerr << "reading " << raw_path << " came short\n", 1;
      raw_read.push_back(seconds_since(t0));
    }
    std::filesystem::remove(raw_path);
    model.global_step = 2 + round;
    t0 = clock_type::now();
    auto saved = d->save(model);
    if (!saved.ok()) return std::cerr << saved.error() << "\n", 1;
    save.push_back(seconds_since(t0));
    file_bytes = saved->bytes;
    drop_cached(saved->path);
    std::vector<std::string> warnings;
    t0 = clock_type::now();
    auto restored = d->restore_latest({requests, {}}, &warnings);
    if (!restored.ok()) return std::cerr << restored.error() << "\n", 1;
    restore.push_back(seconds_since(t0));
    restored = checkpoint::restored();
    drop_cached(saved->path);
    t0 = clock_type::now();
    auto latest = d->open_latest(&warnings);
    if (!latest.ok()) return std::cerr << latest.error() << "\n", 1;
    verify.push_back(seconds_since(t0));
  }
  std::filesystem::remove_all(dir);

  const double mb = static_cast<double>(bytes) / (1 << 20);
  std::printf(
      "{\"megabytes\": %lld, \"shards\": %d, \"file_bytes\": %lld, \"raw_write_s\": %.3f, \"raw_write_mb_s\": %.0f, "
      "\"first_save_s\": %.3f, \"save_s\": %.3f, \"save_mb_s\": %.0f, \"save_over_raw_write\": %.2f, \"raw_read_s\": %.3f, "
      "\"raw_read_mb_s\": %.0f, \"first_restore_s\": %.3f, \"restore_s\": %.3f, \"restore_verify_s\": %.3f, \"restore_mb_s\": %.0f, "
      "\"restore_over_raw_read\": %.2f, \"rounds\": %d}\n",
      static_cast<long long>(megabytes), shards, static_cast<long long>(file_bytes), median(raw_write), mb / median(raw_write),
      first_save, median(save), mb / median(save), median(raw_write) / median(save), median(raw_read),
      mb / median(raw_read), restore.front(), median(restore), median(verify), mb / median(restore), median(raw_read) / median(restore),
      rounds);
  std::fprintf(stderr, "rounds (s): raw_write %s save %s raw_read %s restore %s verify %s\n", list(raw_write).c_str(),
               list(save).c_str(), list(raw_read).c_str(), list(restore).c_str(), list(verify).c_str());
  return 0;
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) {
  long long megabytes = 1024;
  int shards = 2;
  int rounds = 3;
  std::string dir = std::filesystem::temp_directory_path().string();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--megabytes=", 0) == 0) {
      megabytes = std::atoll(arg.c_str() + 12);
    } else if (arg.rfind("--dir=", 0) == 0) {
      dir = arg.substr(6);
    } else if (arg.rfind("--shards=", 0) == 0) {
      shards = std::atoi(arg.c_str() + 9);
    } else if (arg.rfind("--rounds=", 0) == 0) {
      rounds = std::atoi(arg.c_str() + 9);
    } else {
      std::fprintf(stderr, "usage: bench_checkpoint [--megabytes=1024] [--dir=DIR] [--shards=2] [--rounds=3]  (unknown '%s')\n",
                   arg.c_str());
      return 2;
    }
  }
  if (megabytes < 1 || shards < 1 || rounds < 1) {
    std::fprintf(stderr, "bench_checkpoint: --megabytes, --shards and --rounds must be at least 1\n");
    return 2;
  }
  return troupe::bench::run(megabytes, dir, shards, rounds);
}
