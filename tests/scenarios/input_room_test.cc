// The input pipeline's room (scenarios/input_room.h): a reader's bound on its queue's size
// is never below the size, over every interleaving of a trainer's steps (each may take
// its batch and succeed, take it and fail, or fail before taking) with a reader's look
// at the size, and is exact when no step was under way at the look.
#include "scenarios/input_room.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace troupe::scenarios {
namespace {

constexpr std::int64_t k_batch = 64;

// A trainer's step as the events it goes through: begin, take (the queue's size falls by
// a batch, on the task), end (took or not).
enum class step_kind { took, failed_after_taking, failed_before_taking };

struct event {
  char what;  // 'b' begin, 't' take, 'e' end; 'S' the reader's step reads the size, 'R' it returns
  step_kind kind = step_kind::took;
};

std::vector<event> trainer_events(const std::vector<step_kind>& steps) {
  std::vector<event> out;
  for (step_kind k : steps) {
    out.push_back({'b', k});
    if (k != step_kind::failed_before_taking) out.push_back({'t', k});
    out.push_back({'e', k});
  }
  return out;
}

// Plays `trainer` with the reader's look (S) after `look` of its events and its return
// (R) after `back` of them (look <= back), checking the bound after the return and after
// each later event. Returns how many checks it made.
int play(const std::vector<event>& trainer, std::size_t look, std::size_t back, std::int64_t start_size) {
  input_room room;
  std::int64_t size = start_size;  // the queue's, on the task
  std::int64_t seen_size = -1;
  std::optional<input_room::sighting> seen;
  int checks = 0;
  auto check = [&] {
    if (!seen) return;
    INFO("look after " << look << ", return after " << back << ", size " << size);
    CHECK(room.bound(*seen, k_batch) >= size);
    ++checks;
  };
  for (std::size_t i = 0; i <= trainer.size(); ++i) {
    if (i == look) seen_size = size;
    if (i == back) {
      seen = room.sight(seen_size);
      check();
    }
    if (i == trainer.size()) break;
    const event& e = trainer[i];
    if (e.what == 'b') room.begin_take();
    if (e.what == 't') size -= k_batch;
    if (e.what == 'e') room.end_take(e.kind == step_kind::took);
    check();
  }
  return checks;
}

TEST_CASE("a reader's bound on its queue's size is never below it, whatever the trainer's steps did around its look",
          "[scenarios][input]") {
  const std::vector<step_kind> kinds = {step_kind::took, step_kind::failed_after_taking, step_kind::failed_before_taking};
  int cases = 0, checks = 0;
  // Every sequence of up to three steps of each kind, every place of the look and of its
  // return among their events.
  for (int n = 0; n <= 3; ++n) {
    std::vector<int> pick(static_cast<std::size_t>(n), 0);
    for (;;) {
      std::vector<step_kind> steps;
      for (int p : pick) steps.push_back(kinds[static_cast<std::size_t>(p)]);
      const auto trainer = trainer_events(steps);
      for (std::size_t look = 0; look <= trainer.size(); ++look) {
        for (std::size_t back = look; back <= trainer.size(); ++back) {
          checks += play(trainer, look, back, 10 * k_batch);
          ++cases;
        }
      }
      int k = 0;
      while (k < n && ++pick[static_cast<std::size_t>(k)] == 3) pick[static_cast<std::size_t>(k++)] = 0;
      if (k == n) break;
    }
  }
  CHECK(cases > 1000);
  CHECK(checks > cases);
}

TEST_CASE("a reader's bound is the queue's size when no step was under way at its look", "[scenarios][input]") {
  input_room room;
  std::int64_t size = 8 * k_batch;
  const auto seen = room.sight(size);
  CHECK(room.bound(seen, k_batch) == size);
  for (int i = 0; i < 3; ++i) {
    room.begin_take();
    size -= k_batch;
    room.end_take(true);
    CHECK(room.bound(seen, k_batch) == size);
  }
  room.begin_take();  // a step that fails takes nothing from the bound
  room.end_take(false);
  CHECK(room.bound(seen, k_batch) == size);
  CHECK(room.taken() == 3);
}

TEST_CASE("a reader waiting for room wakes when a batch is taken, when stopped, or at its timeout",
          "[scenarios][input]") {
  using namespace std::chrono_literals;
  input_room room;
  CHECK_FALSE(room.wait_for_take(0, [] { return false; }, 1ms));  // the timeout
  CHECK_FALSE(room.wait_for_take(0, [] { return true; }, 10s));   // stopped
  room.begin_take();
  room.end_take(true);
  CHECK(room.wait_for_take(0, [] { return false; }, 10s));  // taken already
  CHECK_FALSE(room.wait_for_take(1, [] { return false; }, 1ms));  // not beyond the one known
  // From other threads: a take, then a stop, each wake a waiting reader long before its
  // timeout.
  for (bool by_take : {true, false}) {
    std::atomic<bool> stop{false};
    std::atomic<bool> woke{false};
    const auto start = std::chrono::steady_clock::now();
    std::thread reader([&] {
      room.wait_for_take(room.taken(), [&] { return stop.load(); }, 20s);
      woke = true;
    });
    std::this_thread::sleep_for(20ms);
    if (by_take) {
      room.begin_take();
      room.end_take(true);
    } else {
      stop = true;
      room.wake();
    }
    reader.join();
    CHECK(woke);
    CHECK(std::chrono::steady_clock::now() - start < 10s);
  }
}

TEST_CASE("two steps under way at a look are both left out of the bound", "[scenarios][input]") {
  input_room room;
  std::int64_t size = 8 * k_batch;
  room.begin_take();
  room.begin_take();
  size -= k_batch;  // one of them took its batch before the look
  const auto seen = room.sight(size);
  size -= k_batch;  // the other after it
  room.end_take(true);
  room.end_take(true);
  CHECK(room.bound(seen, k_batch) >= size);
  CHECK(room.bound(seen, k_batch) == seen.size);
}

}  // namespace
}  // namespace troupe::scenarios
