#include "cluster/step_gate.h"

namespace troupe::cluster {

void step_gate::enter() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !closed_; });
  ++inside_;
}

void step_gate::leave() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--inside_ == 0 && closed_) changed_.notify_all();
}

void step_gate::close() {
  std::unique_lock<std::mutex> lock(mutex_);
  closed_ = true;
  ++closings_;
  changed_.wait(lock, [&] { return inside_ == 0; });
}

void step_gate::open() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = false;
  }
  changed_.notify_all();
}

std::int64_t step_gate::closings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closings_;
}

}  // namespace troupe::cluster
