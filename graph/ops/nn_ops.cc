// Op schemas: (being written).
#include "graph/op_registry.h"

namespace troupe::graph {

void register_nn_ops(op_registry& registry) {}

}  // namespace troupe::graph
