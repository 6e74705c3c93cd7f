// task_processes: the servers a run starts, as a conversation with their processes:
// started and serving, killed, restarted at the same address, frozen and thawed, a server
// that cannot start (its log quoted), and every one stopped and reaped at the end; and the
// loopback probe that `troupe calibrate` runs over such servers.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster_file.h"
#include "cluster/loopback_probe.h"
#include "cluster/task_processes.h"
#include "tests/cluster/cluster_fixture.h"

namespace troupe::cluster {
namespace {

using namespace std::chrono_literals;

// The state letter of a process (/proc/PID/stat): 'T' stopped, 'Z' a zombie; 0 when gone.
char state_of(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? 0 : line[close + 2];
}

// Signals arrive a moment after they are sent: waits up to a second for `want`.
bool becomes(int pid, char want) {
  for (int i = 0; i < 200 && state_of(pid) != want; ++i) std::this_thread::sleep_for(5ms);
  return state_of(pid) == want;
}

bool alive(int pid) { return pid > 0 && state_of(pid) != 0 && state_of(pid) != 'Z'; }

testing::loopback_cluster make_cluster(const std::string& name) {
  return testing::make_loopback_cluster(name, {{"ps", 1}, {"worker", 1}});
}

task_processes_options options_in(const std::string& dir, const std::string& program = TROUPE_PROGRAM) {
  task_processes_options o;
  o.executable = program;
  o.log_dir = dir;
  return o;
}

TEST_CASE("free_loopback_port never hands out a port twice, from several threads", "[processes]") {
  // Ports are drawn from 12,000: without memory of those given, 2,000 draws would meet
  // one twice almost surely (and two tasks of a cluster file would share a port).
  std::vector<int> ports(2000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 2000; i += 4) ports[static_cast<std::size_t>(i)] = free_loopback_port();
    });
  }
  for (auto& t : threads) t.join();
  CHECK(std::count(ports.begin(), ports.end(), 0) == 0);
  std::sort(ports.begin(), ports.end());
  CHECK(std::adjacent_find(ports.begin(), ports.end()) == ports.end());
}

TEST_CASE("task_processes starts a server per task, kills, restarts and freezes them, and stops them all", "[processes]") {
  auto c = make_cluster("troupe-task-processes");
  int ps = 0, worker = 0;
  {
    auto servers = task_processes::start(c.file, options_in(c.dir));
    REQUIRE(servers.ok());
    auto& s = **servers;
    ps = s.pid("/job:ps/task:0");
    worker = s.pid("/job:worker/replica:0/task:0");
    CHECK(alive(ps));
    CHECK(alive(worker));
    CHECK(s.pid("/job:chief/task:0") == 0);
    {
      // The servers share this machine's cores: their compute threads do not spin.
      std::ifstream cmdline("/proc/" + std::to_string(ps) + "/cmdline");
      std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
      std::replace(args.begin(), args.end(), '\0', ' ');
      CHECK(args.find(" server ") != std::string::npos);
      CHECK(args.find(" --no-spin") != std::string::npos);
      // Their pools have the machine's cores, as in process (none given).
      CHECK(args.find(" --compute-threads") == std::string::npos);
    }
    CHECK(s.kill("/job:chief/task:0").error_code() == code::not_found);
    {
      std::ifstream log(s.log_path("/job:ps/task:0"));
      std::string first;
      std::getline(log, first);
      CHECK(first.find("troupe server: task /job:ps/replica:0/task:0") != std::string::npos);
    }

    // kill: the process is gone (reaped, not a zombie), and the task has none.
    REQUIRE(s.kill("/job:ps/task:0").ok());
    CHECK(state_of(ps) == 0);
    CHECK(s.pid("/job:ps/task:0") == 0);
    CHECK(s.stall("/job:ps/task:0", 10ms).error_code() == code::failed_precondition);

    // restart: a new process serving at the same address.
    REQUIRE(s.restart("/job:ps/task:0").ok());
    const int again = s.pid("/job:ps/task:0");
    CHECK(again != ps);
    CHECK(alive(again));
    ps = again;

    // stall: frozen now, thawed after the duration.
    REQUIRE(s.stall("/job:worker/task:0", 300ms).ok());
    CHECK(becomes(worker, 'T'));
    std::this_thread::sleep_for(600ms);
    CHECK(state_of(worker) != 'T');
    CHECK(alive(worker));

    // Through the cluster's control: the same, by canonical name.
    auto control = s.control();
    REQUIRE(control->restart("/job:worker/replica:0/task:0").ok());
    CHECK(state_of(worker) == 0);
    worker = s.pid("/job:worker/task:0");
    CHECK(alive(worker));
    // A frozen server still stops at the end (SIGCONT with the SIGTERM).
    REQUIRE(control->stall("/job:worker/replica:0/task:0", 60s).ok());
  }
  // Destroyed: every server stopped and reaped.
  CHECK(state_of(ps) == 0);
  CHECK(state_of(worker) == 0);
  std::filesystem::remove_all(c.dir);
}

