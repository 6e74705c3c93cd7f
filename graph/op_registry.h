// The op registry: for each op name, its schema (typed inputs and outputs, attributes
// with constraints and defaults, a stateful flag) and its shape function. Kernels live
// elsewhere (kernels/) and are looked up separately by op, device and dtype.
//
// Schemas are written the way TensorFlow's REGISTER_OP writes them, as plain calls:
//
//   registry.add(op_schema("MatMul")
//                    .input("a: T").input("b: T").output("product: T")
//                    .attr("transpose_a: bool = false").attr("transpose_b: bool = false")
//                    .attr("T: {float, double, int32, int64}")
//                    .shape_fn(matmul_shape));
//
// Spec syntax. Inputs/outputs: "name: float" (fixed type), "name: T" (type attr),
// "name: N * T" (N tensors of type T), "name: Tlist" (a list(type) attr). Attrs:
// "name: type", "name: {float, int32}" (type with allowed values), "name: int",
// "name: int >= 1", "name: float", "name: bool", "name: string", "name: shape",
// "name: tensor", "name: list(int)", "name: list(type)", "name: list(float)",
// "name: list(string)", "name: list(shape)", optionally followed by "= default" where the
// default is a literal: true, 3, -1.5, 'SAME', DT_FLOAT or float, [1, 2], or ? (unknown shape).
// A string attr may list allowed values: "padding: {'SAME', 'VALID'}".
//
// Thread safety: add() must finish before concurrent find() calls begin.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/status.h"
#include "core/tensor.h"
#include "graph/attr.h"
#include "graph/proto/attr_value.pb.h"
#include "graph/proto/node_def.pb.h"

namespace troupe::graph {

struct arg_def {
  std::string name;
  dtype type = dtype::invalid;  // a fixed type, or invalid when type_attr says
  std::string type_attr;        // the attribute holding the type ("T")
  std::string number_attr;      // the int attribute saying how many ("N"), or empty
  std::string type_list_attr;   // a list(type) attribute, one tensor per entry
};

struct attr_def {
  std::string name;
  std::string type;  // "type", "int", "float", "bool", "string", "shape", "tensor",
                     // "list(int)", "list(type)", ...
  std::optional<tf::AttrValue> default_value;
  std::vector<dtype> allowed_types;         // empty: any
  std::vector<std::string> allowed_strings;  // empty: any
  std::optional<std::int64_t> minimum;       // for "int" and list lengths
};

class shape_context;
using shape_function = std::function<status(shape_context&)>;

// Gradients (graph/gradients.h defines the context): given the forward node and the
// gradients flowing into its outputs, a gradient function builds nodes computing the
// gradient of each input, writing one output per input (an invalid output: none).
struct output;
struct gradient_context;
using gradient_function = std::function<status(const gradient_context&, std::vector<output>*)>;

struct op_def {
  std::string name;
  std::vector<arg_def> inputs;
  std::vector<arg_def> outputs;
  std::vector<attr_def> attrs;
  bool is_stateful = false;
  shape_function shape;  // empty: outputs of unknown shape
  gradient_function gradient;       // empty: differentiating through it is an error...
  bool not_differentiable = false;  // ...unless it is declared to have no gradient

  const attr_def* find_attr(std::string_view attr) const;
};

// Fluent builder for an op_def; a malformed spec is a programmer error, reported by
// op_registry::add with the op's name.
class op_schema {
 public:
  explicit op_schema(std::string name);
  op_schema& input(std::string_view spec);
  op_schema& output(std::string_view spec);
  op_schema& attr(std::string_view spec);
  op_schema& stateful();
  op_schema& shape_fn(shape_function fn);
  op_schema& gradient(gradient_function fn);
  // No gradient flows through this op (Shape, ArgMax, comparisons, ...).
  op_schema& no_gradient();

 private:
  friend class op_registry;
  op_def def_;
  status status_;
};

class op_registry {
 public:
  op_registry() = default;
  op_registry(const op_registry&) = delete;
  op_registry& operator=(const op_registry&) = delete;

