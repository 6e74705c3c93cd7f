// Kernels of _Send and _Recv. A _Send posts its tensor to the destination device's actor
// (one message, the buffer shared, never copied in one process) and finishes at once; a
// _Recv asks its own device's actor for the tensor and finishes when it is there, or
// fails when the step is aborted.
#include "actors/rendezvous.h"
#include "actors/runtime_device.h"
#include "actors/runtime_kernels.h"
#include "graph/attr.h"
#include "kernels/kernel_registry.h"

namespace troupe::actors {
namespace {

using kernels::kernel_construction;
using kernels::kernel_context;

result<transfer_key> read_key(kernel_construction& c) {
  auto key = std::make_shared<placement::rendezvous_key>();
  std::int64_t incarnation = 0;
  c.get_attr("tensor_name", &key->tensor_name);
  c.get_attr("send_device", &key->send_device);
  c.get_attr("send_device_incarnation", &incarnation);
  c.get_attr("recv_device", &key->recv_device);
  key->send_device_incarnation = static_cast<std::uint64_t>(incarnation);
  if (!c.construction_status().ok()) return c.construction_status();
  return transfer_key(std::move(key));
}

class send_kernel final : public kernels::op_kernel {
 public:
  explicit send_kernel(kernel_construction& c) : op_kernel(c) {
    auto key = read_key(c);
    if (!key.ok()) return;
    key_ = std::move(*key);
    auto* dev = runtime_device::from(c.device());
    if (dev == nullptr) {
      c.fail(failed_precondition_error("_Send '", c.node().name(), "' needs the actor runtime"));
      return;
    }
    device_ = dev;
    destination_ = dev->find_device(key_->recv_device);
    if (!destination_) {
      c.fail(not_found_error("_Send '", c.node().name(), "': no device '", key_->recv_device,
                             "' in the cluster"));
    }
  }
  bool is_expensive() const override { return false; }
  void compute(kernel_context& ctx) override {
    if (auto* tracer = device_->tracer()) {
      tracer->transfer_sent(key_->to_string(), ctx.step().step_id, device_->task(), device_->short_name(),
                            step_tracer::clock::now());
    }
    caf::anon_send(destination_, rv_send_atom::value, ctx.step().step_id, key_, ctx.input(0));
  }

 private:
  transfer_key key_;
  runtime_device* device_ = nullptr;
  caf::actor destination_;
};

class recv_kernel final : public kernels::async_op_kernel {
 public:
  explicit recv_kernel(kernel_construction& c) : async_op_kernel(c) {
    auto key = read_key(c);
    if (!key.ok()) return;
    key_ = std::move(*key);
    auto* dev = runtime_device::from(c.device());
    if (dev == nullptr) {
      c.fail(failed_precondition_error("_Recv '", c.node().name(), "' needs the actor runtime"));
      return;
    }
    self_ = dev->self();
    device_ = dev;
    if (dev->name() != key_->recv_device) {
      c.fail(invalid_argument_error("_Recv '", c.node().name(), "' runs on ", dev->name(),
                                    " but its recv_device is ", key_->recv_device));
    }
  }
  bool is_expensive() const override { return false; }

  void compute_async(kernel_context& ctx, done_callback done) override {
    std::int64_t step = ctx.step().step_id;
    auto& cancellation = ctx.cancellation();
    auto token = cancellation.new_token();
    caf::actor self = self_;
    transfer_key key = key_;
    if (!cancellation.register_callback(token, [self, step, key] {
          caf::anon_send(self, rv_cancel_atom::value, step, key);
        })) {
      ctx.fail(cancelled_error("step ", step, " was aborted before '", name(), "' ran"));
      return done();
    }
    runtime_device* dev = device_;
    caf::anon_send(self_, rv_recv_atom::value, step, key_,
                   reply<tensor>([&ctx, &cancellation, token, done, dev, key, step](result<tensor> r) {
                     cancellation.deregister(token);
                     if (auto* tracer = dev->tracer(); tracer != nullptr && r.ok()) {
                       tracer->transfer_received(key->to_string(), step, dev->task(), dev->short_name(),
                                                 step_tracer::clock::now());
                     }
                     if (r.ok()) ctx.set_output(0, std::move(*r));
                     else ctx.fail(r.error());
                     done();
                   }, str_cat("device ", key_->recv_device)));
  }

 private:
  transfer_key key_;
  caf::actor self_;
  runtime_device* device_ = nullptr;
};

}  // namespace

void register_sendrecv_kernels(kernels::kernel_registry& registry) {
  registry.add("_Send", "CPU", {}, kernels::make_kernel<send_kernel>);
  registry.add("_Recv", "CPU", {}, kernels::make_kernel<recv_kernel>);
}

}  // namespace troupe::actors
