// Kernels for TensorFlow's queue ops. The queue ops (FIFOQueueV2, ...) find or create the
// queue actor in the device's resource manager and output its handle; the others are
// asynchronous kernels that send one request to the queue with a reply and finish from it.
// A request that waits in the queue is cancelled when the step aborts (the kernel then
// fails with `cancelled`) or when its timeout_ms passes (deadline_exceeded).
#include <mutex>
#include <optional>

#include "actors/queue.h"
#include "actors/runtime_device.h"
#include "graph/attr.h"

namespace troupe::actors {
namespace {

using kernels::async_op_kernel;
using kernels::kernel_construction;
using kernels::kernel_context;

std::vector<partial_shape> shapes_attr(const tf::NodeDef& node) {
  std::vector<partial_shape> shapes;
  auto it = node.attr().find("shapes");
  if (it == node.attr().end()) return shapes;
  for (const auto& proto : it->second.list().shape()) shapes.push_back(graph::shape_from_proto(proto));
  return shapes;
}

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
    device_ = runtime_device::from(c.device());
    if (device_ == nullptr) {
      c.fail(failed_precondition_error("node '", c.node().name(), "' (", c.node().op(),
                                       ") creates a queue actor, so it needs the actor runtime's "
                                       "device (a runtime_device); it cannot run outside it"));
      return;
    }
    const std::string& op = c.node().op();
    options_.kind = op == "RandomShuffleQueueV2" ? queue_kind::random_shuffle
                    : op == "PaddingFIFOQueueV2" ? queue_kind::padding_fifo
                                                 : queue_kind::fifo;
    std::string shared_name;
    if (!c.get_attr("component_types", &options_.types) || !c.get_attr("capacity", &options_.capacity) ||
        !c.get_attr("container", &container_) || !c.get_attr("shared_name", &shared_name)) {
      return;
    }
    options_.shapes = shapes_attr(c.node());
    if (options_.kind == queue_kind::random_shuffle) {
      std::int64_t seed = 0, seed2 = 0;
      if (!c.get_attr("min_after_dequeue", &options_.min_after_dequeue) || !c.get_attr("seed", &seed) ||
          !c.get_attr("seed2", &seed2)) {
        return;
      }
      options_.seed = static_cast<std::uint64_t>(seed);
      options_.seed2 = static_cast<std::uint64_t>(seed2);
    }
    options_.name = shared_name.empty() ? c.node().name() : shared_name;
    options_.pool = &device_->pool();
    status s = validate_queue_options(options_);
    if (!s.ok()) c.fail(s.with_context(str_cat("node '", c.node().name(), "' (", op, ")")));
  }

  void compute(kernel_context& ctx) override {
    auto made = device_->resources().lookup_or_create(container_, options_.name, [&] {
      queue_options o = options_;
      o.owner = device_->self();
      auto q = make_queue(device_->system(), std::move(o));
      if (!q.ok()) return result<std::shared_ptr<resource>>(q.error());
      return result<std::shared_ptr<resource>>(std::shared_ptr<resource>(std::move(*q)));
    });
    if (!made.ok()) {
      ctx.fail(made.error());
      return;
    }
    auto* q = dynamic_cast<queue_resource*>(made->get());
    if (q == nullptr) {
      ctx.fail(invalid_argument_error("resource '", options_.name, "' in container '", container_, "' on ",
                                      device_->name(), " is a ", (*made)->kind(), ", not a queue"));
      return;
    }
    status s = q->matches(options_);
    if (!s.ok()) {
      ctx.fail(std::move(s));
      return;
    }
    ctx.set_output(0, tensor::from_resource(resource_handle{device_->name(), container_, options_.name, *made}));
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  runtime_device* device_ = nullptr;
  std::string container_;
  queue_options options_;
};

// What the kernels that use a queue share: the handle, and one request that a step abort
// or a timeout cancels.
class queue_user_kernel : public async_op_kernel {
 public:
  using async_op_kernel::async_op_kernel;
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 protected:
  // The queue behind input 0, or null after failing ctx.
  queue_resource* resolve(kernel_context& ctx) const {
    const tensor& h = ctx.input(0);
    if (!h.initialized() || h.type() != dtype::resource || h.num_elements() != 1) {
      ctx.fail_invalid_argument("input 0 must be a queue handle (a resource scalar) but is ", h.debug_string(4));
      return nullptr;
    }
    auto* q = h.resource_value().get<queue_resource>();
    if (q == nullptr) {
      ctx.fail_invalid_argument("input 0 must be a queue handle but is ", h.resource_value().debug_string());
    }
    return q;
  }

  // Sends a request with a reply, registered with the step's cancellation so that an
  // abort cancels it in the queue; `finish(ctx, result)` sets outputs or fails ctx, then
  // done is called. The request is sent before registering, so the queue always sees a
  // cancel after its request; an answer that arrives before registration is held until
  // registration is over.
  template <class T, class Send, class Finish>
  static void call(kernel_context& ctx, done_callback done, queue_resource& q, std::uint64_t id,
                   Send send, Finish finish) {
    struct call_state {
      std::mutex mutex;
      bool sent = false;
      bool registered = false;
      std::optional<result<T>> early;
    };
    kernels::cancellation_manager* cm = &ctx.cancellation();
    const auto token = cm->new_token();
    auto state = std::make_shared<call_state>();
    auto complete = [&ctx, done = std::move(done), finish](result<T> r) {
      finish(ctx, std::move(r));
      done();
    };
    send(reply<T>(
        [state, cm, token, complete](result<T> r) {
          bool registered = false;
          {
            std::lock_guard<std::mutex> lock(state->mutex);
            if (!state->sent) {
              state->early.emplace(std::move(r));
              return;
            }
            registered = state->registered;
          }
          if (registered) cm->deregister(token);
          complete(std::move(r));
        },
        q.peer()));
    caf::actor actor = q.actor();
    const bool registered = cm->register_callback(token, [actor, id] { caf::anon_send(actor, queue_cancel{id}); });
    if (!registered) caf::anon_send(actor, queue_cancel{id});  // the step was already aborted
    std::optional<result<T>> early;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->sent = true;
      state->registered = registered;
      early.swap(state->early);
    }
    if (early) {
      if (registered) cm->deregister(token);
      complete(std::move(*early));
    }
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
      ctx.fail_invalid_argument("dequeues component types ", type_list(types_), " from ", q->peer(),
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
        ctx.fail_invalid_argument("n is ", n, " but must be >= 0 (dequeue from ", q->peer(), ")");
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
        [](kernel_context& c, result<std::vector<tensor>> r) {
          if (!r.ok()) {
            c.fail(r.error());
            return;
          }
          if (static_cast<int>(r->size()) != c.num_outputs()) {
            c.fail(internal_error("the queue answered ", r->size(), " components for ", c.num_outputs(), " outputs"));
            return;
          }
          for (int i = 0; i < c.num_outputs(); ++i) c.set_output(i, std::move((*r)[static_cast<std::size_t>(i)]));
        });
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
}

}  // namespace troupe::actors
