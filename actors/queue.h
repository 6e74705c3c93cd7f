// Queues as actors: TensorFlow 1.x FIFOQueue, RandomShuffleQueue and PaddingFIFOQueue,
// each one CAF actor that owns the elements and the requests waiting on them.
//
// An element is a tuple of tensors, one per component type. Producers enqueue elements
// (one, or many stacked along dimension 0), consumers dequeue them (one, exactly n, or up
// to n once the queue is closed), and anyone may close the queue or ask its size. Every
// request carries a reply<T> (actors/reply.h) that the queue calls exactly once, so a
// kernel running on a compute thread talks to the queue without a requester actor:
//
//   queue_options o;
//   o.name = "q";
//   o.types = {dtype::float32};
//   o.shapes = {partial_shape{2}};
//   o.capacity = 10;
//   auto q = make_queue(system, std::move(o));
//   (*q)->enqueue({tensor::from_vector<float>({1, 2})},
//                 status_reply([](result<done_t> r) { ... }, "queue 'q'"));
//   (*q)->dequeue_many(4, element_reply([](result<std::vector<tensor>> r) { ... }, "queue 'q'"));
//
// Waiting is never a blocked thread. An enqueue into a full queue, or a dequeue that
// cannot be served yet, is parked in the actor's state and served in arrival order as
// space or elements arrive. Contract (TensorFlow's):
//  1. Enqueues are served one request at a time, in arrival order; an EnqueueMany of more
//     elements than fit proceeds in parts as space frees, and no other enqueue's elements
//     come between its own.
//  2. Dequeues are served in arrival order. The first waiting DequeueMany/UpTo takes
//     elements as they become available (so n may exceed the capacity); the ones behind it
//     wait their turn.
//  3. Close without cancel_pending_enqueues waits behind the enqueues already parked, then
//     closes; with it, the queue closes at once and parked enqueues fail with `cancelled`.
//     Closing a closed queue (without cancel) fails with `cancelled`.
//  4. Once closed: enqueues fail with `cancelled` ("queue 'q' is closed"); a dequeue that
//     cannot be served fails with out_of_range ("queue 'q' is closed and has insufficient
//     elements (requested n, current size k)"), giving back what it had taken; a
//     DequeueUpTo returns what is left when that is more than nothing. A RandomShuffleQueue
//     ignores min_after_dequeue once closed.
//  5. cancel(request_id) fails that parked request with `cancelled` (a dequeue gives back
//     what it had taken, an EnqueueMany keeps the elements already in). A request with a
//     timeout fails with deadline_exceeded when it is still parked after that long.
//  6. When the actor ends (an exit, or its owner going down), every parked request fails
//     with `unavailable`; a request sent to an ended queue fails the same way.
//
// Elements are never copied into the queue: a queue holds runs of the enqueued tensors.
// Dequeue(Many) copies each run's bytes into the output once; a DequeueMany that takes
// exactly one whole enqueued batch returns that batch's tensors without a copy. Large
// copies run on the queue's compute pool, not on the actor's thread.
//
// Thread safety: queue_resource's methods may be called from any thread.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "actors/actor_resource.h"
#include "actors/reply.h"
#include "core/resource.h"
#include "core/shape.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/kernel_registry.h"

