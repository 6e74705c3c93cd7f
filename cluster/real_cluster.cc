#include "cluster/real_cluster.h"

#include <cstdio>
#include <map>
#include <random>

#include <caf/openssl/all.hpp>

#include "actors/spawn.h"
#include "cluster/certificates.h"
#include "cluster/remote_task.h"
#include "core/crc32c.h"

namespace troupe::cluster {
namespace {

bool loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1" || host == "[::1]";
}

// The address of the task a device belongs to.
result<task_address> address_of_device(const cluster_file& file, const std::string& device) {
  const std::string task = device.substr(0, device.find("/device:"));
  for (const task_address& a : file.tasks()) {
    if (a.task_name() == task) return a;
  }
  return not_found_error("cluster file '", file.path(), "' has no task ", task);
}

std::string unbracketed(const std::string& host) {
  return host.size() > 2 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2) : host;
}

// TLS (a cluster file with a tls section): this process's identity (its task's, or the
// client's) and credentials, checked now (CAF's OpenSSL module reads them per connection,
// too late for a clear error). Null without TLS.
result<std::shared_ptr<const control_tls>> control_tls_of(const cluster_file& file, const std::vector<std::string>& hosted) {
  if (!file.tls()) return std::shared_ptr<const control_tls>();
  auto t = std::make_shared<control_tls>();
  t->cluster = std::make_shared<const cluster_tls>(*file.tls());
  if (hosted.empty()) {
    TROUPE_RETURN_IF_ERROR(check_client_credentials(*file.tls()));
    t->identity = k_client_identity;
    t->mine = *file.tls()->client;
    return std::shared_ptr<const control_tls>(std::move(t));
  }
  for (const task_address& a : file.tasks()) {
    if (!a.is(hosted.front())) continue;
    TROUPE_RETURN_IF_ERROR(check_task_credentials(*file.tls(), a));
    t->identity = a.task_name();
    t->mine = *file.tls()->of(a.job, a.index);
    return std::shared_ptr<const control_tls>(std::move(t));
  }
  return not_found_error("cluster file '", file.path(), "' has no task ", hosted.front());
}

link_tls link_tls_of(const control_tls& tls) { return {tls.cluster->ca_certificate, tls.mine.certificate, tls.mine.key}; }

// process_cluster_options with this process's TLS identity already checked.
actors::cluster_options options_with(const cluster_file& file, const std::vector<std::string>& hosted,
                                     const std::string& me, std::shared_ptr<const control_tls> tls) {
  const std::string id = cluster_id_of(file);
  actors::cluster_options o;
  o.spec = file.spec();
  o.hosted_tasks = hosted;
  o.first_step_id = first_step_id_of_incarnation(new_incarnation());
  {
    // Each process's tasks live a life of their own: a restarted server's task has
    // another incarnation, and tensors meant for its earlier life are dropped.
    std::random_device seed;
    o.incarnation_seed = (static_cast<std::uint64_t>(seed()) << 32) | seed();
  }
  o.configure_system = add_remote_task_support;
  if (tls != nullptr) {
    o.configure_system = [tls](caf::actor_system_config& config) {
      add_remote_task_support(config);
      add_control_tls(config, *tls);
    };
  }
  // Every task's service address, for the stand-ins (a client's learns link ports there).
  std::map<std::string, std::pair<std::string, int>> addresses;
  for (const task_address& a : file.tasks()) addresses[a.task_name()] = {unbracketed(a.host), a.port};
  // A server's stand-ins outlive the other tasks' processes (its prepared partitions hold
  // them); a client's exit with their task, for its sessions and supervisor to see.
  const bool server = !hosted.empty();
  o.remote_device = [file, id, me, server, tls, addresses](caf::actor_system& system,
                                                           const std::string& device) -> result<actors::stand_in> {
    auto address = address_of_device(file, device);
    if (!address.ok()) return address.error();
    remote_device_options r;
    r.device = device;
    r.host = unbracketed(address->host);
    r.port = address->port;
    r.hello = {address->task_name(), id, me, std::chrono::milliseconds(3000), tls};
    r.link.local_task = me;
    r.link.cluster_id = id;
    if (tls != nullptr) {
      // A link's certificate must name the task its hello gives.
      r.link.local_task = tls->identity;
      r.link.tls = link_tls_of(*tls);
    }
    r.outlive_task = server;
    r.addresses = addresses;
    return spawn_stand_in(system, std::move(r));
  };
  return o;
}

}  // namespace

std::uint32_t new_incarnation() {
  std::random_device seed;
  std::uint32_t incarnation = 0;
  while (incarnation == 0) incarnation = seed() & ((1u << 23) - 1);
  return incarnation;
}

std::int64_t first_step_id_of_incarnation(std::uint32_t incarnation) {
  return static_cast<std::int64_t>(incarnation) << 40;
}

