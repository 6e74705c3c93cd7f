#include "actors/session.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "actors/cluster.h"
#include "actors/device_actor.h"
#include "actors/messages.h"
#include "actors/spawn.h"
#include "core/env.h"
#include "core/spin_wait.h"
#include "core/thread_pool.h"
#include "graph/prune.h"
#include "placement/partition.h"
#include "placement/placer.h"
#include "placement/device_name.h"

namespace troupe::actors {

caf::error to_caf_error(const status& s) {
  return caf::error(static_cast<std::uint8_t>(s.error_code()), caf::atom("troupe"),
                    caf::make_message(s.message()));
}

status to_status(const caf::error& e) {
  if (!e) return status();
  if (e.category() == caf::atom("troupe")) {
    std::string message;
    if (e.context().match_elements<std::string>()) message = e.context().get_as<std::string>(0);
    return status(static_cast<code>(e.code()), std::move(message));
  }
  if (e.category() == caf::atom("system") &&
      e.code() == static_cast<std::uint8_t>(caf::sec::request_timeout)) {
    return deadline_exceeded_error("request timed out: ", caf::to_string(e));
  }
  return unavailable_error("actor error: ", caf::to_string(e));
}

namespace detail {

// What the master plans for one partition of a step: the device and the executable spec
// it will prepare there, and how the step's feeds and fetches map onto it.
struct partition_plan {
  caf::actor device;
  std::string device_name;
  executable_spec spec;
  std::vector<int> feeds, fetches;
};

using placement_result = std::shared_ptr<const result<placement::placement>>;

// What planning a step on the compute pool sends back to the master.
struct plan_outcome {
  std::string key;
  placement_result placed;  // the graph's placement, when this job computed it
  result<std::vector<partition_plan>> plans = internal_error("not planned");
  run_request request;  // what was planned (no feed values), to plan it again
  // The incarnations the plans' transfer keys carry (plan_context::incarnations).
  std::map<std::string, std::uint64_t, std::less<>> incarnations;
};

}  // namespace detail
}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::detail::plan_outcome)

