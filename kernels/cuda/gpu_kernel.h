// The base of GPU kernels: the device they run on, outputs in its memory, inputs that
// stay in host memory, and CUDA errors turned into statuses.
//
// A GPU kernel enqueues its work on the device's compute stream and returns; it never
// waits for the GPU. Inputs and outputs are device tensors, except the inputs a kernel
// names with declare_host_memory_input() in its constructor (shapes, axes, sizes: what the kernel
// must read on the host to decide what to launch), which the runtime gives it in host
// memory (TensorFlow's HostMemory):
//
//   class fill_kernel final : public gpu_kernel {
//    public:
//     explicit fill_kernel(kernel_construction& c) : gpu_kernel(c) { declare_host_memory_input(0); }
//     void compute(kernel_context& ctx) override {
//       if (!begin(ctx)) return;
//       tensor& out = allocate_output(ctx, 0, shape_from(ctx.input(0)));
//       launch_fill(out.data<float>(), ..., stream());
//       check_launch(ctx, "Fill");
//     }
//   };
//
// The code that runs on the GPU lives in .cu files behind plain C++ launch functions
// (pointers, sizes, a cudaStream_t), so that only they are compiled by nvcc.
#pragma once

#include <algorithm>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/cuda/gpu_device.h"
#include "kernels/kernel.h"

namespace troupe::kernels::gpu {

class gpu_kernel : public op_kernel {
 public:
  // Fails construction when the kernel is not being built for a GPU device.
  explicit gpu_kernel(kernel_construction& c) : op_kernel(c) {
    gpu_ = c.device() == nullptr ? nullptr : dynamic_cast<gpu_device*>(c.device()->accelerator());
    if (gpu_ == nullptr) {
      c.fail(failed_precondition_error("the GPU kernel of ", c.node().op(), " needs a GPU device, not ",
                                       c.device() == nullptr ? std::string("none") : c.device()->name()));
    }
  }

  // Device memory, except the inputs declared with declare_host_memory_input().
  memory input_memory(int i) const override {
    return std::find(host_inputs_.begin(), host_inputs_.end(), i) != host_inputs_.end() ? memory::host : memory::device;
  }
  // Enqueuing costs microseconds: the executor runs GPU kernels inline.
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 protected:
  // Declares input `i` as read in host memory. Call in the constructor.
  void declare_host_memory_input(int i) { host_inputs_.push_back(i); }

  gpu_device& gpu() const { return *gpu_; }
  cudaStream_t stream() const { return gpu_->compute_stream(); }

  // Makes the device current on this thread; false (ctx failed) on error. Call first.
  bool begin(kernel_context& ctx) const { return check(ctx, gpu_->activate()); }

  // Output i in device memory, with its declared dtype (uninitialized).
  tensor& allocate_output(kernel_context& ctx, int i, tensor_shape shape) const {
    ctx.set_output(i, gpu_->allocate(ctx.output_type(i), std::move(shape)));
    return ctx.output(i);
  }
  // A device tensor for intermediate results, alive while the caller holds it (queued
  // work that uses it is safe: its memory is reused only by later compute-stream work).
  tensor allocate_temp(dtype type, tensor_shape shape) const { return gpu_->allocate(type, std::move(shape)); }

  // Fails ctx with s (naming what failed) and returns false when s is an error.
  static bool check(kernel_context& ctx, const status& s) {
    if (s.ok()) return true;
    ctx.fail(s);
    return false;
  }
  static bool check(kernel_context& ctx, cudaError_t e, std::string_view what) { return check(ctx, cuda_status(e, what)); }
  static bool check(kernel_context& ctx, cublasStatus_t e, std::string_view what) {
    return check(ctx, cublas_status(e, what));
  }
  static bool check(kernel_context& ctx, cudnnStatus_t e, std::string_view what) { return check(ctx, cudnn_status(e, what)); }
  // After a kernel launch: the launch's own error (a bad configuration), if any.
  static bool check_launch(kernel_context& ctx, std::string_view what) {
    return check(ctx, cudaGetLastError(), str_cat("launching ", what));
  }

 private:
  gpu_device* gpu_ = nullptr;
  std::vector<int> host_inputs_;
};

}  // namespace troupe::kernels::gpu
