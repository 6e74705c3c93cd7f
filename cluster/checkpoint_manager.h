// checkpoint_manager: periodic checkpoints of a cluster's variables, consistent and
// taken while training goes on (doc/checkpoints.md, "Checkpoints of a run").
//
//   cluster::step_gate gate;                      // training steps pass through it
//   cluster::checkpoint_manager_options o;
//   o.dir = "/tmp/run/ckpt";  o.keep = 3;  o.every_steps = 200;  o.gate = &gate;
//   auto m = cluster::checkpoint_manager::create(the_cluster, training_graph, o);
//   auto from = (*m)->restore_latest();           // before training: where to continue
//   // after each training step, any thread:  (*m)->step_done(global_step);
//   auto last = (*m)->save_now();                 // at the end: one more, waited for
//
// 1. What is saved: every variable of the graph (each VarHandleOp: model variables,
//    optimizer slots, the global step), whole, under its shared_name (its node name when
//    that is empty). Shapes must be fully defined. The checkpoint's global step is the
//    value of the variable named options.global_step when the graph has one. A variable
//    partitioned by rows (graph::nn::make_embedding: parts carrying `_save_slice_info`
//    and `_partition_strategy`) is saved as one variable, its whole table in id order,
//    whatever the number of parts, and restored onto any number of parts: with "div" the
//    parts are consecutive row blocks, with "mod" part i of n holds ids i, i + n, ...
//    The input pipelines are saved with them, so that a restored run reads the same
//    examples in the same order: every IdxReader's cursor and every queue an IdxReader
//    fills (its elements and its generator's state; queues of elements of varying shape
//    are left out, with a log line), of the graph and of options.pipeline_graphs (one
//    per worker), under state/<task>/<resource>/... A checkpoint without a pipeline's
//    state (older, or written by another number of workers) leaves that pipeline where
//    it is, with a log line. So is every random op's generator (RandomUniform,
//    RandomStandardNormal, TruncatedNormal, LogUniformCandidateSampler: a device resource
//    named after the op, kernels/cpu/random_generator.h), under
//    state/<task>/<op name>/generator, so that a restored run draws the same numbers
//    (dropout masks, sampled candidates) as the uninterrupted one; it counts as part of
//    its task's pipeline below (holds_pipelines, pipeline_restores, restore_latest(task)).
// 2. How: the manager runs its own session on the cluster, on a copy of the graph with a
//    ReadVariableOp and an AssignVariableOp (fed by a Placeholder) per variable, each
//    colocated with its variable: a save fetches straight from the PS tasks and a
//    restore feeds them, without any worker task (the chief's death stops neither). Each
//    pipeline gets its resource's save and restore ops on its device.
// 3. Consistency: a save closes the gate (step_gate.h), runs the one step that reads every
//    variable and pipeline (reads are copy-on-write snapshots), and opens it again:
//    training stops for that step only. The reader steps that fill the queues pass the
//    gate too (as feeders), so the cut holds no batch between a reader and its queue.
//    The file is then written and committed (checkpoint::directory: atomic, checksummed,
//    `keep` kept) on the manager's own thread while training goes on. cut_if_due() takes
//    the cut on the caller's thread at a moment the caller chooses (synchronous
//    replication: after an update, before the workers get their tokens).
// 4. Failures: a save that fails (a full disk, an I/O error, a task down) leaves the
//    committed checkpoints as they were; it is counted, reported through options.log,
//    and training goes on; a periodic one is tried again 1, then 2, 4, ... steps later
//    while that comes before the next scheduled one. Saves requested while one is being
//    written merge into one.
//
// Thread safety: every method may be called from any thread; each call that does I/O
// blocks its caller, so never call one on a CAF scheduler thread (step_done never
// blocks). Destruction waits for the save being written and drops any requested after it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/cluster.h"
#include "actors/session.h"
#include "checkpoint/checkpoint.h"
#include "cluster/step_gate.h"
#include "core/env.h"
#include "graph/graph.h"
#include "placement/placer.h"

