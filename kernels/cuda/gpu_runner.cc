#include "kernels/cuda/gpu_runner.h"

namespace troupe::kernels::gpu {

result<prepared_gpu_kernel> prepare_gpu_kernel(gpu_device& device, tf::NodeDef node,
                                               const std::vector<tensor>& inputs,
                                               const kernel_registry& kernels) {
  auto checked = check_node(std::move(node), inputs);
  if (!checked.ok()) return checked.error();
  auto kernel = kernels.create("GPU", checked->node, *checked->op, checked->input_types, checked->output_types,
                               &device);
  if (!kernel.ok()) return kernel.error();
  prepared_gpu_kernel k;
  k.device = &device;
  for (std::size_t i = 0; i < inputs.size(); ++i) k.input_memory.push_back((*kernel)->input_memory(static_cast<int>(i)));
  k.node = std::move(*checked);
  k.kernel = std::move(*kernel);
  return k;
}

result<std::vector<tensor>> enqueue(prepared_gpu_kernel& k, const std::vector<tensor>& inputs) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const op_kernel::memory want = k.input_memory[i];
    if (want != op_kernel::memory::any && inputs[i].on_host() != (want == op_kernel::memory::host)) {
      return invalid_argument_error("node '", k.node.node.name(), "' (", k.node.node.op(), ") input ", i,
                                    " must be in ", want == op_kernel::memory::host ? "host" : "device", " memory");
    }
  }
  return compute_once(*k.kernel, k.node, inputs);
}

result<std::vector<tensor>> run_gpu_kernel(gpu_device& device, tf::NodeDef node, const std::vector<tensor>& inputs,
                                           const kernel_registry& kernels) {
  auto k = prepare_gpu_kernel(device, std::move(node), inputs, kernels);
  if (!k.ok()) return k.error();
  std::vector<tensor> placed;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (k->input_memory[i] != op_kernel::memory::device) {
      placed.push_back(inputs[i]);
      continue;
    }
    try {
      auto d = device.to_device(inputs[i]);
      if (!d.ok()) return d.error();
      placed.push_back(std::move(*d));
    } catch (const allocation_error& e) {
      return e.to_status();
    }
  }
  auto outputs = enqueue(*k, placed);
  if (!outputs.ok()) return outputs.error();
  std::vector<tensor> host;
  for (const tensor& t : *outputs) {
    auto h = device.to_host_blocking(t);
    if (!h.ok()) return h.error().with_context(str_cat("node '", k->node.node.name(), "' (", k->node.node.op(), ")"));
    host.push_back(std::move(*h));
  }
  TROUPE_RETURN_IF_ERROR(device.synchronize().with_context(str_cat("node '", k->node.node.name(), "'")));
  return host;
}

}  // namespace troupe::kernels::gpu
