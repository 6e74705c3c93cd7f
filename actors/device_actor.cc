#include "actors/device_actor.h"

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "actors/messages.h"
#include "actors/rendezvous.h"
#include "actors/simulation.h"
#include "core/env.h"
#include "kernels/cancellation.h"

namespace troupe::actors::detail {

// What a preparation on the compute pool sends back to its device actor.
struct prepare_outcome {
  std::uint64_t request = 0;
  result<std::shared_ptr<const executable>> exec = internal_error("not prepared");
  bool held = false;  // held back once by BUGGIFY partition.slow_prepare
};

}  // namespace troupe::actors::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::detail::prepare_outcome)

namespace troupe::actors {

// A device's prepared partitions and running steps, shared by its actor and the threads
// that start runs without it (start_run) or end runs with a reply, under one lock (never
// held while a step is answered or cancelled: both may run the step's code).
struct device_runs {
  struct partition {
    std::shared_ptr<const executable> exec;
    caf::actor_addr owner;  // who registered it (a session's master, a task service)
    std::uint64_t token;    // the preparation's, for forget_atom
  };
  // Running steps by request: the client's promise (or the run's reply), and the step's
  // cancellation, so an abort from the master (by step id) or the device's exit can
  // reach them.
  struct running_step {
    std::int64_t step_id;
    caf::response_promise promise;      // a run's request, answered by the actor, or
    reply<std::vector<tensor>> answer;  // a run with its reply: answered when it ends
    std::shared_ptr<kernels::cancellation_manager> cancel;
    caf::actor_addr owner;
    // Set while the start waits out an injected delay (runtime_device::start_delay).
    std::shared_ptr<const executable> delayed_exec;
    std::vector<tensor> delayed_feeds;
  };
  std::mutex mutex;
  std::map<std::uint64_t, partition> partitions;
  std::map<std::uint64_t, running_step> running;
  bool closed = false;  // the actor has ended: no step starts without it any more
  std::atomic<std::uint64_t> next_request{1};

  // The partitions `drop` picks, taken out (the caller lets them go after the lock: an
  // executable's end may take a while).
  template <class Drop>
  std::vector<partition> drop_partitions(Drop drop) {
    std::vector<partition> out;
    std::lock_guard<std::mutex> lock(mutex);
    for (auto it = partitions.begin(); it != partitions.end();) {
      if (!drop(it->first, it->second)) {
        ++it;
        continue;
      }
      out.push_back(std::move(it->second));
      it = partitions.erase(it);
    }
    return out;
  }
  // At the actor's end: every running step and partition taken out; nothing starts
  // without the actor from then on.
  std::pair<std::map<std::uint64_t, running_step>, std::map<std::uint64_t, partition>> close() {
    std::lock_guard<std::mutex> lock(mutex);
    closed = true;
    return {std::exchange(running, {}), std::exchange(partitions, {})};
  }
  // The executable of partition `handle`, or null.
  std::shared_ptr<const executable> find(std::uint64_t handle) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = partitions.find(handle);
    return it == partitions.end() ? nullptr : it->second.exec;
  }
  // Adds a running step (an abort or the device's end reaches it from now on); false,
  // and nothing added, once the actor has ended.
  bool add(std::uint64_t request, running_step step) {
    std::lock_guard<std::mutex> lock(mutex);
    if (closed) return false;
    running.emplace(request, std::move(step));
    return true;
  }
  // The running step `request`, taken out (none: answered already).
  std::optional<running_step> take(std::uint64_t request) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = running.find(request);
    if (it == running.end()) return std::nullopt;
    std::optional<running_step> out(std::move(it->second));
    running.erase(it);
    return out;
  }
};

}  // namespace troupe::actors

