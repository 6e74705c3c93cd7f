#include "kernels/cpu/onednn.h"

#include <cstdio>
#include <vector>

#include "kernels/cpu/cpu_features.h"

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

void apply_isa_limit() {
  static const bool applied = [] {
    if (!avx512_hidden()) return true;
    try {
      dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
    } catch (const dnnl::error& e) {  // oneDNN already dispatched: say so, once
      std::fprintf(stderr, "troupe: TROUPE_HIDE_AVX512 could not cap oneDNN at AVX2: %s\n", e.what());
    }
    return true;
  }();
  (void)applied;
}

const dnnl::engine& cpu_engine() {
  apply_isa_limit();
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

prepared_reorder::prepared_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to)
    : from_(from), to_(to) {
  if (same_bytes(from, to)) return;
  single_threaded_openmp();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to, attr);
  scratchpad_ = pd.scratchpad_desc();
  primitive_ = dnnl::reorder(pd);
}

void prepared_reorder::run(const float* from, float* to) const {
  execute(primitive_, scratchpad_, {{DNNL_ARG_FROM, memory(from_, from)}, {DNNL_ARG_TO, memory(to_, to)}});
}

bool same_bytes(const dnnl::memory::desc& a, const dnnl::memory::desc& b) {
  if (a == b) return true;
  if (a.dims() != b.dims() || a.data_type() != b.data_type() || a.get_size() != b.get_size()) return false;
  // In a blocked layout (plain ones included) an element's offset is a sum of one term
  // per dimension, each a function of that dimension's index alone; so two layouts agree
  // everywhere when those terms agree for every index of every dimension.
  const dnnl_memory_desc_t& x = a.data;
  const dnnl_memory_desc_t& y = b.data;
  if (x.format_kind != dnnl_blocked || y.format_kind != dnnl_blocked) return false;
  if (x.offset0 != y.offset0) return false;
  for (int d = 0; d < x.ndims; ++d) {
    if (x.padded_dims[d] != x.dims[d] || y.padded_dims[d] != y.dims[d]) return false;
  }
  auto offset = [](const dnnl_memory_desc_t& m, const std::vector<dnnl_dim_t>& index) {
    const dnnl_blocking_desc_t& blk = m.format_desc.blocking;
    std::vector<dnnl_dim_t> block(static_cast<std::size_t>(m.ndims), 1);
    for (int i = 0; i < blk.inner_nblks; ++i) block[static_cast<std::size_t>(blk.inner_idxs[i])] *= blk.inner_blks[i];
    dnnl_dim_t off = 0;
    for (int d = 0; d < m.ndims; ++d) {
      off += blk.strides[d] * (index[static_cast<std::size_t>(d)] / block[static_cast<std::size_t>(d)]);
    }
    // Inner blocks: the last one varies fastest.
    dnnl_dim_t inner_stride = 1;
    std::vector<dnnl_dim_t> rest = index;
    for (int d = 0; d < m.ndims; ++d) rest[static_cast<std::size_t>(d)] %= block[static_cast<std::size_t>(d)];
    for (int i = blk.inner_nblks - 1; i >= 0; --i) {
      const auto d = static_cast<std::size_t>(blk.inner_idxs[i]);
      off += (rest[d] % blk.inner_blks[i]) * inner_stride;
      rest[d] /= blk.inner_blks[i];
      inner_stride *= blk.inner_blks[i];
    }
    return off;
  };
  const auto n = static_cast<std::size_t>(x.ndims);
  for (std::size_t d = 0; d < n; ++d) {
    std::vector<dnnl_dim_t> index(n, 0);
    for (dnnl_dim_t v = 0; v < x.dims[d]; ++v) {
      index[d] = v;
      if (offset(x, index) != offset(y, index)) return false;
    }
  }
  return true;
}

}  // namespace troupe::kernels::onednn
