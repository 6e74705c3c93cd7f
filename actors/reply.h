// reply<T>: a callback that is called exactly once, even if the actor that should call
// it dies.
//
// Kernels that run on compute threads talk to actors (variables, queues, the rendezvous)
// by sending a message that carries a reply; the actor calls it with the answer. If the
// message is dropped (the actor is gone) or the actor ends with the reply still parked,
// the last copy's destructor calls it with `unavailable` naming the peer, so a step fails
// with a clear error instead of hanging.
//
//   caf::anon_send(var, read_atom::value, reply<tensor>([=](result<tensor> r) { ... },
//                                                       "variable 'w'"));
//
// Thread safety: copies share one state; the first call wins, later calls do nothing.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>

#include "core/status.h"
#include "core/tensor.h"

namespace troupe::actors {

template <class T>
class reply {
 public:
  using callback = std::function<void(result<T>)>;

  reply() = default;
  // `fn` is any callable taking result<T>; it is kept with the reply's state in one
  // allocation. `peer` names who should answer, for the error of a reply never answered;
  // a caller that makes many replies may share one name.
  template <class F>
  reply(F fn, std::string peer) : reply(std::move(fn), std::make_shared<const std::string>(std::move(peer))) {}
  template <class F>
  reply(F fn, std::shared_ptr<const std::string> peer)
      : state_(std::make_shared<state_with<F>>(std::move(fn), std::move(peer))) {}

  // Delivers the answer (first call only).
  void operator()(result<T> r) const {
    if (state_ != nullptr) state_->deliver(std::move(r));
  }
  explicit operator bool() const { return state_ != nullptr; }

 private:
  struct state {
    explicit state(std::shared_ptr<const std::string> p) : peer(std::move(p)) {}
    virtual ~state() = default;
    void deliver(result<T> r) {
      if (!called.exchange(true)) call(std::move(r));
    }
    virtual void call(result<T> r) = 0;
    std::shared_ptr<const std::string> peer;
    std::atomic<bool> called{false};
  };
  template <class F>
  struct state_with final : state {
    state_with(F f, std::shared_ptr<const std::string> p) : state(std::move(p)), fn(std::move(f)) {}
    // The last copy of an unanswered reply answers for its peer.
    ~state_with() override {
      if (!this->called.exchange(true)) fn(unavailable_error(*this->peer, " went away before answering"));
    }
    void call(result<T> r) override { fn(std::move(r)); }
    F fn;
  };
  std::shared_ptr<state> state_;
};

// A reply carrying only success or an error.
struct done_t {};
using status_reply = reply<done_t>;

}  // namespace troupe::actors

// Tensors share their buffers in one process; replies hold callbacks. Neither is
// serialized by these in-process message types.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::tensor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<troupe::tensor>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::reply<troupe::tensor>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::reply<std::vector<troupe::tensor>>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::reply<bool>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::status_reply)
