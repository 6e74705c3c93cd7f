#include "cluster/step_gate.h"

namespace troupe::cluster {

void step_gate::enter(bool feeder) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return feeder ? held_ == 0 : closers_ == 0; });
  ++inside_;
}

void step_gate::leave() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--inside_ == 0 && closers_ > 0) changed_.notify_all();
}

void step_gate::close() {
  std::unique_lock<std::mutex> lock(mutex_);
  ++closers_;
  ++closings_;
  changed_.wait(lock, [&] { return inside_ == 0; });
  ++held_;
}

void step_gate::open() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --closers_;
    --held_;
  }
  changed_.notify_all();
}

std::int64_t step_gate::closings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closings_;
}

}  // namespace troupe::cluster
