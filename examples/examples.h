// examples: worked examples of extending troupe, one idea per file.
//
//   examples::ensure_example_ops();   // adds every example op to the built-in registries
//   auto root = graph::scope::new_root();
//   auto y = root.add("Throttle", {x}, {{"rate", graph::attr_value(10.0f)}});
//
// Each example op lives in one file (e.g. examples/throttle_op.cc, an op whose kernel is
// an actor) that defines register_<file stem>(op_registry&, kernel_registry&);
// examples/CMakeLists.txt lists the files once and generates register_example_ops, which
// calls each in turn. doc/extending.md walks through the Throttle example.
//
// Thread safety: as the registries: register before graphs using the ops are built.
#pragma once

#include "graph/op_registry.h"
#include "kernels/kernel_registry.h"

namespace troupe::examples {

// Adds the schemas and kernels of every example op. REQUIRES: called once per pair of
// registries (a second call is a duplicate registration, which stops the program).
void register_example_ops(graph::op_registry& op_registry, kernels::kernel_registry& kernel_registry);

// register_example_ops on graph::op_registry::builtin() and
// kernels::kernel_registry::builtin(), the first time it is called; later calls do nothing.
void ensure_example_ops();

}  // namespace troupe::examples
