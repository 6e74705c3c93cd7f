// `troupe checkpoint ls` and `inspect` on a directory with two committed checkpoints, and
// their errors.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "tests/tools/command_run.h"
#include "tools/commands.h"

using namespace troupe;

namespace {

troupe::testing::command_run run_checkpoint(const std::vector<std::string>& args) {
  return troupe::testing::run_command(tools::checkpoint_command, args);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("troupe checkpoint ls and inspect", "[tools]") {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("troupe_ckpt_cmd_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  auto d = checkpoint::directory::open(dir);
  REQUIRE(d.ok());
  const tensor w = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  for (int step : {10, 20}) {
    checkpoint::snapshot s{step, {{"dense/kernel", dtype::float32, {3, 2},
                                   {{{0, 0}, tensor::from_vector<float>({1, 2}, {1, 2})},
                                    {{1, 0}, tensor::from_vector<float>({3, 4, 5, 6}, {2, 2})}}}},
                           {{"input/position", tensor::scalar<std::int64_t>(step * 32)}}};
    REQUIRE(d->save(s).ok());
  }
  auto ls = run_checkpoint({"ls", dir});
  CHECK(ls.code == 0);
  CHECK(contains(ls.out, "ckpt-20.h5"));
  CHECK(contains(ls.out, "ckpt-10.h5"));
  CHECK(ls.out.find("ckpt-20.h5") < ls.out.find("ckpt-10.h5"));  // newest first

  auto inspect = run_checkpoint({"inspect", dir + "/ckpt-10.h5"});
  CHECK(inspect.code == 0);
  CHECK(contains(inspect.out, "global step 10"));
  CHECK(contains(inspect.out, "dense/kernel"));
  CHECK(contains(inspect.out, "[3,2]"));
  CHECK(contains(inspect.out, "2 slice(s) [0,0]+[1,2] [1,0]+[2,2]"));
  CHECK(contains(inspect.out, "input/position"));

  auto latest = run_checkpoint({"inspect", dir, "--variable", "dense/kernel"});
  CHECK(latest.code == 0);
  CHECK(contains(latest.out, "global step 20"));
  CHECK(contains(latest.out, "float"));

  auto missing = run_checkpoint({"inspect", dir, "--variable", "nope"});
  CHECK(missing.code == 1);
  CHECK(contains(missing.err, "'nope'"));
  auto bad_file = run_checkpoint({"inspect", dir + "/manifest.json"});
  CHECK(bad_file.code == 1);
  CHECK(contains(bad_file.err, "manifest.json"));
  std::filesystem::create_directories(dir + "/fresh");
  auto empty = run_checkpoint({"ls", dir + "/fresh"});
  CHECK(empty.code == 0);
  CHECK(contains(empty.out, "no committed checkpoint"));
  auto absent = run_checkpoint({"ls", dir + "/absent"});
  CHECK(absent.code == 1);
  CHECK(contains(absent.err, "absent"));
  CHECK_FALSE(std::filesystem::exists(dir + "/absent"));  // ls creates nothing
  CHECK(run_checkpoint({}).code == 2);
  CHECK(run_checkpoint({"inspect", dir, "--bogus"}).code == 2);
  std::filesystem::remove_all(dir);
}
