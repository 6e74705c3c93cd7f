#include <filesystem>

#include "actors/session.h"
#include "cluster/cluster_file.h"
#include "cluster/real_cluster.h"
#include "core/npy.h"
#include "graph/graph_io.h"
#include "tools/commands.h"

namespace troupe::tools {

std::string fetch_file_name(const std::string& fetch) {
  std::string name = fetch;
  for (char& c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return name + ".npy";
}

namespace {

constexpr const char* k_eval_usage =
    "usage: troupe eval --graph G.pbtxt|G.pb [--feed NAME[:i]=X.npy ...] --fetch NAME[:i] "
    "[--fetch ...] [--target NODE ...] --out DIR [--cluster CLUSTER.pbtxt]\n"
    "Runs one step of the graph and writes each fetch to DIR/<fetch>.npy. With --cluster the\n"
    "step runs on the cluster's servers (troupe server), each node on the task its device\n"
    "names (unplaced nodes on the first worker task).\n";

struct eval_args {
  std::string graph;
  std::vector<std::pair<std::string, std::string>> feeds;  // tensor name, .npy path
  std::vector<std::string> fetches;
  std::vector<std::string> targets;
  std::string out;
  std::string cluster;
};

result<eval_args> parse_eval_args(const std::vector<std::string>& args) {
  eval_args parsed;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    auto value = [&]() -> result<std::string> {
      if (i + 1 >= args.size()) return invalid_argument_error(flag, " needs a value");
      return args[++i];
    };
    if (flag == "--help" || flag == "-h") return cancelled_error("help");
    auto v = value();
    if (!v.ok()) return v.error();
    if (flag == "--graph") {
      parsed.graph = *v;
    } else if (flag == "--feed") {
      auto eq = v->find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == v->size()) {
        return invalid_argument_error("--feed '", *v, "' must be NAME[:i]=FILE.npy");
      }
      parsed.feeds.emplace_back(v->substr(0, eq), v->substr(eq + 1));
    } else if (flag == "--fetch") {
      parsed.fetches.push_back(*v);
    } else if (flag == "--target") {
      parsed.targets.push_back(*v);
    } else if (flag == "--out") {
      parsed.out = *v;
    } else if (flag == "--cluster") {
      parsed.cluster = *v;
    } else {
      return invalid_argument_error("unknown option '", flag, "'");
    }
  }
  if (parsed.graph.empty()) return invalid_argument_error("--graph is required");
  if (parsed.fetches.empty() && parsed.targets.empty()) {
    return invalid_argument_error("give at least one --fetch (or --target)");
  }
  if (parsed.out.empty() && !parsed.fetches.empty()) return invalid_argument_error("--out is required");
  return parsed;
}

}  // namespace

int eval_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto parsed = parse_eval_args(args);
  if (!parsed.ok()) {
    if (parsed.error().error_code() == code::cancelled) {
      out << k_eval_usage;
      return 0;
    }
    err << "troupe eval: " << parsed.error().message() << "\n" << k_eval_usage;
    return 2;
  }
  auto fail = [&](const status& s) {
    err << "troupe eval: " << s.to_string() << "\n";
    return 1;
  };
  auto def = graph::read_graph_def(parsed->graph);
  if (!def.ok()) return fail(def.error());
  auto g = graph::graph::from_graph_def(std::move(*def));  // the graph takes its nodes
  if (!g.ok()) return fail(g.error().with_context(parsed->graph));
  actors::feed_list feeds;
  for (const auto& [name, path] : parsed->feeds) {
    auto t = read_npy(path);
    if (!t.ok()) return fail(t.error().with_context(str_cat("feed '", name, "'")));
    feeds.emplace_back(name, std::move(*t));
  }
  actors::session_options options;
  if (!parsed->cluster.empty()) {
    // A client of a real cluster: this process hosts no task.
    auto file = cluster::cluster_file::load(parsed->cluster);
    if (!file.ok()) return fail(file.error());
    auto c = cluster::process_cluster(*file, {}, "/job:client/replica:0/task:0");
    if (!c.ok()) return fail(c.error());
    options.cluster = *c;
    const auto tasks = (*c)->task_names();
    options.default_device = tasks.front();
    for (const auto& t : tasks) {
      if (t.rfind("/job:worker/", 0) == 0) {
        options.default_device = t;
        break;
      }
    }
  }
  auto session = actors::session::create(std::move(*g), options);
  if (!session.ok()) return fail(session.error());
  auto fetched = (*session)->run(feeds, parsed->fetches, parsed->targets);
  if (!fetched.ok()) return fail(fetched.error());
  if (!parsed->fetches.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parsed->out, ec);
    if (ec) return fail(not_found_error("cannot create '", parsed->out, "': ", ec.message()));
  }
  for (std::size_t i = 0; i < parsed->fetches.size(); ++i) {
    const tensor& t = (*fetched)[i];
    std::string path = (std::filesystem::path(parsed->out) / fetch_file_name(parsed->fetches[i])).string();
    status s = write_npy(path, t);
    if (!s.ok()) return fail(s);
    out << parsed->fetches[i] << ": " << dtype_name(t.type()) << " " << t.shape().to_string()
        << " -> " << path << "\n";
  }
  return 0;
}

}  // namespace troupe::tools
