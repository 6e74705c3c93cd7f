// The builder API: constructing graphs from C++.
//
//   auto root = graph::scope::new_root();
//   auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 784});
//   auto w = ops::constant(root, tensor::zeros(dtype::float32, {784, 10}));
//   auto logits = ops::matmul(root.sub("layer1"), x, w);   // node "layer1/MatMul"
//   auto g = root.to_graph();                              // result<graph::graph>
//
// A scope is a cheap handle on a shared graph under construction plus naming, device and
// control-dependency settings; with_* / sub return modified copies. Errors (unknown op,
// dtype mismatch, bad shape) do not throw: the first one is kept in the shared state,
// later ops that consume a failed output fail quietly, and to_graph()/status() report
// the first. Thread safety: a graph under construction belongs to one thread.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/status.h"
#include "graph/graph.h"

namespace troupe::graph {

// One tensor produced by a node of a graph under construction.
struct output {
  std::string node;  // empty when the op that should have produced it failed
  int index = 0;
  dtype type = dtype::invalid;
  partial_shape shape;

  bool valid() const { return !node.empty(); }
  // "node" for output 0, else "node:index": the form feeds and fetches use.
  std::string name() const;
};

// A node, for targets and control dependencies.
struct operation {
  std::string node;
  std::vector<output> outputs;
  bool valid() const { return !node.empty(); }
  output out(int i = 0) const;
};

// One input argument of an op: a single tensor or a list (for "N * T" arguments).
struct input {
  input(output t) : tensors{std::move(t)} {}  // NOLINT: implicit by design
  input(std::vector<output> list) : tensors(std::move(list)), is_list(true) {}  // NOLINT
  input(std::initializer_list<output> list) : tensors(list), is_list(true) {}
  std::vector<output> tensors;
  bool is_list = false;
};

class scope {
 public:
  static scope new_root(const op_registry& ops = op_registry::builtin());

  // The exact name (within the current name scope) of the next node built with it.
  scope with_name(std::string name) const;
  // A name scope: nodes are named "prefix/Op" (nested: "a/b/Op").
  scope sub(const std::string& prefix) const;
  // A device request for the nodes built with it ("/job:worker/task:0/device:CPU:0").
  scope with_device(std::string device) const;
  // Nodes built with it run where node `node` runs, as TensorFlow's colocate_with: they
  // take its device request (replacing this scope's) and carry `_class: loc:@node`, which
  // the placer honours. Optimizers build slots and updates this way.
  scope colocate_with(const std::string& node) const;
  // Nodes built with it run after these operations.
  scope with_control_dependencies(std::vector<operation> deps) const;
  // Nodes built with it carry attribute `name` (an internal one, "_"-prefixed, for the
  // runtime: TensorFlow ignores such attributes), unless add() is given its own.
  scope with_attr(std::string name, tf::AttrValue value) const;

  // Adds a node for `op`. Type attributes ("T", "N", list(type)) are inferred from the
  // inputs when not given in `attrs`. Returns the node and its outputs.
  operation add(const std::string& op, std::vector<input> inputs,
                std::map<std::string, tf::AttrValue> attrs = {}) const;

  // The full name the next node that add() builds for `op` with this scope would get
  // (the with_name name when set), made unique the same way; changes nothing. Lets a node
  // carry its own name in an attribute (VarHandleOp's shared_name).
  std::string next_name(const std::string& op) const;

  bool ok() const;
  status get_status() const;
  // Records an error (the first one wins).
  void record(status s) const;

  const graph& current_graph() const;
  result<graph> to_graph() const;  // a copy of the graph, or the first error
  result<tf::GraphDef> to_graph_def() const;

 private:
  struct state;
  explicit scope(std::shared_ptr<state> s) : state_(std::move(s)) {}
  std::string unique_name(const std::string& op) const;

  std::shared_ptr<state> state_;
  std::string prefix_;  // "a/b/" or empty
  std::string name_;    // exact name for the next node, or empty
  std::string device_;
  std::string colocate_;  // node name, or empty
  std::vector<operation> control_deps_;
  std::map<std::string, tf::AttrValue> attrs_;
};

}  // namespace troupe::graph
