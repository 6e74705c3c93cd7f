// Using an actor system from a thread it does not own (a client thread, a compute-pool
// thread) without tying that thread to the system's shutdown.
//
// CAF 0.17 gives every thread that constructs an actor system, spawns an actor into one
// or makes a scoped_actor a thread-local strong reference to that system's logger, kept
// until the thread exits or uses another system. ~actor_system, once every actor has
// ended, waits for its logger's destructor: so a thread that is still alive and once
// spawned into a system (a client that called session::run or run_async, a compute
// thread that ran a queue op) made that system's destruction on any other thread wait
// forever. Everything in troupe that touches an actor system from outside the system's
// own threads goes through these:
//
//   caf::actor a = actors::spawn_unpinned(system, behavior_fn, args...);
//   {
//     actors::unpinned_use use(system);   // before the scoped_actor, so it ends after it
//     caf::scoped_actor self{system};
//     ...
//   }
//
// On the system's own threads (its CAF workers, which hold the reference anyway) they
// change nothing.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <mutex>
#include <utility>

#include "core/env.h"


namespace troupe::actors {

// While alive, the current thread may use `system`; when it ends, the thread holds no
// reference to the system's logger unless it held one before. (A thread that held
// another system's reference loses it: troupe logs nothing through CAF's logger.)
class unpinned_use {
 public:
  explicit unpinned_use(caf::actor_system& system)
      : logger_(&system.logger()), held_before_(caf::logger::current_logger() == logger_) {}
  ~unpinned_use() {
    if (!held_before_ && caf::logger::current_logger() == logger_) caf::logger::set_current_actor_system(nullptr);
  }
  unpinned_use(const unpinned_use&) = delete;
  unpinned_use& operator=(const unpinned_use&) = delete;

 private:
  caf::logger* logger_;
  bool held_before_;
};

// Waits until actor `a` has ended (at once when it has); through env, so a simulated
// world goes on meanwhile. Never call it on an actor's thread.
inline void await_exit(const caf::actor& a) {
  if (!a) return;
  struct ended_state {
    std::mutex mutex;
    env::condition_variable changed;
    bool ended = false;
  };
  auto state = std::make_shared<ended_state>();
  caf::actor_cast<caf::abstract_actor*>(a)->attach_functor([state] {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->ended = true;
    state->changed.notify_all();
  });
  std::unique_lock<std::mutex> lock(state->mutex);
  state->changed.wait(lock, [&] { return state->ended; });
}

// system.spawn(xs...), leaving the calling thread as it was (see unpinned_use).
template <class... Ts>
auto spawn_unpinned(caf::actor_system& system, Ts&&... xs) {
  unpinned_use use(system);
  return system.spawn(std::forward<Ts>(xs)...);
}

}  // namespace troupe::actors