namespace troupe::cluster {

struct checkpoint_manager_options {
  std::string dir;       // required
  int keep = 5;          // committed checkpoints kept
  std::int64_t every_steps = 0;  // step_done() requests a save every this many; 0: never
  std::string global_step = "global_step";  // the variable holding the global step
  step_gate* gate = nullptr;  // the cut; null: the caller keeps training still during saves
  file_system* fs = &file_system::real();
  // The longest the read or assign step of a save or restore may take (the gate stays
  // closed meanwhile); one that takes longer fails that save with DEADLINE_EXCEEDED.
  std::chrono::milliseconds step_timeout = std::chrono::seconds(60);
  // Where nodes without a device go in the manager's session (only its own bookkeeping).
  std::string default_device;
  // Receives one line per event (saved, restored, failed, skipped a damaged checkpoint).
  std::function<void(const std::string&)> log;
  // More graphs whose input pipelines are saved (those of the graph given to create()
  // are): the other workers' training graphs. Only read by create().
  std::vector<const graph::graph*> pipeline_graphs;
};

// What the manager did, for the run summary.
struct checkpoint_stats {
  int committed = 0;         // saves committed by this manager
  int failed = 0;            // saves that failed
  int merged = 0;  // saves served by another: a newer cut replaced them before they were written
                   // (a slow disk), or the state they would write was already committed
  std::string latest_path;   // the newest committed checkpoint (also one found at restore)
  std::int64_t latest_step = -1;
  std::string restored_path;  // what the first restore_latest() before any save restored:
  std::int64_t restored_step = -1;  // where the run started from (-1: afresh)
  double longest_stop_seconds = 0;  // the longest the gate kept training out
  std::vector<std::chrono::steady_clock::time_point> commit_times;  // of each commit, in order
  std::vector<std::string> errors;  // why saves failed, oldest first
};

class checkpoint_manager {
 public:
  static result<std::unique_ptr<checkpoint_manager>> create(std::shared_ptr<actors::cluster> cluster,
                                                            const graph::graph& g,
                                                            checkpoint_manager_options options);
  ~checkpoint_manager();
  checkpoint_manager(const checkpoint_manager&) = delete;
  checkpoint_manager& operator=(const checkpoint_manager&) = delete;

  // Sets every variable from the newest committed checkpoint that reads back (damaged
  // ones are skipped, each with a warning through options.log) and returns its global
  // step; nullopt when the directory has no checkpoint. A checkpoint that does not match
  // the graph (a missing variable, another dtype or shape) is an error naming the variable
  // and the file, and no variable changes. The variables are read back after the restore
  // and must hold the checkpoint's values bit for bit (DATA_LOSS naming the variable
  // otherwise). REQUIRES: no training step runs.
  result<std::optional<std::int64_t>> restore_latest();
  // The same for the variables that live on `task` ("/job:ps/task:0") only: what a
  // restarted task lost (RESTORE_LOST). The others keep their values.
  result<std::optional<std::int64_t>> restore_latest(std::string_view task);
  // Whether any saved variable lives on `task`; any saved input pipeline; whether the
  // global step does.
  bool holds_variables(std::string_view task) const;
  bool holds_pipelines(std::string_view task) const;
  // How many times an input pipeline of `task` has been restored: a batch read from it
  // before the count changed is not the next one it gives any more.
  std::uint64_t pipeline_restores(std::string_view task) const;
  bool holds_global_step(std::string_view task) const;

  // A training step ended with the global step at `global_step`: requests a save when it
  // has crossed a multiple of every_steps since the last request. Never blocks.
  void step_done(std::int64_t global_step);
  // The same, but a save that is due takes its cut now, on this thread (the gate must be
  // free: REQUIRES no pass held by the caller), and is written on the manager's thread.
  // Errors are counted and logged, as for every save. Blocks for the cut only.
  void cut_if_due(std::int64_t global_step);

  // Takes a checkpoint now and waits until it is committed (after any save in progress).
  // When the global step is the one this manager last committed, nothing has changed
  // since: that checkpoint is returned and no file is written.
  result<checkpoint::committed> save_now();

  // The variables saved, by checkpoint name.
  const std::vector<std::string>& variable_names() const { return names_; }
  checkpoint_stats stats() const;

