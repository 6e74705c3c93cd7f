// executable: a prepared plan for running a set of nodes of a graph on one device, and
// the executor that runs it, one step at a time or many steps at once.
//
// Preparing instantiates each node's kernel once and precomputes, for every node, where
// its inputs live in a flat per-step array and which inputs its outputs feed. A step
// then needs no lookups: a node whose inputs are all present runs; when it finishes,
// its outputs are moved into its consumers' slots (the last consumer gets the buffer
// itself, so element-wise kernels can work in place) and consumers whose count reaches
// zero become ready. Cheap ready nodes (op_kernel::estimated_ns on their inputs at most
// op_kernel::k_inline_ns) run inline on the same thread; of expensive ones, one runs
// inline and the rest go to the compute pool, so independent nodes run in parallel. Off
// the pool (on an actor's thread) only cheap nodes run, up to about a millisecond of
// estimated work per call, before the rest are handed to the pool. No message is sent per node. An exception from a
// kernel becomes its node's error (RESOURCE_EXHAUSTED for an allocation over the device's
// memory account, which is made current around each kernel).
//
// The first failing node aborts the step: nothing further is started, and `done`
// receives that node's error (named) once every running node has finished.
//
// Thread safety: an executable is immutable and may run any number of steps at once.
// This file does not depend on CAF; the device actor drives it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/graph.h"
#include "actors/tracing.h"
#include "kernels/kernel_registry.h"

namespace troupe::actors {

// Under a simulation (sim/simulation.h): how long a synchronous kernel takes in virtual
// time. The executor computes a node, then hands its completion here; the node's
// outputs reach its consumers only when `finish` is called, at the virtual time its
// kernel ends (the compute model's duration, once a core of the device is free).
class kernel_timer {
 public:
  using finish_callback = std::function<void(env::clock::time_point start, env::clock::time_point end)>;
  virtual ~kernel_timer() = default;
  // Node `node` ran on `inputs` (its outputs in `outputs`) on this timer's device; call
  // `finish` once, later, with the kernel's virtual start and end.
  virtual void ran(const graph::node& node, std::span<const tensor> inputs, std::span<const tensor> outputs,
                   finish_callback finish) = 0;
  // An asynchronous kernel of node `def` on `inputs` computed (a variable update; `ns`:
  // its own estimate of its work); call `then` once, later, when its work is done on a
  // core of the device.
  virtual void hold(const tf::NodeDef& def, std::span<const tensor> inputs, double ns, std::function<void()> then) = 0;
};

struct executable_spec {
  std::shared_ptr<const graph::graph> graph;
  std::vector<int> nodes;                 // the nodes to run (any order)
  std::vector<graph::endpoint> feeds;     // tensors supplied by the caller, in order
  std::vector<graph::endpoint> fetches;   // tensors returned to the caller, in order
  std::string device_type = "CPU";
  kernels::device* device = nullptr;      // what kernels see as their device; may be null
  step_tracer* tracer = nullptr;          // gets a span per node when set
  kernel_timer* timer = nullptr;          // under a simulation: synchronous kernels take virtual time
  bool shape_only = false;                // under a shape-only simulation: see shape_only_outputs
  std::string trace_task, trace_device;   // how the tracer names this device
  std::string client;                     // kernels see it as step_info::client
};

class executable {
 public:
  using done_callback = std::function<void(result<std::vector<tensor>>)>;

  // Instantiates kernels. Errors: a needed Placeholder that is not fed, a node with no
  // kernel for the device, a kernel constructor rejecting its attributes.
  static result<std::shared_ptr<const executable>> create(
      const executable_spec& spec,
      const kernels::kernel_registry& registry = kernels::kernel_registry::builtin());
  ~executable();

  // Checks the feeds' dtypes and shapes against the graph (errors name the feed).
  status check_feeds(const std::vector<tensor>& feeds) const;

  // Runs one step. `done` is called exactly once, on whichever thread finishes last,
  // with the fetches in order or the first error. When `abort` is given, cancelling it
  // aborts the step (pending asynchronous kernels are cancelled; done gets `aborted`).
  // REQUIRES: check_feeds(feeds).ok(); `pool` and `abort` outlive the step.
  void run(std::int64_t step_id, std::vector<tensor> feeds, compute_pool& pool,
           done_callback done, kernels::cancellation_manager* abort = nullptr) const;

  // Runs one step and waits for it (for tests, tools and benchmarks; never call it on an
  // actor's thread). The calling thread runs cheap nodes inline without the budget of an
  // actor's thread: it would only wait otherwise.
  result<std::vector<tensor>> run_and_wait(std::int64_t step_id, std::vector<tensor> feeds,
                                           compute_pool& pool) const;

  int num_nodes() const;
  const executable_spec& spec() const { return spec_; }

 private:
  friend struct executor_access;
  struct plan;
  struct step;
  executable() = default;

  executable_spec spec_;
  std::unique_ptr<plan> plan_;
};

}  // namespace troupe::actors
