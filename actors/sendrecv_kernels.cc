// Kernels of _Send and _Recv. A _Send posts its tensor to the destination device's actor
// (one message, the buffer shared, never copied in one process) and finishes at once (on
// a GPU, once its tensor is copied to the host; for a device of another process, once
// its bytes are written to the link: the link's credits hold the _Send, and so its step,
// back, which bounds what a sender holds whatever its steps do); a
// _Recv asks its own device's rendezvous for the tensor (directly when it runs inside
// that device's actor, by message otherwise: actors/rendezvous.h) and finishes when it
// is there, or fails when the step is aborted.
//
// Both read their transfer's key once, when their partition is prepared, so a transfer
// parses, hashes and formats no strings.
#include <optional>

#include "actors/actor_resource.h"
#include "actors/rendezvous.h"
#include "actors/simulation.h"
#include "actors/runtime_device.h"
#include "actors/runtime_kernels.h"
#include "actors/withdrawable.h"
#include "core/env.h"
#include "graph/attr.h"
#include "kernels/kernel_registry.h"
#include "placement/device_name.h"

namespace troupe::actors {
namespace {

using kernels::kernel_construction;
using kernels::kernel_context;

// What both ends of a transfer hold: its key and the runtime device they run on.
struct transfer_end {
  transfer_key_ptr key;
  runtime_device* device = nullptr;
};

// The checks both kernel constructors share: the transfer attributes (missing ones are
// named by get_attr) and the actor runtime. Records the error in `c` and returns nothing
// when one fails.
std::optional<transfer_end> read_transfer_end(kernel_construction& c) {
  placement::rendezvous_key key;
  std::int64_t incarnation = 0;
  if (!c.get_attr("tensor_name", &key.tensor_name) || !c.get_attr("send_device", &key.send_device) ||
      !c.get_attr("send_device_incarnation", &incarnation) || !c.get_attr("recv_device", &key.recv_device)) {
    return std::nullopt;
  }
  key.send_device_incarnation = static_cast<std::uint64_t>(incarnation);
  if (graph::has_attr(c.node(), "recv_device_incarnation")) {
    if (!c.get_attr("recv_device_incarnation", &incarnation)) return std::nullopt;
    key.recv_device_incarnation = static_cast<std::uint64_t>(incarnation);
  }
  auto* dev = require_runtime(c);
  if (dev == nullptr) return std::nullopt;
  return transfer_end{std::make_shared<const transfer_key>(std::move(key)), dev};
}

// What a _Send does once its tensor is in host memory: posts it to the destination
// device's actor (or loses or delays it as an injected link fault says).
class sender {
 public:
  // Records the error in `c` when the transfer's attributes or its destination are bad.
  explicit sender(kernel_construction& c) {
    auto end = read_transfer_end(c);
    if (!end) return;
    key_ = std::move(end->key);
    device_ = end->device;
    destination_ = device_->find_device(key_->key().recv_device);
    remote_ = device_->remote_device(key_->key().recv_device);
    sink_ = device_->remote_sink_of(key_->key().recv_device);
    recv_task_ = placement::task_of_full_name(key_->key().recv_device);
    peer_ = std::make_shared<const std::string>(str_cat("the stand-in of ", key_->key().recv_device));
    if (!destination_) {
      c.fail(not_found_error("_Send '", c.node().name(), "': no device '", key_->key().recv_device,
                             "' in the cluster"));
    }
  }