namespace troupe::actors {
namespace {

using prepared_atom = caf::atom_constant<caf::atom("prepared")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;
using detail::prepare_outcome;

// How long a tensor may wait in the rendezvous for a step that is not running here before
// it counts as an orphan, and how often the table is swept for them: a timer armed by an
// arrival while none is pending, re-armed while tensors wait (no clock read per arrival).
constexpr auto k_orphan_age = std::chrono::minutes(5);
constexpr auto k_sweep_every = std::chrono::seconds(30);
// BUGGIFY site partition.slow_prepare: a preparation that ends this much later (a
// partition of 10^5 nodes, a pool busy with kernels).
constexpr auto k_slow_prepare = std::chrono::milliseconds(300);

struct device_state {
  device_options options;
  // Registered partitions and who registered them (a session's master): an owner that
  // goes down without unregistering its partitions (a crash, or a kill) loses them. The
  // device's (runtime_device::runs), under its lock.
  std::shared_ptr<device_runs> runs;
  struct preparation {
    caf::response_promise promise;
    caf::actor_addr owner;
    std::uint64_t token;
  };
  std::map<std::uint64_t, preparation> preparing;
  std::set<caf::actor_addr> owners;  // monitored
  std::shared_ptr<rendezvous_table> rendezvous;  // the device's (runtime_device::rendezvous)
  std::uint64_t next_handle = 1;
  std::uint64_t next_request = 1;
  static inline const char* name = "troupe-device";

