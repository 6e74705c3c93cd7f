// The placer: one device of the cluster for every node of a graph, following TensorFlow
// 1.x's rules.
//
//   auto cluster = placement::cluster_spec::from_task_counts({{"ps", 1}, {"worker", 2}});
//   placement::placer_options options;
//   options.default_device = "/job:worker/replica:0/task:0/device:CPU:0";
//   auto placed = placement::place(g, cluster->device_names(), has_kernel, options);
//   placed->device_of(id);   // "/job:ps/replica:0/task:0/device:CPU:0"
//
// Rules, in order:
//  1. Colocation groups. Nodes that must share a device form one group (transitively):
//     a node listing "loc:@NAME" in its `_class` attribute (list of strings) joins the
//     group of node NAME (when no node has that name, the label still joins every node
//     listing it); a node taking a `resource` input joins the node producing it, so a
//     variable's reads and updates run where the variable lives.
//  2. Requests. The `device` fields of a group's members (full or partial names) are
//     merged. Two members naming different jobs, replicas or tasks is an error; naming
//     different types or ids is an error unless allow_soft_placement, which then drops
//     the type (or id).
//  3. Kernels. A device is a candidate when it matches the merged request and every
//     member has a kernel for its type (`has_kernel`). When none is, and the request is
//     not empty: without allow_soft_placement it is an error; with it, the request's
//     type and id are dropped (same task, another device type), and if still nothing,
//     the whole request (any device that can run the group).
//  4. Choice. The default device fills the request's missing fields and is a
//     preference, not a constraint: the first candidate (in the order of `devices`)
//     matching the filled request wins, else the first matching the default's task,
//     else the first candidate; within the winner's task, a GPU that also matches goes
//     before a CPU (TensorFlow's order of device types).
// Errors are invalid_argument and name the nodes, their requests, and for a group how
// its members came to be colocated. The result depends only on the inputs
// (deterministic). Pure functions; the graph is only read.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"
#include "placement/cluster_spec.h"
#include "placement/device_name.h"

namespace troupe::placement {

// Whether a node can run on devices of a type ("CPU"). The runtime passes one backed by
// the kernel registry; placement itself does not know kernels.
using kernel_predicate =
    std::function<bool(const graph::node& node, const std::string& device_type)>;

struct placer_options {
  // Where nodes go when nothing says otherwise; partial names are allowed; empty: none.
  std::string default_device;
  bool allow_soft_placement = false;
};

// A complete device name for every node, indexed by node id. Each distinct name is kept
// once (a graph of 10^5 nodes on a few devices holds a few strings, not 10^5).
struct placement {
  std::vector<std::string> names;  // the distinct devices, in order of first use
  std::vector<int> index;          // by node id, into names

  const std::string& device_of(int node) const { return names[static_cast<std::size_t>(index[static_cast<std::size_t>(node)])]; }
  // How many nodes it places.
  std::size_t size() const { return index.size(); }
  // Places the next node (id size()) on `device`.
  void push_back(std::string_view device) { index.push_back(index_of(device)); }
  // Places node `node` on `device`. REQUIRES: node < size().
  void assign(int node, std::string_view device) { index[static_cast<std::size_t>(node)] = index_of(device); }
  // The same device for every node.
  friend bool operator==(const placement& a, const placement& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a.device_of(static_cast<int>(i)) != b.device_of(static_cast<int>(i))) return false;
    }
    return true;
  }

 private:
  int index_of(std::string_view device) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == device) return static_cast<int>(i);
    }
    names.emplace_back(device);
    return static_cast<int>(names.size()) - 1;
  }
};

// REQUIRES: `devices` lists complete, distinct device names (checked: invalid_argument).
result<placement> place(const graph::graph& g, const std::vector<std::string>& devices,
                        const kernel_predicate& has_kernel, const placer_options& options = {});
result<placement> place(const graph::graph& g, const cluster_spec& cluster,
                        const kernel_predicate& has_kernel, const placer_options& options = {});

// The colocation groups of rule 1, each sorted by node id, ordered by their first node.
std::vector<std::vector<int>> colocation_groups(const graph::graph& g);

}  // namespace troupe::placement
