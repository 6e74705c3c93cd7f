#include "graph/graph.h"

#include <algorithm>
#include <charconv>
#include <deque>

#include "graph/ref_variables.h"

namespace troupe::graph {

result<tensor_name> parse_tensor_name(std::string_view text) {
  tensor_name out;
  if (!text.empty() && text.front() == '^') {
    out.control = true;
    text.remove_prefix(1);
  }
  auto colon = text.rfind(':');
  if (colon != std::string_view::npos && !out.control) {
    std::string_view index = text.substr(colon + 1);
    int value = 0;
    auto [ptr, ec] = std::from_chars(index.data(), index.data() + index.size(), value);
    if (ec != std::errc() || ptr != index.data() + index.size() || value < 0 || index.empty()) {
      return invalid_argument_error("'", text, "' is not a tensor name (expected NAME or NAME:INDEX)");
    }
    out.index = value;
    text = text.substr(0, colon);
  }
  if (text.empty()) return invalid_argument_error("empty node name in tensor name");
  out.node = std::string(text);
  return out;
}

status graph::prepare(node& n) const {
  tf::NodeDef& def = n.def;
  if (def.name().empty()) return invalid_argument_error("a node of op '", def.op(), "' has no name");
  auto op = ops_->lookup(def.op());
  if (!op.ok()) return op.error().with_context(str_cat("node '", def.name(), "'"));
  n.op = *op;
  TROUPE_RETURN_IF_ERROR(add_defaults_and_validate_attrs(**op, &def));
  std::vector<dtype> input_types, output_types;
  TROUPE_RETURN_IF_ERROR(input_output_types(**op, def, &input_types, &output_types)
                             .with_context(str_cat("node '", def.name(), "'")));
  n.input_types.assign(input_types.begin(), input_types.end());
  n.output_types.assign(output_types.begin(), output_types.end());
  return status();
}

status graph::resolve_inputs(node& n) const {
  n.inputs.clear();
  n.control_inputs.clear();
  for (int i = 0; i < n.def.input_size(); ++i) {
    const std::string& text = n.def.input(i);
    auto parsed = parse_tensor_name(text);
    if (!parsed.ok()) return parsed.error().with_context(str_cat("node '", n.name(), "' input ", i));
    auto it = by_name_.find(parsed->node);
    if (it == by_name_.end()) {
      return invalid_argument_error("node '", n.name(), "' input ", i, " refers to '", text,
                                    "', but there is no node named '", parsed->node, "'");
    }
    const node& src = *nodes_[static_cast<std::size_t>(it->second)];
    if (parsed->control) {
      n.control_inputs.push_back(src.id);
      continue;
    }
    if (!n.control_inputs.empty()) {
      return invalid_argument_error("node '", n.name(), "': data input '", text,
                                    "' comes after a control input; control inputs must be last");
    }
    if (parsed->index >= src.num_outputs()) {
      return invalid_argument_error("node '", n.name(), "' input ", i, " refers to '", text,
                                    "', but '", src.name(), "' (", src.op_name(), ") has only ",
                                    src.num_outputs(), " output(s)");
    }
    n.inputs.push_back({src.id, parsed->index});
  }
  if (n.inputs.size() != n.input_types.size()) {
    return invalid_argument_error("node '", n.name(), "' (", n.op_name(), ") has ", n.inputs.size(),
                                  " data inputs but the op takes ", n.input_types.size());
  }
  return status();
}

const tensor* graph::constant_value(endpoint e) const {
  auto it = constants_.find(e.node);
  return it == constants_.end() || e.index != 0 ? nullptr : &it->second;
}

status graph::check_and_infer(node& n) {
  std::vector<partial_shape> shapes;
  std::vector<const tensor*> values;
  std::vector<const tf::NodeDef*> producers;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    const node& src = get(n.inputs[i].node);
    producers.push_back(&src.def);
    dtype have = src.output_types[static_cast<std::size_t>(n.inputs[i].index)];
    if (have != n.input_types[i]) {
      return invalid_argument_error("node '", n.name(), "' (", n.op_name(), ") input ", i,
                                    " must be ", dtype_name(n.input_types[i]), " but '",
                                    n.def.input(static_cast<int>(i)), "' is ", dtype_name(have));
    }
    shapes.push_back(src.output_shapes[static_cast<std::size_t>(n.inputs[i].index)]);
    values.push_back(constant_value(n.inputs[i]));
  }
  if (n.op_name() == "Const") {
    tensor value;
    TROUPE_RETURN_IF_ERROR(get_attr(n.def, "value", &value));
    constants_[n.id] = std::move(value);
  }
  shape_context ctx(n.def, *n.op, std::move(shapes), std::move(values), n.input_types.to_vector(),
                    n.num_outputs());
  ctx.set_input_nodes(std::move(producers));
  if (n.op->shape) {
    status s = n.op->shape(ctx);
    if (!s.ok()) {
      // Shape functions name the node themselves through ctx.error; add it otherwise.
      if (s.message().find(n.name()) == std::string::npos) {
        return s.with_context(str_cat("node '", n.name(), "' (", n.op_name(), ")"));
      }
      return s;
    }
  }
  n.output_shapes = ctx.outputs();
  return status();
}

