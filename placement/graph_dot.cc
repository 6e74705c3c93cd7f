#include "placement/graph_dot.h"

#include <map>
#include <sstream>
#include <tuple>

#include "graph/attr.h"

namespace troupe::placement {

namespace {

std::string escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string quoted(std::string_view s) { return str_cat("\"", escaped(s), "\""); }

std::string attr_string(const tf::NodeDef& nd, std::string_view name) {
  std::string value;
  if (!graph::get_attr(nd, name, &value).ok()) return "";
  return value;
}

// "/job:ps/task:0/cpu:0" and "/job:ps/task:0/device:CPU:0" share a cluster.
std::string canonical_device(const std::string& device) {
  auto parsed = parse_device_name(device);
  return parsed.ok() ? to_string(*parsed) : device;
}

}  // namespace

std::string graph_def_to_dot(const tf::GraphDef& def) {
  std::map<std::string, std::vector<int>> by_device;  // ordered: deterministic clusters
  std::map<std::string, std::string> device_of;
  for (int i = 0; i < def.node_size(); ++i) {
    std::string device = canonical_device(def.node(i).device());
    by_device[device].push_back(i);
    device_of[def.node(i).name()] = device;
  }
  std::ostringstream out;
  out << "digraph troupe {\n  node [shape=box, style=rounded];\n";
  auto write_node = [&](const tf::NodeDef& nd, const char* indent) {
    bool transfer = nd.op() == "_Send" || nd.op() == "_Recv";
    out << indent << quoted(nd.name()) << " [label=\"" << escaped(nd.name()) << "\\n"
        << escaped(nd.op()) << "\"" << (transfer ? ", shape=ellipse, style=dashed" : "") << "];\n";
  };
  int cluster = 0;
  for (const auto& [device, nodes] : by_device) {
    if (device.empty()) continue;
    out << "  subgraph cluster_" << cluster++ << " {\n    label=" << quoted(device) << ";\n";
    for (int i : nodes) write_node(def.node(i), "    ");
    out << "  }\n";
  }
  if (auto it = by_device.find(""); it != by_device.end()) {
    for (int i : it->second) write_node(def.node(i), "  ");
  }

  std::map<std::tuple<std::string, std::string, std::string>, std::string> sends;
  for (const auto& nd : def.node()) {
    if (nd.op() != "_Send") continue;
    sends[{attr_string(nd, "tensor_name"), attr_string(nd, "send_device"),
           attr_string(nd, "recv_device")}] = nd.name();
  }
  for (const auto& nd : def.node()) {
    for (const auto& input : nd.input()) {
      auto parsed = graph::parse_tensor_name(input);
      if (!parsed.ok()) continue;
      auto src = device_of.find(parsed->node);
      bool crosses = src != device_of.end() && src->second != device_of[nd.name()];
      out << "  " << quoted(parsed->node) << " -> " << quoted(nd.name());
      std::string style = parsed->control ? "dotted" : crosses ? "dashed" : "";
      if (!style.empty()) out << " [style=" << style << "]";
      out << ";\n";
    }
    if (nd.op() == "_Recv") {
      std::string tensor = attr_string(nd, "tensor_name");
      auto send =
          sends.find({tensor, attr_string(nd, "send_device"), attr_string(nd, "recv_device")});
      if (send != sends.end()) {
        out << "  " << quoted(send->second) << " -> " << quoted(nd.name())
            << " [style=dashed, color=blue, label=" << quoted(tensor) << "];\n";
      }
    }
  }
  out << "}\n";
  return out.str();
}

std::string graph_to_dot(const graph::graph& g, const placement* placed) {
  tf::GraphDef def = g.to_graph_def();
  if (placed != nullptr) {
    for (int i = 0; i < def.node_size() && i < static_cast<int>(placed->size()); ++i) {
      def.mutable_node(i)->set_device(placed->device_of(i));
    }
  }
  return graph_def_to_dot(def);
}

std::string partitions_to_dot(const partitioned_graph& parts) {
  tf::GraphDef all;
  for (const auto& p : parts.partitions) {
    for (const auto& nd : p.graph_def.node()) *all.add_node() = nd;
  }
  return graph_def_to_dot(all);
}

}  // namespace troupe::placement
