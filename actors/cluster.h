// cluster: the tasks of a cluster hosted in this process, each with its own devices
// (a runtime_device and its device actor) and the resources created on them.
//
//   auto spec = placement::cluster_spec::from_task_counts({{"ps", 2}, {"worker", 3}});
//   auto c = actors::cluster::create({.spec = *spec});
//   session_options o;  o.cluster = *c;  o.default_device = "/job:worker/task:1";
//   auto s = actors::session::create(graph, o);   // one client of the cluster
//
// Every device of every task is its own actor; devices talk only through messages
// (Send/Recv tensors, requests to variable and queue actors), so nothing here assumes the
// tasks share an address space beyond passing buffers without copying. The devices share
// one compute pool (tasks simulated in one process share its cores) and one CAF actor
// system. Step ids are unique across all sessions of a cluster.
//
// Thread safety: all methods may be called from any thread. A cluster must outlive the
// sessions that use it (sessions hold a shared_ptr).
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/device_actor.h"
#include "actors/runtime_device.h"
#include "actors/tracing.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/kernel_registry.h"
#include "placement/cluster_spec.h"

namespace troupe::actors {

class simulation;

// CAF scheduler threads when cluster_options::actor_threads is 0: 1 on machines of up to
// 2 hardware threads, else 2.
int default_actor_threads();

struct cluster_options {
  placement::cluster_spec spec = placement::cluster_spec::local();
  int compute_threads = 0;  // the shared compute pool; 0: default_num_threads()
  // Whether the compute pool's threads spin for a while before they sleep (compute_pool):
  // false for a process whose machine's cores other busy processes share (the servers
  // troupe run starts for mode REAL: `troupe server --no-spin`).
  bool compute_spin = true;
  int actor_threads = 0;    // CAF scheduler threads; 0: default_actor_threads()
  const kernels::kernel_registry* kernels = &kernels::kernel_registry::builtin();
  // Receives every kernel span and transfer when set; must outlive the cluster.
  step_tracer* tracer = nullptr;
  // Hears of every gradient the SYNC accumulators keep or drop (actors/tracing.h); must
  // outlive the cluster.
  sync_observer* sync_watcher = nullptr;
  // Bytes each device's kernels may hold at once (core/memory.h); an allocation beyond
  // it fails its step with RESOURCE_EXHAUSTED naming the node, the shape and the bytes.
  // 0: TROUPE_MEMORY_LIMIT, else 80% of physical memory.
  std::int64_t memory_limit = 0;
  // Makes the device behind each device of the spec that is not a CPU (a GPU's streams
  // and memory) from its full name, type and index. Empty: kernels::make_accelerator.
  std::function<result<std::unique_ptr<kernels::device>>(const std::string& name, const std::string& type, int index)>
      make_accelerator = nullptr;
  // The tasks this process hosts (their devices run here); none given: every task of the
  // spec. The devices of the others are reached through `remote_device`.
  std::optional<std::vector<std::string>> hosted_tasks;
  // The actor that stands for a device of a task hosted elsewhere (a remote device,
  // cluster/remote_task.h), from the actor system and the device's complete name; needed
  // when some task is not hosted here. It joins the directory like a local device, with
  // its sink (runtime_device.h's remote_sink) when it has one.
  std::function<result<stand_in>(caf::actor_system&, const std::string& device)> remote_device = nullptr;
  // The first step id this process hands out (cluster::next_step_id). Processes that run
  // steps on the same tasks of a real cluster need disjoint ranges: process_cluster
  // (cluster/real_cluster.h) gives each a random incarnation in the high bits.
  std::int64_t first_step_id = 1;
  // Where the incarnations of the tasks hosted here come from: each life of a task (its
  // start, each restart_task) gets task_incarnation(seed, task, life), which goes into
  // the keys of the transfers to and from its devices. Processes of a real cluster take a
  // random seed (cluster/real_cluster.h), so each server process's task has a life of its
  // own; in one process 0 keeps them reproducible.
  std::uint64_t incarnation_seed = 0;
  // What kill_task, restart_task and stall_task do to a task hosted elsewhere (a server
  // process of a real cluster that this process started: cluster/task_processes.h). Null:
  // they fail with FAILED_PRECONDITION for such a task.
  struct remote_task_control {
    std::function<status(const std::string& task)> kill;  // ends its process at once
    // A new process for the task, serving once this returns (it blocks: call it from a
    // thread of your own, never a CAF thread); the task's stand-ins are made anew after.
    std::function<status(const std::string& task)> restart;
    std::function<status(const std::string& task, std::chrono::milliseconds duration)> stall;  // frozen that long
  };
  std::shared_ptr<const remote_task_control> remote_tasks;
  // Runs the cluster in a simulated world (mode SIMULATED, actors/simulation.h): virtual
  // time, a seeded scheduler, network and compute models. Must outlive the cluster.
  class simulation* simulation = nullptr;
  // Adjusts the actor system's configuration before the system starts (a task of a real
  // cluster loads CAF's middleman and announces the wire types: cluster/remote_task.h).
  std::function<void(caf::actor_system_config&)> configure_system = nullptr;
};

// The incarnation of life `life` (0 for the first, 1 after the first restart, ...) of
// `task` (canonical name) under `seed`: never 0 (0 means unknown).
std::uint64_t task_incarnation(std::uint64_t seed, std::string_view task, int life);

class cluster {
 public:
  static result<std::shared_ptr<cluster>> create(cluster_options options = {});
  ~cluster();
  cluster(const cluster&) = delete;
  cluster& operator=(const cluster&) = delete;