void graph::link(const node& n) {
  consumers_.resize(nodes_.size());
  control_consumers_.resize(nodes_.size());
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    consumers_[static_cast<std::size_t>(n.inputs[i].node)].push_back({n.id, static_cast<int>(i)});
  }
  for (int c : n.control_inputs) control_consumers_[static_cast<std::size_t>(c)].push_back(n.id);
}

result<int> graph::add_node(tf::NodeDef def) {
  if (by_name_.count(def.name()) > 0) {
    return invalid_argument_error("duplicate node name '", def.name(), "'");
  }
  auto n = std::make_unique<node>(std::make_unique<tf::NodeDef>(std::move(def)));
  n->id = num_nodes();
  TROUPE_RETURN_IF_ERROR(prepare(*n));
  TROUPE_RETURN_IF_ERROR(resolve_inputs(*n));
  TROUPE_RETURN_IF_ERROR(check_and_infer(*n));
  by_name_[n->name()] = n->id;
  topo_order_.push_back(n->id);
  nodes_.push_back(std::move(n));
  link(*nodes_.back());
  return nodes_.back()->id;
}

result<graph> graph::from_graph_def(tf::GraphDef def, const op_registry& ops) {
  if (has_ref_variables(def)) TROUPE_RETURN_IF_ERROR(rewrite_ref_variables(&def));
  graph g(ops);
  g.versions_ = def.versions();
  // The graph takes the GraphDef's NodeDefs themselves (GraphDef owns them one by one).
  const int count = def.node_size();
  std::vector<tf::NodeDef*> defs(static_cast<std::size_t>(count));
  def.mutable_node()->ExtractSubrange(0, count, defs.data());
  for (tf::NodeDef* nd : defs) {
    g.nodes_.push_back(std::make_unique<node>(std::unique_ptr<tf::NodeDef>(nd)));
  }
  g.by_name_.reserve(static_cast<std::size_t>(count));
  // 1. Names and schemas.
  for (int i = 0; i < count; ++i) {
    node& n = *g.nodes_[static_cast<std::size_t>(i)];
    n.id = i;
    auto [it, inserted] = g.by_name_.emplace(n.name(), i);
    if (!inserted) {
      return invalid_argument_error("duplicate node name '", n.name(), "' (nodes ", it->second,
                                    " and ", i, " of the GraphDef)");
    }
    TROUPE_RETURN_IF_ERROR(g.prepare(n));
  }
  // 2. Edges.
  for (auto& n : g.nodes_) TROUPE_RETURN_IF_ERROR(g.resolve_inputs(*n));
  for (auto& n : g.nodes_) g.link(*n);
  // 3. Topological order (Kahn); what is left over lies on or behind a cycle.
  std::vector<int> pending(g.nodes_.size());
  std::deque<int> ready;
  for (auto& n : g.nodes_) {
    pending[static_cast<std::size_t>(n->id)] =
        static_cast<int>(n->inputs.size() + n->control_inputs.size());
    if (pending[static_cast<std::size_t>(n->id)] == 0) ready.push_back(n->id);
  }
  while (!ready.empty()) {
    int id = ready.front();
    ready.pop_front();
    g.topo_order_.push_back(id);
    auto release = [&](int consumer) {
      if (--pending[static_cast<std::size_t>(consumer)] == 0) ready.push_back(consumer);
    };
    for (auto [consumer, slot] : g.consumers(id)) release(consumer);
    for (int consumer : g.control_consumers(id)) release(consumer);
  }
  if (g.topo_order_.size() != g.nodes_.size()) {
    std::string names;
    int shown = 0;
    for (auto& n : g.nodes_) {
      if (pending[static_cast<std::size_t>(n->id)] > 0 && shown < 8) {
        names += str_cat(shown++ ? ", " : "", "'", n->name(), "'");
      }
    }
    return invalid_argument_error("the graph has a cycle through nodes ", names);
  }
  // 4. Types and shapes, producers first.
  for (int id : g.topo_order_) TROUPE_RETURN_IF_ERROR(g.check_and_infer(*g.nodes_[static_cast<std::size_t>(id)]));
  return g;
}

tf::GraphDef graph::to_graph_def() const {
  tf::GraphDef def;
  *def.mutable_versions() = versions_;
  for (const auto& n : nodes_) *def.add_node() = n->def;
  return def;
}

const node* graph::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : nodes_[static_cast<std::size_t>(it->second)].get();
}

result<endpoint> graph::resolve(std::string_view text) const {
  auto parsed = parse_tensor_name(text);
  if (!parsed.ok()) return parsed.error();
  if (parsed->control) return invalid_argument_error("'", text, "' names a control edge, not a tensor");
  const node* n = find(parsed->node);
  if (n == nullptr) return not_found_error("no node named '", parsed->node, "' in the graph");
  if (parsed->index >= n->num_outputs()) {
    return invalid_argument_error("'", text, "': node '", n->name(), "' (", n->op_name(),
                                  ") has ", n->num_outputs(), " output(s)");
  }
  return endpoint{n->id, parsed->index};
}

}  // namespace troupe::graph
