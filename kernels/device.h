// What a kernel may know about the device it runs on: its name and its resources.
//
// A device owns a resource_manager: the stateful objects (variables, queues, readers)
// created by ops placed on it, keyed by (container, name) as TensorFlow's ResourceMgr.
// The runtime (actors/) subclasses `device` to add what its own kernels need (the actor
// system, the rendezvous for Send/Recv); plain CPU kernels only see this interface.
//
//   auto r = ctx.device()->resources().lookup_or_create(container, name, [&] {
//     return result<std::shared_ptr<resource>>(std::make_shared<my_state>());
//   });
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "core/resource.h"
#include "core/status.h"

namespace troupe::kernels {

class resource_manager {
 public:
  using factory = std::function<result<std::shared_ptr<resource>>()>;

  // The resource under (container, name); when absent, make() creates it (under the
  // manager's lock, so concurrent callers get the same object). Errors: make()'s error.
  result<std::shared_ptr<resource>> lookup_or_create(const std::string& container,
                                                     const std::string& name, const factory& make);
  // The resource under (container, name), or null.
  std::shared_ptr<resource> lookup(const std::string& container, const std::string& name) const;
  // Removes the entry; false when there was none. Holders of handles keep the object.
  bool erase(const std::string& container, const std::string& name);
  // Every entry, ordered by (container, name).
  std::vector<std::pair<std::pair<std::string, std::string>, std::shared_ptr<resource>>> list() const;
  // Drops every entry (at shutdown).
  void clear();

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<resource>> resources_;
};

class device {
 public:
  explicit device(std::string name, std::string type = "CPU")
      : name_(std::move(name)), type_(std::move(type)) {}
  virtual ~device() = default;
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  // The full device name, e.g. "/job:ps/replica:0/task:0/device:CPU:0".
  const std::string& name() const { return name_; }
  const std::string& type() const { return type_; }
  resource_manager& resources() { return resources_; }

  // The account the device's kernels allocate from (core/memory.h): the executor makes
  // it current around each kernel. Null: the process's.
  memory_account* memory() const { return memory_.get(); }
  // Gives the device an account of `limit` bytes (within the process's). Call before
  // any kernel runs.
  void set_memory_limit(std::int64_t limit) {
    memory_ = memory_account::create(str_cat("device ", name_), limit, &memory_account::process());
  }

 private:
  std::string name_;
  std::string type_;
  resource_manager resources_;
  account_ref memory_;
};

}  // namespace troupe::kernels
