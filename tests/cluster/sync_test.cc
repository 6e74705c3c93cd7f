// Synchronous replication (train::sync_replicas driven by cluster::sync_coordinator):
// without backups a global step equals one step of a single worker on the concatenation
// of the workers' batches; the same inputs give the same bits whatever the thread timing;
// with backups a slow worker's gradients are left out and no step waits for it; stale
// gradients are never applied and the global step advances once per update.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "actors/cluster.h"
#include "actors/session.h"
#include "cluster/sync_coordinator.h"
#include "graph/attr.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "graph/variables.h"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

constexpr int k_batch = 4;

// Worker r's batch at step k: inputs x [4, 4], targets t [4, 3], embedding ids [4].
struct batch {
  tensor x, t, ids;
};
batch batch_of(int r, std::int64_t k) {
  std::mt19937 rng(static_cast<std::uint32_t>(1000 * r + k));
  std::uniform_real_distribution<float> uniform(-1, 1);
  batch b{tensor(dtype::float32, {k_batch, 4}), tensor(dtype::float32, {k_batch, 3}), tensor(dtype::int32, {k_batch})};
  for (auto& v : b.x.flat<float>()) v = uniform(rng);
  for (auto& v : b.t.flat<float>()) v = uniform(rng);
  for (auto& v : b.ids.flat<std::int32_t>()) v = static_cast<std::int32_t>(rng() % 10);
  return b;
}
tensor concat_rows(const std::vector<tensor>& parts) {
  std::vector<std::int64_t> dims = parts[0].shape().dims();
  dims[0] = 0;
  for (const auto& p : parts) dims[0] += p.dim(0);
  tensor out(parts[0].type(), tensor_shape(dims));
  auto* dst = static_cast<char*>(out.raw_data());
  for (const auto& p : parts) {
    std::memcpy(dst, p.raw_data(), p.byte_size());
    dst += p.byte_size();
  }
  return out;
}

// The model: an embedding table (read by ResourceGather: a sparse gradient) added to the
// inputs, then a dense layer; loss = mean squared error. Variables on the PS.
struct model {
  graph::scope root = graph::scope::new_root();
  graph::variable_collection vars;
  graph::output loss;
  graph::variable step;
};

std::unique_ptr<model> build_model(const std::string& worker) {
  auto m = std::make_unique<model>();
  const auto ps = m->root.with_device("/job:ps/task:0");
  const auto w = m->root.with_device(worker);
  auto emb = graph::make_variable(ps, "emb", {10, 4}, dtype::float32, init::random_normal_initializer(0.5), 7);
  auto kernel = graph::make_variable(ps, "kernel", {4, 3}, dtype::float32, init::random_normal_initializer(0.5), 8);
  auto bias = graph::make_variable(ps, "bias", {3}, dtype::float32, init::zeros_initializer());
  for (const auto* v : {&emb, &kernel, &bias}) m->vars.add(*v);
  m->step = train::make_global_step(ps, m->vars);
  auto x = ops::placeholder(w.with_name("x"), dtype::float32, partial_shape({-1, 4}));
  auto t = ops::placeholder(w.with_name("t"), dtype::float32, partial_shape({-1, 3}));
  auto ids = ops::placeholder(w.with_name("ids"), dtype::int32, partial_shape({-1}));
  auto rows = m->root.add("ResourceGather", {emb.handle, ids}, {{"dtype", graph::attr_value(dtype::float32)}}).out();
  auto h = ops::add(w, x, rows);
  auto pred = ops::add(w, ops::matmul(w, h, kernel.value), bias.value);
  auto diff = ops::sub(w, pred, t);
  m->loss = ops::mean(w, ops::mul(w, diff, diff), ops::constant(w, tensor::from_vector<std::int32_t>({0, 1})));
  return m;
}

struct recorder final : actors::sync_observer {
  void gradient(const std::string&, const std::string& source, std::int64_t local_step, std::int64_t global_step,
                bool kept) override {
    std::lock_guard<std::mutex> lock(mutex);
    if (!kept) ++dropped[source];
    if (!kept && local_step >= global_step) ++dropped_not_stale;
  }
  void aggregated(const std::string& acc, std::int64_t step, const std::vector<std::string>& sources) override {
    std::lock_guard<std::mutex> lock(mutex);
    per_take[{acc, step}] = sources;
  }
  std::mutex mutex;
  std::map<std::string, int> dropped;
  int dropped_not_stale = 0;
  std::map<std::pair<std::string, std::int64_t>, std::vector<std::string>> per_take;
};

struct sync_run {
  std::map<std::string, tensor> values;  // emb, kernel, bias, global_step
  std::int64_t updates = 0;
};

