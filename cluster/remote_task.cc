#include "cluster/remote_task.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <cstdio>
#include <thread>
#include <iostream>
#include <map>
#include <mutex>
#include <memory>
#include <set>
#include <utility>

#include "actors/device_actor.h"
#include "actors/messages.h"
#include "actors/rendezvous.h"
#include "graph/graph.h"

namespace troupe::cluster {
namespace {

using actors::abort_step_atom;
using actors::forget_atom;
using actors::prepare_atom;
using actors::run_atom;
using actors::link_fault_atom;
using actors::stats_atom;
using actors::straggle_atom;
using actors::to_caf_error;
using actors::to_status;
using actors::unprepare_atom;

using built_atom = caf::atom_constant<caf::atom("rbuilt")>;

// What crosses must be of fixed-size element types (tensor links and wire_tensor carry
// raw bytes).
status check_crossable(const std::vector<tensor>& values, std::string_view what, const std::string& task) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype_size(values[i].type()) == 0) {
      return invalid_argument_error(what, " ", i, " is a ", dtype_name(values[i].type()), " tensor, which cannot cross to or from task ", task,
                                    " (only fixed-size element types cross processes)");
    }
  }
  return status();
}

std::vector<wire_tensor> to_wire(std::vector<tensor> values) {
  std::vector<wire_tensor> out;
  out.reserve(values.size());
  for (tensor& t : values) out.push_back({std::move(t)});
  return out;
}

std::vector<tensor> from_wire(std::vector<wire_tensor> values) {
  std::vector<tensor> out;
  out.reserve(values.size());
  for (wire_tensor& t : values) out.push_back(std::move(t.value));
  return out;
}

std::string endpoint_name(const graph::graph& g, const graph::endpoint& e) {
  return str_cat(g.get(e.node).name(), ":", e.index);
}

// A partition as it crosses (the remote device's side).
result<wire_spec> to_wire_spec(const actors::executable_spec& spec, const std::string& device) {
  if (spec.graph == nullptr) return invalid_argument_error("a partition for ", device, " has no graph");
  wire_spec w;
  if (!spec.graph->to_graph_def().SerializeToString(&w.graph_def)) {
    return internal_error("the partition for ", device, " cannot be serialized");
  }
  for (int id : spec.nodes) w.nodes.push_back(spec.graph->get(id).name());
  for (const auto& e : spec.feeds) w.feeds.push_back(endpoint_name(*spec.graph, e));
  for (const auto& e : spec.fetches) w.fetches.push_back(endpoint_name(*spec.graph, e));
  w.device = device;
  w.client = spec.client;
  return w;
}

// And back (the service's side, on the compute pool). Errors name the device.
result<actors::executable_spec> from_wire_spec(const wire_spec& w) {
  auto where = [&](const status& s) { return s.with_context(str_cat("the partition for ", w.device)); };
  tf::GraphDef def;
  if (!def.ParseFromString(w.graph_def)) return invalid_argument_error("the partition for ", w.device, " is not a GraphDef");
  auto g = graph::graph::from_graph_def(std::move(def));
  if (!g.ok()) return where(g.error());
  auto shared = std::make_shared<const graph::graph>(std::move(*g));
  actors::executable_spec spec;
  spec.graph = shared;
  for (const std::string& name : w.nodes) {
    const auto* n = shared->find(name);
    if (n == nullptr) return invalid_argument_error("the partition for ", w.device, " has no node '", name, "'");
    spec.nodes.push_back(n->id);
  }
  for (const std::string& f : w.feeds) {
    auto e = shared->resolve(f);
    if (!e.ok()) return where(e.error());
    spec.feeds.push_back(*e);
  }
  for (const std::string& f : w.fetches) {
    auto e = shared->resolve(f);
    if (!e.ok()) return where(e.error());
    spec.fetches.push_back(*e);
  }
  spec.client = w.client;
  return spec;
}

// --- transfers between processes ----------------------------------------------------------

// A transfer's key on a tensor link: the step and the rendezvous key's fields, joined by a
// character no device or tensor name holds.
constexpr char k_separator = '\x1f';

