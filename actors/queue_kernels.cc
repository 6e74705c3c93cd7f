// Kernels for TensorFlow's queue ops. The queue ops (FIFOQueueV2, ...) find or create the
// queue actor in the device's resource manager and output its handle; the others are
// asynchronous kernels that send one request to the queue with a reply and finish from it.
// A request that waits in the queue is cancelled when the step aborts (the kernel then
// fails with `cancelled`) or when its timeout_ms passes (deadline_exceeded).
#include "actors/actor_resource.h"
#include "actors/queue.h"
#include "actors/runtime_device.h"
#include "actors/withdrawable.h"
#include "graph/attr.h"

namespace troupe::actors {
namespace {

using kernels::async_op_kernel;
using kernels::kernel_construction;
using kernels::kernel_context;

std::string type_list(const std::vector<dtype>& types) {
  std::string out;
  for (dtype t : types) out += str_cat(out.empty() ? "" : ", ", dtype_name(t));
  return "[" + out + "]";
}

// FIFOQueueV2, RandomShuffleQueueV2, PaddingFIFOQueueV2: the queue under (container,
// shared_name or the node's name) on this device, created on first use.
class queue_op_kernel final : public kernels::op_kernel {
 public:
  explicit queue_op_kernel(kernel_construction& c) : op_kernel(c) {
    if (!key_.read(c)) return;
    const std::string& op = c.node().op();
    options_.kind = op == "RandomShuffleQueueV2" ? queue_kind::random_shuffle
                    : op == "PaddingFIFOQueueV2" ? queue_kind::padding_fifo
                                                 : queue_kind::fifo;
    if (!c.get_attrs("component_types", &options_.types, "capacity", &options_.capacity)) return;
    if (graph::has_attr(c.node(), "shapes") && !c.get_attr("shapes", &options_.shapes)) return;
    if (options_.kind == queue_kind::random_shuffle) {
      std::int64_t seed = 0, seed2 = 0;
      if (!c.get_attr("min_after_dequeue", &options_.min_after_dequeue) || !c.get_attr("seed", &seed) ||
          !c.get_attr("seed2", &seed2)) {
        return;
      }
      options_.seed = static_cast<std::uint64_t>(seed);
      options_.seed2 = static_cast<std::uint64_t>(seed2);
    }
    options_.name = key_.name;
    options_.pool = &key_.device->pool();
    status s = validate_queue_options(options_);
    if (!s.ok()) c.fail(s.with_context(str_cat("node '", c.node().name(), "' (", op, ")")));
  }

  void compute(kernel_context& ctx) override {
    auto made = key_.find_or_make<queue_resource>([&] {
      queue_options o = options_;
      o.owner = key_.device->self();
      return make_queue(key_.device->system(), std::move(o));
    });
    if (!made.ok()) {
      ctx.fail(made.error());
      return;
    }
    status s = (*made)->matches(options_);
    if (!s.ok()) {
      ctx.fail(std::move(s));
      return;
    }
    ctx.set_output(0, tensor::from_resource(resource_handle{key_.device->name(), key_.container, key_.name, *made}));
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  resource_key key_;
  queue_options options_;
};

// What the kernels that use a queue share: the handle, and one request that a step abort
// or a timeout cancels.
class queue_user_kernel : public async_op_kernel {
 public:
  using async_op_kernel::async_op_kernel;

 protected:
  // The queue behind input 0, or null after failing ctx.
  queue_resource* resolve(kernel_context& ctx) const { return resolve_input<queue_resource>(ctx, 0); }

