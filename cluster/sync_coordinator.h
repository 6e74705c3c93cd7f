// sync_coordinator: the chief of synchronous replication (train::sync_replicas), run by
// the cluster's supervision layer rather than by a worker, so that no worker's death
// stops the updates.
//
//   auto ops = train::minimize(root, sync, loss, vars, step, /*replica=*/0);   // in graph g
//   cluster::sync_coordinator_options o;
//   o.last_step = 1000;
//   o.gate = &gate;                 // the checkpoints' and recoveries' cut
//   o.step_done = [&](std::int64_t step) { ... };
//   auto c = cluster::sync_coordinator::create(the_cluster, g, *ops, o);
//   (*c)->start();                  // accumulators at the global step; the loop begins
//   ... workers run ops.train, feeding local_step, until next_local_step >= last_step ...
//   status s = (*c)->wait();        // the last update done (or why not)
//
// Its loop, on a thread of its own, one global step per turn:
//  1. takes every accumulator's aggregate (waits for replicas_to_aggregate gradients of
//     the step; outside the gate, so a checkpoint or a recovery never waits for a worker);
//  2. inside the gate: applies the aggregates and advances the global step (unless a
//     recovery rolled the variables back since 1: then the aggregates are dropped), and
//     gives a token to every replica whose token queue is empty;
//  3. calls step_done.
// A turn whose gradients do not all come within the stall timeout (one was lost: a
// liveness guard, logged) fails the same way.
// A failed turn that `retry` allows (a task went down: the supervisor restarts it) resets
// the accumulators to the global step and hands out tokens again, inside the gate (so
// after the recovery; the reset itself is done again while `retry` allows its failure,
// and so is start()'s), so that every replica computes the step again; one it does not
// allow ends the loop with that error. The reset reads the global step: one past the
// last the coordinator knew means the failed turn's update went in all the same (its
// answer was lost), and it counts as done (step_done; the last one ends the loop).
// Replicas should apply their gradients inside the
// gate too (train::sync_replicas_ops::apply) and wait for tokens outside it. At the
// end (last_step reached, or stop()), every replica gets a token, so none waits.
//
// Thread safety: rolled_back may be called from any thread (a supervisor's recovery);
// the rest from the thread that owns the coordinator.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/cluster.h"
#include "actors/session.h"
#include "cluster/step_gate.h"
#include "core/env.h"
#include "core/retry.h"
#include "core/status.h"
#include "graph/graph.h"
#include "graph/train.h"

namespace troupe::cluster {

struct sync_coordinator_options {
  std::string default_device;  // where the coordinator's own nodes go; empty: the session's default
  step_gate* gate = nullptr;   // updates pass through it (may be null)
  std::int64_t last_step = 0;  // the loop ends once the global step reaches it
  std::function<void(std::int64_t)> step_done;      // after each update, with the new global step
  // After each update, before the replicas get their tokens (outside the gate; it may
  // close the gate): the moment no replica is ahead of the global step, for a
  // checkpoint's cut (checkpoint_manager::cut_if_due). Null: none.
  std::function<void(std::int64_t)> before_tokens;
  std::function<bool(const status&)> retry;         // may a failed step be tried again? null: never
  std::function<void(const std::string&)> log;
  // How long a turn waits for the step's gradients before it gives the step up as lost
  // (a failed turn, which `retry` may allow: every replica computes the step again).
  // 0: adaptive, 50 times the average turn so far and at least 5 s.
  std::chrono::milliseconds stall_timeout{0};
};

class sync_coordinator {
 public:
  // `g` holds `ops` (a replica's graph: every replica's token ops are in each).
  static result<std::unique_ptr<sync_coordinator>> create(std::shared_ptr<actors::cluster> cluster,
                                                          const graph::graph& g,
                                                          const train::sync_replicas_ops& ops,
                                                          sync_coordinator_options options);
  ~sync_coordinator();  // stops and joins
  sync_coordinator(const sync_coordinator&) = delete;
  sync_coordinator& operator=(const sync_coordinator&) = delete;

