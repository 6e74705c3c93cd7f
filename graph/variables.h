// Variables from the builder API: a resource variable is three nodes, and layers and
// optimizers record the variables they create in a variable_collection.
//
//   auto root = graph::scope::new_root();
//   graph::variable_collection vars;
//   graph::variable w = graph::make_variable(root, "w", {784, 10}, dtype::float32,
//                                            init::glorot_uniform_initializer(), /*seed=*/1);
//   vars.add(w);                                   // trainable
//   output logits = ops::matmul(root, x, w.value);
//   ... train::minimize(root, train::adam(1e-3), loss, vars) ...   // adds slots to vars
//   graph::operation init = graph::global_variables_initializer(root, vars);
//   // run `init` once, then the train op every step.
//
// A variable named "w" (within the scope's name scope) is built as
//   w                       VarHandleOp   dtype, shape, shared_name = "w" (its full name)
//   w/Initializer/...       the initial value (when built from an initializer)
//   w/Assign                AssignVariableOp(w, initial value): the variable's initializer
//   w/Read/ReadVariableOp   ReadVariableOp(w): `value`, what the model computes with and
//                           what gradients are taken with respect to
// When the name is taken the scope makes it unique ("w_1"), and shared_name follows, so
// two make_variable calls never share state. Errors (a dtype or shape that does not match
// the initial value, a shape that is not fully defined) are recorded in the scope; the
// returned variable then has invalid outputs.
//
// Thread safety: as the builder (a graph under construction belongs to one thread).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/builder.h"
#include "graph/initializers.h"

namespace troupe::graph {

struct variable {
  output handle;         // the VarHandleOp's resource output
  output value;          // one ReadVariableOp of it
  operation initializer; // AssignVariableOp of the initial value
  dtype type = dtype::invalid;
  tensor_shape shape;
  std::string name;      // the VarHandleOp's full node name, also its shared_name

  bool valid() const { return handle.valid() && value.valid() && initializer.valid(); }
};

// What a model's builders created, as TensorFlow's graph collections keep it.
struct variable_collection {
  std::vector<variable> global;        // every variable (GLOBAL_VARIABLES): what
                                       // global_variables_initializer initializes
  std::vector<variable> trainable;     // the subset optimizers update (TRAINABLE_VARIABLES)
  std::vector<operation> update_ops;   // to run with every training step (UPDATE_OPS:
                                       // batch-norm moving averages); minimize groups them
                                       // into its train op

  // Adds v to `global`, and to `trainable` when asked.
  void add(const variable& v, bool is_trainable = true);
};

// A variable initialized from `initial_value` (built by the caller, of `type` and a shape
// compatible with `shape`).
variable make_variable(const scope& s, const std::string& name, const tensor_shape& shape,
                       dtype type, const output& initial_value);

// A variable whose initial value `init` builds under "<name>/Initializer", with a seed
// derived from `seed` and the variable's full name: deterministic for a given graph, and
// different for every variable that shares one initializer.
// `handle_attrs` go on the VarHandleOp (make_embedding marks its parts this way).
variable make_variable(const scope& s, const std::string& name, const tensor_shape& shape,
                       dtype type, const init::initializer& init, std::int64_t seed = 0,
                       const std::map<std::string, tf::AttrValue>& handle_attrs = {});

// The seed make_variable gives the initializer of variable `full_name`.
std::int64_t variable_seed(std::int64_t seed, const std::string& full_name);

// A NoOp (named "init" in the scope) that runs every variable's initializer.
operation global_variables_initializer(const scope& s, const std::vector<variable>& vars);
operation global_variables_initializer(const scope& s, const variable_collection& vars);

}  // namespace troupe::graph
