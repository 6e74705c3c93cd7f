// send_withdrawable: how an asynchronous kernel asks an actor for something that may wait
// (a Recv for its tensor, a dequeue from an empty queue, a lease on a busy variable, a
// token from a throttle) so that the request is withdrawn when the step aborts meanwhile.
//
//   send_withdrawable<tensor>(
//       ctx, std::move(done), peer,
//       [&](reply<tensor> r) { caf::anon_send(actor, my_request{id, std::move(r)}); },  // send
//       [actor, id] { caf::anon_send(actor, withdraw_atom::value, id); },               // withdraw
//       [](kernel_context& ctx, result<tensor> r) {                                     // finish
//         if (r.ok()) ctx.set_output(0, std::move(*r)); else ctx.fail(r.error());
//       });
//
// The actor's side of the contract: it answers every request exactly once through its
// reply (actors/reply.h answers for it if it dies), and on a withdrawal answers the named
// request with `cancelled` if it is still waiting, or ignores it if already answered.
//
// The race, in one paragraph: the request is sent first and registered with the step's
// cancellation second, so a withdrawal (sent from the aborting thread) is always
// enqueued after the request it names and the actor can never see it first. An answer
// that arrives before registration is over (a quick actor, or an answer given inside
// `send`, as the rendezvous does when it runs on the same thread) is held and delivered
// when registration is done; if the step had already aborted at registration, the
// withdrawal is sent at once. The answer alone finishes the kernel, once: when the
// withdrawal wins, the answer is the actor's `cancelled`.
//
// Thread safety: the reply may be called from any thread; `withdraw` runs on the thread
// that aborts the step, at most once, and must only send messages.
#pragma once

#include <atomic>
#include <optional>
#include <utility>

#include "actors/reply.h"
#include "kernels/kernel.h"

namespace troupe::actors {

template <class T, class Send, class Withdraw, class Finish>
void send_withdrawable(kernels::kernel_context& ctx, kernels::async_op_kernel::done_callback done,
                       std::shared_ptr<const std::string> peer, Send&& send, Withdraw withdraw, Finish finish) {
  // One allocation and one atomic: `phase` tells which side completes the call when the
  // answer comes before registration is over.
  struct call_state {
    call_state(kernels::kernel_context& c, kernels::async_op_kernel::done_callback d, Finish f)
        : ctx(&c), done(std::move(d)), finish(std::move(f)), token(c.cancellation().new_token()) {}
    kernels::kernel_context* ctx;
    kernels::async_op_kernel::done_callback done;
    Finish finish;
    kernels::cancellation_manager::token token;
    bool registered = false;            // written before phase 0 -> 1
    std::optional<result<T>> early;     // written before phase 0 -> 2
    std::atomic<int> phase{0};          // 0: sending, 1: registered, 2: answered while sending
    void complete(result<T> r) {
      if (registered) ctx->cancellation().deregister(token);
      finish(*ctx, std::move(r));
      auto d = std::move(done);
      d();
    }
    void complete_early() {
      result<T> r = std::move(*early);
      early.reset();
      complete(std::move(r));
    }
  };
  auto state = std::make_shared<call_state>(ctx, std::move(done), std::move(finish));
  send(reply<T>(
      [state](result<T> r) {
        if (state->phase.load(std::memory_order_acquire) == 1) return state->complete(std::move(r));
        state->early.emplace(std::move(r));
        int sending = 0;
        if (state->phase.compare_exchange_strong(sending, 2, std::memory_order_acq_rel)) return;  // theirs
        state->complete_early();  // registration finished meanwhile
      },
      std::move(peer)));
  state->registered = ctx.cancellation().register_callback(state->token, withdraw);
  if (!state->registered) withdraw();  // the step was already aborted
  int sending = 0;
  if (state->phase.compare_exchange_strong(sending, 1, std::memory_order_acq_rel)) return;
  state->complete_early();  // answered while we were sending and registering
}

// A `finish` for requests answered with tensors: they become the node's outputs, in
// order (an answer with the wrong count is an internal error naming both counts).
inline void set_outputs(kernels::kernel_context& ctx, result<std::vector<tensor>> r) {
  if (!r.ok()) return ctx.fail(r.error());
  if (static_cast<int>(r->size()) != ctx.num_outputs()) {
    return ctx.fail(internal_error("the actor answered ", r->size(), " tensors for ", ctx.num_outputs(), " outputs"));
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, std::move((*r)[static_cast<std::size_t>(i)]));
}

// A request that is answered at once, never parked (a size, statistics): nothing to
// withdraw. `send(reply<std::vector<tensor>>)` sends it; the answer's tensors become the
// node's outputs.
template <class Send>
void ask_for_outputs(kernels::kernel_context& ctx, kernels::async_op_kernel::done_callback done,
                     std::shared_ptr<const std::string> peer, Send&& send) {
  send(reply<std::vector<tensor>>(
      [&ctx, done = std::move(done)](result<std::vector<tensor>> r) {
        set_outputs(ctx, std::move(r));
        done();
      },
      std::move(peer)));
}

}  // namespace troupe::actors
