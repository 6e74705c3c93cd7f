#include "kernels/cuda/gpu_device.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/memory.h"
#include "core/switches.h"

namespace troupe::kernels::gpu {

status cuda_status(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return status();
  std::string message = str_cat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  if (e == cudaErrorMemoryAllocation) return resource_exhausted_error(message);
  return internal_error(message);
}

status cublas_status(cublasStatus_t e, std::string_view what) {
  if (e == CUBLAS_STATUS_SUCCESS) return status();
  std::string message = str_cat(what, ": ", cublasGetStatusName(e), " (", cublasGetStatusString(e), ")");
  if (e == CUBLAS_STATUS_ALLOC_FAILED) return resource_exhausted_error(message);
  return internal_error(message);
}

status cudnn_status(cudnnStatus_t e, std::string_view what) {
  if (e == CUDNN_STATUS_SUCCESS) return status();
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string message = str_cat(what, ": ", cudnnGetErrorString(e), detail[0] != 0 ? " (" : "", detail,
                                detail[0] != 0 ? ")" : "");
  if (e == CUDNN_STATUS_ALLOC_FAILED) return resource_exhausted_error(message);
  return internal_error(message);
}

namespace {

struct gpu_census {
  int count = 0;
  std::string reason;
};

const gpu_census& census() {
  static const gpu_census c = [] {
    gpu_census result;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      result.reason = str_cat("no usable GPU: cudaGetDeviceCount says ", cudaGetErrorName(e), " (",
                              cudaGetErrorString(e), ")");
      (void)cudaGetLastError();
      return result;
    }
    if (n == 0) result.reason = "no GPU on this machine";
    result.count = n;
    return result;
  }();
  return c;
}

// Sizes are rounded to 512 bytes below 1 MiB and to a quarter of their power of two
// above, so that freed blocks fit later requests of about the same size.
constexpr std::size_t k_small = std::size_t{1} << 20;

}  // namespace

int device_count() { return census().count; }

bool allow_tf32() {
  static const bool allowed = env_switch("TROUPE_ALLOW_TF32", false);
  return allowed;
}
std::string no_gpu_reason() { return census().reason; }

// --- device_allocator ---

device_allocator::device_allocator(int ordinal, std::string device_name)
    : ordinal_(ordinal), device_name_(std::move(device_name)) {}

device_allocator::~device_allocator() { empty_cache(); }

std::size_t device_allocator::rounded(std::size_t bytes) {
  if (bytes < k_small) return (std::max<std::size_t>(bytes, 1) + 511) / 512 * 512;
  std::size_t power = std::size_t{1} << (63 - __builtin_clzll(bytes));
  std::size_t quarter = power / 4;
  return (bytes + quarter - 1) / quarter * quarter;
}

void* device_allocator::allocate(std::size_t bytes) {
  const std::size_t capacity = rounded(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.allocations;
    auto it = cached_.find(capacity);
    if (it != cached_.end()) {
      void* block = it->second;
      cached_.erase(it);
      ++stats_.cache_hits;
      stats_.bytes_cached -= static_cast<std::int64_t>(capacity);
      stats_.bytes_in_use += static_cast<std::int64_t>(capacity);
      stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
      return block;
    }
  }
  (void)cudaSetDevice(ordinal_);
  void* block = nullptr;
  cudaError_t e = cudaMalloc(&block, capacity);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    empty_cache();
    e = cudaMalloc(&block, capacity);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    std::lock_guard<std::mutex> lock(mutex_);
    throw allocation_error(str_cat("cannot allocate ", describe_bytes(static_cast<std::int64_t>(bytes)), " on ",
                                   device_name_),
                           str_cat(cudaGetErrorName(e), " with ", describe_bytes(stats_.bytes_in_use),
                                   " in use by troupe"));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_[block] = capacity;
  stats_.bytes_in_use += static_cast<std::int64_t>(capacity);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return block;
}

void device_allocator::release(void* data, std::size_t) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = capacity_.find(data);
  if (it == capacity_.end()) return;  // not ours: nothing safe to do
  cached_.emplace(it->second, data);
  stats_.bytes_in_use -= static_cast<std::int64_t>(it->second);
  stats_.bytes_cached += static_cast<std::int64_t>(it->second);
}

void device_allocator::empty_cache() {
  std::multimap<std::size_t, void*> blocks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks.swap(cached_);
    for (const auto& [capacity, block] : blocks) capacity_.erase(block);
    stats_.bytes_cached = 0;
  }
  if (blocks.empty()) return;
  (void)cudaSetDevice(ordinal_);
  // Cached blocks may still be read by queued work of the compute stream.
  (void)cudaDeviceSynchronize();
  for (const auto& [capacity, block] : blocks) (void)cudaFree(block);
}

device_allocator::stats device_allocator::get_stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

// --- pinned_allocator ---

pinned_allocator::~pinned_allocator() {
  for (const auto& [capacity, block] : cached_) (void)cudaFreeHost(block);
}

