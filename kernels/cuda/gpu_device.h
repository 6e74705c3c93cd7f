// A GPU device as kernels see it: its CUDA streams, its cuBLAS and cuDNN handles, a
// caching allocator for device memory and one for pinned host memory, and the copies
// between host and device.
//
// Streams and ordering. Every kernel of the device enqueues its work on the compute
// stream and returns (it never waits for the GPU): device tensors are valid in that
// stream's order, which the dataflow order of the enqueues gives. Copies to the device
// run on the host-to-device stream, copies to the host on the device-to-host stream, each
// joined to the compute stream by events. Completion reaches the host through the
// device's event poller (a thread of its own that queries events), never by blocking an
// executor or actor thread:
//
//   auto dev = gpu::gpu_device::create("/job:worker/replica:0/task:0/device:GPU:0", 0);
//   tensor x = (*dev)->to_device(host_x);            // enqueued; valid on the compute stream
//   ... kernels enqueue on (*dev)->compute_stream() ...
//   (*dev)->to_host(y, [](result<tensor> r) { ... });  // called on the poller thread
//
// Memory. Device tensors come from device_allocator: freed blocks are cached by size
// class and reused without cudaFree (a block freed while kernels that use it are still
// queued is safe to hand out again to work on the same compute stream, which runs after
// them; copies from other streams first wait for the compute stream). When cudaMalloc
// fails the cache is emptied and the allocation tried once more, then it throws
// allocation_error (RESOURCE_EXHAUSTED naming the node, as host allocations do).
// Releases never call CUDA (they may run inside a stream callback).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/device.h"

namespace troupe::kernels::gpu {

// An error status for a failed CUDA, cuBLAS or cuDNN call: INTERNAL (RESOURCE_EXHAUSTED
// for out-of-memory) naming `what` and the library's own error name and text.
status cuda_status(cudaError_t e, std::string_view what);
status cublas_status(cublasStatus_t e, std::string_view what);
status cudnn_status(cudnnStatus_t e, std::string_view what);

// True when float32 matrix products and convolutions may use TensorFloat-32 (10-bit
// mantissa inputs, float32 accumulation): env TROUPE_ALLOW_TF32=1. Off by default, as in
// PyTorch, so that float32 means float32 (TensorFlow 2 turns it on by default).
bool allow_tf32();

// The number of GPUs this process can use: 0 when there is no driver or no device
// (never fails). no_gpu_reason() says why it is 0 ("" when it is not).
int device_count();
std::string no_gpu_reason();

// Device memory of one GPU, cached by size class (as core/buffer.h does for the host).
class device_allocator final : public external_memory {
 public:
  device_allocator(int ordinal, std::string device_name);
  ~device_allocator() override;  // cudaFree of every cached block (in-use ones must be gone)

  // `bytes` of device memory (at least 256-byte aligned); 0 bytes gives a valid pointer.
  // Throws allocation_error when the GPU has no room even after the cache is emptied.
  void* allocate(std::size_t bytes);
  void release(void* data, std::size_t bytes) noexcept override;
  bool host_accessible() const override { return false; }

  struct stats {
    std::int64_t allocations = 0;  // allocate() calls
    std::int64_t cache_hits = 0;   // served from the cache
    std::int64_t bytes_in_use = 0;
    std::int64_t bytes_cached = 0;
    std::int64_t peak_bytes_in_use = 0;
  };
  stats get_stats() const;
  // cudaFree of every cached block; for tests and before a large allocation.
  void empty_cache();

 private:
  static std::size_t rounded(std::size_t bytes);
  const int ordinal_;
  const std::string device_name_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> cached_;  // by capacity
  std::map<void*, std::size_t> capacity_;     // every live or cached block's capacity
  stats stats_;
};

// Pinned (page-locked) host memory for transfers, cached by size class. Host-accessible:
// tensors over it are ordinary host tensors for everyone else.
class pinned_allocator final : public external_memory {
 public:
  explicit pinned_allocator(std::string device_name) : device_name_(std::move(device_name)) {}
  ~pinned_allocator() override;
  void* allocate(std::size_t bytes);  // throws allocation_error
  void release(void* data, std::size_t bytes) noexcept override;
  bool host_accessible() const override { return true; }

