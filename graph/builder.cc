#include "graph/builder.h"

namespace troupe::graph {

struct scope::state {
  explicit state(const op_registry& ops) : g(ops) {}
  graph g;
  status first_error;
  std::map<std::string, int> name_counts;
};

std::string output::name() const { return index == 0 ? node : str_cat(node, ":", index); }

output operation::out(int i) const {
  if (i < 0 || i >= static_cast<int>(outputs.size())) return output{};
  return outputs[static_cast<std::size_t>(i)];
}

scope scope::new_root(const op_registry& ops) { return scope(std::make_shared<state>(ops)); }

scope scope::with_name(std::string name) const {
  scope s = *this;
  s.name_ = std::move(name);
  return s;
}

scope scope::sub(const std::string& prefix) const {
  scope s = *this;
  s.name_.clear();
  s.prefix_ += prefix + "/";
  return s;
}

scope scope::with_device(std::string device) const {
  scope s = *this;
  s.device_ = std::move(device);
  return s;
}

scope scope::colocate_with(const std::string& node) const {
  scope s = *this;
  const auto* n = state_->g.find(node);
  if (n == nullptr) {
    record(not_found_error("colocate_with: no node '", node, "' in the graph"));
    return s;
  }
  s.device_ = n->def.device();
  s.colocate_ = node;
  return s;
}

scope scope::with_control_dependencies(std::vector<operation> deps) const {
  scope s = *this;
  s.control_deps_.insert(s.control_deps_.end(), deps.begin(), deps.end());
  return s;
}

scope scope::with_attr(std::string name, tf::AttrValue value) const {
  scope s = *this;
  s.attrs_[std::move(name)] = std::move(value);
  return s;
}

bool scope::ok() const { return state_->first_error.ok(); }
status scope::get_status() const { return state_->first_error; }
void scope::record(status s) const {
  if (state_->first_error.ok() && !s.ok()) state_->first_error = std::move(s);
}
const graph& scope::current_graph() const { return state_->g; }

result<graph> scope::to_graph() const {
  if (!ok()) return state_->first_error;
  // Rebuilding validates the whole graph once more and gives an independent copy.
  return graph::from_graph_def(state_->g.to_graph_def(), state_->g.registry());
}

result<tf::GraphDef> scope::to_graph_def() const {
  if (!ok()) return state_->first_error;
  return state_->g.to_graph_def();
}

std::string scope::unique_name(const std::string& op) const {
  std::string base = prefix_ + (name_.empty() ? op : name_);
  int& count = state_->name_counts[base];
  std::string name = base;
  while (state_->g.find(name) != nullptr) name = str_cat(base, "_", ++count);
  return name;
}

std::string scope::next_name(const std::string& op) const {
  std::string base = prefix_ + (name_.empty() ? op : name_);
  auto it = state_->name_counts.find(base);
  int count = it == state_->name_counts.end() ? 0 : it->second;
  std::string name = base;
  while (state_->g.find(name) != nullptr) name = str_cat(base, "_", ++count);
  return name;
}

operation scope::add(const std::string& op, std::vector<input> inputs,
                     std::map<std::string, tf::AttrValue> attrs) const {
  if (!ok()) return {};
  for (const auto& in : inputs) {
    for (const auto& t : in.tensors) {
      if (!t.valid()) return {};  // an earlier op failed and recorded why
    }
  }
  auto def = state_->g.registry().lookup(op);
  if (!def.ok()) {
    record(def.error().with_context(str_cat("building '", prefix_ + (name_.empty() ? op : name_), "'")));
    return {};
  }
  const op_def& schema = **def;
  tf::NodeDef node;
  node.set_name(unique_name(op));
  node.set_op(op);
  if (!device_.empty()) node.set_device(device_);
  if (!colocate_.empty()) {
    auto* list = (*node.mutable_attr())["_class"].mutable_list();
    list->add_s("loc:@" + colocate_);
  }
  if (inputs.size() != schema.inputs.size()) {
    record(invalid_argument_error("building '", node.name(), "' (", op, "): the op takes ",
                                  schema.inputs.size(), " input argument(s) but ", inputs.size(),
                                  " were given"));
    return {};
  }
  // Infer type, number and type-list attributes from the inputs.
  for (std::size_t a = 0; a < inputs.size(); ++a) {
    const arg_def& arg = schema.inputs[a];
    const auto& tensors = inputs[a].tensors;
    if (!arg.number_attr.empty() && attrs.count(arg.number_attr) == 0) {
      attrs[arg.number_attr] = attr_value(static_cast<std::int64_t>(tensors.size()));
    }
    if (!arg.type_attr.empty() && attrs.count(arg.type_attr) == 0 && !tensors.empty()) {
      attrs[arg.type_attr] = attr_value(tensors[0].type);
    }
    if (!arg.type_list_attr.empty() && attrs.count(arg.type_list_attr) == 0) {
      std::vector<dtype> types;
      for (const auto& t : tensors) types.push_back(t.type);
      attrs[arg.type_list_attr] = attr_value(types);
    }
    for (const auto& t : tensors) node.add_input(t.name());
  }
  for (const auto& dep : control_deps_) {
    if (dep.valid()) node.add_input("^" + dep.node);
  }
  for (auto& [name, value] : attrs) (*node.mutable_attr())[name] = std::move(value);
  for (const auto& [name, value] : attrs_) node.mutable_attr()->insert({name, value});  // add()'s own win
  std::string name = node.name();
  auto id = state_->g.add_node(std::move(node));
  if (!id.ok()) {
    record(id.error());
    return {};
  }
  const struct node& n = state_->g.get(*id);
  operation result{n.name(), {}};
  for (int i = 0; i < n.num_outputs(); ++i) {
    result.outputs.push_back(output{n.name(), i, n.output_types[static_cast<std::size_t>(i)],
                                    n.output_shapes[static_cast<std::size_t>(i)]});
  }
  return result;
}

}  // namespace troupe::graph
