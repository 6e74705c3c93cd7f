// graph: the in-memory form of a GraphDef, validated.
//
// A graph owns its nodes (each with its NodeDef, attribute defaults filled in, resolved
// op schema, input/output dtypes and inferred output shapes) and the edges between them.
// Building one checks, and reports with the node's name: duplicate names, unknown ops,
// missing or ill-typed attributes, dangling or out-of-range inputs, control inputs
// before data inputs, wrong input counts, dtype mismatches on edges, cycles, and shape
// function errors.
//
//   auto g = graph::graph::from_graph_def(def);   // result<graph>
//   if (!g.ok()) { std::cerr << g.error() << "\n"; return 1; }
//   for (int id : g->topological_order()) ...
//
// Node ids are dense (0..num_nodes-1) in the GraphDef's order. A graph is immutable once
// built, except through add_node (used by the builder API), and safe to read from many
// threads.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/shape.h"
#include "core/small_vector.h"
#include "core/status.h"
#include "graph/op_registry.h"
#include "graph/proto/graph.pb.h"

namespace troupe::graph {

// Output `index` of node `node`.
struct endpoint {
  int node = -1;
  int index = 0;
  friend bool operator==(const endpoint&, const endpoint&) = default;
  friend auto operator<=>(const endpoint&, const endpoint&) = default;
};

struct node {
  explicit node(std::unique_ptr<tf::NodeDef> d) : def_storage(std::move(d)), def(*def_storage) {}
  node(const node&) = delete;
  node& operator=(const node&) = delete;

  int id = -1;
  // The NodeDef itself, taken from the GraphDef it came in (not copied).
  std::unique_ptr<tf::NodeDef> def_storage;
  tf::NodeDef& def;
  const op_def* op = nullptr;
  // Short lists kept inside the node (most nodes have a few inputs and outputs).
  small_vector<endpoint, 2> inputs;  // data inputs, in order
  small_vector<int, 2> control_inputs;
  small_vector<dtype, 8> input_types;
  small_vector<dtype, 8> output_types;
  std::vector<partial_shape> output_shapes;

  const std::string& name() const { return def.name(); }
  const std::string& op_name() const { return def.op(); }
  int num_outputs() const { return static_cast<int>(output_types.size()); }
};

// Parses "name", "name:3" or "^name" (control) into its parts. Pure syntax.
struct tensor_name {
  std::string node;
  int index = 0;
  bool control = false;
};
result<tensor_name> parse_tensor_name(std::string_view text);

class graph {
 public:
  explicit graph(const op_registry& ops = op_registry::builtin()) : ops_(&ops) {}

  // Takes the GraphDef by value: pass an rvalue (std::move) and its NodeDefs move into
  // the graph instead of being copied. TensorFlow 1.x reference variables (VariableV2,
  // Assign, Apply*, ...) are rewritten to resource variables first (graph/ref_variables.h).
  static result<graph> from_graph_def(tf::GraphDef def, const op_registry& ops = op_registry::builtin());

  // Adds one node whose inputs are all already in the graph; returns its id.
  result<int> add_node(tf::NodeDef def);

  // Nodes in id order, with their (defaults-filled) attributes.
  tf::GraphDef to_graph_def() const;

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const node& get(int id) const { return *nodes_[static_cast<std::size_t>(id)]; }
  const node* find(std::string_view name) const;
  // Resolves "name" or "name:i" to an endpoint, checking the node and output exist.
  result<endpoint> resolve(std::string_view tensor) const;

  // Every node after all of its inputs (data and control).
  const std::vector<int>& topological_order() const { return topo_order_; }
  // For each node, the (consumer node, input slot) pairs of its data outputs, and its
  // control consumers (`for (auto [consumer, slot] : g.consumers(id))`).
  struct consumer {
    int node;   // the consuming node
    int input;  // which of its data inputs
  };
  using consumer_list = small_vector<consumer, 1>;
  using control_consumer_list = small_vector<int, 2>;
  const consumer_list& consumers(int id) const { return consumers_[static_cast<std::size_t>(id)]; }
  const control_consumer_list& control_consumers(int id) const { return control_consumers_[static_cast<std::size_t>(id)]; }

  const tf::VersionDef& versions() const { return versions_; }
  const op_registry& registry() const { return *ops_; }
  // The value of a Const node's output, for shape functions and constant folding.
  const tensor* constant_value(endpoint e) const;

 private:
  // Fills in n.def's defaults and validates it; resolves its op and dtypes.
  status prepare(node& n) const;
  status resolve_inputs(node& n) const;
  status check_and_infer(node& n);
  void link(const node& n);

  const op_registry* ops_;
  std::vector<std::unique_ptr<node>> nodes_;
  std::unordered_map<std::string_view, int> by_name_;  // keys view the nodes' names
  std::vector<int> topo_order_;
  std::vector<consumer_list> consumers_;
  std::vector<control_consumer_list> control_consumers_;
  std::map<int, tensor> constants_;
  tf::VersionDef versions_;
};

}  // namespace troupe::graph
