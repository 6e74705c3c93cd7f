// Fuzz target: a cluster file (`troupe server --cluster C.pbtxt`, `troupe run` of a REAL
// scenario with addresses), read by cluster/cluster_file.h. Errors must name the file; a
// cluster that loads must number each job's tasks 0..n-1 with a host and a port in
// 1-65535 each, no two tasks at one address, the placement's cluster spec naming the same
// tasks, every task found by its job and index, and, with a tls section, absolute paths
// to a CA and to a certificate and key for every task.
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "cluster/cluster_file.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  troupe::fuzz::quiet_protobuf();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace troupe;
  using fuzz::require;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto c = cluster::cluster_file::parse(text, "/fuzz/cluster.pbtxt");
  if (!fuzz::loaded_or_named(c, "/fuzz/cluster.pbtxt")) return 0;
  require(!c->tasks().empty(), "a cluster without a task");
  std::map<std::string, int> per_job;
  std::set<std::string> addresses;
  for (const cluster::task_address& a : c->tasks()) {
    require(a.index == per_job[a.job]++, "a job's tasks not numbered 0..n-1 in order", a.task_name());
    require(!a.host.empty() && a.port >= 1 && a.port <= 65535, "a task without a host or a port in 1-65535",
            a.task_name());
    require(addresses.insert(a.host + ":" + std::to_string(a.port)).second, "two tasks at one address", a.task_name());
    auto found = c->address(a.job, a.index);
    require(found.ok() && found->host == a.host && found->port == a.port, "a task its job and index do not find",
            a.task_name());
  }
  const auto names = c->spec().task_names();
  require(names.size() == c->tasks().size(), "a cluster spec of other tasks than the file's");
  for (const cluster::task_address& a : c->tasks()) {
    bool named = false;
    for (const auto& n : names) named = named || a.is(n);
    require(named, "a task the cluster spec does not name", a.task_name());
  }
  if (c->tls()) {
    const cluster::cluster_tls& t = *c->tls();
    require(!t.ca_certificate.empty() && t.ca_certificate[0] == '/', "a CA path that is not absolute", t.ca_certificate);
    for (const cluster::task_address& a : c->tasks()) {
      const cluster::task_credentials* k = t.of(a.job, a.index);
      require(k != nullptr, "a task without credentials", a.task_name());
      require(!k->certificate.empty() && k->certificate[0] == '/' && !k->key.empty() && k->key[0] == '/',
              "credentials whose paths are not absolute", a.task_name());
    }
  }
  return 0;
}
