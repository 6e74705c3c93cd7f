// The `troupe` command line.
#include <iostream>
#include <string>
#include <vector>

#include "tools/commands.h"

namespace {
constexpr const char* k_usage =
    "usage: troupe COMMAND [ARGS]\n"
    "commands:\n"
    "  demo [--out DIR]   build a small model in C++, run it, and say what happened\n"
    "  eval --graph G.pbtxt|G.pb --feed NAME[:i]=X.npy ... --fetch NAME[:i] ... --out DIR\n"
    "       [--cluster CLUSTER.pbtxt]\n"
    "                     run one step of a GraphDef (on a real cluster's servers) and\n"
    "                     write each fetch as .npy\n"
    "  run SCENARIO.pbtxt|NAME [--steps N] [--trace FILE.json]\n"
    "                     train as a scenario says (NAME: an example in scenarios/,\n"
    "                     e.g. default), with progress and a final test accuracy\n"
    "  calibrate SCENARIO.pbtxt|NAME [--steps N] [--out FILE.json]\n"
    "                     train as a scenario says and write what each kernel took, by\n"
    "                     op and input shapes (the simulation's cost table)\n"
    "  graph dot SCENARIO|GRAPH.pbtxt [--worker N] [--out FILE.dot]\n"
    "                     Graphviz DOT of a graph, one box per device\n"
    "  checkpoint ls DIR | inspect PATH [--variable NAME]\n"
    "                     committed checkpoints of a directory; what one holds\n"
    "  cert init DIR --cluster CLUSTER.pbtxt | check --cluster CLUSTER.pbtxt\n"
    "                     a CA and per-task TLS certificates for a test cluster; a check\n"
    "  server --cluster CLUSTER.pbtxt --job NAME --task N [--listen-all] [--ready-fd FD] [--trace]\n"
    "                     serve one task of a real cluster until SIGTERM or Ctrl-C\n"
    "  ops                every op this build knows: name, kernels' devices, gradient\n"
    "  help               this text\n";
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << k_usage;
    return args.empty() ? 2 : 0;
  }
  std::string command = args[0];
  args.erase(args.begin());
  if (command == "eval") return troupe::tools::eval_command(args, std::cout, std::cerr);
  if (command == "run") return troupe::tools::run_command(args, std::cout, std::cerr);
  if (command == "calibrate") return troupe::tools::calibrate_command(args, std::cout, std::cerr);
  if (command == "graph") return troupe::tools::graph_command(args, std::cout, std::cerr);
  if (command == "checkpoint") return troupe::tools::checkpoint_command(args, std::cout, std::cerr);
  if (command == "cert") return troupe::tools::cert_command(args, std::cout, std::cerr);
  if (command == "server") return troupe::tools::server_command(args, std::cout, std::cerr);
  if (command == "ops") return troupe::tools::ops_command(args, std::cout, std::cerr);
  if (command == "demo") return troupe::tools::demo_command(args, std::cout, std::cerr);
  std::cerr << "troupe: unknown command '" << command << "'\n" << k_usage;
  return 2;
}
