#include "graph/attr.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/memory.h"

namespace troupe::graph {
namespace {

result<const tf::AttrValue*> find_attr(const tf::NodeDef& node, std::string_view name) {
  auto it = node.attr().find(std::string(name));
  if (it == node.attr().end()) {
    return not_found_error("node '", node.name(), "' (", node.op(), ") has no attribute '", name,
                           "'");
  }
  return &it->second;
}

status wrong_kind(const tf::NodeDef& node, std::string_view name, const tf::AttrValue& v,
                  std::string_view wanted) {
  return invalid_argument_error("attribute '", name, "' of node '", node.name(), "' (", node.op(),
                                ") is ", attr_value_kind(v), " but must be ", wanted);
}

// Fetches an attribute of a given oneof case, or fails naming node and attribute.
template <class Fn>
status read_attr(const tf::NodeDef& node, std::string_view name, tf::AttrValue::ValueCase want,
                 std::string_view wanted, Fn&& fn) {
  auto v = find_attr(node, name);
  if (!v.ok()) return v.error();
  const tf::AttrValue& value = **v;
  // An empty list is stored by TensorFlow as `list {}`, which matches any list kind.
  if (value.value_case() != want) return wrong_kind(node, name, value, wanted);
  return fn(value);
}

}  // namespace

bool has_attr(const tf::NodeDef& node, std::string_view name) {
  return node.attr().count(std::string(name)) > 0;
}

status get_attr(const tf::NodeDef& node, std::string_view name, std::int64_t* out) {
  return read_attr(node, name, tf::AttrValue::kI, "int", [&](const tf::AttrValue& v) {
    *out = v.i();
    return status();
  });
}

status get_attr(const tf::NodeDef& node, std::string_view name, std::int32_t* out) {
  std::int64_t v = 0;
  TROUPE_RETURN_IF_ERROR(get_attr(node, name, &v));
  if (v < INT32_MIN || v > INT32_MAX) {
    return invalid_argument_error("attribute '", name, "' of node '", node.name(), "' is ", v,
                                  ", outside the 32-bit range");
  }
  *out = static_cast<std::int32_t>(v);
  return status();
}

status get_attr(const tf::NodeDef& node, std::string_view name, float* out) {
  return read_attr(node, name, tf::AttrValue::kF, "float", [&](const tf::AttrValue& v) {
    *out = v.f();
    return status();
  });
}

status get_attr(const tf::NodeDef& node, std::string_view name, bool* out) {
  return read_attr(node, name, tf::AttrValue::kB, "bool", [&](const tf::AttrValue& v) {
    *out = v.b();
    return status();
  });
}

status get_attr(const tf::NodeDef& node, std::string_view name, std::string* out) {
  return read_attr(node, name, tf::AttrValue::kS, "string", [&](const tf::AttrValue& v) {
    *out = v.s();
    return status();
  });
}

status get_attr(const tf::NodeDef& node, std::string_view name, dtype* out) {
  return read_attr(node, name, tf::AttrValue::kType, "type", [&](const tf::AttrValue& v) {
    *out = static_cast<dtype>(v.type());
    return status();
  });
}

status get_attr(const tf::NodeDef& node, std::string_view name, partial_shape* out) {
  return read_attr(node, name, tf::AttrValue::kShape, "shape", [&](const tf::AttrValue& v) {
    *out = shape_from_proto(v.shape());
    return status();
  });
}

status get_attr(const tf::NodeDef& node, std::string_view name, tensor* out) {
  return read_attr(node, name, tf::AttrValue::kTensor, "tensor", [&](const tf::AttrValue& v) {
    auto t = tensor_from_proto(v.tensor(), str_cat("attribute '", name, "' of node '",
                                                   node.name(), "'"));
    if (!t.ok()) return t.error();
    *out = std::move(*t);
    return status();
  });
}

namespace {
template <class T, class Fn>
status read_list(const tf::NodeDef& node, std::string_view name, std::string_view wanted,
                 std::vector<T>* out, Fn&& extract) {
  return read_attr(node, name, tf::AttrValue::kList, wanted, [&](const tf::AttrValue& v) {
    out->clear();
    extract(v.list(), out);
    return status();
  });
}
}  // namespace

status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<std::int64_t>* out) {
  return read_list(node, name, "list(int)", out, [](const auto& l, auto* o) {
    o->assign(l.i().begin(), l.i().end());
  });
}

