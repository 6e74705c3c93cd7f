// cancellation_manager: how an aborted step reaches the kernels still waiting in it.
//
// An asynchronous kernel that waits for something outside its step (a Recv for a tensor,
// a dequeue from an empty queue) registers a callback; when the step aborts, the
// executor calls start_cancel(), which runs every registered callback exactly once, and
// the kernel then fails with `cancelled`/`aborted` and calls its done. A kernel that
// finishes normally deregisters first; if deregister() returns false the callback has
// run or is running, and the kernel must let the callback's outcome stand.
//
//   auto token = ctx.cancellation()->new_token();
//   if (!ctx.cancellation()->register_callback(token, [=] { queue->cancel(id); })) {
//     ctx.fail(cancelled_error("step was cancelled")); done(); return;
//   }
//   ... later, on success: if (ctx.cancellation()->deregister(token)) { ...complete... }
//
// Thread safety: all methods may be called from any thread. Callbacks run on the thread
// that calls start_cancel(), outside the manager's lock. deregister() of a token whose
// callback is running on another thread waits for it to finish (so the callback never
// outlives what it refers to); called from inside a callback, it does not wait.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace troupe::kernels {

class cancellation_manager {
 public:
  using token = std::int64_t;
  using callback = std::function<void()>;

  cancellation_manager() = default;
  cancellation_manager(const cancellation_manager&) = delete;
  cancellation_manager& operator=(const cancellation_manager&) = delete;

  token new_token() {
    std::lock_guard<std::mutex> lock(mutex_);
    return next_token_++;
  }
  // False (and nothing registered) when cancellation has already started.
  bool register_callback(token t, callback fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cancelled_) return false;
    callbacks_.emplace(t, std::move(fn));
    return true;
  }
  // True when the callback was removed before cancellation could run it.
  bool deregister(token t) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (callbacks_.erase(t) > 0) return true;
    if (cancelling_ && cancelling_thread_ != std::this_thread::get_id()) {
      done_cv_.wait(lock, [&] { return !cancelling_; });
    }
    return false;
  }
  // Runs every registered callback once; later calls do nothing.
  void start_cancel() {
    std::map<token, callback> to_run;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cancelled_) return;
      cancelled_ = true;
      cancelling_ = true;
      cancelling_thread_ = std::this_thread::get_id();
      to_run.swap(callbacks_);
    }
    for (auto& [t, fn] : to_run) fn();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelling_ = false;
    }
    done_cv_.notify_all();
  }
  bool is_cancelled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  std::map<token, callback> callbacks_;
  token next_token_ = 1;
  bool cancelled_ = false;
  bool cancelling_ = false;
  std::thread::id cancelling_thread_;
};

}  // namespace troupe::kernels
