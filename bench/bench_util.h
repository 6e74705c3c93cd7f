// Helpers shared by the model and runtime benchmarks: building a session, random input
// batches, the smoke-size switch, and the counters every training benchmark reports.
//
// Every model benchmark times one training step (session::run of the train op with the
// batch fed as placeholders; plain SGD with fused dense-layer updates, single_device_sgd)
// and reports:
//   real_time          ms per step (Unit(kMillisecond), UseRealTime)
//   items_per_second   examples (or words, for the LSTM) per second
//   threads            the compute pool's size, so a report can say which split it used
//
// TROUPE_BENCH_PROFILE=1 makes run_training print, after each benchmark, where its
// timed steps went: every op's wall time per step (its kernels' spans, summed over its
// nodes), largest first. It traces every kernel, so its figures are a little slower.
//
// TROUPE_BENCH_SMOKE=1 shrinks every model (batch, image and vocabulary sizes) so that
// bench/smoke.sh can prove each program still builds and runs its graph in seconds; the
// figures of a smoke run mean nothing.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "actors/cluster.h"
#include "actors/session.h"
#include "actors/tracing.h"
#include "core/tensor.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "graph/variables.h"

namespace troupe::bench {

inline bool smoke() {
  const char* v = std::getenv("TROUPE_BENCH_SMOKE");
  return v != nullptr && std::string(v) == "1";
}

// n normally, small under TROUPE_BENCH_SMOKE.
inline std::int64_t size(std::int64_t n, std::int64_t smoke_n) { return smoke() ? smoke_n : n; }

// Skips the benchmark with the status's message; true when it did.
inline bool skip_on_error(benchmark::State& state, const status& s) {
  if (s.ok()) return false;
  state.SkipWithError(s.to_string().c_str());
  return true;
}

template <class T>
bool skip_on_error(benchmark::State& state, const result<T>& r) {
  if (r.ok()) return false;
  state.SkipWithError(r.error().to_string().c_str());
  return true;
}

// Per-op wall time of kernel spans (TROUPE_BENCH_PROFILE): recording starts with
// start() and stops with stop().
class op_profile final : public actors::step_tracer {
 public:
  void start() { recording_ = true; }
  void stop() { recording_ = false; }
  void node_span(const std::string&, const std::string&, const std::string&, const std::string& op, std::int64_t,
                 clock::time_point start, clock::time_point end, const node_detail&) override {
    if (!recording_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto& entry = ops_[op];
    entry.first += std::chrono::duration<double, std::milli>(end - start).count();
    entry.second += 1;
  }
  void transfer_sent(const std::string&, std::int64_t, const std::string&, const std::string&,
                     clock::time_point) override {}
  void transfer_received(const std::string&, std::int64_t, const std::string&, const std::string&,
                         clock::time_point) override {}
  // Prints each op's ms per step (and node runs per step), largest first.
  void print(const std::string& title, std::int64_t steps) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (const auto& [op, entry] : ops_) {
      rows.emplace_back(entry.first / static_cast<double>(steps), op);
      total += entry.first;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "%s: kernel spans, ms per step (%.2f in all, over %lld steps)\n", title.c_str(),
                 total / static_cast<double>(steps), static_cast<long long>(steps));
    for (const auto& [ms, op] : rows) {
      std::fprintf(stderr, "  %-40s %8.3f  (%lld runs)\n", op.c_str(), ms,
                   static_cast<long long>(ops_[op].second / steps));
    }
  }