status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<std::int32_t>* out) {
  std::vector<std::int64_t> wide;
  TROUPE_RETURN_IF_ERROR(get_attr(node, name, &wide));
  out->assign(wide.begin(), wide.end());
  return status();
}

status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<float>* out) {
  return read_list(node, name, "list(float)", out, [](const auto& l, auto* o) {
    o->assign(l.f().begin(), l.f().end());
  });
}

status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<std::string>* out) {
  return read_list(node, name, "list(string)", out, [](const auto& l, auto* o) {
    o->assign(l.s().begin(), l.s().end());
  });
}

status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<dtype>* out) {
  return read_list(node, name, "list(type)", out, [](const auto& l, auto* o) {
    for (int t : l.type()) o->push_back(static_cast<dtype>(t));
  });
}

status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<partial_shape>* out) {
  return read_list(node, name, "list(shape)", out, [](const auto& l, auto* o) {
    for (const auto& proto : l.shape()) o->push_back(shape_from_proto(proto));
  });
}

tf::AttrValue attr_value(std::int64_t v) {
  tf::AttrValue a;
  a.set_i(v);
  return a;
}
tf::AttrValue attr_value(int v) { return attr_value(static_cast<std::int64_t>(v)); }
tf::AttrValue attr_value(float v) {
  tf::AttrValue a;
  a.set_f(v);
  return a;
}
tf::AttrValue attr_value(bool v) {
  tf::AttrValue a;
  a.set_b(v);
  return a;
}
tf::AttrValue attr_value(const char* v) { return attr_value(std::string(v)); }
tf::AttrValue attr_value(const std::string& v) {
  tf::AttrValue a;
  a.set_s(v);
  return a;
}
tf::AttrValue attr_value(dtype v) {
  tf::AttrValue a;
  a.set_type(static_cast<tf::DataType>(v));
  return a;
}
tf::AttrValue attr_value(const partial_shape& v) {
  tf::AttrValue a;
  shape_to_proto(v, a.mutable_shape());
  return a;
}
tf::AttrValue attr_value(const tensor& v) {
  tf::AttrValue a;
  tensor_to_proto(v, a.mutable_tensor());
  return a;
}
tf::AttrValue attr_value(const std::vector<std::int64_t>& v) {
  tf::AttrValue a;
  auto* list = a.mutable_list();
  for (auto x : v) list->add_i(x);
  return a;
}
tf::AttrValue attr_value(const std::vector<int>& v) {
  return attr_value(std::vector<std::int64_t>(v.begin(), v.end()));
}
tf::AttrValue attr_value(const std::vector<float>& v) {
  tf::AttrValue a;
  auto* list = a.mutable_list();
  for (auto x : v) list->add_f(x);
  return a;
}
tf::AttrValue attr_value(const std::vector<std::string>& v) {
  tf::AttrValue a;
  auto* list = a.mutable_list();
  for (const auto& x : v) list->add_s(x);
  return a;
}
tf::AttrValue attr_value(const std::vector<dtype>& v) {
  tf::AttrValue a;
  auto* list = a.mutable_list();
  for (auto x : v) list->add_type(static_cast<tf::DataType>(x));
  return a;
}
tf::AttrValue attr_value(const std::vector<partial_shape>& v) {
  tf::AttrValue a;
  auto* list = a.mutable_list();  // an empty vector is an empty list, not an unset value
  for (const auto& s : v) shape_to_proto(s, list->add_shape());
  return a;
}

