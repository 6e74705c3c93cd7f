#include "actors/session.h"

#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "actors/cluster.h"
#include "actors/device_actor.h"
#include "actors/messages.h"
#include "actors/spawn.h"
#include "core/thread_pool.h"
#include "graph/prune.h"
#include "placement/partition.h"
#include "placement/placer.h"

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

namespace {

// One partition of a prepared step: where it runs and how the step's feeds and fetches
// map onto it.
struct prepared_partition {
  caf::actor device;
  std::uint64_t handle = 0;
  std::vector<int> feeds;    // partition feed i <- step feed feeds[i]
  std::vector<int> fetches;  // partition fetch i -> step fetch fetches[i]
};
struct prepared_step {
  std::vector<prepared_partition> partitions;
  int num_fetches = 0;
};

struct master_state {
  std::shared_ptr<const graph::graph> graph;
  // Not owning: the session holds the cluster, and the cluster's actor system outlives
  // this actor. (Owning it here would let the last reference drop on an actor thread,
  // which would then have to wait for the actor system it runs on.)
  cluster* owner = nullptr;
  session_options options;
  std::unique_ptr<result<placement::placement>> placed;  // computed on first use
  std::map<std::string, std::shared_ptr<const prepared_step>> prepared;
  // Steps started on the devices and not yet answered by all of them, by step id: when
  // the session closes (this actor exits), each is aborted on its devices.
  std::map<std::int64_t, std::shared_ptr<const prepared_step>> running;
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
  for (const auto& name : c.device_names()) {
    if (name.starts_with("/job:worker/")) return name;
  }
  return c.device_names().front();
}

const result<placement::placement>& placement_of(master_actor* self) {
  auto& st = self->state;
  if (st.placed == nullptr) {
    const auto& kernels = st.owner->kernels();
    placement::placer_options po;
    po.default_device = default_device_of(*st.owner, st.options);
    po.allow_soft_placement = st.options.allow_soft_placement;
    st.placed = std::make_unique<result<placement::placement>>(placement::place(
        *st.graph, st.owner->spec(),
        [&kernels](const graph::node& n, const std::string& type) { return kernels.has_kernel(type, n.def); },
        po));
  }
  return *st.placed;
}

// One executable per partition, with the step's feeds and fetches mapped onto it.
struct partition_plan {
  caf::actor device;
  executable_spec spec;
  std::vector<int> feeds, fetches;
};

result<std::vector<partition_plan>> plan_partitions(master_actor* self, const run_request& r) {
  auto& st = self->state;
  auto step = resolve_step(*st.graph, r);
  if (!step.ok()) return step.error();
  const auto& placed = placement_of(self);
  if (!placed.ok()) return placed.error();
  auto parts = placement::partition_graph(*st.graph, *placed, *step);
  if (!parts.ok()) return parts.error();
  std::vector<partition_plan> plans;
  for (const auto& part : parts->partitions) {
    partition_plan plan;
    plan.device = st.owner->device_actor(part.device);
    if (!plan.device) return internal_error("partition for unknown device ", part.device);
    auto g = graph::graph::from_graph_def(part.graph_def);
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
    for (int id = 0; id < shared->num_nodes(); ++id) {
      if (shared->get(id).op_name() == "_Send") targets.push_back(id);
    }
    plan.spec.nodes = graph::prune(*shared, plan.spec.feeds, plan.spec.fetches, targets);
    plans.push_back(std::move(plan));
  }
  return plans;
}

// What one running step collects from its partitions.
struct step_progress {
  std::vector<tensor> fetches;
  int remaining = 0;
  status error;
  caf::response_promise promise;
};

void start_step(master_actor* self, const std::shared_ptr<const prepared_step>& prepared,
                const std::vector<tensor>& feed_values, caf::response_promise promise) {
  auto progress = std::make_shared<step_progress>();
  progress->fetches.resize(static_cast<std::size_t>(prepared->num_fetches));
  progress->remaining = static_cast<int>(prepared->partitions.size());
  progress->promise = std::move(promise);
  if (progress->remaining == 0) {
    progress->promise.deliver(std::vector<tensor>{});
    return;
  }
  std::int64_t step_id = self->state.owner->next_step_id();
  self->state.running.emplace(step_id, prepared);
  auto finish_one = [self, step_id, prepared, progress] {
    if (--progress->remaining > 0) return;
    self->state.running.erase(step_id);
    if (progress->error.ok()) progress->promise.deliver(std::move(progress->fetches));
    else progress->promise.deliver(to_caf_error(progress->error));
  };
  for (const auto& part : prepared->partitions) {
    std::vector<tensor> feeds;
    feeds.reserve(part.feeds.size());
    for (int f : part.feeds) feeds.push_back(feed_values[static_cast<std::size_t>(f)]);
    const prepared_partition* p = &part;  // prepared (and so *p) outlives the step
    self->request(part.device, caf::infinite, run_atom::value, part.handle, step_id, std::move(feeds))
        .then(
            [progress, p, finish_one](std::vector<tensor>& fetched) {
              for (std::size_t i = 0; i < fetched.size() && i < p->fetches.size(); ++i) {
                progress->fetches[static_cast<std::size_t>(p->fetches[i])] = std::move(fetched[i]);
              }
              finish_one();
            },
            [self, prepared, progress, step_id, finish_one](caf::error& e) {
              if (progress->error.ok()) {
                progress->error = to_status(e);
                // The first failure aborts the step everywhere: pending Recvs fail.
                for (const auto& other : prepared->partitions) {
                  self->send(other.device, abort_step_atom::value, step_id, e);
                }
              }
              finish_one();
            });
  }
}

void prepare_then_start(master_actor* self, std::string key, std::vector<partition_plan> plans,
                        std::vector<tensor> feed_values, caf::response_promise promise) {
  auto prepared = std::make_shared<prepared_step>();
  prepared->partitions.resize(plans.size());
  struct pending_prepare {
    int remaining;
    status error;
  };
  auto pending = std::make_shared<pending_prepare>(pending_prepare{static_cast<int>(plans.size()), status()});
  if (plans.empty()) return start_step(self, prepared, feed_values, promise);
  int num_fetches = 0;
  for (const auto& plan : plans) num_fetches += static_cast<int>(plan.fetches.size());
  prepared->num_fetches = num_fetches;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    auto& part = prepared->partitions[i];
    part.device = plans[i].device;
    part.feeds = plans[i].feeds;
    part.fetches = plans[i].fetches;
    auto done = [=]() mutable {
      if (--pending->remaining > 0) return;
      if (!pending->error.ok()) return promise.deliver(to_caf_error(pending->error));
      auto [it, inserted] = self->state.prepared.emplace(key, prepared);
      if (inserted) ++*self->state.num_prepared;
      start_step(self, it->second, feed_values, promise);
    };
    self->request(part.device, caf::infinite, prepare_atom::value, std::move(plans[i].spec))
        .then([prepared, i, done](std::uint64_t handle) mutable {
                prepared->partitions[i].handle = handle;
                done();
              },
              [pending, done](caf::error& e) mutable {
                if (pending->error.ok()) pending->error = to_status(e);
                done();
              });
  }
}
caf::behavior master_behavior(master_actor* self, std::shared_ptr<const graph::graph> g,
                              cluster* owner, session_options options,
                              std::shared_ptr<std::atomic<int>> num_prepared) {
  self->state.graph = std::move(g);
  self->state.owner = owner;
  self->state.options = std::move(options);
  self->state.options.cluster = nullptr;  // the session holds it (see master_state)
  self->state.num_prepared = std::move(num_prepared);
  // The session is closing: its running steps fail everywhere (parked kernels are
  // cancelled, pending Recvs fail), so that nothing of them lingers on a cluster that
  // lives on; their clients hear of it through run_async's monitor.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    for (const auto& [step_id, prepared] : self->state.running) {
      caf::error reason = to_caf_error(cancelled_error("the session was closed while step ", step_id, " ran"));
      for (const auto& part : prepared->partitions) self->send(part.device, abort_step_atom::value, step_id, reason);
    }
    self->state.running.clear();
    self->quit(msg.reason);
  });
  return {
      [=](run_atom, run_request& r) -> caf::result<std::vector<tensor>> {
        auto promise = self->make_response_promise<std::vector<tensor>>();
        std::string key = signature(r);
        if (auto it = self->state.prepared.find(key); it != self->state.prepared.end()) {
          start_step(self, it->second, r.feed_values, promise);
          return promise;
        }
        auto plans = plan_partitions(self, r);
        if (!plans.ok()) {
          promise.deliver(to_caf_error(plans.error()));
          return promise;
        }
        prepare_then_start(self, std::move(key), std::move(*plans), std::move(r.feed_values), promise);
        return promise;
      },
  };
}

// The run_async steps of a session whose callbacks have not been called yet: ~session
// waits for them.
struct pending_callbacks {
  std::mutex mutex;
  std::condition_variable cv;
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
  unpinned_use use(impl_->owner->system());  // outlives the scoped actor
  caf::scoped_actor self{impl_->owner->system()};
  result<std::vector<tensor>> out = internal_error("no reply");
  self->request(impl_->master, caf::infinite, run_atom::value, make_request(feeds, fetches, targets))
      .receive([&](std::vector<tensor>& fetched) { out = std::move(fetched); },
               [&](caf::error& e) { out = to_status(e); });
  return out;
}

void session::run_async(const feed_list& feeds, const std::vector<std::string>& fetches,
                        const std::vector<std::string>& targets, run_callback done) {
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
