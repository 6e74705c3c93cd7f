#include "cluster/real_cluster.h"

#include <cstdio>
#include <random>

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
  if (file.tls()) {
    return failed_precondition_error("cluster file '", file.path(), "' names TLS credentials, but troupe's control plane ",
                                     "does not speak TLS yet (tensor links do): leave the tls section out, on loopback ",
                                     "or a network you trust");
  }
  const std::string id = cluster_id_of(file);
  actors::cluster_options o;
  o.spec = file.spec();
  o.hosted_tasks = hosted;
  o.first_step_id = first_step_id_of_incarnation(new_incarnation());
  o.configure_system = add_remote_task_support;
  // A server's stand-ins outlive the other tasks' processes (its prepared partitions hold
  // them); a client's exit with their task, for its sessions and supervisor to see.
  const bool server = !hosted.empty();
  o.remote_device = [file, id, me, server](caf::actor_system& system, const std::string& device) -> result<caf::actor> {
    auto address = address_of_device(file, device);
    if (!address.ok()) return address.error();
    remote_device_options r;
    r.device = device;
    r.host = unbracketed(address->host);
    r.port = address->port;
    r.hello = {address->task_name(), id, me, std::chrono::milliseconds(3000)};
    r.link.local_task = me;
    r.link.cluster_id = id;
    r.outlive_task = server;
    return spawn_remote_device(system, std::move(r));
  };
  return o;
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

  ~impl() {
    hub.reset();  // no tensor arrives any more
    if (service) caf::anon_send_exit(service, caf::exit_reason::user_shutdown);
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

result<std::unique_ptr<task_server>> task_server::start(const cluster_file& file, const std::string& job, int index,
                                                        task_server_options options) {
  auto address = file.address(job, index);
  if (!address.ok()) return address.error();
  const std::string host = unbracketed(address->host);
  if (!options.listen_all && !loopback(host)) {
    return failed_precondition_error("task ", address->task_name(), " is at ", address->host, ":", address->port,
                                     ", not a loopback address; without TLS a server listens on loopback only: give ",
                                     "--listen-all to serve other machines over plain TCP");
  }
  const std::string bind_host = options.listen_all ? std::string("0.0.0.0") : host;
  auto s = std::make_unique<impl>();
  s->task = address->task_name();
  s->address = str_cat(bind_host, ":", address->port);
  auto c = process_cluster(file, {s->task}, s->task);
  if (!c.ok()) return c.error();
  s->cluster = std::move(*c);
  link_options link;
  link.local_task = s->task;
  link.cluster_id = cluster_id_of(file);
  auto hub = transfer_hub::start(*s->cluster, bind_host, link);
  if (!hub.ok()) return hub.error();
  s->hub = std::move(*hub);
  s->service = spawn_task_service(s->cluster->system(), {s->cluster.get(), s->task, link.cluster_id, s->hub->port()});
  auto port = s->cluster->system().middleman().publish(s->service, static_cast<std::uint16_t>(address->port),
                                                        bind_host.c_str(), true);
  if (!port) {
    return unavailable_error("task ", s->task, " cannot listen on ", bind_host, ":", address->port, ": ",
                             s->cluster->system().render(port.error()), " (is the port in use?)");
  }
  return std::unique_ptr<task_server>(new task_server(std::move(s)));
}

}  // namespace troupe::cluster
