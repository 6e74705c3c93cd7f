// Throttle: a custom op whose kernel is an actor (asynchronous and stateful).
//
// This example shows how an op keeps state that outlives a step and is shared by every
// step that runs it, without a lock around the state and without a waiting thread: the
// state lives in an actor, found through the device's resource manager, and the kernel
// talks to it by message. Throttle forwards its input once a token bucket grants it a
// token: at most `rate` steps per second pass, `burst` of them at once. A step that finds
// the bucket empty is parked inside the actor (a reply it will call later, not a blocked
// thread) and woken by the actor's own timer; if the step aborts meanwhile, its parked
// request is withdrawn. ThrottleStats reads the bucket, for monitoring.
//
//   examples::ensure_example_ops();  // examples/examples.h: registers Throttle, once
//   auto root = graph::scope::new_root();
//   auto x = ops::placeholder(root.with_name("x"), dtype::float32);
//   auto y = root.with_name("y").add("Throttle", {x}, {{"rate", graph::attr_value(100.0f)},
//                                                     {"burst", graph::attr_value(10)},
//                                                     {"shared_name", graph::attr_value("api")}});
//   auto s = actors::session::create(*root.to_graph());
//   auto out = (*s)->run({{"x", tensor::scalar(1.0f)}}, {"y"});  // 1.0, when a token comes
//   // Any number of threads may run steps on s: together they pass 100 per second.
//
// Ops:
//   Throttle(input: T) -> output: T   (output is input, sharing its buffer)
//     rate: float          tokens added per second (> 0); the bucket starts full
//     burst: int >= 1 = 1  how many tokens the bucket holds
//     cost: int >= 1 = 1   tokens one step takes (at most burst), e.g. a batch's size
//     timeout_ms: int = -1 < 0: wait as long as it takes; otherwise fail the step with
//                          deadline_exceeded if no token came within that long (0: only
//                          take one that is there now)
//     container, shared_name: string = ''  the bucket's key in the device's resource
//                          manager (shared_name defaults to the node's name); nodes naming
//                          the same bucket on one device share it and must agree on
//                          rate and burst
//   ThrottleStats() -> tokens: float, waiting: int64, granted: int64
//     container, shared_name: string  the bucket to read (it must exist on this device)
//
// Requests are served in arrival order: a waiting request is never overtaken, even by a
// cheaper one. The gradient of Throttle is the identity (it delays a value, it does not
// change it).
//
// Adding an op like this one takes this file plus one line, `throttle_op.cc`, in
// examples/CMakeLists.txt: that line builds the file into the troupe_examples library and
// makes the generated examples::register_example_ops call register_throttle_op (below).
// No static initializers are involved. The file has four parts: the bucket actor, the
// resource that holds it, the kernels, and the schemas with the registration function.
#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "actors/reply.h"
#include "actors/runtime_device.h"
#include "actors/spawn.h"
#include "core/resource.h"
#include "core/status.h"
#include "core/tensor.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "kernels/kernel_registry.h"

namespace troupe::examples {
namespace {

// ---- 1. The token bucket: one actor, its state a plain struct ----------------------------
//
// Protocol (in-process messages; every request carries a reply called exactly once, even
// if the actor dies first: see actors/reply.h):
//   take_request{cost, timeout_ms, withdrawn, done}
//       done(ok) once `cost` tokens are granted; deadline_exceeded after timeout_ms;
//       cancelled once *withdrawn is set and the actor has been told (withdraw_atom).
//   (withdraw_atom)                      some requester set its `withdrawn` flag: answer
//                                        those requests with cancelled.
//   (stats_atom, reply<bucket_stats>)    the bucket now.
// The actor sends itself (wake_atom, id) when the first waiting request can be served and
// (expire_atom, id) when a request's timeout passes; both are ordinary delayed messages.
//
// Why a flag and not a request id: the requester sets the flag and then sends
// withdraw_atom, so however the two messages race, the actor sees the flag either when
// the request arrives or when withdraw_atom does.

using withdraw_atom = caf::atom_constant<caf::atom("thr_withd")>;
using stats_atom = caf::atom_constant<caf::atom("thr_stats")>;
using wake_atom = caf::atom_constant<caf::atom("thr_wake")>;
using expire_atom = caf::atom_constant<caf::atom("thr_expire")>;

struct take_request {
  std::int64_t cost = 1;
  std::int64_t timeout_ms = -1;
  std::shared_ptr<std::atomic<bool>> withdrawn;
  actors::status_reply done;
};

struct bucket_stats {
  double tokens = 0;
  std::int64_t waiting = 0;
  std::int64_t granted = 0;
};

}  // namespace
}  // namespace troupe::examples

