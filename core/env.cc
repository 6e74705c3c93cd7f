#include "core/env.h"

#include <atomic>
#include <random>
#include <utility>

namespace troupe::env {
namespace {
std::atomic<world*> g_world{nullptr};
}  // namespace

world* current() { return g_world.load(std::memory_order_acquire); }
void install(world* w) { g_world.store(w, std::memory_order_release); }

clock::time_point now() {
  world* w = current();
  return w != nullptr ? w->now() : clock::now();
}

void sleep_until(clock::time_point t) {
  world* w = current();
  if (w == nullptr) {
    std::this_thread::sleep_until(t);
    return;
  }
  static const char k_sleeping = 0;  // a channel nobody notifies
  while (w->now() < t) w->wait(&k_sleeping, t);
}

void post(std::function<void()> fn) {
  if (world* w = current()) return w->post(std::move(fn));
  fn();
}

std::uint64_t random_seed() {
  if (world* w = current()) return w->random_seed();
  static thread_local std::mt19937_64 engine{std::random_device{}()};
  return engine();
}

bool buggify(std::string_view site, double probability) {
  world* w = current();
  return w != nullptr && w->buggify(site, probability);
}

thread::thread(std::function<void()> fn, std::string name) : world_(current()) {
  if (world_ != nullptr) {
    sim_id_ = world_->start_thread(std::move(fn), std::move(name));
  } else {
    os_ = std::thread(std::move(fn));
  }
}

thread& thread::operator=(thread&& other) noexcept {
  if (joinable()) std::terminate();
  os_ = std::move(other.os_);
  world_ = std::exchange(other.world_, nullptr);
  sim_id_ = std::exchange(other.sim_id_, 0);
  return *this;
}

thread::~thread() {
  if (joinable()) std::terminate();
}

void thread::join() {
  if (sim_id_ != 0) {
    world_->join_thread(std::exchange(sim_id_, 0));
    return;
  }
  os_.join();
}

void mutex::lock() {
  world* w = current();
  if (w == nullptr) return real_.lock();
  // Only one thread of the world runs at a time: no race between the test and the set.
  while (held_) w->wait(this, clock::time_point::max());
  held_ = true;
}

void mutex::unlock() {
  world* w = current();
  if (w == nullptr) return real_.unlock();
  held_ = false;
  w->notify(this, false);
}

bool mutex::try_lock() {
  if (current() == nullptr) return real_.try_lock();
  if (held_) return false;
  held_ = true;
  return true;
}

void condition_variable::notify_one() {
  if (world* w = current()) w->notify(this, false);
  real_.notify_one();
}

void condition_variable::notify_all() {
  if (world* w = current()) w->notify(this, true);
  real_.notify_all();
}

void condition_variable::wait(std::unique_lock<std::mutex>& lock) {
  wait_until(lock, clock::time_point::max());
}

bool condition_variable::wait_until(std::unique_lock<std::mutex>& lock, clock::time_point deadline) {
  world* w = current();
  if (w == nullptr) {
    if (deadline == clock::time_point::max()) {
      real_.wait(lock);
      return true;
    }
    return real_.wait_until(lock, deadline) == std::cv_status::no_timeout;
  }
  // Only this thread of the world runs until wait() gives the turn away, so no notify
  // can come between the unlock and the wait.
  lock.unlock();
  const bool notified = w->wait(this, deadline);
  lock.lock();
  return notified;
}

}  // namespace troupe::env
