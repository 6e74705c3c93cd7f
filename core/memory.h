// memory_account: a budget of bytes for the tensors one device (or the whole process)
// allocates, so that an absurd shape fails with a clear error before memory is touched,
// instead of the process dying (bad_alloc, or the kernel's OOM killer).
//
// Every buffer (core/buffer.h) is charged, while it lives, to the account that was current
// on the allocating thread: the device's, inside a kernel (the executor opens an
// account_scope around each kernel), else the process's. A device account has the process
// account as its parent, and an allocation must fit in both:
//
//   memory_account& process = memory_account::process();   // TROUPE_MEMORY_LIMIT
//   auto device = memory_account::create("/job:ps/.../CPU:0", limit, &process);
//   {
//     account_scope scope(device.get());
//     tensor t(dtype::float32, {1000000, 1000000});  // throws allocation_error
//   }
//
// An allocation that does not fit throws allocation_error (a std::bad_alloc), which says
// what was asked for, of which account, and its limit and use; tensor's constructor adds
// the dtype and shape, and the executor turns it into RESOURCE_EXHAUSTED naming the node.
// Nothing else in troupe throws: this is the one exception a kernel may see, because an
// allocation deep inside a kernel has no status to return.
//
// Limits: TROUPE_MEMORY_LIMIT, a number of bytes with an optional K, M, G or T suffix
// (powers of 1024) or a percentage of physical memory ("50%"); default 80% of physical
// memory. A device's limit is its cluster's option, else the process's.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <new>
#include <string>

#include "core/status.h"

namespace troupe {

class memory_account;

// A counted reference to an account (accounts are shared by the buffers charged to them,
// which may outlive the device that made them).
class account_ref {
 public:
  account_ref() = default;
  explicit account_ref(memory_account* a);
  account_ref(const account_ref& other);
  account_ref& operator=(const account_ref& other);
  ~account_ref();
  memory_account* get() const { return account_; }
  memory_account* operator->() const { return account_; }

 private:
  memory_account* account_ = nullptr;
};

class memory_account {
 public:
  // The process's account (never destroyed). Its limit comes from TROUPE_MEMORY_LIMIT
  // (default_memory_limit() when unset or malformed).
  static memory_account& process();
  // A new account of `limit` bytes whose allocations also count against `parent`.
  static account_ref create(std::string name, std::int64_t limit, memory_account* parent);

  const std::string& name() const { return name_; }
  std::int64_t limit() const { return limit_; }
  std::int64_t in_use() const { return in_use_.load(std::memory_order_relaxed); }
  std::int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  memory_account* parent() const { return parent_; }

  // Counts `bytes` against this account and its parent; throws allocation_error (and
  // counts nothing) when they do not fit in one of them.
  void charge(std::int64_t bytes);
  // Returns bytes charged earlier.
  void release(std::int64_t bytes);

  void ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void unref();

 private:
  memory_account(std::string name, std::int64_t limit, memory_account* parent)
      : name_(std::move(name)), limit_(limit), parent_(parent) {}
  bool try_charge(std::int64_t bytes);
  void release_own(std::int64_t bytes) { in_use_.fetch_sub(bytes, std::memory_order_relaxed); }

  std::string name_;
  std::int64_t limit_;
  memory_account* parent_;
  std::atomic<std::int64_t> in_use_{0};
  std::atomic<std::int64_t> peak_{0};
  std::atomic<std::int64_t> refs_{1};
};

// The account charged by allocations on this thread: the innermost account_scope's, or
// the process's.
memory_account& current_account();

// Makes `account` this thread's current account for the scope's life (null: no change).
class account_scope {
 public:
  explicit account_scope(memory_account* account);
  ~account_scope();
  account_scope(const account_scope&) = delete;
  account_scope& operator=(const account_scope&) = delete;

 private:
  memory_account* previous_;
};

// An allocation that did not fit (or that the system refused).
class allocation_error : public std::bad_alloc {
 public:
  // `what` says what was asked for, `why` why it failed.
  allocation_error(std::string what, std::string why)
      : what_(std::move(what)), why_(std::move(why)), message_(what_ + ": " + why_) {}
  const char* what() const noexcept override { return message_.c_str(); }
  // The same failure described as `what` (for example with the tensor's dtype and shape).
  allocation_error described_as(std::string what) const { return allocation_error(std::move(what), why_); }
  status to_status() const { return resource_exhausted_error(message_); }

 private:
  std::string what_, why_, message_;
};

// 80% of physical memory.
std::int64_t default_memory_limit();
// TROUPE_MEMORY_LIMIT's value in bytes; default_memory_limit() when unset; an error naming
// the variable when it is malformed.
result<std::int64_t> memory_limit_from_environment();
// Parses "8G", "512M", "1000000", "50%" into bytes. Errors name `what` and the text.
result<std::int64_t> parse_memory_size(const std::string& text, const std::string& what);
// "4.0 GiB (4294967296 bytes)".
std::string describe_bytes(std::int64_t bytes);

}  // namespace troupe