std::string transfer_wire_key(std::int64_t step_id, const placement::rendezvous_key& k) {
  return str_cat(step_id, k_separator, k.send_device, k_separator, k.send_device_incarnation, k_separator, k.recv_device,
                 k_separator, k.tensor_name);
}

bool parse_transfer_wire_key(std::string_view text, std::int64_t* step_id, placement::rendezvous_key* k) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t end = text.find(k_separator, begin);
    parts.emplace_back(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  if (parts.size() != 5) return false;
  try {
    std::size_t used = 0;
    *step_id = std::stoll(parts[0], &used);
    if (used != parts[0].size()) return false;
    k->send_device = parts[1];
    k->send_device_incarnation = std::stoull(parts[2], &used);
    if (used != parts[2].size()) return false;
  } catch (const std::exception&) {
    return false;
  }
  k->recv_device = parts[3];
  k->tensor_name = parts[4];
  return true;
}

}  // namespace

struct transfer_hub::impl {
  actors::cluster* cluster = nullptr;
  std::unique_ptr<link_listener> listener;
  mutable std::mutex mutex;
  std::vector<std::unique_ptr<tensor_link>> links;
  std::atomic<std::int64_t> delivered{0}, refused{0};

  // A tensor from another process: to the device it is for, as a local _Send posts it.
  void arrived(const std::string& from, std::string key, tensor value) {
    std::int64_t step_id = 0;
    placement::rendezvous_key k;
    if (!parse_transfer_wire_key(key, &step_id, &k)) {
      ++refused;
      std::cerr << "troupe: task " << from << " sent a tensor under a damaged transfer key; dropped\n";
      return;
    }
    caf::actor device = cluster->device_actor(k.recv_device);
    if (!device) {
      ++refused;
      std::cerr << "troupe: task " << from << " sent tensor " << k.tensor_name << " for device " << k.recv_device
                << ", which this process does not host; dropped\n";
      return;
    }
    auto transfer = std::make_shared<const actors::transfer_key>(std::move(k));
    caf::anon_send(device, actors::rv_send_atom::value, step_id, actors::transfer_key_ptr(std::move(transfer)),
                   std::move(value));
    ++delivered;
  }
};

transfer_hub::transfer_hub(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}
transfer_hub::~transfer_hub() {
  impl_->listener.reset();  // no link is accepted any more
  std::vector<std::unique_ptr<tensor_link>> links;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    links.swap(impl_->links);
  }
  links.clear();  // each joins its threads
}
int transfer_hub::port() const { return impl_->listener->port(); }
std::size_t transfer_hub::links() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->links.size();
}
std::int64_t transfer_hub::delivered() const { return impl_->delivered; }
std::int64_t transfer_hub::refused() const { return impl_->refused; }

result<std::unique_ptr<transfer_hub>> transfer_hub::start(actors::cluster& c, const std::string& host,
                                                          link_options options) {
  auto hub = std::make_unique<impl>();
  hub->cluster = &c;
  impl* h = hub.get();
  auto listener = link_listener::listen(host, 0, std::move(options), [h](std::unique_ptr<tensor_link> link) {
    tensor_link* l = link.get();
    const std::string from = l->peer();
    l->start({[h, from](std::string key, tensor value) { h->arrived(from, std::move(key), std::move(value)); },
              [from](const status&) {}});  // the steps that needed it fail by their own timeouts and aborts
    // Links that have failed or closed go as a new one comes (on the listener's thread:
    // a link cannot join its own threads), so a long-lived server keeps only live ones.
    std::vector<std::unique_ptr<tensor_link>> gone;
    {
      std::lock_guard<std::mutex> lock(h->mutex);
      auto dead = std::stable_partition(h->links.begin(), h->links.end(), [](const auto& k) { return k->failure().ok(); });
      for (auto it = dead; it != h->links.end(); ++it) gone.push_back(std::move(*it));
      h->links.erase(dead, h->links.end());
      h->links.push_back(std::move(link));
    }
  });
  if (!listener.ok()) return listener.error();
  hub->listener = std::move(*listener);
  return std::unique_ptr<transfer_hub>(new transfer_hub(std::move(hub)));
}

