// What `troupe eval` does with a GraphDef once it is parsed (tools/eval_command.cc):
// graph::graph::from_graph_def, every check of graph/graph.h. Shared by the text and
// binary GraphDef fuzzers.
#pragma once

#include "fuzz/fuzz_check.h"
#include "graph/graph.h"

namespace troupe::fuzz {

// Validates `def`. A graph that validates must validate again from its own GraphDef
// (the form a session and `troupe graph` pass on), with the same types and shapes.
inline void check_graph_def(const tf::GraphDef& def) {
  auto g = graph::graph::from_graph_def(def);
  if (!g.ok()) {
    require(!g.error().message().empty(), "an error without a message");
    return;
  }
  require(static_cast<int>(g->topological_order().size()) == g->num_nodes(),
          "the topological order misses nodes");
  auto again = graph::graph::from_graph_def(g->to_graph_def());
  // The first graph still holds its constants: a second copy may not fit in the memory
  // limit (tools/fuzz.sh sets TROUPE_MEMORY_LIMIT).
  if (!again.ok() && again.error().error_code() == code::resource_exhausted) return;
  require(again.ok(), "a valid graph's own GraphDef does not validate",
          again.ok() ? "" : again.error().message());
  require(again->num_nodes() == g->num_nodes(), "the graph changed its number of nodes");
  for (int id = 0; id < g->num_nodes(); ++id) {
    const graph::node& a = g->get(id);
    const graph::node& b = again->get(id);
    require(a.output_types == b.output_types && a.output_shapes == b.output_shapes,
            "a node's types or shapes changed on the second validation", a.name());
  }
}

// One fuzzer input after parsing: a parse error must name `source` (as "source:..."),
// a parsed GraphDef goes through check_graph_def. Returns libFuzzer's 0.
inline int check_parsed_graph_def(const result<tf::GraphDef>& def, std::string_view source, std::string_view what) {
  if (!def.ok()) {
    require(starts_with(def.error().message(), std::string(source) + ":"), what, def.error().message());
    return 0;
  }
  check_graph_def(*def);
  return 0;
}

}  // namespace troupe::fuzz