  // Registers an op. Fails on a malformed spec or a duplicate name.
  status add(op_schema schema);
  const op_def* find(std::string_view name) const;
  // not_found naming the op and, when one is close, a suggestion.
  result<const op_def*> lookup(std::string_view name) const;
  std::vector<std::string> op_names() const;

  // The registry holding every built-in op (built once, on first use) plus whatever was
  // added to it since. Custom ops are added here before graphs that use them are built.
  static op_registry& builtin();

 private:
  std::map<std::string, std::unique_ptr<op_def>, std::less<>> ops_;
};

// Registers a built-in op. A built-in schema that does not parse is a programmer error:
// it stops the program at start-up with the schema's error.
void add_builtin_op(op_registry& registry, op_schema schema);

// Fills in missing attributes that have defaults and checks every attribute against the
// schema (presence, kind, allowed values, minimums). Errors name the node.
status add_defaults_and_validate_attrs(const op_def& op, tf::NodeDef* node);

// The dtypes of a node's inputs and outputs, expanding number and type-list attributes.
// REQUIRES: the attributes were validated.
status input_output_types(const op_def& op, const tf::NodeDef& node, std::vector<dtype>* inputs,
                          std::vector<dtype>* outputs);

// What a shape function sees of one node.
class shape_context {
 public:
  shape_context(const tf::NodeDef& node, const op_def& op, std::vector<partial_shape> inputs,
                std::vector<const tensor*> input_values, std::vector<dtype> input_types,
                int num_outputs);

  const tf::NodeDef& node() const { return node_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  const partial_shape& input(int i) const { return inputs_[static_cast<std::size_t>(i)]; }
  dtype input_type(int i) const { return input_types_[static_cast<std::size_t>(i)]; }
  // The value of input i when it is known at graph time (a Const), else nullptr.
  const tensor* input_value(int i) const { return input_values_[static_cast<std::size_t>(i)]; }
  // The node producing input i, or nullptr when the caller did not say. Lets an op that
  // consumes a resource handle read its producer's attributes (ReadVariableOp takes its
  // shape from VarHandleOp's `shape`), as TensorFlow's handle shape data does.
  const tf::NodeDef* input_node(int i) const {
    auto k = static_cast<std::size_t>(i);
    return k < input_nodes_.size() ? input_nodes_[k] : nullptr;
  }
  void set_input_nodes(std::vector<const tf::NodeDef*> nodes) { input_nodes_ = std::move(nodes); }

  template <class T>
  status get_attr(std::string_view name, T* out) const;

  void set_output(int i, partial_shape shape) { outputs_[static_cast<std::size_t>(i)] = std::move(shape); }
  const std::vector<partial_shape>& outputs() const { return outputs_; }

  // invalid_argument prefixed with the node's name and op.
  template <class... Args>
  status error(const Args&... args) const {
    return invalid_argument_error("node '", node_.name(), "' (", node_.op(), "): ", args...);
  }
  // Checks input i has the rank (when known); error names the node and input.
  status require_rank(int i, int rank) const;
  status require_rank_at_least(int i, int rank) const;

 private:
  const tf::NodeDef& node_;
  const op_def& op_;
  std::vector<partial_shape> inputs_;
  std::vector<const tensor*> input_values_;
  std::vector<const tf::NodeDef*> input_nodes_;
  std::vector<dtype> input_types_;
  std::vector<partial_shape> outputs_;
};

template <class T>
status shape_context::get_attr(std::string_view name, T* out) const {
  return graph::get_attr(node_, name, out);
}

// Common shape functions.
status unchanged_shape(shape_context& ctx);          // output 0 = input 0
status broadcast_binary_shape(shape_context& ctx);   // numpy broadcasting of inputs 0, 1
status same_shape_binary(shape_context& ctx);        // inputs 0 and 1 (and output 0) alike
status scalar_shape(shape_context& ctx);             // every output is a scalar
status no_outputs_shape(shape_context& ctx);
// Numpy broadcasting of two partial shapes; error text names both.
result<partial_shape> broadcast_shapes(const partial_shape& a, const partial_shape& b);

}  // namespace troupe::graph
