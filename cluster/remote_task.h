// remote_task: the control plane of a real cluster. A task's process publishes a task
// service over CAF's middleman; a process that uses the task's devices reaches each
// through a remote device: an actor in its own process that speaks the device actor's
// protocol (actors/device_actor.h: prepare, unprepare, forget, run, abort, stats) and
// forwards it to the service, so that a session plans, prepares and runs steps on another
// process's devices as on its own.
//
//   // the task's process (troupe server):
//   cluster_options o;  o.configure_system = add_remote_task_support;  ...
//   auto hub = transfer_hub::start(*c, "127.0.0.1", link);   // tensors and steps from other processes
//   auto service = spawn_task_service(c->system(), {.cluster = c.get(), .task = "/job:ps/replica:0/task:0",
//                                                   .cluster_id = id, .hub = hub->get()});
//   c->system().middleman().publish(service, port, "127.0.0.1");
//   // a process that uses it (cluster_options::remote_device):
//   caf::actor device = spawn_remote_device(system, {.device = name, .host = h, .port = p, ...});
//
// What crosses processes is serialized once, without per-element work: a partition as
// its GraphDef and node names (never pointers), tensors as raw bytes. Every CAF message
// type is announced on both sides (add_remote_task_support); CAF turns an unannounced one
// into an empty message, which tests/cluster/remote_task_test.cc would see. Tensors
// between devices of different processes travel over tensor links (cluster/transport.h):
// a _Send's tensor for a remote device goes over the remote device's link to its task's
// transfer_hub, which posts it to the device it is for. A step's run and its answer go
// over the same link (feeds and fetches packed with them when small), not over CAF: the
// hub hands the run to the service, which answers over the link (doc/cluster.md, "Steps
// over the links").
//
// Failure: the remote device monitors the service; when the service's process dies or
// its connection breaks, every request pending on it fails with UNAVAILABLE naming the
// task (within CAF's detection of the broken connection: milliseconds for a killed
// process, the connection timeout for a frozen one), and the remote device exits with
// that reason, so that sessions monitoring it fail their steps; a link that breaks fails
// the steps sent over it. Every remote request has a
// finite timeout but a step's run, which its session's step deadline ends (the session
// aborts the step everywhere, and the service answers the run): one timer per run would
// cost two wake-ups of CAF's clock thread per partition and step. The service monitors
// each client's remote devices and drops the partitions of one that goes.
#pragma once

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/cluster.h"
#include "cluster/cluster_file.h"
#include "cluster/transport.h"
#include "core/status.h"
#include "core/tensor.h"

namespace troupe::cluster {

// The version of the control plane's messages: a client and a service must agree.
inline constexpr std::uint32_t k_control_version = 6;  // 6: steps run over the tensor links

// An executable_spec as it crosses processes: the partition's graph as a binary GraphDef,
// its nodes, feeds and fetches by name ("node:index"), the device it is for.
struct wire_spec {
  std::string graph_def;
  std::vector<std::string> nodes;
  std::vector<std::string> feeds;
  std::vector<std::string> fetches;
  std::string device;
  std::string client;
  // Where the tasks this partition sends tensors to accept tensor links ("task=host:port"),
  // as the client knows them: the server's stand-ins for those tasks use them (servers
  // never reach each other's control plane).
  std::vector<std::string> links;
};

// Where the tasks of each cluster (by cluster id) accept tensor links, in this process:
// a client's stand-ins learn it from the hellos, a server's from the partitions its
// clients prepare (wire_spec::links). Thread-safe.
class link_directory {
 public:
  static link_directory& of_process();
  void set(const std::string& cluster_id, const std::string& task, const std::string& host, int port);
  // host and port, or nothing.
  std::optional<std::pair<std::string, int>> find(const std::string& cluster_id, const std::string& task) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, std::pair<std::string, int>> entries_;
};

// actors::device_stats on the wire.
struct wire_stats {
  std::int64_t partitions = 0, preparing = 0, running_steps = 0, rendezvous_entries = 0, rendezvous_bytes = 0,
               memory_in_use = 0;
};

using remote_hello_atom = caf::atom_constant<caf::atom("rhello")>;
using remote_challenge_atom = caf::atom_constant<caf::atom("rchallenge")>;
// To a task service or a remote device: the task's observation_log's events, taken.
using observe_atom = caf::atom_constant<caf::atom("robserve")>;

// Loads CAF's middleman and announces every message type of the control plane; for
// cluster_options::configure_system and for any process that connects to a service.
void add_remote_task_support(caf::actor_system_config& config);

struct served_partitions;  // a task service's prepared partitions (remote_task.cc)

// The tensor links of a process's hosted tasks: a listener that accepts links from the
// tasks of other processes and hands each tensor that arrives to the local device it is
// for (as the rendezvous message a _Send of this process would post). Its port goes to
// clients in the task service's hello.
class transfer_hub {
 public:
  // Listens on host (any free port). `c` must outlive the hub.
  static result<std::unique_ptr<transfer_hub>> start(actors::cluster& c, const std::string& host, link_options options);
  ~transfer_hub();
  int port() const;
  // Links kept: the live ones, and those that failed since the last link came (a new
  // link drops them).
  std::size_t links() const;
  // Tensors handed on, and tensors refused (a device not hosted here, a damaged key).
  std::int64_t delivered() const;
  std::int64_t refused() const;
  // Tensors dropped because their key names another incarnation of the receiving
  // device's task (sent for a step prepared for its earlier life).
  std::int64_t stale() const;
  // Where the steps that clients run over their links go: `service`, the task's service,
  // whose prepared partitions (`partitions`) the hub starts such steps on itself, on the
  // link's thread, when their devices allow (spawn_task_service tells its hub; until then
  // such a step fails with UNAVAILABLE).
  void serve_runs(caf::actor service, std::shared_ptr<served_partitions> partitions);