  // Sends a request with a reply (`send`), withdrawn from the queue if the step aborts
  // (actors/withdrawable.h); `finish(ctx, result)` sets outputs or fails ctx.
  template <class T, class Send, class Finish>
  static void call(kernel_context& ctx, done_callback done, queue_resource& q, std::uint64_t id,
                   Send send, Finish finish) {
    caf::actor actor = q.actor();
    send_withdrawable<T>(ctx, std::move(done), q.peer(), send,
                         [actor, id] { caf::anon_send(actor, queue_cancel{id}); }, finish);
  }
};

// QueueEnqueueV2, QueueEnqueueManyV2.
class enqueue_kernel final : public queue_user_kernel {
 public:
  explicit enqueue_kernel(kernel_construction& c) : queue_user_kernel(c) {
    many_ = c.node().op() == "QueueEnqueueManyV2";
    c.get_attr("timeout_ms", &timeout_ms_);
  }

  void compute_async(kernel_context& ctx, done_callback done) override {
    queue_resource* q = resolve(ctx);
    if (q == nullptr) {
      done();
      return;
    }
    std::vector<tensor> components(ctx.inputs().begin() + 1, ctx.inputs().end());
    const std::uint64_t id = q->next_request_id();
    call<done_t>(
        ctx, std::move(done), *q, id,
        [&](status_reply r) {
          caf::anon_send(q->actor(), queue_enqueue{id, std::move(components), many_, timeout_ms_, std::move(r)});
        },
        [](kernel_context& c, result<done_t> r) {
          if (!r.ok()) c.fail(r.error());
        });
  }

 private:
  bool many_ = false;
  std::int64_t timeout_ms_ = -1;
};

// QueueDequeueV2, QueueDequeueManyV2, QueueDequeueUpToV2.
class dequeue_kernel final : public queue_user_kernel {
 public:
  explicit dequeue_kernel(kernel_construction& c) : queue_user_kernel(c) {
    const std::string& op = c.node().op();
    mode_ = op == "QueueDequeueManyV2" ? dequeue_mode::many
            : op == "QueueDequeueUpToV2" ? dequeue_mode::up_to
                                         : dequeue_mode::one;
    if (!c.get_attr("component_types", &types_)) return;
    c.get_attr("timeout_ms", &timeout_ms_);
  }

  void compute_async(kernel_context& ctx, done_callback done) override {
    queue_resource* q = resolve(ctx);
    if (q == nullptr) {
      done();
      return;
    }
    if (q->component_types() != types_) {
      ctx.fail_invalid_argument("dequeues component types ", type_list(types_), " from ", q->label(),
                                ", whose component types are ", type_list(q->component_types()));
      done();
      return;
    }
    std::int64_t n = 1;
    if (mode_ != dequeue_mode::one) {
      const tensor& nt = ctx.input(1);
      if (nt.type() != dtype::int32 || nt.num_elements() != 1) {
        ctx.fail_invalid_argument("n must be an int32 scalar but is ", nt.debug_string(4));
        done();
        return;
      }
      n = nt.scalar_value<std::int32_t>();
      if (n < 0) {
        ctx.fail_invalid_argument("n is ", n, " but must be >= 0 (dequeue from ", q->label(), ")");
        done();
        return;
      }
    }
    const std::uint64_t id = q->next_request_id();
    call<std::vector<tensor>>(
        ctx, std::move(done), *q, id,
        [&](element_reply r) {
          caf::anon_send(q->actor(), queue_dequeue{id, mode_, n, timeout_ms_, std::move(r)});
        },
        set_outputs);
  }

 private:
  dequeue_mode mode_ = dequeue_mode::one;
  std::vector<dtype> types_;
  std::int64_t timeout_ms_ = -1;
};

// QueueCloseV2.
class close_kernel final : public queue_user_kernel {
 public:
  explicit close_kernel(kernel_construction& c) : queue_user_kernel(c) {
    c.get_attr("cancel_pending_enqueues", &cancel_pending_enqueues_);
  }

