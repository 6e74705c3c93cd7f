#include "graph/ref_variables.h"

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"
#include "graph/op_registry.h"

namespace troupe::graph {

namespace {

// The reference-taking ops troupe rewrites: their resource twin and how many of their
// first inputs are references (the variable and its optimizer slots).
struct update_op {
  const char* resource_op;
  int refs;
};
const std::map<std::string, update_op, std::less<>>& update_ops() {
  static const std::map<std::string, update_op, std::less<>> ops = {
      {"Assign", {"AssignVariableOp", 1}},
      {"AssignAdd", {"AssignAddVariableOp", 1}},
      {"AssignSub", {"AssignSubVariableOp", 1}},
      {"ScatterAdd", {"ResourceScatterAdd", 1}},
      {"ApplyGradientDescent", {"ResourceApplyGradientDescent", 1}},
      {"ApplyMomentum", {"ResourceApplyMomentum", 2}},
      {"ApplyAdagrad", {"ResourceApplyAdagrad", 2}},
      {"ApplyAdam", {"ResourceApplyAdam", 3}},
      {"ApplyRMSProp", {"ResourceApplyRMSProp", 3}},
  };
  return ops;
}

// TensorFlow ops that take a reference and have no twin here.
bool takes_reference(std::string_view op) {
  static const std::set<std::string, std::less<>> ops = {
      "ScatterSub", "ScatterUpdate", "ScatterMul", "ScatterDiv", "ScatterMin", "ScatterMax",
      "ScatterNdUpdate", "ScatterNdAdd", "ScatterNdSub", "CountUpTo", "TemporaryVariable",
      "DestroyTemporaryVariable", "RefIdentity", "RefSwitch", "RefMerge", "RefEnter", "RefExit",
      "RefNextIteration", "RefSelect"};
  return ops.contains(op) || op.starts_with("Apply") || op.starts_with("SparseApply");
}

bool is_variable(const tf::NodeDef& n) { return n.op() == "VariableV2" || n.op() == "Variable"; }

// The node whose output 0 an input names ("n", "n:0"); "" for a control input, another
// output or a malformed name.
std::string data_source(std::string_view input) {
  auto name = parse_tensor_name(input);
  return name.ok() && !name->control && name->index == 0 ? name->node : std::string();
}

// Copies the attributes `to` has in its schema (and the "_" ones: colocation, ...) from
// `from`, reading `T` as `dtype` where the twin spells it so.
void copy_attrs(const tf::NodeDef& from, const op_def& to, tf::NodeDef* out) {
  for (const auto& [name, value] : from.attr()) {
    if (name.starts_with('_') || to.find_attr(name) != nullptr) (*out->mutable_attr())[name] = value;
  }
  if (to.find_attr("dtype") != nullptr && to.find_attr("T") == nullptr && from.attr().contains("T")) {
    (*out->mutable_attr())["dtype"] = from.attr().at("T");
  }
}

}  // namespace

bool has_ref_variables(const tf::GraphDef& def) {
  for (const auto& n : def.node()) {
    if (is_variable(n)) return true;
  }
  return false;
}

status rewrite_ref_variables(tf::GraphDef* def) {
  const op_registry& registry = op_registry::builtin();
  std::map<std::string, tf::AttrValue, std::less<>> variables;  // name -> dtype
  std::map<std::string, std::string, std::less<>> devices;
  std::set<std::string, std::less<>> names;
  for (const auto& n : def->node()) {
    names.insert(n.name());
    if (is_variable(n)) {
      if (!n.attr().contains("dtype")) return invalid_argument_error("variable '", n.name(), "' has no dtype");
      variables[n.name()] = n.attr().at("dtype");
      devices[n.name()] = n.device();
    }
  }
  auto new_name = [&](const std::string& base) -> result<std::string> {
    if (!names.insert(base).second) {
      return invalid_argument_error("rewriting reference variables needs a node named '", base,
                                    "', and the graph has one already");
    }
    return base;
  };
  auto variable_of = [&](std::string_view input) -> const tf::AttrValue* {
    auto it = variables.find(data_source(input));
    return it == variables.end() ? nullptr : &it->second;
  };
  std::vector<tf::NodeDef> added;
  std::map<std::string, std::string, std::less<>> value_reads;  // variable -> its read node
  auto read_node = [&](const std::string& variable, const std::string& name, const std::string& after,
                       const tf::NodeDef* attrs_from) {
    tf::NodeDef read;
    read.set_name(name);
    read.set_op("ReadVariableOp");
    read.set_device(devices[variable]);
    read.add_input(variable);
    if (!after.empty()) read.add_input("^" + after);
    if (attrs_from != nullptr) {
      for (const auto& [key, value] : attrs_from->attr()) {
        if (key.starts_with('_')) (*read.mutable_attr())[key] = value;
      }
    }
    (*read.mutable_attr())["dtype"] = variables.at(variable);
    return read;
  };

  const int count = def->node_size();
  for (int i = 0; i < count; ++i) {
    tf::NodeDef& n = *def->mutable_node(i);
    if (is_variable(n)) {
      tf::NodeDef handle;
      handle.set_name(n.name());
      handle.set_op("VarHandleOp");
      handle.set_device(n.device());
      copy_attrs(n, *registry.find("VarHandleOp"), &handle);
      n = std::move(handle);
      continue;
    }
    int refs = 0;
    auto update = update_ops().find(n.op());
    if (update != update_ops().end()) {
      refs = update->second.refs;
    } else if (n.op() == "IsVariableInitialized" || (n.op() == "Identity" && n.input_size() >= 1 &&
                                                     variable_of(n.input(0)) != nullptr)) {
      refs = 1;
    } else if (takes_reference(n.op())) {
      return invalid_argument_error("node '", n.name(), "' (", n.op(), ") updates a reference variable, which troupe "
                                    "cannot rewrite to a resource variable (it can: Assign, AssignAdd, AssignSub, "
                                    "ScatterAdd, ApplyGradientDescent, ApplyMomentum, ApplyAdagrad, ApplyAdam, "
                                    "ApplyRMSProp; see doc/graphdef.md)");
    }
    for (int k = 0; k < refs; ++k) {
      if (k >= n.input_size() || variable_of(n.input(k)) == nullptr) {
        return invalid_argument_error("node '", n.name(), "' (", n.op(), "): input ", k, " (",
                                      k < n.input_size() ? n.input(k) : std::string("missing"),
                                      ") must come straight from a VariableV2 for troupe to rewrite it to a resource "
                                      "variable");
      }
    }
    // Values read from a variable anywhere else go through one ReadVariableOp per variable.
    for (int k = refs; k < n.input_size(); ++k) {
      if (variable_of(n.input(k)) == nullptr) continue;
      std::string variable = data_source(n.input(k));
      auto [it, inserted] = value_reads.emplace(variable, "");
      if (inserted) {
        auto name = new_name(variable + "/_troupe_value");
        if (!name.ok()) return name.error();
        it->second = *name;
        added.push_back(read_node(variable, *name, "", nullptr));
      }
      n.set_input(k, it->second);
    }
    if (refs == 0) continue;
    const std::string variable = data_source(n.input(0));
    if (n.op() == "Identity") {
      tf::NodeDef read = read_node(variable, n.name(), "", &n);
      read.set_device(n.device());
      for (int k = 1; k < n.input_size(); ++k) read.add_input(n.input(k));  // control inputs
      n = std::move(read);
    } else if (n.op() == "IsVariableInitialized") {
      n.set_op("VarIsInitializedOp");
      n.clear_attr();
    } else {
      // The update under a new name; the node's own name reads what it wrote.
      auto name = new_name(n.name() + "/_troupe_update");
      if (!name.ok()) return name.error();
      const op_def* twin = registry.find(update->second.resource_op);
      tf::NodeDef op;
      op.set_name(*name);
      op.set_op(twin->name);
      op.set_device(n.device());
      for (const auto& input : n.input()) op.add_input(input);
      copy_attrs(n, *twin, &op);
      tf::NodeDef read = read_node(variable, n.name(), *name, &n);
      read.set_device(n.device());
      n = std::move(read);
      added.push_back(std::move(op));
    }
  }
  for (auto& n : added) *def->add_node() = std::move(n);
  return status();
}

}  // namespace troupe::graph
