#include "kernels/kernel_registry.h"

#include <algorithm>

namespace troupe::kernels {

void register_builtin_kernels(kernel_registry& registry);  // generated from the CMake list

void kernel_registry::add(std::string op, std::string device_type,
                          std::vector<type_constraint> constraints, kernel_factory factory) {
  kernels_[std::move(op)].push_back(
      registration{std::move(device_type), std::move(constraints), std::move(factory)});
}

const kernel_registry::registration* kernel_registry::find(const std::string& device_type,
                                                           const tf::NodeDef& node) const {
  auto it = kernels_.find(node.op());
  if (it == kernels_.end()) return nullptr;
  for (const auto& r : it->second) {
    if (r.device_type != device_type) continue;
    bool match = true;
    for (const auto& c : r.constraints) {
      auto a = node.attr().find(c.attr);
      if (a == node.attr().end() || static_cast<dtype>(a->second.type()) != c.type) {
        match = false;
        break;
      }
    }
    if (match) return &r;
  }
  return nullptr;
}

std::vector<std::string> kernel_registry::device_types(std::string_view op) const {
  std::vector<std::string> types;
  auto it = kernels_.find(op);
  if (it == kernels_.end()) return types;
  for (const auto& r : it->second) types.push_back(r.device_type);
  std::sort(types.begin(), types.end());
  types.erase(std::unique(types.begin(), types.end()), types.end());
  return types;
}

bool kernel_registry::has_kernel(const std::string& device_type, const tf::NodeDef& node) const {
  return find(device_type, node) != nullptr;
}

result<std::unique_ptr<op_kernel>> kernel_registry::create(const std::string& device_type,
                                                           const tf::NodeDef& node,
                                                           const graph::op_def& op,
                                                           std::vector<dtype> input_types,
                                                           std::vector<dtype> output_types,
                                                           device* dev) const {
  const registration* r = find(device_type, node);
  if (r == nullptr) {
    std::string registered;
    auto it = kernels_.find(node.op());
    if (it != kernels_.end()) {
      for (const auto& reg : it->second) {
        std::string c;
        for (const auto& tc : reg.constraints) c += str_cat(c.empty() ? "" : ", ", tc.attr, "=", dtype_name(tc.type));
        registered += str_cat("\n  ", reg.device_type, (c.empty() ? "" : " ["), c, (c.empty() ? "" : "]"));
      }
    }
    std::string attrs;
    for (const auto& [name, value] : node.attr()) {
      if (value.value_case() == tf::AttrValue::kType) {
        attrs += str_cat(attrs.empty() ? "" : ", ", name, "=", dtype_name(static_cast<dtype>(value.type())));
      }
    }
    return not_found_error("no ", device_type, " kernel for node '", node.name(), "' (op ",
                           node.op(), attrs.empty() ? "" : " with ", attrs, ")",
                           registered.empty() ? std::string("; the op has no kernels")
                                              : str_cat("; registered kernels:", registered));
  }
  kernel_construction construction(node, op, std::move(input_types), std::move(output_types), dev);
  std::unique_ptr<op_kernel> kernel = r->factory(construction);
  if (!construction.construction_status().ok()) {
    return construction.construction_status().with_context(
        str_cat("node '", node.name(), "' (", node.op(), ")"));
  }
  return kernel;
}

kernel_registry& kernel_registry::builtin() {
  static kernel_registry* registry = [] {
    auto* r = new kernel_registry();
    register_builtin_kernels(*r);
    return r;
  }();
  return *registry;
}

}  // namespace troupe::kernels