partial_shape shape_from_proto(const tf::TensorShapeProto& proto) {
  if (proto.unknown_rank()) return partial_shape::unknown();
  std::vector<std::int64_t> dims;
  for (const auto& d : proto.dim()) dims.push_back(d.size() < 0 ? -1 : d.size());
  return partial_shape(std::move(dims));
}

void shape_to_proto(const partial_shape& shape, tf::TensorShapeProto* proto) {
  proto->Clear();
  if (!shape.known_rank()) {
    proto->set_unknown_rank(true);
    return;
  }
  for (auto d : shape.dims()) proto->add_dim()->set_size(d);
}

namespace {

// Copies the typed *_val field into t, repeating the last value to fill.
// REQUIRES: values.size() <= t.num_elements().
template <class T, class Field>
void fill_from_values(const Field& values, tensor& t) {
  const auto n = static_cast<std::size_t>(t.num_elements());
  const auto count = static_cast<std::size_t>(values.size());
  if (count == 0) {
    std::memset(t.raw_data(), 0, t.byte_size());
    return;
  }
  T* data = t.data<T>();
  for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<T>(values.Get(static_cast<int>(i)));
  std::fill(data + count, data + n, data[count - 1]);
}

// How many values the typed *_val field for `type` holds.
std::size_t value_count(const tf::TensorProto& proto, dtype type) {
  switch (type) {
    case dtype::float32: return static_cast<std::size_t>(proto.float_val_size());
    case dtype::float64: return static_cast<std::size_t>(proto.double_val_size());
    case dtype::int64: return static_cast<std::size_t>(proto.int64_val_size());
    case dtype::bool_: return static_cast<std::size_t>(proto.bool_val_size());
    default: return static_cast<std::size_t>(proto.int_val_size());
  }
}

}  // namespace

result<tensor> tensor_from_proto(const tf::TensorProto& proto, std::string_view what) {
  auto type = static_cast<dtype>(proto.dtype());
  if (!is_numeric(type)) {
    return unimplemented_error(what, ": TensorProto of dtype ", dtype_enum_name(type),
                               " is not supported");
  }
  partial_shape ps = shape_from_proto(proto.tensor_shape());
  if (!ps.fully_defined()) {
    return invalid_argument_error(what, ": TensorProto shape ", ps.to_string(),
                                  " is not fully defined");
  }
  auto shape = tensor_shape::make(ps.dims());
  if (!shape.ok()) return shape.error().with_context(what);
  // Everything that can be checked is checked before the tensor is allocated: a proto
  // of a few bytes may declare any shape.
  const auto elements = static_cast<std::uint64_t>(shape->num_elements());
  const std::size_t element_size = dtype_size(type);
  const std::size_t content = proto.tensor_content().size();
  if (content != 0 && (elements > content / element_size || elements * element_size != content)) {
    std::string needs = elements <= std::numeric_limits<std::uint64_t>::max() / element_size
                            ? std::to_string(elements * element_size)
                            : str_cat(elements, " x ", element_size);
    return invalid_argument_error(what, ": tensor_content has ", content, " bytes but ",
                                  dtype_name(type), " ", shape->to_string(), " needs ", needs);
  }
  const std::size_t count = content == 0 ? value_count(proto, type) : 0;
  if (count > elements) {
    return invalid_argument_error(what, ": TensorProto has ", count, " values but shape ",
                                  shape->to_string(), " holds ", elements);
  }
  // The values may be fewer than the elements (the last one repeats): the tensor can be
  // far larger than the proto, and allocating it may exceed the memory limit.
  tensor t;
  try {
    t = tensor(type, *shape);
  } catch (const allocation_error& e) {
    return e.to_status().with_context(what);
  }
  if (content != 0) {
    std::memcpy(t.raw_data(), proto.tensor_content().data(), content);
    if (type == dtype::bool_) {
      // A C++ bool must hold 0 or 1; TensorFlow reads any non-zero byte as true.
      auto* bytes = static_cast<unsigned char*>(t.raw_data());
      for (std::size_t i = 0; i < content; ++i) bytes[i] = bytes[i] != 0 ? 1 : 0;
    }
    return t;
  }
  switch (type) {
    case dtype::float32: fill_from_values<float>(proto.float_val(), t); break;
    case dtype::float64: fill_from_values<double>(proto.double_val(), t); break;
    case dtype::int64: fill_from_values<std::int64_t>(proto.int64_val(), t); break;
    case dtype::bool_: fill_from_values<bool>(proto.bool_val(), t); break;
    case dtype::int32: fill_from_values<std::int32_t>(proto.int_val(), t); break;
    case dtype::int16: fill_from_values<std::int16_t>(proto.int_val(), t); break;
    case dtype::int8: fill_from_values<std::int8_t>(proto.int_val(), t); break;
    case dtype::uint8: fill_from_values<std::uint8_t>(proto.int_val(), t); break;
    case dtype::uint16: fill_from_values<std::uint16_t>(proto.int_val(), t); break;
    default: return unimplemented_error(what, ": dtype ", dtype_name(type));
  }
  return t;
}

