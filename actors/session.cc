#include "actors/session.h"

#include <atomic>
#include <future>
#include <map>
#include <thread>

#include "actors/device_actor.h"
#include "actors/messages.h"
#include "core/thread_pool.h"
#include "graph/prune.h"

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

struct master_state {
  std::shared_ptr<const graph::graph> graph;
  caf::actor device;
  std::map<std::string, std::uint64_t> prepared;  // step signature -> device partition
  std::int64_t next_step = 1;
  std::shared_ptr<std::atomic<int>> num_prepared;
  static inline const char* name = "troupe-master";
};

std::string signature(const run_request& r) {
  std::string key;
  for (const auto& f : r.feed_names) key += f + '\x01';
  key += '\x02';
  for (const auto& f : r.fetches) key += f + '\x01';
  key += '\x02';
  for (const auto& t : r.targets) key += t + '\x01';
  return key;
}

result<executable_spec> plan_step(const graph::graph& g, std::shared_ptr<const graph::graph> shared,
                                  const run_request& r) {
  executable_spec spec;
  spec.graph = std::move(shared);
  for (const auto& name : r.feed_names) {
    auto e = g.resolve(name);
    if (!e.ok()) return e.error().with_context(str_cat("feed '", name, "'"));
    spec.feeds.push_back(*e);
  }
  for (const auto& name : r.fetches) {
    auto e = g.resolve(name);
    if (!e.ok()) return e.error().with_context(str_cat("fetch '", name, "'"));
    spec.fetches.push_back(*e);
  }
  std::vector<int> targets;
  for (const auto& name : r.targets) {
    const graph::node* n = g.find(name);
    if (n == nullptr) return not_found_error("target '", name, "': no node of that name in the graph");
    targets.push_back(n->id);
  }
  spec.nodes = graph::prune(g, spec.feeds, spec.fetches, targets);
  return spec;
}

caf::behavior master_behavior(caf::stateful_actor<master_state>* self,
                              std::shared_ptr<const graph::graph> g, caf::actor device,
                              std::shared_ptr<std::atomic<int>> num_prepared) {
  self->state.graph = std::move(g);
  self->state.device = std::move(device);
  self->state.num_prepared = std::move(num_prepared);
  return {
      [=](run_atom, run_request& r) -> caf::result<std::vector<tensor>> {
        auto& st = self->state;
        std::int64_t step_id = st.next_step++;
        std::string key = signature(r);
        if (auto it = st.prepared.find(key); it != st.prepared.end()) {
          auto promise = self->make_response_promise<std::vector<tensor>>();
          promise.delegate(st.device, run_atom::value, it->second, step_id, std::move(r.feed_values));
          return promise;
        }
        auto spec = plan_step(*st.graph, st.graph, r);
        if (!spec.ok()) return to_caf_error(spec.error());
        auto promise = self->make_response_promise<std::vector<tensor>>();
        self->request(st.device, caf::infinite, prepare_atom::value, std::move(*spec))
            .then(
                [=](std::uint64_t handle) mutable {
                  if (self->state.prepared.emplace(key, handle).second) ++*self->state.num_prepared;
                  promise.delegate(self->state.device, run_atom::value, handle, step_id,
                                   std::move(r.feed_values));
                },
                [=](caf::error& e) mutable { promise.deliver(std::move(e)); });
        return promise;
      },
  };
}

}  // namespace

struct session::impl {
  std::shared_ptr<const graph::graph> graph;
  std::unique_ptr<compute_pool> pool;
  std::unique_ptr<caf::actor_system_config> config;
  std::unique_ptr<caf::actor_system> system;
  caf::actor device;
  caf::actor master;
  std::shared_ptr<std::atomic<int>> num_prepared = std::make_shared<std::atomic<int>>(0);
};

session::session(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

result<std::unique_ptr<session>> session::create(graph::graph g, session_options options) {
  return create(std::make_shared<const graph::graph>(std::move(g)), options);
}

result<std::unique_ptr<session>> session::create(std::shared_ptr<const graph::graph> g,
                                                 session_options options) {
  auto p = std::make_unique<impl>();
  p->graph = std::move(g);
  int compute = options.compute_threads > 0 ? options.compute_threads : default_num_threads();
  p->pool = std::make_unique<compute_pool>(compute);
  p->config = std::make_unique<caf::actor_system_config>();
  int actor_threads = options.actor_threads > 0
                          ? options.actor_threads
                          : static_cast<int>(std::min(2u, std::max(1u, std::thread::hardware_concurrency())));
  p->config->set("scheduler.max-threads", static_cast<std::size_t>(actor_threads));
  p->config->set("scheduler.policy", caf::atom("sharing"));
  p->config->set("logger.verbosity", caf::atom("quiet"));
  p->system = std::make_unique<caf::actor_system>(*p->config);
  device_options dev;
  dev.pool = p->pool.get();
  dev.kernels = options.kernels;
  p->device = spawn_device(*p->system, dev);
  p->master = p->system->spawn(master_behavior, p->graph, p->device, p->num_prepared);
  return std::unique_ptr<session>(new session(std::move(p)));
}

session::~session() {
  caf::anon_send_exit(impl_->master, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(impl_->device, caf::exit_reason::user_shutdown);
  impl_->master = nullptr;
  impl_->device = nullptr;
  impl_->system.reset();  // waits for the actors
  impl_->pool.reset();    // finishes queued work, joins
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
  caf::scoped_actor self{*impl_->system};
  result<std::vector<tensor>> out = internal_error("no reply");
  self->request(impl_->master, caf::infinite, run_atom::value, make_request(feeds, fetches, targets))
      .receive([&](std::vector<tensor>& fetched) { out = std::move(fetched); },
               [&](caf::error& e) { out = to_status(e); });
  return out;
}

void session::run_async(const feed_list& feeds, const std::vector<std::string>& fetches,
                        const std::vector<std::string>& targets, run_callback done) {
  // The state travels as spawn arguments: CAF 0.17 dereferences a null argument tuple
  // for argument-less function actors (UBSan reports it).
  impl_->system->spawn(
      [](caf::event_based_actor* self, caf::actor master, run_request request,
         run_callback done) {
        self->request(master, caf::infinite, run_atom::value, std::move(request))
            .then([done](std::vector<tensor>& fetched) { done(std::move(fetched)); },
                  [done](caf::error& e) { done(to_status(e)); });
      },
      impl_->master, make_request(feeds, fetches, targets), std::move(done));
}

const graph::graph& session::current_graph() const { return *impl_->graph; }

int session::num_prepared() const { return impl_->num_prepared->load(); }

}  // namespace troupe::actors