// In-process only: the messages hold callbacks and shared flags, never serialized.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::examples::take_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::reply<troupe::examples::bucket_stats>)

namespace troupe::examples {
namespace {

struct bucket_state {
  using time_point = caf::actor_clock::time_point;
  struct waiting_request {
    std::uint64_t id;
    take_request request;
  };

  std::string bucket;  // its shared_name, for error messages
  double rate = 1;     // tokens per second
  std::int64_t burst = 1;
  double tokens = 0;
  time_point refilled;  // when `tokens` was last brought up to date
  std::deque<waiting_request> waiting;
  std::uint64_t next_id = 1;
  std::uint64_t wake_for = 0;  // the request the pending wake_atom is for (0: none)
  std::int64_t granted = 0;
  static inline const char* name = "troupe-throttle";

  void refill(time_point now) {
    const double elapsed = std::chrono::duration<double>(now - refilled).count();
    tokens = std::min(static_cast<double>(burst), tokens + elapsed * rate);
    refilled = now;
  }
  // Tolerates the rounding of `elapsed * rate`, so a wake-up on time is never one short.
  bool has(std::int64_t cost) const { return tokens + 1e-9 >= static_cast<double>(cost); }
  status withdrawn() const {
    return cancelled_error("throttle '", bucket, "': request withdrawn because its step was cancelled");
  }
  status expired(std::int64_t timeout_ms) const {
    const std::string what = timeout_ms == 0 ? std::string("had no token free and timeout_ms is 0")
                                             : str_cat("granted no token within ", timeout_ms, " ms");
    return deadline_exceeded_error("throttle '", bucket, "' ", what, " (rate ", rate, " tokens/s, burst ", burst, ", ",
                                   waiting.size(), " request(s) waiting)");
  }
};

using bucket_actor = caf::stateful_actor<bucket_state>;

// Grants tokens to waiting requests in arrival order, answers withdrawn ones, and makes
// sure a wake-up is scheduled for the first request still waiting.
void serve(bucket_actor* self) {
  auto& s = self->state;
  s.refill(self->clock().now());
  while (!s.waiting.empty()) {
    auto& front = s.waiting.front();
    if (front.request.withdrawn->load()) {
      front.request.done(s.withdrawn());
    } else if (s.has(front.request.cost)) {
      s.tokens -= static_cast<double>(front.request.cost);
      ++s.granted;
      front.request.done(actors::done_t{});
    } else {
      break;
    }
    s.waiting.pop_front();
  }
  if (s.waiting.empty() || s.wake_for == s.waiting.front().id) return;
  // One timer at a time, for the request at the front; a wake-up for a request that has
  // left the front since is ignored when it comes. A very slow bucket checks back at
  // least hourly rather than overflow a duration.
  const auto& front = s.waiting.front();
  const double seconds = std::min((static_cast<double>(front.request.cost) - s.tokens) / s.rate, 3600.0);
  s.wake_for = front.id;
  self->delayed_send(self, std::chrono::ceil<std::chrono::microseconds>(std::chrono::duration<double>(seconds)),
                     wake_atom::value, front.id);
}

caf::behavior bucket_behavior(bucket_actor* self, std::string bucket, double rate, std::int64_t burst) {
  self->state.bucket = std::move(bucket);
  self->state.rate = rate;
  self->state.burst = burst;
  self->state.tokens = static_cast<double>(burst);  // it starts full
  self->state.refilled = self->clock().now();
  return {
      [=](const take_request& r) {
        auto& s = self->state;
        if (r.withdrawn->load()) return r.done(s.withdrawn());
        s.refill(self->clock().now());
        if (s.waiting.empty() && s.has(r.cost)) {
          s.tokens -= static_cast<double>(r.cost);
          ++s.granted;
          return r.done(actors::done_t{});
        }
        if (r.timeout_ms == 0) return r.done(s.expired(0));
        const std::uint64_t id = s.next_id++;
        s.waiting.push_back({id, r});
        if (r.timeout_ms > 0) self->delayed_send(self, std::chrono::milliseconds(r.timeout_ms), expire_atom::value, id);
        serve(self);
      },
      [=](withdraw_atom) {
        auto& s = self->state;
        for (auto it = s.waiting.begin(); it != s.waiting.end();) {
          if (it->request.withdrawn->load()) {
            it->request.done(s.withdrawn());
            it = s.waiting.erase(it);
          } else {
            ++it;
          }
        }
        serve(self);  // the front may have changed
      },
      [=](wake_atom, std::uint64_t id) {
        if (id != self->state.wake_for) return;  // stale: that request left the front
        self->state.wake_for = 0;
        serve(self);
      },
      [=](expire_atom, std::uint64_t id) {
        auto& s = self->state;
        for (auto it = s.waiting.begin(); it != s.waiting.end(); ++it) {
          if (it->id != id) continue;
          auto request = std::move(it->request);
          s.waiting.erase(it);
          request.done(s.expired(request.timeout_ms));
          serve(self);
          return;
        }  // not found: already granted or withdrawn
      },
      [=](stats_atom, const actors::reply<bucket_stats>& r) {
        auto& s = self->state;
        s.refill(self->clock().now());
        r(bucket_stats{s.tokens, static_cast<std::int64_t>(s.waiting.size()), s.granted});
      },
  };
}

// ---- 2. The resource: what the device's resource manager holds -------------------------
//
// One per (device, container, shared_name). The manager creates it under its lock, so
// concurrent first steps get the same bucket. When the last holder lets go (the entry is
// erased, or the cluster shuts down) the actor is told to exit, and every request still
// parked in it fails with `unavailable` (the replies' guarantee).

class throttle_resource final : public resource {
 public:
  throttle_resource(std::string name, double rate, std::int64_t burst, caf::actor actor)
      : name_(std::move(name)), rate_(rate), burst_(burst), actor_(std::move(actor)) {}
  ~throttle_resource() override { caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown); }