void tensor_to_proto(const tensor& t, tf::TensorProto* proto) {
  proto->Clear();
  proto->set_dtype(static_cast<tf::DataType>(t.type()));
  shape_to_proto(partial_shape(t.shape()), proto->mutable_tensor_shape());
  if (t.byte_size() > 0) {
    proto->set_tensor_content(std::string(static_cast<const char*>(t.raw_data()), t.byte_size()));
  }
}

std::string attr_value_kind(const tf::AttrValue& value) {
  switch (value.value_case()) {
    case tf::AttrValue::kS: return "string";
    case tf::AttrValue::kI: return "int";
    case tf::AttrValue::kF: return "float";
    case tf::AttrValue::kB: return "bool";
    case tf::AttrValue::kType: return "type";
    case tf::AttrValue::kShape: return "shape";
    case tf::AttrValue::kTensor: return "tensor";
    case tf::AttrValue::kList: {
      const auto& l = value.list();
      if (l.s_size()) return "list(string)";
      if (l.i_size()) return "list(int)";
      if (l.f_size()) return "list(float)";
      if (l.b_size()) return "list(bool)";
      if (l.type_size()) return "list(type)";
      if (l.shape_size()) return "list(shape)";
      if (l.tensor_size()) return "list(tensor)";
      return "list";
    }
    case tf::AttrValue::kFunc: return "func";
    case tf::AttrValue::kPlaceholder: return "placeholder";
    case tf::AttrValue::VALUE_NOT_SET: return "empty";
  }
  return "unknown";
}

std::string attr_value_to_string(const tf::AttrValue& value) {
  std::ostringstream out;
  switch (value.value_case()) {
    case tf::AttrValue::kS: out << "'" << value.s() << "'"; break;
    case tf::AttrValue::kI: out << value.i(); break;
    case tf::AttrValue::kF: out << value.f(); break;
    case tf::AttrValue::kB: out << (value.b() ? "true" : "false"); break;
    case tf::AttrValue::kType: out << dtype_enum_name(static_cast<dtype>(value.type())); break;
    case tf::AttrValue::kShape: out << shape_from_proto(value.shape()).to_string(); break;
    case tf::AttrValue::kTensor: out << "<tensor>"; break;
    case tf::AttrValue::kList: {
      const auto& l = value.list();
      out << "[";
      const char* sep = "";
      for (const auto& x : l.s()) { out << sep << "'" << x << "'"; sep = ", "; }
      for (auto x : l.i()) { out << sep << x; sep = ", "; }
      for (auto x : l.f()) { out << sep << x; sep = ", "; }
      for (auto x : l.b()) { out << sep << (x ? "true" : "false"); sep = ", "; }
      for (auto x : l.type()) { out << sep << dtype_enum_name(static_cast<dtype>(x)); sep = ", "; }
      for (const auto& x : l.shape()) { out << sep << shape_from_proto(x).to_string(); sep = ", "; }
      out << "]";
      break;
    }
    default: out << "<" << attr_value_kind(value) << ">";
  }
  return out.str();
}

}  // namespace troupe::graph
