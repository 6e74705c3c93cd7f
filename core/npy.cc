#include "core/npy.h"

#include <cstring>
#include <sstream>

#include "core/file.h"

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

// Finds the value text after 'key': in a Python dict literal.
result<std::string> dict_value(const std::string& header, const std::string& key,
                               const std::string& what) {
  auto pos = header.find("'" + key + "'");
  if (pos == std::string::npos) {
    return invalid_argument_error(what, ": .npy header has no '", key, "' entry: ", header);
  }
  pos = header.find(':', pos);
  if (pos == std::string::npos) return invalid_argument_error(what, ": malformed .npy header");
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  std::size_t end = pos;
  if (pos < header.size() && header[pos] == '(') {
    end = header.find(')', pos);
    if (end == std::string::npos) return invalid_argument_error(what, ": malformed .npy shape");
    return header.substr(pos, end - pos + 1);
  }
  if (pos < header.size() && header[pos] == '\'') {
    end = header.find('\'', pos + 1);
    if (end == std::string::npos) return invalid_argument_error(what, ": malformed .npy header");
    return header.substr(pos + 1, end - pos - 1);
  }
  end = header.find_first_of(",}", pos);
  return header.substr(pos, end - pos);
}

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
    return invalid_argument_error(what, ": unsupported .npy version ", major);
  }
  if (header_start + header_len > bytes.size()) {
    return invalid_argument_error(what, ": truncated .npy header");
  }
  std::string header = bytes.substr(header_start, header_len);

  auto descr = dict_value(header, "descr", what);
  if (!descr.ok()) return descr.error();
  auto fortran = dict_value(header, "fortran_order", what);
  if (!fortran.ok()) return fortran.error();
  auto shape_text = dict_value(header, "shape", what);
  if (!shape_text.ok()) return shape_text.error();

  if (fortran->find("True") != std::string::npos) {
    return unimplemented_error(what, ": Fortran-order .npy arrays are not supported; save with "
                                     "numpy.ascontiguousarray");
  }
  dtype type = dtype::invalid;
  for (const auto& t : k_npy_types) {
    std::string d = t.descr;
    if (*descr == d || (d[0] == '<' && *descr == "=" + d.substr(1)) ||
        (d[0] == '|' && *descr == "<" + d.substr(1))) {
      type = t.type;
    }
  }
  if (type == dtype::invalid) {
    return unimplemented_error(what, ": .npy dtype '", *descr,
                               "' is not supported (valid: <f4 <f8 |i1 <i2 <i4 <i8 |u1 <u2 |b1)");
  }
  std::vector<std::int64_t> dims;
  std::string inner = shape_text->substr(1, shape_text->size() - 2);
  std::stringstream in(inner);
  std::string item;
  while (std::getline(in, item, ',')) {
    auto first = item.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    char* end = nullptr;
    long long v = std::strtoll(item.c_str() + first, &end, 10);
    if (end == item.c_str() + first || v < 0) {
      return invalid_argument_error(what, ": bad .npy shape ", *shape_text);
    }
    dims.push_back(v);
  }
  auto shape = tensor_shape::make(std::move(dims));
  if (!shape.ok()) return shape.error().with_context(what);
  std::size_t data_start = header_start + header_len;
  std::size_t expected = static_cast<std::size_t>(shape->num_elements()) * dtype_size(type);
  if (bytes.size() - data_start != expected) {
    return invalid_argument_error(what, ": .npy data is ", bytes.size() - data_start,
                                  " bytes but shape ", shape->to_string(), " of ", dtype_name(type),
                                  " needs ", expected);
  }
  tensor t(type, *shape);
  if (expected > 0) std::memcpy(t.raw_data(), bytes.data() + data_start, expected);
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