namespace troupe::actors {
namespace {

using planned_atom = caf::atom_constant<caf::atom("planned")>;
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
using detail::partition_plan;
using detail::placement_result;
using detail::plan_outcome;

// One partition of a prepared step: where it runs and how the step's feeds and fetches
// map onto it.
struct prepared_partition {
  caf::actor device;
  std::string device_name;
  std::uint64_t handle = 0;  // 0 until the device has registered it
  std::vector<int> feeds;    // partition feed i <- step feed feeds[i]
  std::vector<int> fetches;  // partition fetch i -> step fetch fetches[i]
};

// A step signature's partitions, registered on their devices. Its last reference
// unregisters them: a step dropped from the cache (once no running step uses it), or one
// whose preparation failed halfway, leaves nothing behind on any device.
struct prepared_step {
  std::vector<prepared_partition> partitions;
  int num_fetches = 0;
  prepared_step() = default;
  prepared_step(const prepared_step&) = delete;
  prepared_step& operator=(const prepared_step&) = delete;
  ~prepared_step() {
    for (const auto& p : partitions) {
      if (p.handle != 0) caf::anon_send(p.device, unprepare_atom::value, p.handle);
    }
  }
};

// What planning reads, copied out of the master so that a pool thread can plan while the
// master goes on handling messages.
struct plan_context {
  std::shared_ptr<const graph::graph> graph;
  placement::cluster_spec spec = placement::cluster_spec::local();
  std::shared_ptr<const device_directory> devices;
  const kernels::kernel_registry* kernels = nullptr;
  placement::placer_options placer;
  // Each device's incarnation as the master knows it (known_incarnations), for the
  // transfers' keys.
  std::map<std::string, std::uint64_t, std::less<>> incarnations;
};

// What one running step collects from its partitions.
struct step_progress {
  std::shared_ptr<const prepared_step> prepared;
  std::vector<tensor> fetches;
  std::vector<bool> answered;  // by partition
  int remaining = 0;
  status error;
  caf::response_promise promise;
  caf::actor_clock::time_point deadline;  // of the devices' parts (step_timeout)
};

struct master_state {
  plan_context context;
  // Not owning: the session holds the cluster, and the cluster's actor system outlives
  // this actor. (Owning it here would let the last reference drop on an actor thread,
  // which would then have to wait for the actor system it runs on.)
  cluster* owner = nullptr;
  session_options options;
  placement_result placed;  // computed by the first plan
  // Prepared steps by signature, least recently used last; at most
  // options.max_prepared_steps.
  std::list<std::string> recency;
  struct cached_step {
    std::shared_ptr<const prepared_step> step;
    std::list<std::string>::iterator position;
    std::uint64_t generation = 0;  // of the device directory when its devices were last found current
  };
  std::unordered_map<std::string, cached_step> prepared;
  // Signatures being prepared (planned on the pool, then registered on their devices),
  // with the steps waiting for them: concurrent first runs share one preparation.
  struct waiting_step {
    std::vector<tensor> feeds;
    caf::response_promise promise;
  };
  struct preparation {
    std::vector<waiting_step> waiting;
    std::shared_ptr<prepared_step> step;  // null while planning
    std::uint64_t token = 0;               // this preparation's, unique in the session
    std::vector<bool> answered;            // by partition: its device has answered
    int remaining = 0;
    status error;
  };
  std::map<std::string, preparation> preparing;
  std::uint64_t next_token = 1;
  // Steps started on the devices and not yet answered by all of them, by step id.
  std::map<std::int64_t, std::shared_ptr<step_progress>> running;
  bool deadline_check_pending = false;  // a deadline_atom is on its way
  std::set<caf::actor_addr> monitored;  // devices
  // The incarnations of the tasks behind stand-ins (devices of other processes), as each
  // stand-in answered (incarnation_atom); forgotten when the directory replaces it.
  std::map<caf::actor_addr, std::uint64_t> incarnations;
  std::shared_ptr<std::atomic<int>> num_prepared;
  static inline const char* name = "troupe-master";
};
using master_actor = caf::stateful_actor<master_state>;

std::string signature(const run_request& r) {
  std::string key;
  for (const auto& f : r.feed_names) key += f + '\x01';
  key += '\x02';
  for (const auto& f : r.fetches) key += f + '\x01';
  key += '\x02';
  for (const auto& t : r.targets) key += t + '\x01';
  return key;
}

result<placement::step_spec> resolve_step(const graph::graph& g, const run_request& r) {
  placement::step_spec step;
  for (const auto& name : r.feed_names) {
    auto e = g.resolve(name);
    if (!e.ok()) return e.error().with_context(str_cat("feed '", name, "'"));
    step.feeds.push_back(*e);
  }
  for (const auto& name : r.fetches) {
    auto e = g.resolve(name);
    if (!e.ok()) return e.error().with_context(str_cat("fetch '", name, "'"));
    step.fetches.push_back(*e);
  }
  for (const auto& name : r.targets) {
    const graph::node* n = g.find(name);
    if (n == nullptr) return not_found_error("target '", name, "': no node of that name in the graph");
    step.targets.push_back(n->id);
  }
  return step;
}

std::string default_device_of(const cluster& c, const session_options& o) {
  if (!o.default_device.empty()) return o.default_device;
  std::string chosen = c.device_names().front();
  for (const auto& name : c.device_names()) {
    if (name.starts_with("/job:worker/")) {
      chosen = name;
      break;
    }
  }
  // When that task has a GPU, the default is the task: the placer then prefers its GPU
  // for nodes that have a GPU kernel, as TensorFlow does.
  const std::string task(placement::task_of_full_name(chosen));
  for (const auto& name : c.device_names()) {
    if (name.starts_with(task + "/device:GPU:")) return task;
  }
  return chosen;
}

result<placement::placement> place_graph(const plan_context& c) {
  const kernels::kernel_registry* kernels = c.kernels;
  return placement::place(
      *c.graph, c.spec,
      [kernels](const graph::node& n, const std::string& type) { return kernels->has_kernel(type, n.def); },
      c.placer);
}

caf::actor device_named(const plan_context& c, const std::string& name) {
  return c.devices->find(name);
}

// The partitions of a step whose nodes all run on one device: that device runs the
// graph itself (no copy, no Send/Recv). Nothing when the step needs several devices.
std::optional<partition_plan> single_device_plan(const plan_context& c, const placement::placement& placed,
                                                 const placement::step_spec& step) {
  std::vector<int> needed = graph::prune(*c.graph, step.feeds, step.fetches, step.targets);
  if (needed.empty()) return std::nullopt;
  const std::string& device = placed.device_of(needed.front());
  for (int id : needed) {
    if (placed.device_of(id) != device) return std::nullopt;
  }
  partition_plan plan;
  plan.device = device_named(c, device);
  plan.device_name = device;
  plan.spec.graph = c.graph;
  plan.spec.nodes = std::move(needed);
  plan.spec.feeds = step.feeds;
  plan.spec.fetches = step.fetches;
  for (std::size_t i = 0; i < step.feeds.size(); ++i) plan.feeds.push_back(static_cast<int>(i));
  for (std::size_t i = 0; i < step.fetches.size(); ++i) plan.fetches.push_back(static_cast<int>(i));
  return plan;
}

// One executable per partition, with the step's feeds and fetches mapped onto it. Pure:
// runs on the compute pool.
result<std::vector<partition_plan>> plan_partitions(const plan_context& c, const placement::placement& placed,
                                                    const run_request& r) {
  auto step = resolve_step(*c.graph, r);
  if (!step.ok()) return step.error();
  std::vector<partition_plan> plans;
  if (auto one = single_device_plan(c, placed, *step)) {
    if (!one->device) return internal_error("the step's nodes are placed on unknown device ", one->device_name);
    plans.push_back(std::move(*one));
    return plans;
  }
  // Devices of one task share its process; of two tasks, only when both are hosted here.
  placement::partition_options po;
  po.incarnations = c.incarnations;
  po.same_process = [devices = c.devices](const std::string& a, const std::string& b) {
    return placement::task_of_full_name(a) == placement::task_of_full_name(b) || devices == nullptr ||
           (!devices->remote(a) && !devices->remote(b));
  };
  auto parts = placement::partition_graph(*c.graph, placed, *step, po);
  if (!parts.ok()) return parts.error();
  for (auto& part : parts->partitions) {
    partition_plan plan;
    plan.device = device_named(c, part.device);
    plan.device_name = part.device;
    if (!plan.device) return internal_error("partition for unknown device ", part.device);
    auto g = graph::graph::from_graph_def(std::move(part.graph_def));
    if (!g.ok()) return g.error().with_context(str_cat("partition for ", part.device));
    auto shared = std::make_shared<const graph::graph>(std::move(*g));
    plan.spec.graph = shared;
    for (const auto& f : part.feeds) {
      auto e = shared->resolve(f.tensor);
      if (!e.ok()) return e.error().with_context(str_cat("partition for ", part.device));
      plan.spec.feeds.push_back(*e);
      plan.feeds.push_back(f.step_index);
    }
    for (const auto& f : part.fetches) {
      auto e = shared->resolve(f.tensor);
      if (!e.ok()) return e.error().with_context(str_cat("partition for ", part.device));
      plan.spec.fetches.push_back(*e);
      plan.fetches.push_back(f.step_index);
    }
    std::vector<int> targets;
    for (const auto& t : part.targets) {
      if (const auto* n = shared->find(t.node)) targets.push_back(n->id);
    }
    for (const auto& name : part.also_run) {
      if (const auto* n = shared->find(name)) targets.push_back(n->id);
    }
    for (int id = 0; id < shared->num_nodes(); ++id) {
      if (shared->get(id).op_name() == "_Send") targets.push_back(id);
    }
    plan.spec.nodes = graph::prune(*shared, plan.spec.feeds, plan.spec.fetches, targets);
    plans.push_back(std::move(plan));
  }
  return plans;
}

void monitor_device(master_actor* self, const caf::actor& device) {
  if (self->state.monitored.insert(device.address()).second) self->monitor(device);
}

// Records partition `index`'s answer (`fetched`, or `error` when not ok) for step
// `step_id`; the first error aborts the step everywhere; the last answer answers the
// client. Later answers for a partition already counted (a device that went down and
// still answered) are ignored.
void partition_answered(master_actor* self, std::int64_t step_id, std::size_t index, std::vector<tensor>* fetched,
                        const status& error) {
  auto& st = self->state;
  auto it = st.running.find(step_id);
  if (it == st.running.end()) return;
  step_progress& progress = *it->second;
  if (progress.answered[index]) return;
  progress.answered[index] = true;
  const prepared_partition& part = progress.prepared->partitions[index];
  if (!error.ok()) {
    if (progress.error.ok()) {
      progress.error = error;
      // The first failure aborts the step everywhere: pending Recvs fail.
      caf::error reason = to_caf_error(error);
      for (const auto& other : progress.prepared->partitions) {
        self->send(other.device, abort_step_atom::value, step_id, reason);
      }
    }
  } else if (fetched != nullptr) {
    for (std::size_t i = 0; i < fetched->size() && i < part.fetches.size(); ++i) {
      progress.fetches[static_cast<std::size_t>(part.fetches[i])] = std::move((*fetched)[i]);
    }
  }
  if (--progress.remaining > 0) return;
  auto done = std::move(it->second);
  st.running.erase(it);
  if (done->error.ok()) done->promise.deliver(std::move(done->fetches));
  else done->promise.deliver(to_caf_error(done->error));
}

// Partition `index` of step `step_id` failed with `e`: a device that was down when the
// request went out is named.
status part_error(master_actor* self, std::int64_t step_id, std::size_t index, const caf::error& e) {
  auto it = self->state.running.find(step_id);
  if (e != caf::sec::request_receiver_down || it == self->state.running.end()) return to_status(e);
  return unavailable_error("device ", it->second->prepared->partitions[index].device_name,
                           " is down (its task was killed or restarted)");
}

// While steps run, a deadline_atom comes every eighth of the step timeout (1 ms to 1 s):
// a part fails at most that long after its deadline.
void arm_deadline_check(master_actor* self) {
  auto& st = self->state;
  if (st.deadline_check_pending || st.running.empty()) return;
  st.deadline_check_pending = true;
  const auto every = std::clamp<std::chrono::milliseconds>(st.options.step_timeout / 8, std::chrono::milliseconds(1),
                                                           std::chrono::seconds(1));
  self->delayed_send(self, every, deadline_atom::value);
}

void start_step(master_actor* self, std::shared_ptr<const prepared_step> prepared, std::vector<tensor> feed_values,
                caf::response_promise promise) {
  auto& st = self->state;
  if (prepared->partitions.empty()) {
    promise.deliver(std::vector<tensor>{});
    return;
  }
  auto progress = std::make_shared<step_progress>();
  progress->fetches.resize(static_cast<std::size_t>(prepared->num_fetches));
  progress->answered.assign(prepared->partitions.size(), false);
  progress->remaining = static_cast<int>(prepared->partitions.size());
  progress->promise = std::move(promise);
  progress->prepared = prepared;
  const std::int64_t step_id = st.owner->next_step_id();
  st.running.emplace(step_id, progress);
  const auto now = self->clock().now();
  const auto timeout = st.options.step_timeout;
  // Compared in milliseconds: a timeout of milliseconds::max() would overflow nanoseconds.
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(caf::actor_clock::time_point::max() - now);
  progress->deadline = timeout >= room ? caf::actor_clock::time_point::max() : now + timeout;
  for (std::size_t i = 0; i < prepared->partitions.size(); ++i) {
    const prepared_partition& part = prepared->partitions[i];
    std::vector<tensor> feeds;
    feeds.reserve(part.feeds.size());
    for (int f : part.feeds) feeds.push_back(feed_values[static_cast<std::size_t>(f)]);
    // No timeout on the request itself: one timer per request would cost two wake-ups
    // of CAF's clock thread per partition and step; check_deadlines() enforces it.
    self->request(part.device, caf::infinite, run_atom::value, part.handle, step_id, std::move(feeds))
        .then([self, step_id, i](std::vector<tensor>& fetched) { partition_answered(self, step_id, i, &fetched, status()); },
              [self, step_id, i](caf::error& e) { partition_answered(self, step_id, i, nullptr, part_error(self, step_id, i, e)); });
  }
  arm_deadline_check(self);
}

// Fails the parts of running steps that are past their deadline with DEADLINE_EXCEEDED
// naming the device (the first failure aborts the step everywhere), then checks again
// later while steps run.
void check_deadlines(master_actor* self) {
  auto& st = self->state;
  st.deadline_check_pending = false;
  const auto now = self->clock().now();
  std::vector<std::tuple<std::int64_t, std::size_t, std::string>> late;
  for (const auto& [step_id, progress] : st.running) {
    if (progress->deadline > now) continue;
    for (std::size_t i = 0; i < progress->answered.size(); ++i) {
      if (!progress->answered[i]) late.emplace_back(step_id, i, progress->prepared->partitions[i].device_name);
    }
  }
  for (const auto& [step_id, index, device] : late) {
    partition_answered(self, step_id, index, nullptr,
                       deadline_exceeded_error("step ", step_id, ": device ", device,
                                               " did not finish its part within the step timeout of ",
                                               st.options.step_timeout.count(), " ms",
                                               env::simulated() ? " of virtual time" : "",
                                               " (session_options::step_timeout",
                                               env::simulated() ? "; the simulation's rates (simulation.compute, "
                                                                  "simulation.network) set how long its kernels and "
                                                                  "transfers take"
                                                                : "",
                                               ")"));
  }
  arm_deadline_check(self);
}

// Fails every step waiting for signature `key`'s preparation.
void fail_waiting(master_actor* self, const std::string& key, status error) {
  auto it = self->state.preparing.find(key);
  if (it == self->state.preparing.end()) return;
  auto waiting = std::move(it->second.waiting);
  self->state.preparing.erase(it);
  for (auto& w : waiting) w.promise.deliver(to_caf_error(error));
}

// Keeps a prepared step for its signature, dropping the least recently used beyond the
// bound (their partitions are unregistered once no running step holds them).
void remember(master_actor* self, const std::string& key, std::shared_ptr<const prepared_step> step) {
  auto& st = self->state;
  st.recency.push_front(key);
  // Generation 0 never matches a directory that has devices: the first run checks them.
  st.prepared[key] = master_state::cached_step{std::move(step), st.recency.begin(), 0};
  ++*st.num_prepared;
  while (static_cast<int>(st.prepared.size()) > std::max(1, st.options.max_prepared_steps)) {
    st.prepared.erase(st.recency.back());
    st.recency.pop_back();
  }
}

// Whether a cached step's devices are still the directory's: a task restarted since it
// was prepared (kill_task, restart_task) has new device actors, and the step must be
// prepared again on them. The down_msg of the old actors, which drops such steps too,
// may come after the next run: this check does not depend on it.
bool still_current(master_actor* self, master_state::cached_step& cached) {
  const device_directory& directory = *self->state.context.devices;
  const std::uint64_t now = directory.generation();
  if (cached.generation == now) return true;
  for (const auto& part : cached.step->partitions) {
    if (directory.find(part.device_name) != part.device) return false;
  }
  cached.generation = now;
  return true;
}

// Signature `it`'s preparation is over and good: it is kept, and the steps waiting for
// it start.
void finish_preparation(master_actor* self, std::map<std::string, master_state::preparation>::iterator it) {
  const std::string key = it->first;
  auto waiting = std::move(it->second.waiting);
  std::shared_ptr<const prepared_step> step = std::move(it->second.step);
  self->state.preparing.erase(it);
  remember(self, key, step);
  for (auto& w : waiting) start_step(self, step, std::move(w.feeds), std::move(w.promise));
}

// Records partition `index`'s registration (`handle`, or `error` when not ok) for
// signature `key`; once every device has answered, starts the steps waiting for it, or
// fails them (and what was registered is unregistered with the prepared step). Later
// answers for a partition already counted (from a device that went down) are ignored.
void partition_prepared(master_actor* self, const std::string& key, std::uint64_t token, std::size_t index,
                        std::uint64_t handle, const status& error) {
  auto it = self->state.preparing.find(key);
  // An answer for an earlier preparation of the signature (a request that timed out after
  // its device was counted as down) belongs to no one now.
  if (it == self->state.preparing.end() || it->second.step == nullptr || it->second.token != token) return;
  auto& prep = it->second;
  if (prep.answered[index]) return;
  prep.answered[index] = true;
  if (!error.ok()) {
    if (prep.error.ok()) prep.error = error;
  } else {
    prep.step->partitions[index].handle = handle;
  }
  if (--prep.remaining > 0) return;
  if (!prep.error.ok()) return fail_waiting(self, key, status(prep.error));  // a copy: the entry goes
  finish_preparation(self, it);
}

// Registers each planned partition with its device (partition_prepared collects the
// answers).
void prepare_on_devices(master_actor* self, const std::string& key, std::vector<partition_plan> plans) {
  auto it = self->state.preparing.find(key);
  if (it == self->state.preparing.end()) return;
  auto& prep = it->second;
  prep.step = std::make_shared<prepared_step>();
  prep.step->partitions.resize(plans.size());
  for (const auto& plan : plans) prep.step->num_fetches += static_cast<int>(plan.fetches.size());
  prep.token = self->state.next_token++;
  prep.answered.assign(plans.size(), false);
  prep.remaining = static_cast<int>(plans.size());
  if (plans.empty()) return finish_preparation(self, it);  // nothing to run anywhere (no feeds, fetches or targets)
  const std::uint64_t token = prep.token;
  const auto timeout = self->state.options.prepare_timeout;
  const std::string client = default_device_of(*self->state.owner, self->state.options);
  for (std::size_t i = 0; i < plans.size(); ++i) {
    plans[i].spec.client = client;
    auto& part = prep.step->partitions[i];
    part.device = plans[i].device;
    part.device_name = plans[i].device_name;
    part.feeds = std::move(plans[i].feeds);
    part.fetches = std::move(plans[i].fetches);
    monitor_device(self, part.device);
    self->request(part.device, timeout, prepare_atom::value, token, std::move(plans[i].spec))
        .then([self, key, token, i](std::uint64_t handle) { partition_prepared(self, key, token, i, handle, status()); },
              [self, key, token, i, timeout, device = part.device, name = part.device_name](caf::error& e) {
                if (e != caf::sec::request_timeout) return partition_prepared(self, key, token, i, 0, to_status(e));
                // Given up: the device must not register it later (or must drop it).
                self->send(device, forget_atom::value, token);
                partition_prepared(self, key, token, i, 0,
                                   deadline_exceeded_error("device ", name, " did not prepare its partition within "
                                                           "the prepare timeout of ", timeout.count(),
                                                           " ms (session_options::prepare_timeout)"));
              });
  }
}

// Every device's incarnation as far as the master knows: the directory's (devices of this
// process), else what the stand-in answered. Forgets the answers of replaced stand-ins.
std::map<std::string, std::uint64_t, std::less<>> known_incarnations(master_actor* self) {
  auto& st = self->state;
  const device_directory& directory = *st.context.devices;
  std::map<std::string, std::uint64_t, std::less<>> out;
  std::map<caf::actor_addr, std::uint64_t> current;
  for (const auto& [name, actor] : directory.entries()) {
    std::uint64_t incarnation = directory.incarnation(name);
    if (auto it = st.incarnations.find(actor.address()); incarnation == 0 && it != st.incarnations.end()) {
      incarnation = it->second;
      current.insert(*it);
    }
    if (incarnation != 0) out[name] = incarnation;
  }
  st.incarnations = std::move(current);
  return out;
}

// Places (once per session), partitions and builds the step's executables on the pool,
// with the incarnations known now in its transfers' keys; planned_atom brings the plans.
void plan_on_pool(master_actor* self, const std::string& key, run_request request) {
  auto& st = self->state;
  plan_context context = st.context;
  context.incarnations = known_incarnations(self);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  st.owner->pool().schedule([me, context = std::move(context), placed = st.placed, key,
                             request = std::move(request)]() mutable {
    plan_outcome out;
    out.key = key;
    status thrown = kernels::catch_exceptions([&] {
      if (placed == nullptr) out.placed = std::make_shared<const result<placement::placement>>(place_graph(context));
      const auto& p = placed != nullptr ? *placed : *out.placed;
      if (!p.ok()) out.plans = p.error();
      else out.plans = plan_partitions(context, *p, request);
    });
    if (!thrown.ok()) out.plans = thrown.with_context("planning the step");
    out.request = std::move(request);
    out.incarnations = std::move(context.incarnations);
    caf::anon_send(me, planned_atom::value, std::move(out));
  });
}

// Whether the plans' transfer keys carry the incarnations of their devices' tasks as the
// master knows them now. When not, plans the step again, first asking the stand-ins whose
// task's incarnation it has not heard yet (a task's first use, or its first since a
// restart gave new stand-ins: each says hello if it has not); a stand-in that cannot say
// fails the step with its reason. (Another preparation may have learned an incarnation
// while this one was planned, or a task may have restarted.) Returns whether it did.
bool plan_again_if_stale(master_actor* self, plan_outcome& out) {
  if (out.plans->size() < 2) return false;  // one device: no transfers, no keys
  auto& st = self->state;
  const device_directory& directory = *st.context.devices;
  std::vector<std::pair<std::string, caf::actor>> unknown;
  bool stale = false;
  for (const partition_plan& plan : *out.plans) {
    std::uint64_t now = directory.incarnation(plan.device_name);
    if (now == 0) {
      auto heard = st.incarnations.find(plan.device.address());
      if (heard == st.incarnations.end()) {
        unknown.emplace_back(plan.device_name, plan.device);
        continue;
      }
      now = heard->second;
    }
    auto used = out.incarnations.find(plan.device_name);
    stale = stale || now != (used == out.incarnations.end() ? 0 : used->second);
  }
  if (unknown.empty()) {
    if (stale) plan_on_pool(self, out.key, std::move(out.request));
    return stale;
  }
  struct asking {
    int remaining = 0;
    status error;
  };
  auto progress = std::make_shared<asking>();
  progress->remaining = static_cast<int>(unknown.size());
  auto answered = [self, progress, key = out.key, request = std::make_shared<run_request>(std::move(out.request))] {
    if (--progress->remaining > 0) return;
    if (!progress->error.ok()) return fail_waiting(self, key, progress->error);
    plan_on_pool(self, key, std::move(*request));
  };
  for (const auto& [name, device] : unknown) {
    self->request(device, st.options.prepare_timeout, incarnation_atom::value)
        .then(
            [self, answered, address = device.address()](std::uint64_t incarnation) {
              self->state.incarnations[address] = incarnation;
              answered();
            },
            [progress, answered, name = name](caf::error& e) {
              if (progress->error.ok()) {
                progress->error = to_status(e).with_context(str_cat("learning the incarnation of ", name, "'s task"));
              }
              answered();
            });
  }
  return true;
}

// A device this master uses went down: its part of every running step fails with
// `unavailable` (the rest of each such step is aborted), and no cached step keeps it.
void device_down(master_actor* self, const caf::down_msg& msg) {
  auto& st = self->state;
  st.monitored.erase(msg.source);
  std::vector<std::pair<std::int64_t, std::size_t>> lost;
  std::string name = "a device";
  for (const auto& [step_id, progress] : st.running) {
    const auto& parts = progress->prepared->partitions;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].device.address() == msg.source) {
        name = parts[i].device_name;
        if (!progress->answered[i]) lost.emplace_back(step_id, i);
      }
    }
  }
  for (auto [step_id, index] : lost) {
    partition_answered(self, step_id, index, nullptr,
                       unavailable_error("device ", name, " went down while step ", step_id,
                                         " ran (", caf::to_string(msg.reason), ")"));
  }
  std::vector<std::tuple<std::string, std::uint64_t, std::size_t>> unprepared;
  for (const auto& [key, prep] : st.preparing) {
    if (prep.step == nullptr) continue;
    for (std::size_t i = 0; i < prep.step->partitions.size(); ++i) {
      const auto& part = prep.step->partitions[i];
      if (part.device.address() == msg.source && !prep.answered[i]) {
        name = part.device_name;
        unprepared.emplace_back(key, prep.token, i);
      }
    }
  }
  for (const auto& [key, token, index] : unprepared) {
    partition_prepared(self, key, token, index, 0,
                       unavailable_error("device ", name, " went down while it prepared a step (",
                                         caf::to_string(msg.reason), ")"));
  }
  for (auto it = st.prepared.begin(); it != st.prepared.end();) {
    const auto& parts = it->second.step->partitions;
    const bool uses = std::any_of(parts.begin(), parts.end(), [&](const prepared_partition& p) {
      return p.device.address() == msg.source;
    });
    if (uses) {
      st.recency.erase(it->second.position);
      it = st.prepared.erase(it);
    } else {
      ++it;
    }
  }
}

