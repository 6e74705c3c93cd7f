// supervisor: one-for-one restarts of a cluster's tasks, with a budget, and the recovery
// of what a restarted task lost (doc/fault_tolerance.md).
//
//   cluster::supervisor_options o;
//   o.max_restarts = 5;  o.within_seconds = 60;
//   o.recovery = cluster::recovery_policy::restore_lost;
//   o.checkpoints = manager.get();  o.gate = &gate;
//   auto sup = cluster::supervisor::create(the_cluster, o);
//   // training threads: on an error for which is_retryable(e), check (*sup)->failure()
//   // and run the step again (it waits in the gate while a task is being recovered)
//
// 1. Detection: an actor of the supervisor monitors every device actor of every task. A
//    device that goes down for any reason but a shutdown (a crash, the fault injector's
//    kill) reports its task as failed; the steps it was part of fail with UNAVAILABLE
//    (actors/session.h), which is_retryable() says to run again.
// 2. Recovery, on the supervisor's own thread (it blocks on steps and files, never on a
//    CAF thread), one task at a time:
//      a. the budget: a task that has failed max_restarts times within the last
//         within_seconds is not restarted: the supervisor gives up (failure() says why);
//      b. the gate closes: new training steps wait, the ones in flight finish or fail;
//      c. the cluster restarts the task (actors::cluster::restart_task): new device
//         actors under the same names, which every session resolves from then on;
//      d. its state comes back from the latest committed checkpoint: with RESTORE_LOST,
//         the variables that lived on the task; with ROLLBACK_ALL, every variable (and
//         the global step), unless the run has applied its last step (finished);
//         global_step_restored learns the step it returned to;
//      e. the gate opens, and the retried steps run on the new incarnation.
//    A task without variables (a worker) is restarted empty: its queues refill from its
//    readers.
// 3. A recovery that cannot restore the task's variables (no committed checkpoint, a
//    damaged or mismatching one) gives up too: a run never continues on uninitialized
//    or inconsistent state. One whose restore another task's loss caught (UNAVAILABLE)
//    restores again after that task's recovery (at most three times).
//
// Thread safety: every method may be called from any thread. The supervisor must be
// destroyed before the cluster, the checkpoint manager and the gate it uses.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/cluster.h"
#include "cluster/checkpoint_manager.h"
#include "cluster/step_gate.h"
#include "core/env.h"
#include "core/status.h"

namespace troupe::cluster {

enum class recovery_policy {
  restore_lost,  // only what the lost task held returns to the checkpoint (ASYNC's default)
  rollback_all,  // every variable returns to the checkpoint (SYNC's default)
};

// Whether a step that failed with `s` should be run again (core/status.h).
using troupe::is_retryable;

struct supervisor_options {
  int max_restarts = 5;         // per task, within within_seconds; then the supervisor gives up
  double within_seconds = 60;
  recovery_policy recovery = recovery_policy::restore_lost;
  checkpoint_manager* checkpoints = nullptr;  // null: nothing to restore tasks from
  step_gate* gate = nullptr;                  // closed while a task is recovered
  std::function<void(const std::string&)> log;
  // After a recovery that restored the global step variable (every ROLLBACK_ALL, and a
  // RESTORE_LOST of the task holding it), with the step it returned to; called while the
  // gate is still closed.
  std::function<void(std::int64_t global_step)> global_step_restored;
  // Whether the run has applied its last step (null: never), asked with the gate closed.
  // Once it has, a recovery restores only what the lost task held (as RESTORE_LOST)
  // whatever the policy, and does not call global_step_restored: the run is over, and a
  // rollback would undo steps that no one trains again (a worker killed near the end and
  // restarted after the last step rolled every variable back to the checkpoint, and its
  // trainer, back at that step, waited for a SYNC turn that never came).
  std::function<bool()> finished;
};

// One failure of a task and what the supervisor did about it.
struct recovery_record {
  std::string task;               // "/job:ps/replica:0/task:0"
  std::string reason;             // why it went down
  std::chrono::steady_clock::time_point down_at;  // when the supervisor learnt it
  bool recovered = false;         // restarted and restored
  double seconds = 0;             // from down_at to the task back (when recovered)
  std::int64_t restored_step = -1;  // the checkpoint's global step, when one was restored
};

class supervisor {
 public:
  static result<std::unique_ptr<supervisor>> create(std::shared_ptr<actors::cluster> cluster,
                                                    supervisor_options options);
  ~supervisor();
  supervisor(const supervisor&) = delete;
  supervisor& operator=(const supervisor&) = delete;

  // OK while the supervisor has not given up; else why it did (ABORTED).
  status failure() const;
  // Restarts so far, by task.
  std::map<std::string, int> restarts() const;
  std::vector<recovery_record> recoveries() const;
  // Waits until `count` failures in all have been handled (recovered, or given up on);
  // false when `timeout` passed first.
  bool wait_for_recoveries(std::size_t count, std::chrono::milliseconds timeout);

  struct down_notice {
    std::string task;
    std::string reason;
    // Restarted already, its restore to do again (another task went down during it),
    // since down_at; its recovery holds the gate closed.
    bool restarted = false;
    env::clock::time_point down_at{};
    int life = 0;  // the life of the task that was lost (0: its first)
  };

 private:
  explicit supervisor(std::shared_ptr<actors::cluster> cluster, supervisor_options options)
      : cluster_(std::move(cluster)), options_(std::move(options)) {}
  // Monitors the device actors of `task`'s life `life` (its current one).
  void watch(const std::string& task, int life);
  void recovery_loop();
  // Recovers the task; what is left to do later (its restore, when another task's loss
  // caught it), or nothing.
  std::optional<down_notice> recover(const down_notice& notice);
  // A restore caught by a retryable error (another task lost meanwhile: a ROLLBACK_ALL
  // restore reads every task; a step failed as UNAVAILABLE for a dropped connection) is
  // done again after the recoveries pending then, waiting up to k_report_wait for a loss
  // to be reported, until k_restore_for has passed since the task was lost.
  static constexpr std::chrono::milliseconds k_report_wait{100};
  static constexpr std::chrono::minutes k_restore_for{1};
  // BUGGIFY site supervisor.slow_restart (simulation only): a restart begun this much later.
  static constexpr std::chrono::milliseconds k_slow_restart{500};
  // A notice not recovered (given up, stopping): the gate its recovery held opens.
  void drop(const down_notice& notice);
  void give_up(status why);
  void log(const std::string& line) const;

  std::shared_ptr<actors::cluster> cluster_;
  supervisor_options options_;
  caf::actor monitor_;

  mutable std::mutex mutex_;
  env::condition_variable changed_;
  // Guarded by mutex_.
  std::deque<down_notice> pending_;
  std::map<std::string, int> down_;  // tasks pending or being recovered: the latest life lost
  bool stopping_ = false;
  status failure_;
  std::map<std::string, int> restarts_;
  std::map<std::string, std::deque<std::chrono::steady_clock::time_point>> recent_;  // restart times
  std::vector<recovery_record> recoveries_;
  env::thread thread_;
};

}  // namespace troupe::cluster
