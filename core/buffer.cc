#include "core/buffer.h"

#include "core/memory.h"
#include "core/status.h"

#include <sys/mman.h>

#include <array>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace troupe {
namespace {

// Size classes: 64-byte granules below 256 bytes, then four classes per power of two.
constexpr int k_num_classes = 4 * 48;

std::size_t class_of(std::size_t bytes, std::size_t* class_bytes) {
  if (bytes <= 256) {
    std::size_t granules = (bytes + 63) / 64;
    if (granules == 0) granules = 1;
    *class_bytes = granules * 64;
    return granules - 1;  // classes 0..3
  }
  int log2 = 63 - __builtin_clzll(bytes - 1);  // bytes in (2^log2, 2^(log2+1)]
  std::size_t base = std::size_t{1} << log2;
  std::size_t quarter = base / 4;
  std::size_t step = (bytes - base + quarter - 1) / quarter;  // 1..4
  *class_bytes = base + step * quarter;
  return static_cast<std::size_t>(4 * (log2 - 7)) + step - 1 + 4;
}

struct size_class_cache {
  std::mutex mutex;
  std::vector<void*> blocks;
};

struct cache {
  std::array<size_class_cache, k_num_classes> classes;
  std::atomic<std::int64_t> bytes_cached{0};
  std::atomic<std::int64_t> allocations{0};
  std::atomic<std::int64_t> hits{0};
  std::int64_t limit;

  cache() {
    const char* mb = std::getenv("TROUPE_ALLOCATOR_CACHE_MB");
    limit = (mb ? std::atoll(mb) : 2048) * (std::int64_t{1} << 20);
  }
};

cache& the_cache() {
  static cache* c = new cache();  // never destroyed: buffers may outlive static teardown
  return *c;
}

std::size_t class_size(std::size_t cls) {
  if (cls < 4) return (cls + 1) * 64;
  std::size_t k = cls - 4;
  int log2 = static_cast<int>(k / 4) + 8;
  std::size_t base = std::size_t{1} << (log2 - 1);
  return base + (k % 4 + 1) * (base / 4);
}

}  // namespace

static_assert(sizeof(buffer) <= buffer::k_alignment, "the header must fit before the data");

buffer* buffer::allocate(std::size_t bytes) {
  auto& c = the_cache();
  c.allocations.fetch_add(1, std::memory_order_relaxed);
  memory_account& account = current_account();
  if (bytes > (std::size_t{1} << 62)) {
    throw allocation_error(str_cat("cannot allocate ", bytes, " bytes"), "more than any machine has");
  }
  account.charge(static_cast<std::int64_t>(bytes));  // throws when it does not fit
  std::size_t capacity = 0;
  std::size_t cls = class_of(bytes, &capacity);
  void* block = nullptr;
  if (cls < k_num_classes) {
    auto& sc = c.classes[cls];
    std::lock_guard<std::mutex> lock(sc.mutex);
    if (!sc.blocks.empty()) {
      block = sc.blocks.back();
      sc.blocks.pop_back();
    }
  }
  if (block != nullptr) {
    c.hits.fetch_add(1, std::memory_order_relaxed);
    c.bytes_cached.fetch_sub(static_cast<std::int64_t>(capacity), std::memory_order_relaxed);
  } else {
    // The header lives in the first 64 bytes, the data after it.
    block = std::aligned_alloc(k_alignment, capacity + k_alignment);
    if (block == nullptr) {
      account.release(static_cast<std::int64_t>(bytes));
      throw allocation_error(str_cat("cannot allocate ", describe_bytes(static_cast<std::int64_t>(bytes))),
                             "the system has no memory left");
    }
    if (capacity >= (std::size_t{2} << 20)) madvise(block, capacity + k_alignment, MADV_HUGEPAGE);
  }
  account.ref();
  return new (block) buffer(static_cast<char*>(block) + k_alignment, bytes, cls, &account);
}

buffer* buffer::adopt(void* data, std::size_t bytes, external_memory* owner) {
  // The header cannot live beside memory the host may not touch: it is a block of its own.
  return new (::operator new(sizeof(buffer), std::align_val_t{k_alignment}))
      buffer(data, bytes, k_num_classes, nullptr, owner);
}

void prefault(void* data, std::size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  const std::uintptr_t page = 4096;
  const std::uintptr_t begin = (reinterpret_cast<std::uintptr_t>(data) + page - 1) & ~(page - 1);
  const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~(page - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)data;
  (void)bytes;
#endif
}

void buffer::unref() const {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (destroy_ != nullptr) destroy_(data_, size_);
  if (owner_ != nullptr) {
    owner_->release(data_, size_);
    void* header = const_cast<buffer*>(this);
    this->~buffer();
    ::operator delete(header, std::align_val_t{k_alignment});
    return;
  }
  auto& c = the_cache();
  std::size_t cls = class_;
  memory_account* account = account_;
  account->release(static_cast<std::int64_t>(size_));
  account->unref();
  void* block = const_cast<buffer*>(this);
  this->~buffer();
  if (cls < k_num_classes) {
    auto capacity = static_cast<std::int64_t>(class_size(cls));
    if (c.bytes_cached.load(std::memory_order_relaxed) + capacity <= c.limit) {
      c.bytes_cached.fetch_add(capacity, std::memory_order_relaxed);
      auto& sc = c.classes[cls];
      std::lock_guard<std::mutex> lock(sc.mutex);
      sc.blocks.push_back(block);
      return;
    }
  }
  std::free(block);
}

allocator_stats get_allocator_stats() {
  auto& c = the_cache();
  return {c.allocations.load(), c.hits.load(), c.bytes_cached.load()};
}

}  // namespace troupe