caf::behavior master_behavior(master_actor* self, std::shared_ptr<const graph::graph> g,
                              cluster* owner, session_options options,
                              std::shared_ptr<std::atomic<int>> num_prepared) {
  auto& st = self->state;
  st.owner = owner;
  st.options = std::move(options);
  st.options.cluster = nullptr;  // the session holds it (see master_state)
  st.num_prepared = std::move(num_prepared);
  st.context.graph = std::move(g);
  st.context.spec = owner->spec();
  st.context.devices = owner->directory();
  st.context.kernels = &owner->kernels();
  st.context.placer.default_device = default_device_of(*owner, st.options);
  st.context.placer.allow_soft_placement = st.options.allow_soft_placement;
  // The session is closing: its running steps fail everywhere (parked kernels are
  // cancelled, pending Recvs fail) so that nothing of them lingers on a cluster that
  // lives on, and every client still waiting is answered. The prepared steps go with
  // this actor's state, unregistering their partitions.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& st = self->state;
    for (const auto& [step_id, progress] : st.running) {
      status closed = cancelled_error("the session was closed while step ", step_id, " ran");
      for (const auto& part : progress->prepared->partitions) {
        self->send(part.device, abort_step_atom::value, step_id, to_caf_error(closed));
      }
      progress->promise.deliver(to_caf_error(closed));
    }
    st.running.clear();
    for (auto& [key, prep] : st.preparing) {
      for (auto& w : prep.waiting) w.promise.deliver(to_caf_error(cancelled_error("the session was closed")));
    }
    st.preparing.clear();
    st.prepared.clear();
    self->quit(msg.reason);
  });
  self->set_down_handler([self](caf::down_msg& msg) { device_down(self, msg); });
  return {
      [=](run_atom, run_request& r) -> caf::result<std::vector<tensor>> {
        auto& st = self->state;
        auto promise = self->make_response_promise<std::vector<tensor>>();
        std::string key = signature(r);
        if (auto it = st.prepared.find(key); it != st.prepared.end()) {
          if (still_current(self, it->second)) {
            st.recency.splice(st.recency.begin(), st.recency, it->second.position);
            start_step(self, it->second.step, std::move(r.feed_values), promise);
            return promise;
          }
          st.recency.erase(it->second.position);
          st.prepared.erase(it);
        }
        auto [waiting, first] = st.preparing.try_emplace(key);
        waiting->second.waiting.push_back({std::move(r.feed_values), promise});
        if (!first) return promise;  // the first run of this signature prepares it
        // Placement, partitioning and graph building are unbounded work: on the pool.
        r.feed_values.clear();
        plan_on_pool(self, key, std::move(r));
        return promise;
      },
      [=](deadline_atom) { check_deadlines(self); },
      [=](planned_atom, plan_outcome& out) {
        auto& st = self->state;
        if (st.placed == nullptr && out.placed != nullptr) st.placed = out.placed;
        if (!out.plans.ok()) return fail_waiting(self, out.key, out.plans.error());
        if (plan_again_if_stale(self, out)) return;
        prepare_on_devices(self, out.key, std::move(*out.plans));
      },
  };
}

