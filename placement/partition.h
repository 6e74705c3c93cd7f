// The partitioner: splits a placed graph into one graph per device for one kind of step
// (its feeds, fetches and targets), joining the pieces with _Send/_Recv pairs.
//
//   placement::step_spec step{.feeds = {x}, .fetches = {loss}, .targets = {train_op}};
//   auto parts = placement::partition_graph(g, *placed, step);
//   for (const auto& p : parts->partitions) register_with(p.device, p.graph_def, ...);
//
// What a partition holds:
//  1. The nodes the step needs (graph::prune of the feeds, fetches and targets) that are
//     placed on its device, under their original names, with `device` set to the
//     assigned device and inputs rewritten as below.
//  2. For each (tensor, destination device) whose producer is on another device, exactly
//     one transfer however many consumers the tensor has there: a `_Send` in the
//     producer's partition and a `_Recv` in the consumer's, which all those consumers
//     read. A cut control edge (^src) becomes one transfer per (src, destination): a
//     Const holding an empty float tensor, run after src (`^src`) on src's device, is
//     sent; the consumers wait on its `_Recv` (`^recv`). A node that waits for several
//     nodes of one other device waits for one transfer after them all (a Const after
//     each, named "<node>/_control_from_<device>/_control_to_..."), as TensorFlow's
//     tf.group does per device, unless each of them crosses on its own already.
//     A control edge from a reader to an update that names it in
//     graph::k_in_place_after_attr is dropped when partition_options::same_process says
//     the two devices are in different processes.
//  2a. A small constant (a Const of at most 1024 elements, without inputs, not fed) read
//     on another device is not sent each step: a copy of it, "<node>/_copy_at_<device>",
//     is added to the reader's partition (once per device; only onto a CPU or a device of
//     the Const's type, which surely has its kernel).
//  3. A stand-in for each fed tensor whose producer the step does not otherwise need: a
//     fed Placeholder stays (its control inputs dropped); any other fed tensor gets a
//     Placeholder of its dtype and shape named "<node>/_feed_<index>". Every feed is
//     delivered to its producer's device and travels from there like any tensor.
// Generated nodes have readable names unique across all partitions: for node x output 0
// sent to /job:worker/replica:0/task:1/device:CPU:0, "x/_send_0_to_worker_task1_CPU_0"
// and "x/_recv_0_at_worker_task1_CPU_0"; for control edges "x/_control_to_...",
// "x/_control_send_to_...", "x/_control_recv_at_..." (a "_1", "_2", ... suffix when taken).
//
// _Send/_Recv attributes follow TensorFlow: tensor_name, send_device,
// send_device_incarnation, recv_device, client_terminated (false), T (on _Send) and
// tensor_type (on _Recv), and troupe's recv_device_incarnation; a _Recv also carries
// `_shape` when the tensor's rank is known.
// The same facts are in each transfer's rendezvous_key, so the runtime needs no string
// parsing. The runtime runs, per partition, the step's nodes there: every node except
// fed stand-ins, i.e. graph::prune(partition, its feeds, its fetches, its targets plus
// its _Send nodes).
//
// Errors (invalid_argument): a placement that does not cover the graph or has a node
// on an incomplete device name, feeds/fetches/targets that are not in the graph, a
// tensor fed twice. Deterministic; pure function of its inputs.
#pragma once

#include <compare>
#include <functional>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "graph/graph.h"
#include "graph/proto/graph.pb.h"
#include "placement/placer.h"

namespace troupe::placement {

// Identifies one tensor crossing between two devices within a step (the step id is
// added by the runtime). `tensor_name` is "node:index" of the original graph (for a
// control transfer, of the dummy Const).
struct rendezvous_key {
  std::string send_device;
  std::uint64_t send_device_incarnation = 0;
  std::string recv_device;
  std::string tensor_name;
  // The receiving device's incarnation (troupe's, not in TensorFlow's key): a task's
  // process takes only tensors meant for its own life (cluster/remote_task.h).
  std::uint64_t recv_device_incarnation = 0;

  // TensorFlow's printed form "send;incarnation-hex;recv;tensor;0:0", for logs only.
  std::string to_string() const;
  friend bool operator==(const rendezvous_key&, const rendezvous_key&) = default;
  friend auto operator<=>(const rendezvous_key&, const rendezvous_key&) = default;
};

struct transfer {
  rendezvous_key key;
  std::string send_node;  // the _Send, in the send device's partition
  std::string recv_node;  // the _Recv, in the receive device's partition
  dtype type = dtype::invalid;
  bool control = false;  // carries only a control dependency
};

// A step's feed or fetch (by its position in step_spec) and its tensor in a partition,
// "name:index".
struct bound_tensor {
  int step_index = 0;
  std::string tensor;
  friend bool operator==(const bound_tensor&, const bound_tensor&) = default;
};

// A step's target (by its position in step_spec) and its node in a partition.
struct bound_node {
  int step_index = 0;
  std::string node;
  friend bool operator==(const bound_node&, const bound_node&) = default;
};

struct partition {
  std::string device;  // complete device name
  tf::GraphDef graph_def;
  std::vector<bound_tensor> feeds;
  std::vector<bound_tensor> fetches;
  std::vector<bound_node> targets;
  // Nodes that run though nothing of the step waits for them in any partition: those a
  // NoOp of another device waited for, whose control edges into it were dropped (the
  // step ends once every partition has). The runtime runs them as it runs targets.
  std::vector<std::string> also_run;
  std::vector<int> sends;  // indices into partitioned_graph::transfers leaving this device
  std::vector<int> recvs;  // ... arriving at it
};

struct partitioned_graph {
  std::vector<partition> partitions;  // by device name
  std::vector<transfer> transfers;

  // nullptr when no node of the step is on `device`.
  const partition* find(std::string_view device) const;
};

struct step_spec {
  std::vector<graph::endpoint> feeds;
  std::vector<graph::endpoint> fetches;
  std::vector<int> targets;
};

struct partition_options {
  // Each device's incarnation (the runtime's device directory: a new one each time a
  // device's task starts); missing: 0. Both ends' go into each transfer's key.
  std::map<std::string, std::uint64_t, std::less<>> incarnations;
  // Whether two devices (full names) are in one process, where tensors crossing between
  // them share their buffers. Null: every device is in this one. A control edge that
  // only lets an update write in place after a reader (graph::k_in_place_after_attr)
  // is dropped when the reader is in another process: it works on its own copy.
  std::function<bool(const std::string&, const std::string&)> same_process;
};

// REQUIRES: `placed` came from place() on `g` (checked: sizes and device names).
result<partitioned_graph> partition_graph(const graph::graph& g, const placement& placed,
                                          const step_spec& step,
                                          const partition_options& options = {});

}  // namespace troupe::placement
