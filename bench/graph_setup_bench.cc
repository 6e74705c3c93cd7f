// Graph set-up at scale: the path of `troupe eval` on a chain of N nodes (default 100,000
// Neg), phase by phase, with the process's memory after each.
//
// The chain is written as a text GraphDef to a temporary file, then timed as eval runs
// it: parse the file, build and validate the graph (shape inference included), then the
// session's first step (prune, place, partition, prepare the partition's kernels, run),
// then a second step (the prepared steady state). `total / parse` says how much the rest of
// set-up adds to reading the text. The baseline, measured in the same run after the rest,
// is protobuf's own TextFormat parser on the same text (`protobuf_parse_over_parse`: how
// much faster graph/text_format.h reads it). Issue 13's target: the whole path of 100,000 Neg nodes in
// <= 1.5 s and <= 150 MB peak resident memory on the project's 2-core machines (the first
// measurement, before set-up was made linear, was 7.1 s and 417 MB).
//
//   build/bench/bench_graph_setup --nodes=100000 --op=Neg
//
// Prints one JSON object: seconds per phase, total, total/parse, resident MB after each
// phase and the peak.
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <google/protobuf/text_format.h>

#include "actors/session.h"
#include "core/tensor.h"
#include "graph/graph_io.h"

namespace troupe::bench {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double resident_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

// Bytes malloc has handed out and not had back (what the structures hold, without the
// allocator's free lists).
double heap_mb() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd) / (1 << 20);
}

double peak_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

std::string chain_text(long nodes, const std::string& op) {
  std::string text = "node { name: \"x\" op: \"Placeholder\" attr { key: \"dtype\" value { type: DT_FLOAT } } }\n";
  std::string previous = "x";
  for (long i = 0; i < nodes; ++i) {
    std::string name = "n" + std::to_string(i);
    text += "node { name: \"" + name + "\" op: \"" + op + "\" input: \"" + previous +
            "\" attr { key: \"T\" value { type: DT_FLOAT } } }\n";
    previous = std::move(name);
  }
  return text;
}

int run(long nodes, const std::string& op) {
  const auto path = std::filesystem::temp_directory_path() / ("troupe_graph_setup_" + std::to_string(getpid()) + ".pbtxt");
  {
    std::ofstream out(path);
    out << chain_text(nodes, op);
  }
  const double start_mb = resident_mb();
  const std::string last = "n" + std::to_string(nodes - 1);
  const auto t0 = clock_type::now();
  auto def = graph::read_graph_def(path.string());
  std::filesystem::remove(path);
  if (!def.ok()) return std::cerr << def.error() << "\n", 1;
  const double parse = seconds_since(t0);
  const double parsed_mb = resident_mb(), parsed_heap = heap_mb();
  const auto t1 = clock_type::now();
  auto g = graph::graph::from_graph_def(std::move(*def));  // as eval does: the graph takes the nodes
  if (!g.ok()) return std::cerr << g.error() << "\n", 1;
  const double build = seconds_since(t1);
  const double graph_mb = resident_mb(), graph_heap = heap_mb();
  const auto t2 = clock_type::now();
  auto session = actors::session::create(std::move(*g));
  if (!session.ok()) return std::cerr << session.error() << "\n", 1;
  const actors::feed_list feeds = {{"x", tensor::from_vector<float>({1.0f}, {1})}};
  auto first = (*session)->run(feeds, {last});
  if (!first.ok()) return std::cerr << first.error() << "\n", 1;
  const double first_step = seconds_since(t2);
  const double prepared_mb = resident_mb(), prepared_heap = heap_mb();
  const auto t3 = clock_type::now();
  auto second = (*session)->run(feeds, {last});
  if (!second.ok()) return std::cerr << second.error() << "\n", 1;
  const double second_step = seconds_since(t3);
  const double total = parse + build + first_step;
  const double peak = peak_mb();
  // Baseline: protobuf's own text parser on the same text (what graph_io used before its
  // reader, graph/text_format.h), after the peak memory is taken.
  double protobuf_parse = 0;
  {
    const std::string text = chain_text(nodes, op);
    tf::GraphDef reference;
    google::protobuf::TextFormat::Parser parser;
    const auto t4 = clock_type::now();
    if (!parser.ParseFromString(text, &reference)) return std::cerr << "protobuf refused the chain\n", 1;
    protobuf_parse = seconds_since(t4);
  }
  std::printf(
      "{\"nodes\": %ld, \"op\": \"%s\", \"parse_s\": %.3f, \"build_graph_s\": %.3f, \"first_step_s\": %.3f, "
      "\"second_step_s\": %.4f, \"total_s\": %.3f, \"total_over_parse\": %.2f, \"protobuf_parse_s\": %.3f, "
      "\"protobuf_parse_over_parse\": %.2f, \"start_mb\": %.1f, "
      "\"parsed_mb\": %.1f, \"graph_mb\": %.1f, \"prepared_mb\": %.1f, \"peak_mb\": %.1f, \"parsed_heap_mb\": %.1f, "
      "\"graph_heap_mb\": %.1f, \"prepared_heap_mb\": %.1f}\n",
      nodes, op.c_str(), parse, build, first_step, second_step, total, total / parse, protobuf_parse,
      protobuf_parse / parse, start_mb, parsed_mb, graph_mb, prepared_mb, peak, parsed_heap, graph_heap, prepared_heap);
  return 0;
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) {
  long nodes = 100000;
  std::string op = "Neg";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--nodes=", 0) == 0) {
      nodes = std::atol(arg.c_str() + 8);
    } else if (arg.rfind("--op=", 0) == 0) {
      op = arg.substr(5);
    } else {
      std::fprintf(stderr, "usage: bench_graph_setup [--nodes=N] [--op=Neg]  (unknown option '%s')\n", arg.c_str());
      return 2;
    }
  }
  if (nodes < 1) {
    std::fprintf(stderr, "bench_graph_setup: --nodes must be at least 1\n");
    return 2;
  }
  return troupe::bench::run(nodes, op);
}
