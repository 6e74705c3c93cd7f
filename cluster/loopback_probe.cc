#include "cluster/loopback_probe.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "actors/session.h"
#include "cluster/certificates.h"
#include "cluster/real_cluster.h"
#include "cluster/task_processes.h"
#include "core/cpu_time.h"
#include "core/file.h"
#include "core/spin_wait.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "graph/variables.h"

namespace troupe::cluster {
namespace {

constexpr int k_small = 16;  // small transfers in the many-transfers graph
// The null and one-transfer graphs alternate in this many blocks each: the latency is
// the median of the blocks' differences (the machine's speed drifts between seconds).
constexpr int k_latency_blocks = 5;

// The probe's graph: a NoOp on each task, k_small scalar variables on the ps each taken
// by an Identity on the worker, and one of options.large_bytes.
result<graph::graph> probe_graph(std::int64_t large_bytes) {
  auto root = graph::scope::new_root();
  auto ps = root.with_device("/job:ps/task:0");
  auto worker = root.with_device("/job:worker/task:0");
  ops::no_op(ps.with_name("ps_noop"));
  ops::no_op(worker.with_name("worker_noop"));
  std::vector<graph::variable> vars;
  for (int i = 0; i < k_small; ++i) {
    vars.push_back(graph::make_variable(ps, str_cat("small_", i), tensor_shape{}, dtype::float32,
                                        ops::scalar(ps.with_name(str_cat("one_", i)), 1.0f)));
    ops::identity(worker.with_name(str_cat("take_small_", i)), vars.back().value);
  }
  const auto elements = static_cast<std::int32_t>(std::max<std::int64_t>(1, large_bytes / 4));
  vars.push_back(graph::make_variable(
      ps, "large", tensor_shape{elements}, dtype::float32,
      ops::fill(ps.with_name("large_value"), ops::constant(ps.with_name("large_shape"), tensor::from_vector<std::int32_t>({elements})),
                ops::scalar(ps.with_name("half"), 0.5f))));
  ops::identity(worker.with_name("take_large"), vars.back().value);
  graph::global_variables_initializer(root, vars);
  return root.to_graph();
}

struct sample {
  double wall_us = 0, cpu_us = 0;
  std::int64_t steps = 0;
  // The blocks' samples joined: wall and CPU per step over all their steps.
  void add(const sample& b) {
    const auto n = static_cast<double>(steps + b.steps);
    if (n <= 0) return;
    wall_us = (wall_us * static_cast<double>(steps) + b.wall_us * static_cast<double>(b.steps)) / n;
    cpu_us = (cpu_us * static_cast<double>(steps) + b.cpu_us * static_cast<double>(b.steps)) / n;
    steps += b.steps;
  }
};

}  // namespace

result<loopback_costs> measure_loopback(const loopback_probe_options& options) {
  if (options.executable.empty() || options.dir.empty()) {
    return invalid_argument_error("measure_loopback: needs the troupe program and a directory");
  }
  const std::string path = options.dir + "/loopback.pbtxt";
  TROUPE_RETURN_IF_ERROR(write_file(path, str_cat("job { name: \"ps\" tasks { key: 0 value: \"127.0.0.1:", free_loopback_port(),
                                                  "\" } }\njob { name: \"worker\" tasks { key: 0 value: \"127.0.0.1:",
                                                  free_loopback_port(), "\" } }\n")));
  auto file = cluster_file::load(path);
  if (!file.ok()) return file.error();
  if (options.tls) {
    auto made = make_test_certificates(*file, options.dir + "/certs", /*days=*/2);
    if (!made.ok()) return made.error().with_context("measuring the loopback");
    file = cluster_file::load(made->cluster_file);
    if (!file.ok()) return file.error();
  }
  task_processes_options po;
  po.executable = options.executable;
  po.log_dir = options.dir;
  auto servers = task_processes::start(*file, po);
  if (!servers.ok()) return servers.error().with_context("measuring the loopback");
  auto c = process_cluster(*file, {}, str_cat("troupe calibrate (pid ", ::getpid(), ")"));
  if (!c.ok()) return c.error().with_context("measuring the loopback");
  auto g = probe_graph(options.large_bytes);
  if (!g.ok()) return g.error();
  actors::session_options so;
  so.cluster = *c;
  auto s = actors::session::create(std::move(*g), so);
  if (!s.ok()) return s.error();
  if (auto init = (*s)->run({}, {}, {"init"}); !init.ok()) return init.error().with_context("measuring the loopback");
  const int ps_pid = (*servers)->pid("/job:ps/replica:0/task:0");
  const int worker_pid = (*servers)->pid("/job:worker/replica:0/task:0");
  auto all_cpu_ns = [&] { return working_cpu_ns() + process_cpu_ns_of(ps_pid) + process_cpu_ns_of(worker_pid); };
  if (process_cpu_ns_of(ps_pid) < 0 || process_cpu_ns_of(worker_pid) < 0) {
    return unavailable_error("measuring the loopback: cannot read the servers' CPU time from /proc");
  }
  loopback_costs out;
  auto measure = [&](const std::vector<std::string>& targets, double seconds) -> result<sample> {
    for (int i = 0; i < 20; ++i) {  // warm-up (and the first step's preparation)
      if (auto r = (*s)->run({}, {}, targets); !r.ok()) return r.error().with_context("measuring the loopback");
    }
    using clock = std::chrono::steady_clock;
    const double cpu0 = all_cpu_ns();
    const auto t0 = clock::now();
    sample x;
    double elapsed = 0;
    while (elapsed < seconds) {
      if (auto r = (*s)->run({}, {}, targets); !r.ok()) return r.error().with_context("measuring the loopback");
      ++x.steps;
      elapsed = std::chrono::duration<double>(clock::now() - t0).count();
    }
    x.wall_us = elapsed * 1e6 / static_cast<double>(x.steps);
    x.cpu_us = (all_cpu_ns() - cpu0) / 1e3 / static_cast<double>(x.steps);
    out.steps += x.steps + 20;
    return x;
  };
  std::vector<std::string> many;
  for (int i = 0; i < k_small; ++i) many.push_back(str_cat("take_small_", i));
  sample null_step, one;  // over all the blocks
  std::vector<double> differences;
  for (int b = 0; b < k_latency_blocks; ++b) {
    auto n = measure({"ps_noop", "worker_noop"}, options.seconds_per_graph / k_latency_blocks);
    if (!n.ok()) return n.error();
    auto o = measure({"take_small_0"}, options.seconds_per_graph / k_latency_blocks);
    if (!o.ok()) return o.error();
    differences.push_back(o->wall_us - n->wall_us);
    null_step.add(*n);
    one.add(*o);
  }
  std::nth_element(differences.begin(), differences.begin() + k_latency_blocks / 2, differences.end());
  auto sixteen = measure(many, options.seconds_per_graph);
  if (!sixteen.ok()) return sixteen.error();
  auto large = measure({"take_large"}, options.seconds_per_graph);
  if (!large.ok()) return large.error();
  const double bytes = static_cast<double>(std::max<std::int64_t>(4, options.large_bytes / 4 * 4));
  out.null_step_us = null_step.wall_us;
  out.latency_us = std::max(0.0, differences[k_latency_blocks / 2]);
  out.transfer_us = std::max(0.0, (sixteen->wall_us - one.wall_us) / (k_small - 1));
  // Servers send large tensors without copying them (doc/cluster.md, "Sends without
  // copies"): the large one may add next to nothing, which the simulation takes as its
  // fastest link and copy (10^4).
  constexpr double k_fastest = 1e4;
  out.bandwidth_gbps = std::min(k_fastest, 8 * bytes / 1e3 / std::max(1.0, large->wall_us - one.wall_us));
  out.message_cpu_us = std::max(0.0, (sixteen->cpu_us - one.cpu_us) / (k_small - 1) / 2);
  const double copy_us = large->cpu_us - one.cpu_us;
  out.copy_gbps = copy_us > 0 ? std::min(k_fastest, 2 * bytes / 1e3 / copy_us) : 0;
  out.step_cpu_us = null_step.cpu_us / 2;
  return out;
}

}  // namespace troupe::cluster