 private:
  // One VarHandleOp: a whole variable, or one part of a partitioned one.
  struct part {
    std::string task;    // where it lives: "/job:ps/replica:0/task:0"
    tensor_shape shape;  // this part's
    std::int64_t offset = 0;  // its first row in the shard-major layout (partitioned only)
    std::string read, value, assign;  // its nodes in the manager's graph
  };
  // A variable as the checkpoint holds it: whole, in logical (id) order.
  struct saved_variable {
    std::string name;  // in the checkpoint
    dtype type = dtype::invalid;
    tensor_shape shape;
    std::string strategy;      // partitioned: "div" or "mod"; empty: one part, whole
    std::vector<std::size_t> parts;  // into parts_, in part order
  };
  // An input pipeline's resource (an IdxReader's cursor, or a queue a reader fills) or a
  // random op's generator.
  struct pipeline {
    bool generator = false;  // a random op's generator
    std::string task;
    std::string name;                 // "<task>/<resource>": its group under state/
    std::vector<std::string> fields;  // its state names, in the order of...
    std::vector<std::string> save;    // ...its save op's outputs
    std::vector<std::string> values;  // ...and the placeholders its restore op reads
    std::string restore;
  };
  // Restores the parts and pipelines `wanted` says (by index in parts_, pipelines_),
  // reading their variables whole.
  result<std::optional<std::int64_t>> restore_some(const std::vector<bool>& wanted,
                                                   const std::vector<bool>& wanted_pipelines);
  // Adds the save and restore ops of the input pipelines of `g` (placed as `placed`) to
  // `added`.
  status add_pipelines(const graph::graph& g, const placement::placement& placed, std::vector<tf::NodeDef>* added);
  // Reads every variable and pipeline at a cut; nullopt when nothing changed since the
  // last commit (that commit is then `*unchanged`).
  result<std::optional<checkpoint::snapshot>> cut(double* stopped, std::optional<checkpoint::committed>* unchanged);
  // Writes and commits `s` (whose cut held training `stopped` seconds).
  result<checkpoint::committed> write(const checkpoint::snapshot& s, double stopped);
  status count_failure(const status& s);
  // BUGGIFY site checkpoint.save_fails (env::buggify, simulation only): true when the
  // writer's periodic save is to fail now, counted as a failed save.
  bool periodic_save_fails();
  // BUGGIFY site checkpoint.slow_cut: a cut that holds the gate closed this much longer.
  static constexpr std::chrono::milliseconds k_slow_cut{200};
  // BUGGIFY site checkpoint.slow_write: a save whose file takes this much longer to write
  // (a slow disk): training goes on, later cuts merge, tasks may be lost meanwhile.
  static constexpr std::chrono::milliseconds k_slow_write{500};
  // A cut's read of the variables, tried this many times while it fails as retryable.
  static constexpr int k_cut_reads = 3;

  explicit checkpoint_manager(checkpoint_manager_options options) : options_(std::move(options)) {}
  void writer_loop();
  void log(const std::string& line) const;

  checkpoint_manager_options options_;
  std::vector<saved_variable> variables_;
  std::vector<part> parts_;
  std::vector<std::string> names_;
  std::vector<std::string> read_fetches_;  // of every part, in parts_ order, then every pipeline's
  std::vector<pipeline> pipelines_;
  int global_step_index_ = -1;  // in variables_, or -1
  std::unique_ptr<actors::session> session_;
  std::unique_ptr<checkpoint::directory> dir_;

  // Lock order: state_mutex_, then dir_mutex_.
  env::mutex state_mutex_;  // one cut or restore at a time: a cut never sees half a restore
  env::mutex dir_mutex_;    // dir_ (writes and restores)
  env::mutex save_now_mutex_;  // one save_now at a time: the second sees the first's commit
  mutable std::mutex mutex_;
  env::condition_variable wake_;
  // Guarded by mutex_.
  bool requested_ = false;
  bool stopping_ = false;
  std::optional<std::pair<checkpoint::snapshot, double>> pending_;  // cut, to be written
  bool writing_ = false;  // the writer is writing a cut taken by cut_if_due
  std::map<std::string, std::uint64_t, std::less<>> pipeline_restores_;  // by task
  env::condition_variable written_;
  std::int64_t next_due_ = 0;
  // A periodic save that failed is tried again 1 step later, then 2, 4, ... steps after
  // each failure while that is sooner than the schedule's next (a full disk costs a few
  // tries a period, not one a step); a commit starts again from 1.
  std::int64_t retry_at_ = std::numeric_limits<std::int64_t>::max();
  std::int64_t retry_gap_ = 1;
  std::int64_t last_step_ = 0;  // the latest global step step_done or cut_if_due saw
  // Whether a periodic save is due at `global_step`; moves the schedule on. Under mutex_.
  bool due_at(std::int64_t global_step);
  checkpoint_stats stats_;
  std::optional<checkpoint::committed> last_committed_;  // by this manager
  env::thread writer_;
};

}  // namespace troupe::cluster
