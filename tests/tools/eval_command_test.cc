// `troupe eval` end to end: a GraphDef file and .npy feeds in, .npy fetches out, and
// each error path exits non-zero naming the culprit.
#include <catch2/catch.hpp>

#include <filesystem>

#include "core/file.h"
#include "core/npy.h"
#include "graph/graph_io.h"
#include "graph/ops.h"
#include "tests/tools/command_run.h"
#include "tools/commands.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

troupe::testing::command_run eval(const std::vector<std::string>& args) {
  return troupe::testing::run_command(tools::eval_command, args);
}

fs::path temp_dir() {
  auto dir = fs::temp_directory_path() / ("troupe-eval-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("fetch file names replace unsafe characters", "[tools]") {
  CHECK(tools::fetch_file_name("prob:0") == "prob_0.npy");
  CHECK(tools::fetch_file_name("hidden") == "hidden.npy");
  CHECK(tools::fetch_file_name("layer1/MatMul:1") == "layer1_MatMul_1.npy");
  CHECK(tools::fetch_file_name("a.b-c_d") == "a.b-c_d.npy");
}

TEST_CASE("troupe eval runs a text and a binary GraphDef", "[tools]") {
  auto dir = temp_dir();
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 2});
  auto w = ops::constant(root.with_name("w"), tensor::from_vector<float>({1, 0, 0, 2}, {2, 2}));
  auto y = ops::matmul(root.with_name("y"), x, w);
  ops::softmax(root.with_name("prob"), y);
  ops::argmax(root.with_name("best"), y, ops::scalar<std::int32_t>(root, 1));
  auto def = root.to_graph_def();
  REQUIRE(def.ok());
  REQUIRE(graph::write_graph_def((dir / "g.pbtxt").string(), *def).ok());
  REQUIRE(graph::write_graph_def((dir / "g.pb").string(), *def).ok());
  REQUIRE(write_npy((dir / "x.npy").string(), tensor::from_vector<float>({1, 1, 3, 1}, {2, 2})).ok());

  for (const char* file : {"g.pbtxt", "g.pb"}) {
    auto out_dir = dir / (std::string("out-") + file);
    auto r = eval({"--graph", (dir / file).string(), "--feed", "x=" + (dir / "x.npy").string(),
                   "--fetch", "y:0", "--fetch", "best", "--out", out_dir.string()});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("y:0: float [2,2]") && Catch::Contains("best: int64 [2]"));
    auto y_value = read_npy((out_dir / "y_0.npy").string());
    REQUIRE(y_value.ok());
    CHECK(y_value->equals(tensor::from_vector<float>({1, 2, 3, 2}, {2, 2})));
    auto best = read_npy((out_dir / "best.npy").string());
    REQUIRE(best.ok());
    CHECK(best->equals(tensor::from_vector<std::int64_t>({1, 0}, {2})));
  }

  SECTION("missing feed") {
    auto r = eval({"--graph", (dir / "g.pb").string(), "--fetch", "y", "--out", dir.string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("placeholder 'x' must be fed"));
  }
  SECTION("feed of the wrong dtype") {
    REQUIRE(write_npy((dir / "xi.npy").string(), tensor::zeros(dtype::int32, {1, 2})).ok());
    auto r = eval({"--graph", (dir / "g.pb").string(), "--feed", "x=" + (dir / "xi.npy").string(),
                   "--fetch", "y", "--out", dir.string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("feed 'x' is int32"));
  }
  SECTION("feed of the wrong shape") {
    REQUIRE(write_npy((dir / "x3.npy").string(), tensor::zeros(dtype::float32, {1, 3})).ok());
    auto r = eval({"--graph", (dir / "g.pb").string(), "--feed", "x=" + (dir / "x3.npy").string(),
                   "--fetch", "y", "--out", dir.string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("feed 'x' has shape [1,3]"));
  }
  SECTION("unknown op") {
    REQUIRE(write_file((dir / "bad_op.pbtxt").string(), R"(node { name: "n" op: "Frobnicate" })").ok());
    auto r = eval({"--graph", (dir / "bad_op.pbtxt").string(), "--fetch", "n", "--out", dir.string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("node 'n'") && Catch::Contains("unknown op 'Frobnicate'"));
  }
  SECTION("malformed text names the line") {
    REQUIRE(write_file((dir / "broken.pbtxt").string(), "node {\n  name: \"a\"\n  op: \n").ok());
    auto r = eval({"--graph", (dir / "broken.pbtxt").string(), "--fetch", "a", "--out", dir.string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("broken.pbtxt:"));
  }
  SECTION("bad graph") {
    REQUIRE(write_file((dir / "dangling.pbtxt").string(),
                       R"(node { name: "r" op: "Relu" input: "ghost" attr { key: "T" value { type: DT_FLOAT } } })").ok());
    auto r = eval({"--graph", (dir / "dangling.pbtxt").string(), "--fetch", "r", "--out", dir.string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("no node named 'ghost'"));
  }
  SECTION("files not found") {
    auto r = eval({"--graph", (dir / "missing.pb").string(), "--fetch", "y", "--out", dir.string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("missing.pb"));
    auto f = eval({"--graph", (dir / "g.pb").string(), "--feed", "x=" + (dir / "nofeed.npy").string(),
                   "--fetch", "y", "--out", dir.string()});
    CHECK(f.code != 0);
    CHECK_THAT(f.err, Catch::Contains("nofeed.npy"));
  }
  SECTION("unknown fetch and bad usage") {
    auto r = eval({"--graph", (dir / "g.pb").string(), "--fetch", "nothing", "--out", dir.string()});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("no node named 'nothing'"));
    CHECK(eval({"--graph"}).code == 2);
    CHECK(eval({"--bogus", "1"}).code == 2);
    CHECK(eval({"--graph", "g.pb", "--feed", "novalue", "--fetch", "y", "--out", "o"}).code == 2);
  }
  fs::remove_all(dir);
}