namespace troupe::actors {

enum class queue_kind { fifo, random_shuffle, padding_fifo };

// "FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue" (as TensorFlow's errors say).
std::string_view queue_kind_name(queue_kind kind);

struct queue_options {
  std::string name;                   // used in every error message: "queue 'name'"
  queue_kind kind = queue_kind::fifo;
  std::vector<dtype> types;           // one per component; fixed-size dtypes only
  // Empty (any shapes; then DequeueMany/UpTo are refused, as in TensorFlow) or one per
  // component. FIFO and RandomShuffle need fully defined shapes; PaddingFIFO needs them
  // given, with unknown dimensions (-1) allowed.
  std::vector<partial_shape> shapes;
  std::int64_t capacity = -1;         // < 0: unbounded
  std::int64_t min_after_dequeue = 0; // random_shuffle only
  std::uint64_t seed = 0;             // random_shuffle: both 0 draws a fresh seed
  std::uint64_t seed2 = 0;
  // Where large dequeue copies run; null runs them on the actor. REQUIRES: outlives the
  // actor.
  compute_pool* pool = nullptr;
  // When valid, the queue monitors it and stops when it goes down (a device's queues
  // end with the device actor).
  caf::actor owner;
};

// Checks options (as the queue ops' kernels do). Errors name the queue.
status validate_queue_options(const queue_options& options);

// What a dequeue receives: the components of one element, or for DequeueMany/UpTo the
// components stacked along a new dimension 0.
using element_reply = reply<std::vector<tensor>>;

// ---- Messages (in-process only). A request_id identifies a request for cancel(); it
// must be unique among one queue's requests, and 0 means "cannot be cancelled".
// timeout_ms > 0 fails a request with deadline_exceeded if it is still parked after that
// long.

// Enqueues one element (many = false) or the elements along dimension 0 (many = true).
// Errors: invalid_argument naming the queue, the component and both dtypes or shapes;
// cancelled when the queue is (or gets) closed.
struct queue_enqueue {
  std::uint64_t request_id = 0;
  std::vector<tensor> components;
  bool many = false;
  std::int64_t timeout_ms = -1;
  status_reply done;
};

enum class dequeue_mode { one, many, up_to };

// Dequeues one element, exactly n, or up to n (fewer only once the queue is closed).
struct queue_dequeue {
  std::uint64_t request_id = 0;
  dequeue_mode mode = dequeue_mode::one;
  std::int64_t n = 1;  // ignored for dequeue_mode::one
  std::int64_t timeout_ms = -1;
  element_reply done;
};

// Closes the queue (see the contract above).
struct queue_close {
  std::uint64_t request_id = 0;
  bool cancel_pending_enqueues = false;
  status_reply done;
};

// The number of elements in the queue now.
struct queue_size_query {
  reply<std::int64_t> done;
};

// The queue's contents, for a checkpoint: every element, stacked along dimension 0 per
// component in the queue's order (FIFO order; a RandomShuffleQueue's in its internal
// order), then the generator's state (int64 [11]: Philox key, counter, the block being
// used and how much of it; [0] for other kinds). Restored, they make the same dequeues
// again. Errors: failed_precondition when the component shapes are not fully defined
// (a queue of elements of varying shapes cannot be stacked without padding).
struct queue_save_state {
  element_reply done;
};

// Replaces the contents with `components` (stacked, as saved) and the generator's state.
// Errors: invalid_argument naming what does not match the queue (dtype, shape, more
// elements than its capacity, a generator state of the wrong size);
// failed_precondition while requests are parked (restore between steps).
struct queue_restore_state {
  std::vector<tensor> components;
  tensor random_state;
  status_reply done;
};

// Fails the parked request `request_id` with `cancelled`; does nothing when it is not
// parked (already answered, or unknown).
struct queue_cancel {
  std::uint64_t request_id = 0;
};

// Spawns a queue actor. REQUIRES: validate_queue_options(options).ok().
caf::actor spawn_queue(caf::actor_system& system, queue_options options);

// A queue as a resource (kind "queue", actors/actor_resource.h): what a queue op's handle
// points at. It holds the actor, the queue's description, and the request-id counter its
// users share. Destroying it stops the actor.
class queue_resource final : public actor_resource {
 public:
  static constexpr const char* kind_name = "queue";
  queue_resource(caf::actor actor, queue_options options);

  const queue_options& options() const { return options_; }
  const std::vector<dtype>& component_types() const { return options_.types; }
  const std::vector<partial_shape>& component_shapes() const { return options_.shapes; }

  // Ok when `other` (from another node naming the same shared queue) describes this
  // queue: kind, component types and shapes, capacity, and the shuffle parameters.
  status matches(const queue_options& other) const;

  // Senders. Each returns the request id, for cancel().
  std::uint64_t enqueue(std::vector<tensor> element, status_reply done, std::int64_t timeout_ms = -1);
  std::uint64_t enqueue_many(std::vector<tensor> batch, status_reply done, std::int64_t timeout_ms = -1);
  std::uint64_t dequeue(element_reply done, std::int64_t timeout_ms = -1);
  std::uint64_t dequeue_many(std::int64_t n, element_reply done, std::int64_t timeout_ms = -1);
  std::uint64_t dequeue_up_to(std::int64_t n, element_reply done, std::int64_t timeout_ms = -1);
  std::uint64_t close(bool cancel_pending_enqueues, status_reply done);
  void size(reply<std::int64_t> done) const;
  void cancel(std::uint64_t request_id) const;
  void save_state(element_reply done) const;
  void restore_state(std::vector<tensor> components, tensor random_state, status_reply done) const;

 private:
  queue_options options_;
};

// Validates the options and spawns the queue. Errors: validate_queue_options's.
result<std::shared_ptr<queue_resource>> make_queue(caf::actor_system& system, queue_options options);

// Kernels for FIFOQueueV2, RandomShuffleQueueV2, PaddingFIFOQueueV2, QueueEnqueueV2,
// QueueEnqueueManyV2, QueueDequeueV2, QueueDequeueManyV2, QueueDequeueUpToV2,
// QueueCloseV2, QueueSizeV2, QueueSaveStateV2 and QueueRestoreStateV2 (CPU). The queue ops need a runtime_device (the actor
// runtime); the others need a queue handle. Call once, before lookups begin.
void register_queue_kernels(kernels::kernel_registry& registry);

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::queue_enqueue)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::queue_dequeue)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::queue_close)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::queue_size_query)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::queue_cancel)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::queue_save_state)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::queue_restore_state)