TEST_CASE("task_processes: a server that cannot start is an error quoting its log, and the others are stopped",
          "[processes]") {
  auto c = make_cluster("troupe-task-processes-bad");
  SECTION("no such program") {
    auto servers = task_processes::start(c.file, options_in(c.dir, c.dir + "/none"));
    REQUIRE_FALSE(servers.ok());
    CHECK(servers.error().message().find("is not an executable file") != std::string::npos);
  }
  SECTION("a port in use: the server says so in its log") {
    // Hold the PS task's port.
    auto held = task_processes::start(c.file, options_in(c.dir));
    REQUIRE(held.ok());
    const int worker = (*held)->pid("/job:worker/task:0");
    auto twice = task_processes::start(c.file, options_in(c.dir));
    REQUIRE_FALSE(twice.ok());
    CHECK(twice.error().message().find("exited with code 1") != std::string::npos);
    CHECK(twice.error().message().find("in use") != std::string::npos);
    CHECK(alive(worker));  // the first run's servers are untouched
  }
  std::filesystem::remove_all(c.dir);
}

TEST_CASE("measure_loopback: what transfers between two server processes cost, in the network model's terms",
          "[processes]") {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("troupe-loopback-probe-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  loopback_probe_options o;
  o.executable = TROUPE_PROGRAM;
  o.dir = dir;
  o.seconds_per_graph = 0.3;
  // Servers that copy what they send (the servers inherit this process's environment):
  // the large tensor's copies show.
  ::setenv("TROUPE_LINK_ZERO_COPY", "0", 1);
  auto costs = measure_loopback(o);
  ::unsetenv("TROUPE_LINK_ZERO_COPY");
  REQUIRE(costs.ok());
  INFO("null step " << costs->null_step_us << " us, latency " << costs->latency_us << " us, transfer "
                    << costs->transfer_us << " us, " << costs->bandwidth_gbps << " Gb/s, copies " << costs->copy_gbps
                    << " GB/s, message CPU " << costs->message_cpu_us << " us, step CPU " << costs->step_cpu_us << " us");
  CHECK(costs->steps > 4 * 20);
  // A step between two processes costs tens of microseconds at least, and far less than
  // a second; 4 MB between them move at more than 50 MB/s and cost CPU to copy.
  CHECK(costs->null_step_us > 10);
  CHECK(costs->null_step_us < 1e5);
  CHECK(costs->step_cpu_us > 1);
  CHECK(costs->bandwidth_gbps > 0.4);
  CHECK(costs->copy_gbps > 0.05);
  CHECK(costs->latency_us >= 0);
  CHECK(costs->transfer_us >= 0);
  CHECK(costs->message_cpu_us >= 0);
  // Servers as they start by default send it uncopied (doc/cluster.md, "Sends without
  // copies"): it may add next to nothing, within the simulation's range.
  auto uncopied = measure_loopback(o);
  REQUIRE(uncopied.ok());
  CHECK(uncopied->bandwidth_gbps > 0.4);
  CHECK(uncopied->bandwidth_gbps <= 1e4);
  CHECK(uncopied->copy_gbps >= 0);
  CHECK(uncopied->copy_gbps <= 1e4);
  // Over mutual TLS (certificates made for the probe) too.
  loopback_probe_options tls = o;
  tls.dir = dir + "/tls";
  tls.tls = true;
  tls.seconds_per_graph = 0.2;
  std::filesystem::create_directories(tls.dir);
  auto encrypted = measure_loopback(tls);
  REQUIRE(encrypted.ok());
  CHECK(encrypted->bandwidth_gbps > 0.1);
  CHECK(encrypted->copy_gbps > 0.01);
  // Its servers are gone, and a program that cannot serve is an error.
  o.executable = dir + "/none";
  auto none = measure_loopback(o);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message().find("is not an executable file") != std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe::cluster