  std::string_view kind() const override { return "throttle"; }
  const std::string& name() const { return name_; }
  double rate() const { return rate_; }
  std::int64_t burst() const { return burst_; }
  const caf::actor& actor() const { return actor_; }
  // Whom a reply names when the actor is gone before answering.
  std::string peer() const { return str_cat("throttle '", name_, "'"); }

 private:
  std::string name_;
  double rate_;
  std::int64_t burst_;
  caf::actor actor_;
};

// ---- 3. The kernels --------------------------------------------------------------------

using kernels::async_op_kernel;
using kernels::kernel_construction;
using kernels::kernel_context;

// The runtime_device behind a kernel's device, or null after failing construction: these
// kernels spawn and address actors, which only the actor runtime's devices can do.
actors::runtime_device* require_runtime(kernel_construction& c) {
  auto* dev = actors::runtime_device::from(c.device());
  if (dev == nullptr) {
    c.fail(failed_precondition_error(c.node().op(), " keeps its token bucket in an actor, so it needs the actor "
                                     "runtime: run it through actors::session or a cluster, not on its own "
                                     "(run_kernel)"));
  }
  return dev;
}

class throttle_kernel final : public async_op_kernel {
 public:
  // Attributes are read and checked once, here; compute_async is the hot path.
  explicit throttle_kernel(kernel_construction& c) : async_op_kernel(c) {
    float rate = 0;
    if (!c.get_attr("rate", &rate) || !c.get_attr("burst", &burst_) || !c.get_attr("cost", &cost_) ||
        !c.get_attr("timeout_ms", &timeout_ms_) || !c.get_attr("container", &container_) ||
        !c.get_attr("shared_name", &bucket_)) {
      return;
    }
    rate_ = rate;
    if (bucket_.empty()) bucket_ = c.node().name();
    if (!(rate > 0) || !std::isfinite(rate)) {
      c.fail(invalid_argument_error("rate must be a positive number of tokens per second, not ", rate));
    } else if (cost_ > burst_) {
      c.fail(invalid_argument_error("cost ", cost_, " exceeds burst ", burst_,
                                    ", so no step could ever be granted; use cost <= burst"));
    } else {
      device_ = require_runtime(c);
    }
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }  // one message; never worth a hand-off

