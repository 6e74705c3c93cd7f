#include "kernels/cpu/onednn.h"

#include <vector>

namespace troupe::kernels::onednn {

namespace {

// Scratch memory of the calling thread, grown as needed.
void* thread_scratch(std::size_t bytes) {
  thread_local std::vector<char> scratch;
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch.data();
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

}  // namespace

const dnnl::engine& cpu_engine() {
  // Never destroyed, like the primitive caches built on it: no order of destruction at
  // exit to get wrong.
  static const auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

batch_split split_batch(std::int64_t batch, int threads) {
  batch_split s;
  s.chunks = std::clamp<std::int64_t>(threads, 1, batch);
  s.per_chunk = (batch + s.chunks - 1) / s.chunks;
  s.chunks = (batch + s.per_chunk - 1) / s.per_chunk;
  return s;
}

void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad,
             std::unordered_map<int, dnnl::memory> args) {
  single_threaded_openmp();
  if (const std::size_t bytes = scratchpad.get_size(); bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad, cpu_engine(), thread_scratch(bytes)));
  }
  dnnl::stream& stream = thread_stream();
  primitive.execute(stream, args);
  stream.wait();
}

tensor float_buffer(const dnnl::memory::desc& desc) {
  const std::size_t floats = (desc.get_size() + sizeof(float) - 1) / sizeof(float);
  return tensor(dtype::float32, tensor_shape{static_cast<std::int64_t>(floats)});
}

void reorder(const dnnl::memory::desc& from_desc, const float* from,
             const dnnl::memory::desc& to_desc, float* to) {
  single_threaded_openmp();
  dnnl::memory src = memory(from_desc, from);
  dnnl::memory dst(to_desc, cpu_engine(), to);
  dnnl::stream& stream = thread_stream();
  dnnl::reorder(src, dst).execute(stream, src, dst);
  stream.wait();
}

}  // namespace troupe::kernels::onednn
