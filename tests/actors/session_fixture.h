// What the actor tests share: a session over a builder's graph, failing the test (with
// the error) when the graph is invalid or the session cannot start; a cluster of PS and
// worker tasks; a step started with run_async and waited for with a timeout; a bounded
// wait for a shutdown that might hang; and partitions for device actors' own protocol.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/cluster.h"
#include "actors/executor.h"
#include "actors/session.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "placement/cluster_spec.h"

namespace troupe::testing {

inline std::unique_ptr<actors::session> make_session(const graph::scope& root,
                                                     actors::session_options options = {}) {
  auto g = root.to_graph();
  if (!g.ok()) FAIL(g.error().to_string());
  auto s = actors::session::create(std::move(*g), std::move(options));
  if (!s.ok()) FAIL(s.error().to_string());
  return std::move(*s);
}

// A cluster of `ps` PS tasks and `workers` worker tasks in this process (2 compute threads).
inline std::shared_ptr<actors::cluster> ps_worker_cluster(int ps, int workers) {
  auto spec = placement::cluster_spec::from_task_counts({{"ps", ps}, {"worker", workers}});
  REQUIRE(spec.ok());
  actors::cluster_options o;
  o.spec = *spec;
  o.compute_threads = 2;
  auto c = actors::cluster::create(o);
  if (!c.ok()) FAIL(c.error().to_string());
  return *c;
}

// A step started with run_async, its answer when it comes, and when that was.
class pending_step {
 public:
  using clock_type = std::chrono::steady_clock;

  pending_step(actors::session& s, const actors::feed_list& feeds, const std::vector<std::string>& fetches,
               const std::vector<std::string>& targets = {}) {
    auto st = state_;
    s.run_async(feeds, fetches, targets, [st](result<std::vector<tensor>> r) {
      std::lock_guard<std::mutex> lock(st->mutex);
      st->value.emplace(std::move(r));
      st->finished = clock_type::now();
      st->cv.notify_all();
    });
  }
  // The step's result, or deadline_exceeded when it has not ended within `timeout`.
  result<std::vector<tensor>> wait(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (!state_->cv.wait_for(lock, timeout, [&] { return state_->value.has_value(); })) {
      return deadline_exceeded_error("the step did not end within ", timeout.count(), " ms");
    }
    return *state_->value;
  }
  // True when the step has ended, or does within `within`.
  bool ended(std::chrono::milliseconds within = std::chrono::milliseconds(0)) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    return state_->cv.wait_for(lock, within, [&] { return state_->value.has_value(); });
  }
  // When it ended. REQUIRES: wait() returned its result.
  clock_type::time_point finished() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->finished;
  }

 private:
  struct state {
    std::mutex mutex;
    std::condition_variable cv;
    std::optional<result<std::vector<tensor>>> value;
    clock_type::time_point finished;
  };
  std::shared_ptr<state> state_ = std::make_shared<state>();
};

// Runs `shutdown` (destroying a session or a cluster) on its own thread, which is not
// the thread that built it (that once hid a hang: actors/spawn.h), and waits up to
// `limit` for it. A shutdown that hangs (~actor_system waiting for an actor that never
// ends, or for a callback that never comes) can be neither failed nor cleaned up in
// this process, so the run aborts, saying what hung, instead of hanging CI.
inline void shutdown_within(std::chrono::seconds limit, const std::string& what, std::function<void()> shutdown) {
  std::promise<void> finished;
  auto future = finished.get_future();
  std::thread t([&] {
    shutdown();
    finished.set_value();
  });
  if (future.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: %s did not finish within %lld s; aborting the test run\n",
                 what.c_str(), static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::abort();
  }
  t.join();
}

// The partition of `root`'s graph that feeds `feeds` and fetches `fetches` (every other
// node runs), for a device actor's prepare_atom.
inline actors::executable_spec spec_of(const graph::scope& root, const std::vector<std::string>& feeds,
                                       const std::vector<std::string>& fetches) {
  auto g = root.to_graph();
  REQUIRE(g.ok());
  auto shared = std::make_shared<const graph::graph>(std::move(*g));
  actors::executable_spec spec;
  spec.graph = shared;
  for (const auto& f : feeds) spec.feeds.push_back(*shared->resolve(f));
  // A step runs every node but the fed ones (as the session prunes).
  for (int id = 0; id < shared->num_nodes(); ++id) {
    if (std::none_of(spec.feeds.begin(), spec.feeds.end(), [&](const graph::endpoint& e) { return e.node == id; })) {
      spec.nodes.push_back(id);
    }
  }
  for (const auto& f : fetches) spec.fetches.push_back(*shared->resolve(f));
  return spec;
}

// -x, computed here.
inline tensor ops_negated(const tensor& x) {
  tensor y(x.type(), x.shape());
  const auto in = x.flat<float>();
  const auto out = y.flat<float>();
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = -in[i];
  return y;
}

// y = -x.
inline actors::executable_spec negate_spec() {
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32);
  ops::neg(root.with_name("y"), x);
  return spec_of(root, {"x:0"}, {"y:0"});
}

// A step that waits in a dequeue from an empty queue.
inline actors::executable_spec parked_spec() {
  auto root = graph::scope::new_root();
  const tf::AttrValue types = graph::attr_value(std::vector<dtype>{dtype::float32});
  auto q = root.with_name("q").add("FIFOQueueV2", {},
                                   {{"component_types", types},
                                    {"shapes", graph::attr_value(std::vector<partial_shape>{partial_shape::scalar()})}});
  root.with_name("dequeue").add("QueueDequeueV2", {q.out(0)}, {{"component_types", types}});
  return spec_of(root, {}, {"dequeue:0"});
}

}  // namespace troupe::testing
