// The TensorFlow paper's Figure 6 on tasks in one process: how step time and throughput
// scale with the number of workers sharing 16 parameter-server tasks.
//
// One actors::cluster holds `--ps` PS tasks and max(--workers) worker tasks. Each worker
// is its own client: a session on the shared cluster whose graph runs on its task, driven
// by its own thread, all workers stepping concurrently (asynchronously: no barrier
// between workers, as the paper's null-step runs). Two models:
//
//   null     each step reads a scalar variable on every PS task (one ReadVariableOp per
//            PS, sent to the worker) and adds the values: the cost of touching 16 tasks;
//   sparse   each step fetches 32 random rows of an embedding of --embedding_mb MB
//            (float32, 64 columns) sharded by rows over the PS tasks: nn::embedding_lookup
//            partitions the ids by shard (mod), runs ResourceGather on each shard's task
//            and stitches the rows back on the worker. Ids are drawn by the client.
//
// For each worker count W, workers 0..W-1 step for --seconds after a short warm-up; the
// program prints one JSON object with, per (model, W): completed steps, batches/s (all
// workers' steps per second), and the 10th, 50th and 90th percentile step times in ms.
// The paper (Abadi et al. 2016, Fig. 6): null step median 1.8 ms with 1 worker, 8.8 ms
// with 100; sparse 5-20 ms.
//
//   build/bench/bench_figure6 --workers=1,2,5,10,25,50,100 --seconds=2 --embedding_mb=1024
//
// With --real=PROGRAM every task is a process of its own instead (a `troupe server` run
// by PROGRAM, started on free loopback ports: cluster::task_processes), and this program
// is the client of them all: the same steps across processes (issue 16).
//
//   build/bench/bench_figure6 --real=build/troupe --workers=1,2,4,8 --embedding_mb=64
//
// Flags: --workers=LIST --ps=16 --seconds=S --warmup=S --embedding_mb=MB --models=null,sparse
//        --compute_threads=N --actor_threads=N (0: the cluster's defaults) --real=PROGRAM.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "actors/cluster.h"
#include "actors/session.h"
#include "cluster/cluster_file.h"
#include "cluster/real_cluster.h"
#include "cluster/task_processes.h"
#include "graph/nn.h"
#include "graph/ops.h"
#include "graph/variables.h"

