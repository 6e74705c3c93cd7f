// troupe server --cluster CLUSTER.pbtxt --job NAME --task N [--listen-all] [--ready-fd FD] [--trace] [--no-spin]
//               [--compute-threads N]:
// one task of a real cluster, served until SIGTERM or Ctrl-C (doc/cluster.md).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "cluster/cluster_file.h"
#include "cluster/real_cluster.h"
#include "tools/commands.h"

namespace troupe::tools {
namespace {

constexpr const char* k_server_usage =
    "usage: troupe server --cluster CLUSTER.pbtxt --job NAME --task N [--listen-all] [--ready-fd FD] [--trace]\n"
    "                     [--no-spin] [--compute-threads N]\n"
    "Serves task N of job NAME of the cluster (its devices, variables and queues) at its\n"
    "address in the cluster file until SIGTERM or Ctrl-C. Without TLS it listens on loopback\n"
    "only; --listen-all serves other machines over plain TCP. --ready-fd FD: once serving,\n"
    "write \"ready\\n\" to the open descriptor FD and close it (for a program that starts servers).\n"
    "--trace: time every kernel and transfer for the client's trace (troupe run --trace).\n"
    "--no-spin: compute threads sleep as soon as they run out of work instead of spinning for\n"
    "a while first (for servers that share their machine's cores with other busy servers; troupe\n"
    "run's mode REAL starts its servers so).\n"
    "--compute-threads N: the compute pool's threads, 1-1024 (default: the machine's cores; a\n"
    "kernel splits its work by them, so results match bit for bit a cluster whose pools have as many).\n";

int usage(std::ostream& err, const std::string& why) {
  err << "troupe server: " << why << "\n" << k_server_usage;
  return 2;
}

}  // namespace

int server_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string cluster_path, job;
  int index = -1;
  int ready_fd = -1;
  cluster::task_server_options options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out << k_server_usage;
      return 0;
    }
    if (a == "--listen-all") {
      options.listen_all = true;
      continue;
    }
    if (a == "--trace") {
      options.trace = true;
      continue;
    }
    if (a == "--no-spin") {
      options.no_spin = true;
      continue;
    }
    if ((a == "--cluster" || a == "--job" || a == "--task" || a == "--ready-fd" || a == "--compute-threads") &&
        i + 1 >= args.size()) {
      return usage(err, a + " needs a value");
    }
    if (a == "--cluster") {
      cluster_path = args[++i];
    } else if (a == "--job") {
      job = args[++i];
    } else if (a == "--ready-fd") {
      const std::string& v = args[++i];
      if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos) {
        return usage(err, str_cat("--ready-fd must be a file descriptor number, not '", v, "'"));
      }
      ready_fd = std::stoi(v);
      if (::fcntl(ready_fd, F_GETFD) < 0) return usage(err, str_cat("--ready-fd ", v, " is not an open descriptor"));
    } else if (a == "--compute-threads") {
      const std::string& v = args[++i];
      if (v.empty() || v.size() > 4 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1 ||
          std::stoi(v) > 1024) {
        return usage(err, str_cat("--compute-threads must be a number of threads in 1-1024, not '", v, "'"));
      }
      options.compute_threads = std::stoi(v);
    } else if (a == "--task") {
      const std::string& v = args[++i];
      if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos) {
        return usage(err, str_cat("--task must be a task index (0, 1, ...), not '", v, "'"));
      }
      index = std::stoi(v);
    } else {
      return usage(err, str_cat("unexpected argument '", a, "'"));
    }
  }
  if (cluster_path.empty() || job.empty() || index < 0) return usage(err, "--cluster, --job and --task are required");
  auto file = cluster::cluster_file::load(cluster_path);
  if (!file.ok()) {
    err << "troupe server: " << file.error().message() << "\n";
    return 1;
  }
  // SIGTERM and SIGINT wait for sigwait below (blocked before any thread starts, so every
  // thread inherits the mask).
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigset_t before;
  pthread_sigmask(SIG_BLOCK, &stop, &before);
  int code = 0;
  {
    auto server = cluster::task_server::start(*file, job, index, options);
    if (!server.ok()) {
      err << "troupe server: " << server.error().message() << "\n";
      pthread_sigmask(SIG_SETMASK, &before, nullptr);
      return 1;
    }
    out << "troupe server: task " << (*server)->task() << " of " << cluster_path << " serving on "
        << (*server)->address() << " (tensors on port " << (*server)->link_port() << ")"
        << (file->tls() ? "; mutual TLS with the cluster's CA, peers prove their identity"
            : options.listen_all ? "; plain TCP on every interface, without TLS"
                                 : "; loopback only, plain TCP without TLS")
        << "\n"
        << std::flush;
    if (ready_fd >= 0) {
      const char line[] = "ready\n";
      if (::write(ready_fd, line, sizeof line - 1) < 0) err << "troupe server: --ready-fd " << ready_fd << ": cannot write\n";
      ::close(ready_fd);
    }
    int signal = 0;
    sigwait(&stop, &signal);
    out << "troupe server: " << (signal == SIGTERM ? "SIGTERM" : "SIGINT") << ", stopping task " << (*server)->task()
        << "\n"
        << std::flush;
  }
  out << "troupe server: stopped\n";
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return code;
}

}  // namespace troupe::tools
