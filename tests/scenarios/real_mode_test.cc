// Issue 16: scenarios in mode REAL, every task in a `troupe server` process of its own that
// the runner starts, supervises and stops: training as in-process (bit for bit under
// SYNC), process deaths and a frozen process recovered, no process left behind, and the
// bad inputs refused with errors that say what and where.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "checkpoint/checkpoint.h"
#include "cluster/task_processes.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"
#include "tests/cluster/cluster_fixture.h"

using namespace troupe;

namespace {

// The processes whose parent is this one (servers left behind would be).
int children() {
  int n = 0;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return -1;
  while (dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    int parent = 0;
    rest >> state >> parent;
    if (parent == ::getpid()) ++n;
  }
  ::closedir(proc);
  return n;
}

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

result<scenarios::run_summary> run(const std::string& text, std::string* output = nullptr,
                                   const std::string& program = TROUPE_PROGRAM, const std::string& trace_file = "") {
  auto sc = scenarios::parse_scenario(text, "real.pbtxt");
  if (!sc.ok()) return sc.error();
  std::ostringstream out;
  scenarios::run_options o;
  o.out = &out;
  o.compute_threads = 2;
  o.server_program = program;
  o.trace_file = trace_file;
  auto summary = scenarios::run_scenario(*sc, o);
  if (output != nullptr) *output = out.str();
  return summary;
}

std::string mlp(const std::string& cluster, const std::string& training, const std::string& rest = "") {
  return "cluster { " + cluster + " }\nmodel { name: \"mlp\" hidden_units: [32] }\ntraining { optimizer { name: "
         "\"adam\" } batch_size: 32 " + training + " }\nreport { progress: OFF }\n" + rest;
}

const char* k_three = R"(job { name: "ps" tasks: 1 } job { name: "worker" tasks: 2 })";

}  // namespace

TEST_CASE("mode REAL: three server processes train as the in-process cluster does, bit for bit under SYNC, and "
          "none is left behind",
          "[real]") {
  const std::string real_dir = temp_dir("troupe-real-sync"), local_dir = temp_dir("troupe-local-sync");
  const std::string training = "steps: 160 replication: SYNC seed: 7";
  // A shuffling queue draws from what its reader has put in so far, which depends on
  // timing (in one process too): a FIFO pipeline makes the runs comparable bit for bit.
  const std::string fifo = "dataset { shuffle: false }\n";
  // And MatMul picks its library by timing it once per process: each server would choose
  // for itself. The servers inherit the environment.
  ::setenv("TROUPE_GEMM", "openblas", 1);
  std::string output;
  auto real = run(mlp(std::string("mode: REAL ") + k_three, training,
                      fifo + "checkpoint { dir: \"" + real_dir + "\" every_steps: 1000 restore: NONE }"),
                  &output);
  INFO(output);
  REQUIRE(real.ok());
  CHECK(output.find("cluster: REAL, 3 server processes") != std::string::npos);
  CHECK(children() == 0);
  auto local = run(mlp(k_three, training, fifo + "checkpoint { dir: \"" + local_dir + "\" every_steps: 1000 restore: NONE }"));
  REQUIRE(local.ok());
  CHECK(real->steps == local->steps);
  CHECK(real->test_accuracy == local->test_accuracy);
  // The accumulators counted in the PS process; the tally came to the client.
  REQUIRE(real->sync.present);
  REQUIRE(local->sync.present);
  for (const char* w : {"/job:worker/task:0", "/job:worker/task:1"}) {
    INFO(w);
    CHECK(real->sync.workers[w].used >= 160);
    CHECK(real->sync.workers[w].used == local->sync.workers[w].used);
  }

  // The last checkpoints: every variable, optimizer slot and the global step agree bit for bit.
  auto a = checkpoint::directory::open(real_dir), b = checkpoint::directory::open(local_dir);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto ra = a->open_latest(nullptr), rb = b->open_latest(nullptr);
  REQUIRE(ra.ok());
  REQUIRE(rb.ok());
  CHECK(ra->global_step() == 160);
  CHECK(ra->global_step() == rb->global_step());
  REQUIRE(ra->variables().size() == rb->variables().size());
  REQUIRE(ra->variables().size() >= 5);
  for (const auto& v : ra->variables()) {
    INFO(v.name);
    auto x = ra->read(v.name), y = rb->read(v.name);
    REQUIRE(x.ok());
    REQUIRE(y.ok());
    REQUIRE(x->byte_size() == y->byte_size());
    CHECK(std::memcmp(x->raw_data(), y->raw_data(), static_cast<std::size_t>(x->byte_size())) == 0);
  }
  std::filesystem::remove_all(real_dir);
  std::filesystem::remove_all(local_dir);
}

