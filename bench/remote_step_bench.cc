// A small step on a task of another process (issue 16's target: reading a scalar on a PS
// process, p50 <= 100 us, p99 <= 500 us), beside the same step on an in-process cluster in
// the same run.
//
//   build/bench/bench_remote_step [--steps=2000]
//
// A forked process serves the PS task of a two-task cluster file (cluster::task_server);
// this process is a client hosting no task (cluster::process_cluster) and runs steps that
// fetch a scalar read from a variable on the PS. The in-process cluster runs the same graph.
// Prints one JSON object: p50/p99/mean of each in microseconds.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "actors/session.h"
#include "cluster/real_cluster.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "graph/variables.h"
#include "cluster/task_processes.h"

namespace troupe::bench {
namespace {


using clock_type = std::chrono::steady_clock;

struct figures {
  double p50 = 0, p99 = 0, mean = 0;
};

figures summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  figures f;
  if (us.empty()) return f;
  f.p50 = us[us.size() / 2];
  f.p99 = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  for (double x : us) f.mean += x;
  f.mean /= static_cast<double>(us.size());
  return f;
}


// v (a scalar variable on the PS), its initializer, and a read of it.
graph::graph read_graph() {
  auto root = graph::scope::new_root();
  auto ps = root.with_device("/job:ps/task:0");
  auto handle = ps.with_name("v").add("VarHandleOp", {},
                                      {{"dtype", graph::attr_value(dtype::float32)},
                                       {"shape", graph::attr_value(partial_shape::scalar())},
                                       {"shared_name", graph::attr_value(std::string("v"))}});
  ps.with_name("init").add("AssignVariableOp", {handle.out(0), ops::scalar(ps.with_name("one"), 1.5f)},
                           {{"dtype", graph::attr_value(dtype::float32)}});
  ps.with_name("read").add("ReadVariableOp", {handle.out(0)}, {{"dtype", graph::attr_value(dtype::float32)}});
  auto g = root.to_graph();
  if (!g.ok()) {
    std::cerr << "bench_remote_step: " << g.error() << "\n";
    std::exit(1);
  }
  return std::move(*g);
}

// Steps that fetch read:0; their latencies in microseconds.
result<std::vector<double>> time_steps(const std::shared_ptr<actors::cluster>& c, int steps) {
  actors::session_options o;
  o.cluster = c;
  o.default_device = "/job:worker/task:0";
  auto s = actors::session::create(read_graph(), o);
  if (!s.ok()) return s.error();
  if (auto init = (*s)->run({}, {}, {"init"}); !init.ok()) return init.error();
  for (int i = 0; i < 100; ++i) {  // warm-up (and the first step's preparation)
    if (auto r = (*s)->run({}, {"read"}); !r.ok()) return r.error();
  }
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    const auto t0 = clock_type::now();
    auto r = (*s)->run({}, {"read"});
    us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    if (!r.ok()) return r.error();
  }
  return us;
}

int run(int steps) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("troupe_bench_remote_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/cluster.pbtxt";
  std::ofstream(path) << "job { name: \"ps\" tasks { key: 0 value: \"127.0.0.1:" << cluster::free_loopback_port() << "\" } }\n"
                      << "job { name: \"worker\" tasks { key: 0 value: \"127.0.0.1:" << cluster::free_loopback_port() << "\" } }\n";
  auto file = cluster::cluster_file::load(path);
  if (!file.ok()) return std::cerr << "bench_remote_step: " << file.error() << "\n", 1;
  int ready[2];
  if (::pipe(ready) != 0) return 1;
  const pid_t child = ::fork();
  if (child == 0) {
    auto server = cluster::task_server::start(*file, "ps", 0, {});
    const char ok = server.ok() ? 1 : 0;
    if (!server.ok()) std::cerr << "bench_remote_step: " << server.error() << "\n";
    (void)::write(ready[1], &ok, 1);
    for (;;) ::pause();
  }
  struct reaper {
    pid_t child;
    std::string dir;
    ~reaper() {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
      std::filesystem::remove_all(dir);
    }
  } reap{child, dir};
  char ok = 0;
  if (::read(ready[0], &ok, 1) != 1 || ok != 1) return std::cerr << "bench_remote_step: the PS server did not start\n", 1;

  // Remote: this process hosts the worker, the PS is the forked server.
  auto remote = cluster::process_cluster(*file, {"/job:worker/task:0"}, "/job:worker/replica:0/task:0");
  if (!remote.ok()) return std::cerr << "bench_remote_step: " << remote.error() << "\n", 1;
  auto remote_us = time_steps(*remote, steps);
  if (!remote_us.ok()) return std::cerr << "bench_remote_step: " << remote_us.error() << "\n", 1;
  // In process: the same two tasks in this process.
  actors::cluster_options o;
  o.spec = file->spec();
  auto local = actors::cluster::create(o);
  if (!local.ok()) return std::cerr << "bench_remote_step: " << local.error() << "\n", 1;
  auto local_us = time_steps(*local, steps);
  if (!local_us.ok()) return std::cerr << "bench_remote_step: " << local_us.error() << "\n", 1;
  const figures r = summarize(*remote_us), l = summarize(*local_us);
  std::printf(
      "{\"steps\": %d, \"remote_p50_us\": %.1f, \"remote_p99_us\": %.1f, \"remote_mean_us\": %.1f, "
      "\"in_process_p50_us\": %.1f, \"in_process_p99_us\": %.1f, \"in_process_mean_us\": %.1f}\n",
      steps, r.p50, r.p99, r.mean, l.p50, l.p99, l.mean);
  return 0;
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) {
  int steps = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--steps=", 0) == 0) {
      steps = std::atoi(arg.c_str() + 8);
    } else {
      std::fprintf(stderr, "usage: bench_remote_step [--steps=2000]  (unknown '%s')\n", arg.c_str());
      return 2;
    }
  }
  if (steps < 1) return std::fprintf(stderr, "bench_remote_step: --steps must be at least 1\n"), 2;
  return troupe::bench::run(steps);
}
