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
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "core/resource.h"
#include "core/status.h"
#include "core/tensor.h"

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

// What the runtime needs of a device whose memory the host cannot read (a GPU): copies
// in both directions that never block the caller, and completion of queued work. The
// executor copies a host tensor in when a kernel of such a device takes it in device
// memory, and Send kernels copy device tensors out before they leave the device.
// kernels/cuda/gpu_device.h implements it; tests use a fake over host memory.
// A training update as a device applies it (accelerator::apply_update): the op
// (ResourceApplyGradientDescent, TroupeApplyGradientDescentMatMul, ResourceApplyMomentum,
// ResourceApplyAdagrad, ResourceApplyAdam, ResourceApplyRMSProp, AssignAddVariableOp,
// AssignSubVariableOp, ResourceScatterAdd) and the attributes it reads.
struct training_update {
  std::string op;
  bool use_nesterov = false;  // Momentum, Adam
  bool update_slots = true;   // Adagrad
  bool transpose_a = false;   // the product update
  bool transpose_b = false;
};

class accelerator {
 public:
  virtual ~accelerator() = default;
  // A device copy of host tensor `host`, usable by the device's kernels enqueued from now
  // on (the copy may still be running). Throws allocation_error when it does not fit.
  virtual result<tensor> to_device(const tensor& host) = 0;
  // Copies device tensor `t` to a new host tensor after the device's work enqueued so
  // far, and calls done with it (or the error) on a thread of the device's: done must be
  // cheap. A host tensor is passed through at once.
  virtual void to_host(const tensor& t, std::function<void(result<tensor>)> done) = 0;
  // Calls done once everything enqueued so far has run, with the device's error if any.
  virtual void when_done(std::function<void(status)> done) = 0;
  // A new device tensor with the contents of device tensor `t`, copied after the device's
  // work enqueued so far (a variable's value that readers still hold, before an update
  // writes it). Throws allocation_error when it does not fit. Default: unimplemented.
  virtual result<tensor> copy(const tensor& t);
  // Applies `update` in place to `vars` (the op's variables in input order: device tensors
  // that no one else holds), with `inputs` as the op's kernel has them (the variables'
  // handles, host tensors, at their positions; every other input, the hyper-parameters
  // and the gradient, in device memory), enqueued after the device's work so far; returns
  // at once. The arithmetic is kernels/training_ops.h's. Errors, with nothing
  // enqueued: dtypes or shapes that do not match (invalid_argument), an update the device
  // does not have (unimplemented: the default).
  virtual status apply_update(const training_update& update, std::vector<tensor>& vars, std::span<const tensor> inputs);
  // ResourceGather on the device: the rows of device tensor `params` at `indices` (device
  // memory, int32 or int64) in a new device tensor of shape indices.shape +
  // params.shape[1:], enqueued after the device's work so far. Errors: what
  // kernels::gather refuses but the indices' values (a row outside params is zeros, as in
  // TensorFlow's GPU kernel); unimplemented: the default.
  virtual result<tensor> gather(const tensor& params, const tensor& indices);
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
  // The device's accelerator (a GPU's streams and memory), or null for a CPU device.
  virtual kernels::accelerator* accelerator() { return nullptr; }

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

// The device behind a non-CPU device of the runtime, whose accelerator() holds its
// streams and memory: for type "GPU", GPU number `index` of this machine
// (kernels/cuda/gpu_device.h). Errors: a troupe built without CUDA, no such GPU, another
// type; each names the device.
result<std::unique_ptr<device>> make_accelerator(const std::string& name, const std::string& type, int index);
// How many GPUs make_accelerator can make: 0 without CUDA, a driver or a GPU.
int visible_gpus();

}  // namespace troupe::kernels
