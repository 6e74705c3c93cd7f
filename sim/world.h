// world: virtual time and a seeded scheduler for everything troupe runs in one process.
//
//   sim::world w({.seed = 7});          // this thread becomes the world's first thread
//   ... build a cluster with w as its simulation (sim/simulation.h) ...
//   env::thread t([] { env::sleep_for(5s); });   // takes no wall time
//   t.join();
//   w.elapsed();                         // 5 s of virtual time
//
// While a world exists it is the env seam's world (core/env.h): env::now() is its virtual
// clock, env::thread starts one of its threads, and env waits and sleeps give up the
// turn. Exactly one of its threads runs at a time. When the running thread waits, the
// world first runs every actor job of the attached CAF actor system (its testing
// scheduler) and every event due now, then hands the turn to a thread that may go on,
// drawn with the seed; when none may, the virtual clock jumps to the next thing
// scheduled (an event, a CAF timer or delayed message, a thread's deadline). Actor jobs
// are also taken in an order drawn with the seed. So one seed gives one interleaving,
// replayed exactly; another gives another.
//
// When every thread waits and nothing is scheduled the run can never go on: the world
// prints what each thread waits for and ends the process with status 70 (in the real
// world that run would hang).
//
// Only one world at a time in a process, made and destroyed on the same thread, after
// every other thread of it has been joined. Events and attach run on the world's turn.
#pragma once

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/env.h"


namespace troupe::sim {

class world final : public env::world {
 public:
  struct options {
    std::uint64_t seed = 1;
  };
  // The virtual clock starts here (so that no time point of a run is the epoch).
  static constexpr std::chrono::seconds k_start{1000};

  explicit world(options o);
  ~world() override;
  world(const world&) = delete;
  world& operator=(const world&) = delete;

  // The actor system whose actors this world runs: it must use CAF's testing scheduler
  // (configure() sets it). Null: none (before the system goes).
  static void configure(caf::actor_system_config& config);
  void attach(caf::actor_system* system);

  // Runs `fn` on the world's turn at virtual time `t` (now, when t is earlier); events at
  // the same time run in the order they were scheduled.
  void at(env::clock::time_point t, std::function<void()> fn);

  // The seeded stream of this world's random choices (take it on the world's turn only).
  std::mt19937_64& random() { return random_; }
  std::uint64_t seed() const { return options_.seed; }
  // Virtual time since the world began.
  std::chrono::nanoseconds elapsed() const;

  // env::world
  env::clock::time_point now() override;
  std::uint64_t start_thread(std::function<void()> fn, std::string name) override;
  void join_thread(std::uint64_t id) override;
  bool wait(const void* channel, env::clock::time_point deadline) override;
  void notify(const void* channel, bool all) override;
  std::uint64_t random_seed() override;
  void post(std::function<void()> fn) override { at(env::clock::time_point(), std::move(fn)); }
  bool buggify(std::string_view site, double probability) override;

  // BUGGIFY sites (env::buggify) live from now on; off by default. Which sites are live
  // depends on the seed and their names only, but for the sites that TROUPE_BUGGIFY_LIVE
  // names (comma-separated), live in every run (to chase one site over many seeds); a name
  // given as "site=p" also fires with probability p instead of its own. How often each
  // fired so far, by name.
  void set_buggify(bool on);
  std::map<std::string, std::int64_t> buggify_fires() const;

  struct sim_thread;  // one of its threads (world.cc)

 private:
  void hand_on(std::unique_lock<std::mutex>& lock, sim_thread* self);
  // Makes the threads waiting on `channel` (the first to wait, unless `all`) runnable.
  // REQUIRES: mutex_ held (as for every function below that touches the threads).
  void wake(const void* channel, bool all);
  // Makes waiting thread `t` runnable (`notified`: by a notify, else by its deadline).
  void make_runnable(sim_thread* t, bool notified);
  // Makes `self` wait on `channel` until `deadline`.
  void start_waiting(sim_thread* self, const void* channel, env::clock::time_point deadline);
  // Runs actor jobs and due events until there are none (the turn's holder, unlocked).
  void drain();
  [[noreturn]] void deadlock(std::unique_lock<std::mutex>& lock);
  sim_thread* self_or_die(const char* what);

  const options options_;
  mutable std::mutex mutex_;
  std::mt19937_64 random_;
  std::mt19937_64 seeds_;  // env::random_seed's stream
  env::clock::time_point now_;
  std::multimap<env::clock::time_point, std::function<void()>> events_;
  caf::scheduler::test_coordinator* scheduler_ = nullptr;
  std::map<std::uint64_t, std::unique_ptr<sim_thread>> threads_;  // by id
  // Indexes of threads_ (a cluster of 200 workers has some 600 threads): the runnable
  // ones in the order they became so (the draws' order), the waiting ones by what they
  // wait for in the order they began, and the waiting ones with a deadline by it.
  std::vector<sim_thread*> runnable_;
  std::unordered_map<const void*, std::deque<sim_thread*>> waiters_;
  std::set<std::pair<env::clock::time_point, std::uint64_t>> deadlines_;
  std::uint64_t next_id_ = 1;
  std::uint64_t running_ = 0;  // the thread whose turn it is
  bool buggify_ = false;
  // By site, once asked: whether live, and the probability TROUPE_BUGGIFY_LIVE gives it
  // (negative: the site's own).
  struct buggify_site {
    bool live = false;
    double probability = -1;
  };
  std::map<std::string, buggify_site, std::less<>> buggify_live_;
  std::map<std::string, std::int64_t, std::less<>> buggify_fires_;  // by live site
};

}  // namespace troupe::sim
