// dtype: the element type of a tensor, numbered exactly as TensorFlow's DataType enum so
// that a GraphDef's `type` attributes map one to one.
//
// Numeric dtypes troupe computes with: float32, float64, int8, int16, int32, int64,
// uint8, uint16, bool. `resource` tags handles to stateful objects (variables, queues).
// Dispatch from a runtime dtype to a C++ type goes through visit_dtype:
//
//   visit_dtype(t.dtype(), [&]<class T>() { fill<T>(t); });
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/status.h"

namespace troupe {

enum class dtype : int {
  invalid = 0,
  float32 = 1,
  float64 = 2,
  int32 = 3,
  uint8 = 4,
  int16 = 5,
  int8 = 6,
  string = 7,
  complex64 = 8,
  int64 = 9,
  bool_ = 10,
  bfloat16 = 14,
  uint16 = 17,
  complex128 = 18,
  float16 = 19,
  resource = 20,
  variant = 21,
  uint32 = 22,
  uint64 = 23,
};

// TensorFlow's spelling, as in error messages and text GraphDefs: "float", "int32", ...
std::string_view dtype_name(dtype t);
// The DataType enum's spelling: "DT_FLOAT".
std::string_view dtype_enum_name(dtype t);
// Parses either spelling ("float32" is accepted for float as well).
result<dtype> parse_dtype(std::string_view name);

// Bytes per element, 0 for types without a fixed size (string, resource, variant).
std::size_t dtype_size(dtype t);
bool is_numeric(dtype t);    // types troupe has kernels for (including bool)
bool is_floating(dtype t);
bool is_integer(dtype t);    // signed or unsigned integer, not bool

template <class T>
struct dtype_of_t;
template <> struct dtype_of_t<float> { static constexpr dtype value = dtype::float32; };
template <> struct dtype_of_t<double> { static constexpr dtype value = dtype::float64; };
template <> struct dtype_of_t<std::int8_t> { static constexpr dtype value = dtype::int8; };
template <> struct dtype_of_t<std::int16_t> { static constexpr dtype value = dtype::int16; };
template <> struct dtype_of_t<std::int32_t> { static constexpr dtype value = dtype::int32; };
template <> struct dtype_of_t<std::int64_t> { static constexpr dtype value = dtype::int64; };
template <> struct dtype_of_t<std::uint8_t> { static constexpr dtype value = dtype::uint8; };
template <> struct dtype_of_t<std::uint16_t> { static constexpr dtype value = dtype::uint16; };
template <> struct dtype_of_t<bool> { static constexpr dtype value = dtype::bool_; };

template <class T>
inline constexpr dtype dtype_of = dtype_of_t<T>::value;

template <class... Ts>
struct type_list {};

using all_numeric_types = type_list<float, double, std::int8_t, std::int16_t, std::int32_t,
                                    std::int64_t, std::uint8_t, std::uint16_t, bool>;
using real_number_types = type_list<float, double, std::int8_t, std::int16_t, std::int32_t,
                                    std::int64_t, std::uint8_t, std::uint16_t>;
using float_types = type_list<float, double>;
using index_types = type_list<std::int32_t, std::int64_t>;

// Calls f.template operator()<T>() for the T of `t` among the types of List. Returns false
// (calling nothing) when `t` is not in the list.
template <class List = all_numeric_types, class F>
bool visit_dtype(dtype t, F&& f) {
  return [&]<class... Ts>(type_list<Ts...>) {
    return ((t == dtype_of<Ts> ? (f.template operator()<Ts>(), true) : false) || ...);
  }(List{});
}

// Calls f.template operator()<T>() for every T of List (used to register typed kernels).
template <class List, class F>
void for_each_type(F&& f) {
  [&]<class... Ts>(type_list<Ts...>) { (f.template operator()<Ts>(), ...); }(List{});
}

}  // namespace troupe
