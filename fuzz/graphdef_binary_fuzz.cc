// Fuzz target: a binary GraphDef (`troupe eval --graph G.pb`), parsed and validated as
// graph/graph_io.h and graph/graph.h do. Errors must name the source.
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
  std::string bytes(reinterpret_cast<const char*>(data), size);
  return fuzz::check_parsed_graph_def(graph::parse_graph_def_binary(bytes, "fuzz.pb"), "fuzz.pb",
                                       "a binary parse error that does not name the file");
}
