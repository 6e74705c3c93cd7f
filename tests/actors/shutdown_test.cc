// Shutdown as conversations: a session (and the cluster it may own) destroyed while a
// step started with run_async is parked in an asynchronous kernel, a queue dequeue or a
// _Recv whose _Send never comes. The destruction must finish (it used to hang in
// ~actor_system), the step must fail with `cancelled` or `aborted` and its callback must
// come, and on a cluster that lives on, nothing of the dead session's step may linger.
// Every destruction runs under shutdown_within, so a regression aborts the run with a
// message instead of hanging it.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "actors/cluster.h"
#include "actors/session.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "tests/actors/session_fixture.h"

using namespace troupe;
using namespace std::chrono_literals;
using testing::make_session;
using testing::pending_step;
using testing::ps_worker_cluster;
using testing::shutdown_within;

namespace {

// The error of a step that a shutdown ended: cancelled or aborted, saying so.
void check_ended_by_shutdown(pending_step& step) {
  REQUIRE(step.ended());  // the callback came before the destruction returned
  auto r = step.wait(0ms);
  REQUIRE_FALSE(r.ok());
  INFO(r.error().to_string());
  CHECK((r.error().error_code() == code::cancelled || r.error().error_code() == code::aborted));
  CHECK_THAT(r.error().message(), Catch::Contains("closed") || Catch::Contains("shut down"));
}

// q: a FIFOQueue of float [2] on `where`; "enqueue" puts x into it, "dequeue" takes one.
graph::output add_queue(const graph::scope& where) {
  const tf::AttrValue types = graph::attr_value(std::vector<dtype>{dtype::float32});
  auto q = where.with_name("q").add("FIFOQueueV2", {},
                                    {{"component_types", types},
                                     {"shapes", graph::attr_value(std::vector<partial_shape>{partial_shape{2}})},
                                     {"capacity", graph::attr_value(std::int64_t{2})}});
  auto x = ops::placeholder(where.with_name("x"), dtype::float32, {2});
  where.with_name("enqueue").add("QueueEnqueueV2", {q.out(0), std::vector<graph::output>{x}});
  return where.with_name("dequeue").add("QueueDequeueV2", {q.out(0)}, {{"component_types", types}}).out(0);
}

}  // namespace

TEST_CASE("destroying a session and its private cluster ends a step parked in a dequeue", "[actors][shutdown]") {
  auto root = graph::scope::new_root();
  add_queue(root);
  auto s = make_session(root);
  pending_step parked(*s, {}, {"dequeue"});
  CHECK_FALSE(parked.ended(100ms));  // the queue is empty
  shutdown_within(10s, "destroying a session (private cluster) with a step parked in a dequeue",
                  [&] { s.reset(); });
  check_ended_by_shutdown(parked);
}

TEST_CASE("a session destroyed on a cluster that lives on withdraws its parked dequeue", "[actors][shutdown]") {
  auto created = actors::cluster::create();
  REQUIRE(created.ok());
  std::shared_ptr<actors::cluster> cluster = *created;
  actors::session_options o;
  o.cluster = cluster;
  auto root = graph::scope::new_root();
  add_queue(root);
  auto a = make_session(root, o);
  pending_step parked(*a, {}, {"dequeue"});
  CHECK_FALSE(parked.ended(100ms));
  shutdown_within(10s, "destroying a session with a step parked in a dequeue", [&] { a.reset(); });
  check_ended_by_shutdown(parked);

  // Another session of the cluster shares the queue (same device, same name): the dead
  // session's dequeue must not take its element.
  auto b = make_session(root, o);
  REQUIRE(b->run({{"x", tensor::from_vector<float>({1, 2})}}, {}, {"enqueue"}).ok());
  pending_step next(*b, {}, {"dequeue"});
  auto r = next.wait(5s);
  if (!r.ok()) FAIL(r.error().to_string());
  CHECK(r->at(0).equals(tensor::from_vector<float>({1, 2})));

  shutdown_within(10s, "destroying the last session and its cluster", [&] {
    cluster.reset();
    b.reset();
  });
}

TEST_CASE("destroying the last session of a cluster ends a step parked in a Recv", "[actors][shutdown]") {
  // The worker's partition waits in a dequeue, so its _Send never comes; the ps
  // partition waits in the _Recv of it.
  auto cluster = ps_worker_cluster(1, 1);
  auto root = graph::scope::new_root();
  auto worker = root.with_device("/job:worker/task:0");
  auto value = add_queue(worker);
  ops::square(root.with_device("/job:ps/task:0").with_name("z"), value);
  actors::session_options o;
  o.cluster = cluster;
  auto s = make_session(root, o);

  SECTION("the cluster goes with the session") {
    pending_step parked(*s, {}, {"z"});
    CHECK_FALSE(parked.ended(100ms));
    cluster.reset();  // the session holds the last reference
    shutdown_within(10s, "destroying the last session of a cluster with a step parked in a Recv",
                    [&] { s.reset(); });
    check_ended_by_shutdown(parked);
  }
  SECTION("the session goes first, then the cluster") {
    pending_step parked(*s, {}, {"z"});
    CHECK_FALSE(parked.ended(100ms));
    shutdown_within(10s, "destroying a session with a step parked in a Recv", [&] { s.reset(); });
    check_ended_by_shutdown(parked);
    shutdown_within(10s, "destroying a cluster after its session", [&] { cluster.reset(); });
  }
}

TEST_CASE("destroying a cluster while a device runs a step parked in a Recv", "[actors][shutdown]") {
  // The same step, but the session lets go of the cluster while the step still runs:
  // a session created on a cluster and destroyed before the cluster's owner is.
  auto cluster = ps_worker_cluster(1, 1);
  auto root = graph::scope::new_root();
  auto value = add_queue(root.with_device("/job:worker/task:0"));
  ops::square(root.with_device("/job:ps/task:0").with_name("z"), value);
  actors::session_options o;
  o.cluster = cluster;
  auto s = make_session(root, o);
  std::vector<std::unique_ptr<pending_step>> parked;
  for (int i = 0; i < 3; ++i) parked.push_back(std::make_unique<pending_step>(*s, actors::feed_list{}, std::vector<std::string>{"z"}));
  CHECK_FALSE(parked.back()->ended(100ms));
  shutdown_within(10s, "destroying a session and its cluster with three steps parked", [&] {
    s.reset();
    cluster.reset();
  });
  for (auto& p : parked) check_ended_by_shutdown(*p);
}