void* pinned_allocator::allocate(std::size_t bytes) {
  const std::size_t capacity = std::max<std::size_t>((bytes + 4095) / 4096 * 4096, 4096);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cached_.lower_bound(capacity);
    if (it != cached_.end() && it->first <= capacity * 2) {
      void* block = it->second;
      cached_.erase(it);
      return block;
    }
  }
  void* block = nullptr;
  cudaError_t e = cudaHostAlloc(&block, capacity, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw allocation_error(str_cat("cannot allocate ", describe_bytes(static_cast<std::int64_t>(bytes)),
                                   " of pinned host memory for ", device_name_),
                           cudaGetErrorName(e));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_[block] = capacity;
  return block;
}

void pinned_allocator::release(void* data, std::size_t) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = capacity_.find(data);
  if (it != capacity_.end()) cached_.emplace(it->second, data);
}

// --- gpu_device ---

gpu_device::gpu_device(std::string name, int ordinal) : device(std::move(name), "GPU"), ordinal_(ordinal) {}

result<std::unique_ptr<gpu_device>> gpu_device::create(std::string name, int ordinal) {
  if (ordinal < 0 || ordinal >= device_count()) {
    return not_found_error("cannot make ", name, ": there is no GPU ", ordinal,
                           device_count() == 0 ? str_cat(" (", no_gpu_reason(), ")")
                                               : str_cat(" (this machine has ", device_count(), ")"));
  }
  std::unique_ptr<gpu_device> d(new gpu_device(std::move(name), ordinal));
  TROUPE_RETURN_IF_ERROR(d->init().with_context(str_cat("initializing ", d->name())));
  return d;
}

status gpu_device::init() {
  TROUPE_RETURN_IF_ERROR(activate());
  TROUPE_RETURN_IF_ERROR(cuda_status(cudaGetDeviceProperties(&properties_, ordinal_), "cudaGetDeviceProperties"));
  for (cudaStream_t* s : {&compute_, &h2d_, &d2h_}) {
    TROUPE_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate"));
  }
  TROUPE_RETURN_IF_ERROR(cublas_status(cublasCreate(&cublas_), "cublasCreate"));
  TROUPE_RETURN_IF_ERROR(cublas_status(cublasSetStream(cublas_, compute_), "cublasSetStream"));
  TROUPE_RETURN_IF_ERROR(cudnn_status(cudnnCreate(&cudnn_), "cudnnCreate"));
  TROUPE_RETURN_IF_ERROR(cudnn_status(cudnnSetStream(cudnn_, compute_), "cudnnSetStream"));
  device_memory_ = std::make_unique<device_allocator>(ordinal_, name());
  pinned_memory_ = std::make_unique<pinned_allocator>(name());
  poller_ = std::thread([this] { poller_loop(); });
  return status();
}

gpu_device::~gpu_device() {
  if (compute_ != nullptr) (void)synchronize();
  {
    std::lock_guard<std::mutex> lock(poll_mutex_);
    stopping_ = true;
  }
  poll_wake_.notify_all();
  if (poller_.joinable()) poller_.join();
  (void)cudaSetDevice(ordinal_);
  for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  // Resources (variables) may hold device tensors: drop them before the allocator goes.
  resources().clear();
  device_memory_.reset();
  pinned_memory_.reset();
  for (cudaStream_t s : {compute_, h2d_, d2h_}) {
    if (s != nullptr) (void)cudaStreamDestroy(s);
  }
}

status gpu_device::activate() const { return cuda_status(cudaSetDevice(ordinal_), "cudaSetDevice"); }

tensor gpu_device::allocate(dtype type, tensor_shape shape) {
  const std::size_t bytes = static_cast<std::size_t>(shape.num_elements()) * dtype_size(type);
  void* data = device_memory_->allocate(bytes);
  return tensor(type, std::move(shape), buffer::adopt(data, bytes, device_memory_.get()));
}

tensor gpu_device::allocate_pinned(dtype type, tensor_shape shape) {
  const std::size_t bytes = static_cast<std::size_t>(shape.num_elements()) * dtype_size(type);
  void* data = pinned_memory_->allocate(bytes);
  return tensor(type, std::move(shape), buffer::adopt(data, bytes, pinned_memory_.get()));
}

void gpu_device::poll_event(cudaStream_t stream, std::function<void(status)> done) {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(poll_mutex_);
    if (!free_events_.empty()) {
      event = free_events_.back();
      free_events_.pop_back();
    }
  }
  status s = activate();
  if (s.ok() && event == nullptr) {
    s = cuda_status(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  }
  if (s.ok()) s = cuda_status(cudaEventRecord(event, stream), "cudaEventRecord");
  if (!s.ok()) {
    done(std::move(s));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(poll_mutex_);
    pending_.push_back({event, std::move(done)});
  }
  poll_wake_.notify_one();
}

