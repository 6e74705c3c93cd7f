// cluster_file: a cluster of separate processes, as a person writes it
// (cluster/cluster_file.proto, TensorFlow's ClusterDef plus TLS credentials): each task's
// address, checked as a whole, and the paths of its certificate and key when the file
// names a CA.
//
//   auto c = cluster_file::load("cluster.pbtxt");
//   c->address("ps", 0)->port;          // 2222
//   c->spec().task_names();             // "/job:ps/replica:0/task:0", ...
//   if (c->tls()) c->tls()->of("ps", 0)->key;   // an absolute path
//
// What load() refuses, each error naming the file and the line: text that does not parse
// (with the valid fields), a job name that is no identifier or appears twice, task indices
// that are not 0..n-1, an address that is not host:port with a port in 1-65535, two tasks
// at one address; with a tls section: no CA, a task without certificate and key, credentials
// for a task the cluster lacks or given twice.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "placement/cluster_spec.h"

namespace troupe::cluster {

struct task_address {
  std::string job;
  int index = 0;
  std::string host;
  int port = 0;
  std::string task_name() const;  // "/job:ps/replica:0/task:0"
  // Whether `name` names this task, in full or short ("/job:ps/task:0").
  bool is(std::string_view name) const;
};

struct task_credentials {
  std::string certificate;  // absolute paths
  std::string key;
};

// The name a client's certificate gives (a process hosting no task: troupe run, troupe
// eval --cluster), in place of a task's.
inline constexpr const char* k_client_identity = "client";

struct cluster_tls {
  std::string ca_certificate;  // an absolute path
  std::vector<std::pair<task_address, task_credentials>> tasks;
  std::optional<task_credentials> client;  // absolute paths; none: the file gives no client's
  const task_credentials* of(std::string_view job, int index) const;
};

class cluster_file {
 public:
  static result<cluster_file> load(const std::string& path);
  // `text` as if read from `path` (for errors and relative paths).
  static result<cluster_file> parse(const std::string& text, const std::string& path);

  const std::string& path() const { return path_; }
  // Jobs sorted by name, each task holding one CPU:0.
  const placement::cluster_spec& spec() const { return spec_; }
  // Every task, ordered by job name, then index.
  const std::vector<task_address>& tasks() const { return tasks_; }
  // NOT_FOUND naming the task and the tasks there are.
  result<task_address> address(std::string_view job, int index) const;
  const std::optional<cluster_tls>& tls() const { return tls_; }

 private:
  cluster_file(std::string path, placement::cluster_spec spec) : path_(std::move(path)), spec_(std::move(spec)) {}
  std::string path_;
  placement::cluster_spec spec_;
  std::vector<task_address> tasks_;
  std::optional<cluster_tls> tls_;
};

}  // namespace troupe::cluster
