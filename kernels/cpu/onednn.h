// What the oneDNN paths of the CPU kernels share (kernels/cpu/onednn_conv.h, MatMul's
// sgemm): the thread budget, the engine, batch chunks, running a primitive, reorders and
// a cache of built primitives. (Pooling stays on pool_kernels.cc's loops: oneDNN's NHWC
// pooling measured no faster on LeNet's 6- and 16-channel layers, and MaxPoolGrad would
// have to rerun the forward pass for its workspace.)
//
// One thread budget: Debian builds oneDNN on OpenMP, and oneDNN sizes its parallel
// regions by the calling thread's OpenMP thread count, both when a primitive is built and
// when it (or dnnl_sgemm) runs. Kernels split their work over the compute pool themselves
// (a batch into one chunk per pool thread, a product into row blocks), so every thread
// that calls oneDNN first sets its own OpenMP count to one: an OpenMP team per kernel
// would fight the pool for the cores.
//
// Primitives use user-managed scratchpads (per thread), so one primitive may run on
// several threads at once.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/tensor.h"

namespace troupe::kernels::onednn {

// Caps oneDNN's instruction set at AVX2 when TROUPE_HIDE_AVX512 hides AVX-512
// (kernels/cpu/cpu_features.h). Only the first call does anything; it must come before
// oneDNN builds or runs anything, so cpu_engine() and single_threaded_openmp() call it.
void apply_isa_limit();

// Makes oneDNN calls from this thread single-threaded. Cheap after the first call.
inline void single_threaded_openmp() {
  thread_local bool done = false;
  if (done) return;
  apply_isa_limit();
  omp_set_num_threads(1);
  done = true;
}

const dnnl::engine& cpu_engine();

// A batch split into `chunks` parts of `per_chunk` images (the last one possibly smaller),
// one per pool thread.
struct batch_split {
  std::int64_t chunks = 1, per_chunk = 1;
  std::int64_t size(std::int64_t i, std::int64_t batch) const {
    return std::min(per_chunk, batch - i * per_chunk);
  }
};
// REQUIRES: batch >= 1.
batch_split split_batch(std::int64_t batch, int threads);

// Runs `primitive` on this thread with `args`, adding a scratchpad of this thread when
// `scratchpad` is not empty. Throws dnnl::error.
void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad,
             std::unordered_map<int, dnnl::memory> args);

// A memory object over `data` (oneDNN does not write inputs through it).
inline dnnl::memory memory(const dnnl::memory::desc& desc, const float* data) {
  return dnnl::memory(desc, cpu_engine(), const_cast<float*>(data));
}

// An uninitialized float tensor of at least `desc`'s bytes (from the tensor allocator, which
// reuses freed buffers; fresh pages cost more than the work they would hold).
tensor float_buffer(const dnnl::memory::desc& desc);

// A reorder from one layout to another, built once and run many times (building one
// costs more than running it on a LeNet-sized chunk). Empty when both layouts hold the
// same bytes at the same offsets, in which case there is nothing to run.
class prepared_reorder {
 public:
  prepared_reorder() = default;
  // Throws dnnl::error.
  prepared_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to);

  bool empty() const { return !primitive_; }
  const dnnl::memory::desc& from() const { return from_; }
  const dnnl::memory::desc& to() const { return to_; }
  // Copies `from` (layout from()) to `to` (layout to()). REQUIRES: !empty(). Throws
  // dnnl::error.
  void run(const float* from, float* to) const;

 private:
  dnnl::memory::desc from_, to_, scratchpad_;
  dnnl::primitive primitive_;
};

// True when `a` and `b` place every element at the same byte offset (e.g. NHWC and
// oneDNN's nChw16c when C is 16), so that memory in one can be read as the other.
bool same_bytes(const dnnl::memory::desc& a, const dnnl::memory::desc& b);

// Built primitives by geometry: `find` returns the entry for `key`, building it with
// `build` (which returns null when oneDNN has no primitive; that answer is cached too).
// Dropped whole if a process cycles through very many geometries.
template <class Entry>
class primitive_cache {
 public:
  using key = std::array<std::int64_t, 16>;

  std::shared_ptr<Entry> find(const key& k, const std::function<std::shared_ptr<Entry>()>& build) {
    constexpr std::size_t k_max_entries = 512;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(k);
    if (it != entries_.end()) return it->second;
    if (entries_.size() >= k_max_entries) entries_.clear();
    single_threaded_openmp();  // primitives are built for the thread count they will run with
    auto entry = build();
    entries_.emplace(k, entry);
    return entry;
  }

 private:
  std::mutex mutex_;
  std::map<key, std::shared_ptr<Entry>> entries_;
};

}  // namespace troupe::kernels::onednn
