// shared_memory: regions of memory that another process on this machine can map.
//
// A region is an anonymous memfd (its pages allocated as they are touched) with a random
// token in its first 16 bytes. Another process maps it by the creator's pid and
// descriptor (/proc/<pid>/fd/<fd>: the same machine and pid namespace, and allowed to)
// and checks the token, so it never maps another region that got the same descriptor
// number. The memory has no name: a killed process leaves nothing behind. The tensor
// links' rings (cluster/transport.cc) and a server's large buffers (core/buffer.h,
// share_large_buffers) are such regions.
//
//   auto mine = shared_region::create("troupe-link", 8 << 20);     // offer pid, fd, token, bytes
//   auto theirs = shared_region::open(pid, fd, token, bytes, false); // in the other process
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace troupe {

class shared_region {
 public:
  // A new region of `bytes` (at least 16), mapped here read-write with its token written;
  // null when the system gives none.
  static std::unique_ptr<shared_region> create(const char* name, std::size_t bytes);
  // Process `pid`'s region at its descriptor `fd`, of `bytes` bytes with `token`, mapped
  // here (read-only unless `writable`); null when this process cannot reach it, its size
  // differs or it holds another token.
  static std::unique_ptr<shared_region> open(std::uint32_t pid, int fd, const std::uint64_t token[2],
                                             std::size_t bytes, bool writable);
  ~shared_region();  // unmaps it, and closes the descriptor of one made here
  shared_region(const shared_region&) = delete;
  shared_region& operator=(const shared_region&) = delete;

  char* base() const { return base_; }
  std::size_t bytes() const { return bytes_; }
  // This process's descriptor of a region made here (what another process opens), else -1.
  int fd() const { return fd_; }
  const std::uint64_t* token() const { return token_; }

 private:
  shared_region() = default;
  char* base_ = nullptr;
  std::size_t bytes_ = 0;
  int fd_ = -1;
  std::uint64_t token_[2] = {0, 0};
};

}  // namespace troupe