  void compute_async(kernel_context& ctx, done_callback done) override {
    auto bucket = find_or_create_bucket();
    if (!bucket.ok()) {
      ctx.fail(bucket.error());
      return done();
    }
    // Register for cancellation before sending, so the actor can only answer a request
    // whose withdrawal is already possible. On abort the callback runs (once, on the
    // aborting thread): it sets the flag and tells the actor, which answers `cancelled`.
    kernels::cancellation_manager* cancellation = &ctx.cancellation();
    const auto token = cancellation->new_token();
    auto withdrawn = std::make_shared<std::atomic<bool>>(false);
    caf::actor actor = (*bucket)->actor();
    if (!cancellation->register_callback(token, [withdrawn, actor] {
          withdrawn->store(true);
          caf::anon_send(actor, withdraw_atom::value);
        })) {
      ctx.fail(cancelled_error("the step was cancelled before it asked throttle '", bucket_, "'"));
      return done();
    }
    // The reply runs on the actor's thread: it does no more than set the output (the
    // input, shared) and hand the step back to the executor.
    actors::status_reply reply(
        [&ctx, done, cancellation, token](result<actors::done_t> r) {
          // Whether or not cancellation got here first, the actor's answer is the outcome.
          // (deregister may wait for a cancellation running on another thread; its
          // callbacks only set flags and send messages.)
          cancellation->deregister(token);
          if (r.ok()) ctx.set_output(0, ctx.input(0));
          else ctx.fail(r.error());
          done();
        },
        (*bucket)->peer());
    caf::anon_send(actor, take_request{cost_, timeout_ms_, std::move(withdrawn), std::move(reply)});
  }

 private:
  // The bucket under (container, shared_name) on this device, created on first use.
  result<std::shared_ptr<throttle_resource>> find_or_create_bucket() const {
    auto r = device_->resources().lookup_or_create(container_, bucket_, [&]() -> result<std::shared_ptr<resource>> {
      // This may run on a compute thread: spawn_unpinned keeps that thread from holding
      // up the actor system's shutdown (actors/spawn.h).
      caf::actor a = actors::spawn_unpinned(device_->system(), bucket_behavior, bucket_, rate_, burst_);
      return std::shared_ptr<resource>(std::make_shared<throttle_resource>(bucket_, rate_, burst_, std::move(a)));
    });
    if (!r.ok()) return r.error();
    auto bucket = std::dynamic_pointer_cast<throttle_resource>(*r);
    if (bucket == nullptr) {
      return invalid_argument_error("resource '", bucket_, "' in container '", container_, "' on ", device_->name(),
                                    " is a ", (*r)->kind(), ", not a throttle; give the Throttle another shared_name");
    }
    if (bucket->rate() != rate_ || bucket->burst() != burst_) {
      return invalid_argument_error("throttle '", bucket_, "' already exists on ", device_->name(), " with rate ",
                                    bucket->rate(), " and burst ", bucket->burst(), ", but this node asks for rate ",
                                    rate_, " and burst ", burst_, "; nodes sharing a bucket must agree");
    }
    return bucket;
  }

