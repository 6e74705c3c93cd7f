// answer<T>: one reply of an actor conversation, to wait for with a timeout, so that an
// actor that never answers fails the test instead of hanging it; and the small actor
// system configuration the actor tests share.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "actors/reply.h"
#include "core/status.h"

namespace troupe::testing {

using namespace std::chrono_literals;

// One answer to wait for: make a reply with reply(), then wait(). Every wait has a
// timeout, so a queue that never answers fails the test instead of hanging it.
template <class T>
class answer {
 public:
  actors::reply<T> reply() {
    auto s = state_;
    return actors::reply<T>(
        [s](result<T> r) {
          std::lock_guard<std::mutex> lock(s->mutex);
          s->value.emplace(std::move(r));
          s->cv.notify_all();
        },
        "the actor under test");
  }
  // The answer, or deadline_exceeded naming the wait when none came in time.
  result<T> wait(std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (!state_->cv.wait_for(lock, timeout, [&] { return state_->value.has_value(); })) {
      return deadline_exceeded_error("no answer within ", timeout.count(), " ms");
    }
    return *state_->value;
  }
  // True when an answer came within `timeout` (use a short one to check it is parked).
  bool arrived(std::chrono::milliseconds timeout = 50ms) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    return state_->cv.wait_for(lock, timeout, [&] { return state_->value.has_value(); });
  }

 private:
  struct state {
    std::mutex mutex;
    std::condition_variable cv;
    std::optional<result<T>> value;
  };
  std::shared_ptr<state> state_ = std::make_shared<state>();
};

inline caf::actor_system_config& test_config() {
  static caf::actor_system_config cfg = [] {
    caf::actor_system_config c;
    c.set("scheduler.max-threads", 2);
    return c;
  }();
  return cfg;
}

}  // namespace troupe::testing
