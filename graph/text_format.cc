#include "graph/text_format.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/map.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/proto/graph.pb.h"

namespace troupe::graph {
namespace {

namespace pb = google::protobuf;

// protobuf's binary parser refuses deeper messages; its text parser has no limit and
// overflows the stack (a GraphDef nested 5,000 deep crashed troupe eval).
constexpr int k_depth_limit = 100;

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_octal(char c) { return c >= '0' && c <= '7'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
int digit_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return -1;
}

// An unsigned integer token (decimal, 0x hex, 0 octal) no larger than `max_value`.
bool parse_integer(std::string_view text, uint64_t max_value, uint64_t* out) {
  int base = 10;
  size_t i = 0;
  if (text.size() > 1 && text[0] == '0') {
    if (text[1] == 'x' || text[1] == 'X') {
      base = 16;
      i = 2;
    } else {
      base = 8;
    }
  }
  uint64_t value = 0;
  for (; i < text.size(); ++i) {
    const int digit = digit_value(text[i]);
    if (digit < 0 || digit >= base) return false;
    if (static_cast<uint64_t>(digit) > max_value || value > (max_value - digit) / base) return false;
    value = value * base + digit;
  }
  *out = value;
  return true;
}

// A float token ("1.5", "1e-3", ".5", "2f"), read as strtod reads it up to the suffix.
double parse_float(std::string_view text) {
  const std::string copy(text);
  return std::strtod(copy.c_str(), nullptr);
}

float double_to_float(double value) {
  if (value > std::numeric_limits<float>::max()) return std::numeric_limits<float>::infinity();
  if (value < -std::numeric_limits<float>::max()) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(value);
}

void append_utf8(uint32_t code_point, std::string* out) {
  if (code_point <= 0x7f) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point <= 0x7ff) {
    out->push_back(static_cast<char>(0xc0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else if (code_point <= 0xffff) {
    out->push_back(static_cast<char>(0xe0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else if (code_point <= 0x10ffff) {
    out->push_back(static_cast<char>(0xf0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else {
    // Beyond Unicode (\U0011xxxx passes the tokenizer): kept as the escape, as protobuf does.
    static constexpr char k_hex[] = "0123456789abcdef";
    out->append("\\U");
    for (int shift = 28; shift >= 0; shift -= 4) out->push_back(k_hex[(code_point >> shift) & 0xf]);
  }
}

bool read_hex(std::string_view text, size_t at, int digits, uint32_t* out) {
  if (at + digits > text.size()) return false;
  uint32_t value = 0;
  for (int i = 0; i < digits; ++i) {
    if (!is_hex(text[at + i])) return false;
    value = value * 16 + digit_value(text[at + i]);
  }
  *out = value;
  return true;
}

char translate_escape(char c) {
  switch (c) {
    case 'a': return '\a';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'v': return '\v';
    default: return c;  // \\ \? \' \"
  }
}

// Appends the value of one string token (quotes included, escapes already checked by the
// tokenizer): C escapes, octal and hex bytes, \u and \U code points written as UTF-8, a
// UTF-16 surrogate pair in two \u escapes joined into one code point.
void append_unescaped(std::string_view token, std::string* out) {
  const std::string_view body = token.substr(1, token.size() - 2);
  out->reserve(out->size() + body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    const char e = body[++i];
    if (is_octal(e)) {
      int code = e - '0';
      for (int more = 0; more < 2 && i + 1 < body.size() && is_octal(body[i + 1]); ++more) code = code * 8 + (body[++i] - '0');
      out->push_back(static_cast<char>(code));
    } else if (e == 'x') {
      int code = 0;
      for (int more = 0; more < 2 && i + 1 < body.size() && is_hex(body[i + 1]); ++more) code = code * 16 + digit_value(body[++i]);
      out->push_back(static_cast<char>(code));
    } else if (e == 'u' || e == 'U') {
      const int digits = e == 'u' ? 4 : 8;
      uint32_t code_point = 0;
      read_hex(body, i + 1, digits, &code_point);
      i += digits;
      uint32_t trail = 0;
      if (code_point >= 0xd800 && code_point <= 0xdbff && i + 2 < body.size() && body[i + 1] == '\\' &&
          body[i + 2] == 'u' && read_hex(body, i + 3, 4, &trail) && trail >= 0xdc00 && trail <= 0xdfff) {
        code_point = 0x10000 + ((code_point - 0xd800) << 10) + (trail - 0xdc00);
        i += 6;
      }
      append_utf8(code_point, out);
    } else {
      out->push_back(translate_escape(e));
    }
  }
}

class text_reader {
 public:
  explicit text_reader(std::string_view text) : in_(text) { next(); }

  status parse(pb::Message* out) {
    while (current_.type != kind::end && error_.empty()) {
      if (!consume_field(out)) break;
    }
    if (error_.empty()) return status();
    return invalid_argument_error(error_line_, ":", error_column_, ": ", error_);
  }

 private:
  enum class kind { end, error, identifier, integer, floating, string, symbol };
  struct token {
    kind type = kind::end;
    std::string_view text;
    int line = 1;
    int column = 1;
  };

  // --- tokenizer -----------------------------------------------------------------------

  char at(size_t i) const { return i < in_.size() ? in_[i] : '\0'; }

  // Records the first error, at `offset` of the input; later tokens read as errors.
  bool fail_at(size_t offset, std::string message) {
    if (error_.empty()) {
      error_ = std::move(message);
      error_line_ = line_;
      error_column_ = static_cast<int>(offset - line_start_) + 1;
    }
    current_ = token{kind::error, {}, line_, 0};
    pos_ = in_.size();
    return false;
  }

  // The parser's errors are placed at the current token.
  bool fail(std::string message) {
    if (error_.empty()) {
      error_ = std::move(message);
      error_line_ = current_.line;
      error_column_ = current_.column;
    }
    return false;
  }

  void next() {
    previous_ = current_;
    if (current_.type == kind::error) return;
    while (pos_ < in_.size()) {
      const char c = in_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
        ++pos_;
      } else if (c == '\n') {
        ++pos_;
        ++line_;
        line_start_ = pos_;
      } else if (c == '#') {
        while (pos_ < in_.size() && in_[pos_] != '\n' && in_[pos_] != '\0') ++pos_;
      } else {
        break;
      }
    }
    const size_t start = pos_;
    current_.line = line_;
    current_.column = static_cast<int>(start - line_start_) + 1;
    if (start == in_.size()) {
      current_.type = kind::end;
      current_.text = {};
      return;
    }
    const unsigned char c = static_cast<unsigned char>(in_[start]);
    if (c < 0x20) {
      fail_at(start, "Invalid control characters encountered in text.");
      return;
    }
    if (c & 0x80) {
      fail_at(start, str_cat("Interpreting non ascii codepoint ", static_cast<int>(c), "."));
      return;
    }
    ++pos_;
    if (is_letter(static_cast<char>(c))) {
      while (is_letter(at(pos_)) || is_digit(at(pos_))) ++pos_;
      current_.type = kind::identifier;
    } else if (is_digit(static_cast<char>(c))) {
      if (!consume_number(c == '0', false)) return;
    } else if (c == '.' && is_digit(at(pos_))) {
      if (previous_.type == kind::identifier && previous_.text.data() + previous_.text.size() == in_.data() + start) {
        fail_at(start, "Need space between identifier and decimal point.");
        return;
      }
      ++pos_;
      if (!consume_number(false, true)) return;
    } else if (c == '"' || c == '\'') {
      if (!consume_string(static_cast<char>(c))) return;
    } else {
      current_.type = kind::symbol;
    }
    current_.text = in_.substr(start, pos_ - start);
  }

  bool consume_number(bool started_with_zero, bool started_with_dot) {
    bool is_float = false;
    if (started_with_zero && (at(pos_) == 'x' || at(pos_) == 'X')) {
      ++pos_;
      if (!is_hex(at(pos_))) return fail_at(pos_, "\"0x\" must be followed by hex digits.");
      while (is_hex(at(pos_))) ++pos_;
    } else if (started_with_zero && is_digit(at(pos_))) {
      while (is_octal(at(pos_))) ++pos_;
      if (is_digit(at(pos_))) return fail_at(pos_, "Numbers starting with leading zero must be in octal.");
    } else {
      if (started_with_dot) {
        is_float = true;
        while (is_digit(at(pos_))) ++pos_;
      } else {
        while (is_digit(at(pos_))) ++pos_;
        if (at(pos_) == '.') {
          ++pos_;
          is_float = true;
          while (is_digit(at(pos_))) ++pos_;
        }
      }
      if (at(pos_) == 'e' || at(pos_) == 'E') {
        ++pos_;
        is_float = true;
        if (at(pos_) == '-' || at(pos_) == '+') ++pos_;
        if (!is_digit(at(pos_))) return fail_at(pos_, "\"e\" must be followed by exponent.");
        while (is_digit(at(pos_))) ++pos_;
      }
      if (at(pos_) == 'f' || at(pos_) == 'F') {
        ++pos_;
        is_float = true;
      }
    }
    if (is_letter(at(pos_))) return fail_at(pos_, "Need space between number and identifier.");
    if (at(pos_) == '.') {
      return fail_at(pos_, is_float ? "Already saw decimal point or exponent; can't have another one."
                                    : "Hex and octal numbers must be integers.");
    }
    current_.type = is_float ? kind::floating : kind::integer;
    return true;
  }

  bool consume_string(char delimiter) {
    for (;;) {
      if (pos_ >= in_.size() || in_[pos_] == '\0') return fail_at(pos_, "Unexpected end of string.");
      const char c = in_[pos_];
      if (c == '\n') return fail_at(pos_, "String literals cannot cross line boundaries.");
      ++pos_;
      if (c == delimiter) break;
      if (c != '\\') continue;
      const char e = at(pos_);
      if (e == 'a' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't' || e == 'v' || e == '\\' ||
          e == '?' || e == '\'' || e == '"' || is_octal(e)) {
        ++pos_;
      } else if (e == 'x') {
        ++pos_;
        if (!is_hex(at(pos_))) return fail_at(pos_, "Expected hex digits for escape sequence.");
        ++pos_;
      } else if (e == 'u') {
        ++pos_;
        for (int i = 0; i < 4; ++i, ++pos_) {
          if (!is_hex(at(pos_))) return fail_at(pos_, "Expected four hex digits for \\u escape sequence.");
        }
      } else if (e == 'U') {
        ++pos_;
        // Eight hex digits, at most 10ffff.
        const bool ok = at(pos_) == '0' && at(pos_ + 1) == '0' && (at(pos_ + 2) == '0' || at(pos_ + 2) == '1') &&
                        is_hex(at(pos_ + 3)) && is_hex(at(pos_ + 4)) && is_hex(at(pos_ + 5)) &&
                        is_hex(at(pos_ + 6)) && is_hex(at(pos_ + 7));
        if (!ok) return fail_at(pos_, "Expected eight hex digits up to 10ffff for \\U escape sequence");
        pos_ += 8;
      } else {
        return fail_at(pos_, "Invalid escape sequence in string literal.");
      }
    }
    current_.type = kind::string;
    return true;
  }

  // --- parser (the grammar and checks of protobuf's TextFormat::Parser) ----------------

  bool looking_at(std::string_view text) const {
    return current_.type != kind::error && current_.type != kind::end && current_.text == text;
  }
  bool try_consume(std::string_view text) {
    if (!looking_at(text)) return false;
    next();
    return true;
  }
  bool consume(std::string_view text) {
    if (try_consume(text)) return true;
    return fail(str_cat("Expected \"", text, "\", found \"", current_.text, "\"."));
  }

  // A field name: an identifier, or (unknown fields being allowed) an integer.
  bool consume_identifier(std::string_view* out) {
    if (current_.type == kind::identifier || current_.type == kind::integer) {
      *out = current_.text;
      next();
      return true;
    }
    return fail(str_cat("Expected identifier, got: ", current_.text));
  }

  // An extension name inside [ ]: identifiers joined by '.', or by '/' too (a type URL)
  // inside an unknown field, as protobuf reads them.
  bool consume_type_name(bool allow_slash) {
    std::string_view part;
    if (!consume_identifier(&part)) return false;
    while (try_consume(".") || (allow_slash && try_consume("/"))) {
      if (!consume_identifier(&part)) return false;
    }
    return true;
  }

  static const pb::FieldDescriptor* find_field(const pb::Descriptor* type, std::string_view name) {
    for (int i = 0; i < type->field_count(); ++i) {
      const pb::FieldDescriptor* field = type->field(i);
      if (field->name() == name) return field;
    }
    return nullptr;
  }

  bool consume_field(pb::Message* message) {
    const pb::Reflection* reflection = message->GetReflection();
    const pb::FieldDescriptor* field = nullptr;
    std::string_view name;
    if (try_consume("[")) {
      if (!consume_type_name(false) || !consume("]")) return false;  // no extensions here: skipped
    } else {
      if (!consume_identifier(&name)) return false;
      field = find_field(message->GetDescriptor(), name);
    }
    if (field == nullptr) {
      // An unknown field: a scalar after ':' unless a message body follows.
      // As protobuf, no separator is taken after an unknown field at this level.
      if (try_consume(":") && !looking_at("{") && !looking_at("<")) return skip_field_value();
      return skip_field_message();
    }
    if (!field->is_repeated() && reflection->HasField(*message, field)) {
      return fail(str_cat("Non-repeated field \"", name, "\" is specified multiple times."));
    }
    if (const pb::OneofDescriptor* oneof = field->containing_oneof();
        oneof != nullptr && reflection->HasOneof(*message, oneof)) {
      const pb::FieldDescriptor* other = reflection->GetOneofFieldDescriptor(*message, oneof);
      return fail(str_cat("Field \"", name, "\" is specified along with field \"", other->name(),
                          "\", another member of oneof \"", oneof->name(), "\"."));
    }
    const bool is_message = field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE;
    if (is_message) {
      try_consume(":");
    } else if (!consume(":")) {
      return false;
    }
    if (field->is_repeated() && try_consume("[")) {
      if (!try_consume("]")) {
        for (;;) {
          if (!(is_message ? consume_field_message(message, reflection, field)
                           : consume_field_value(message, reflection, field))) {
            return false;
          }
          if (try_consume("]")) break;
          if (!consume(",")) return false;
        }
      }
    } else if (!(is_message ? consume_field_message(message, reflection, field)
                            : consume_field_value(message, reflection, field))) {
      return false;
    }
    try_consume(";") || try_consume(",");
    return true;
  }

  // Each message body and skipped list opened counts one level.
  bool enter() {
    if (--depth_left_ >= 0) return true;
    return fail(str_cat("Message nesting deeper than ", k_depth_limit, " levels."));
  }

  bool consume_delimiter(std::string_view* closing) {
    if (try_consume("<")) {
      *closing = ">";
      return true;
    }
    *closing = "}";
    return consume("{");
  }

  bool consume_field_message(pb::Message* message, const pb::Reflection* reflection,
                             const pb::FieldDescriptor* field) {
    if (!enter()) return false;
    std::string_view closing;
    if (!consume_delimiter(&closing)) return false;
    pb::Map<std::string, tf::AttrValue>* attrs = attr_map(message, field);
    pb::Message* inner = attrs != nullptr      ? scratch_entry(field)
                         : field->is_repeated() ? reflection->AddMessage(message, field)
                                                : reflection->MutableMessage(message, field);
    while (!looking_at(">") && !looking_at("}")) {
      if (!consume_field(inner)) return false;
    }
    if (!consume(closing)) return false;
    if (attrs != nullptr) {
      // Later entries of one key replace earlier ones, as when protobuf syncs its list.
      const pb::Descriptor* entry = field->message_type();
      const pb::Reflection* entry_reflection = inner->GetReflection();
      auto* value = static_cast<tf::AttrValue*>(entry_reflection->MutableMessage(inner, entry->map_value()));
      (*attrs)[entry_reflection->GetString(*inner, entry->map_key())].Swap(value);
    }
    ++depth_left_;
    return true;
  }

  // The attribute maps (NodeDef.attr, NameAttrList.attr) are filled as maps: reflection
  // would fill them as a list of entries, which protobuf copies into a map on first use
  // and keeps beside it (about 150 bytes a node). Other maps go through reflection.
  static pb::Map<std::string, tf::AttrValue>* attr_map(pb::Message* message, const pb::FieldDescriptor* field) {
    static const pb::FieldDescriptor* const node_attr =
        tf::NodeDef::descriptor()->FindFieldByNumber(tf::NodeDef::kAttrFieldNumber);
    static const pb::FieldDescriptor* const function_attr =
        tf::NameAttrList::descriptor()->FindFieldByNumber(tf::NameAttrList::kAttrFieldNumber);
    if (field == node_attr) return static_cast<tf::NodeDef*>(message)->mutable_attr();
    if (field == function_attr) {
      return static_cast<tf::NameAttrList*>(message)->mutable_attr();
    }
    return nullptr;
  }

  // A cleared entry message of `field`'s map, one per nesting level (an entry's value can
  // hold further maps).
  pb::Message* scratch_entry(const pb::FieldDescriptor* field) {
    auto& slot = scratch_entries_[static_cast<size_t>(depth_left_)];
    if (slot == nullptr || slot->GetDescriptor() != field->message_type()) {
      slot.reset(pb::MessageFactory::generated_factory()->GetPrototype(field->message_type())->New());
    } else {
      slot->Clear();
    }
    return slot.get();
  }

  bool consume_unsigned(uint64_t max_value, uint64_t* out) {
    if (current_.type != kind::integer) return fail(str_cat("Expected integer, got: ", current_.text));
    if (!parse_integer(current_.text, max_value, out)) {
      return fail(str_cat("Integer out of range (", current_.text, ")"));
    }
    next();
    return true;
  }

  bool consume_signed(int64_t max_value, int64_t* out) {
    const bool negative = try_consume("-");
    uint64_t magnitude = 0;
    if (!consume_unsigned(static_cast<uint64_t>(max_value) + (negative ? 1 : 0), &magnitude)) return false;
    if (!negative) {
      *out = static_cast<int64_t>(magnitude);
    } else if (magnitude == static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1) {
      *out = std::numeric_limits<int64_t>::min();
    } else {
      *out = -static_cast<int64_t>(magnitude);
    }
    return true;
  }

  bool consume_double(double* out) {
    const bool negative = try_consume("-");
    const std::string_view text = current_.text;
    if (current_.type == kind::integer) {
      if (text.size() > 1 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X' || is_octal(text[1]))) {
        return fail(str_cat("Expect a decimal number, got: ", text));
      }
      uint64_t integer = 0;
      *out = parse_integer(text, std::numeric_limits<uint64_t>::max(), &integer) ? static_cast<double>(integer)
                                                                               : parse_float(text);
    } else if (current_.type == kind::floating) {
      *out = parse_float(text);
    } else if (current_.type == kind::identifier && is_infinity_or_nan(text)) {
      *out = lower(text) == "nan" ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    } else {
      return fail(str_cat("Expected double, got: ", text));
    }
    next();
    if (negative) *out = -*out;
    return true;
  }

  static std::string lower(std::string_view text) {
    std::string out(text);
    for (char& c : out) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }
  static bool is_infinity_or_nan(std::string_view text) {
    const std::string word = lower(text);
    return word == "inf" || word == "infinity" || word == "nan";
  }

  bool consume_field_value(pb::Message* message, const pb::Reflection* reflection,
                           const pb::FieldDescriptor* field) {
    const bool repeated = field->is_repeated();
    switch (field->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_INT32: {
        int64_t value = 0;
        if (!consume_signed(std::numeric_limits<int32_t>::max(), &value)) return false;
        repeated ? reflection->AddInt32(message, field, static_cast<int32_t>(value))
                 : reflection->SetInt32(message, field, static_cast<int32_t>(value));
        return true;
      }
      case pb::FieldDescriptor::CPPTYPE_INT64: {
        int64_t value = 0;
        if (!consume_signed(std::numeric_limits<int64_t>::max(), &value)) return false;
        repeated ? reflection->AddInt64(message, field, value) : reflection->SetInt64(message, field, value);
        return true;
      }
      case pb::FieldDescriptor::CPPTYPE_UINT32: {
        uint64_t value = 0;
        if (!consume_unsigned(std::numeric_limits<uint32_t>::max(), &value)) return false;
        repeated ? reflection->AddUInt32(message, field, static_cast<uint32_t>(value))
                 : reflection->SetUInt32(message, field, static_cast<uint32_t>(value));
        return true;
      }
      case pb::FieldDescriptor::CPPTYPE_UINT64: {
        uint64_t value = 0;
        if (!consume_unsigned(std::numeric_limits<uint64_t>::max(), &value)) return false;
        repeated ? reflection->AddUInt64(message, field, value) : reflection->SetUInt64(message, field, value);
        return true;
      }
      case pb::FieldDescriptor::CPPTYPE_FLOAT: {
        double value = 0;
        if (!consume_double(&value)) return false;
        repeated ? reflection->AddFloat(message, field, double_to_float(value))
                 : reflection->SetFloat(message, field, double_to_float(value));
        return true;
      }
      case pb::FieldDescriptor::CPPTYPE_DOUBLE: {
        double value = 0;
        if (!consume_double(&value)) return false;
        repeated ? reflection->AddDouble(message, field, value) : reflection->SetDouble(message, field, value);
        return true;
      }
      case pb::FieldDescriptor::CPPTYPE_STRING: {
        if (current_.type != kind::string) return fail(str_cat("Expected string, got: ", current_.text));
        std::string value;
        while (current_.type == kind::string) {
          append_unescaped(current_.text, &value);
          next();
        }
        repeated ? reflection->AddString(message, field, std::move(value))
                 : reflection->SetString(message, field, std::move(value));
        return true;
      }
      case pb::FieldDescriptor::CPPTYPE_BOOL: {
        bool value = false;
        if (current_.type == kind::integer) {
          uint64_t integer = 0;
          if (!consume_unsigned(1, &integer)) return false;
          value = integer != 0;
        } else {
          std::string_view word;
          if (current_.type != kind::identifier) return fail(str_cat("Expected identifier, got: ", current_.text));
          word = current_.text;
          if (word == "true" || word == "True" || word == "t") {
            value = true;
          } else if (word != "false" && word != "False" && word != "f") {
            return fail(str_cat("Invalid value for boolean field \"", field->name(), "\". Value: \"", word, "\"."));
          }
          next();
        }
        repeated ? reflection->AddBool(message, field, value) : reflection->SetBool(message, field, value);
        return true;
      }
      case pb::FieldDescriptor::CPPTYPE_ENUM: {
        int value = 0;
        if (current_.type == kind::identifier) {
          const pb::EnumValueDescriptor* named = field->enum_type()->FindValueByName(std::string(current_.text));
          if (named == nullptr) {
            return fail(str_cat("Unknown enumeration value of \"", current_.text, "\" for field \"", field->name(), "\"."));
          }
          value = named->number();
          next();
        } else if (looking_at("-") || current_.type == kind::integer) {
          int64_t number = 0;
          if (!consume_signed(std::numeric_limits<int32_t>::max(), &number)) return false;
          value = static_cast<int>(number);  // open (proto3) enums keep unknown numbers
        } else {
          return fail(str_cat("Expected integer or identifier, got: ", current_.text));
        }
        repeated ? reflection->AddEnumValue(message, field, value) : reflection->SetEnumValue(message, field, value);
        return true;
      }
      case pb::FieldDescriptor::CPPTYPE_MESSAGE:
        break;
    }
    return fail("internal: a message field read as a value");
  }

  // --- skipping unknown fields ---------------------------------------------------------

  bool skip_field() {
    std::string_view name;
    if (try_consume("[")) {
      if (!consume_type_name(true) || !consume("]")) return false;
    } else if (!consume_identifier(&name)) {
      return false;
    }
    if (try_consume(":") && !looking_at("{") && !looking_at("<")) {
      if (!skip_field_value()) return false;
    } else if (!skip_field_message()) {
      return false;
    }
    try_consume(";") || try_consume(",");
    return true;
  }

  bool skip_field_message() {
    if (!enter()) return false;
    std::string_view closing;
    if (!consume_delimiter(&closing)) return false;
    while (!looking_at(">") && !looking_at("}")) {
      if (!skip_field()) return false;
    }
    if (!consume(closing)) return false;
    ++depth_left_;
    return true;
  }

  bool skip_field_value() {
    if (current_.type == kind::string) {
      while (current_.type == kind::string) next();
    } else if (try_consume("[")) {
      // Unlike a known field's list, an unknown one may not be empty (as protobuf).
      if (!enter()) return false;
      for (;;) {
        if (!(looking_at("{") || looking_at("<") ? skip_field_message() : skip_field_value())) return false;
        if (try_consume("]")) break;
        if (!consume(",")) return false;
      }
      ++depth_left_;
    } else {
      const bool minus = try_consume("-");
      if (current_.type != kind::integer && current_.type != kind::floating && current_.type != kind::identifier) {
        return fail(str_cat("Cannot skip field value, unexpected token: ", current_.text));
      }
      if (minus && current_.type == kind::identifier && !is_infinity_or_nan(current_.text)) {
        return fail(str_cat("Invalid float number: ", current_.text));
      }
      next();
    }
    return true;
  }

  std::string_view in_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
  token current_;
  token previous_;
  int depth_left_ = k_depth_limit;
  std::vector<std::unique_ptr<pb::Message>> scratch_entries_ = std::vector<std::unique_ptr<pb::Message>>(k_depth_limit + 1);
  std::string error_;
  int error_line_ = 0;
  int error_column_ = 0;
};

}  // namespace

status parse_text_message(std::string_view text, pb::Message* out) {
  out->Clear();
  return text_reader(text).parse(out);
}

}  // namespace troupe::graph
