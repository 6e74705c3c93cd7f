// Runs GPU kernels outside any graph, as kernel_runner.h does for the CPU: for the
// consistency test, benchmarks and tools.
//
//   auto dev = gpu::gpu_device::create("/job:localhost/replica:0/task:0/device:GPU:0", 0);
//   auto outputs = gpu::run_gpu_kernel(**dev, node, {a, b});  // host tensors in and out
//
// For timing, prepare once and enqueue many times on device tensors:
//
//   auto k = gpu::prepare_gpu_kernel(**dev, node, device_inputs);
//   for (...) auto out = gpu::enqueue(*k, device_inputs);  // returns at once
//   dev->synchronize();
#pragma once

#include <memory>
#include <vector>

#include "kernels/cuda/gpu_device.h"
#include "kernels/kernel_registry.h"
#include "kernels/kernel_runner.h"

namespace troupe::kernels::gpu {

struct prepared_gpu_kernel {
  gpu_device* device = nullptr;
  checked_node node;
  std::unique_ptr<op_kernel> kernel;
  // Where the kernel reads each input (op_kernel::input_memory).
  std::vector<op_kernel::memory> input_memory;
};

// Instantiates the GPU kernel of `node` on `device` for inputs of `inputs`' dtypes (only
// their dtypes are read). Errors: the node's (check_node), no GPU kernel, construction.
result<prepared_gpu_kernel> prepare_gpu_kernel(gpu_device& device, tf::NodeDef node,
                                               const std::vector<tensor>& inputs,
                                               const kernel_registry& kernels = kernel_registry::builtin());

// Enqueues one run on the compute stream and returns the outputs (device tensors, valid in
// stream order). Inputs: device tensors, host tensors for host-memory inputs.
result<std::vector<tensor>> enqueue(prepared_gpu_kernel& k, const std::vector<tensor>& inputs);

// Copies host `inputs` to the GPU (all but host-memory inputs), runs the kernel, copies
// the outputs back and waits: host tensors out. Errors also include the GPU's own.
result<std::vector<tensor>> run_gpu_kernel(gpu_device& device, tf::NodeDef node, const std::vector<tensor>& inputs,
                                           const kernel_registry& kernels = kernel_registry::builtin());

}  // namespace troupe::kernels::gpu