  void compute_async(kernel_context& ctx, done_callback done) override {
    queue_resource* q = resolve(ctx);
    if (q == nullptr) {
      done();
      return;
    }
    const std::uint64_t id = q->next_request_id();
    call<done_t>(
        ctx, std::move(done), *q, id,
        [&](status_reply r) {
          caf::anon_send(q->actor(), queue_close{id, cancel_pending_enqueues_, std::move(r)});
        },
        [](kernel_context& c, result<done_t> r) {
          if (!r.ok()) c.fail(r.error());
        });
  }

 private:
  bool cancel_pending_enqueues_ = false;
};

// QueueSizeV2: never waits in the queue, so nothing to cancel.
class size_kernel final : public queue_user_kernel {
 public:
  using queue_user_kernel::queue_user_kernel;

  void compute_async(kernel_context& ctx, done_callback done) override {
    queue_resource* q = resolve(ctx);
    if (q == nullptr) {
      done();
      return;
    }
    q->size(reply<std::int64_t>(
        [&ctx, done = std::move(done)](result<std::int64_t> r) {
          if (r.ok()) {
            ctx.set_output(0, tensor::scalar<std::int32_t>(static_cast<std::int32_t>(*r)));
          } else {
            ctx.fail(r.error());
          }
          done();
        },
        q->peer()));
  }
};

// QueueSaveStateV2: the queue's elements (stacked per component) and generator state.
class save_state_kernel final : public queue_user_kernel {
 public:
  explicit save_state_kernel(kernel_construction& c) : queue_user_kernel(c) { c.get_attr("component_types", &types_); }

  void compute_async(kernel_context& ctx, done_callback done) override {
    queue_resource* q = resolve(ctx);
    if (q == nullptr) return done();
    if (q->component_types() != types_) {
      ctx.fail_invalid_argument("saves component types ", type_list(types_), " of ", q->label(),
                                ", whose component types are ", type_list(q->component_types()));
      return done();
    }
    q->save_state(reply<std::vector<tensor>>(
        [&ctx, done = std::move(done)](result<std::vector<tensor>> r) {
          set_outputs(ctx, std::move(r));
          done();
        },
        q->peer()));
  }

 private:
  std::vector<dtype> types_;
};

// QueueRestoreStateV2: replaces the queue's elements and generator state.
class restore_state_kernel final : public queue_user_kernel {
 public:
  using queue_user_kernel::queue_user_kernel;

  void compute_async(kernel_context& ctx, done_callback done) override {
    queue_resource* q = resolve(ctx);
    if (q == nullptr) return done();
    std::vector<tensor> components(ctx.inputs().begin() + 1, ctx.inputs().end() - 1);
    q->restore_state(std::move(components), ctx.inputs().back(),
                     status_reply(
                         [&ctx, done = std::move(done)](result<done_t> r) {
                           if (!r.ok()) ctx.fail(r.error());
                           done();
                         },
                         q->peer()));
  }
};

}  // namespace

void register_queue_kernels(kernels::kernel_registry& registry) {
  for (const char* op : {"FIFOQueueV2", "RandomShuffleQueueV2", "PaddingFIFOQueueV2"}) {
    registry.add(op, "CPU", {}, kernels::make_kernel<queue_op_kernel>);
  }
  for (const char* op : {"QueueEnqueueV2", "QueueEnqueueManyV2"}) {
    registry.add(op, "CPU", {}, kernels::make_kernel<enqueue_kernel>);
  }
  for (const char* op : {"QueueDequeueV2", "QueueDequeueManyV2", "QueueDequeueUpToV2"}) {
    registry.add(op, "CPU", {}, kernels::make_kernel<dequeue_kernel>);
  }
  registry.add("QueueCloseV2", "CPU", {}, kernels::make_kernel<close_kernel>);
  registry.add("QueueSizeV2", "CPU", {}, kernels::make_kernel<size_kernel>);
  registry.add("QueueSaveStateV2", "CPU", {}, kernels::make_kernel<save_state_kernel>);
  registry.add("QueueRestoreStateV2", "CPU", {}, kernels::make_kernel<restore_state_kernel>);
}

}  // namespace troupe::actors
