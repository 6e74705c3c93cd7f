// Runs one kernel on given inputs, outside any graph: for tests, constant folding and
// tools. The node needs its op and attributes; its inputs are taken from `inputs`
// (whose dtypes must match the op's input types). A tensor whose only holder is `inputs`
// may be reused in place by the kernel: keep a reference if you need it unchanged.
//
//   tf::NodeDef node;  node.set_name("add");  node.set_op("AddV2");
//   (*node.mutable_attr())["T"] = graph::attr_value(dtype::float32);
//   auto outputs = kernels::run_kernel(node, {a, b});
#pragma once

#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/op_registry.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

// The pool used when none is given (default_num_threads() threads, built on first use).
compute_pool& default_compute_pool();

// A node ready to instantiate: defaults added, attributes validated, its dtypes checked
// against `inputs`. Errors name the node.
struct checked_node {
  tf::NodeDef node;
  const graph::op_def* op = nullptr;
  std::vector<dtype> input_types, output_types;
};
result<checked_node> check_node(tf::NodeDef node, const std::vector<tensor>& inputs,
                                const graph::op_registry& ops = graph::op_registry::builtin());

// Runs `kernel` (made for `node`) once on `inputs` and waits for it (an asynchronous one
// too). Errors: the kernel's, naming the node; an output it did not set.
result<std::vector<tensor>> compute_once(op_kernel& kernel, const checked_node& node,
                                         const std::vector<tensor>& inputs, compute_pool* pool = nullptr);

result<std::vector<tensor>> run_kernel(tf::NodeDef node, const std::vector<tensor>& inputs,
                                       compute_pool* pool = nullptr,
                                       const graph::op_registry& ops = graph::op_registry::builtin(),
                                       const kernel_registry& kernels = kernel_registry::builtin());

}  // namespace troupe::kernels
