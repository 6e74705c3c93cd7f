// troupe cert init DIR --cluster CLUSTER.pbtxt [--days N] | check --cluster CLUSTER.pbtxt:
// a CA and per-task certificates for a test cluster, and a check of every task's
// credentials (doc/cluster.md).
#include "cluster/certificates.h"
#include "cluster/cluster_file.h"
#include "tools/commands.h"

namespace troupe::tools {
namespace {

constexpr const char* k_cert_usage =
    "usage: troupe cert init DIR --cluster CLUSTER.pbtxt [--days N]\n"
    "       troupe cert check --cluster CLUSTER.pbtxt\n"
    "init makes a CA and a certificate and key per task of the cluster in DIR (valid for N\n"
    "days, 365 by default) and DIR/cluster.pbtxt: the cluster with a tls section naming them.\n"
    "check verifies every task's certificate and key against the cluster file's CA.\n";

int usage(std::ostream& err, const std::string& why) {
  err << "troupe cert: " << why << "\n" << k_cert_usage;
  return 2;
}

}  // namespace

int cert_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) return usage(err, "init or check?");
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << k_cert_usage;
    return 0;
  }
  const std::string verb = args[0];
  if (verb != "init" && verb != "check") return usage(err, str_cat("unknown verb '", verb, "'"));
  std::string dir, cluster_path;
  int days = 365;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if ((a == "--cluster" || a == "--days") && i + 1 >= args.size()) return usage(err, a + " needs a value");
    if (a == "--cluster") {
      cluster_path = args[++i];
    } else if (a == "--days") {
      const std::string& v = args[++i];
      if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1) {
        return usage(err, str_cat("--days must be a whole number of days >= 1, not '", v, "'"));
      }
      days = std::stoi(v);
    } else if (verb == "init" && dir.empty() && a.rfind("--", 0) != 0) {
      dir = a;
    } else {
      return usage(err, str_cat("unexpected argument '", a, "'"));
    }
  }
  if (cluster_path.empty()) return usage(err, "--cluster CLUSTER.pbtxt is required");
  if (verb == "init" && dir.empty()) return usage(err, "init needs a directory");
  auto cluster = cluster::cluster_file::load(cluster_path);
  if (!cluster.ok()) {
    err << "troupe cert " << verb << ": " << cluster.error().message() << "\n";
    return 1;
  }
  if (verb == "init") {
    auto made = cluster::make_test_certificates(*cluster, dir, days);
    if (!made.ok()) {
      err << "troupe cert init: " << made.error().message() << "\n";
      return 1;
    }
    out << "made a CA and certificates for " << cluster->tasks().size() << " task"
        << (cluster->tasks().size() == 1 ? "" : "s") << " in " << dir << " (valid " << days << " days; keys mode 0600)\n"
        << "cluster file with TLS: " << made->cluster_file << "\n";
    return 0;
  }
  if (!cluster->tls()) {
    err << "troupe cert check: " << cluster_path << " has no tls section (make one with troupe cert init)\n";
    return 1;
  }
  int bad = 0;
  for (const cluster::task_address& task : cluster->tasks()) {
    const status checked = cluster::check_task_credentials(*cluster->tls(), task);
    if (checked.ok()) {
      out << task.task_name() << ": ok\n";
    } else {
      ++bad;
      out << task.task_name() << ": " << checked.message() << "\n";
    }
  }
  if (bad > 0) err << "troupe cert check: " << bad << " task" << (bad == 1 ? "" : "s") << " with bad credentials\n";
  return bad > 0 ? 1 : 0;
}

}  // namespace troupe::tools
