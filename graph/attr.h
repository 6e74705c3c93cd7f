// Typed access to a node's attributes (the AttrValue map of a NodeDef), and the
// conversion between tensors and TensorProto.
//
// get_attr returns not_found when the attribute is absent and invalid_argument when it
// holds another kind of value; both messages name the node and the attribute.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/status.h"
#include "core/tensor.h"
#include "graph/proto/attr_value.pb.h"
#include "graph/proto/node_def.pb.h"

namespace troupe::graph {

using attr_map = google::protobuf::Map<std::string, tf::AttrValue>;

// On a variable update (and the ops built with it): the names of the step's readers of
// the variable's value among its control inputs. Those edges only let the update write
// in place (the readers hold the value's buffer until they ran); a reader in another
// process works on its own copy, so the partitioner drops such an edge there rather
// than send it each step (placement/partition.h).
inline constexpr const char* k_in_place_after_attr = "_in_place_after";

status get_attr(const tf::NodeDef& node, std::string_view name, std::int64_t* out);
status get_attr(const tf::NodeDef& node, std::string_view name, std::int32_t* out);
status get_attr(const tf::NodeDef& node, std::string_view name, float* out);
status get_attr(const tf::NodeDef& node, std::string_view name, bool* out);
status get_attr(const tf::NodeDef& node, std::string_view name, std::string* out);
status get_attr(const tf::NodeDef& node, std::string_view name, dtype* out);
status get_attr(const tf::NodeDef& node, std::string_view name, partial_shape* out);
status get_attr(const tf::NodeDef& node, std::string_view name, tensor* out);
status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<std::int64_t>* out);
status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<std::int32_t>* out);
status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<float>* out);
status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<std::string>* out);
status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<dtype>* out);
status get_attr(const tf::NodeDef& node, std::string_view name, std::vector<partial_shape>* out);
bool has_attr(const tf::NodeDef& node, std::string_view name);

// AttrValue constructors, used by the builder API and tests.
tf::AttrValue attr_value(std::int64_t v);
tf::AttrValue attr_value(int v);
tf::AttrValue attr_value(float v);
tf::AttrValue attr_value(bool v);
tf::AttrValue attr_value(const char* v);
tf::AttrValue attr_value(const std::string& v);
tf::AttrValue attr_value(dtype v);
tf::AttrValue attr_value(const partial_shape& v);
tf::AttrValue attr_value(const tensor& v);
tf::AttrValue attr_value(const std::vector<std::int64_t>& v);
tf::AttrValue attr_value(const std::vector<int>& v);
tf::AttrValue attr_value(const std::vector<float>& v);
tf::AttrValue attr_value(const std::vector<std::string>& v);
tf::AttrValue attr_value(const std::vector<dtype>& v);
tf::AttrValue attr_value(const std::vector<partial_shape>& v);  // list(shape), e.g. a queue's `shapes`

// Shapes and tensors to and from their protos.
partial_shape shape_from_proto(const tf::TensorShapeProto& proto);
void shape_to_proto(const partial_shape& shape, tf::TensorShapeProto* proto);
// Accepts both tensor_content and the typed *_val fields (a short *_val list repeats its
// last value, as TensorFlow does). `what` names the source in errors. Everything is
// checked before the tensor is allocated; a tensor that does not fit in the memory limit
// (core/memory.h) is RESOURCE_EXHAUSTED, not an exception. Non-zero bool bytes read as 1.
result<tensor> tensor_from_proto(const tf::TensorProto& proto, std::string_view what = "tensor");
// Writes tensor_content (raw little-endian bytes), as TensorFlow does for non-scalars.
void tensor_to_proto(const tensor& t, tf::TensorProto* proto);

// "float", "list(int)", ... : the kind of value an AttrValue holds, for error messages.
std::string attr_value_kind(const tf::AttrValue& value);
// A short human-readable rendering ("[1, 2]", "DT_FLOAT", "'SAME'").
std::string attr_value_to_string(const tf::AttrValue& value);

}  // namespace troupe::graph
