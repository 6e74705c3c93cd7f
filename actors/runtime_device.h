// runtime_device: a device as the actor runtime sees it, and what actor-backed kernels
// (variables, queues, Send/Recv, custom actor ops) reach through it.
//
// Kernels receive a kernels::device* at construction; in the actor runtime it is a
// runtime_device, which adds the actor system (to spawn resource actors), the device's
// own actor (which holds the rendezvous for Send/Recv), and the directory of every
// device of the cluster (to address a Send to its destination).
//
//   auto* dev = runtime_device::from(c.device());   // in a kernel constructor
//   if (dev == nullptr) { c.fail(failed_precondition_error("needs the actor runtime")); return; }
//
// Thread safety: immutable after the cluster is started, except for the resource
// manager, which guards itself.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>

#include "actors/reply.h"
#include "actors/tracing.h"
#include "core/env.h"
#include "core/thread_pool.h"
#include "kernels/device.h"
#include "placement/device_name.h"

namespace troupe::actors {

class simulation;
class transfer_key;
class rendezvous_table;
struct device_runs;

// A device of another process may take a _Send's tensor from the sending kernel's own
// thread, straight onto the link to its task, instead of through a message to its
// stand-in actor and an answer back (two hand-offs between threads per transfer; the
// stand-in still opens the link, and takes what cannot go this way).
class remote_sink {
 public:
  virtual ~remote_sink() = default;
  // Sends `value` for (step, key) on the link now open and answers `written` once its
  // bytes are on it (or why not), never while this call holds a lock of its own; false,
  // with `written` untouched, when no link is open or the tensor cannot go this way: the
  // caller posts it to the stand-in then.
  virtual bool try_send(std::int64_t step, const std::shared_ptr<const transfer_key>& key, const tensor& value,
                        const status_reply& written) = 0;
  // Tensors sent this way so far.
  virtual std::int64_t sent() const = 0;
};

// What stands for a device of another process: its actor and, when it has one, its sink.
struct stand_in {
  stand_in(caf::actor a = caf::actor(), std::shared_ptr<remote_sink> s = nullptr)
      : actor(std::move(a)), sink(std::move(s)) {}
  caf::actor actor;
  std::shared_ptr<remote_sink> sink;
};

// Device name -> the device's current actor, for every device of the cluster (one
// process for now). A restarted device gets a new actor under the same name: whoever
// looks a device up by name finds its current incarnation (what was resolved before keeps
// the old actor, which is down; steps using it fail with UNAVAILABLE and are prepared
// again; generation() tells a session's cached steps to check). Each entry also holds the
// incarnation of its task's current life (cluster_options::incarnation_seed), which the
// session puts in every transfer's key; a stand-in for a device of another process has
// 0 here until its task's hello says (the session asks the stand-in: actors/messages.h,
// incarnation_atom). Thread safety: every method may be called from any thread.
class device_directory {
 public:
  // Changes whenever an entry is set: who resolved devices at generation g and sees g
  // again knows that none was replaced since.
  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  caf::actor find(std::string_view name) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    auto it = actors_.find(name);
    return it == actors_.end() ? caf::actor() : it->second;
  }
  // `remote`: the actor is a stand-in for a device of another process (its tensors cross
  // a link: a _Send to it waits until they are written); its incarnation is then unknown.
  void set(const std::string& name, caf::actor actor, bool remote = false, std::uint64_t incarnation = 0) {
    set_entry(name, std::move(actor), remote, incarnation, nullptr);
  }
  // A stand-in for a device of another process (remote, as above), with its sink.
  void set_remote(const std::string& name, stand_in s) {
    set_entry(name, std::move(s.actor), /*remote=*/true, 0, std::move(s.sink));
  }
  // The sink of the stand-in of device `name`, or null (a device of this process, or a
  // stand-in without one).
  std::shared_ptr<remote_sink> sink(std::string_view name) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    auto it = sinks_.find(name);
    return it == sinks_.end() ? nullptr : it->second;
  }
  // The incarnation of the device's current life; 0 when unknown (a stand-in) or no such
  // device.
  std::uint64_t incarnation(std::string_view name) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    auto it = incarnations_.find(name);
    return it == incarnations_.end() ? 0 : it->second;
  }
  bool remote(std::string_view name) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return remote_.find(name) != remote_.end();
  }
  // Every device's current actor, by name.
  std::map<std::string, caf::actor, std::less<>> entries() const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return actors_;
  }

 private:
  void set_entry(const std::string& name, caf::actor actor, bool remote, std::uint64_t incarnation,
                 std::shared_ptr<remote_sink> sink) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    actors_[name] = std::move(actor);
    incarnations_[name] = remote ? 0 : incarnation;
    if (remote) remote_.insert(name);
    else remote_.erase(name);
    if (sink != nullptr) sinks_[name] = std::move(sink);
    else sinks_.erase(name);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  mutable std::shared_mutex mutex_;
  std::map<std::string, caf::actor, std::less<>> actors_;
  std::map<std::string, std::uint64_t, std::less<>> incarnations_;
  std::set<std::string, std::less<>> remote_;
  std::map<std::string, std::shared_ptr<remote_sink>, std::less<>> sinks_;
  std::atomic<std::uint64_t> generation_{0};
};