// Trains `steps` synchronous steps with `workers` replicas aggregating `aggregate` each;
// worker `slow` (if >= 0) sleeps `delay` before each of its steps. With `lose_at` >= 0,
// the last worker's gradient of that step is lost once (it waits for its token without
// handing it in), and the coordinator gives a turn up after `stall` and logs to `log`.
sync_run train_sync(int workers, int aggregate, std::int64_t steps, recorder* events, int slow = -1,
                    std::chrono::milliseconds delay = 0ms, std::int64_t lose_at = -1,
                    std::chrono::milliseconds stall = 0ms, std::vector<std::string>* log = nullptr) {
  auto spec = placement::cluster_spec::from_task_counts({{"ps", 1}, {"worker", workers}});
  REQUIRE(spec.ok());
  actors::cluster_options co;
  co.spec = *spec;
  co.compute_threads = 2;
  co.sync_watcher = events;
  auto cluster = actors::cluster::create(co);
  REQUIRE(cluster.ok());
  const auto sync = train::sync_replicas(train::gradient_descent(0.1), aggregate, workers);
  std::vector<std::unique_ptr<actors::session>> sessions;
  std::vector<train::sync_replicas_ops> ops;
  std::unique_ptr<model> chief;
  for (int r = 0; r <= workers; ++r) {
    // The last one is the coordinator's copy of replica 0's graph.
    const int replica = r == workers ? 0 : r;
    auto m = build_model(str_cat("/job:worker/task:", replica));
    auto o = train::minimize(m->root, sync, m->loss, m->vars, m->step, replica);
    REQUIRE(o.ok());
    graph::global_variables_initializer(m->root, m->vars);
    if (r == workers) {
      ops.push_back(*o);
      chief = std::move(m);
      break;
    }
    auto g = m->root.to_graph();
    REQUIRE(g.ok());
    actors::session_options so;
    so.cluster = *cluster;
    so.default_device = str_cat("/job:worker/task:", r);
    auto s = actors::session::create(std::move(*g), so);
    REQUIRE(s.ok());
    sessions.push_back(std::move(*s));
    ops.push_back(*o);
  }
  auto init = sessions[0]->run({}, {}, {"init"});
  if (!init.ok()) FAIL(init.error().to_string());
  auto chief_graph = chief->root.to_graph();
  REQUIRE(chief_graph.ok());
  cluster::sync_coordinator_options co2;
  co2.last_step = steps;
  co2.default_device = "/job:worker/task:0";
  co2.stall_timeout = stall;
  std::mutex log_mutex;
  if (lose_at >= 0) {
    co2.retry = [](const status&) { return true; };
    co2.log = [&](const std::string& line) {
      std::lock_guard<std::mutex> lock(log_mutex);
      if (log != nullptr) log->push_back(line);
    };
  }
  auto coordinator = cluster::sync_coordinator::create(*cluster, *chief_graph, ops.back(), co2);
  REQUIRE(coordinator.ok());
  REQUIRE((*coordinator)->start().ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      std::int64_t local = 0;
      bool lost = false;
      while (local < steps) {
        if (r == slow) std::this_thread::sleep_for(delay);
        if (r == workers - 1 && local == lose_at && !lost) {
          lost = true;  // the gradient of this step never reaches the accumulators
          auto next = sessions[static_cast<std::size_t>(r)]->run({}, {ops[r].after_token.name()});
          if (!next.ok()) {
            ++failures;
            return;
          }
          local = next->at(0).scalar_value<std::int64_t>();
          continue;
        }
        batch b = batch_of(r, local);
        auto out = sessions[static_cast<std::size_t>(r)]->run(
            {{"x", b.x}, {"t", b.t}, {"ids", b.ids}, {ops[r].local_step.name(), tensor::scalar<std::int64_t>(local)}},
            {ops[r].next_local_step.name()}, {ops[r].train.node});
        if (!out.ok()) {
          ++failures;
          return;
        }
        local = out->at(0).scalar_value<std::int64_t>();
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE((*coordinator)->wait().ok());
  CHECK(failures == 0);
  sync_run out;
  out.updates = (*coordinator)->updates();
  auto values = sessions[0]->run({}, {"emb/Read/ReadVariableOp", "kernel/Read/ReadVariableOp", "bias/Read/ReadVariableOp",
                                      "global_step/Read/ReadVariableOp"});
  REQUIRE(values.ok());
  out.values = {{"emb", values->at(0)}, {"kernel", values->at(1)}, {"bias", values->at(2)}, {"global_step", values->at(3)}};
  return out;
}

// The same model trained by one worker on the concatenation of every worker's batches.
std::map<std::string, tensor> train_concatenated(int workers, std::int64_t steps) {
  auto m = build_model("/job:worker/task:0");
  auto train_op = train::minimize(m->root, train::gradient_descent(0.1), m->loss, m->vars, m->step);
  REQUIRE(train_op.ok());
  graph::global_variables_initializer(m->root, m->vars);
  auto g = m->root.to_graph();
  REQUIRE(g.ok());
  actors::session_options so;
  auto spec = placement::cluster_spec::from_task_counts({{"ps", 1}, {"worker", 1}});
  REQUIRE(spec.ok());
  actors::cluster_options co;
  co.spec = *spec;
  co.compute_threads = 2;
  so.cluster = *actors::cluster::create(co);
  auto s = actors::session::create(std::move(*g), so);
  REQUIRE(s.ok());
  REQUIRE((*s)->run({}, {}, {"init"}).ok());
  for (std::int64_t k = 0; k < steps; ++k) {
    std::vector<tensor> xs, ts, ids;
    for (int r = 0; r < workers; ++r) {
      batch b = batch_of(r, k);
      xs.push_back(b.x), ts.push_back(b.t), ids.push_back(b.ids);
    }
    REQUIRE((*s)->run({{"x", concat_rows(xs)}, {"t", concat_rows(ts)}, {"ids", concat_rows(ids)}}, {},
                      {train_op->node})
                .ok());
  }
  auto values = (*s)->run({}, {"emb/Read/ReadVariableOp", "kernel/Read/ReadVariableOp", "bias/Read/ReadVariableOp",
                               "global_step/Read/ReadVariableOp"});
  REQUIRE(values.ok());
  return {{"emb", values->at(0)}, {"kernel", values->at(1)}, {"bias", values->at(2)}, {"global_step", values->at(3)}};
}

void check_close(const tensor& a, const tensor& b, const std::string& what) {
  INFO(what << ": " << a.debug_string(12) << " vs " << b.debug_string(12));
  REQUIRE(a.shape() == b.shape());
  auto x = a.flat<float>();
  auto y = b.flat<float>();
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(x[i] == Approx(y[i]).margin(1e-5).epsilon(1e-4));
}

}  // namespace

TEST_CASE("without backups, a SYNC step is one step on the concatenated batches, and bitwise repeatable",
          "[sync]") {
  const int workers = 3;
  const std::int64_t steps = 5;
  recorder first_events, second_events;
  sync_run first = train_sync(workers, workers, steps, &first_events);
  CHECK(first.updates == steps);
  CHECK(first.values["global_step"].scalar_value<std::int64_t>() == steps);
  auto reference = train_concatenated(workers, steps);
  CHECK(reference["global_step"].scalar_value<std::int64_t>() == steps);
  for (const char* v : {"emb", "kernel", "bias"}) check_close(first.values[v], reference[v], v);
  // Every take of every accumulator used each worker once, in worker order.
  REQUIRE(first_events.per_take.size() == 3 * steps);
  for (const auto& [key, sources] : first_events.per_take) {
    CHECK(sources == std::vector<std::string>{"/job:worker/task:0", "/job:worker/task:1", "/job:worker/task:2"});
  }
  CHECK(first_events.dropped.empty());
  // The same inputs, another thread timing (the workers start in another order): the same bits.
  sync_run second = train_sync(workers, workers, steps, &second_events, /*slow=*/0, 3ms);
  for (const char* v : {"emb", "kernel", "bias"}) CHECK(second.values[v].equals(first.values[v]));
}

TEST_CASE("a lost gradient stalls a SYNC step only until the stall timeout; every replica computes it again, and "
          "the run ends as without the loss",
          "[sync]") {
  recorder plain_events, lossy_events;
  const sync_run plain = train_sync(2, 2, 6, &plain_events);
  std::vector<std::string> log;
  const sync_run lossy = train_sync(2, 2, 6, &lossy_events, -1, 0ms, /*lose_at=*/3, /*stall=*/300ms, &log);
  REQUIRE_FALSE(log.empty());
  CHECK(log.front().find("did not all come within 300 ms") != std::string::npos);
  for (const char* name : {"emb", "kernel", "bias", "global_step"}) {
    INFO(name);
    const tensor& a = plain.values.at(name);
    const tensor& b = lossy.values.at(name);
    REQUIRE(a.byte_size() == b.byte_size());
    CHECK(std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.byte_size())) == 0);
  }
}

TEST_CASE("with a backup worker, a slow worker's gradients are left out and no step waits for it", "[sync]") {
  const int workers = 3;
  const std::int64_t steps = 12;
  recorder events;
  sync_run run = train_sync(workers, 2, steps, &events, /*slow=*/2, 150ms);
  CHECK(run.updates == steps);
  CHECK(run.values["global_step"].scalar_value<std::int64_t>() == steps);
  // Each aggregate is of exactly two gradients; the slow worker's never arrive in time
  // for most steps (it sleeps 150 ms per step, the others take a few).
  int slow_used = 0;
  for (const auto& [key, sources] : events.per_take) {
    CHECK(sources.size() == 2);
    slow_used += static_cast<int>(std::count(sources.begin(), sources.end(), "/job:worker/task:2"));
  }
  CHECK(slow_used < static_cast<int>(events.per_take.size()) / 2);
  CHECK(events.dropped["/job:worker/task:2"] > 0);
  // Every dropped gradient was stale or late for its step: never one of the current step
  // that was then applied.
  CHECK(events.dropped_not_stale == 0);
}