namespace troupe::bench {
namespace {

using clock_type = std::chrono::steady_clock;

struct flags {
  std::vector<int> workers = {1, 2, 5, 10, 25, 50, 100};
  int ps = 16;
  double seconds = 2.0;
  double warmup = 0.3;
  std::int64_t embedding_mb = 1024;
  std::vector<std::string> models = {"null", "sparse"};
  int compute_threads = 0;
  int actor_threads = 0;
  std::string real;  // the troupe program: tasks in processes of their own
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

bool parse_flags(int argc, char** argv, flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto eq = arg.find('=');
    std::string key = arg.substr(0, eq), value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    try {
      if (key == "--workers") {
        f->workers.clear();
        for (const auto& w : split(value)) f->workers.push_back(std::stoi(w));
      } else if (key == "--ps") {
        f->ps = std::stoi(value);
      } else if (key == "--seconds") {
        f->seconds = std::stod(value);
      } else if (key == "--warmup") {
        f->warmup = std::stod(value);
      } else if (key == "--embedding_mb") {
        f->embedding_mb = std::stoll(value);
      } else if (key == "--models") {
        f->models = split(value);
      } else if (key == "--compute_threads") {
        f->compute_threads = std::stoi(value);
      } else if (key == "--actor_threads") {
        f->actor_threads = std::stoi(value);
      } else if (key == "--real") {
        f->real = value;
      } else {
        std::cerr << "bench_figure6: unknown flag '" << arg << "' (valid: --workers=LIST, --ps=N, "
                  << "--seconds=S, --warmup=S, --embedding_mb=MB, --models=null,sparse, "
                  << "--compute_threads=N, --actor_threads=N, --real=PROGRAM)\n";
        return false;
      }
    } catch (const std::exception&) {
      std::cerr << "bench_figure6: bad value in '" << arg << "'\n";
      return false;
    }
  }
  std::sort(f->workers.begin(), f->workers.end());
  if (f->workers.empty() || f->workers.front() < 1 || f->ps < 1 || f->seconds <= 0 ||
      f->embedding_mb < 1) {
    std::cerr << "bench_figure6: need worker counts >= 1, --ps >= 1, --seconds > 0, "
                 "--embedding_mb >= 1\n";
    return false;
  }
  return true;
}

constexpr std::int64_t k_columns = 64;
constexpr std::int64_t k_rows_per_step = 32;

std::string ps_device(int i) { return "/job:ps/task:" + std::to_string(i); }

// The graph worker `w` runs: variables on the PS tasks (shared by name across the
// workers' graphs), the step's computation on the worker. Fetch "null_step" or
// "sparse_step"; the first worker's session also runs "init".
result<graph::graph> worker_graph(const flags& f, std::int64_t vocab, bool with_sparse) {
  auto root = graph::scope::new_root();
  std::vector<graph::variable> all;
  std::vector<graph::output> reads;
  for (int i = 0; i < f.ps; ++i) {
    auto v = graph::make_variable(root.with_device(ps_device(i)), "scalar_" + std::to_string(i), {},
                                  dtype::float32, ops::scalar(root.with_device(ps_device(i)), 1.0f));
    all.push_back(v);
    reads.push_back(v.value);
  }
  ops::add_n(root.with_name("null_step"), reads);
  if (with_sparse) {
    // The shards of nn::make_embedding, each on its own PS task (rows as its "mod" split).
    std::vector<graph::variable> shards;
    for (int i = 0; i < f.ps; ++i) {
      std::int64_t rows = vocab / f.ps + (i < vocab % f.ps ? 1 : 0);
      auto s = root.with_device(ps_device(i)).sub("embedding");
      auto v = graph::make_variable(s, "part_" + std::to_string(i), {rows, k_columns}, dtype::float32,
                                    init::zeros_initializer());
      shards.push_back(v);
      all.push_back(v);
    }
    auto ids = ops::placeholder(root.with_name("ids"), dtype::int64, {k_rows_per_step});
    auto rows = nn::embedding_lookup(root, shards, ids, "mod");
    ops::identity(root.with_name("sparse_step"), rows);
  }
  graph::global_variables_initializer(root, all);
  return root.to_graph();
}

struct point {
  std::string model;
  int workers = 0;
  std::int64_t steps = 0;
  double batches_per_s = 0, p10_ms = 0, p50_ms = 0, p90_ms = 0;
  std::string error;
};

double percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  double pos = q * static_cast<double>(sorted.size() - 1);
  auto lo = static_cast<std::size_t>(pos);
  std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

// Workers 0..w-1 step concurrently; each records its step times after the warm-up.
point measure(const flags& f, std::vector<std::unique_ptr<actors::session>>& sessions,
              const std::string& model, int w, std::int64_t vocab) {
  point p;
  p.model = model;
  p.workers = w;
  const std::string fetch = model + "_step";
  std::vector<std::vector<double>> times(static_cast<std::size_t>(w));
  std::vector<std::string> errors(static_cast<std::size_t>(w));
  std::barrier start(w + 1);
  clock_type::time_point warm_until, until;
  std::vector<std::thread> threads;
  for (int i = 0; i < w; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937_64 rng(1000 + static_cast<std::uint64_t>(i));
      std::uniform_int_distribution<std::int64_t> id(0, vocab - 1);
      std::vector<actors::feed_list> batches;
      for (int b = 0; b < (model == "sparse" ? 64 : 1); ++b) {
        actors::feed_list feeds;
        if (model == "sparse") {
          tensor ids(dtype::int64, {k_rows_per_step});
          for (auto& x : ids.flat<std::int64_t>()) x = id(rng);
          feeds.emplace_back("ids", ids);
        }
        batches.push_back(std::move(feeds));
      }
      start.arrive_and_wait();
      auto& mine = times[static_cast<std::size_t>(i)];
      for (std::size_t n = 0;; ++n) {
        auto t0 = clock_type::now();
        if (t0 >= until) break;
        auto r = sessions[static_cast<std::size_t>(i)]->run(batches[n % batches.size()], {fetch});
        auto t1 = clock_type::now();
        if (!r.ok()) {
          errors[static_cast<std::size_t>(i)] = r.error().to_string();
          break;
        }
        if (t0 >= warm_until) mine.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    });
  }
  warm_until = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                       std::chrono::duration<double>(f.warmup));
  until = warm_until + std::chrono::duration_cast<clock_type::duration>(
                           std::chrono::duration<double>(f.seconds));
  start.arrive_and_wait();
  for (auto& t : threads) t.join();
  std::vector<double> all;
  for (auto& t : times) all.insert(all.end(), t.begin(), t.end());
  for (auto& e : errors) {
    if (!e.empty()) p.error = e;
  }
  std::sort(all.begin(), all.end());
  p.steps = static_cast<std::int64_t>(all.size());
  p.batches_per_s = static_cast<double>(all.size()) / f.seconds;
  p.p10_ms = percentile(all, 0.1);
  p.p50_ms = percentile(all, 0.5);
  p.p90_ms = percentile(all, 0.9);
  return p;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
      continue;
    }
    out += c;
  }
  return out + "\"";
}