TEST_CASE("mode REAL: a killed PS process and a killed worker are restarted and restored, a frozen worker is found "
          "by heartbeats, and training finishes",
          "[real]") {
  const std::string dir = temp_dir("troupe-real-faults");
  std::string output;
  auto s = run(mlp(std::string("mode: REAL ") + k_three, "steps: 260",
                   "checkpoint { dir: \"" + dir + "\" every_steps: 40 keep: 3 restore: NONE }\n"
                   "faults { fault { at_step: 60 kill { task: \"/job:ps/task:0\" } }\n"
                   "         fault { at_step: 120 kill { task: \"/job:worker/task:1\" } }\n"
                   "         fault { at_step: 180 stall { task: \"/job:worker/task:0\" duration_ms: 3000 } } }\n"),
               &output);
  INFO(output);
  REQUIRE(s.ok());
  CHECK(s->steps >= 260);
  REQUIRE(s->faults.size() == 3);
  for (const auto& f : s->faults) {
    INFO(f.kind << " " << f.task);
    CHECK(f.recovered);
  }
  // Two kills and the frozen worker, which missed its heartbeats: three restarts.
  CHECK(s->restarts["/job:ps/replica:0/task:0"] == 1);
  CHECK(s->restarts["/job:worker/replica:0/task:1"] == 1);
  CHECK(s->restarts["/job:worker/replica:0/task:0"] == 1);
  CHECK(output.find("supervisor: restarted /job:worker/replica:0/task:0") != std::string::npos);
  CHECK(s->test_accuracy > 0.6);
  CHECK(children() == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("mode REAL with a trace: the servers time their kernels and transfers, and the client's trace has them",
          "[real]") {
  const std::string trace = temp_dir("troupe-real-trace") + ".json";
  std::string output;
  auto s = run(mlp(std::string("mode: REAL ") + k_three, "steps: 30"), &output, TROUPE_PROGRAM, trace);
  INFO(output);
  REQUIRE(s.ok());
  std::ifstream in(trace);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(trace);
  // A process (in the trace's sense) per server task, spans of kernels that ran only there
  // (the variables' updates on the PS, the gradients on the workers), and transfers
  // between them drawn as flows.
  for (const char* task : {"/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"}) {
    CHECK_THAT(json, Catch::Contains(std::string("\"args\":{\"name\":\"") + task + "\"}"));
  }
  CHECK_THAT(json, Catch::Contains("\"cat\":\"ResourceApplyAdam\""));
  CHECK_THAT(json, Catch::Contains("\"cat\":\"MatMul\""));
  CHECK_THAT(json, Catch::Contains("\"ph\":\"s\""));
  CHECK_THAT(json, Catch::Contains("\"ph\":\"f\""));
  // The links' transits, in rows of the receiving task by sender.
  CHECK_THAT(json, Catch::Contains("\"cat\":\"link_transit\""));
  CHECK_THAT(json, Catch::Contains("\"args\":{\"name\":\"link from /job:worker/replica:0/task:1\"}"));
  CHECK(children() == 0);
}

TEST_CASE("mode REAL: straggle, drop_messages and delay_messages act in the servers' processes", "[real]") {
  const std::string dir = temp_dir("troupe-real-links");
  std::string output;
  auto s = run(mlp(std::string("mode: REAL ") + k_three, "steps: 240 replication: SYNC seed: 2",
                   "checkpoint { dir: \"" + dir + "\" every_steps: 40 keep: 3 restore: NONE }\n"
                   "faults { fault { at_step: 40 until_step: 80 drop_messages { from: \"/job:worker/task:0\" "
                   "                 to: \"/job:ps/task:0\" probability: 0.1 } }\n"
                   "         fault { at_step: 120 until_step: 160 straggle { task: \"/job:worker/task:1\" delay_ms: 20 } }\n"
                   "         fault { at_step: 160 until_step: 200 delay_messages { from: \"/job:worker/task:1\" "
                   "                 to: \"/job:ps/task:0\" delay_ms: 20 } } }\n"),
               &output);
  INFO(output);
  REQUIRE(s.ok());
  CHECK(s->steps >= 240);
  REQUIRE(s->faults.size() == 3);
  for (const auto& f : s->faults) CHECK(f.recovered);
  // The worker's Sends were dropped in its process: its steps failed and ran again.
  CHECK(s->steps_retried > 0);
  // 40 steps that wait 20 ms for worker 1 (straggle), and 40 whose gradients come 20 ms late.
  CHECK(s->seconds > 1.6);
  for (const auto& [task, n] : s->restarts) CHECK(n == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("mode REAL with tls: the run's own CA and certificates, mutual TLS and identity proofs, and a killed PS "
          "restarted over TLS",
          "[real]") {
  const std::string dir = temp_dir("troupe-real-tls");
  std::string output;
  auto s = run(mlp(std::string("mode: REAL tls: true ") + k_three, "steps: 200",
                   "checkpoint { dir: \"" + dir + "\" every_steps: 40 keep: 3 restore: NONE }\n"
                   "faults { fault { at_step: 80 kill { task: \"/job:ps/task:0\" } } }\n"),
               &output);
  INFO(output);
  REQUIRE(s.ok());
  CHECK(output.find("mutual TLS with identity proofs") != std::string::npos);
  CHECK(s->steps >= 200);
  CHECK(s->restarts["/job:ps/replica:0/task:0"] == 1);
  CHECK(s->test_accuracy > 0.6);
  CHECK(children() == 0);
  std::filesystem::remove_all(dir);
  auto local = scenarios::parse_scenario(mlp(std::string("tls: true ") + k_three, "steps: 10"), "bad.pbtxt");
  REQUIRE_FALSE(local.ok());
  CHECK(local.error().message().find("tls is for mode: REAL") != std::string::npos);
}

TEST_CASE("mode REAL with a cluster_file: servers started by hand over TLS are reached as the file's client; a file "
          "of another cluster or a misplaced cluster_file is refused",
          "[real]") {
  // The cluster of the servers, as a user writes it, then its CA and certificates.
  const auto tls = testing::make_loopback_cluster("troupe-real-by-hand", {{"ps", 1}, {"worker", 2}}, /*tls=*/true);
  const std::string& dir = tls.dir;
  const std::string& cluster_file = tls.file.path();
  REQUIRE(tls.file.tls().has_value());
  {
    cluster::task_processes_options po;  // the servers "by hand": this test starts them
    po.executable = TROUPE_PROGRAM;
    po.log_dir = dir;
    auto servers = cluster::task_processes::start(tls.file, po);
    REQUIRE(servers.ok());
    std::string output;
    auto s = run(mlp(std::string("mode: REAL cluster_file: \"") + cluster_file + "\" " + k_three, "steps: 120"),
                 &output);
    INFO(output);
    REQUIRE(s.ok());
    CHECK(output.find("servers started by hand with " + cluster_file + ", mutual TLS with identity proofs") !=
          std::string::npos);
    CHECK(s->steps >= 120);
    CHECK(s->test_accuracy > 0.6);

    // The same servers, named by a scenario whose cluster is not theirs.
    auto other = run(mlp(std::string("mode: REAL cluster_file: \"") + cluster_file +
                             "\" job { name: \"ps\" tasks: 1 } job { name: \"worker\" tasks: 1 }",
                         "steps: 10"));
    REQUIRE_FALSE(other.ok());
    CHECK_THAT(other.error().message(),
               Catch::Contains("has the jobs ps (1), worker (2) but the scenario's cluster has ps (1), worker (1)"));
  }
  CHECK(children() == 0);
  auto misplaced = scenarios::parse_scenario(mlp(std::string("cluster_file: \"x.pbtxt\" ") + k_three, "steps: 10"),
                                             "bad.pbtxt");
  REQUIRE_FALSE(misplaced.ok());
  CHECK_THAT(misplaced.error().message(), Catch::Contains("cluster_file is for mode: REAL"));
  auto both = scenarios::parse_scenario(
      mlp(R"(mode: REAL tls: true cluster_file: "x.pbtxt" job { name: "worker" tasks: 1 addresses: ["localhost:3"] })",
          "steps: 10"),
      "bad.pbtxt");
  REQUIRE_FALSE(both.ok());
  CHECK_THAT(both.error().message(), Catch::Contains("not both") && Catch::Contains("name the cluster file they were"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("mode REAL: bad input is refused naming what and where", "[real]") {
  SECTION("addresses that do not match the tasks, or outside mode REAL") {
    auto sc = scenarios::parse_scenario(mlp(R"(mode: REAL job { name: "ps" tasks: 1 addresses: ["localhost:1", "localhost:2"] }
                                               job { name: "worker" tasks: 1 addresses: ["localhost:3"] })",
                                            "steps: 10"),
                                        "bad.pbtxt");
    REQUIRE_FALSE(sc.ok());
    CHECK(sc.error().message().find("job 'ps' has 1 task but 2 addresses") != std::string::npos);
    auto local = scenarios::parse_scenario(mlp(R"(job { name: "worker" tasks: 1 addresses: ["localhost:3"] })", "steps: 10"),
                                           "bad.pbtxt");
    REQUIRE_FALSE(local.ok());
    CHECK(local.error().message().find("addresses are for mode: REAL") != std::string::npos);
    auto kill = scenarios::parse_scenario(
        mlp(R"(mode: REAL job { name: "ps" tasks: 1 addresses: ["localhost:1"] }
               job { name: "worker" tasks: 1 addresses: ["localhost:3"] })",
            "steps: 100", "faults { fault { at_step: 10 stall { task: \"/job:ps/task:0\" duration_ms: 5 } } }"),
        "bad.pbtxt");
    REQUIRE_FALSE(kill.ok());
    CHECK(kill.error().message().find("needs servers that troupe run starts") != std::string::npos);
  }
  SECTION("servers by hand that are not there: an error naming the address, in seconds") {
    const int port = cluster::free_loopback_port();
    const auto started = std::chrono::steady_clock::now();
    auto s = run(mlp("mode: REAL job { name: \"worker\" tasks: 1 addresses: [\"127.0.0.1:" + std::to_string(port) + "\"] }",
                     "steps: 10"));
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().message().find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
  }
  SECTION("a server program that is not there") {
    auto s = run(mlp(std::string("mode: REAL ") + k_three, "steps: 10"), nullptr, "/nonexistent/troupe");
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().message().find("'/nonexistent/troupe' is not an executable file") != std::string::npos);
  }
  SECTION("a server that fails to start: its log is quoted") {
    auto s = run(mlp(std::string("mode: REAL ") + k_three, "steps: 10"), nullptr, "/bin/false");
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().message().find("exited with code 1") != std::string::npos);
    CHECK(s.error().message().find("the end of its log") != std::string::npos);
  }
  CHECK(children() == 0);
}
