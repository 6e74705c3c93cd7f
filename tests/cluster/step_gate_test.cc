// cluster/step_gate: a closer waits for the steps inside and keeps new ones out; a
// feeder still enters while the closer waits (a step inside may be waiting for what the
// feeder brings), and waits like any step once the gate is closed; several closers hold
// it until the last opens.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "cluster/step_gate.h"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

// Runs f on a thread; the future says when it returned.
template <class F>
std::future<void> on_thread(F f) {
  return std::async(std::launch::async, std::move(f));
}

}  // namespace

TEST_CASE("a step inside that waits for a feeder lets the gate close once the feeder has fed it", "[cluster]") {
  cluster::step_gate gate;
  std::promise<void> fed;
  std::atomic<bool> step_inside{false};
  // A training step inside the gate, waiting for a batch (as a dequeue from an empty queue).
  auto step = on_thread([&] {
    cluster::step_gate::pass p(gate);
    step_inside = true;
    fed.get_future().wait();
  });
  while (!step_inside) std::this_thread::sleep_for(1ms);
  auto closer = on_thread([&] { gate.close(); });
  CHECK(closer.wait_for(50ms) == std::future_status::timeout);  // the step is inside

  // A new step waits while the gate closes...
  std::atomic<bool> late_step_ran{false};
  auto late_step = on_thread([&] {
    cluster::step_gate::pass p(gate);
    late_step_ran = true;
  });
  // ...but a feeder enters, and what it brings lets the step inside finish.
  auto feeder = on_thread([&] {
    cluster::step_gate::pass p(gate, cluster::step_gate::pass::kind::feeder);
    fed.set_value();
  });
  REQUIRE(feeder.wait_for(10s) == std::future_status::ready);
  REQUIRE(step.wait_for(10s) == std::future_status::ready);
  REQUIRE(closer.wait_for(10s) == std::future_status::ready);
  CHECK_FALSE(late_step_ran);

  // Closed: a feeder waits too, until the gate opens.
  auto closed_feeder = on_thread([&] { cluster::step_gate::pass p(gate, cluster::step_gate::pass::kind::feeder); });
  CHECK(closed_feeder.wait_for(50ms) == std::future_status::timeout);
  CHECK(late_step.wait_for(0ms) == std::future_status::timeout);
  gate.open();
  REQUIRE(closed_feeder.wait_for(10s) == std::future_status::ready);
  REQUIRE(late_step.wait_for(10s) == std::future_status::ready);
  CHECK(late_step_ran);
  CHECK(gate.closings() == 1);
}

TEST_CASE("two closers hold the gate until the last one opens it", "[cluster]") {
  cluster::step_gate gate;
  gate.close();
  gate.close();  // nothing inside: returns at once
  gate.open();
  auto feeder = on_thread([&] { cluster::step_gate::pass p(gate, cluster::step_gate::pass::kind::feeder); });
  auto step = on_thread([&] { cluster::step_gate::pass p(gate); });
  CHECK(feeder.wait_for(50ms) == std::future_status::timeout);
  CHECK(step.wait_for(0ms) == std::future_status::timeout);
  gate.open();
  REQUIRE(feeder.wait_for(10s) == std::future_status::ready);
  REQUIRE(step.wait_for(10s) == std::future_status::ready);
  CHECK(gate.closings() == 2);
}
