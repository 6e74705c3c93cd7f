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

#include <mutex>
#include <optional>
#include <utility>

#include "actors/reply.h"
#include "kernels/kernel.h"

namespace troupe::actors {

template <class T, class Send, class Withdraw, class Finish>
void send_withdrawable(kernels::kernel_context& ctx, kernels::async_op_kernel::done_callback done,
                       std::shared_ptr<const std::string> peer, Send&& send, Withdraw withdraw, Finish finish) {
  struct call_state {
    std::mutex mutex;
    bool sent = false;
    bool registered = false;
    std::optional<result<T>> early;  // an answer that came before registration was over
  };
  kernels::cancellation_manager* cancellation = &ctx.cancellation();
  const auto token = cancellation->new_token();
  auto state = std::make_shared<call_state>();
  auto complete = [&ctx, done = std::move(done), finish = std::move(finish)](result<T> r) {
    finish(ctx, std::move(r));
    done();
  };
  send(reply<T>(
      [state, cancellation, token, complete](result<T> r) {
        bool registered = false;
        {
          std::lock_guard<std::mutex> lock(state->mutex);
          if (!state->sent) {
            state->early.emplace(std::move(r));
            return;
          }
          registered = state->registered;
        }
        if (registered) cancellation->deregister(token);
        complete(std::move(r));
      },
      std::move(peer)));
  const bool registered = cancellation->register_callback(token, withdraw);
  if (!registered) withdraw();  // the step was already aborted
  std::optional<result<T>> early;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->sent = true;
    state->registered = registered;
    early.swap(state->early);
  }
  if (early) {
    if (registered) cancellation->deregister(token);
    complete(std::move(*early));
  }
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
