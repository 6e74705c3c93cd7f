#include "graph/graph_io.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "core/file.h"

namespace troupe::graph {
namespace {

class error_collector final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) first_ = str_cat(line + 1, ":", column + 1, ": ", message);
  }
  void AddWarning(int, int, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

result<tf::GraphDef> parse_graph_def_text(const std::string& text, const std::string& what) {
  tf::GraphDef def;
  google::protobuf::TextFormat::Parser parser;
  error_collector errors;
  parser.RecordErrorsTo(&errors);
  parser.AllowUnknownField(true);
  parser.AllowUnknownExtension(true);
  if (!parser.ParseFromString(text, &def)) {
    return invalid_argument_error(what, ":", errors.first().empty() ? " malformed text" : errors.first());
  }
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
