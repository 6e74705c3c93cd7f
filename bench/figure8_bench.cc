// The TensorFlow paper's Figure 8 on tasks in one process: synchronous replication with
// backup workers. Each step aggregates the gradients of N workers (--aggregate, 50 as in
// the paper) out of N + b; the b backups let a step go ahead without its slowest workers.
//
// One actors::cluster holds 1 PS task and N + b worker tasks; each worker is a client
// session on its own task and thread, training a small dense model (train::sync_replicas
// over gradient descent; a cluster::sync_coordinator runs the updates). A worker's step
// takes the compute time drawn for it, then computes and hands in its gradient: the
// compute time of worker w at step s is base_ms x (1 + tail x (X - 1)), X drawn from a
// Pareto distribution of shape --alpha (3) and scale 1, seeded by (seed, w, s): most steps
// near base_ms, a heavy tail of slow ones (P(2x) = (1 + 1/tail)^-alpha, 0.08% with the
// defaults), the same draws in every run. The tail's weight was chosen so that the
// analytic curve of this model (the N-th fastest of N + b draws) has the paper's shape:
// the median step falls with every backup, and the normalized speedup
// t(0)/t(b) x N/(N+b) peaks around 3 backups.
//
// For each b the program runs --warmup then --steps global steps and prints one JSON object
// with, per b: the median, p10 and p90 of the time between consecutive updates, the
// normalized speedup against b = 0, and how many gradients were left out as backups.
// The paper (Abadi et al. 2016, Fig. 8, 50 workers, Inception-v3): 4 backups give the
// shortest median step (1.93 s); 3 backups the best normalized speedup, 9.5%.
//
//   build/bench/bench_figure8 --aggregate=50 --backups=0,1,2,3,4,5 --steps=40 --base_ms=20
//
// Flags: --aggregate=N --backups=LIST --steps=S --warmup=S --base_ms=MS --tail=T --alpha=A
//        --seed=K --compute_threads=N.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/cluster.h"
#include "actors/session.h"
#include "cluster/sync_coordinator.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "graph/variables.h"

