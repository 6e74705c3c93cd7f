#include "core/npy.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "core/file.h"
#include "core/memory.h"

namespace troupe {
namespace {

struct npy_type {
  dtype type;
  const char* descr;  // little-endian spelling; '|' for one-byte types
};

constexpr npy_type k_npy_types[] = {
    {dtype::float32, "<f4"}, {dtype::float64, "<f8"}, {dtype::int8, "|i1"},
    {dtype::int16, "<i2"},   {dtype::int32, "<i4"},   {dtype::int64, "<i8"},
    {dtype::uint8, "|u1"},   {dtype::uint16, "<u2"},  {dtype::bool_, "|b1"},
};

// The header as error messages show it: printable, and cut short when long.
std::string shown(std::string_view header) {
  constexpr std::size_t k_max_shown = 160;
  while (!header.empty() && (header.back() == ' ' || header.back() == '\n')) header.remove_suffix(1);
  std::string out;
  for (char c : header.substr(0, k_max_shown)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (header.size() > k_max_shown) out += "...";
  return out;
}

// The header's dictionary, as numpy writes it: a Python dict literal with exactly the
// keys 'descr' (a string), 'fortran_order' (True or False) and 'shape' (a tuple of
// sizes), for example {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
struct npy_header {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> dims;
};

// A strict reader of that literal: anything else is an error saying what was expected
// where, never a guess.
class header_reader {
 public:
  header_reader(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  result<npy_header> read() {
    npy_header header;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    skip_space();
    if (!take('{')) return fail("'{'");
    while (true) {
      skip_space();
      if (take('}')) break;
      auto key = read_string();
      if (!key.ok()) return key.error();
      skip_space();
      if (!take(':')) return fail("':' after the key");
      skip_space();
      if (*key == "descr" && !seen_descr) {
        seen_descr = true;
        auto value = read_string();
        if (!value.ok()) return value.error();
        header.descr = std::move(*value);
      } else if (*key == "fortran_order" && !seen_fortran) {
        seen_fortran = true;
        if (take_word("True")) {
          header.fortran_order = true;
        } else if (!take_word("False")) {
          return fail("True or False for 'fortran_order'");
        }
      } else if (*key == "shape" && !seen_shape) {
        seen_shape = true;
        auto dims = read_shape();
        if (!dims.ok()) return dims.error();
        header.dims = std::move(*dims);
      } else {
        return invalid_argument_error(what_, ": .npy header has ",
                                      (*key == "descr" || *key == "fortran_order" || *key == "shape")
                                          ? "a second '" : "an unknown key '",
                                      *key, "' (valid: 'descr', 'fortran_order', 'shape'): ",
                                      shown(text_));
      }
      skip_space();
      if (take(',')) continue;
      skip_space();
      if (take('}')) break;
      return fail("',' or '}'");
    }
    skip_space();
    if (pos_ != text_.size()) return fail("the end of the header after '}'");
    for (auto [seen, key] : {std::pair{seen_descr, "descr"}, std::pair{seen_fortran, "fortran_order"},
                             std::pair{seen_shape, "shape"}}) {
      if (!seen) {
        return invalid_argument_error(what_, ": .npy header has no '", key, "' entry: ", shown(text_));
      }
    }
    return header;
  }

 private:
  status fail(std::string_view expected) const {
    return invalid_argument_error(what_, ": malformed .npy header: expected ", expected,
                                  " at byte ", pos_, " of ", shown(text_));
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n')) ++pos_;
  }
  bool take(char c) {
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool take_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  // A string literal in single or double quotes, without escapes (numpy writes none).
  result<std::string> read_string() {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return fail("a quoted string");
    }
    char quote = text_[pos_++];
    std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return fail("a closing quote");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }
  // "()", "(3,)", "(2, 3)" or "(2, 3,)": sizes >= 0 that fit in int64.
  result<std::vector<std::int64_t>> read_shape() {
    std::vector<std::int64_t> dims;
    if (!take('(')) return fail("a tuple of sizes for 'shape'");
    while (true) {
      skip_space();
      if (take(')')) return dims;
      std::size_t start = pos_;
      std::int64_t value = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        int digit = text_[pos_] - '0';
        if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) {
          return invalid_argument_error(what_, ": .npy shape has a size above 2^63 at byte ", start,
                                        " of ", shown(text_));
        }
        value = value * 10 + digit;
        ++pos_;
      }
      if (pos_ == start) return fail("a size (a whole number >= 0) in 'shape'");
      dims.push_back(value);
      skip_space();
      if (take(')')) {
        // Python needs the comma of a one-element tuple; numpy always writes it.
        if (dims.size() == 1) {
          pos_ = start;
          return fail("'(N,)' for a one-dimensional 'shape'");
        }
        return dims;
      }
      if (!take(',')) return fail("',' or ')' in 'shape'");
    }
  }

  std::string_view text_;
  const std::string& what_;
  std::size_t pos_ = 0;
};

}  // namespace

result<tensor> parse_npy(const std::string& bytes, const std::string& what) {
  constexpr char k_magic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.compare(0, 6, k_magic, 6) != 0) {
    return invalid_argument_error(what, ": not a .npy file (missing \\x93NUMPY magic)");
  }
  int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0;
  std::size_t header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return invalid_argument_error(what, ": truncated .npy header");
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    }
    header_start = 12;
  } else {
    return invalid_argument_error(what, ": unsupported .npy version ", major, " (valid: 1, 2, 3)");
  }
  if (header_len > bytes.size() - header_start) {
    return invalid_argument_error(what, ": truncated .npy header: it declares ", header_len,
                                  " bytes but the file has ", bytes.size() - header_start,
                                  " after the preamble");
  }
  auto header = header_reader(std::string_view(bytes).substr(header_start, header_len), what).read();
  if (!header.ok()) return header.error();

  if (header->fortran_order) {
    return unimplemented_error(what, ": Fortran-order .npy arrays are not supported; save with "
                                     "numpy.ascontiguousarray");
  }
  const std::string& descr = header->descr;
  dtype type = dtype::invalid;
  for (const auto& t : k_npy_types) {
    // The byte order may also be spelled '=' (native) for '<', and '<' for '|'.
    std::string_view d = t.descr;
    if (descr.size() == d.size() && std::string_view(descr).substr(1) == d.substr(1) &&
        (descr[0] == d[0] || (d[0] == '<' && descr[0] == '=') || (d[0] == '|' && descr[0] == '<'))) {
      type = t.type;
    }
  }
  if (type == dtype::invalid) {
    return unimplemented_error(what, ": .npy dtype '", descr,
                               "' is not supported (valid: <f4 <f8 |i1 <i2 <i4 <i8 |u1 <u2 |b1)");
  }
  auto shape = tensor_shape::make(std::move(header->dims));
  if (!shape.ok()) return shape.error().with_context(what);

  // The header's size is checked against the bytes present before anything is allocated:
  // a header may claim any number of elements.
  const std::size_t data_start = header_start + header_len;
  const std::size_t present = bytes.size() - data_start;
  const std::size_t element_size = dtype_size(type);
  const auto count = static_cast<std::uint64_t>(shape->num_elements());
  if (count > present / element_size || count * element_size != present) {
    std::string needs = count <= std::numeric_limits<std::uint64_t>::max() / element_size
                            ? std::to_string(count * element_size)
                            : str_cat(count, " x ", element_size);
    return invalid_argument_error(what, ": .npy data is ", present, " bytes but shape ",
                                  shape->to_string(), " of ", dtype_name(type), " needs ", needs);
  }
  tensor t;
  try {
    t = tensor(type, *shape);
  } catch (const allocation_error& e) {  // over the memory limit (core/memory.h)
    return e.to_status().with_context(what);
  }
  if (present > 0) std::memcpy(t.raw_data(), bytes.data() + data_start, present);
  if (type == dtype::bool_) {
    // numpy reads any non-zero byte as True; a C++ bool must hold 0 or 1.
    auto* b = static_cast<unsigned char*>(t.raw_data());
    for (std::size_t i = 0; i < present; ++i) b[i] = b[i] != 0 ? 1 : 0;
  }
  return t;
}

result<tensor> read_npy(const std::string& path) {
  auto bytes = read_file(path);
  if (!bytes.ok()) return bytes.error();
  return parse_npy(*bytes, path);
}

std::string serialize_npy(const tensor& t) {
  const char* descr = "<f4";
  for (const auto& n : k_npy_types) {
    if (n.type == t.type()) descr = n.descr;
  }
  std::string shape = "(";
  for (int i = 0; i < t.rank(); ++i) {
    shape += std::to_string(t.dim(i));
    if (t.rank() == 1 || i + 1 < t.rank()) shape += ",";
    if (i + 1 < t.rank()) shape += " ";
  }
  shape += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that the data starts at a multiple of 64 bytes; end with a newline.
  std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(static_cast<const char*>(t.raw_data()), t.byte_size());
  return out;
}

status write_npy(const std::string& path, const tensor& t) {
  if (dtype_size(t.type()) == 0 || !is_numeric(t.type())) {
    return unimplemented_error("cannot write a ", dtype_name(t.type()), " tensor to ", path);
  }
  return write_file(path, serialize_npy(t));
}

}  // namespace troupe