  struct impl;  // internal

 private:
  explicit transfer_hub(std::unique_ptr<impl> impl);
  std::unique_ptr<impl> impl_;
};

// The control plane over TLS (a cluster file with a tls section): connections go through
// CAF's OpenSSL module, which verifies the peer's chain against the cluster's CA (mutual
// TLS), and the hello proves each end's identity, which CAF cannot check: the service
// sends a fresh challenge, the client answers with its certificate and its signature over
// it and its own challenge, the service checks the certificate names who the client
// claims to be (a task of the cluster, or "client") and answers with its own proof, which
// the client checks names the task it expects (cluster/certificates.h). A service serves
// only the nodes that passed the hello; it refuses the rest, with a line on stderr.
struct control_tls {
  std::shared_ptr<const cluster_tls> cluster;  // the CA; every task's and the client's certificate
  std::string identity;                        // this process's name: its task's, or "client"
  task_credentials mine;                       // this process's certificate and key
};

// Adds CAF's OpenSSL module with `tls`'s credentials (after add_remote_task_support).
void add_control_tls(caf::actor_system_config& config, const control_tls& tls);

// What a server's devices and accumulators observed, for the client that runs the
// scenario (troupe run --trace, and the SYNC tally, in mode REAL): the kernels' spans,
// the transfers' ends and the links' transits (when the server traces: troupe server
// --trace), the gradients its accumulators kept or dropped and the aggregates they took.
// Times are the machine's monotonic clock (steady_clock), which every process of one
// machine shares.
struct observed_event {
  enum kind_type : std::int8_t { span = 1, sent = 2, received = 3, gradient = 4, aggregated = 5, transit = 6 };
  std::int8_t kind = 0;
  std::int64_t at_ns = 0, end_ns = 0;  // end: spans; transit: sent at, arrived at end
  // Span, transfers and transit: the step's id; gradient: the step it was computed at
  // (local); aggregated: the step it aggregated.
  std::int64_t step = 0;
  std::int64_t global_step = 0;  // gradient: the accumulator's global step when it came
  bool kept = false;             // gradient: kept (else dropped as stale)
  std::string task, device;      // span and transfers; transit: task, the receiving one
  // The node (span), the transfer's key, the accumulator (gradient, aggregated), the
  // sending task (transit).
  std::string name;
  std::string op;    // span
  std::vector<std::string> sources;  // gradient: its source task; aggregated: the gradients' sources
  std::int64_t bytes = 0;            // transit
  std::string key;                   // transit: the transfer's key, as transfer_sent names it
};

// Records what a server observes (bounded: beyond `max_events` events not yet taken,
// further ones are counted and dropped) until its client takes them. Thread-safe.
class observation_log final : public actors::step_tracer, public actors::sync_observer {
 public:
  explicit observation_log(bool trace, std::size_t max_events = std::size_t{1} << 18)
      : trace_(trace), max_events_(max_events) {}
  // For cluster_options::tracer: this log when it traces, else null (kernels untimed).
  actors::step_tracer* tracer() { return trace_ ? this : nullptr; }
  // The events recorded since the last take, oldest first, and how many were dropped.
  std::vector<observed_event> take(std::int64_t* dropped = nullptr);

  void node_span(const std::string& task, const std::string& device, const std::string& node, const std::string& op,
                 std::int64_t step_id, clock::time_point start, clock::time_point end, const node_detail&) override;
  void transfer_sent(const std::string& key, std::int64_t step_id, const std::string& task, const std::string& device,
                     clock::time_point at) override;
  void transfer_received(const std::string& key, std::int64_t step_id, const std::string& task,
                         const std::string& device, clock::time_point at) override;
  void gradient(const std::string& accumulator, const std::string& source, std::int64_t local_step,
                std::int64_t global_step, bool kept) override;
  void aggregated(const std::string& accumulator, std::int64_t step, const std::vector<std::string>& sources) override;
  void link_transit(const std::string& from, const std::string& to, std::int64_t bytes, clock::time_point sent,
                    clock::time_point arrived, const std::string& key, std::int64_t step_id) override;

