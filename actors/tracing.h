// step_tracer: what the runtime reports when a run is traced (troupe run --trace).
//
// When a cluster is given a tracer, every kernel execution on every device is reported
// as a span, and every tensor that crosses devices as a pair of events (sent by a _Send,
// received by a _Recv) sharing a key, so the tracer can draw an arrow between them. With
// no tracer nothing is measured: the hot path pays one null check per node.
//
// Thread safety: implementations are called from many threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/proto/node_def.pb.h"

namespace troupe::actors {

class step_tracer {
 public:
  using clock = std::chrono::steady_clock;
  virtual ~step_tracer() = default;

  // What else is known of a node's run: its inputs (valid during the call only) and
  // whether its kernel is asynchronous (its span then includes waiting: for a tensor, a
  // queue, a variable's actor).
  struct node_detail {
    std::span<const tensor> inputs;
    bool asynchronous = false;
    const tf::NodeDef* def = nullptr;  // the node (its attributes)
    // CPU time a synchronous kernel took on every thread that worked for it (the one
    // that ran it and the compute pool's helpers, core/cpu_time.h's cpu_meter); < 0
    // when not measured.
    double cpu_ns = -1;
  };
  // Node `node` (op `op`) ran on `device` of `task` during [start, end] in step `step_id`.
  virtual void node_span(const std::string& task, const std::string& device, const std::string& node,
                         const std::string& op, std::int64_t step_id, clock::time_point start,
                         clock::time_point end, const node_detail& detail) = 0;
  // The transfer `key` of step `step_id` left `device` of `task` at `at` ...
  virtual void transfer_sent(const std::string& key, std::int64_t step_id, const std::string& task,
                             const std::string& device, clock::time_point at) = 0;
  // ... and reached its Recv on `device` of `task` at `at`.
  virtual void transfer_received(const std::string& key, std::int64_t step_id, const std::string& task,
                                 const std::string& device, clock::time_point at) = 0;
  // A tensor of `bytes` crossed the link from task `from` to task `to` (processes of one
  // machine, mode REAL): its sender began writing it at `sent` and its last byte was in at
  // `arrived` (cluster/transport.h, handlers::timed); it was transfer `key` of step
  // `step_id` (as transfer_sent names it; "" when the link's key could not be read).
  // Default: ignored.
  virtual void link_transit(const std::string& from, const std::string& to, std::int64_t bytes,
                            clock::time_point sent, clock::time_point arrived, const std::string& key,
                            std::int64_t step_id) {
    (void)from, (void)to, (void)bytes, (void)sent, (void)arrived, (void)key, (void)step_id;
  }
};

// What synchronous replication reports (the accumulators of train::sync_replicas,
// actors/accumulator.h), when a cluster is given one: every gradient an accumulator keeps
// or drops, and every aggregate taken. Calls come from actors' threads: keep them short.
class sync_observer {
 public:
  virtual ~sync_observer() = default;
  // A gradient that `source` (a task) computed at `local_step` reached `accumulator`
  // when its global step was `global_step`; `kept` false: it was stale, and dropped.
  virtual void gradient(const std::string& accumulator, const std::string& source, std::int64_t local_step,
                        std::int64_t global_step, bool kept) = 0;
  // The aggregate of step `step` was taken from these gradients (their sources, one per
  // gradient, in the order they were summed).
  virtual void aggregated(const std::string& accumulator, std::int64_t step,
                          const std::vector<std::string>& sources) = 0;
};

}  // namespace troupe::actors