 private:
  const std::string device_name_;
  std::mutex mutex_;
  std::multimap<std::size_t, void*> cached_;
  std::map<void*, std::size_t> capacity_;
};

class gpu_device final : public device, public kernels::accelerator {
 public:
  // The GPU `ordinal` as device `name` (".../device:GPU:N"): its streams, handles and
  // allocators. Errors: no such GPU, or a CUDA/cuBLAS/cuDNN initialization failure.
  static result<std::unique_ptr<gpu_device>> create(std::string name, int ordinal);
  ~gpu_device() override;  // waits for the streams, then stops the poller

  int ordinal() const { return ordinal_; }
  cudaStream_t compute_stream() const { return compute_; }
  cublasHandle_t cublas() const { return cublas_; }  // bound to the compute stream
  cudnnHandle_t cudnn() const { return cudnn_; }     // bound to the compute stream
  // Held around every use of cudnn(): cuDNN forbids using one handle from two threads at
  // once, and every thread that runs this device's kernels shares it.
  std::mutex& cudnn_mutex() { return cudnn_mutex_; }
  const cudaDeviceProp& properties() const { return properties_; }
  device_allocator& allocator() { return *device_memory_; }

  // Makes this GPU current on the calling thread (cudaSetDevice); kernels call it first.
  status activate() const;

  // An uninitialized tensor in this GPU's memory. Throws allocation_error.
  tensor allocate(dtype type, tensor_shape shape);
  // An uninitialized host tensor in pinned memory. Throws allocation_error.
  tensor allocate_pinned(dtype type, tensor_shape shape);
  // Scratch device memory of at least `bytes` for one kernel (cuDNN's workspace), valid
  // in compute-stream order while the returned tensor lives.
  tensor scratch(std::size_t bytes) { return allocate(dtype::uint8, tensor_shape{static_cast<std::int64_t>(bytes)}); }

  // A device copy of host tensor `host`, valid in compute-stream order when this returns
  // (the copy runs on the host-to-device stream). Errors: a CUDA failure; throws
  // allocation_error. REQUIRES: host.on_host().
  result<tensor> to_device(const tensor& host) override;
  // Copies device tensor `t` to a new host tensor (pinned memory) after the work enqueued
  // on the compute stream so far, and calls done with it on the poller thread (or with
  // the error). done must be cheap: hand real work to a pool.
  void to_host(const tensor& t, std::function<void(result<tensor>)> done) override;
  // Calls done on the poller thread once everything enqueued on the compute stream so far
  // has run (ok), or with the error the GPU reported.
  void when_done(std::function<void(status)> done) override;
  // A copy of device tensor `t` on the compute stream (so after the work enqueued there).
  result<tensor> copy(const tensor& t) override;
  // A training update on the compute stream (kernels/cuda/gpu_training.cc): float and
  // double, the assign updates and the scatter-add also int32 and int64.
  status apply_update(const kernels::training_update& update, std::vector<tensor>& vars,
                      std::span<const tensor> inputs) override;
  // ResourceGather's rows on the compute stream (gpu_training.cc).
  result<tensor> gather(const tensor& params, const tensor& indices) override;
  kernels::accelerator* accelerator() override { return this; }
  // Blocks until every stream is idle; the first error (sticky or asynchronous). For
  // tests, benchmarks and shutdown: never on an executor or actor thread.
  status synchronize();

  // Blocking copy of a device tensor to the host (to_host + wait). For tests and tools.
  result<tensor> to_host_blocking(const tensor& t);

 private:
  gpu_device(std::string name, int ordinal);
  status init();
  // Records an event on `stream` and queues `done` for the poller.
  void poll_event(cudaStream_t stream, std::function<void(status)> done);
  void poller_loop();

  const int ordinal_;
  cudaDeviceProp properties_{};
  cudaStream_t compute_ = nullptr, h2d_ = nullptr, d2h_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::mutex cudnn_mutex_;
  std::unique_ptr<device_allocator> device_memory_;
  std::unique_ptr<pinned_allocator> pinned_memory_;

  struct pending {
    cudaEvent_t event;
    std::function<void(status)> done;
  };
  std::mutex poll_mutex_;
  std::condition_variable poll_wake_;
  std::deque<pending> pending_;
  std::vector<cudaEvent_t> free_events_;  // recycled (under poll_mutex_)
  bool stopping_ = false;
  std::thread poller_;
};

}  // namespace troupe::kernels::gpu
