#include "graph/graph_io.h"

#include <google/protobuf/text_format.h>

#include "core/file.h"
#include "graph/text_format.h"

namespace troupe::graph {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

result<tf::GraphDef> parse_graph_def_text(const std::string& text, const std::string& what) {
  tf::GraphDef def;
  const status parsed = parse_text_message(text, &def);
  if (!parsed.ok()) return invalid_argument_error(what, ":", parsed.message());
  return def;
}

result<tf::GraphDef> parse_graph_def_binary(const std::string& bytes, const std::string& what) {
  tf::GraphDef def;
  if (!def.ParseFromString(bytes)) {
    return invalid_argument_error(what, ": not a valid binary GraphDef (protobuf parse failed)");
  }
  return def;
}

namespace {
bool is_text_name(const std::string& path) {
  return ends_with(path, ".pbtxt") || ends_with(path, ".pbtext") || ends_with(path, ".txt") ||
         ends_with(path, ".textproto");
}
}  // namespace

result<tf::GraphDef> read_graph_def(const std::string& path) {
  auto contents = read_file(path);
  if (!contents.ok()) return contents.error();
  return is_text_name(path) ? parse_graph_def_text(*contents, path)
                            : parse_graph_def_binary(*contents, path);
}

std::string graph_def_to_text(const tf::GraphDef& def) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(def, &out);
  return out;
}

std::string graph_def_to_binary(const tf::GraphDef& def) {
  std::string out;
  def.SerializeToString(&out);
  return out;
}

status write_graph_def(const std::string& path, const tf::GraphDef& def) {
  return write_file(path, is_text_name(path) ? graph_def_to_text(def) : graph_def_to_binary(def));
}

}  // namespace troupe::graph
