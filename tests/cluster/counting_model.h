// The cluster tests' model: float variables a [n] and b [n] and the global step, spread
// over `ps` PS tasks (a on ps:0, b on ps:1 % ps, the step on ps:2 % ps; all on the worker
// when ps = 0); "train" adds 1 to every element of a and b, then 1 to the step. After k
// steps applied whole, a == b == step == k: a state that mixes steps shows at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/ops.h"
#include "graph/train.h"
#include "graph/variables.h"

namespace troupe::testing {

struct counting_model {
  graph::scope root = graph::scope::new_root();
  graph::variable_collection vars;
};

inline std::unique_ptr<counting_model> build_counting_model(int ps, std::int64_t n = 300) {
  auto m = std::make_unique<counting_model>();
  const graph::scope& root = m->root;
  auto device = [&](int i) { return ps == 0 ? std::string("/job:worker/task:0") : str_cat("/job:ps/task:", i % ps); };
  auto a = graph::make_variable(root.with_device(device(0)), "a", {n}, dtype::float32, init::zeros_initializer());
  auto b = graph::make_variable(root.with_device(device(1)), "b", {n}, dtype::float32, init::zeros_initializer());
  m->vars.add(a);
  m->vars.add(b);
  auto step = train::make_global_step(root.with_device(device(2)), m->vars);
  tensor ones(dtype::float32, {n});
  for (auto& x : ones.flat<float>()) x = 1.0f;
  std::vector<graph::operation> updates;
  for (const auto* v : {&a, &b}) {
    updates.push_back(root.colocate_with(v->handle.node).add("AssignAddVariableOp",
                                                            {v->handle, ops::constant(root, ones)}));
  }
  auto increment = root.colocate_with(step.handle.node)
                       .with_control_dependencies(updates)
                       .add("AssignAddVariableOp", {step.handle, ops::scalar<std::int64_t>(root, 1)});
  ops::no_op(root.with_name("train").with_control_dependencies({increment}));
  graph::global_variables_initializer(root, m->vars);
  return m;
}

}  // namespace troupe::testing
