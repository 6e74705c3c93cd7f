// protobuf's own text parser as the reference for graph/text_format.h: the unit test
// (tests/graph/text_format_test.cc) and the fuzz target graphdef_text compare the two.
#pragma once

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "graph/proto/graph.pb.h"

namespace troupe::fuzz {

// What graph_io.cc did before the fast reader: TextFormat::Parser with unknown fields and
// extensions allowed.
inline bool reference_parse_text(const std::string& text, tf::GraphDef* out) {
  class silent final : public google::protobuf::io::ErrorCollector {
    void AddError(int, int, const std::string&) override {}
    void AddWarning(int, int, const std::string&) override {}
  } errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.AllowUnknownField(true);
  parser.AllowUnknownExtension(true);
  return parser.ParseFromString(text, out);
}

// Bytes that are equal exactly when the messages are (map entries sorted by key).
inline std::string canonical_bytes(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

// An upper bound of the nesting of `text` (every opening bracket counts, in strings too).
// protobuf's text parser recurses without limit and overflows the stack on deep input,
// where the fast reader refuses more than 100 levels: the reference runs only below this.
inline int bracket_depth_bound(std::string_view text) {
  int depth = 0, deepest = 0;
  for (char c : text) {
    if (c == '{' || c == '<' || c == '[') deepest = std::max(deepest, ++depth);
    if ((c == '}' || c == '>' || c == ']') && depth > 0) --depth;
  }
  return deepest;
}

}  // namespace troupe::fuzz