  // Sets every accumulator to the global step and starts the loop.
  status start();
  // The variables were restored to `step` (ROLLBACK_ALL): resets the accumulators to it
  // at once and discards a turn's aggregates taken before. Call with the gate closed.
  void rolled_back(std::int64_t step);
  // Ends the loop: a turn waiting for gradients is given up at once (its takes are
  // withdrawn when the coordinator is destroyed). With `close_tokens`, replicas waiting
  // for a token fail (out_of_range: the queue is closed) instead of waiting.
  void stop(bool close_tokens = false);
  // Waits for the loop to end: ok once last_step is reached, else the error that ended it
  // (cancelled when stopped first).
  status wait();
  std::int64_t updates() const { return updates_.load(); }
  // Whether an update has reached last_step: set inside the gate with that update, so a
  // holder of the closed gate (a recovery) sees it once the update is in.
  bool finished() const { return finished_.load(); }

 private:
  sync_coordinator(std::unique_ptr<actors::session> session, const train::sync_replicas_ops& ops,
                   sync_coordinator_options options);
  void loop();
  // One turn, begun at recovery epoch `epoch`; the new global step, or why not.
  result<std::int64_t> turn(std::int64_t epoch);
  // A pass through options_.gate (none when there is no gate).
  std::optional<step_gate::pass> inside_gate();
  // Sets every accumulator to the global step; that step.
  result<std::int64_t> reset();
  result<std::int64_t> reset_and_release();
  // BUGGIFY site sync.slow_tokens (simulation only): tokens handed out this much later.
  static constexpr std::chrono::milliseconds k_slow_tokens{20};
  status release_tokens();
  // Whether a failed request may be made again: options_.retry allows it and the loop is
  // not stopping.
  bool may_retry(const status& failure);
  // A reset or the tokens after an update, tried again: 1 ms after the first failure,
  // doubling up to 20 ms (a task restarted comes back within that of its restore; a
  // reset later than the recovery's own drops the gradients handed in meanwhile).
  static constexpr retry_policy k_pause_again{env::clock::time_point::max(), std::chrono::milliseconds(1),
                                              std::chrono::milliseconds(20)};

  std::unique_ptr<actors::session> session_;  // holds the cluster
  sync_coordinator_options options_;
  std::vector<std::string> takes_, reads_, sizes_, enqueues_;
  std::string update_, step_after_, init_, step_at_init_, close_;
  env::thread thread_;
  std::atomic<bool> stop_{false};
  // The takes of the current turn, answered on a session thread; shared with the
  // answer's callback, which may come after the coordinator gave the turn up.
  struct takes_state {
    std::mutex mutex;
    env::condition_variable answered;
    std::uint64_t turn = 0;
    std::optional<result<std::vector<tensor>>> value;
    bool stopped = false;
    bool reset_owed = false;  // rolled_back's reset failed: the loop must reset
  };
  std::shared_ptr<takes_state> takes_state_ = std::make_shared<takes_state>();
  std::atomic<std::int64_t> epoch_{0};
  std::atomic<std::int64_t> updates_{0};
  // The global step as the coordinator last saw it: after an update, a rollback or a
  // reset (changed inside the gate, or with it closed).
  std::atomic<std::int64_t> known_step_{-1};
  std::atomic<bool> finished_{false};
  double average_turn_ms_ = 0;  // of the turns that got their gradients (the loop's thread only)
  // A turn waits for its gradients max(floor_ms_, 50 x average_turn_ms_) unless
  // options_.stall_timeout says; the floor doubles after each lost turn while none has
  // come through (the loop's thread only).
  double floor_ms_ = 5000;
  std::mutex mutex_;
  env::condition_variable ended_;
  bool done_ = false;
  status outcome_;
};

}  // namespace troupe::cluster