// The run_async steps of a session whose callbacks have not been called yet: ~session
// waits for them.
struct pending_callbacks {
  std::mutex mutex;
  env::condition_variable cv;
  int count = 0;
  std::atomic<bool> closing{false};
};

// The callbacks the current thread is inside (to let a callback destroy its session).
thread_local const pending_callbacks* calling_back = nullptr;

}  // namespace

struct session::impl {
  std::shared_ptr<const graph::graph> graph;
  std::shared_ptr<cluster> owner;
  caf::actor master;
  std::shared_ptr<std::atomic<int>> num_prepared = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<pending_callbacks> pending = std::make_shared<pending_callbacks>();
  // The blocking actors that run() waited through, kept for the next call: ending a
  // scoped_actor wakes CAF's clock thread (it cancels the actor's timeouts), which cost
  // a wake-up per step. Declared after `owner`: they end before the actor system can.
  std::mutex callers_mutex;
  std::vector<std::unique_ptr<caf::scoped_actor>> idle_callers;

  std::unique_ptr<caf::scoped_actor> take_caller() {
    {
      std::lock_guard<std::mutex> lock(callers_mutex);
      if (!idle_callers.empty()) {
        auto caller = std::move(idle_callers.back());
        idle_callers.pop_back();
        return caller;
      }
    }
    return std::make_unique<caf::scoped_actor>(owner->system());
  }
  void give_back(std::unique_ptr<caf::scoped_actor> caller) {
    std::lock_guard<std::mutex> lock(callers_mutex);
    idle_callers.push_back(std::move(caller));
  }
};

