// The `troupe` command line's subcommands. Each takes its arguments (after the
// subcommand's name), writes to the given streams, and returns the process exit code.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace troupe::tools {

// troupe eval --graph G.pbtxt|G.pb --feed NAME[:i]=X.npy ... --fetch NAME[:i] ... --out DIR
// [--cluster CLUSTER.pbtxt]: one step, here or on a real cluster's servers
int eval_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// troupe ops: every op this build knows, its kernels' device types and its gradient.
int ops_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// troupe demo: builds a small graph in C++, runs it, and says what happened.
int demo_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// troupe run SCENARIO [--steps N] [--trace FILE.json]: trains as the scenario says.
int run_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// troupe calibrate SCENARIO [--steps N] [--out FILE.json]: trains as the scenario says
// (in this process, without faults) and writes what each kernel took, by op and inputs
// (sim/calibration.h).
int calibrate_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// troupe graph dot SCENARIO|GRAPH [--worker N] [--out FILE.dot]: Graphviz DOT, one box
// per device.
int graph_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// troupe checkpoint ls DIR | inspect PATH [--variable NAME]: committed checkpoints, and
// what one holds.
int checkpoint_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// troupe cert init DIR --cluster CLUSTER.pbtxt [--days N] | check --cluster CLUSTER.pbtxt:
// test certificates for a cluster, and a check of its tasks' credentials.
int cert_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// troupe server --cluster CLUSTER.pbtxt --job NAME --task N [--listen-all]: serves one task
// of a real cluster until SIGTERM or Ctrl-C.
int server_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The file name a fetch is written to: every character outside [A-Za-z0-9._-] becomes '_'.
std::string fetch_file_name(const std::string& fetch);

}  // namespace troupe::tools