class runtime_device final : public kernels::device {
 public:
  // A device of type `type` ("CPU", "GPU"); a device that is not a CPU runs its kernels
  // on `accelerator` (kernels::make_accelerator), which it shares with its earlier and
  // later incarnations (a restarted task finds its GPU as it was).
  runtime_device(std::string name, std::string type, std::string task, caf::actor_system& system, compute_pool& pool,
                 std::shared_ptr<kernels::device> accelerator = nullptr)
      : kernels::device(std::move(name), std::move(type)), task_(std::move(task)), system_(system), pool_(pool),
        accelerator_(std::move(accelerator)) {}

  kernels::accelerator* accelerator() override {
    return accelerator_ == nullptr ? nullptr : accelerator_->accelerator();
  }

  // The runtime_device behind a kernel's device pointer, or null (outside the runtime).
  static runtime_device* from(kernels::device* d) { return dynamic_cast<runtime_device*>(d); }

  // "/job:ps/replica:0/task:1": the task this device belongs to.
  const std::string& task() const { return task_; }
  caf::actor_system& system() const { return system_; }
  compute_pool& pool() const { return pool_; }

  // Under a simulation (actors/simulation.h): its kernels' timer and the network model.
  class simulation* simulation() const { return simulation_; }
  void set_simulation(class simulation* s) { simulation_ = s; }

  // The device's own actor (set once when it is spawned).
  const caf::actor& self() const { return self_; }
  void set_self(caf::actor a) { self_ = std::move(a); }
  // Its actor's rendezvous (set once, before the actor is spawned: spawn_device), which
  // a link's reader delivers into directly (deliver_transfer, actors/device_actor.h).
  const std::shared_ptr<rendezvous_table>& rendezvous() const { return rendezvous_; }
  void set_rendezvous(std::shared_ptr<rendezvous_table> table) { rendezvous_ = std::move(table); }
  // Its actor's prepared partitions and running steps (set once, likewise), from which a
  // link's reader starts a run directly (start_run, actors/device_actor.h).
  const std::shared_ptr<device_runs>& runs() const { return runs_; }
  void set_runs(std::shared_ptr<device_runs> runs) { runs_ = std::move(runs); }

  // Its task's life (device_directory: the transfers' keys carry it); set once at start.
  std::uint64_t incarnation() const { return incarnation_; }
  void set_incarnation(std::uint64_t i) { incarnation_ = i; }

  // The actor of another device of the cluster, or an invalid handle.
  caf::actor find_device(std::string_view name) const {
    return directory_ == nullptr ? caf::actor() : directory_->find(name);
  }
  // Whether device `name` is in another process (reached through a stand-in).
  bool remote_device(std::string_view name) const { return directory_ != nullptr && directory_->remote(name); }
  // The sink of device `name`'s stand-in (remote_sink), or null.
  std::shared_ptr<remote_sink> remote_sink_of(std::string_view name) const {
    return directory_ == nullptr ? nullptr : directory_->sink(name);
  }
  void set_directory(std::shared_ptr<const device_directory> d) { directory_ = std::move(d); }

