// task_processes: the server processes of a real cluster that this process starts on
// this machine (what `troupe run` does for `cluster { mode: REAL }` without addresses):
// one `troupe server` per task of a cluster file, each with its output in a log file,
// stopped when the object goes; kill, restart and stall for the fault injector and the
// supervisor (actors::cluster_options::remote_tasks).
//
//   task_processes_options o;  o.executable = "/usr/local/bin/troupe";  o.log_dir = dir;
//   auto servers = task_processes::start(*file, o);     // every task serving, or why not
//   cluster_options co = ...;  co.remote_tasks = (*servers)->control();
//   ...
//   servers->reset();                                   // SIGTERM, then SIGKILL after 5 s
//
// No orphans: every server is forked from one thread of the launcher's own, which lives
// as long as the object, and asks the kernel for SIGKILL when that thread ends
// (PR_SET_PDEATHSIG): a `troupe run` that ends in any way (Ctrl-C, SIGKILL, a crash)
// takes its servers with it. A server says it serves through a pipe (`troupe server
// --ready-fd N`); one that exits first, or says nothing within ready_timeout, is an
// error that quotes the end of its log.
//
// Thread safety: every method may be called from any thread; each blocks its caller
// (never call one on a CAF scheduler thread).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/cluster.h"
#include "cluster/cluster_file.h"
#include "core/status.h"

namespace troupe::cluster {

struct task_processes_options {
  std::string executable;  // the troupe program; required
  std::string log_dir;     // <log_dir>/<job>-<index>.log gets each server's output; required
  std::chrono::milliseconds ready_timeout{20000};
  std::chrono::milliseconds stop_timeout{5000};  // after SIGTERM, before SIGKILL
  bool trace = false;  // the servers time their kernels for the client's trace (troupe server --trace)
  // Each server's compute threads (troupe server --compute-threads); 0: the machine's
  // cores (as in process: a kernel splits its work by its pool's threads, and SYNC runs
  // give the same variables bit for bit in both modes only with the same pools).
  int compute_threads = 0;
};

// A loopback port free now, for a server that must be named in a cluster file before it
// starts: picked at random below the ephemeral range (32768 and up, where outgoing
// connections and port-0 listeners take theirs), bound and released; never one this
// process handed out among its last 4096. 0: none found.
int free_loopback_port();

class task_processes {
 public:
  // Starts a server for every task of `file` (loaded from a file that exists: the servers
  // read it) and waits until each serves. Errors: no executable; a server that exits or
  // stays silent (naming the task and quoting its log); the others are stopped then.
  static result<std::unique_ptr<task_processes>> start(const cluster_file& file, task_processes_options options);
  ~task_processes();  // stops every server (SIGTERM; SIGKILL after stop_timeout) and reaps it
  task_processes(const task_processes&) = delete;
  task_processes& operator=(const task_processes&) = delete;

  // SIGKILL of the task's process, reaped. Errors: no such task.
  status kill(const std::string& task);
  // A new process for the task (the old one killed first if it lives), serving when this
  // returns. Errors: no such task; the server could not start (its log quoted).
  status restart(const std::string& task);
  // Freezes the task's process (SIGSTOP) and thaws it (SIGCONT) after `duration`; returns
  // at once. Errors: no such task, or it has no process.
  status stall(const std::string& task, std::chrono::milliseconds duration);
  // The task's process id; 0 when it has none (killed, not restarted yet).
  int pid(const std::string& task) const;
  // Where the task's output goes.
  std::string log_path(const std::string& task) const;
  // kill, restart and stall, for actors::cluster_options::remote_tasks; calls after
  // the object is gone fail with FAILED_PRECONDITION.
  std::shared_ptr<const actors::cluster_options::remote_task_control> control() const;

  struct impl;  // internal

 private:
  explicit task_processes(std::shared_ptr<impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<impl> impl_;
};

}  // namespace troupe::cluster
