// Fuzz target: a GraphDef in protobuf text format (`troupe eval --graph G.pbtxt`), parsed
// and validated as graph/graph_io.h and graph/graph.h do. Errors must name the source.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/graph_def_check.h"
#include "graph/graph_io.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  troupe::fuzz::quiet_protobuf();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace troupe;
  std::string text(reinterpret_cast<const char*>(data), size);
  return fuzz::check_parsed_graph_def(graph::parse_graph_def_text(text, "fuzz.pbtxt"), "fuzz.pbtxt",
                                       "a text parse error that does not name the file");
}