std::string cluster_id_of(const cluster_file& file) {
  std::string text;
  for (const task_address& a : file.tasks()) text += str_cat(a.task_name(), "=", a.host, ":", a.port, "\n");
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc32c_extend(0, text.data(), text.size()));
  return hex;
}

result<actors::cluster_options> process_cluster_options(const cluster_file& file, const std::vector<std::string>& hosted,
                                                        const std::string& me) {
  auto tls = control_tls_of(file, hosted);
  if (!tls.ok()) return tls.error();
  return options_with(file, hosted, me, std::move(*tls));
}

result<std::shared_ptr<actors::cluster>> process_cluster(const cluster_file& file, const std::vector<std::string>& hosted,
                                                          const std::string& me) {
  auto o = process_cluster_options(file, hosted, me);
  if (!o.ok()) return o.error();
  return actors::cluster::create(std::move(*o));
}

struct task_server::impl {
  std::shared_ptr<actors::cluster> cluster;
  std::unique_ptr<transfer_hub> hub;
  caf::actor service;
  std::string task;
  std::string address;
  std::shared_ptr<const control_tls> tls;
  std::shared_ptr<observation_log> observations;  // outlives the cluster, whose devices report to it

  ~impl() {
    hub.reset();  // no tensor arrives any more
    if (service && cluster != nullptr) {
      // The service uses the cluster in its handlers: it ends before the cluster goes (a
      // step's abort it was still handling once read a directory already gone).
      actors::unpinned_use use(cluster->system());  // outlives the scoped actor
      caf::scoped_actor self{cluster->system()};
      self->monitor(service);
      caf::anon_send_exit(service, caf::exit_reason::user_shutdown);
      self->receive([](const caf::down_msg&) {},
                    caf::after(std::chrono::seconds(30)) >> [&] {
                      std::fprintf(stderr, "troupe: the service of task %s did not end within 30 s of its shutdown\n",
                                   task.c_str());
                    });
    }
    service = caf::actor();
    cluster.reset();  // its devices end, then its actor system (which closes the port)
  }
};

task_server::task_server(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}
task_server::~task_server() = default;
const std::string& task_server::task() const { return impl_->task; }
std::string task_server::address() const { return impl_->address; }
int task_server::link_port() const { return impl_->hub->port(); }
actors::cluster& task_server::cluster() { return *impl_->cluster; }
const transfer_hub& task_server::hub() const { return *impl_->hub; }

result<std::unique_ptr<task_server>> task_server::start(const cluster_file& file, const std::string& job, int index,
                                                        task_server_options options) {
  auto address = file.address(job, index);
  if (!address.ok()) return address.error();
  const std::string host = unbracketed(address->host);
  if (!file.tls() && !options.listen_all && !loopback(host)) {
    return failed_precondition_error("task ", address->task_name(), " is at ", address->host, ":", address->port,
                                     ", not a loopback address; without TLS a server listens on loopback only: give ",
                                     "--listen-all to serve other machines over plain TCP");
  }
  const std::string bind_host = options.listen_all ? std::string("0.0.0.0") : host;
  auto s = std::make_unique<impl>();
  s->task = address->task_name();
  s->address = str_cat(bind_host, ":", address->port);
  auto tls = control_tls_of(file, {s->task});
  if (!tls.ok()) return tls.error();
  s->tls = *tls;
  s->observations = std::make_shared<observation_log>(options.trace);
  // Tensors this server sends to others on this machine go from shared memory, uncopied.
  if (s->tls == nullptr) (void)share_large_buffers_with_links();
  auto co = options_with(file, {s->task}, s->task, s->tls);
  co.tracer = s->observations->tracer();
  co.sync_watcher = s->observations.get();
  co.compute_spin = !options.no_spin;
  co.compute_threads = options.compute_threads;
  auto c = actors::cluster::create(std::move(co));
  if (!c.ok()) return c.error();
  s->cluster = std::move(*c);
  link_options link;
  link.local_task = s->task;
  link.cluster_id = cluster_id_of(file);
  if (s->tls != nullptr) link.tls = link_tls_of(*s->tls);
  auto hub = transfer_hub::start(*s->cluster, bind_host, link);
  if (!hub.ok()) return hub.error();
  s->hub = std::move(*hub);
  s->service = spawn_task_service(s->cluster->system(),
                                  {s->cluster.get(), s->task, link.cluster_id, s->hub.get(), s->tls, s->observations});
  auto port = s->tls != nullptr
                  ? caf::openssl::publish(s->service, static_cast<std::uint16_t>(address->port), bind_host.c_str(), true)
                  : s->cluster->system().middleman().publish(s->service, static_cast<std::uint16_t>(address->port),
                                                             bind_host.c_str(), true);
  if (!port) {
    return unavailable_error("task ", s->task, " cannot listen on ", bind_host, ":", address->port, ": ",
                             s->cluster->system().render(port.error()), " (is the port in use?)");
  }
  return std::unique_ptr<task_server>(new task_server(std::move(s)));
}

}  // namespace troupe::cluster