  const placement::cluster_spec& spec() const { return options_.spec; }
  const kernels::kernel_registry& kernels() const { return *options_.kernels; }
  step_tracer* tracer() const { return options_.tracer; }  // cluster_options::tracer
  caf::actor_system& system() { return *system_; }
  compute_pool& pool() { return *pool_; }

  // Complete device names, in the cluster spec's order.
  const std::vector<std::string>& device_names() const { return device_names_; }
  // The device of that complete name hosted here, or null.
  runtime_device* find_device(std::string_view name) const;
  // Whether `task` ("/job:ps/task:0" or the full form) runs in this process.
  bool hosts(std::string_view task) const;
  caf::actor device_actor(std::string_view name) const;
  // Every device's actor by complete name (shared: it outlives the cluster's handles).
  std::shared_ptr<const device_directory> directory() const { return directory_; }

  // What a device holds now (for tests and tools: it asks the device actor and waits up
  // to `timeout`; never call it on an actor's thread). Errors: no such device, or the
  // device did not answer.
  result<device_stats> stats(std::string_view device, std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // A fresh step id, unique across the cluster (across the processes of a real cluster
  // when each starts its own range: cluster_options::first_step_id).
  std::int64_t next_step_id() { return next_step_.fetch_add(1, std::memory_order_relaxed); }

  // The tasks, as "/job:ps/replica:0/task:0", in the cluster spec's order.
  std::vector<std::string> task_names() const;
  // The canonical name of `task` ("/job:ps/task:0" -> "/job:ps/replica:0/task:0"), or
  // empty when the cluster has no such task.
  std::string canonical_task(std::string_view task) const;
  // The complete names of `task`'s devices ("/job:ps/task:0" or the full form).
  result<std::vector<std::string>> devices_of(std::string_view task) const;

  // Fails `task` as a crash would (the fault injector's `kill`): its resource actors
  // (variables, queues) end with their state lost, and its device actors exit with
  // UNAVAILABLE "task ... was killed": their running steps fail everywhere, and whoever
  // monitors them (sessions, supervisors) learns it. Until restart_task, the task's
  // names resolve to its dead actors. A task hosted elsewhere: its process is killed
  // (cluster_options::remote_tasks) and its stand-ins here exit the same way.
  // Errors: no such task.
  status kill_task(std::string_view task);
  // Whether `task` is down: killed here and not restarted since (its current incarnation's
  // devices marked killed). False for a task hosted elsewhere, and for no such task.
  bool task_down(std::string_view task);
  // Starts `task` again: each of its devices gets a new runtime_device and device actor
  // (empty: no resources, no prepared steps) under the same name, which the directory
  // resolves from now on. The old incarnations stay allocated until the cluster goes
  // (kernels of steps that were running may still reference them). Returns the task's
  // incarnation (1 after the first restart). A task hosted elsewhere gets a new process
  // (cluster_options::remote_tasks) and new stand-ins. Errors: no such task; the new
  // process could not be started.
  result<int> restart_task(std::string_view task);
  // Injected slowness of `task`'s devices (the fault injector's straggle and stall):
  // each step partition they run starts `per_step` later (0: no more); none starts before
  // `duration` from now has passed. The current incarnation only. A task hosted elsewhere
  // is told through its stand-ins (which forward to its process), and is stalled by
  // freezing its process (cluster_options::remote_tasks). Errors: no such task; a task
  // elsewhere that did not answer.
  status set_straggle(std::string_view task, std::chrono::microseconds per_step);
  status stall_task(std::string_view task, std::chrono::milliseconds duration);
  // Injected faults on the link from task `from` to task `to` (drop_messages,
  // delay_messages; runtime_device::set_link_fault): delay 0 and drop 0 lift them. A
  // task elsewhere is told through its stand-ins. Errors: no such task; a task elsewhere
  // that did not answer.
  status set_link_fault(std::string_view from, std::string_view to, runtime_device::link_fault fault);
  // The device actors of the task's current incarnation (to monitor them).
  std::vector<caf::actor> task_actors(std::string_view task) const;

 private:
  explicit cluster(cluster_options options) : options_(std::move(options)) {}

  cluster_options options_;
  std::unique_ptr<compute_pool> pool_;
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  std::vector<std::string> device_names_;
  // The canonical name of `task` in `spec`, or empty.
  static std::string canonical_task_of(std::string_view task, const placement::cluster_spec& spec);
  template <typename... Ts>
  status ask_task_devices(std::string_view task, const char* what, Ts... xs);
  // The control of `task` when it is hosted elsewhere and cluster_options::remote_tasks
  // is set; else null.
  const cluster_options::remote_task_control* remote_control(std::string_view task) const;
  // Spawns the actor of device `full` for its task's life `life` (a new incarnation) and
  // enters it in the directory.
  std::unique_ptr<runtime_device> start_device(const std::string& full, int life);
  // Calls fn(full name, current incarnation) for each device of `task`, under
  // tasks_mutex_ (fn may replace the incarnation). Errors: no such task.
  status for_each_device(std::string_view task,
                         const std::function<void(const std::string&, std::unique_ptr<runtime_device>&)>& fn);

  std::map<std::string, std::unique_ptr<runtime_device>, std::less<>> devices_;
  // The accelerators of non-CPU devices, by device name, made once (restarts keep them).
  std::map<std::string, std::shared_ptr<kernels::device>, std::less<>> accelerators_;
  std::shared_ptr<device_directory> directory_;
  mutable std::mutex tasks_mutex_;  // guards devices_ entries and the two below across restarts
  std::vector<std::unique_ptr<runtime_device>> retired_;  // earlier incarnations
  std::map<std::string, int, std::less<>> incarnations_;  // by canonical task
  std::atomic<std::int64_t> next_step_{1};
};

}  // namespace troupe::actors
