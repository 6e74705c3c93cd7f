// Pruning: the nodes a step must run to produce its fetches and run its targets, given
// which tensors are fed. A fed tensor cuts its edge: its producer runs only if something
// else needs it. Nodes outside the result never run, whatever they would have done.
#pragma once

#include <vector>

#include "core/status.h"
#include "graph/graph.h"

namespace troupe::graph {

// The needed node ids, in the graph's topological order.
std::vector<int> prune(const graph& g, const std::vector<endpoint>& feeds,
                       const std::vector<endpoint>& fetches, const std::vector<int>& targets);

}  // namespace troupe::graph