namespace {

// --- the task service -------------------------------------------------------------------

// A partition built on the pool, back to the service (in-process only).
struct built_partition {
  caf::response_promise promise;
  caf::actor device;
  std::string device_name;
  std::uint64_t token = 0;  // the service's
  caf::actor_addr client;
  result<actors::executable_spec> spec = internal_error("not built");
};

}  // namespace
}  // namespace troupe::cluster

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<troupe::cluster::built_partition>)

namespace troupe::cluster {
namespace {

struct service_state {
  task_service_options options;
  std::uint64_t next_handle = 1;
  std::uint64_t next_token = 1;
  struct partition {
    caf::actor device;
    std::uint64_t device_handle = 0;
    caf::actor_addr client;
  };
  std::map<std::uint64_t, partition> partitions;  // by the service's handle
  std::map<std::pair<caf::actor_addr, std::uint64_t>, std::uint64_t> tokens;  // (client, its token) -> ours
  std::set<caf::actor_addr> clients;  // monitored

  caf::actor device_actor(const std::string& name) const { return options.cluster->device_actor(name); }
};

using service_actor = caf::stateful_actor<service_state>;

void watch_client(service_actor* self, const caf::actor_addr& client) {
  if (client && self->state.clients.insert(client).second) self->monitor(client);
}

caf::behavior task_service(service_actor* self, task_service_options options) {
  self->state.options = std::move(options);
  // A client that goes leaves no partitions behind.
  self->set_down_handler([self](caf::down_msg& down) {
    auto& st = self->state;
    st.clients.erase(down.source);
    for (auto it = st.partitions.begin(); it != st.partitions.end();) {
      if (it->second.client == down.source) {
        self->send(it->second.device, unprepare_atom::value, it->second.device_handle);
        it = st.partitions.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = st.tokens.begin(); it != st.tokens.end();) {
      it = it->first.first == down.source ? st.tokens.erase(it) : std::next(it);
    }
  });
  return {
      [self](remote_hello_atom, std::uint32_t version, const std::string& cluster_id, const std::string& client,
             const std::string& task) -> caf::result<std::string, std::uint16_t> {
        const auto& o = self->state.options;
        if (version != k_control_version) {
          return to_caf_error(unavailable_error("task ", o.task, " speaks control version ", k_control_version, ", ",
                                                client, " ", version, " (another troupe version)"));
        }
        if (cluster_id != o.cluster_id) {
          return to_caf_error(unavailable_error("task ", o.task, " belongs to cluster '", o.cluster_id, "', not '",
                                                cluster_id, "' (", client, ")"));
        }
        if (task != o.task) {
          return to_caf_error(unavailable_error(client, " expected task ", task, " here, but this is task ", o.task));
        }
        return caf::result<std::string, std::uint16_t>(o.task, static_cast<std::uint16_t>(o.link_port));
      },
      [self](prepare_atom, std::uint64_t client_token, const wire_spec& w) -> caf::result<std::uint64_t> {
        auto& st = self->state;
        caf::actor device = st.device_actor(w.device);
        if (!device) {
          return to_caf_error(not_found_error("task ", st.options.task, " has no device ", w.device));
        }
        const caf::actor_addr client = caf::actor_cast<caf::actor_addr>(self->current_sender());
        watch_client(self, client);
        const std::uint64_t token = st.next_token++;
        st.tokens[{client, client_token}] = token;
        auto built = std::make_shared<built_partition>();
        built->promise = self->make_response_promise();
        built->device = device;
        built->device_name = w.device;
        built->token = token;
        built->client = client;
        // A GraphDef is parsed on the compute pool, never on a scheduler thread.
        st.options.cluster->pool().schedule([me = caf::actor(self), built, w] {
          built->spec = from_wire_spec(w);
          caf::anon_send(me, built_atom::value, built);
        });
        return caf::delegated<std::uint64_t>();
      },
      [self](built_atom, const std::shared_ptr<built_partition>& built) {
        if (!built->spec.ok()) {
          built->promise.deliver(to_caf_error(built->spec.error()));
          return;
        }
        self->request(built->device, caf::infinite, prepare_atom::value, built->token, std::move(*built->spec))
            .then(
                [self, built](std::uint64_t device_handle) {
                  auto& st = self->state;
                  const std::uint64_t handle = st.next_handle++;
                  st.partitions[handle] = {built->device, device_handle, built->client};
                  built->promise.deliver(handle);
                },
                [built](caf::error& e) { built->promise.deliver(std::move(e)); });
      },
      [self](unprepare_atom, std::uint64_t handle) {
        auto& st = self->state;
        auto it = st.partitions.find(handle);
        if (it == st.partitions.end()) return;
        self->send(it->second.device, unprepare_atom::value, it->second.device_handle);
        st.partitions.erase(it);
      },
      [self](forget_atom, std::uint64_t client_token) {
        auto& st = self->state;
        const caf::actor_addr client = caf::actor_cast<caf::actor_addr>(self->current_sender());
        auto it = st.tokens.find({client, client_token});
        if (it == st.tokens.end()) return;
        for (const caf::actor& device : st.options.cluster->task_actors(st.options.task)) {
          self->send(device, forget_atom::value, it->second);
        }
        st.tokens.erase(it);
      },
      [self](run_atom, std::uint64_t handle, std::int64_t step_id,
             std::vector<wire_tensor>& feeds) -> caf::result<std::vector<wire_tensor>> {
        auto& st = self->state;
        auto it = st.partitions.find(handle);
        if (it == st.partitions.end()) {
          return to_caf_error(not_found_error("task ", st.options.task, " has no partition ", handle));
        }
        auto promise = self->make_response_promise<std::vector<wire_tensor>>();
        const std::string task = st.options.task;
        self->request(it->second.device, caf::infinite, run_atom::value, it->second.device_handle, step_id,
                      from_wire(std::move(feeds)))
            .then(
                [promise, task](std::vector<tensor>& fetches) mutable {
                  if (status s = check_crossable(fetches, "fetch", task); !s.ok()) {
                    promise.deliver(to_caf_error(s));
                    return;
                  }
                  promise.deliver(to_wire(std::move(fetches)));
                },
                [promise](caf::error& e) mutable { promise.deliver(std::move(e)); });
        return caf::delegated<std::vector<wire_tensor>>();
      },
      [self](abort_step_atom, std::int64_t step_id, const caf::error& reason) {
        auto& st = self->state;
        for (const caf::actor& device : st.options.cluster->task_actors(st.options.task)) {
          self->send(device, abort_step_atom::value, step_id, reason);
        }
      },
      // An injected fault for one of the task's devices, handed to it.
      [self](straggle_atom a, const std::string& device, std::int64_t micros) -> caf::result<bool> {
        caf::actor actor = self->state.device_actor(device);
        if (!actor) return to_caf_error(not_found_error("task ", self->state.options.task, " has no device ", device));
        self->delegate(actor, a, micros);
        return caf::delegated<bool>();
      },
      [self](link_fault_atom a, const std::string& device, const std::string& to_task, std::int64_t delay_us, double drop,
             std::uint64_t seed) -> caf::result<bool> {
        caf::actor actor = self->state.device_actor(device);
        if (!actor) return to_caf_error(not_found_error("task ", self->state.options.task, " has no device ", device));
        self->delegate(actor, a, to_task, delay_us, drop, seed);
        return caf::delegated<bool>();
      },
      [self](stats_atom, const std::string& device) -> caf::result<wire_stats> {
        caf::actor actor = self->state.device_actor(device);
        if (!actor) return to_caf_error(not_found_error("task ", self->state.options.task, " has no device ", device));
        auto promise = self->make_response_promise<wire_stats>();
        self->request(actor, std::chrono::seconds(10), stats_atom::value)
            .then(
                [promise](const actors::device_stats& s) mutable {
                  promise.deliver(wire_stats{s.partitions, s.preparing, s.running_steps, s.rendezvous_entries,
                                             s.rendezvous_bytes, s.memory_in_use});
                },
                [promise](caf::error& e) mutable { promise.deliver(std::move(e)); });
        return caf::delegated<wire_stats>();
      },
  };
}

// --- the remote device ------------------------------------------------------------------

// One thread of a remote device's own for what must not run on a scheduler thread:
// connecting (which waits for the network) and converting partitions. Its work posts its
// continuation back to the actor.
class background {
 public:
  background() : thread_([this] { loop(); }) {}
  ~background() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void post(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(work));
    }
    wake_.notify_all();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      auto work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

using resume_atom = caf::atom_constant<caf::atom("rresume")>;

}  // namespace
}  // namespace troupe::cluster

// A continuation for the actor that posted work to its background thread (in-process).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<std::function<void()>>)

namespace troupe::cluster {
namespace {

struct remote_state {
  remote_device_options options;
  caf::actor service;                 // once connected
  std::shared_ptr<tensor_link> link;  // to the task's transfer hub, once connected
  bool connecting = false;
  // What waits for the connection: run on success, failed with its error otherwise.
  std::vector<std::pair<std::function<void()>, std::function<void(const status&)>>> waiting;
  // Requests pending on the service, failed at once when it goes.
  std::map<std::uint64_t, caf::response_promise> pending;
  std::uint64_t next_pending = 1;
  std::unique_ptr<background> work;  // made on first use; joined when the actor ends