 private:
  std::atomic<bool> recording_{false};
  std::mutex mutex_;
  std::map<std::string, std::pair<double, std::int64_t>> ops_;
};

inline bool profiling() {
  const char* v = std::getenv("TROUPE_BENCH_PROFILE");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

// A session on a private local cluster whose compute pool has `threads` threads; CAF gets
// one scheduler thread (actors only schedule work), so `threads` is the whole budget.
// With a tracer, the cluster reports every kernel span to it (it must outlive the session).
inline result<std::unique_ptr<actors::session>> local_session(const graph::scope& root, int threads,
                                                              actors::step_tracer* tracer = nullptr) {
  auto g = root.to_graph();
  if (!g.ok()) return g.error();
  actors::session_options options;
  if (tracer != nullptr) {
    actors::cluster_options cluster;
    cluster.compute_threads = threads;
    cluster.actor_threads = 1;
    cluster.tracer = tracer;
    auto made = actors::cluster::create(std::move(cluster));
    if (!made.ok()) return made.error();
    options.cluster = *made;
  }
  options.compute_threads = threads;
  options.actor_threads = 1;
  return actors::session::create(std::move(*g), options);
}

inline tensor uniform_tensor(tensor_shape shape, std::mt19937& rng, float low = -1.0f,
                             float high = 1.0f) {
  tensor t(dtype::float32, std::move(shape));
  std::uniform_real_distribution<float> dist(low, high);
  for (float& x : t.flat<float>()) x = dist(rng);
  return t;
}

inline tensor label_tensor(std::int64_t n, std::int32_t classes, std::mt19937& rng) {
  tensor t(dtype::int32, {n});
  std::uniform_int_distribution<std::int32_t> dist(0, classes - 1);
  for (auto& x : t.flat<std::int32_t>()) x = dist(rng);
  return t;
}

// mean(SparseSoftmaxCrossEntropyWithLogits(logits, labels)), named "loss".
inline graph::output mean_xent(const graph::scope& root, const graph::output& logits,
                               const graph::output& labels) {
  auto xent = ops::sparse_softmax_cross_entropy_with_logits(root, logits, labels);
  return ops::mean(root.with_name("loss"), xent.out(0),
                   ops::constant(root, tensor::from_vector<std::int32_t>({0})));
}

// Sets the counters every training benchmark reports (see the top of this file).
inline void set_step_counters(benchmark::State& state, std::int64_t items_per_step,
                              int threads) {
  state.SetItemsProcessed(state.iterations() * items_per_step);
  state.counters["threads"] = threads;
  state.counters["items_per_step"] = static_cast<double>(items_per_step);
}

// A model ready to train: its graph, the op that initializes its variables, the train op,
// and a few batches of feeds that steps cycle through (made once, outside the timing).
struct training_model {
  graph::scope root = graph::scope::new_root();
  std::string init_op;
  std::string train_op;
  std::vector<actors::feed_list> batches;
  std::int64_t items_per_step = 0;
};

// Plain SGD as a single-device program should configure it: dense layers' updates fused
// with their gradients' products (train::optimizer::fuse_matmul_updates).
inline train::optimizer single_device_sgd(double learning_rate) {
  train::optimizer sgd = train::gradient_descent(learning_rate);
  sgd.fuse_matmul_updates = true;
  return sgd;
}

// Finishes an image classifier's training_model: plain SGD (lr 0.01) on `loss` over
// `vars`, the initializer, and `num_batches` batches of uniform [0, 1) images of
// `image_shape` fed to "<images>" with labels in [0, classes) fed to "labels" (seed 42).
// A builder error is recorded in m.root (run_training then skips the benchmark).
inline void finish_classifier(training_model& m, graph::variable_collection& vars,
                              const graph::output& loss, const std::string& images,
                              tensor_shape image_shape, std::int32_t classes, int num_batches) {
  auto train_op = train::minimize(m.root, single_device_sgd(0.01), loss, vars);
  if (!train_op.ok()) {
    m.root.record(train_op.error());
    return;
  }
  m.train_op = train_op->node;
  m.init_op = graph::global_variables_initializer(m.root, vars).node;
  const std::int64_t batch = image_shape.dim(0);
  std::mt19937 rng(42);
  for (int i = 0; i < num_batches; ++i) {
    m.batches.push_back({{images, uniform_tensor(image_shape, rng, 0.0f, 1.0f)},
                         {"labels", label_tensor(batch, classes, rng)}});
  }
  m.items_per_step = batch;
}

// Times one training step of `m` per iteration on a session with `threads` compute
// threads, after initializing the variables and one untimed warm-up step (which prepares
// the partitions and fills the allocator's caches).
inline void run_training(benchmark::State& state, const training_model& m, int threads) {
  if (skip_on_error(state, m.root.get_status())) return;
  std::unique_ptr<op_profile> profile = profiling() ? std::make_unique<op_profile>() : nullptr;
  auto s = local_session(m.root, threads, profile.get());
  if (skip_on_error(state, s)) return;
  if (skip_on_error(state, (*s)->run({}, {}, {m.init_op}))) return;
  if (skip_on_error(state, (*s)->run(m.batches.front(), {}, {m.train_op}))) return;
  if (profile) profile->start();
  std::size_t next = 0;
  for (auto _ : state) {
    auto r = (*s)->run(m.batches[next], {}, {m.train_op});
    if (skip_on_error(state, r)) return;
    next = (next + 1) % m.batches.size();
  }
  if (profile) {
    profile->stop();
    profile->print("profile, " + std::to_string(threads) + " compute threads", static_cast<std::int64_t>(state.iterations()));
  }
  set_step_counters(state, m.items_per_step, threads);
}

}  // namespace troupe::bench