void gpu_device::poller_loop() {
  (void)cudaSetDevice(ordinal_);
  std::unique_lock<std::mutex> lock(poll_mutex_);
  for (;;) {
    poll_wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, and nothing left
    // Events complete in order on one stream but not across streams: look at every one.
    for (auto it = pending_.begin(); it != pending_.end();) {
      cudaError_t e = cudaEventQuery(it->event);
      if (e == cudaErrorNotReady) {
        ++it;
        continue;
      }
      pending finished = std::move(*it);
      pending_.erase(it);
      lock.unlock();
      finished.done(cuda_status(e, str_cat("the GPU work of ", name())));
      lock.lock();
      free_events_.push_back(finished.event);
      it = pending_.begin();  // the queue may have changed while unlocked
    }
    if (!pending_.empty()) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(stopping_ ? 0 : 20));
      lock.lock();
    }
  }
}

result<tensor> gpu_device::to_device(const tensor& host) {
  if (!host.on_host()) return invalid_argument_error("to_device: the tensor is already in a device's memory");
  TROUPE_RETURN_IF_ERROR(activate());
  tensor out = allocate(host.type(), host.shape());
  if (host.byte_size() == 0) return out;
  // Staged through pinned memory so that the copy is asynchronous; the stage lives until
  // the copy has run (the poller drops it).
  tensor stage = allocate_pinned(host.type(), host.shape());
  std::memcpy(stage.raw_data(), host.raw_data(), host.byte_size());
  cudaEvent_t ready = nullptr;
  // The destination block may have been freed by compute-stream work still queued: the
  // copy waits for the compute stream, and the compute stream for the copy.
  TROUPE_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate"));
  status s = cuda_status(cudaEventRecord(ready, compute_), "cudaEventRecord");
  if (s.ok()) s = cuda_status(cudaStreamWaitEvent(h2d_, ready, 0), "cudaStreamWaitEvent");
  if (s.ok()) {
    s = cuda_status(cudaMemcpyAsync(out.raw_data(), stage.raw_data(), host.byte_size(), cudaMemcpyHostToDevice, h2d_),
                    "cudaMemcpyAsync to the GPU");
  }
  if (s.ok()) s = cuda_status(cudaEventRecord(ready, h2d_), "cudaEventRecord");
  if (s.ok()) s = cuda_status(cudaStreamWaitEvent(compute_, ready, 0), "cudaStreamWaitEvent");
  (void)cudaEventDestroy(ready);  // released once the waits it was recorded for are done
  TROUPE_RETURN_IF_ERROR(s);
  poll_event(h2d_, [stage = std::move(stage)](status) mutable { stage = tensor(); });
  return out;
}

void gpu_device::to_host(const tensor& t, std::function<void(result<tensor>)> done) {
  if (t.on_host()) {
    done(t);
    return;
  }
  tensor out;
  status s;
  try {
    out = allocate_pinned(t.type(), t.shape());
  } catch (const allocation_error& e) {
    s = e.to_status();
  }
  cudaEvent_t ready = nullptr;
  if (s.ok()) s = activate();
  if (s.ok()) s = cuda_status(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
  if (s.ok()) s = cuda_status(cudaEventRecord(ready, compute_), "cudaEventRecord");
  if (s.ok()) s = cuda_status(cudaStreamWaitEvent(d2h_, ready, 0), "cudaStreamWaitEvent");
  if (ready != nullptr) (void)cudaEventDestroy(ready);
  if (s.ok() && t.byte_size() > 0) {
    s = cuda_status(cudaMemcpyAsync(out.raw_data(), t.raw_data(), t.byte_size(), cudaMemcpyDeviceToHost, d2h_),
                    "cudaMemcpyAsync from the GPU");
  }
  if (!s.ok()) {
    done(std::move(s));
    return;
  }
  // The source stays alive until the copy has run.
  poll_event(d2h_, [source = t, out = std::move(out), done = std::move(done)](status s) mutable {
    source = tensor();
    if (!s.ok()) {
      done(std::move(s));
    } else {
      done(std::move(out));
    }
  });
}

void gpu_device::when_done(std::function<void(status)> done) { poll_event(compute_, std::move(done)); }

status gpu_device::synchronize() {
  TROUPE_RETURN_IF_ERROR(activate());
  status first;
  for (cudaStream_t s : {compute_, h2d_, d2h_}) {
    status r = cuda_status(cudaStreamSynchronize(s), str_cat("the GPU work of ", name()));
    if (first.ok() && !r.ok()) first = r;
  }
  return first;
}

result<tensor> gpu_device::to_host_blocking(const tensor& t) {
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  result<tensor> out = internal_error("to_host_blocking: no answer");
  to_host(t, [&](result<tensor> r) {
    std::lock_guard<std::mutex> lock(m);
    out = std::move(r);
    finished = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return finished; });
  return out;
}

}  // namespace troupe::kernels::gpu