  const std::string& device_name() const { return options.device->name(); }
  caf::error gone() const { return to_caf_error(unavailable_error("device ", device_name(), " went down")); }
  // The table may outlive the actor (its device holds it): what reaches it later is
  // dropped, and the Recvs still parked fail. Runs with a reply still running are
  // answered and cancelled (a killed actor runs no exit handler).
  ~device_state() {
    const status down = unavailable_error("device ", name_at_start, " went down");
    if (runs != nullptr) {
      auto [left, partitions] = runs->close();
      for (auto& [request, step] : left) {
        if (step.answer) step.answer(down);
        step.cancel->start_cancel();
      }
    }
    if (rendezvous != nullptr) rendezvous->shut(down);
  }
  std::string name_at_start;  // for the destructor, which runs as the actor ends
};

// A tensor from a _Send elsewhere into `dev`'s rendezvous, on the caller's thread: a Recv
// it completes runs the nodes it wakes here, with the table active (Recvs among them ask
// it directly). Returns the table's refusal, on which the step fails, and whether a sweep
// must now be sent to the device (tensors wait and none is due).
status arrive(runtime_device& dev, std::int64_t step_id, const transfer_key_ptr& key, tensor value, bool* sweep) {
  rendezvous_table& table = *dev.rendezvous();
  rendezvous_table::active_scope active(table, &dev);
  status s = table.send(step_id, key, std::move(value), dev.name());
  *sweep = table.arm_sweep();
  return s;
}

using device_actor = caf::stateful_actor<device_state>;

// The partition `handle` of `dev` for a run of step `step_id` with `feeds`, when the step
// may start there: the error that says why not otherwise.
result<std::shared_ptr<const executable>> runnable(runtime_device& dev, std::uint64_t handle, std::int64_t step_id,
                                                   const std::vector<tensor>& feeds) {
  std::shared_ptr<const executable> exec = dev.runs()->find(handle);
  if (exec == nullptr) return not_found_error("device ", dev.name(), " has no partition ", handle);
  if (dev.rendezvous()->is_aborted(step_id)) {
    return aborted_error("step ", step_id, " was aborted before it started on ", dev.name());
  }
  TROUPE_RETURN_IF_ERROR(exec->check_feeds(feeds));
  return exec;
}

// Answers a run: its reply when it came with one (which the thread that ended the step
// may have called already: a reply answers once), else its request's promise.
void answer_step(device_runs::running_step& step, std::vector<tensor> fetches) {
  if (step.answer) return step.answer(std::move(fetches));
  step.promise.deliver(std::move(fetches));
}
void answer_step(device_runs::running_step& step, caf::error error) {
  if (step.answer) return step.answer(to_status(error));
  step.promise.deliver(std::move(error));
}

// Aborts `step_id` here: its parked Recvs fail, its running partition's waiting kernels
// are cancelled, later traffic for it is refused.
void abort_here(device_actor* self, std::int64_t step_id, const status& reason) {
  auto& st = self->state;
  st.rendezvous->abort(step_id, reason);
  std::vector<std::shared_ptr<kernels::cancellation_manager>> cancels;
  {
    std::lock_guard<std::mutex> lock(st.runs->mutex);
    for (auto& [request, step] : st.runs->running) {
      if (step.step_id == step_id) cancels.push_back(step.cancel);
    }
  }
  for (auto& c : cancels) c->start_cancel();
}

// Runs running step `request`'s partition on `dev` (cheap nodes on this thread, the rest
// on the pool). A run with its reply ends on the thread that ends it: answered, taken out
// of the running steps and its rendezvous closed there, with no hand-off to the actor;
// another's end goes to the device's actor `me` (step_done_atom, step_fail_atom), which
// answers its request. The completion keeps the partition alive: the actor may exit (and
// drop its partitions) while a step still waits in an asynchronous kernel.
void run_partition(runtime_device& dev, caf::actor me, std::uint64_t request, std::int64_t step_id,
                   std::shared_ptr<const executable> exec, std::vector<tensor> feeds,
                   std::shared_ptr<kernels::cancellation_manager> cancel, reply<std::vector<tensor>> answer) {
  kernels::cancellation_manager* c = cancel.get();
  const executable* e = exec.get();
  e->run(step_id, std::move(feeds), dev.pool(),
         [me, request, step_id, cancel, exec, answer = std::move(answer), runs = dev.runs(),
          table = dev.rendezvous()](result<std::vector<tensor>> r) {
           if (answer) {
             // Answered first (the device's end may have answered already: a reply
             // answers once); a reply whose own work throws still lets the step close.
             try {
               answer(std::move(r));
             } catch (...) {
             }
             runs->take(request);
             table->close(step_id);
             return;
           }
           if (r.ok()) return caf::anon_send(me, step_done_atom::value, request, std::move(*r));
           caf::anon_send(me, step_fail_atom::value, request, to_caf_error(r.error()));
         },
         c);
}

caf::behavior device_behavior(device_actor* self, device_options options) {
  self->state.options = std::move(options);
  self->state.rendezvous = self->state.options.device->rendezvous();
  self->state.runs = self->state.options.device->runs();
  self->state.name_at_start = self->state.options.device->name();
  // When the device goes, every request still open is answered, and its running steps
  // are cancelled: kernels waiting on other actors fail now instead of finishing against
  // a device that is gone.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& st = self->state;
    auto [running, partitions] = st.runs->close();
    for (auto& [request, step] : running) {
      answer_step(step, st.gone());  // first: a cancelled kernel may end the step at once
      step.cancel->start_cancel();
    }
    for (auto& [request, preparing] : st.preparing) preparing.promise.deliver(st.gone());
    st.preparing.clear();
    self->quit(msg.reason);
  });
  // Answers the request of a finished step with its fetches or its error, and closes the
  // step's rendezvous entries.
  auto finish = [self](std::uint64_t request, auto&& outcome) {
    auto& st = self->state;
    std::optional<device_runs::running_step> step = st.runs->take(request);
    if (!step) return;
    answer_step(*step, std::move(outcome));
    st.rendezvous->close(step->step_id);
  };
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& st = self->state;
    st.owners.erase(msg.source);
    st.runs->drop_partitions([&](std::uint64_t, const device_runs::partition& p) { return p.owner == msg.source; });
    std::set<std::int64_t> orphaned;
    {
      std::lock_guard<std::mutex> lock(st.runs->mutex);
      for (const auto& [request, step] : st.runs->running) {
        if (step.owner == msg.source) orphaned.insert(step.step_id);
      }
    }
    for (std::int64_t step_id : orphaned) {
      abort_here(self, step_id, unavailable_error("the session that ran step ", step_id, " went down"));
    }
  });
  // Runs a registered step's partition (run_partition).
  auto start_step = [self](std::uint64_t request, std::int64_t step_id, std::shared_ptr<const executable> exec,
                           std::vector<tensor> feeds, std::shared_ptr<kernels::cancellation_manager> cancel,
                           reply<std::vector<tensor>> answer) {
    run_partition(*self->state.options.device, caf::actor_cast<caf::actor>(self), request, step_id, std::move(exec),
                  std::move(feeds), std::move(cancel), std::move(answer));
  };
  // Monitors whoever sent the current request, once.
  auto owner_of_request = [self] {
    caf::actor_addr owner = caf::actor_cast<caf::actor_addr>(self->current_sender());
    if (owner && self->state.owners.insert(owner).second) self->monitor(owner);
    return owner;
  };
  // Starts a run (now, or after an injected delay or a simulation's control plane),
  // answered through `promise` or `answer` when it ends.
  auto begin_run = [self, start_step, owner_of_request](std::shared_ptr<const executable> exec, std::int64_t step_id,
                                                        std::vector<tensor> feeds, caf::response_promise promise,
                                                        reply<std::vector<tensor>> answer) {
    auto& st = self->state;
    rendezvous_table::active_scope active(*st.rendezvous, st.options.device);
    const std::uint64_t request = st.runs->next_request++;
    auto cancel = std::make_shared<kernels::cancellation_manager>();
    // (Never refused: the actor is alive.)
    st.runs->add(request, device_runs::running_step{step_id, std::move(promise), answer, cancel, owner_of_request(),
                                                    nullptr, {}});
    // A later start (a stall fault, a simulation's control plane): the step waits for
    // its start_atom.
    auto defer = [&] {
      std::lock_guard<std::mutex> lock(st.runs->mutex);
      auto it = st.runs->running.find(request);
      if (it == st.runs->running.end()) return;  // (ended meanwhile: its device's exit)
      it->second.delayed_exec = std::move(exec);
      it->second.delayed_feeds = std::move(feeds);
    };
    if (const auto delay = st.options.device->start_delay(); delay.count() > 0) {
      self->delayed_send(self, delay, start_atom::value, request);
      return defer();
    }
    if (auto* sim = st.options.device->simulation()) {
      caf::actor me = caf::actor_cast<caf::actor>(self);
      std::int64_t feed_bytes = 0;
      for (const tensor& f : feeds) feed_bytes += f.initialized() ? static_cast<std::int64_t>(f.byte_size()) : 0;
      if (sim->delay_step_start(st.options.device->task(), feed_bytes,
                                [me, request] { caf::anon_send(me, start_atom::value, request); })) {
        return defer();
      }
    }
    start_step(request, step_id, std::move(exec), std::move(feeds), std::move(cancel), std::move(answer));
  };
  return {
      [=](prepare_atom, std::uint64_t token, executable_spec& spec) -> caf::result<std::uint64_t> {
        auto& st = self->state;
        caf::actor_addr owner = owner_of_request();
        spec.device = st.options.device;
        spec.device_type = st.options.device->type();
        spec.tracer = st.options.device->tracer();
        if (auto* sim = st.options.device->simulation()) {
          spec.timer = sim->timer_of(st.options.device->name(), st.options.device->task());
          spec.shape_only = sim->shape_only();
        }
        spec.trace_task = st.options.device->task();
        spec.trace_device = st.options.device->short_name();
        const std::uint64_t request = st.next_request++;
        auto promise = self->make_response_promise<std::uint64_t>();
        st.preparing.emplace(request, device_state::preparation{promise, owner, token});
        // Building kernels is unbounded work (a partition may have 10^5 nodes): on the pool.
        caf::actor me = caf::actor_cast<caf::actor>(self);
        const kernels::kernel_registry* registry = st.options.kernels;
        st.options.device->pool().schedule([me, request, spec = std::move(spec), registry] {
          prepare_outcome outcome{request, internal_error("not prepared")};
          account_scope memory(spec.device->memory());
          status thrown = kernels::catch_exceptions([&] { outcome.exec = executable::create(spec, *registry); });
          if (!thrown.ok()) outcome.exec = thrown.with_context("preparing a partition");
          caf::anon_send(me, prepared_atom::value, std::move(outcome));
        });
        return promise;
      },
      [=](prepared_atom, prepare_outcome& outcome) {
        auto& st = self->state;
        auto it = st.preparing.find(outcome.request);
        if (it == st.preparing.end()) return;
        // A slow preparation: its steps wait, and a recovery's preparations (a restarted
        // task's partitions prepared again) race the other tasks' steps; a forget or the
        // device's end meanwhile finds it still preparing.
        if (!outcome.held && env::buggify("partition.slow_prepare")) {
          outcome.held = true;
          self->delayed_send(self, k_slow_prepare, prepared_atom::value, std::move(outcome));
          return;
        }
        auto preparing = std::move(it->second);
        st.preparing.erase(it);
        if (!outcome.exec.ok()) return preparing.promise.deliver(to_caf_error(outcome.exec.error()));
        if (preparing.owner && st.owners.count(preparing.owner) == 0) return;  // its owner went down meanwhile
        const std::uint64_t handle = st.next_handle++;
        {
          std::lock_guard<std::mutex> lock(st.runs->mutex);
          st.runs->partitions.emplace(handle, device_runs::partition{std::move(*outcome.exec), preparing.owner, preparing.token});
        }
        preparing.promise.deliver(handle);
      },
      [=](unprepare_atom, std::uint64_t handle) {
        self->state.runs->drop_partitions([&](std::uint64_t h, const device_runs::partition&) { return h == handle; });
      },
      [=](forget_atom, std::uint64_t token) {
        auto& st = self->state;
        const caf::actor_addr owner = caf::actor_cast<caf::actor_addr>(self->current_sender());
        for (auto it = st.preparing.begin(); it != st.preparing.end();) {
          if (it->second.token != token || it->second.owner != owner) {
            ++it;
            continue;
          }
          it->second.promise.deliver(to_caf_error(cancelled_error("the preparation was given up")));
          it = st.preparing.erase(it);
        }
        st.runs->drop_partitions(
            [&](std::uint64_t, const device_runs::partition& p) { return p.token == token && p.owner == owner; });
      },
      [=](run_atom, std::uint64_t handle, std::int64_t step_id,
          std::vector<tensor>& feeds) -> caf::result<std::vector<tensor>> {
        auto exec = runnable(*self->state.options.device, handle, step_id, feeds);
        if (!exec.ok()) return to_caf_error(exec.error());
        auto promise = self->make_response_promise<std::vector<tensor>>();
        begin_run(std::move(*exec), step_id, std::move(feeds), promise, {});
        return promise;
      },
      [=](run_atom, std::uint64_t handle, std::int64_t step_id, std::vector<tensor>& feeds,
          reply<std::vector<tensor>>& answer) {
        auto exec = runnable(*self->state.options.device, handle, step_id, feeds);
        if (!exec.ok()) return answer(exec.error());
        begin_run(std::move(*exec), step_id, std::move(feeds), caf::response_promise(), std::move(answer));
      },
      [=](start_atom, std::uint64_t request) {
        auto& st = self->state;
        std::shared_ptr<const executable> exec;
        std::vector<tensor> feeds;
        std::int64_t step_id = 0;
        std::shared_ptr<kernels::cancellation_manager> cancel;
        reply<std::vector<tensor>> answer;
        {
          std::lock_guard<std::mutex> lock(st.runs->mutex);
          auto it = st.runs->running.find(request);
          if (it == st.runs->running.end() || it->second.delayed_exec == nullptr) return;  // answered meanwhile
          exec = std::move(it->second.delayed_exec);
          feeds = std::move(it->second.delayed_feeds);
          step_id = it->second.step_id;
          cancel = it->second.cancel;
          answer = it->second.answer;
        }
        if (cancel->is_cancelled() || st.rendezvous->is_aborted(step_id)) {
          return finish(request, to_caf_error(aborted_error("step ", step_id, " was aborted before it started on ",
                                                            st.device_name())));
        }
        rendezvous_table::active_scope active(*st.rendezvous, st.options.device);
        start_step(request, step_id, std::move(exec), std::move(feeds), std::move(cancel), std::move(answer));
      },
      [=](step_done_atom, std::uint64_t request, std::vector<tensor>& fetches) {
        finish(request, std::move(fetches));
      },
      [=](step_fail_atom, std::uint64_t request, caf::error& error) {
        finish(request, std::move(error));
      },
      [=](abort_step_atom, std::int64_t step_id, const caf::error& reason) {
        abort_here(self, step_id, to_status(reason));
      },
      // A tensor's arrival or a Recv's request may complete a Recv, and the nodes it wakes
      // run here: the rendezvous is active so that Recvs among them ask it directly.
      [=](rv_send_atom, std::int64_t step_id, const transfer_key_ptr& key, tensor& value) {
        auto& st = self->state;
        bool sweep = false;
        status s = arrive(*st.options.device, step_id, key, std::move(value), &sweep);
        if (!s.ok()) abort_here(self, step_id, s);
        if (sweep) self->delayed_send(self, k_sweep_every, sweep_atom::value);
      },
      [=](sweep_atom) {
        auto& st = self->state;
        const auto now = env::now();
        std::set<std::int64_t> running_ids;  // once per sweep, not kept up to date per step
        {
          std::lock_guard<std::mutex> lock(st.runs->mutex);
          for (const auto& [request, step] : st.runs->running) running_ids.insert(step.step_id);
        }
        st.rendezvous->sweep(now - k_orphan_age, [&](std::int64_t id) { return running_ids.count(id) > 0; });
        if (st.rendezvous->keep_sweeping()) self->delayed_send(self, k_sweep_every, sweep_atom::value);
      },
      [=](rv_recv_atom, std::int64_t step_id, const transfer_key_ptr& key, reply<tensor>& r) {
        auto& st = self->state;
        rendezvous_table::active_scope active(*st.rendezvous, st.options.device);
        st.rendezvous->recv(step_id, key, std::move(r));
      },
      [=](rv_cancel_atom, std::int64_t step_id, const transfer_key_ptr& key) {
        self->state.rendezvous->cancel(step_id, key);
      },
      [=](stats_atom) {
        auto& st = self->state;
        device_stats stats;
        {
          std::lock_guard<std::mutex> lock(st.runs->mutex);  // one look at both
          stats.partitions = static_cast<std::int64_t>(st.runs->partitions.size());
          stats.running_steps = static_cast<std::int64_t>(st.runs->running.size());
        }
        stats.preparing = static_cast<std::int64_t>(st.preparing.size());
        const auto [entries, bytes] = st.rendezvous->waiting();
        stats.rendezvous_entries = static_cast<std::int64_t>(entries);
        stats.rendezvous_bytes = bytes;
        if (auto* memory = st.options.device->memory()) stats.memory_in_use = memory->in_use();
        return stats;
      },
      [=](incarnation_atom) { return self->state.options.device->incarnation(); },
      [=](straggle_atom, std::int64_t micros) {
        self->state.options.device->set_straggle(std::chrono::microseconds(micros));
        return true;
      },
      [=](link_fault_atom, const std::string& to_task, std::int64_t delay_us, double drop, std::uint64_t seed) {
        self->state.options.device->set_link_fault(to_task, {std::chrono::microseconds(delay_us), drop, seed});
        return true;
      },
  };
}

}  // namespace

