// real_cluster: one process of a real cluster, from its cluster file: a task server (the
// task's devices, its transfer hub and its service published at the task's address), or
// a client hosting no task; either reaches every other task through remote devices
// (cluster/remote_task.h). What `troupe server` and `troupe eval --cluster` run.
//
//   auto file = cluster_file::load("cluster.pbtxt");
//   auto server = task_server::start(*file, "ps", 0, {});             // serves until destroyed
//   auto client = client_cluster(*file, "/job:client/replica:0/task:0");  // for a session
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/cluster.h"
#include "cluster/cluster_file.h"
#include "core/status.h"

namespace troupe::cluster {

class transfer_hub;  // cluster/remote_task.h

// The identity of a cluster: a fingerprint of its tasks and their addresses (hex), which
// every process of it must share (a process of another cluster is refused at the hello).
std::string cluster_id_of(const cluster_file& file);

// A process's incarnation: random, non-zero, 23 bits. Its steps' ids start at
// incarnation << 40 (first_step_id_of_incarnation), so that two processes running steps on
// the same task never share a step id (a process runs far fewer than 2^40 steps) while ids
// stay positive.
std::uint32_t new_incarnation();
std::int64_t first_step_id_of_incarnation(std::uint32_t incarnation);

// An actors::cluster of `file`'s tasks in which this process hosts `hosted` (canonical or
// short names; none: a client) and reaches the others at their addresses. `me` names this
// process in hellos. With the file's tls section, every connection is mutual TLS and
// every hello proves identities (cluster/remote_task.h: control_tls), as the hosted task
// or, hosting none, as the client. Errors: a task `file` lacks; credentials of this
// process that are missing or bad (naming the file).
result<std::shared_ptr<actors::cluster>> process_cluster(const cluster_file& file, const std::vector<std::string>& hosted,
                                                          const std::string& me);
// The options process_cluster uses, for a caller that adds its own (compute threads, a
// tracer, cluster_options::remote_tasks) before it makes the cluster. A server's (one
// hosting tasks) stand-ins for the other tasks outlive their processes and reach the next
// one; a client's exit with their task's process.
result<actors::cluster_options> process_cluster_options(const cluster_file& file, const std::vector<std::string>& hosted,
                                                        const std::string& me);

struct task_server_options {
  // Listen on every interface instead of the task's address's loopback only. Without
  // TLS a server listens on loopback unless told this.
  bool listen_all = false;
  // Time every kernel and transfer for the client's trace (troupe run --trace takes them:
  // take_observations). What SYNC's accumulators do is kept for the client either way.
  bool trace = false;
  // Compute threads that sleep as soon as they run out of work instead of spinning for a
  // while (cluster_options::compute_spin): for a server whose machine's cores other busy
  // servers share (troupe run's REAL mode starts its servers so).
  bool no_spin = false;
  // The compute pool's threads (each kernel's intra-op parallelism); 0: the machine's
  // cores (default_num_threads), as in process.
  int compute_threads = 0;
};

// A task of `file` served by this process until the object goes.
class task_server {
 public:
  // Errors: no such task in the file; its port in use (naming it); bad TLS credentials.
  static result<std::unique_ptr<task_server>> start(const cluster_file& file, const std::string& job, int index,
                                                    task_server_options options);
  ~task_server();
  task_server(const task_server&) = delete;
  task_server& operator=(const task_server&) = delete;

  const std::string& task() const;
  // host:port of the service, and the port of the transfer hub.
  std::string address() const;
  int link_port() const;
  actors::cluster& cluster();
  // Where tensors from other processes arrive (what it delivered, refused, dropped as
  // meant for an earlier life of the task).
  const transfer_hub& hub() const;

  struct impl;  // internal

 private:
  explicit task_server(std::unique_ptr<impl> impl);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::cluster
