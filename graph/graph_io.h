// Reading and writing GraphDefs in TensorFlow's two forms: binary protobuf (`.pb`) and
// protobuf text format (`.pbtxt`, read by graph/text_format.h, written by protobuf).
// Unknown fields are skipped (kept in binary form), so a GraphDef written by TensorFlow
// loads whatever fields a newer TensorFlow adds. A malformed text file is reported with
// its line and column.
#pragma once

#include <string>

#include "core/status.h"
#include "graph/proto/graph.pb.h"

namespace troupe::graph {

// `what` names the source (a file name) in errors.
result<tf::GraphDef> parse_graph_def_text(const std::string& text, const std::string& what);
result<tf::GraphDef> parse_graph_def_binary(const std::string& bytes, const std::string& what);
// Text when the name ends in .pbtxt, .pbtext, .txt or .textproto, else binary.
result<tf::GraphDef> read_graph_def(const std::string& path);

std::string graph_def_to_text(const tf::GraphDef& def);
std::string graph_def_to_binary(const tf::GraphDef& def);
status write_graph_def(const std::string& path, const tf::GraphDef& def);

}  // namespace troupe::graph