  std::uint64_t park(caf::response_promise p) {
    pending.emplace(next_pending, std::move(p));
    return next_pending++;
  }
  // Delivers and forgets pending request `id` (nothing when it was failed already).
  template <typename T>
  void answer(std::uint64_t id, T&& value) {
    auto it = pending.find(id);
    if (it == pending.end()) return;
    it->second.deliver(std::forward<T>(value));
    pending.erase(it);
  }
};

using remote_actor = caf::stateful_actor<remote_state>;

// Runs `work` on the actor's background thread; the function it returns runs back in the
// actor (it may use the actor's state; `work` must not).
void off_thread(remote_actor* self, std::function<std::function<void()>()> work) {
  auto& st = self->state;
  if (st.work == nullptr) st.work = std::make_unique<background>();
  st.work->post([me = caf::actor_cast<caf::actor>(self), work = std::move(work)] {
    caf::anon_send(me, resume_atom::value, std::make_shared<std::function<void()>>(work()));
  });
}

// A remote request's error as the device protocol gives it: a timeout names the task.
caf::error remote_error(const remote_device_options& o, const caf::error& e, std::string_view what) {
  if (e == caf::sec::request_timeout) {
    return to_caf_error(
        deadline_exceeded_error("task ", o.hello.task, " did not answer ", what, " for ", o.device, " in time"));
  }
  return e;
}

// Runs `ready` once connected to the device's task (its service and a tensor link to its
// hub), connecting on the background thread first when not; `failed` gets why a
// connection could not be made (the next request tries again).
void with_connection(remote_actor* self, std::function<void()> ready, std::function<void(const status&)> failed) {
  auto& st = self->state;
  if (st.service) return ready();
  st.waiting.emplace_back(std::move(ready), std::move(failed));
  if (st.connecting) return;
  st.connecting = true;
  off_thread(self, [self, o = st.options, system = &self->home_system()]() -> std::function<void()> {
    auto connection = connect_task_service(*system, o.host, o.port, o.hello);
    status outcome = connection.ok() ? status() : connection.error();
    std::shared_ptr<tensor_link> link;
    if (outcome.ok() && connection->link_port > 0) {
      auto made = tensor_link::connect(o.host, connection->link_port, o.hello.task, o.link);
      if (made.ok()) {
        (*made)->start({[](std::string, tensor) {},  // this link only sends
                        [](const status&) {}});      // a broken link fails the sends after it
        link = std::move(*made);
      } else {
        outcome = made.error();
      }
    }
    caf::actor service = connection.ok() ? connection->service : caf::actor();
    return [self, outcome, service, link] {
      auto& st = self->state;
      st.connecting = false;
      auto waiting = std::move(st.waiting);
      st.waiting.clear();
      if (outcome.ok()) {
        st.service = service;
        st.link = link;
        self->monitor(service);
      } else {
        // What waited fails with it; the line is for a server's log, whose steps' owners
        // are elsewhere.
        std::fprintf(stderr, "troupe: %s could not reach %s (next use tries again): %s\n",
                     st.options.link.local_task.c_str(), st.options.device.c_str(), outcome.message().c_str());
      }
      for (auto& [ready, failed] : waiting) {
        if (outcome.ok()) {
          ready();
        } else {
          failed(outcome);
        }
      }
    };
  });
}

// Sends `message` (an injected fault for the device) to its task's service and answers
// with its answer.
template <typename FailPending>
caf::result<bool> forward_fault(remote_actor* self, FailPending fail_pending, const char* what, caf::message message) {
  const std::uint64_t id = self->state.park(self->make_response_promise());
  with_connection(
      self,
      [self, id, what, message] {
        self->request(self->state.service, self->state.options.request_timeout, message)
            .then([self, id](bool ok) { self->state.answer(id, ok); },
                  [self, id, what](caf::error& e) { self->state.answer(id, remote_error(self->state.options, e, what)); });
      },
      fail_pending(id));
  return caf::delegated<bool>();
}

caf::behavior remote_device(remote_actor* self, remote_device_options options) {
  self->state.options = std::move(options);
  self->set_down_handler([self](caf::down_msg& down) {
    auto& st = self->state;
    if (!st.service || down.source != st.service.address()) return;
    const auto& o = st.options;
    const caf::error why = to_caf_error(unavailable_error("task ", o.hello.task, " (device ", o.device,
                                                          ") is gone: ", to_status(down.reason).message()));
    for (auto& [id, promise] : st.pending) promise.deliver(why);
    st.pending.clear();
    if (!o.outlive_task) return self->quit(why);
    st.service = caf::actor();
    // Its threads are joined on the background thread, not on this scheduler thread.
    if (st.link != nullptr) {
      if (st.work == nullptr) st.work = std::make_unique<background>();
      st.work->post([gone = std::move(st.link)] {});
    }
  });
  // Requests failed by a connection that could not be made.
  auto fail_pending = [self](std::uint64_t id) {
    return [self, id](const status& s) { self->state.answer(id, to_caf_error(s)); };
  };
  return {
      [self](resume_atom, const std::shared_ptr<std::function<void()>>& then) { (*then)(); },
      [self, fail_pending](prepare_atom, std::uint64_t token,
                           const actors::executable_spec& spec) -> caf::result<std::uint64_t> {
        const std::uint64_t id = self->state.park(self->make_response_promise());
        // The partition's GraphDef is made on the background thread.
        off_thread(self, [self, id, token, spec, fail_pending, device = self->state.options.device] {
          auto w = std::make_shared<result<wire_spec>>(to_wire_spec(spec, device));
          return std::function<void()>([self, id, token, w, fail_pending] {
            if (!w->ok()) return self->state.answer(id, to_caf_error(w->error()));
            with_connection(
                self,
                [self, id, token, w] {
                  const auto& o = self->state.options;
                  self->request(self->state.service, o.request_timeout, prepare_atom::value, token, std::move(**w))
                      .then([self, id](std::uint64_t handle) { self->state.answer(id, handle); },
                            [self, id](caf::error& e) {
                              self->state.answer(id, remote_error(self->state.options, e, "a prepare"));
                            });
                },
                fail_pending(id));
          });
        });
        return caf::delegated<std::uint64_t>();
      },
      [self](unprepare_atom a, std::uint64_t handle) {
        if (self->state.service) self->send(self->state.service, a, handle);
      },
      [self](forget_atom a, std::uint64_t token) {
        if (self->state.service) self->send(self->state.service, a, token);
      },
      [self, fail_pending](run_atom, std::uint64_t handle, std::int64_t step_id,
                           std::vector<tensor>& feeds) -> caf::result<std::vector<tensor>> {
        const auto& o = self->state.options;
        if (status s = check_crossable(feeds, "feed", o.hello.task); !s.ok()) return to_caf_error(s);
        const std::uint64_t id = self->state.park(self->make_response_promise());
        auto wire = std::make_shared<std::vector<wire_tensor>>(to_wire(std::move(feeds)));
        with_connection(
            self,
            [self, id, handle, step_id, wire] {
              const auto& o = self->state.options;
              self->request(self->state.service, o.step_timeout, run_atom::value, handle, step_id, std::move(*wire))
                  .then([self, id](std::vector<wire_tensor>& fetches) { self->state.answer(id, from_wire(std::move(fetches))); },
                        [self, id](caf::error& e) { self->state.answer(id, remote_error(self->state.options, e, "a step")); });
            },
            fail_pending(id));
        return caf::delegated<std::vector<tensor>>();
      },
      [self](abort_step_atom a, std::int64_t step_id, const caf::error& reason) {
        if (self->state.service) self->send(self->state.service, a, step_id, reason);
      },
      // A _Send's tensor for this device: over the link to its task's transfer hub. What
      // cannot be sent fails the step at both ends: at the sending device (its step's
      // owner learns it and aborts the step everywhere, also where the tensor was awaited)
      // and, when connected, at the task.
      [self](actors::rv_send_atom, std::int64_t step_id, const actors::transfer_key_ptr& key, tensor& value) {
        auto shared = std::make_shared<tensor>(std::move(value));
        auto refuse = [self, step_id, key, sender = caf::actor_cast<caf::actor>(self->current_sender())](const status& s) {
          const caf::error why = to_caf_error(unavailable_error(
              "device ", self->state.options.device, " of task ", self->state.options.hello.task, " cannot take ",
              key->printed(), " of step ", step_id, ": ", s.message()));
          if (sender) self->send(sender, abort_step_atom::value, step_id, why);
          if (self->state.service) self->send(self->state.service, abort_step_atom::value, step_id, why);
        };
        with_connection(
            self,
            [self, step_id, key, shared, refuse, sender = caf::actor_cast<caf::actor>(self->current_sender())] {
              auto& st = self->state;
              if (st.link == nullptr) return refuse(unimplemented_error("task ", st.options.hello.task, " takes no tensor links"));
              if (dtype_size(shared->type()) == 0) {
                return refuse(invalid_argument_error("tensor ", key->printed(), " is a ", dtype_name(shared->type()),
                                                     " tensor, which cannot cross processes"));
              }
              // A link that breaks before the bytes are out fails the step at the sender.
              st.link->send(transfer_wire_key(step_id, key->key()), std::move(*shared),
                            [sender, step_id, key, device = st.options.device](const status& s) {
                              if (s.ok() || !sender) return;
                              caf::anon_send(sender, abort_step_atom::value, step_id,
                                             to_caf_error(unavailable_error("sending ", key->printed(), " of step ",
                                                                            step_id, " to ", device, " failed: ",
                                                                            s.message())));
                            });
            },
            refuse);
      },
      // An injected fault (straggle, link faults) for the device, told to its task.
      [self, fail_pending](straggle_atom a, std::int64_t micros) -> caf::result<bool> {
        return forward_fault(self, fail_pending, "a straggle", caf::make_message(a, self->state.options.device, micros));
      },
      [self, fail_pending](link_fault_atom a, const std::string& to_task, std::int64_t delay_us, double drop,
                           std::uint64_t seed) -> caf::result<bool> {
        return forward_fault(self, fail_pending, "a link fault",
                             caf::make_message(a, self->state.options.device, to_task, delay_us, drop, seed));
      },
      [self, fail_pending](stats_atom) -> caf::result<actors::device_stats> {
        const std::uint64_t id = self->state.park(self->make_response_promise());
        with_connection(
            self,
            [self, id] {
              const auto& o = self->state.options;
              self->request(self->state.service, o.request_timeout, stats_atom::value, o.device)
                  .then(
                      [self, id](const wire_stats& s) {
                        self->state.answer(id, actors::device_stats{s.partitions, s.preparing, s.running_steps,
                                                                    s.rendezvous_entries, s.rendezvous_bytes,
                                                                    s.memory_in_use});
                      },
                      [self, id](caf::error& e) { self->state.answer(id, remote_error(self->state.options, e, "stats")); });
            },
            fail_pending(id));
        return caf::delegated<actors::device_stats>();
      },
  };
}

}  // namespace

caf::error save_wire_tensor(caf::serializer& f, const wire_tensor& x) {
  const tensor& t = x.value;
  if (dtype_size(t.type()) == 0) {
    return caf::make_error(caf::sec::state_not_serializable, str_cat("a ", dtype_name(t.type()), " tensor cannot cross processes"));
  }
  auto type = static_cast<std::int32_t>(t.type());
  std::vector<std::int64_t> dims = t.shape().dims();
  auto bytes = static_cast<std::uint64_t>(t.byte_size());
  if (auto e = f(type, dims, bytes)) return e;
  if (bytes == 0) return caf::none;
  return f.apply_raw(t.byte_size(), const_cast<void*>(t.raw_data()));
}

caf::error load_wire_tensor(caf::deserializer& f, wire_tensor& x) {
  std::int32_t type = 0;
  std::vector<std::int64_t> dims;
  std::uint64_t bytes = 0;
  if (auto e = f(type, dims, bytes)) return e;
  const auto t = static_cast<dtype>(type);
  const std::size_t element = dtype_size(t);
  auto shape = tensor_shape::make(std::move(dims));
  if (element == 0 || !shape.ok() || static_cast<std::uint64_t>(shape->num_elements()) > bytes / element ||
      static_cast<std::uint64_t>(shape->num_elements()) * element != bytes) {
    return caf::make_error(caf::sec::invalid_argument, "a tensor on the wire whose dtype, shape and size disagree");
  }
  try {
    x.value = tensor(t, *shape);
  } catch (const std::bad_alloc&) {
    return caf::make_error(caf::sec::invalid_argument, str_cat("no memory for a tensor of ", bytes, " bytes from the wire"));
  }
  if (bytes == 0) return caf::none;
  return f.apply_raw(static_cast<std::size_t>(bytes), x.value.raw_data());
}

void add_remote_task_support(caf::actor_system_config& config) {
  config.load<caf::io::middleman>();
  config.add_message_type<wire_tensor>("troupe::wire_tensor");
  config.add_message_type<std::vector<wire_tensor>>("std::vector<troupe::wire_tensor>");
  config.add_message_type<wire_spec>("troupe::wire_spec");
  config.add_message_type<wire_stats>("troupe::wire_stats");
  // A frozen peer is found by silence (CAF's heartbeats are off by default).
  config.set("middleman.heartbeat-interval", caf::timespan(std::chrono::milliseconds(200)));
  config.set("middleman.connection-timeout", caf::timespan(std::chrono::milliseconds(1000)));
}

caf::actor spawn_task_service(caf::actor_system& system, task_service_options options) {
  return system.spawn(task_service, std::move(options));
}

caf::actor spawn_remote_device(caf::actor_system& system, remote_device_options options) {
  return system.spawn(remote_device, std::move(options));
}

result<task_connection> connect_task_service(caf::actor_system& system, const std::string& host, int port,
                                             const connect_options& options) {
  const std::string where = str_cat(host, ":", port);
  caf::scoped_actor self{system};
  // remote_actor has no timeout: ask the middleman's actor to connect, with one.
  // A connection to a process that has just started is sometimes dropped by CAF's
  // connection timeout during the handshake (a restarted task, seen ~1 in 3 times):
  // that one is tried again while the timeout lasts.
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  caf::actor found;
  status outcome;
  for (bool again = true; again;) {
    again = false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    outcome = deadline_exceeded_error("task ", options.task, " at ", where, " did not answer within ",
                                      options.timeout.count(), " ms");
    if (left.count() <= 0) break;
    self->request(system.middleman().actor_handle(), left, caf::connect_atom::value, host, static_cast<std::uint16_t>(port))
        .receive(
            [&](const caf::node_id&, caf::strong_actor_ptr& actor, const std::set<std::string>&) {
              found = caf::actor_cast<caf::actor>(actor);
              outcome = found ? status() : unavailable_error("nothing is published at ", where, " (no task service)");
            },
            [&](caf::error& e) {
              if (e == caf::sec::request_timeout) return;
              outcome = unavailable_error("cannot reach task ", options.task, " at ", where, ": ", system.render(e));
              again = e == caf::sec::connection_timeout;
            });
    if (again) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!outcome.ok()) return outcome;
  task_connection connection;
  outcome = deadline_exceeded_error("task ", options.task, " at ", where, " did not answer the hello within ",
                                    options.timeout.count(), " ms");
  self->request(found, options.timeout, remote_hello_atom::value, k_control_version, options.cluster_id, options.client,
                options.task)
      .receive(
          [&](std::string&, std::uint16_t link_port) {
            connection.link_port = link_port;
            outcome = status();
          },
               [&](caf::error& e) {
                 if (e == caf::sec::request_timeout) return;
                 const status s = to_status(e);
                 outcome = unavailable_error("task ", options.task, " at ", where, " refused: ", s.message());
               });
  if (!outcome.ok()) return outcome;
  connection.service = found;
  return connection;
}

}  // namespace troupe::cluster
