#include "core/dtype.h"

namespace troupe {
namespace {

struct dtype_names {
  dtype type;
  std::string_view name;
  std::string_view enum_name;
  std::size_t size;
};

constexpr dtype_names k_names[] = {
    {dtype::float32, "float", "DT_FLOAT", 4},     {dtype::float64, "double", "DT_DOUBLE", 8},
    {dtype::int32, "int32", "DT_INT32", 4},       {dtype::uint8, "uint8", "DT_UINT8", 1},
    {dtype::int16, "int16", "DT_INT16", 2},       {dtype::int8, "int8", "DT_INT8", 1},
    {dtype::string, "string", "DT_STRING", 0},    {dtype::complex64, "complex64", "DT_COMPLEX64", 8},
    {dtype::int64, "int64", "DT_INT64", 8},       {dtype::bool_, "bool", "DT_BOOL", 1},
    {dtype::bfloat16, "bfloat16", "DT_BFLOAT16", 2}, {dtype::uint16, "uint16", "DT_UINT16", 2},
    {dtype::complex128, "complex128", "DT_COMPLEX128", 16},
    {dtype::float16, "half", "DT_HALF", 2},       {dtype::resource, "resource", "DT_RESOURCE", 0},
    {dtype::variant, "variant", "DT_VARIANT", 0}, {dtype::uint32, "uint32", "DT_UINT32", 4},
    {dtype::uint64, "uint64", "DT_UINT64", 8},
};

const dtype_names* find(dtype t) {
  for (const auto& n : k_names) {
    if (n.type == t) return &n;
  }
  return nullptr;
}

}  // namespace

std::string_view dtype_name(dtype t) {
  const auto* n = find(t);
  return n ? n->name : "invalid";
}

std::string_view dtype_enum_name(dtype t) {
  const auto* n = find(t);
  return n ? n->enum_name : "DT_INVALID";
}

result<dtype> parse_dtype(std::string_view name) {
  if (name == "float32") return dtype::float32;
  if (name == "float64") return dtype::float64;
  if (name == "float16") return dtype::float16;
  for (const auto& n : k_names) {
    if (n.name == name || n.enum_name == name) return n.type;
  }
  return invalid_argument_error("unknown dtype '", name,
                                "' (valid: float, double, int8, int16, int32, int64, uint8, "
                                "uint16, bool, or DT_* names)");
}

std::size_t dtype_size(dtype t) {
  const auto* n = find(t);
  return n ? n->size : 0;
}

bool is_numeric(dtype t) {
  return visit_dtype(t, []<class T>() {});
}

bool is_floating(dtype t) { return t == dtype::float32 || t == dtype::float64; }

bool is_integer(dtype t) {
  return is_numeric(t) && !is_floating(t) && t != dtype::bool_;
}

}  // namespace troupe
