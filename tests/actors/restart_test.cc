// A task killed and restarted (actors/cluster.h kill_task, restart_task): a step parked on
// the killed task fails with UNAVAILABLE naming it, steps that need it fail while it is
// down, and after a restart the same session (and a new one) reach the new incarnation:
// its variables are gone (uninitialized) until assigned again, other tasks' are intact.
#include <catch2/catch.hpp>

#include "actors/variable.h"
#include "graph/ops.h"
#include "graph/variables.h"
#include "tests/actors/session_fixture.h"

using namespace troupe;
using graph::scope;
using troupe::testing::make_session;
using troupe::testing::pending_step;

namespace {

struct two_shards {
  scope root = scope::new_root();
  graph::variable a, b;
};

// a on ps:0, b on ps:1, each [4] float; "bump" adds 1 to both; a FIFO queue on ps:0
// whose dequeue parks until something is enqueued.
std::unique_ptr<two_shards> build() {
  auto m = std::make_unique<two_shards>();
  const scope& root = m->root;
  m->a = graph::make_variable(root.with_device("/job:ps/task:0"), "a", {4}, dtype::float32, init::zeros_initializer());
  m->b = graph::make_variable(root.with_device("/job:ps/task:1"), "b", {4}, dtype::float32, init::zeros_initializer());
  tensor ones = tensor::from_vector<float>({1, 1, 1, 1});
  auto bump_a = root.colocate_with(m->a.handle.node).add("AssignAddVariableOp", {m->a.handle, ops::constant(root, ones)});
  auto bump_b = root.colocate_with(m->b.handle.node).add("AssignAddVariableOp", {m->b.handle, ops::constant(root, ones)});
  ops::no_op(root.with_name("bump").with_control_dependencies({bump_a, bump_b}));
  graph::global_variables_initializer(root, std::vector<graph::variable>{m->a, m->b});
  auto q = root.with_device("/job:ps/task:0").with_name("q").add(
      "FIFOQueueV2", {}, {{"component_types", graph::attr_value(std::vector<dtype>{dtype::float32})}});
  root.with_device("/job:ps/task:0").with_name("dequeue").add(
      "QueueDequeueV2", {q.out(0)}, {{"component_types", graph::attr_value(std::vector<dtype>{dtype::float32})}});
  return m;
}

}  // namespace

