// session: runs steps of one graph, from any number of client threads at once.
//
//   auto root = graph::scope::new_root();
//   auto x = ops::placeholder(root.with_name("x"), dtype::float32);
//   auto y = ops::square(root.with_name("y"), x);
//   auto s = actors::session::create(*root.to_graph());
//   auto out = (*s)->run({{"x", tensor::scalar(3.0f)}}, {"y"});   // out->at(0) == 9
//
// A step names its feeds (tensors that replace the named outputs), fetches (tensors to
// return) and targets (nodes to run for their effects). The master actor places the
// graph on the cluster's devices (once), prunes it to what the step needs, splits it
// into one partition per device joined by _Send/_Recv pairs, and registers each
// partition with its device actor once (kernels are instantiated once per distinct
// (feeds, fetches, targets)); then every step with the same signature costs one message
// per device. Nodes not needed never run. The first error in any partition aborts the
// step on every device (pending Recvs fail) and is the one the client gets.
//
// Errors name what failed: an unknown feed/fetch/target, a feed of the wrong dtype or
// shape, a Placeholder that must be fed, a kernel error with its node's name.
//
// Destroying a session aborts the steps it still runs, on every device, with `cancelled`
// (parked kernels are withdrawn), and returns once every run_async callback has been
// called; the cluster goes when its last user does (doc/runtime.md, "Shutdown").
//
// Thread safety: run and run_async may be called from any number of threads.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "kernels/kernel_registry.h"

namespace troupe::actors {

class cluster;

struct session_options {
  // The cluster whose devices run the steps. Null: a private one-task local cluster
  // built from the three fields below.
  std::shared_ptr<actors::cluster> cluster;
  // Where nodes without a device request go (a partial name is fine, e.g.
  // "/job:worker/task:1"). Empty: the first task of job "worker" if there is one, else
  // the cluster's first device.
  std::string default_device;
  // When a node's requested device cannot run it (unknown device, no kernel), place it
  // on one that can instead of failing.
  bool allow_soft_placement = true;

  // Every request the master sends to a device (which may be in another task) has a
  // finite timeout; one that passes fails the step with DEADLINE_EXCEEDED naming the
  // device, and the step is aborted everywhere. A device that goes down fails its running
  // steps with UNAVAILABLE naming it at once, whatever the timeouts.
  //   prepare_timeout: building a new step signature's kernels on a device;
  //   step_timeout:    a device's part of one step (raise it for steps that wait on a
  //                    queue longer than that); enforced within an eighth of it
  //                    (at least 1 ms, at most 1 s) after it passes.
  std::chrono::milliseconds prepare_timeout = std::chrono::minutes(5);
  std::chrono::milliseconds step_timeout = std::chrono::hours(1);
  // How many step signatures (feeds, fetches, targets) stay prepared on the devices; the
  // least recently used beyond it is unregistered (and prepared again if it comes back).
  int max_prepared_steps = 256;

  int compute_threads = 0;  // private cluster only: compute pool; 0: default_num_threads()
  std::int64_t memory_limit = 0;  // private cluster only: cluster_options::memory_limit
  int actor_threads = 0;    // private cluster only: CAF threads; 0: default_actor_threads()
  // Private cluster only: how many of this machine's GPUs become devices GPU:0..n-1 of
  // its task (nodes with a GPU kernel then run there, as in TensorFlow); -1: all of them
  // (none in a troupe built without CUDA), 0: none.
  int gpus = -1;
  const kernels::kernel_registry* kernels = &kernels::kernel_registry::builtin();
};

using feed_list = std::vector<std::pair<std::string, tensor>>;
using run_callback = std::function<void(result<std::vector<tensor>>)>;

class session {
 public:
  static result<std::unique_ptr<session>> create(graph::graph g, session_options options = {});
  static result<std::unique_ptr<session>> create(std::shared_ptr<const graph::graph> g,
                                                 session_options options = {});
  ~session();

  session(const session&) = delete;
  session& operator=(const session&) = delete;

  // Runs one step and waits for it. Returns the fetches in order.
  result<std::vector<tensor>> run(const feed_list& feeds, const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets = {});
  // Starts one step; `done` is called once, on some other thread, with the result.
  void run_async(const feed_list& feeds, const std::vector<std::string>& fetches,
                 const std::vector<std::string>& targets, run_callback done);

  const graph::graph& current_graph() const;
  const std::shared_ptr<actors::cluster>& get_cluster() const;
  // How many times a step signature has been prepared (a signature dropped from the
  // cache and run again counts again).
  int num_prepared() const;

 private:
  struct impl;
  explicit session(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::actors