caf::actor spawn_device(caf::actor_system& system, device_options options) {
  runtime_device* dev = options.device;
  dev->set_rendezvous(std::make_shared<rendezvous_table>(options.rendezvous_limit));
  dev->set_runs(std::make_shared<device_runs>());
  caf::actor a = system.spawn(device_behavior, std::move(options));
  dev->set_self(a);
  return a;
}

bool start_run(runtime_device& dev, std::uint64_t handle, std::int64_t step_id, std::vector<tensor>& feeds,
               const reply<std::vector<tensor>>& answer, const caf::actor_addr& owner) {
  const std::shared_ptr<device_runs>& runs = dev.runs();
  if (!answer || runs == nullptr || !dev.self() || dev.simulation() != nullptr || dev.start_delay().count() > 0 || !dev.alive().ok()) {
    return false;
  }
  auto exec = runnable(dev, handle, step_id, feeds);  // (its error is the actor's to give)
  if (!exec.ok()) return false;
  const std::uint64_t request = runs->next_request++;
  auto cancel = std::make_shared<kernels::cancellation_manager>();
  // Among the running steps before it starts; none once the device has ended (its exit
  // took them all).
  if (!runs->add(request, device_runs::running_step{step_id, caf::response_promise(), answer, cancel, owner, nullptr, {}})) {
    return false;
  }
  // An abort between the look above and the registration found no step to cancel.
  rendezvous_table& table = *dev.rendezvous();
  if (table.is_aborted(step_id)) cancel->start_cancel();
  rendezvous_table::active_scope active(table, &dev);
  run_partition(dev, dev.self(), request, step_id, std::move(*exec), std::move(feeds), std::move(cancel), answer);
  return true;
}

void deliver_transfer(runtime_device& dev, std::int64_t step_id, const transfer_key_ptr& key, tensor value) {
  bool sweep = false;
  status s = arrive(dev, step_id, key, std::move(value), &sweep);
  if (!s.ok()) {
    // Aborted in the table at once (its later tensors refused, its parked Recvs failed),
    // then by the actor, which cancels the step's running kernels.
    dev.rendezvous()->abort(step_id, s);
    caf::anon_send(dev.self(), abort_step_atom::value, step_id, to_caf_error(s));
  }
  if (sweep) caf::delayed_anon_send(dev.self(), k_sweep_every, sweep_atom::value);
}

}  // namespace troupe::actors