  // `written`, when given, travels with the tensor: a stand-in for a device of another
  // process calls it once the bytes are on the link (or with why not).
  status post(std::int64_t step, const tensor& t, const status_reply* written = nullptr) const {
    if (auto* tracer = device_->tracer()) {
      tracer->transfer_sent(key_->printed(), step, device_->task(), device_->short_name(), env::now());
    }
    bool dropped = false;
    std::chrono::microseconds delay{0};  // an injected delay_messages fault's
    if (auto fault = device_->link_fault_to(key_->key().recv_device, &dropped)) {
      if (dropped) {
        return unavailable_error("the transfer '", key_->printed(), "' to ", key_->key().recv_device,
                                 " was lost (drop_messages fault)");
      }
      delay = fault->delay;
    }
    if (auto* sim = device_->simulation(); sim != nullptr && recv_task_ != device_->task()) {
      // The network model says when it arrives (latency, bandwidth, jitter, copies); an
      // injected delay comes on top.
      sim->transfer(device_->task(), recv_task_, static_cast<std::int64_t>(t.byte_size()),
                    [destination = destination_, step, key = key_, t, delay] {
                      if (delay.count() > 0) {
                        caf::delayed_anon_send(destination, delay, rv_send_atom::value, step, key, t);
                      } else {
                        caf::anon_send(destination, rv_send_atom::value, step, key, t);
                      }
                    });
      return status();
    }
    if (delay.count() > 0) {
      if (written != nullptr) {
        caf::delayed_anon_send(destination_, delay, rv_send_atom::value, step, key_, t, *written);
      } else {
        caf::delayed_anon_send(destination_, delay, rv_send_atom::value, step, key_, t);
      }
      return status();
    }
    // Straight onto the link to the device's process from this thread, when it is open.
    if (written != nullptr && sink_ != nullptr && sink_->try_send(step, key_, t, *written)) return status();
    // Sent as the sending device: a destination that cannot deliver it (a stand-in for a
    // device of another process whose connection failed) aborts the step here.
    if (written != nullptr) {
      caf::send_as(device_->self(), destination_, rv_send_atom::value, step, key_, t, *written);
    } else {
      caf::send_as(device_->self(), destination_, rv_send_atom::value, step, key_, t);
    }
    return status();
  }
  // Posts `t` and calls `done` (after failing `ctx` when it could not be sent) once the
  // tensor is on its way: at once for a device of this process, once its bytes are on
  // the link for a device of another (the link's credits hold the caller back).
  void post_then(kernel_context& ctx, std::int64_t step, const tensor& t, std::function<void()> done) const {
    if (!remote_) {
      status s = post(step, t);
      if (!s.ok()) ctx.fail(std::move(s));
      return done();
    }
    status_reply written([&ctx, done = std::move(done)](result<done_t> r) {
      if (!r.ok()) ctx.fail(r.error());
      done();
    }, peer_);
    status s = post(step, t, &written);
    if (!s.ok()) written(s);  // a reply answers once: the stand-in's later answer does nothing
  }
  runtime_device* device() const { return device_; }
  bool remote() const { return remote_; }

 private:
  transfer_key_ptr key_;
  runtime_device* device_ = nullptr;
  caf::actor destination_;
  bool remote_ = false;  // the destination is a stand-in for a device of another process
  std::shared_ptr<remote_sink> sink_;  // its sink, when it has one
  std::string recv_task_;  // the destination's task
  std::shared_ptr<const std::string> peer_;  // who answers a remote post, for its error
};

class send_kernel final : public kernels::op_kernel {
 public:
  explicit send_kernel(kernel_construction& c) : op_kernel(c), sender_(c) {}
  double estimated_ns(std::span<const tensor>) const override { return 0; }
  void compute(kernel_context& ctx) override {
    status s = sender_.post(ctx.step().step_id, ctx.input(0));
    if (!s.ok()) ctx.fail(std::move(s));
  }

 private:
  sender sender_;
};

// A _Send to a device of another process: finishes when the stand-in has written the
// tensor's bytes to its link (the link's window bounds what is in flight), or fails with
// why it could not.
class remote_send_kernel final : public kernels::async_op_kernel {
 public:
  explicit remote_send_kernel(kernel_construction& c) : async_op_kernel(c), sender_(c) {}
  double estimated_ns(std::span<const tensor>) const override { return 0; }
  void compute_async(kernel_context& ctx, done_callback done) override {
    sender_.post_then(ctx, ctx.step().step_id, ctx.input(0), std::move(done));
  }

