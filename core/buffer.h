// buffer: the reference-counted, 64-byte-aligned block of memory behind tensors.
//
// Buffers come from a process-wide caching allocator: freed blocks are kept in size
// classes (four per power of two) and handed out again, because fresh pages cost ~11 us
// per 4 KB on these machines and glibc returns memory to the system eagerly. The cache
// holds at most `cache_limit_bytes` (default 2 GiB, env TROUPE_ALLOCATOR_CACHE_MB).
//
// Each buffer is charged, while it lives, to the memory account current on the thread
// that allocated it (core/memory.h); an allocation that does not fit throws
// allocation_error, as does one the system refuses.
//
// Thread safety: ref/unref are atomic; a buffer's bytes are not synchronized (the
// dataflow order does that).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace troupe {

class memory_account;

// Memory that another allocator owns (a GPU's device memory, say), lent to a buffer by
// buffer::adopt. The owner outlives every buffer over its memory.
class external_memory {
 public:
  virtual ~external_memory() = default;
  // Called once, when the last reference to a buffer over [data, data + bytes) goes.
  virtual void release(void* data, std::size_t bytes) noexcept = 0;
  // False for memory the host's processors cannot read (a GPU's).
  virtual bool host_accessible() const = 0;
  // False for memory this process may only read (another process's, mapped read-only):
  // its buffers never count as held by one reference, so nothing writes into them in
  // place (kernels allocate instead, variables copy first).
  virtual bool writable() const { return true; }
};

// Maps the pages of [data, data + bytes) writable now, in one call (MADV_POPULATE_WRITE),
// instead of one page fault per page as they are first written: about twice as fast for
// fresh memory on these machines (0.5 s against 0.9 s per GB). For memory about to be
// filled by a large read. Does nothing where the kernel lacks it (before Linux 5.14).
void prefault(void* data, std::size_t bytes);

class buffer {
 public:
  static constexpr std::size_t k_alignment = 64;

  // A buffer of `bytes` bytes (uninitialized) with a reference count of one, charged to
  // current_account(). Throws allocation_error when it does not fit or the system has
  // no memory.
  static buffer* allocate(std::size_t bytes);

  // A buffer over `bytes` bytes at `data` that `owner` allocated, with a reference count
  // of one; owner->release(data, bytes) when the last reference goes. Not charged to any
  // memory account (the owner accounts for its memory).
  static buffer* adopt(void* data, std::size_t bytes, external_memory* owner);

  void* data() const { return data_; }
  // False when the bytes are in a device's memory: the host may not touch them.
  bool host_accessible() const { return owner_ == nullptr || owner_->host_accessible(); }
  std::size_t size() const { return size_; }
  // Whoever lent the memory (buffer::adopt), or null for the cache's own.
  const external_memory* owner() const { return owner_; }

  void ref() const { refs_.fetch_add(1, std::memory_order_relaxed); }
  // Releases one reference; the last one returns the memory to the allocator.
  void unref() const;
  // Whether this is the only reference (and the bytes may be written): the test before
  // writing in place. False for memory lent read-only (external_memory::writable).
  bool ref_count_is_one() const {
    return refs_.load(std::memory_order_acquire) == 1 && (owner_ == nullptr || owner_->writable());
  }

  // For buffers holding C++ objects (resource handles): called with the bytes just
  // before the last reference returns the memory, to run the objects' destructors.
  using destroy_fn = void (*)(void* data, std::size_t bytes);
  void set_destroy(destroy_fn fn) { destroy_ = fn; }

  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;

 private:
  buffer(void* data, std::size_t size, std::size_t capacity_class, memory_account* account,
         external_memory* owner = nullptr)
      : data_(data), size_(size), class_(capacity_class), account_(account), owner_(owner) {}
  ~buffer() = default;

  void* data_;
  std::size_t size_;
  std::size_t class_;
  memory_account* account_;
  external_memory* owner_;  // null: the header and the data are one block of the cache's
  destroy_fn destroy_ = nullptr;
  mutable std::atomic<std::int64_t> refs_{1};
};

// Shared memory for large buffers, so that a tensor link to a process on this machine can
// send them without copying (doc/cluster.md, "Sends without copies"): from this call on,
// blocks of at least `min_bytes` that the cache does not have come from segments of
// shared memory (memfds of 256 MB, their pages allocated as they are touched) instead of
// the heap; find_shared_block finds them. Once per process (a later call does nothing);
// false when the system gives no memfd (buffers then come from the heap, as before), and
// in a process forked from one that shares (it maps its parent's segments: its buffers
// come from the heap). A block the cache cannot keep (over its limit) stays in the cache
// with its pages given back (MADV_REMOVE), since a segment's blocks are never freed one
// by one; when no segment can be added, large buffers come from the heap again.
bool share_large_buffers(std::size_t min_bytes);

// Where bytes [data, data + bytes) lie in shared memory: a segment's memfd (in this
// process), the random token at its start (which whoever maps it checks), its size, and
// the bytes' offset in it. Nothing when they are not all in one segment.
struct shared_block {
  int fd = -1;
  std::uint64_t token[2] = {0, 0};
  std::uint64_t segment_bytes = 0;
  std::uint64_t offset = 0;
};
bool find_shared_block(const void* data, std::size_t bytes, shared_block* where);

struct allocator_stats {
  std::int64_t allocations = 0;   // buffer::allocate calls
  std::int64_t cache_hits = 0;    // served from the cache
  std::int64_t bytes_cached = 0;  // currently held in the cache
};
allocator_stats get_allocator_stats();

}  // namespace troupe