 private:
  void add(observed_event e);
  const bool trace_;
  const std::size_t max_events_;
  std::mutex mutex_;
  std::vector<observed_event> events_;
  std::int64_t dropped_ = 0;
};

// The events task `task` of a real cluster observed since the last call, through the
// stand-in of one of its devices in `c` (a client of that task). Errors: UNAVAILABLE
// (the task is gone), DEADLINE_EXCEEDED (no answer within `timeout`).
result<std::vector<observed_event>> take_observations(actors::cluster& c, const std::string& task,
                                                      std::chrono::milliseconds timeout);

struct task_service_options {
  actors::cluster* cluster = nullptr;  // hosts the task's devices; outlives the service
  std::string task;                    // its canonical name, "/job:ps/replica:0/task:0"
  std::string cluster_id;              // clients of another cluster are refused
  // The task's transfer_hub: its port is told in the hello, and the steps its links carry
  // come to this service (none: the task takes no links, and no steps).
  transfer_hub* hub = nullptr;
  std::shared_ptr<const control_tls> tls;  // none: plain TCP, no identity proofs
  std::shared_ptr<observation_log> observations;  // what its clients take (observe_atom); none: nothing
};

// The service of one task's devices (spawn it in the cluster's actor system).
caf::actor spawn_task_service(caf::actor_system& system, task_service_options options);

struct connect_options {
  std::string task;        // the task expected at the address
  std::string cluster_id;  // must be the service's
  std::string client;      // who connects (for the service's log and errors)
  std::chrono::milliseconds timeout{3000};
  std::shared_ptr<const control_tls> tls;  // none: plain TCP
};

// A task service reached and greeted.
struct task_connection {
  caf::actor service;
  int link_port = 0;  // where its tensor links are accepted (0: none)
  std::uint64_t incarnation = 0;  // the task's current life (its process's)
};

// Connects to the service published at host:port and says hello, each within the timeout.
// Errors: UNAVAILABLE (nothing there, another task, another cluster or version: the
// service's reason), UNAUTHENTICATED (over TLS: a proof of identity that failed, either
// way), DEADLINE_EXCEEDED (no answer in time). Blocks: call it from a thread
// of your own or a detached actor, never a scheduler thread.
result<task_connection> connect_task_service(caf::actor_system& system, const std::string& host, int port,
                                             const connect_options& options);

struct remote_device_options {
  std::string device;  // the device's complete name
  std::string host;    // where its task's service is published
  int port = 0;
  connect_options hello;  // hello.task: the device's task
  link_options link;      // for the tensor link to the task (local_task: this process's)
  std::chrono::milliseconds request_timeout{30000};  // prepare, stats
  // A client's stand-in (false) reaches its task's service and exits with UNAVAILABLE
  // when the task's process goes (its sessions and supervisor learn it; a restart makes
  // new stand-ins). A server's (true) only sends tensors: it opens a tensor link to the
  // task at the port the link_directory says (what the clients told this server), never
  // its service, and stays when the link breaks: its next tensor opens a new one (to the
  // task's next process, which the client tells with the partitions it prepares again).
  bool outlive_task = false;
  // Every task's service address (task -> host, port): a client's stand-in learns the
  // link ports of the tasks a partition sends to before it prepares it (wire_spec::links).
  std::map<std::string, std::pair<std::string, int>> addresses;
};

// A local actor that speaks the device protocol for a device of another process. It
// connects on its first message (the service and a tensor link), so that the tasks of a
// cluster may start in any order; a connection that fails answers what waits with
// UNAVAILABLE and is tried again on the next message. Connecting and converting a
// partition run on a thread of its own, never on a scheduler thread. (Not a detached
// actor: CAF 0.17 holds an actor whose handle crossed to another node, and a request's
// timeout holds its sender, so ~actor_system would wait on a detached one's thread.)
caf::actor spawn_remote_device(caf::actor_system& system, remote_device_options options);
// The same with its sink (actors::remote_sink), for a cluster's directory: a _Send to the
// device writes its tensor on the stand-in's link from its own thread once that is open.
actors::stand_in spawn_stand_in(caf::actor_system& system, remote_device_options options);

}  // namespace troupe::cluster

namespace troupe::cluster {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_spec& x) {
  return f(caf::meta::type_name("wire_spec"), x.graph_def, x.nodes, x.feeds, x.fetches, x.device, x.client, x.links);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, observed_event& x) {
  return f(caf::meta::type_name("observed_event"), x.kind, x.at_ns, x.end_ns, x.step, x.global_step, x.kept, x.task,
           x.device, x.name, x.op, x.sources, x.bytes, x.key);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_stats& x) {
  return f(caf::meta::type_name("wire_stats"), x.partitions, x.preparing, x.running_steps, x.rendezvous_entries,
           x.rendezvous_bytes, x.memory_in_use);
}

}  // namespace troupe::cluster