TEST_CASE("a killed task fails the steps that need it; restarted, it is reached again, empty", "[restart]") {
  auto c = troupe::testing::ps_worker_cluster(2, 1);
  auto m = build();
  actors::session_options o;
  o.cluster = c;
  o.default_device = "/job:worker/task:0";
  auto s = make_session(m->root, o);
  REQUIRE(s->run({}, {}, {"init"}).ok());
  REQUIRE(s->run({}, {}, {"bump"}).ok());
  REQUIRE(s->run({}, {}, {"bump"}).ok());
  const auto before = c->task_actors("/job:ps/task:0");
  REQUIRE(before.size() == 1);
  CHECK_FALSE(c->task_down("/job:ps/task:0"));

  pending_step parked(*s, {}, {"dequeue:0"});  // waits on the queue of ps:0
  CHECK_FALSE(parked.ended(std::chrono::milliseconds(50)));
  REQUIRE(c->kill_task("/job:ps/task:0").ok());
  CHECK(c->task_down("/job:ps/task:0"));  // until restarted (a random kill skips it then)
  CHECK_FALSE(c->task_down("/job:ps/task:1"));
  CHECK_FALSE(c->task_down("/job:nope/task:0"));
  auto failed = parked.wait();
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().error_code() == code::unavailable);
  CHECK_THAT(failed.error().message(), Catch::Contains("/job:ps/replica:0/task:0"));

  // While it is down, steps that need it fail (and do not hang); others run.
  auto down = s->run({}, {}, {"bump"});
  REQUIRE_FALSE(down.ok());
  CHECK(down.error().error_code() == code::unavailable);
  auto b_only = s->run({}, {"b/Read/ReadVariableOp"});
  REQUIRE(b_only.ok());
  // The failed step's update of b (on ps:1) may have landed before the abort.
  const float b_now = b_only->at(0).flat<float>()[0];
  CHECK((b_now == 2.0f || b_now == 3.0f));

  const std::string ps0 = "/job:ps/replica:0/task:0/device:CPU:0";
  const std::uint64_t first_life = c->directory()->incarnation(ps0);
  CHECK(first_life == actors::task_incarnation(0, "/job:ps/replica:0/task:0", 0));
  auto incarnation = c->restart_task("/job:ps/task:0");
  REQUIRE(incarnation.ok());
  CHECK(*incarnation == 1);
  CHECK_FALSE(c->task_down("/job:ps/task:0"));
  // A new life, which the transfers' keys of steps prepared from now on carry.
  CHECK(c->directory()->incarnation(ps0) == actors::task_incarnation(0, "/job:ps/replica:0/task:0", 1));
  CHECK(c->directory()->incarnation(ps0) != first_life);
  CHECK(c->find_device(ps0)->incarnation() == c->directory()->incarnation(ps0));
  const auto after = c->task_actors("/job:ps/task:0");
  REQUIRE(after.size() == 1);
  CHECK(after[0] != before[0]);

  // The new incarnation is empty: a is uninitialized; b (on ps:1) kept its value.
  auto lost = s->run({}, {"a/Read/ReadVariableOp"});
  REQUIRE_FALSE(lost.ok());
  CHECK(lost.error().error_code() == code::failed_precondition);
  auto assigned = s->run({}, {}, {"a/Assign"});  // its initializer: zeros
  INFO((assigned.ok() ? std::string() : assigned.error().message()));
  REQUIRE(assigned.ok());
  auto bumped = s->run({}, {}, {"bump"});
  INFO((bumped.ok() ? std::string() : bumped.error().message()));
  REQUIRE(bumped.ok());
  auto values = s->run({}, {"a/Read/ReadVariableOp", "b/Read/ReadVariableOp"});
  REQUIRE(values.ok());
  CHECK(values->at(0).flat<float>()[0] == 1.0f);
  CHECK(values->at(1).flat<float>()[0] == b_now + 1.0f);

  // A session created after the restart finds the new incarnation too.
  auto fresh = make_session(m->root, o);
  auto again = fresh->run({}, {"a/Read/ReadVariableOp"});
  REQUIRE(again.ok());
  CHECK(again->at(0).flat<float>()[0] == 1.0f);

  // Unknown tasks are errors.
  CHECK(c->kill_task("/job:ps/task:7").error_code() == code::not_found);
  CHECK_FALSE(c->restart_task("/job:nope/task:0").ok());
  CHECK(c->task_names().size() == 3);
}

TEST_CASE("a kernel still running on a killed task finds no resource there, not a fresh uninitialized one",
          "[restart]") {
  // kill_task clears the task's resources before its actors have gone: a VarHandleOp of a
  // step caught in between must fail UNAVAILABLE (retryable), not create an empty
  // variable whose read fails FAILED_PRECONDITION (which ends a training run).
  auto cluster = troupe::testing::ps_worker_cluster(2, 1);
  auto m = build();
  actors::session_options o;
  o.cluster = cluster;
  auto s = make_session(m->root, o);
  REQUIRE(s->run({}, {}, {"init"}).ok());
  REQUIRE(cluster->kill_task("/job:ps/task:0").ok());
  auto* dev = cluster->find_device("/job:ps/replica:0/task:0/device:CPU:0");
  REQUIRE(dev != nullptr);
  auto found = actors::find_existing<actors::variable_resource>(*dev, "", "a", "");
  REQUIRE_FALSE(found.ok());
  CHECK(found.error().error_code() == code::unavailable);
  CHECK_THAT(found.error().message(), Catch::Contains("was killed"));
  auto made = actors::find_or_make<actors::variable_resource>(*dev, "", "a", [&]() -> result<std::shared_ptr<actors::variable_resource>> {
    FAIL("a killed device made a resource");
    return internal_error("unreachable");
  });
  CHECK(made.error().error_code() == code::unavailable);
}
