#include "core/buffer.h"

#include "core/memory.h"
#include "core/shared_memory.h"
#include "core/status.h"

#include <pthread.h>
#include <sys/mman.h>

#include <array>
#include <memory>
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
  // Blocks of shared memory kept over the cache's limit without their pages (never freed:
  // see arena); not counted in bytes_cached, taken after `blocks`.
  std::vector<void*> bare;
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

// Shared memory for large blocks (share_large_buffers): segments of a memfd each, a header
// page (the token) and then blocks handed out in order, page-aligned. A segment's blocks
// are never returned to it: freed ones go to the cache, whatever its limit (over it,
// without their pages). A process forked from one that shares (its segments mapped
// shared with its parent's) takes nothing from them, nor from its cache of them.
constexpr std::size_t k_page = 4096;
constexpr std::size_t k_segment_bytes = std::size_t{256} << 20;
constexpr int k_max_segments = 256;

struct segment {
  std::unique_ptr<shared_region> region;
  std::uint64_t used = k_page;  // the header page (the token); under the arena's mutex
};

struct arena {
  std::atomic<std::size_t> min_bytes{0};  // 0: large blocks come from the heap
  std::atomic<bool> full{false};          // no segment could be added: the heap's from then on
  std::atomic<bool> forked{false};        // this process is a fork of the one that shares
  std::mutex mutex;                       // adding segments and taking blocks
  std::array<segment, k_max_segments> segments;
  std::atomic<int> count{0};  // segments [0, count) are complete and never change but `used`

  // A new segment of at least `bytes` (header included), or false.
  bool grow(std::size_t bytes) {
    const int n = count.load(std::memory_order_relaxed);
    if (n == k_max_segments) return false;
    segments[static_cast<std::size_t>(n)].region =
        shared_region::create("troupe-buffers", std::max(k_segment_bytes, (bytes + k_page - 1) / k_page * k_page));
    if (segments[static_cast<std::size_t>(n)].region == nullptr) return false;
    count.store(n + 1, std::memory_order_release);
    return true;
  }

  // A page-aligned block of `bytes` in shared memory, or null (none left: the heap's then).
  void* allocate(std::size_t bytes) {
    const std::size_t size = (bytes + k_page - 1) / k_page * k_page;
    std::lock_guard<std::mutex> lock(mutex);
    if (full.load(std::memory_order_relaxed)) return nullptr;
    int n = count.load(std::memory_order_relaxed);
    if (n == 0 || segments[static_cast<std::size_t>(n - 1)].used + size > segments[static_cast<std::size_t>(n - 1)].region->bytes()) {
      if (!grow(size + k_page)) {
        full.store(true, std::memory_order_relaxed);  // not tried again at every allocation
        return nullptr;
      }
      n = count.load(std::memory_order_relaxed);
    }
    segment& s = segments[static_cast<std::size_t>(n - 1)];
    void* block = s.region->base() + s.used;
    s.used += size;
    return block;
  }

  // Whether large blocks come from here now.
  bool serving(std::size_t capacity) const {
    const std::size_t from = min_bytes.load(std::memory_order_relaxed);
    return from != 0 && capacity >= from && !full.load(std::memory_order_relaxed) &&
           !forked.load(std::memory_order_relaxed);
  }

  // The segment holding `p`, or null.
  const shared_region* holding(const void* p) const {
    const int n = count.load(std::memory_order_acquire);
    const char* c = static_cast<const char*>(p);
    for (int i = 0; i < n; ++i) {
      const shared_region& r = *segments[static_cast<std::size_t>(i)].region;
      if (c >= r.base() && c < r.base() + r.bytes()) return &r;
    }
    return nullptr;
  }
};

arena& the_arena() {
  static arena* a = new arena();  // never destroyed, like the cache
  return *a;
}

}  // namespace

bool share_large_buffers(std::size_t min_bytes) {
  arena& a = the_arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (a.forked.load()) return false;
  if (a.min_bytes.load() != 0) return true;
  if (a.count.load() == 0 && !a.grow(k_segment_bytes)) return false;
  a.min_bytes.store(std::max<std::size_t>(min_bytes, 1));
  // A child shares its parent's segments: it must not write where its parent's buffers live.
  ::pthread_atfork(nullptr, nullptr, [] { the_arena().forked.store(true); });
  return true;
}

bool find_shared_block(const void* data, std::size_t bytes, shared_block* where) {
  if (the_arena().forked.load(std::memory_order_relaxed)) return false;
  const shared_region* s = the_arena().holding(data);
  if (s == nullptr) return false;
  const auto offset = static_cast<std::uint64_t>(static_cast<const char*>(data) - s->base());
  if (offset < k_page || bytes > s->bytes() - offset) return false;
  where->fd = s->fd();
  where->token[0] = s->token()[0];
  where->token[1] = s->token()[1];
  where->segment_bytes = s->bytes();
  where->offset = offset;
  return true;
}

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
  arena& shared = the_arena();
  const bool from_shared = shared.serving(capacity);
  if (cls < k_num_classes) {
    auto& sc = c.classes[cls];
    std::lock_guard<std::mutex> lock(sc.mutex);
    if (!sc.blocks.empty()) {
      block = sc.blocks.back();
      sc.blocks.pop_back();
      c.bytes_cached.fetch_sub(static_cast<std::int64_t>(capacity), std::memory_order_relaxed);
    } else if (!sc.bare.empty() && !shared.forked.load(std::memory_order_relaxed)) {
      block = sc.bare.back();
      sc.bare.pop_back();
    }
  }
  if (block != nullptr && from_shared && shared.holding(block) == nullptr) {
    std::free(block);  // cached from the heap before sharing began: shared memory's now
    block = nullptr;
  } else if (block != nullptr && shared.forked.load(std::memory_order_relaxed) && shared.holding(block) != nullptr) {
    block = nullptr;  // the parent's memory: left alone
  }
  if (block != nullptr) {
    c.hits.fetch_add(1, std::memory_order_relaxed);
  } else {
    // The header lives in the first 64 bytes, the data after it.
    if (from_shared) block = shared.allocate(capacity + k_alignment);
    if (block == nullptr) block = std::aligned_alloc(k_alignment, capacity + k_alignment);
    if (block == nullptr) {
      account.release(static_cast<std::int64_t>(bytes));
      throw allocation_error(str_cat("cannot allocate ", describe_bytes(static_cast<std::int64_t>(bytes))),
                             "the system has no memory left");
    }
    if (capacity >= (std::size_t{2} << 20) && shared.holding(block) == nullptr) {
      madvise(block, capacity + k_alignment, MADV_HUGEPAGE);
    }
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
    const bool keep = c.bytes_cached.load(std::memory_order_relaxed) + capacity <= c.limit;
    if (!keep && static_cast<std::size_t>(capacity) >= k_page && the_arena().holding(block) != nullptr) {
      if (the_arena().forked.load(std::memory_order_relaxed)) return;  // the parent's memory: left alone
      // A segment's block is never freed: the cache keeps it, without its pages.
      const std::size_t whole = (static_cast<std::size_t>(capacity) + k_alignment) / k_page * k_page;
      (void)::madvise(block, whole, MADV_REMOVE);
      auto& sc = c.classes[cls];
      std::lock_guard<std::mutex> lock(sc.mutex);
      sc.bare.push_back(block);
      return;
    }
    if (keep) {
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
