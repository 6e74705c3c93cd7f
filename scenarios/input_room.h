// input_room: what a worker's input readers know of the room in its queue (the runner's
// input pipeline, doc/scenarios.md "dataset"). The worker's trainer says around each step
// that takes a batch whether it took one; a reader that saw the queue's size (a step that
// looked, or the answer of its own enqueue) keeps a sighting, and bounds the size later
// without looking again: what it saw, less a batch for each step begun since that took
// one. A step under way when the size was seen may have taken its batch before: it is not
// counted. With trainers that only take whole batches, and no other
// reader enqueueing, the bound is never below the queue's size (proved over every
// interleaving of a few steps in tests/scenarios/input_room_test.cc).
//
//   room.begin_take();  r = session.run(...train...);  room.end_take(r.ok());   // the trainer
//   auto seen = room.sight(size);  ...  if (room.bound(seen, batch) <= fill_below) enqueue;   // a reader
//
// Thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "core/env.h"

namespace troupe::scenarios {

class input_room {
 public:
  // The trainer, around a step that takes a batch: `took` when it did (it succeeded).
  void begin_take() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++taking_;
  }
  void end_take(bool took) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --taking_;
      if (took) ++taken_;
    }
    if (took) changed_.notify_all();
  }
  // Wakes the readers that wait (the run stops: set what their `stop` reads first).
  void wake() {
    { std::lock_guard<std::mutex> lock(mutex_); }  // a reader between its look at `stop` and its wait
    changed_.notify_all();
  }
  // Batches taken so far.
  std::uint64_t taken() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return taken_;
  }

  // A reader saw the queue hold `size` elements (just now: call it as the step that saw it
  // returns).
  struct sighting {
    std::int64_t size = 0;
    std::uint64_t taken = 0;  // batches taken then
    std::int64_t taking = 0;  // steps under way then
  };
  sighting sight(std::int64_t size) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {size, taken_, taking_};
  }
  // An upper bound on the queue's size now, from `seen`, when trainer steps take `batch`
  // elements each and no other reader enqueues.
  std::int64_t bound(const sighting& seen, std::int64_t batch) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto since = static_cast<std::int64_t>(taken_ - seen.taken) - seen.taking;
    return seen.size - batch * std::max<std::int64_t>(0, since);
  }
  // Waits until more than `taken` batches are taken (true), `stop()` says so, or `timeout`
  // passes (false for both).
  template <class Stop>
  bool wait_for_take(std::uint64_t taken, Stop stop, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return stop() || taken_ > taken; });
    return taken_ > taken;
  }

 private:
  mutable std::mutex mutex_;
  env::condition_variable changed_;
  std::uint64_t taken_ = 0;
  std::int64_t taking_ = 0;
};

}  // namespace troupe::scenarios
