#include "graph/text_proto.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <map>
#include <set>

namespace troupe::graph {

namespace pb = google::protobuf;

result<std::string> to_json(const pb::Message& m, std::string_view what) {
  pb::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  std::string json;
  const auto printed = pb::util::MessageToJsonString(m, &json, o);
  if (!printed.ok()) return internal_error("printing ", what, " as JSON: ", printed.ToString());
  return json;
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string suggestion(std::string_view name, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(1, name.size() / 4) + 1;  // to beat
  for (const auto& c : candidates) {
    // The distance is at least the difference in length: a long name is not compared in
    // full with every short candidate.
    std::size_t length_difference = name.size() > c.size() ? name.size() - c.size() : c.size() - name.size();
    if (length_difference >= best_distance) continue;
    std::size_t d = edit_distance(name, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best.empty() ? "" : str_cat(" (did you mean '", best, "'?)");
}

namespace {

// Every enum field of a message type and the messages below it, by field name.
void collect_enum_fields(const pb::Descriptor* type, std::set<const pb::Descriptor*>* seen,
                         std::multimap<std::string, const pb::EnumDescriptor*>* out) {
  if (!seen->insert(type).second) return;
  for (int i = 0; i < type->field_count(); ++i) {
    const pb::FieldDescriptor* field = type->field(i);
    if (field->enum_type() != nullptr) out->emplace(field->name(), field->enum_type());
    if (field->message_type() != nullptr) collect_enum_fields(field->message_type(), seen, out);
  }
}

// Matches `message` against  <a>"<first>"<b>"<second>"...  and extracts the quoted parts.
// (Plain string matching: std::regex recurses once per character and overflows the stack
// on a long quoted name.)
bool match_quoted_pair(std::string_view message, std::string_view a, std::string_view b,
                       std::string* first, std::string* second) {
  auto quoted = [&](std::string_view prefix, std::string* out) {
    if (message.substr(0, prefix.size()) != prefix || message.substr(prefix.size(), 1) != "\"") {
      return false;
    }
    message.remove_prefix(prefix.size() + 1);
    std::size_t close = message.find('"');
    if (close == std::string_view::npos) return false;
    *out = std::string(message.substr(0, close));
    message.remove_prefix(close + 1);
    return true;
  };
  return quoted(a, first) && quoted(b, second);
}

// The protobuf parser's messages say what is wrong but not what would be right: add the
// valid values of an enum, or the fields of a message with a suggestion.
std::string explain_parse_error(const std::string& message, const pb::Descriptor* root) {
  std::string first, second;
  if (match_quoted_pair(message, "Unknown enumeration value of ", " for field ", &first, &second)) {
    std::set<const pb::Descriptor*> seen;
    std::multimap<std::string, const pb::EnumDescriptor*> fields;
    collect_enum_fields(root, &seen, &fields);
    auto [begin, end] = fields.equal_range(second);
    if (begin == end || std::next(begin) != end) return message;
    std::vector<std::string> values;
    for (int i = 0; i < begin->second->value_count(); ++i) {
      const std::string& value = begin->second->value(i)->name();
      if (value.find("UNSPECIFIED") == std::string::npos) values.push_back(value);
    }
    return str_cat(message, suggestion(first, values), " Valid: ", join(values), ".");
  }
  if (match_quoted_pair(message, "Message type ", " has no field named ", &first, &second)) {
    const pb::Descriptor* type = pb::DescriptorPool::generated_pool()->FindMessageTypeByName(first);
    if (type == nullptr) return message;
    std::vector<std::string> names;
    for (int i = 0; i < type->field_count(); ++i) names.push_back(type->field(i)->name());
    return str_cat(message, suggestion(second, names), " Fields of ", type->name(), ": ",
                   join(names), ".");
  }
  return message;
}

// Columns as protobuf counts them: bytes, except that a tab advances to the next multiple
// of 8.
constexpr int k_tab_width = 8;
int column_of_byte(std::string_view line, std::size_t byte) {
  int column = 0;
  for (std::size_t i = 0; i < byte && i < line.size(); ++i) {
    column = line[i] == '\t' ? column + k_tab_width - column % k_tab_width : column + 1;
  }
  return column;
}
// The first byte whose column is beyond `column` (one pass: counting the columns of every
// prefix again took quadratic time, minutes for a line of a few hundred thousand bytes).
std::size_t byte_of_column(std::string_view line, int column) {
  int at = 0;
  std::size_t i = 0;
  for (; i < line.size(); ++i) {
    int next = line[i] == '\t' ? at + k_tab_width - at % k_tab_width : at + 1;
    if (next > column) break;
    at = next;
  }
  return i;
}

// Keeps the parser's first error. The parser reports a position after the offending
// name ("stepz: 10" at the ':'); when the message quotes the name and the line has it
// before that position, the error points at its start instead.
class error_collector final : public pb::io::ErrorCollector {
 public:
  error_collector(std::string_view text, const pb::Descriptor* root) : root_(root) {
    std::size_t start = 0;
    while (start <= text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      lines_.push_back(text.substr(start, end - start));
      start = end + 1;
    }
  }

  void AddError(int line, int column, const std::string& message) override {
    if (!first_.empty()) return;
    if (line >= 0 && static_cast<std::size_t>(line) < lines_.size()) {
      std::string_view text = lines_[static_cast<std::size_t>(line)];
      std::size_t limit = byte_of_column(text, column);
      // The first quoted word of the message found on the line (a message may quote the
      // message type first, then the field).
      for (std::size_t open = message.find('"'); open != std::string::npos;) {
        std::size_t close = message.find('"', open + 1);
        if (close == std::string::npos) break;
        std::string token = message.substr(open + 1, close - open - 1);
        std::size_t at = token.empty() ? std::string_view::npos : text.rfind(token, limit);
        if (at != std::string_view::npos) {
          column = column_of_byte(text, at);
          break;
        }
        open = message.find('"', close + 1);
      }
    }
    first_ = str_cat(line + 1, ":", column + 1, ": ", explain_parse_error(message, root_));
  }
  void AddWarning(int, int, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  const pb::Descriptor* root_;
  std::vector<std::string_view> lines_;
  std::string first_;
};

}  // namespace

status parse_text_proto(const std::string& text, const std::string& filename, std::string_view what,
                        google::protobuf::Message* out, google::protobuf::TextFormat::ParseInfoTree* tree) {
  pb::TextFormat::Parser parser;
  error_collector errors(text, out->GetDescriptor());
  parser.RecordErrorsTo(&errors);
  if (tree != nullptr) parser.WriteLocationsTo(tree);
  if (!parser.ParseFromString(text, out)) {
    return invalid_argument_error(filename, ":", errors.first().empty() ? str_cat(" malformed ", what) : errors.first());
  }
  return status();
}

}  // namespace troupe::graph
