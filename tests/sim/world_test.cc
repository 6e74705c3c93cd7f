#include "sim/world.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/spawn.h"
#include "core/env.h"

namespace troupe::sim {
namespace {

using namespace std::chrono_literals;

// Three threads that each append their name around sleeps and a shared condition.
std::string interleaving(std::uint64_t seed, std::chrono::nanoseconds* took = nullptr) {
  world w({.seed = seed});
  std::mutex m;
  env::condition_variable changed;
  std::string log;
  int arrived = 0;
  std::vector<env::thread> threads;
  for (char name : std::string("abc")) {
    threads.emplace_back([&, name] {
      for (int i = 0; i < 4; ++i) {
        std::unique_lock<std::mutex> lock(m);
        log += name;
        lock.unlock();
        env::sleep_for(std::chrono::milliseconds(i % 2));
      }
      std::unique_lock<std::mutex> lock(m);
      ++arrived;
      changed.notify_all();
      changed.wait(lock, [&] { return arrived == 3; });
      log += static_cast<char>(name - 'a' + 'A');
    });
  }
  for (auto& t : threads) t.join();
  if (took != nullptr) *took = w.elapsed();
  return log;
}

TEST_CASE("world: one seed replays one interleaving, another seed gives another") {
  const std::string first = interleaving(7);
  CHECK(first.size() == 15);
  CHECK(interleaving(7) == first);
  std::set<std::string> seen;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) seen.insert(interleaving(seed));
  CHECK(seen.size() > 1);
}

// How often site "probe" fires in 20,000 passes at `probability`, with TROUPE_BUGGIFY_LIVE
// = `live` (seed 11), and whether it was live.
std::int64_t fires(const char* live, double probability) {
  ::setenv("TROUPE_BUGGIFY_LIVE", live, 1);
  world w({.seed = 11});
  w.set_buggify(true);
  std::int64_t n = 0;
  for (int i = 0; i < 20000; ++i) n += env::buggify("probe", probability) ? 1 : 0;
  ::unsetenv("TROUPE_BUGGIFY_LIVE");
  const auto fired = w.buggify_fires();
  CHECK(fired.count("probe") == 1);  // forced live
  return n;
}

TEST_CASE("world: a live BUGGIFY site fires with its own probability, or the one TROUPE_BUGGIFY_LIVE gives it") {
  CHECK(fires("probe", env::k_buggify_probability) == Approx(5000).epsilon(0.05));
  CHECK(fires("probe", 0.1) == Approx(2000).epsilon(0.08));
  CHECK(fires("probe", 0.003) == Approx(60).epsilon(0.4));
  CHECK(fires("other,probe=0.5", 0.1) == Approx(10000).epsilon(0.05));
  CHECK(fires("probe=0", 0.25) == 0);
  CHECK(fires("probe=1", 0.25) == 20000);
  // Replayed alike by its seed.
  CHECK(fires("probe=0.37", 0.1) == fires("probe=0.37", 0.1));
}

TEST_CASE("world: sleeps take virtual time, not wall time") {
  const auto wall = std::chrono::steady_clock::now();
  world w({.seed = 1});
  const auto t0 = env::now();
  env::thread sleeper([] { env::sleep_for(std::chrono::hours(2)); });
  sleeper.join();
  CHECK(env::now() - t0 == std::chrono::hours(2));
  CHECK(w.elapsed() == std::chrono::hours(2));
  CHECK(std::chrono::steady_clock::now() - wall < std::chrono::seconds(10));
}

TEST_CASE("world: a wait with a deadline times out in virtual time") {
  world w({.seed = 3});
  std::mutex m;
  env::condition_variable never;
  std::unique_lock<std::mutex> lock(m);
  const auto t0 = env::now();
  CHECK_FALSE(never.wait_for(lock, 250ms, [] { return false; }));
  CHECK(env::now() - t0 == 250ms);
}

TEST_CASE("world: events run at their virtual time, in order") {
  world w({.seed = 5});
  std::vector<int> order;
  const auto t0 = env::now();
  w.at(t0 + 30ms, [&] { order.push_back(3); });
  w.at(t0 + 10ms, [&] { order.push_back(1); });
  w.at(t0 + 10ms, [&] { order.push_back(2); });
  env::sleep_for(50ms);
  CHECK(order == std::vector<int>{1, 2, 3});
}

TEST_CASE("world: actors run under the virtual clock") {
  world w({.seed = 9});
  caf::actor_system_config config;
  world::configure(config);
  config.set("logger.verbosity", caf::atom("quiet"));
  {
    caf::actor_system system(config);
    w.attach(&system);
    std::mutex m;
    env::condition_variable answered;
    std::optional<env::clock::duration> waited;
    auto echo = system.spawn([](caf::event_based_actor* self) -> caf::behavior {
      return {[self](int x) {
        auto rp = self->make_response_promise<int>();
        self->delayed_send(self, std::chrono::seconds(3), caf::atom("later"), x);
        self->become(caf::keep_behavior, [self, rp](caf::atom_value, int y) mutable {
          rp.deliver(y + 1);
          self->unbecome();
        });
        return rp;
      }};
    });
    const auto t0 = env::now();
    system.spawn([&, echo, t0](caf::event_based_actor* self) {
      self->request(echo, std::chrono::seconds(10), 41).then([&, t0](int y) {
        std::lock_guard<std::mutex> lock(m);
        CHECK(y == 42);
        waited = env::now() - t0;
        answered.notify_all();
      });
    });
    std::unique_lock<std::mutex> lock(m);
    answered.wait(lock, [&] { return waited.has_value(); });
    CHECK(*waited == std::chrono::seconds(3));
    caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
    lock.unlock();
    while (system.registry().running() > 0) env::sleep_for(1ms);
    w.attach(nullptr);
  }
}

}  // namespace
}  // namespace troupe::sim
