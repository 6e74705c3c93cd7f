// The kernel registry: which kernel computes an op on a device type for given attribute
// dtypes. A registration names the op, the device type ("CPU", "GPU"), type constraints
// on attributes (e.g. T = float) and a factory. Lookup picks the first registration whose
// constraints all match the node's attributes.
//
//   registry.add("Relu", "CPU", {{"T", dtype::float32}}, make_kernel<relu_kernel<float>>);
//
// Thread safety: add() must finish before concurrent lookups begin.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernel.h"

namespace troupe::kernels {

using kernel_factory = std::function<std::unique_ptr<op_kernel>(kernel_construction&)>;

template <class Kernel>
std::unique_ptr<op_kernel> make_kernel(kernel_construction& c) {
  return std::make_unique<Kernel>(c);
}

struct type_constraint {
  std::string attr;
  dtype type;
};

class kernel_registry {
 public:
  kernel_registry() = default;
  kernel_registry(const kernel_registry&) = delete;
  kernel_registry& operator=(const kernel_registry&) = delete;

  void add(std::string op, std::string device_type, std::vector<type_constraint> constraints,
           kernel_factory factory);

  // Instantiates the kernel for a node. Errors: no kernel for this op/device/dtype
  // (naming the node, the op, the device type and the registered dtypes), or the
  // kernel constructor's own error.
  result<std::unique_ptr<op_kernel>> create(const std::string& device_type,
                                            const tf::NodeDef& node, const graph::op_def& op,
                                            std::vector<dtype> input_types,
                                            std::vector<dtype> output_types,
                                            device* dev = nullptr) const;

  bool has_kernel(const std::string& device_type, const tf::NodeDef& node) const;
  // The device types with at least one kernel for `op`, sorted ("CPU", "GPU").
  std::vector<std::string> device_types(std::string_view op) const;

  // Every built-in kernel (built once, on first use) plus what was added since.
  static kernel_registry& builtin();

 private:
  struct registration {
    std::string device_type;
    std::vector<type_constraint> constraints;
    kernel_factory factory;
  };
  const registration* find(const std::string& device_type, const tf::NodeDef& node) const;

  std::map<std::string, std::vector<registration>, std::less<>> kernels_;
};

namespace detail {
template <template <class> class Kernel, class... Ts>
void add_typed_kernels(kernel_registry& registry, const std::string& op, const std::string& attr,
                       const std::string& device, type_list<Ts...>) {
  (registry.add(op, device, {{attr, dtype_of<Ts>}}, make_kernel<Kernel<Ts>>), ...);
}
template <template <class> class Kernel, class T, class... Indices>
void add_indexed_kernels(kernel_registry& registry, const std::string& op, const std::string& device,
                         type_list<Indices...>) {
  (registry.add(op, device, {{"T", dtype_of<T>}, {"Tidx", dtype_of<Indices>}}, make_kernel<Kernel<T>>), ...);
}
template <template <class> class Kernel, class... Ts>
void add_reduction_kernels(kernel_registry& registry, const std::string& op, const std::string& device,
                           type_list<Ts...>) {
  (add_indexed_kernels<Kernel, Ts>(registry, op, device, index_types{}), ...);
}
}  // namespace detail

// Registers `Kernel<T>` for op on `device` for each T in List, constrained on attribute
// `attr`. (No generic lambda here: GCC 12 gives a lambda inside this template weak
// linkage even when Kernel is in an anonymous namespace, so two files with kernels of the
// same name would register one file's kernels twice.)
template <template <class> class Kernel, class List>
void add_typed_kernels(kernel_registry& registry, const std::string& op,
                       const std::string& attr = "T", const std::string& device = "CPU") {
  detail::add_typed_kernels<Kernel>(registry, op, attr, device, List{});
}

// Registers `Kernel<T>` for a reduction op on `device` for each T in List and each index
// dtype of its axes operand (attributes T and Tidx).
template <template <class> class Kernel, class List>
void add_reduction_kernels(kernel_registry& registry, const std::string& op, const std::string& device) {
  detail::add_reduction_kernels<Kernel>(registry, op, device, List{});
}

}  // namespace troupe::kernels
