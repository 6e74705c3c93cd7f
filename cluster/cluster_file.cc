#include "cluster/cluster_file.h"

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "cluster/cluster_file.pb.h"
#include "core/address.h"
#include "core/file.h"
#include "graph/text_proto.h"

namespace troupe::cluster {

namespace {

namespace pb = google::protobuf;

// "path:line: " of the index-th value of `field` in `tree` ("path: " when unknown).
std::string where(const std::string& path, const pb::TextFormat::ParseInfoTree* tree, const pb::Descriptor* type,
                  std::string_view field, int index) {
  const pb::FieldDescriptor* f = type->FindFieldByName(std::string(field));
  if (tree == nullptr || f == nullptr) return path + ": ";
  const auto at = tree->GetLocation(f, f->is_repeated() ? index : -1);
  return at.line >= 0 ? str_cat(path, ":", at.line + 1, ": ") : path + ": ";
}

status parse_address(const std::string& text, task_address* out) { return parse_host_port(text, &out->host, &out->port); }

std::string absolute_beside(const std::string& file, const std::string& path) {
  if (path.empty()) return path;
  std::filesystem::path p(path);
  if (p.is_absolute()) return p.lexically_normal().string();
  return (std::filesystem::path(dir_name(file)) / p).lexically_normal().string();
}

}  // namespace

std::string task_address::task_name() const { return str_cat("/job:", job, "/replica:0/task:", index); }
bool task_address::is(std::string_view name) const {
  return name == task_name() || name == str_cat("/job:", job, "/task:", index);
}

const task_credentials* cluster_tls::of(std::string_view job, int index) const {
  for (const auto& [task, credentials] : tasks) {
    if (task.job == job && task.index == index) return &credentials;
  }
  return nullptr;
}

result<cluster_file> cluster_file::load(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return text.error().with_context("reading the cluster file");
  return parse(*text, path);
}

result<cluster_file> cluster_file::parse(const std::string& text, const std::string& path) {
  proto::ClusterDef def;
  pb::TextFormat::ParseInfoTree tree;
  TROUPE_RETURN_IF_ERROR(graph::parse_text_proto(text, path, "cluster file", &def, &tree));
  const pb::Descriptor* cluster_type = proto::ClusterDef::descriptor();
  if (def.job_size() == 0) return invalid_argument_error(path, ": the cluster file has no job");
  std::vector<placement::job_spec> jobs;
  std::vector<task_address> tasks;
  std::map<std::string, std::string> by_address;  // "host:port" -> task
  std::set<std::string> names;
  for (int j = 0; j < def.job_size(); ++j) {
    const proto::JobDef& job = def.job(j);
    const std::string at = where(path, &tree, cluster_type, "job", j);
    if (!names.insert(job.name()).second) return invalid_argument_error(at, "job '", job.name(), "' is listed twice");
    if (job.tasks().empty()) return invalid_argument_error(at, "job '", job.name(), "' has no task");
    const int n = static_cast<int>(job.tasks().size());
    for (int i = 0; i < n; ++i) {
      auto it = job.tasks().find(i);
      if (it == job.tasks().end()) {
        return invalid_argument_error(at, "job '", job.name(), "' has ", n, " tasks but no task ", i,
                                      " (tasks are numbered 0..", n - 1, ")");
      }
      task_address a;
      a.job = job.name();
      a.index = i;
      status parsed = parse_address(it->second, &a);
      if (!parsed.ok()) return invalid_argument_error(at, "task ", a.task_name(), ": ", parsed.message());
      const std::string key = str_cat(a.host, ":", a.port);
      auto [other, fresh] = by_address.emplace(key, a.task_name());
      if (!fresh) return invalid_argument_error(at, "tasks ", other->second, " and ", a.task_name(), " are both at ", key);
      tasks.push_back(std::move(a));
    }
    placement::job_spec spec;
    spec.name = job.name();
    spec.tasks.resize(static_cast<std::size_t>(n));
    jobs.push_back(std::move(spec));
  }
  auto spec = placement::cluster_spec::create(std::move(jobs));
  if (!spec.ok()) return invalid_argument_error(path, ": ", spec.error().message());
  std::sort(tasks.begin(), tasks.end(), [](const task_address& a, const task_address& b) {
    return std::tie(a.job, a.index) < std::tie(b.job, b.index);
  });
  cluster_file out(path, std::move(*spec));
  out.tasks_ = std::move(tasks);
  if (def.has_tls()) {
    const proto::TlsDef& tls = def.tls();
    const pb::TextFormat::ParseInfoTree* tls_tree = tree.GetTreeForNested(cluster_type->FindFieldByName("tls"), -1);
    const std::string at = where(path, &tree, cluster_type, "tls", 0);
    if (tls.ca_certificate().empty()) return invalid_argument_error(at, "tls names no ca_certificate");
    cluster_tls t;
    t.ca_certificate = absolute_beside(path, tls.ca_certificate());
    for (int i = 0; i < tls.task_size(); ++i) {
      const proto::TaskCredentials& c = tls.task(i);
      const std::string task_at = where(path, tls_tree, proto::TlsDef::descriptor(), "task", i);
      auto address = out.address(c.job(), c.index());
      if (!address.ok()) return invalid_argument_error(task_at, "tls: ", address.error().message());
      if (t.of(c.job(), c.index()) != nullptr) {
        return invalid_argument_error(task_at, "tls: the credentials of ", address->task_name(), " are given twice");
      }
      if (c.certificate().empty() || c.key().empty()) {
        return invalid_argument_error(task_at, "tls: ", address->task_name(), " needs both a certificate and a key");
      }
      t.tasks.emplace_back(*address, task_credentials{absolute_beside(path, c.certificate()), absolute_beside(path, c.key())});
    }
    if (tls.has_client()) {
      if (tls.client().certificate().empty() || tls.client().key().empty()) {
        return invalid_argument_error(at, "tls: the client needs both a certificate and a key");
      }
      t.client = task_credentials{absolute_beside(path, tls.client().certificate()), absolute_beside(path, tls.client().key())};
    }
    for (const task_address& a : out.tasks_) {
      if (t.of(a.job, a.index) == nullptr) {
        return invalid_argument_error(at, "tls: task ", a.task_name(), " has no certificate and key (every task needs them)");
      }
    }
    out.tls_ = std::move(t);
  }
  return out;
}

result<task_address> cluster_file::address(std::string_view job, int index) const {
  for (const task_address& a : tasks_) {
    if (a.job == job && a.index == index) return a;
  }
  std::vector<std::string> names;
  for (const task_address& a : tasks_) names.push_back(a.task_name());
  return not_found_error("cluster file '", path_, "' has no task /job:", job, "/replica:0/task:", index, " (it has ",
                         graph::join(names), ")");
}

}  // namespace troupe::cluster