 private:
  sender sender_;
};

// _Send on a CPU: waits for the link when its destination is in another process.
std::unique_ptr<kernels::op_kernel> make_send_kernel(kernel_construction& c) {
  std::string to;
  auto* dev = runtime_device::from(c.device());
  if (dev != nullptr && c.get_attr("recv_device", &to) && dev->remote_device(to)) {
    return std::make_unique<remote_send_kernel>(c);
  }
  return std::make_unique<send_kernel>(c);
}

// A _Send on a device with an accelerator (a GPU): a tensor in the device's memory is
// copied to the host after the device's queued work (the executor's thread does not wait),
// then posted (and for a device of another process, done once its bytes are on the
// link); tensors leave a device in host memory.
class device_send_kernel final : public kernels::async_op_kernel {
 public:
  explicit device_send_kernel(kernel_construction& c) : async_op_kernel(c), sender_(c) {
    if (c.construction_status().ok() && sender_.device()->accelerator() == nullptr) {
      c.fail(failed_precondition_error("_Send '", c.node().name(), "' on ", sender_.device()->name(),
                                       ": the device has no accelerator"));
    }
  }
  memory input_memory(int) const override { return memory::any; }
  void compute_async(kernel_context& ctx, done_callback done) override {
    const std::int64_t step = ctx.step().step_id;
    sender_.device()->accelerator()->to_host(ctx.input(0), [this, &ctx, step, done = std::move(done)](result<tensor> r) {
      if (!r.ok()) {
        ctx.fail(r.error());
        return done();
      }
      sender_.post_then(ctx, step, *r, done);
    });
  }

 private:
  sender sender_;
};

// How many _Recvs may answer each other directly on one thread (a Recv whose tensor is
// there completes inline, and the nodes it wakes may include another Recv) before the
// next one asks by message instead, which bounds the stack.
constexpr int k_max_direct_depth = 32;
thread_local int direct_depth = 0;

class recv_kernel final : public kernels::async_op_kernel {
 public:
  explicit recv_kernel(kernel_construction& c) : async_op_kernel(c) {
    auto end = read_transfer_end(c);
    if (!end) return;
    key_ = std::move(end->key);
    device_ = end->device;
    self_ = device_->self();
    peer_ = std::make_shared<const std::string>(str_cat("device ", key_->key().recv_device));
    if (device_->name() != key_->key().recv_device) {
      c.fail(invalid_argument_error("_Recv '", c.node().name(), "' runs on ", device_->name(),
                                    " but its recv_device is ", key_->key().recv_device));
    }
  }

  // The callbacks below use `this`: the kernel lives as long as its partition, which the
  // step keeps alive until this node's done has been called. The request is withdrawn from
  // the rendezvous when the step aborts (actors/withdrawable.h).
  void compute_async(kernel_context& ctx, done_callback done) override {
    const std::int64_t step = ctx.step().step_id;
    send_withdrawable<tensor>(
        ctx, std::move(done), peer_,
        [this, step](reply<tensor> answer) {
          rendezvous_table* table = rendezvous_table::active(device_);
          if (table != nullptr && direct_depth < k_max_direct_depth) {
            ++direct_depth;
            table->recv(step, key_, std::move(answer));  // may answer now
            --direct_depth;
            return;
          }
          caf::anon_send(self_, rv_recv_atom::value, step, key_, std::move(answer));
        },
        [this, step] { caf::anon_send(self_, rv_cancel_atom::value, step, key_); },
        [this, step](kernel_context& c, result<tensor> r) {
          if (auto* tracer = device_->tracer(); tracer != nullptr && r.ok()) {
            tracer->transfer_received(key_->printed(), step, device_->task(), device_->short_name(),
                                      env::now());
          }
          if (r.ok()) c.set_output(0, std::move(*r));
          else c.fail(r.error());
        });
  }

 private:
  transfer_key_ptr key_;
  runtime_device* device_ = nullptr;
  caf::actor self_;
  // How a reply that is never answered names the rendezvous (shared by every reply).
  std::shared_ptr<const std::string> peer_;
};

}  // namespace

void register_sendrecv_kernels(kernels::kernel_registry& registry) {
  registry.add("_Send", "CPU", {}, make_send_kernel);
  registry.add("_Recv", "CPU", {}, kernels::make_kernel<recv_kernel>);
  // On GPUs: a Recv hands on the host tensor it gets (the executor copies it in for a
  // kernel that reads device memory).
  registry.add("_Send", "GPU", {}, kernels::make_kernel<device_send_kernel>);
  registry.add("_Recv", "GPU", {}, kernels::make_kernel<recv_kernel>);
}

}  // namespace troupe::actors