  double rate_ = 0;
  std::int64_t burst_ = 1;
  std::int64_t cost_ = 1;
  std::int64_t timeout_ms_ = -1;
  std::string container_;
  std::string bucket_;
  actors::runtime_device* device_ = nullptr;
};

// Reads a bucket. Its request is answered at once, never parked, so it needs no
// cancellation: an aborted step just waits for that answer.
class throttle_stats_kernel final : public async_op_kernel {
 public:
  explicit throttle_stats_kernel(kernel_construction& c) : async_op_kernel(c) {
    if (!c.get_attr("container", &container_) || !c.get_attr("shared_name", &bucket_)) return;
    if (bucket_.empty()) {
      c.fail(invalid_argument_error("shared_name must name the throttle to read"));
    } else {
      device_ = require_runtime(c);
    }
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

  void compute_async(kernel_context& ctx, done_callback done) override {
    auto found = std::dynamic_pointer_cast<throttle_resource>(device_->resources().lookup(container_, bucket_));
    if (found == nullptr) {
      ctx.fail(not_found_error("no throttle '", bucket_, "' in container '", container_, "' on ", device_->name(),
                               ": a Throttle node with shared_name '", bucket_,
                               "' on this device creates it when it first runs"));
      return done();
    }
    caf::anon_send(found->actor(), stats_atom::value,
                   actors::reply<bucket_stats>(
                       [&ctx, done](result<bucket_stats> r) {
                         if (r.ok()) {
                           ctx.set_output(0, tensor::scalar<float>(static_cast<float>(r->tokens)));
                           ctx.set_output(1, tensor::scalar<std::int64_t>(r->waiting));
                           ctx.set_output(2, tensor::scalar<std::int64_t>(r->granted));
                         } else {
                           ctx.fail(r.error());
                         }
                         done();
                       },
                       found->peer()));
  }

 private:
  std::string container_;
  std::string bucket_;
  actors::runtime_device* device_ = nullptr;
};

// ---- 4. Schemas (with shape functions and a gradient) ------------------------------------

// Throttle passes its input through unchanged, so the gradient does too.
status throttle_gradient(const graph::gradient_context& ctx, std::vector<graph::output>* grad_inputs) {
  *grad_inputs = {ctx.grad_outputs[0]};
  return status();
}

}  // namespace

// Adds Throttle and ThrottleStats (schemas and CPU kernels). REQUIRES: called once per
// pair of registries, before lookups begin (a second call stops the program: duplicate op).
void register_throttle_op(graph::op_registry& op_registry, kernels::kernel_registry& kernel_registry) {
  graph::add_builtin_op(op_registry, graph::op_schema("Throttle")
                                         .input("input: T")
                                         .output("output: T")
                                         .attr("T: type")
                                         .attr("rate: float")
                                         .attr("burst: int >= 1 = 1")
                                         .attr("cost: int >= 1 = 1")
                                         .attr("timeout_ms: int = -1")
                                         .attr("container: string = ''")
                                         .attr("shared_name: string = ''")
                                         .stateful()
                                         .shape_fn(graph::unchanged_shape)
                                         .gradient(throttle_gradient));
  graph::add_builtin_op(op_registry, graph::op_schema("ThrottleStats")
                                         .output("tokens: float")
                                         .output("waiting: int64")
                                         .output("granted: int64")
                                         .attr("container: string = ''")
                                         .attr("shared_name: string")
                                         .stateful()
                                         .shape_fn(graph::scalar_shape));
  kernel_registry.add("Throttle", "CPU", {}, kernels::make_kernel<throttle_kernel>);
  kernel_registry.add("ThrottleStats", "CPU", {}, kernels::make_kernel<throttle_stats_kernel>);
}

}  // namespace troupe::examples
