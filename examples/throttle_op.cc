// Throttle: a custom op whose kernel is an actor (asynchronous and stateful). State shared
// by every step that runs it lives in an actor found through the device's resource
// manager; the kernel talks to it by message, with no lock and no waiting thread.
//
// Throttle(input) -> input, once a token bucket grants it `cost` tokens: at most `rate`
// tokens per second, `burst` at once (it starts full), requests served in arrival order. A
// step that finds the bucket empty is parked in the actor and woken by its timer; one that
// aborts meanwhile withdraws its request; timeout_ms >= 0 fails it with deadline_exceeded
// (0: only a token that is there). Nodes naming one bucket (container, shared_name; by
// default the node's name) share it and must agree on rate and burst. ThrottleStats reads
// a bucket: tokens, waiting, granted. The gradient is the identity.
//
//   examples::ensure_example_ops();  // examples/examples.h: registers Throttle, once
//   auto y = root.add("Throttle", {x}, {{"rate", graph::attr_value(100.0f)},
//                                       {"shared_name", graph::attr_value("api")}});
//
// This file plus one line in examples/CMakeLists.txt is the whole op; what every actor op
// needs is the runtime's: actors/actor_resource.h (a resource holding an actor),
// actors/withdrawable.h (requests withdrawn when their step aborts) and actors/reply.h
// (answers that come even if the actor dies).
#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>

#include "actors/actor_resource.h"
#include "actors/spawn.h"
#include "actors/withdrawable.h"
#include "graph/gradients.h"
#include "kernels/kernel_registry.h"

namespace troupe::examples {
namespace {

// ---- 1. The token bucket: one actor, its state a plain struct -----------------------------
//   (take_atom, id, cost, timeout_ms, status_reply)  ok once granted; deadline_exceeded
//   (withdraw_atom, id)                              that request's step aborted: cancelled
//   (stats_atom, reply<vector<tensor>>)              tokens, waiting, granted
// wake_atom and expire_atom are the actor's own delayed messages.
using take_atom = caf::atom_constant<caf::atom("thr_take")>;
using withdraw_atom = caf::atom_constant<caf::atom("thr_withd")>;
using stats_atom = caf::atom_constant<caf::atom("thr_stats")>;
using wake_atom = caf::atom_constant<caf::atom("thr_wake")>;
using expire_atom = caf::atom_constant<caf::atom("thr_expire")>;

struct bucket_state {
  struct request {
    std::uint64_t id;
    std::int64_t cost, timeout_ms;
    actors::status_reply done;
  };
  std::string bucket;
  double rate = 1, tokens = 0;
  std::int64_t burst = 1, granted = 0;
  caf::actor_clock::time_point refilled;  // when `tokens` was last brought up to date
  std::deque<request> waiting;
  std::uint64_t wake_for = 0;  // the request the pending wake_atom is for (0: none)
  static inline const char* name = "troupe-throttle";

  void refill(caf::actor_clock::time_point now) {
    tokens = std::min(static_cast<double>(burst), tokens + std::chrono::duration<double>(now - refilled).count() * rate);
    refilled = now;
  }
  bool take(std::int64_t cost) {  // tolerates rounding, so a wake-up on time is never short
    if (tokens + 1e-9 < static_cast<double>(cost)) return false;
    tokens -= static_cast<double>(cost);
    return ++granted;
  }
  status expired(std::int64_t timeout_ms) const {
    return deadline_exceeded_error("throttle '", bucket, "' ",
                                   timeout_ms == 0 ? std::string("had no token free and timeout_ms is 0")
                                                   : str_cat("granted no token within ", timeout_ms, " ms"),
                                   " (rate ", rate, " tokens/s, burst ", burst, ", ", waiting.size(),
                                   " request(s) waiting)");
  }
};
using bucket_actor = caf::stateful_actor<bucket_state>;

// Grants tokens to waiting requests in arrival order, then schedules one wake-up, for the
// first request still waiting (a very slow bucket checks back at least hourly).
void serve(bucket_actor* self) {
  auto& s = self->state;
  s.refill(self->clock().now());
  for (; !s.waiting.empty() && s.take(s.waiting.front().cost); s.waiting.pop_front()) s.waiting.front().done(actors::done_t{});
  if (s.waiting.empty() || s.wake_for == s.waiting.front().id) return;
  s.wake_for = s.waiting.front().id;
  const double seconds = std::min((static_cast<double>(s.waiting.front().cost) - s.tokens) / s.rate, 3600.0);
  self->delayed_send(self, std::chrono::ceil<std::chrono::microseconds>(std::chrono::duration<double>(seconds)),
                     wake_atom::value, s.wake_for);
}

// Answers waiting request `id`, if it still waits (not granted, expired or withdrawn
// yet): its timeout passed, or its step aborted.
void drop(bucket_actor* self, std::uint64_t id, bool expired) {
  auto& s = self->state;
  auto it = std::find_if(s.waiting.begin(), s.waiting.end(), [id](const auto& r) { return r.id == id; });
  if (it == s.waiting.end()) return;
  auto r = std::move(*it);
  s.waiting.erase(it);
  r.done(expired ? s.expired(r.timeout_ms)
                 : cancelled_error("throttle '", s.bucket, "': request withdrawn because its step was cancelled"));
  serve(self);  // the front may have changed
}

caf::behavior bucket_behavior(bucket_actor* self, std::string bucket, double rate, std::int64_t burst) {
  self->state = bucket_state{std::move(bucket), rate, static_cast<double>(burst), burst, 0, self->clock().now()};
  return {
      [=](take_atom, std::uint64_t id, std::int64_t cost, std::int64_t timeout_ms, const actors::status_reply& done) {
        auto& s = self->state;
        s.refill(self->clock().now());
        if (s.waiting.empty() && s.take(cost)) return done(actors::done_t{});
        if (timeout_ms == 0) return done(s.expired(0));
        if (timeout_ms > 0) self->delayed_send(self, std::chrono::milliseconds(timeout_ms), expire_atom::value, id);
        s.waiting.push_back({id, cost, timeout_ms, done});
        serve(self);
      },
      [=](withdraw_atom, std::uint64_t id) { drop(self, id, false); },
      [=](expire_atom, std::uint64_t id) { drop(self, id, true); },
      [=](wake_atom, std::uint64_t id) {
        if (id != self->state.wake_for) return;  // stale: that request left the front
        self->state.wake_for = 0;
        serve(self);
      },
      [=](stats_atom, const actors::reply<std::vector<tensor>>& r) {
        auto& s = self->state;
        s.refill(self->clock().now());
        r(std::vector<tensor>{tensor::scalar<float>(static_cast<float>(s.tokens)),
                              tensor::scalar<std::int64_t>(static_cast<std::int64_t>(s.waiting.size())),
                              tensor::scalar<std::int64_t>(s.granted)});
      },
  };
}

// ---- 2. The resource: one bucket per (device, container, shared_name) ----------------------
struct throttle_resource final : actors::actor_resource {
  static constexpr const char* kind_name = "throttle";
  throttle_resource(std::string name, double rate, std::int64_t burst, caf::actor actor)
      : actor_resource(kind_name, std::move(name), std::move(actor)), rate(rate), burst(burst) {}
  const double rate;
  const std::int64_t burst;
};

// ---- 3. The kernels: attributes checked once, in the constructor --------------------------
using kernels::kernel_construction;
using kernels::kernel_context;

class throttle_kernel final : public kernels::async_op_kernel {
 public:
  explicit throttle_kernel(kernel_construction& c) : async_op_kernel(c) {
    float rate = 0;
    if (!c.get_attrs("rate", &rate, "burst", &burst_, "cost", &cost_, "timeout_ms", &timeout_ms_)) return;
    rate_ = rate;
    if (!(rate > 0) || !std::isfinite(rate)) {
      c.fail(invalid_argument_error("rate must be a positive number of tokens per second, not ", rate));
    } else if (cost_ > burst_) {
      c.fail(invalid_argument_error("cost ", cost_, " exceeds burst ", burst_, ", so no step could ever be granted; "
                                    "use cost <= burst"));
    } else {
      key_.read(c);
    }
  }