int run(const flags& f) {
  const int max_workers = f.workers.back();
  const bool with_sparse = std::find(f.models.begin(), f.models.end(), "sparse") != f.models.end();
  const std::int64_t vocab = f.embedding_mb * 1024 * 1024 / (k_columns * 4);
  auto spec = placement::cluster_spec::from_task_counts({{"ps", f.ps}, {"worker", max_workers}});
  if (!spec.ok()) {
    std::cerr << spec.error().to_string() << "\n";
    return 1;
  }
  actors::cluster_options co;
  // --real: a server process per task; this process is their client (the servers stop
  // before their directory goes).
  const std::string dir = (std::filesystem::temp_directory_path() / ("troupe-figure6-" + std::to_string(::getpid()))).string();
  struct remove_dir {
    std::string path;
    ~remove_dir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } cleanup{f.real.empty() ? std::string() : dir};
  std::unique_ptr<cluster::task_processes> servers;
  if (!f.real.empty()) {
    std::filesystem::create_directories(dir);
    std::ofstream file(dir + "/cluster.pbtxt");
    for (const auto& [job, n] : {std::pair<std::string, int>{"ps", f.ps}, {"worker", max_workers}}) {
      file << "job { name: \"" << job << "\"";
      for (int t = 0; t < n; ++t) file << " tasks { key: " << t << " value: \"127.0.0.1:" << cluster::free_loopback_port() << "\" }";
      file << " }\n";
    }
    file.close();
    auto loaded = cluster::cluster_file::load(dir + "/cluster.pbtxt");
    if (!loaded.ok()) {
      std::cerr << loaded.error().to_string() << "\n";
      return 1;
    }
    cluster::task_processes_options po;
    po.executable = f.real;
    po.log_dir = dir;
    auto started = cluster::task_processes::start(*loaded, po);
    if (!started.ok()) {
      std::cerr << started.error().to_string() << "\n";
      return 1;
    }
    servers = std::move(*started);
    auto o = cluster::process_cluster_options(*loaded, {}, "bench_figure6");
    if (!o.ok()) {
      std::cerr << o.error().to_string() << "\n";
      return 1;
    }
    co = std::move(*o);
  }
  co.spec = *spec;
  co.compute_threads = f.compute_threads;
  co.actor_threads = f.actor_threads;
  auto c = actors::cluster::create(co);
  if (!c.ok()) {
    std::cerr << c.error().to_string() << "\n";
    return 1;
  }
  auto setup_start = clock_type::now();
  std::vector<std::unique_ptr<actors::session>> sessions;
  for (int w = 0; w < max_workers; ++w) {
    auto g = worker_graph(f, vocab, with_sparse);
    if (!g.ok()) {
      std::cerr << g.error().to_string() << "\n";
      return 1;
    }
    actors::session_options so;
    so.cluster = *c;
    so.default_device = "/job:worker/task:" + std::to_string(w);
    auto s = actors::session::create(std::move(*g), so);
    if (!s.ok()) {
      std::cerr << s.error().to_string() << "\n";
      return 1;
    }
    sessions.push_back(std::move(*s));
  }
  if (auto r = sessions.front()->run({}, {}, {"init"}); !r.ok()) {
    std::cerr << "init: " << r.error().to_string() << "\n";
    return 1;
  }
  double setup_s = std::chrono::duration<double>(clock_type::now() - setup_start).count();

  std::vector<point> points;
  for (const auto& model : f.models) {
    if (model != "null" && model != "sparse") {
      std::cerr << "bench_figure6: unknown model '" << model << "' (valid: null, sparse)\n";
      return 1;
    }
    for (int w : f.workers) {
      points.push_back(measure(f, sessions, model, w, vocab));
      const point& p = points.back();
      std::fprintf(stderr, "%-6s W=%-3d steps %-7lld %9.1f batches/s  p10 %7.3f  p50 %7.3f  p90 %7.3f ms%s%s\n",
                   p.model.c_str(), p.workers, static_cast<long long>(p.steps), p.batches_per_s,
                   p.p10_ms, p.p50_ms, p.p90_ms, p.error.empty() ? "" : "  error: ", p.error.c_str());
    }
  }
  std::printf("{\"mode\": \"%s\", \"ps\": %d, \"seconds\": %g, \"embedding_mb\": %lld, \"embedding_rows\": %lld, "
              "\"embedding_columns\": %lld, \"rows_per_step\": %lld, \"compute_threads\": %d, "
              "\"setup_s\": %.3f, \"points\": [",
              f.real.empty() ? "IN_PROCESS" : "REAL", f.ps, f.seconds, static_cast<long long>(f.embedding_mb), static_cast<long long>(vocab),
              static_cast<long long>(k_columns), static_cast<long long>(k_rows_per_step),
              (*c)->pool().num_threads(), setup_s);
  for (std::size_t i = 0; i < points.size(); ++i) {
    const point& p = points[i];
    std::printf("%s\n  {\"model\": \"%s\", \"workers\": %d, \"steps\": %lld, \"batches_per_s\": %.3f, "
                "\"p10_ms\": %.4f, \"p50_ms\": %.4f, \"p90_ms\": %.4f, \"error\": %s}",
                i == 0 ? "" : ",", p.model.c_str(), p.workers, static_cast<long long>(p.steps),
                p.batches_per_s, p.p10_ms, p.p50_ms, p.p90_ms, json_string(p.error).c_str());
  }
  std::printf("\n]}\n");
  for (const auto& p : points) {
    if (!p.error.empty()) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) {
  troupe::bench::flags f;
  if (!troupe::bench::parse_flags(argc, argv, &f)) return 2;
  return troupe::bench::run(f);
}
