// Fuzz target: a GraphDef in protobuf text format (`troupe eval --graph G.pbtxt`), parsed
// and validated as graph/graph_io.h and graph/graph.h do. Errors must name the source, and
// the fast reader (graph/text_format.h) must agree with protobuf's own parser.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/graph_def_check.h"
#include "fuzz/text_reference.h"
#include "graph/graph_io.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  troupe::fuzz::quiet_protobuf();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace troupe;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = graph::parse_graph_def_text(text, "fuzz.pbtxt");
  // The fast reader against protobuf's parser: the same verdict, the same message.
  if (fuzz::bracket_depth_bound(text) <= 100) {
    tf::GraphDef reference;
    const bool reference_ok = fuzz::reference_parse_text(text, &reference);
    fuzz::require(reference_ok == parsed.ok(), "the text reader and protobuf disagree on accepting",
                  parsed.ok() ? "the reader accepts" : parsed.error().message());
    if (reference_ok) {
      fuzz::require(fuzz::canonical_bytes(reference) == fuzz::canonical_bytes(*parsed),
                    "the text reader and protobuf build different GraphDefs");
    }
  }
  return fuzz::check_parsed_graph_def(parsed, "fuzz.pbtxt", "a text parse error that does not name the file");
}
