// The scenario runner behind `troupe run SCENARIO.pbtxt`.
//
// It builds the scenario's cluster in this process (every task with its own device,
// variable and queue actors), and, as TensorFlow 1's between-graph replication does,
// one training graph per worker task: variables round-robin over the PS tasks (all on
// the worker when there is no PS job), and on the worker its input pipeline, the
// paper's Figure 1: an IdxReader reads Fashion-MNIST batches into a (shuffling) queue
// from reader steps that run concurrently with the training steps, which dequeue
// mini-batches from it. Worker 0 (the chief) initializes the variables; then every
// worker trains asynchronously until the shared global step reaches `steps`. Test
// accuracy is measured on the whole test set every `eval_every` steps and at the end,
// by an evaluation graph that shares the variables by name.
//
//   auto s = scenarios::load_scenario("scenarios/default.pbtxt");
//   auto summary = scenarios::run_scenario(*s, {});
//   // summary->test_accuracy, summary->expectations_met
//
// With a `checkpoint` section, a cluster::checkpoint_manager saves every variable every
// `every_steps` global steps and at the end, at a consistent cut (the training steps pass
// through a step_gate), and with `restore: LATEST` the run first restores the newest
// committed checkpoint and trains from its global step on.
//
// Errors (the dataset missing, a graph that cannot be placed, a step that fails) come
// back as the status of the first failure, naming what failed; nothing is left running.
// The first failure of any reader or trainer ends the run at once: the other loops stop,
// and the queues are closed so that steps parked in an enqueue or dequeue end too.
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <string>

#include "cluster/checkpoint_manager.h"
#include "core/status.h"
#include "scenarios/scenario.pb.h"

namespace troupe::scenarios {

struct run_options {
  std::ostream* out = &std::cout;
  std::string trace_file;       // overrides report.trace_file when not empty
  std::int64_t steps = 0;       // overrides training.steps when > 0
  int compute_threads = 0;      // the cluster's compute pool; 0: default_num_threads()
  bool no_faults = false;       // ignore the scenario's faults (the same run without them)
  // The troupe program that mode REAL's servers run (`troupe server`); empty: this program.
  std::string server_program;
  // Told every kernel's span in this process (troupe calibrate); not with a trace file.
  actors::step_tracer* tracer = nullptr;
  // Called with the global step each training step reached, from the thread that ran it
  // (several at once; troupe calibrate measures from a step on).
  std::function<void(std::int64_t step)> on_step;
};

// A fault injected during the run and how the cluster recovered from it.
struct fault_record {
  std::string kind;       // "kill"
  std::string task;       // "/job:ps/replica:0/task:0"
  std::int64_t at_step = 0;
  bool recovered = false;
  double recovery_seconds = 0;  // from the fault to the task back with its state
};

struct run_summary {
  std::int64_t steps = 0;         // the global step reached
  double seconds = 0;             // training time, without set-up and final evaluation (virtual when SIMULATED)
  // The steady state: from the first global step at or past a quarter of the steps to the
  // end of training (virtual when SIMULATED), and the global steps in it.
  double steady_seconds = 0;
  std::int64_t steady_steps = 0;
  double virtual_seconds = 0;     // SIMULATED: the virtual time of the whole run
  bool shape_only = false;        // SIMULATED with execute_kernels: false (no loss or accuracy)
  std::map<std::string, std::int64_t> buggify_fires;  // SIMULATED with faults.random.buggify: by live site
  double liveness_ms = -1;        // SIMULATED with a liveness phase: virtual ms to its first step
  std::int64_t links_clogged = 0; // SIMULATED with swizzle: the links clogged
  // SIMULATED with compute.machine_cores: the messages between tasks that arrived, and how
  // many found the kernels keeping every core busy (network.busy_wait_us)
  std::int64_t messages_arrived = 0, messages_arrived_busy = 0;
  // SIMULATED with compute.machine_cores: the transfers handed to their links, and how
  // many found the kernels, some of them the sender's, keeping every core busy
  // (network.send_busy_wait_us)
  std::int64_t messages_sent = 0, messages_sent_busy = 0;
  double final_loss = 0;          // smoothed training loss at the end
  double test_accuracy = 0;       // on the whole test set, after training
  bool expectations_met = true;   // report.expect, when given
  std::string expectation_report; // which expectations failed, with the figures ("; ")
  std::vector<std::string> expectation_failures;  // the same, one per expectation
  // With a `checkpoint` section: what was saved and restored.
  cluster::checkpoint_stats checkpoints;
  std::vector<fault_record> faults;
  std::map<std::string, int> restarts;  // by task
  std::int64_t steps_retried = 0;       // training and reader steps a fault caught, run again
  // SYNC replication only (sync.present): what became of the workers' gradients.
  struct sync_counts {
    std::int64_t used = 0, stale = 0, backup = 0;
  };
  struct sync_record {
    bool present = false;
    int replicas_to_aggregate = 0;
    int backup_workers = 0;
    std::int64_t stale = 0, backup = 0;
    std::map<std::string, sync_counts> workers;  // by task
  } sync;
};

result<run_summary> run_scenario(const scenario::Scenario& s, const run_options& options = {});

// Graphviz DOT of worker `worker`'s training graph as the cluster would place it: one
// cluster box per device, the edges that cross devices (Send/Recv) dashed.
result<std::string> scenario_dot(const scenario::Scenario& s, int worker = 0);

}  // namespace troupe::scenarios