  // Injected slowness (the fault injector's straggle and stall): each step partition that
  // this device is asked to run starts `straggle` later, and none starts before
  // `stalled_until`. The device actor waits with a timer, never a blocked thread.
  void set_straggle(std::chrono::microseconds per_step) { straggle_us_ = per_step.count(); }
  void stall_until(std::chrono::steady_clock::time_point until) {
    stalled_until_ns_ = until.time_since_epoch().count();
  }
  // How long a step partition arriving now waits before it starts.
  // Every step start asks: without a stall ever set it reads no clock.
  std::chrono::microseconds start_delay() const {
    auto delay = std::chrono::microseconds(straggle_us_.load(std::memory_order_relaxed));
    const std::int64_t until_ns = stalled_until_ns_.load(std::memory_order_relaxed);
    if (until_ns == 0) return delay;
    const auto until = std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(until_ns));
    const auto now = env::now();
    if (until > now) delay += std::chrono::duration_cast<std::chrono::microseconds>(until - now);
    return delay;
  }

  // Injected faults on the links from this device to another task (drop_messages,
  // delay_messages): each Send to a device of `to_task` is delayed by `delay`, and
  // dropped with probability `drop` (the step then fails with UNAVAILABLE, as a
  // transport that lost a message reports it). An empty fault removes the entry.
  struct link_fault {
    std::chrono::microseconds delay{0};
    double drop = 0;
    std::uint64_t seed = 0;
  };
  void set_link_fault(const std::string& to_task, link_fault fault) {
    std::lock_guard<std::mutex> lock(links_mutex_);
    if (fault.delay.count() == 0 && fault.drop == 0) links_.erase(to_task);
    else links_[to_task] = fault;
    has_link_faults_ = !links_.empty();
  }
  // The fault on the link to the task of device `to_device`, if any, and whether this
  // message is dropped (a seeded draw per message).
  std::optional<link_fault> link_fault_to(std::string_view to_device, bool* dropped) {
    *dropped = false;
    if (!has_link_faults_.load(std::memory_order_relaxed)) return std::nullopt;
    const std::string_view task = placement::task_of_full_name(to_device);
    std::lock_guard<std::mutex> lock(links_mutex_);
    auto it = links_.find(task);
    if (it == links_.end()) return std::nullopt;
    if (it->second.drop > 0) {
      const std::uint64_t draw = splitmix(it->second.seed + 0x9e3779b97f4a7c15ULL * ++link_draws_);
      *dropped = static_cast<double>(draw >> 11) * 0x1.0p-53 < it->second.drop;
    }
    return it->second;
  }

  // A killed device: from now on its resources are gone and none is made again, so that
  // a kernel still running when the task was killed fails UNAVAILABLE (retryable) rather
  // than finding a fresh, uninitialized variable. A restart makes a new device.
  void mark_killed(std::string reason) {
    {
      std::lock_guard<std::mutex> lock(killed_mutex_);
      killed_reason_ = std::move(reason);
    }
    killed_.store(true, std::memory_order_release);
  }
  // Ok, or UNAVAILABLE saying why the device was killed.
  status alive() const {
    if (!killed_.load(std::memory_order_acquire)) return status();
    std::lock_guard<std::mutex> lock(killed_mutex_);
    return unavailable_error(name(), " is down: ", killed_reason_);
  }

  // The tracer of the run, or null when it is not traced.
  step_tracer* tracer() const { return tracer_; }
  void set_tracer(step_tracer* t) { tracer_ = t; }
  // Who hears of synchronous replication's gradients (actors/accumulator.h); may be null.
  sync_observer* sync_watcher() const { return sync_observer_; }
  void set_sync_watcher(sync_observer* o) { sync_observer_ = o; }
  // "CPU:0": the device's name within its task.
  std::string short_name() const { return name().substr(name().find("/device:") + 8); }

 private:
  std::string task_;
  caf::actor_system& system_;
  compute_pool& pool_;
  std::shared_ptr<kernels::device> accelerator_;
  caf::actor self_;
  std::shared_ptr<rendezvous_table> rendezvous_;
  std::shared_ptr<device_runs> runs_;
  std::uint64_t incarnation_ = 0;
  std::shared_ptr<const device_directory> directory_;
  step_tracer* tracer_ = nullptr;
  sync_observer* sync_observer_ = nullptr;
  static std::uint64_t splitmix(std::uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  std::mutex links_mutex_;
  class simulation* simulation_ = nullptr;
  std::map<std::string, link_fault, std::less<>> links_;  // by destination task
  std::atomic<bool> has_link_faults_{false};
  std::atomic<bool> killed_{false};
  mutable std::mutex killed_mutex_;
  std::string killed_reason_;  // guarded by killed_mutex_
  std::uint64_t link_draws_ = 0;  // guarded by links_mutex_
  std::atomic<std::int64_t> straggle_us_{0};
  std::atomic<std::int64_t> stalled_until_ns_{0};
};

}  // namespace troupe::actors
