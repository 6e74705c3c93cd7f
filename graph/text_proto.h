// Text-format protobuf files (scenarios, cluster files) parsed with errors a person can act
// on: "<file>:<line>:<column>: <protobuf's message>", completed with the valid values of an
// enum field or the fields of a message and a suggestion for a misspelt name.
//
//   TROUPE_RETURN_IF_ERROR(graph::parse_text_proto(text, "c.pbtxt", "cluster file", &proto, &tree));
#pragma once

#include <google/protobuf/message.h>
#include <google/protobuf/text_format.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace troupe::graph {

// Parses `text` into `out` (INVALID_ARGUMENT as above; " malformed <what>" when protobuf
// says nothing); where each field was goes to `tree` when not null.
status parse_text_proto(const std::string& text, const std::string& filename, std::string_view what,
                        google::protobuf::Message* out, google::protobuf::TextFormat::ParseInfoTree* tree);

// `m` as JSON the way troupe writes every JSON file (../shared/DESIGN.md: protobuf's
// mapping, field names as the .proto spells them, every field even when default,
// indented). INTERNAL naming `what` when protobuf cannot print it.
result<std::string> to_json(const google::protobuf::Message& m, std::string_view what);

// " (did you mean 'x'?)" when one candidate is close to `name`, else "".
std::string suggestion(std::string_view name, const std::vector<std::string>& candidates);

// The items with `separator` between them.
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");

}  // namespace troupe::graph
