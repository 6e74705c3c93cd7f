// replica_device_setter: TensorFlow 1.x's between-graph replication helper. It writes
// device requests into a GraphDef so that variables live on parameter-server tasks and
// everything else runs on a worker:
//
//   placement::replica_device_setter_options options;
//   options.ps_tasks = 2;                                // /job:ps/task:0 and task:1
//   options.worker_device = "/job:worker/task:0";
//   TROUPE_RETURN_IF_ERROR(placement::replica_device_setter(&def, options));
//
// For each node, in GraphDef order (the order nodes were created):
//  - a node whose request already names a job is left alone;
//  - a node in a colocation group by `_class`, or taking a `resource` input, is left
//    alone: the placer puts it with its group or its resource (a variable's reads and
//    updates follow the variable);
//  - a node whose op is in `ps_ops` (variable-creating ops; queues are not variables)
//    gets "/job:<ps_job>/task:<k>", k going round-robin over 0..ps_tasks-1;
//  - every other node gets `worker_device`.
// The chosen name fills only the fields the node's own request lacks
// ("/device:CPU:0" on a variable becomes "/job:ps/task:1/device:CPU:0"); with
// merge_devices false, a node with any request is left alone. With ps_tasks 0, variables
// are treated as other nodes. The GraphDef must build into a valid graph with `ops`
// (input types are needed); errors name the node.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "graph/op_registry.h"
#include "graph/proto/graph.pb.h"

namespace troupe::placement {

struct replica_device_setter_options {
  int ps_tasks = 0;
  std::string ps_job = "ps";
  std::string worker_device = "/job:worker";
  std::vector<std::string> ps_ops = {"VarHandleOp"};
  bool merge_devices = true;
};

status replica_device_setter(tf::GraphDef* def, const replica_device_setter_options& options,
                             const graph::op_registry& ops = graph::op_registry::builtin());

}  // namespace troupe::placement
