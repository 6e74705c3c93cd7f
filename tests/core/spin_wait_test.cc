// spin_gate (core/spin_wait.h): spins until the answer comes while waits are short, not
// after several long waits but for a probe now and then, within its budget, and never by
// more threads than it allows.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/cpu_time.h"
#include "core/spin_wait.h"

using namespace troupe;
using namespace std::chrono_literals;

TEST_CASE("spin_gate spins until an answer from another thread comes", "[core]") {
  spin_gate gate(200ms, 1);  // a long budget: the answer comes well within it
  std::atomic<bool> answered{false};
  std::atomic<int> calls{0};
  const auto start = std::chrono::steady_clock::now();
  // The answer comes 2 ms after the spinner first asked (not 2 ms after this thread
  // starts: on a busy machine the spinner may not have asked by then).
  std::thread answer([&] {
    while (calls.load() == 0) std::this_thread::yield();
    std::this_thread::sleep_for(2ms);
    answered = true;
  });
  const bool seen = gate.spin([&] {
    ++calls;
    return answered.load();
  });
  const auto took = std::chrono::steady_clock::now() - start;
  answer.join();
  CHECK(seen);
  CHECK(calls > 1);
  CHECK(took >= 2ms);
  CHECK(spin_gate::spinning() == 0);
}

TEST_CASE("spin_gate gives up at its budget", "[core]") {
  spin_gate gate(3ms, 1);
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(gate.spin([] { return false; }));
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 3ms);
  CHECK(took < 2s);
  CHECK(spin_gate::spinning() == 0);
}

TEST_CASE("spin_gate counts the CPU its spins took, which working_cpu_ns leaves out", "[core]") {
  const std::int64_t spun_before = spin_gate::spun_cpu_ns();
  const double process_before = process_cpu_ns(), working_before = working_cpu_ns();
  spin_gate gate(20ms, 1);
  CHECK_FALSE(gate.spin([] { return false; }));  // 20 ms of spinning (less what yields gave away)
  const std::int64_t spun = spin_gate::spun_cpu_ns() - spun_before;
  CHECK(spun > 0);
  CHECK(spun <= 2'000'000'000);
  // The process's CPU grew by the spin and more; the work's by the rest only.
  const double process = process_cpu_ns() - process_before, working = working_cpu_ns() - working_before;
  CHECK(process >= static_cast<double>(spun));
  CHECK(working == Approx(process - static_cast<double>(spun)).margin(1e6));
  // An answer already there: no spin, nothing counted.
  const std::int64_t before = spin_gate::spun_cpu_ns();
  CHECK(spin_gate(20ms, 1).spin([] { return true; }));
  CHECK(spin_gate::spun_cpu_ns() == before);
}

TEST_CASE("spin_gate stops spinning after waits longer than its budget, probes now and then, and spins again "
          "after a short one",
          "[core]") {
  // A budget long enough that a spinner descheduled on a busy machine still asks twice.
  spin_gate gate(50ms, 1);
  int calls = 0;
  const auto never = [&] {
    ++calls;
    return false;
  };
  const auto spins = [&] {
    calls = 0;
    CHECK_FALSE(gate.spin(never));
    return calls > 1;  // asked once: no spin
  };
  // Long waits fewer than k_long_waits in a row (a preemption) do not stop it.
  for (std::int64_t i = 1; i < spin_gate::k_long_waits; ++i) gate.record(100ms);
  CHECK(spins());
  gate.record(100ms);  // the k_long_waits-th in a row
  // No spin until k_probe_every waits have passed unspun; that one probes.
  for (std::int64_t i = 1; i < spin_gate::k_probe_every; ++i) {
    if (spins()) FAIL("spun at wait " << i << " after " << spin_gate::k_long_waits << " long waits");
  }
  CHECK(spins());
  CHECK_FALSE(spins());  // the probe's wait recorded nothing: still long
  // A short wait: spins again at once.
  gate.record(100us);
  CHECK(spins());
  CHECK(spins());
}

TEST_CASE("spin_gate with no budget or no spinner's place asks once", "[core]") {
  int calls = 0;
  const auto never = [&] {
    ++calls;
    return false;
  };
  spin_gate off(0us, 4);
  CHECK_FALSE(off.spin(never));
  CHECK(calls == 1);

  // One place: while a thread spins on one gate, another gate's waiter does not.
  spin_gate first(2s, 1), second(2s, 1);
  std::atomic<bool> release{false};
  std::thread spinner([&] { first.spin([&] { return release.load(); }); });
  while (spin_gate::spinning() == 0) std::this_thread::yield();
  calls = 0;
  CHECK_FALSE(second.spin(never));
  CHECK(calls == 1);
  release = true;
  spinner.join();
  CHECK(spin_gate::spinning() == 0);
}

TEST_CASE("spin_gate's default budget is TROUPE_SPIN_US's or 200 us, none on one hardware thread", "[core]") {
  const auto budget = default_spin_budget();
  if (std::thread::hardware_concurrency() < 2) {
    CHECK(budget.count() == 0);
    CHECK(default_max_spinners() == 0);
  } else {
    CHECK(default_max_spinners() == static_cast<int>(std::thread::hardware_concurrency()) - 1);
    if (std::getenv("TROUPE_SPIN_US") == nullptr) CHECK(budget == 200us);
  }
}