session::session(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

result<std::unique_ptr<session>> session::create(graph::graph g, session_options options) {
  return create(std::make_shared<const graph::graph>(std::move(g)), std::move(options));
}

result<std::unique_ptr<session>> session::create(std::shared_ptr<const graph::graph> g,
                                                 session_options options) {
  auto p = std::make_unique<impl>();
  p->graph = std::move(g);
  p->owner = options.cluster;
  if (p->owner == nullptr) {
    cluster_options co;
    const int gpus = options.gpus >= 0 ? options.gpus : kernels::visible_gpus();
    if (gpus > 0) {
      auto spec = placement::cluster_spec::create(
          {placement::job_spec{"localhost", {placement::task_spec{{{"CPU", 1}, {"GPU", gpus}}}}}});
      if (!spec.ok()) return spec.error();
      co.spec = std::move(*spec);
    }
    co.compute_threads = options.compute_threads;
    co.actor_threads = options.actor_threads;
    co.memory_limit = options.memory_limit;
    co.kernels = options.kernels;
    auto c = cluster::create(std::move(co));
    if (!c.ok()) return c.error();
    p->owner = std::move(*c);
  }
  p->master = spawn_unpinned(p->owner->system(), master_behavior, p->graph, p->owner.get(), std::move(options),
                             p->num_prepared);
  return std::unique_ptr<session>(new session(std::move(p)));
}

session::~session() {
  // The master aborts the steps still running on the devices as it exits; each
  // run_async step's actor, monitoring the master, then calls back with `cancelled`.
  impl_->pending->closing = true;
  caf::anon_send_exit(impl_->master, caf::exit_reason::user_shutdown);
  impl_->master = nullptr;
  if (calling_back != impl_->pending.get()) {
    std::unique_lock<std::mutex> lock(impl_->pending->mutex);
    impl_->pending->cv.wait(lock, [&] { return impl_->pending->count == 0; });
  }
  {
    unpinned_use use(impl_->owner->system());
    impl_->idle_callers.clear();
  }
  // The cluster (and its actor system) goes when its last user does.
}

namespace {
run_request make_request(const feed_list& feeds, const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets) {
  run_request r;
  for (const auto& [name, value] : feeds) {
    r.feed_names.push_back(name);
    r.feed_values.push_back(value);
  }
  r.fetches = fetches;
  r.targets = targets;
  return r;
}
}  // namespace

result<std::vector<tensor>> session::run(const feed_list& feeds,
                                         const std::vector<std::string>& fetches,
                                         const std::vector<std::string>& targets) {
  if (env::simulated()) {
    // A blocked thread would stop the simulated world: wait through env instead.
    struct answer {
      std::mutex mutex;
      env::condition_variable ready;
      std::optional<result<std::vector<tensor>>> value;
    };
    auto a = std::make_shared<answer>();
    run_async(feeds, fetches, targets, [a](result<std::vector<tensor>> r) {
      std::lock_guard<std::mutex> lock(a->mutex);
      a->value = std::move(r);
      a->ready.notify_all();
    });
    std::unique_lock<std::mutex> lock(a->mutex);
    a->ready.wait(lock, [&] { return a->value.has_value(); });
    return std::move(*a->value);
  }
  unpinned_use use(impl_->owner->system());  // outlives the scoped actor's use
  std::unique_ptr<caf::scoped_actor> self = impl_->take_caller();
  result<std::vector<tensor>> out = internal_error("no reply");
  const auto start = std::chrono::steady_clock::now();
  auto answer = (*self)->request(impl_->master, caf::infinite, run_atom::value, make_request(feeds, fetches, targets));
  // A short step's answer comes sooner than a sleeping thread wakes (core/spin_wait.h).
  // The owner may look at its mailbox between receives (it is never blocked then).
  // Each thread's own history decides (a trainer's steps are long, a reader's short).
  thread_local spin_gate spin;
  spin.spin([&] { return !(*self)->mailbox().empty(); });
  answer.receive([&](std::vector<tensor>& fetched) { out = std::move(fetched); },
                 [&](caf::error& e) { out = to_status(e); });
  spin.record(std::chrono::steady_clock::now() - start);
  impl_->give_back(std::move(self));
  return out;
}

// How often the BUGGIFY sites of a step fire when live: every step passes them (readers',
// trainers', the SYNC coordinator's), so 1 in 10 rather than a site's usual 1 in 4.
constexpr double k_step_buggify_probability = 0.1;

void session::run_async(const feed_list& feeds, const std::vector<std::string>& fetches,
                        const std::vector<std::string>& targets, run_callback done) {
  // BUGGIFY site step.unavailable: the step fails as a step caught by a task's loss does
  // (a lost connection, a task restarting), before any of it runs; its caller must retry.
  if (env::buggify("step.unavailable", k_step_buggify_probability)) {
    done(unavailable_error("buggify step.unavailable: the step failed before it ran"));
    return;
  }
  // BUGGIFY site step.lost_answer: the step runs, but its caller hears UNAVAILABLE (a
  // connection lost after the work was done): what the step changed stays changed, and
  // the caller's retry must not count on it not having run.
  if (env::buggify("step.lost_answer", k_step_buggify_probability)) {
    done = [done = std::move(done)](result<std::vector<tensor>> r) {
      done(r.ok() ? result<std::vector<tensor>>(
                        unavailable_error("buggify step.lost_answer: the step ran but its answer was lost"))
                  : std::move(r));
    };
  }
  std::shared_ptr<pending_callbacks> pending = impl_->pending;
  {
    std::lock_guard<std::mutex> lock(pending->mutex);
    ++pending->count;
  }
  // The state travels as spawn arguments: CAF 0.17 dereferences a null argument tuple
  // for argument-less function actors (UBSan reports it).
  spawn_unpinned(
      impl_->owner->system(),
      [](caf::event_based_actor* self, caf::actor master, run_request request, run_callback done,
         std::shared_ptr<pending_callbacks> pending) {
        auto once = std::make_shared<std::atomic<bool>>(false);
        auto finish = [done, once, pending](result<std::vector<tensor>> r) {
          if (once->exchange(true)) return;
          calling_back = pending.get();
          done(std::move(r));
          calling_back = nullptr;
          std::lock_guard<std::mutex> lock(pending->mutex);
          --pending->count;
          pending->cv.notify_all();
        };
        const auto closed = [] { return cancelled_error("the session was closed while the step ran"); };
        // A request whose receiver dies is never answered (CAF 0.17), so the master is
        // monitored: if it goes (the session is being destroyed) the step fails.
        self->monitor(master);
        self->set_down_handler([self, finish, closed](caf::down_msg&) {
          finish(closed());
          self->quit();
        });
        // Nothing but the master's pending response holds this actor: when the master
        // goes, this actor may end as unreachable before its down_msg is handled. Its
        // end calls back whatever way it comes.
        self->attach_functor([finish, closed](const caf::error&) { finish(closed()); });
        self->request(master, caf::infinite, run_atom::value, std::move(request))
            .then(
                [self, finish](std::vector<tensor>& fetched) {
                  finish(std::move(fetched));
                  self->quit();
                },
                [self, finish, closed, pending](caf::error& e) {
                  // A request bounced by a master that is exiting says so in CAF's words.
                  const bool bounced = pending->closing && e.category() != caf::atom("troupe");
                  finish(bounced ? closed() : to_status(e));
                  self->quit();
                });
      },
      impl_->master, make_request(feeds, fetches, targets), std::move(done), pending);
}

const graph::graph& session::current_graph() const { return *impl_->graph; }

const std::shared_ptr<cluster>& session::get_cluster() const { return impl_->owner; }

int session::num_prepared() const { return impl_->num_prepared->load(); }

}  // namespace troupe::actors
