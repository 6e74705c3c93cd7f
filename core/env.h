// env: the one seam between troupe's runtime and the world it runs in: the time, sleeping,
// threads, waiting for another thread, and the seeds of random choices.
//
// By default this is the real world (steady_clock, std::thread, std::condition_variable,
// std::random_device). While a simulation runs (sim/world.h installs one), the same calls
// go to a simulated world: a virtual clock, and threads that take turns one at a time in
// an order drawn from the simulation's seed, so that a run replays exactly.
//
//   env::thread t([&] { ... env::sleep_for(10ms); ... });   // instead of std::thread
//   env::condition_variable changed;                        // instead of std::condition_variable
//   changed.wait_for(lock, 2s, [&] { return done; });
//   auto t0 = env::now();                                    // instead of steady_clock::now()
//   t.join();
//
// Code on the runtime's paths (actors, cluster, scenarios) uses these, never the std ones
// directly, so that everything it does can run under virtual time. Threads that only
// compute and never wait on another (a pool's helpers inside one call) may stay std.
//
// Thread safety: everything here may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace troupe::env {

using clock = std::chrono::steady_clock;

// A world other than the real one (sim::world). Its threads run one at a time; a thread
// gives up its turn only inside wait() (and join, sleep), never elsewhere.
class world {
 public:
  virtual ~world() = default;
  virtual clock::time_point now() = 0;
  // A new thread running `fn`, which starts when its turn comes; returns its id.
  virtual std::uint64_t start_thread(std::function<void()> fn, std::string name) = 0;
  // Waits until thread `id` has ended (the OS thread is joined too).
  virtual void join_thread(std::uint64_t id) = 0;
  // Gives up the turn until `channel` is notified or `deadline` (when not max()) passes;
  // false when the deadline passed first. Called with no lock held that another thread
  // of this world may need.
  virtual bool wait(const void* channel, clock::time_point deadline) = 0;
  virtual void notify(const void* channel, bool all) = 0;
  virtual std::uint64_t random_seed() = 0;
  // Runs `fn` on the world's turn, after what is running now, at the same virtual time.
  virtual void post(std::function<void()> fn) = 0;
  // Whether BUGGIFY site `site` fires now, if live with `probability` each time (see
  // env::buggify). On the world's turn.
  virtual bool buggify(std::string_view site, double probability) { return false; }
};

// The world now in force; null for the real one.
world* current();
// Puts `w` in force (null: the real world again). Only a simulation does this, before it
// starts any thread and after its last one has ended.
void install(world* w);
inline bool simulated() { return current() != nullptr; }

clock::time_point now();
void sleep_until(clock::time_point t);
inline void sleep_for(clock::duration d) { sleep_until(now() + d); }

// Runs `fn` soon: on a simulated world's turn (world::post), or at once here in the real
// world.
void post(std::function<void()> fn);

// A seed for a random choice: from std::random_device, or the simulation's seeded stream.
std::uint64_t random_seed();

// BUGGIFY (FoundationDB's): a place in the runtime where a rare but legal behaviour can be
// forced (a transfer much later than usual, a kernel ten times slower, a checkpoint save
// that fails), so that a simulation explores the paths that handle it. Always false in
// the real world, and in a simulated one unless its buggify is on (scenario
// faults.random.buggify): then each site is live in a run with
// probability 1/4, drawn from the seed and the site's name, and a live site fires each
// time with `probability` (FoundationDB's BUGGIFY_WITH_PROB; 1/4 unless the site says
// less, as one passed on every step does), drawn from the seed. Call it on the world's
// turn (from actors, events and the world's threads) so that a seed replays the same fires.
//
//   if (env::buggify("network.spike")) delay += 20ms;
//   if (env::buggify("step.unavailable", 0.1)) return unavailable_error(...);
inline constexpr double k_buggify_probability = 0.25;
bool buggify(std::string_view site, double probability = k_buggify_probability);

// std::thread's shape: runs `fn` at once (its turn, under a simulation); join before it
// goes (destroying a joinable thread terminates, as std::thread does).
class thread {
 public:
  thread() = default;
  explicit thread(std::function<void()> fn, std::string name = "thread");
  thread(thread&& other) noexcept { *this = std::move(other); }
  thread& operator=(thread&& other) noexcept;
  ~thread();
  bool joinable() const { return os_.joinable() || sim_id_ != 0; }
  void join();

 private:
  std::thread os_;
  world* world_ = nullptr;
  std::uint64_t sim_id_ = 0;
};

// A mutex that may stay locked while its holder waits (a lock held across a step): under
// a simulation, a thread that finds it taken gives up its turn instead of blocking the
// world. Use std::mutex for locks held only while computing.
class mutex {
 public:
  void lock();
  void unlock();
  bool try_lock();

 private:
  std::mutex real_;
  bool held_ = false;  // under a simulation
};

// std::condition_variable's shape over std::unique_lock<std::mutex>.
class condition_variable {
 public:
  void notify_one();
  void notify_all();
  void wait(std::unique_lock<std::mutex>& lock);
  // False when `deadline` passed first.
  bool wait_until(std::unique_lock<std::mutex>& lock, clock::time_point deadline);

  template <class Predicate>
  void wait(std::unique_lock<std::mutex>& lock, Predicate done) {
    while (!done()) wait(lock);
  }
  template <class Predicate>
  bool wait_until(std::unique_lock<std::mutex>& lock, clock::time_point deadline, Predicate done) {
    while (!done()) {
      if (!wait_until(lock, deadline)) return done();
    }
    return true;
  }
  template <class Rep, class Period, class Predicate>
  bool wait_for(std::unique_lock<std::mutex>& lock, std::chrono::duration<Rep, Period> d, Predicate done) {
    return wait_until(lock, now() + std::chrono::duration_cast<clock::duration>(d), std::move(done));
  }

 private:
  std::condition_variable real_;
};

}  // namespace troupe::env
