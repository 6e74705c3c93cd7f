#include "placement/replica_device_setter.h"

#include <algorithm>

#include "graph/attr.h"
#include "graph/graph.h"
#include "placement/device_name.h"

namespace troupe::placement {

namespace {

bool in_colocation_group(const tf::NodeDef& def) {
  std::vector<std::string> classes;
  if (!graph::has_attr(def, "_class") || !graph::get_attr(def, "_class", &classes).ok())
    return false;
  return std::any_of(classes.begin(), classes.end(),
                     [](const std::string& c) { return c.starts_with("loc:@"); });
}

}  // namespace

status replica_device_setter(tf::GraphDef* def, const replica_device_setter_options& options,
                             const graph::op_registry& ops) {
  if (options.ps_tasks < 0) {
    return invalid_argument_error("replica_device_setter: ps_tasks is ", options.ps_tasks,
                                  "; it must be 0 or more");
  }
  auto worker = parse_device_name(options.worker_device);
  if (!worker.ok()) return worker.error().with_context("replica_device_setter worker_device");
  auto ps = parse_device_name(str_cat("/job:", options.ps_job));
  if (!ps.ok()) return ps.error().with_context("replica_device_setter ps_job");
  auto g = graph::graph::from_graph_def(*def, ops);
  if (!g.ok()) return g.error().with_context("replica_device_setter");

  int next_ps_task = 0;
  for (int id = 0; id < def->node_size(); ++id) {
    tf::NodeDef& nd = *def->mutable_node(id);
    auto request = parse_device_name(nd.device());
    if (!request.ok())
      return request.error().with_context(str_cat("node '", nd.name(), "' requests a device"));
    if (request->job || (!options.merge_devices && !request->empty())) continue;
    const graph::node& n = g->get(id);
    bool follows_resource = std::find(n.input_types.begin(), n.input_types.end(),
                                      dtype::resource) != n.input_types.end();
    if (follows_resource || in_colocation_group(nd)) continue;
    device_name target = *worker;
    bool is_ps_op =
        std::find(options.ps_ops.begin(), options.ps_ops.end(), nd.op()) != options.ps_ops.end();
    if (is_ps_op && options.ps_tasks > 0) {
      target = *ps;
      target.task = next_ps_task;
      next_ps_task = (next_ps_task + 1) % options.ps_tasks;
    }
    nd.set_device(to_string(fill_missing(*request, target)));
  }
  return status();
}

}  // namespace troupe::placement
