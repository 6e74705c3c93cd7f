// Graphviz DOT pictures of graphs by device: one `subgraph cluster_<n>` per device
// (clusters numbered in device-name order, labelled with the device), each node labelled
// with its name and op. Data edges are solid, control edges dotted, and edges that cross
// devices dashed: in a partitioned graph, each _Send is joined to its _Recv by a dashed
// edge labelled with the tensor name.
//
//   std::ofstream("g.dot") << placement::partitions_to_dot(*parts);   // dot -Tsvg g.dot
//
// Pure functions; the output depends only on the input (stable for tests and diffs).
#pragma once

#include <string>

#include "graph/graph.h"
#include "graph/proto/graph.pb.h"
#include "placement/partition.h"
#include "placement/placer.h"

namespace troupe::placement {

// Groups nodes by their NodeDef `device` field (nodes without one sit outside any
// cluster); _Recv nodes are linked to the _Send with the same tensor_name, send_device
// and recv_device.
std::string graph_def_to_dot(const tf::GraphDef& def);

// A graph grouped by `placed` or, when it is null, by each node's requested device.
std::string graph_to_dot(const graph::graph& g, const placement* placed = nullptr);

// All partitions of a step in one picture.
std::string partitions_to_dot(const partitioned_graph& parts);

}  // namespace troupe::placement