namespace troupe::bench {
namespace {

using clock_type = std::chrono::steady_clock;

struct flags {
  int aggregate = 50;
  std::vector<int> backups = {0, 1, 2, 3, 4, 5};
  int steps = 40;
  int warmup = 5;
  double base_ms = 20;
  double tail = 0.1;
  double alpha = 3;
  std::uint64_t seed = 1;
  int compute_threads = 0;
};

bool parse_flags(int argc, char** argv, flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("--") + name + "=";
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("aggregate")) {
      f->aggregate = std::atoi(v);
    } else if (const char* v = value("backups")) {
      f->backups.clear();
      std::stringstream ss(v);
      for (std::string item; std::getline(ss, item, ',');) f->backups.push_back(std::atoi(item.c_str()));
    } else if (const char* v = value("steps")) {
      f->steps = std::atoi(v);
    } else if (const char* v = value("warmup")) {
      f->warmup = std::atoi(v);
    } else if (const char* v = value("base_ms")) {
      f->base_ms = std::atof(v);
    } else if (const char* v = value("tail")) {
      f->tail = std::atof(v);
    } else if (const char* v = value("alpha")) {
      f->alpha = std::atof(v);
    } else if (const char* v = value("seed")) {
      f->seed = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("compute_threads")) {
      f->compute_threads = std::atoi(v);
    } else {
      std::cerr << "bench_figure8: unknown flag '" << arg << "' (valid: --aggregate=N, --backups=LIST, --steps=S, "
                << "--warmup=S, --base_ms=MS, --tail=T, --alpha=A, --seed=K, --compute_threads=N)\n";
      return false;
    }
  }
  if (f->aggregate < 1 || f->steps < 1 || f->warmup < 0 || f->base_ms < 0 || f->alpha <= 0 || f->backups.empty()) {
    std::cerr << "bench_figure8: --aggregate and --steps must be >= 1, --warmup and --base_ms >= 0, --alpha > 0\n";
    return false;
  }
  return true;
}

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Worker w's compute time at step s, in ms (see the top of the file).
double compute_ms(const flags& f, int w, std::int64_t s) {
  const std::uint64_t bits = splitmix(splitmix(f.seed * 1000003 + static_cast<std::uint64_t>(w)) ^
                                      static_cast<std::uint64_t>(s));
  const double u = (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;  // (0, 1)
  const double pareto = std::pow(u, -1.0 / f.alpha);
  return f.base_ms * (1 + f.tail * (pareto - 1));
}

// Worker `replica`'s graph: x [8, 64] -> dense 64x64 -> mean square; variables on the PS.
struct built {
  graph::graph g;
  train::sync_replicas_ops ops;
};
result<built> worker_graph(int replica, int aggregate, int total) {
  auto root = graph::scope::new_root();
  const auto ps = root.with_device("/job:ps/task:0");
  const auto w = root.with_device(str_cat("/job:worker/task:", replica));
  graph::variable_collection vars;
  auto kernel = graph::make_variable(ps, "kernel", {64, 64}, dtype::float32, init::random_normal_initializer(0.1), 3);
  auto bias = graph::make_variable(ps, "bias", {64}, dtype::float32, init::zeros_initializer());
  vars.add(kernel);
  vars.add(bias);
  auto step = train::make_global_step(ps, vars);
  tensor x(dtype::float32, {8, 64});
  for (std::size_t i = 0; i < x.flat<float>().size(); ++i) x.flat<float>()[i] = static_cast<float>((i * 7 + replica) % 13) / 13;
  auto y = ops::add(w, ops::matmul(w, ops::constant(w, x), kernel.value), bias.value);
  auto loss = ops::mean(w, ops::mul(w, y, y), ops::constant(w, tensor::from_vector<std::int32_t>({0, 1})));
  auto o = train::minimize(root, train::sync_replicas(train::gradient_descent(0.01), aggregate, total), loss, vars,
                           step, replica);
  if (!o.ok()) return o.error();
  graph::global_variables_initializer(root, vars);
  auto g = root.to_graph();
  if (!g.ok()) return g.error();
  return built{std::move(*g), std::move(*o)};
}

struct point {
  int backups = 0;
  int workers = 0;
  int steps = 0;
  double p10 = 0, p50 = 0, p90 = 0;
  std::int64_t left_out = 0;
  std::string error;
};

// Counts the gradients dropped (left out) after the warm-up.
struct drop_counter final : actors::sync_observer {
  std::atomic<std::int64_t> dropped{0};
  std::atomic<std::int64_t> from_step{0};
  void gradient(const std::string& acc, const std::string&, std::int64_t local_step, std::int64_t, bool kept) override {
    // One accumulator stands for the worker's whole gradient.
    if (!kept && local_step >= from_step.load() && acc == "kernel/sync_accumulator") ++dropped;
  }
  void aggregated(const std::string&, std::int64_t, const std::vector<std::string>&) override {}
};

point measure(const flags& f, int b) {
  point p;
  p.backups = b;
  const int total = f.aggregate + b;
  p.workers = total;
  auto spec = placement::cluster_spec::from_task_counts({{"ps", 1}, {"worker", total}});
  if (!spec.ok()) return p.error = spec.error().to_string(), p;
  drop_counter drops;
  drops.from_step = f.warmup;
  actors::cluster_options co;
  co.spec = *spec;
  co.compute_threads = f.compute_threads;
  co.sync_watcher = &drops;
  auto cluster = actors::cluster::create(co);
  if (!cluster.ok()) return p.error = cluster.error().to_string(), p;
  std::vector<std::unique_ptr<actors::session>> sessions;
  std::vector<train::sync_replicas_ops> ops;
  for (int r = 0; r < total; ++r) {
    auto g = worker_graph(r, f.aggregate, total);
    if (!g.ok()) return p.error = g.error().to_string(), p;
    actors::session_options so;
    so.cluster = *cluster;
    so.default_device = str_cat("/job:worker/task:", r);
    auto s = actors::session::create(std::move(g->g), so);
    if (!s.ok()) return p.error = s.error().to_string(), p;
    sessions.push_back(std::move(*s));
    ops.push_back(g->ops);
  }
  if (auto init = sessions[0]->run({}, {}, {"init"}); !init.ok()) return p.error = init.error().to_string(), p;
  auto chief = worker_graph(0, f.aggregate, total);
  if (!chief.ok()) return p.error = chief.error().to_string(), p;
  const std::int64_t last = f.warmup + f.steps;
  std::mutex mutex;
  std::vector<clock_type::time_point> updates;
  cluster::sync_coordinator_options o;
  o.last_step = last;
  o.default_device = "/job:worker/task:0";
  o.step_done = [&](std::int64_t) {
    std::lock_guard<std::mutex> lock(mutex);
    updates.push_back(clock_type::now());
  };
  auto coordinator = cluster::sync_coordinator::create(*cluster, chief->g, chief->ops, o);
  if (!coordinator.ok()) return p.error = coordinator.error().to_string(), p;
  if (auto s = (*coordinator)->start(); !s.ok()) return p.error = s.to_string(), p;
  std::vector<std::thread> threads;
  std::atomic<bool> failed{false};
  for (int r = 0; r < total; ++r) {
    threads.emplace_back([&, r] {
      std::int64_t local = 0;
      while (local < last && !failed) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(compute_ms(f, r, local)));
        auto out = sessions[static_cast<std::size_t>(r)]->run(
            {{ops[static_cast<std::size_t>(r)].local_step.name(), tensor::scalar<std::int64_t>(local)}},
            {ops[static_cast<std::size_t>(r)].next_local_step.name()}, {ops[static_cast<std::size_t>(r)].train.node});
        if (!out.ok()) {
          std::lock_guard<std::mutex> lock(mutex);
          if (p.error.empty()) p.error = out.error().to_string();
          failed = true;
          (*coordinator)->stop(true);
          return;
        }
        local = out->at(0).scalar_value<std::int64_t>();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (status s = (*coordinator)->wait(); !s.ok() && p.error.empty()) p.error = s.to_string();
  std::vector<double> gaps;
  for (std::size_t i = static_cast<std::size_t>(f.warmup) + 1; i < updates.size(); ++i) {
    gaps.push_back(std::chrono::duration<double, std::milli>(updates[i] - updates[i - 1]).count());
  }
  std::sort(gaps.begin(), gaps.end());
  p.steps = static_cast<int>(gaps.size());
  if (!gaps.empty()) {
    auto at = [&](double q) { return gaps[static_cast<std::size_t>(q * static_cast<double>(gaps.size() - 1) + 0.5)]; };
    p.p10 = at(0.1), p.p50 = at(0.5), p.p90 = at(0.9);
  }
  p.left_out = drops.dropped.load();
  return p;
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) {
  using namespace troupe::bench;
  flags f;
  if (!parse_flags(argc, argv, &f)) return 2;
  std::vector<point> points;
  for (int b : f.backups) {
    std::cerr << "bench_figure8: " << f.aggregate << " of " << f.aggregate + b << " workers...\n";
    points.push_back(measure(f, b));
  }
  double t0 = 0;
  for (const auto& p : points) {
    if (p.backups == 0 && p.error.empty()) t0 = p.p50;
  }
  std::printf("{\"aggregate\": %d, \"base_ms\": %g, \"tail\": %g, \"alpha\": %g, \"seed\": %llu, \"steps\": %d, "
              "\"warmup\": %d,\n \"points\": [",
              f.aggregate, f.base_ms, f.tail, f.alpha, static_cast<unsigned long long>(f.seed), f.steps, f.warmup);
  for (std::size_t i = 0; i < points.size(); ++i) {
    auto p = points[i];
    for (char& c : p.error) {
      if (c == '"' || c == '\\' || c == '\n') c = '\'';
    }
    const double speedup = t0 > 0 && p.p50 > 0 ? t0 / p.p50 * f.aggregate / (f.aggregate + p.backups) : 0;
    std::printf("%s\n  {\"backups\": %d, \"workers\": %d, \"steps\": %d, \"p10_ms\": %.3f, \"p50_ms\": %.3f, "
                "\"p90_ms\": %.3f, \"normalized_speedup\": %.4f, \"left_out\": %lld, \"error\": \"%s\"}",
                i == 0 ? "" : ",", p.backups, p.workers, p.steps, p.p10, p.p50, p.p90, speedup,
                static_cast<long long>(p.left_out), p.error.c_str());
  }
  std::printf("\n]}\n");
  for (const auto& p : points) {
    if (!p.error.empty()) return 1;
  }
  return 0;
}