  void compute_async(kernel_context& ctx, done_callback done) override {
    auto bucket = key_.find_or_make<throttle_resource>([&] {
      caf::actor a = actors::spawn_unpinned(key_.device->system(), bucket_behavior, key_.name, rate_, burst_);
      return result<std::shared_ptr<throttle_resource>>(std::make_shared<throttle_resource>(key_.name, rate_, burst_, a));
    });
    if (bucket.ok() && ((*bucket)->rate != rate_ || (*bucket)->burst != burst_)) {
      bucket = invalid_argument_error("throttle '", key_.name, "' already exists on ", key_.device->name(), " with rate ",
                                      (*bucket)->rate, " and burst ", (*bucket)->burst, ", but this node asks for rate ",
                                      rate_, " and burst ", burst_, "; nodes sharing a bucket must agree");
    }
    if (!bucket.ok()) return ctx.fail(bucket.error()), done();
    const caf::actor actor = (*bucket)->actor();
    const std::uint64_t id = (*bucket)->next_request_id();
    actors::send_withdrawable<actors::done_t>(
        ctx, std::move(done), (*bucket)->peer(),
        [&](actors::status_reply r) { caf::anon_send(actor, take_atom::value, id, cost_, timeout_ms_, std::move(r)); },
        [actor, id] { caf::anon_send(actor, withdraw_atom::value, id); },
        [](kernel_context& c, result<actors::done_t> r) { r.ok() ? c.set_output(0, c.input(0)) : c.fail(r.error()); });
  }

 private:
  actors::resource_key key_;
  double rate_ = 0;
  std::int64_t burst_ = 1, cost_ = 1, timeout_ms_ = -1;
};

}  // namespace

// ---- 4. Schemas and registration (once per pair of registries, before lookups begin) -----
void register_throttle_op(graph::op_registry& op_registry, kernels::kernel_registry& kernel_registry) {
  graph::add_builtin_op(op_registry, graph::op_schema("Throttle")
                                         .input("input: T").output("output: T").attr("T: type")
                                         .attr("rate: float").attr("burst: int >= 1 = 1").attr("cost: int >= 1 = 1")
                                         .attr("timeout_ms: int = -1").attr("container: string = ''")
                                         .attr("shared_name: string = ''").stateful()
                                         .shape_fn(graph::unchanged_shape).gradient(graph::pass_through_gradient));
  graph::add_builtin_op(op_registry, graph::op_schema("ThrottleStats")
                                         .output("tokens: float").output("waiting: int64").output("granted: int64")
                                         .attr("container: string = ''").attr("shared_name: string").stateful()
                                         .shape_fn(graph::scalar_shape));
  kernel_registry.add("Throttle", "CPU", {}, kernels::make_kernel<throttle_kernel>);
  kernel_registry.add("ThrottleStats", "CPU", {}, kernels::make_kernel<actors::query_kernel<throttle_resource, stats_atom>>);
}

}  // namespace troupe::examples
