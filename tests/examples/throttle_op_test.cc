// The Throttle example (examples/throttle_op.cc) as conversations with its bucket actor,
// through sessions: concurrent steps sharing one bucket, parked requests woken by the
// bucket's timer in arrival order, a parked request holding no thread, an aborted step
// withdrawing its parked request, the bucket going away under a parked request, and the
// errors. Every wait has a timeout, so a request that is never answered fails the test
// instead of hanging it. Timing checks are lower bounds only (a bucket cannot grant
// before its tokens are due), never upper bounds.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "actors/cluster.h"
#include "actors/session.h"
#include "examples/examples.h"
#include "graph/gradients.h"
#include "graph/ops.h"
#include "graph/variables.h"
#include "kernels/kernel_runner.h"
#include "tests/actors/session_fixture.h"

using namespace troupe;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using testing::pending_step;

namespace {

struct throttle_attrs {
  float rate = 1000;
  int burst = 1;
  int cost = 1;
  int timeout_ms = -1;
  std::string shared_name = "bucket";
};

graph::output throttle(const graph::scope& s, const graph::output& x, const throttle_attrs& a) {
  return s.add("Throttle", {x},
               {{"rate", graph::attr_value(a.rate)},
                {"burst", graph::attr_value(a.burst)},
                {"cost", graph::attr_value(a.cost)},
                {"timeout_ms", graph::attr_value(a.timeout_ms)},
                {"shared_name", graph::attr_value(a.shared_name)}})
      .out();
}

void add_stats(const graph::scope& root, const std::string& node, const std::string& shared_name) {
  root.with_name(node).add("ThrottleStats", {}, {{"shared_name", graph::attr_value(shared_name)}});
}

std::unique_ptr<actors::session> make_session(const graph::scope& root, actors::session_options o = {}) {
  auto g = root.to_graph();
  if (!g.ok()) FAIL(g.error().to_string());
  auto s = actors::session::create(std::move(*g), std::move(o));
  if (!s.ok()) FAIL(s.error().to_string());
  return std::move(*s);
}

std::shared_ptr<actors::cluster> make_cluster(int compute_threads = 2, int actor_threads = 0) {
  actors::cluster_options o;
  o.compute_threads = compute_threads;
  o.actor_threads = actor_threads;
  auto c = actors::cluster::create(o);
  if (!c.ok()) FAIL(c.error().to_string());
  return *c;
}

actors::session_options on(const std::shared_ptr<actors::cluster>& c) {
  actors::session_options o;
  o.cluster = c;
  return o;
}

struct bucket_view {
  float tokens = 0;
  std::int64_t waiting = 0;
  std::int64_t granted = 0;
};

bucket_view read_stats(actors::session& s, const std::string& node) {
  auto r = s.run({}, {node + ":0", node + ":1", node + ":2"});
  if (!r.ok()) FAIL(r.error().to_string());
  return {r->at(0).scalar_value<float>(), r->at(1).scalar_value<std::int64_t>(), r->at(2).scalar_value<std::int64_t>()};
}

// Reads the stats until `ready` holds or `timeout` passes; returns the last reading.
bucket_view stats_when(actors::session& s, const std::string& node, const std::function<bool(const bucket_view&)>& ready,
                       std::chrono::milliseconds timeout = 5s) {
  const auto deadline = clock_type::now() + timeout;
  bucket_view v = read_stats(s, node);
  while (!ready(v) && clock_type::now() < deadline) {
    std::this_thread::sleep_for(2ms);
    v = read_stats(s, node);
  }
  return v;
}

std::int32_t int_of(const result<std::vector<tensor>>& r) {
  if (!r.ok()) FAIL(r.error().to_string());
  return r->at(0).scalar_value<std::int32_t>();
}

actors::feed_list feed_x(std::int32_t v) { return {{"x", tensor::scalar<std::int32_t>(v)}}; }

graph::output int_placeholder(const graph::scope& root) {
  return ops::placeholder(root.with_name("x"), dtype::int32, partial_shape{});
}

}  // namespace

TEST_CASE("concurrent steps share one bucket and together pass at its rate", "[examples][throttle]") {
  examples::ensure_example_ops();
  auto root = graph::scope::new_root();
  auto x = int_placeholder(root);
  throttle(root.with_name("t"), x, {.rate = 20, .burst = 2, .shared_name = "api"});
  add_stats(root, "stats", "api");
  auto s = make_session(root);

  const auto start = clock_type::now();
  std::vector<std::unique_ptr<pending_step>> steps;
  for (int i = 0; i < 6; ++i) steps.push_back(std::make_unique<pending_step>(*s, feed_x(i), std::vector<std::string>{"t"}));
  for (int i = 0; i < 6; ++i) CHECK(int_of(steps[static_cast<std::size_t>(i)]->wait()) == i);  // input forwarded
  // Two pass at once; the other four wait for tokens at 20/s: 200 ms at least, counted
  // from the bucket's creation (after `start`).
  CHECK(clock_type::now() - start >= 199ms);
  auto v = read_stats(*s, "stats");
  CHECK(v.granted == 6);
  CHECK(v.waiting == 0);
}

TEST_CASE("nodes of two sessions on one cluster naming one bucket share it", "[examples][throttle]") {
  examples::ensure_example_ops();
  auto cluster = make_cluster();
  auto root_a = graph::scope::new_root();
  throttle(root_a.with_name("a"), int_placeholder(root_a), {.rate = 0.01f, .burst = 1, .shared_name = "api"});
  auto a = make_session(root_a, on(cluster));
  auto root_b = graph::scope::new_root();
  throttle(root_b.with_name("b"), int_placeholder(root_b), {.rate = 0.01f, .burst = 1, .timeout_ms = 0, .shared_name = "api"});
  add_stats(root_b, "stats", "api");
  auto b = make_session(root_b, on(cluster));

  CHECK(int_of(a->run(feed_x(1), {"a"})) == 1);  // takes the only token
  auto refused = b->run(feed_x(2), {"b"});        // b will not wait for the next one
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().error_code() == code::deadline_exceeded);
  CHECK_THAT(refused.error().message(), Catch::Contains("'b'") && Catch::Contains("throttle 'api' had no token free"));
  auto v = read_stats(*b, "stats");
  CHECK(v.granted == 1);
  CHECK(v.waiting == 0);
}

TEST_CASE("waiting requests are served in arrival order, a cheap one never overtaking", "[examples][throttle]") {
  examples::ensure_example_ops();
  auto root = graph::scope::new_root();
  auto x = int_placeholder(root);
  throttle(root.with_name("big"), x, {.rate = 10, .burst = 3, .cost = 3, .shared_name = "fifo"});
  throttle(root.with_name("small"), x, {.rate = 10, .burst = 3, .cost = 1, .shared_name = "fifo"});
  add_stats(root, "stats", "fifo");
  auto s = make_session(root);

  const auto start = clock_type::now();
  CHECK(int_of(s->run(feed_x(1), {"big"})) == 1);  // the full bucket: 3 tokens
  pending_step big(*s, feed_x(2), {"big"});        // needs 3 more: 300 ms
  CHECK(stats_when(*s, "stats", [](const bucket_view& v) { return v.waiting == 1; }).waiting == 1);
  pending_step small(*s, feed_x(3), {"small"});   // 1 token would come first, but it queues
  CHECK(int_of(big.wait()) == 2);
  CHECK(int_of(small.wait()) == 3);
  CHECK(big.finished() - start >= 299ms);
  CHECK(small.finished() - start >= 399ms);  // behind big: 3 + 1 tokens at 10/s
  CHECK(read_stats(*s, "stats").granted == 3);
}

TEST_CASE("a parked request holds no thread; the bucket going away fails it", "[examples][throttle]") {
  examples::ensure_example_ops();
  // One compute thread and one actor thread: a blocked thread would stall everything.
  auto cluster = make_cluster(1, 1);
  auto root = graph::scope::new_root();
  auto x = int_placeholder(root);
  throttle(root.with_name("t"), x, {.rate = 0.01f, .burst = 1, .shared_name = "gate"});
  ops::square(root.with_name("y"), x);
  add_stats(root, "stats", "gate");
  auto s = make_session(root, on(cluster));

  CHECK(int_of(s->run(feed_x(1), {"t"})) == 1);
  pending_step parked(*s, feed_x(2), {"t"});  // the next token is 100 s away
  CHECK(stats_when(*s, "stats", [](const bucket_view& v) { return v.waiting == 1; }).waiting == 1);
  for (int i = 0; i < 20; ++i) CHECK(int_of(s->run(feed_x(i), {"y"})) == i * i);
  CHECK_FALSE(parked.ended());
  CHECK(read_stats(*s, "stats").waiting == 1);

  // Erasing the bucket from the device's resource manager ends its actor; the parked
  // request's reply then fails the step with `unavailable` instead of leaving it hanging.
  auto* device = cluster->find_device(cluster->device_names().front());
  REQUIRE(device != nullptr);
  REQUIRE(device->resources().erase("", "gate"));
  auto gone = parked.wait();
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.error().error_code() == code::unavailable);
  CHECK_THAT(gone.error().message(), Catch::Contains("'t'") && Catch::Contains("throttle 'gate' went away"));

  // The next step creates a fresh, full bucket.
  CHECK(int_of(s->run(feed_x(3), {"t"})) == 3);
}

TEST_CASE("an aborted step withdraws its parked request", "[examples][throttle]") {
  examples::ensure_example_ops();
  auto root = graph::scope::new_root();
  auto x = int_placeholder(root);
  throttle(root.with_name("t_wait"), x, {.rate = 0.01f, .burst = 1, .shared_name = "gate"});
  throttle(root.with_name("t_soon"), x, {.rate = 0.01f, .burst = 1, .timeout_ms = 50, .shared_name = "gate"});
  add_stats(root, "stats", "gate");
  auto cluster = make_cluster();
  auto s = make_session(root, on(cluster));
  CHECK(int_of(s->run(feed_x(1), {"t_wait"})) == 1);  // empties the bucket for 100 s

  // Both branches park; t_soon gives up after 50 ms, which aborts the step, and the
  // abort withdraws t_wait's request from the bucket.
  pending_step both(*s, feed_x(2), {"t_wait", "t_soon"});
  auto r = both.wait();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().error_code() == code::deadline_exceeded);
  CHECK_THAT(r.error().message(), Catch::Contains("'t_soon'") && Catch::Contains("granted no token within 50 ms"));
  // The step ended only once t_wait had its answer (cancelled), so nothing is left.
  auto v = read_stats(*s, "stats");
  CHECK(v.waiting == 0);
  CHECK(v.granted == 1);

  // The same again, with t_wait already waiting from another step when the abort comes:
  // only the aborted step's request is withdrawn.
  pending_step other(*s, feed_x(3), {"t_wait"});
  CHECK(stats_when(*s, "stats", [](const bucket_view& b) { return b.waiting == 1; }).waiting == 1);
  CHECK_FALSE(pending_step(*s, feed_x(4), {"t_wait", "t_soon"}).wait().ok());
  CHECK(read_stats(*s, "stats").waiting == 1);
  CHECK_FALSE(other.ended());
  // Let the other step go: without its bucket it fails rather than wait 100 s.
  REQUIRE(cluster->find_device(cluster->device_names().front())->resources().erase("", "gate"));
  CHECK(other.wait().error().error_code() == code::unavailable);
}

TEST_CASE("closing a session ends a step parked in its bucket", "[examples][throttle]") {
  examples::ensure_example_ops();
  auto root = graph::scope::new_root();
  auto x = int_placeholder(root);
  throttle(root.with_name("t"), x, {.rate = 0.01f, .burst = 1, .shared_name = "gate"});
  add_stats(root, "stats", "gate");
  auto closed_while_parked = [](pending_step& parked) {
    REQUIRE(parked.ended());  // called back before the session's destruction returned
    auto r = parked.wait(0ms);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::cancelled);
    CHECK_THAT(r.error().message(), Catch::Contains("the session was closed"));
  };

  SECTION("with its private cluster") {
    auto s = make_session(root);
    CHECK(int_of(s->run(feed_x(1), {"t"})) == 1);  // empties the bucket for 100 s
    pending_step parked(*s, feed_x(2), {"t"});
    CHECK(stats_when(*s, "stats", [](const bucket_view& v) { return v.waiting == 1; }).waiting == 1);
    testing::shutdown_within(10s, "destroying a session with a step parked in a Throttle", [&] { s.reset(); });
    closed_while_parked(parked);
  }
  SECTION("on a cluster that lives on: the request is withdrawn from the bucket") {
    auto cluster = make_cluster();
    auto s = make_session(root, on(cluster));
    CHECK(int_of(s->run(feed_x(1), {"t"})) == 1);
    pending_step parked(*s, feed_x(2), {"t"});
    CHECK(stats_when(*s, "stats", [](const bucket_view& v) { return v.waiting == 1; }).waiting == 1);
    testing::shutdown_within(10s, "destroying a session with a step parked in a Throttle", [&] { s.reset(); });
    closed_while_parked(parked);
    auto other = make_session(root, on(cluster));
    CHECK(stats_when(*other, "stats", [](const bucket_view& v) { return v.waiting == 0; }).waiting == 0);
    testing::shutdown_within(10s, "destroying a cluster with an empty bucket", [&] {
      other.reset();
      cluster.reset();
    });
  }
}

TEST_CASE("throttle errors say what is wrong and what would be valid", "[examples][throttle]") {
  examples::ensure_example_ops();

  SECTION("outside the actor runtime") {
    tf::NodeDef node;
    node.set_name("alone");
    node.set_op("Throttle");
    (*node.mutable_attr())["T"] = graph::attr_value(dtype::float32);
    (*node.mutable_attr())["rate"] = graph::attr_value(1.0f);
    auto r = kernels::run_kernel(node, {tensor::scalar(1.0f)});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::failed_precondition);
    CHECK_THAT(r.error().message(), Catch::Contains("'alone'") && Catch::Contains("needs the actor runtime"));
  }
  SECTION("a rate that is not positive") {
    auto root = graph::scope::new_root();
    throttle(root.with_name("t"), int_placeholder(root), {.rate = 0});
    auto r = make_session(root)->run(feed_x(1), {"t"});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::invalid_argument);
    CHECK_THAT(r.error().message(), Catch::Contains("'t'") && Catch::Contains("rate must be a positive number"));
  }
  SECTION("a cost above the burst") {
    auto root = graph::scope::new_root();
    throttle(root.with_name("t"), int_placeholder(root), {.burst = 2, .cost = 3});
    auto r = make_session(root)->run(feed_x(1), {"t"});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message(), Catch::Contains("cost 3 exceeds burst 2") && Catch::Contains("cost <= burst"));
  }
  SECTION("a missing rate") {
    auto root = graph::scope::new_root();
    root.with_name("t").add("Throttle", {int_placeholder(root)}, {});
    auto g = root.to_graph();
    REQUIRE_FALSE(g.ok());
    CHECK_THAT(g.error().message(), Catch::Contains("rate"));
  }
  SECTION("two nodes naming one bucket with different rates") {
    auto root = graph::scope::new_root();
    auto x = int_placeholder(root);
    throttle(root.with_name("fast"), x, {.rate = 100, .burst = 2, .shared_name = "api"});
    throttle(root.with_name("slow"), x, {.rate = 5, .burst = 2, .shared_name = "api"});
    auto s = make_session(root);
    REQUIRE(s->run(feed_x(1), {"fast"}).ok());
    auto r = s->run(feed_x(1), {"slow"});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::invalid_argument);
    CHECK_THAT(r.error().message(), Catch::Contains("'slow'") && Catch::Contains("already exists") &&
                                        Catch::Contains("with rate 100") && Catch::Contains("asks for rate 5"));
  }
  SECTION("a shared_name that names a variable") {
    auto root = graph::scope::new_root();
    auto v = graph::make_variable(root, "w", {}, dtype::float32, ops::scalar(root, 1.0f));
    throttle(root.with_name("t"), int_placeholder(root), {.shared_name = v.name});  // its VarHandleOp's
    auto s = make_session(root);
    REQUIRE(s->run({}, {}, {v.initializer.node}).ok());
    auto r = s->run(feed_x(1), {"t"});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message(), Catch::Contains("'t'") && Catch::Contains("resource '" + v.name + "'") &&
                                        Catch::Contains("is a variable, not a throttle"));
  }
  SECTION("stats of a bucket that does not exist") {
    auto root = graph::scope::new_root();
    add_stats(root, "stats", "nothing");
    auto r = make_session(root)->run({}, {"stats:1"});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::not_found);
    CHECK_THAT(r.error().message(), Catch::Contains("no throttle 'nothing'"));
  }
}

TEST_CASE("the gradient flows through Throttle unchanged", "[examples][throttle]") {
  examples::ensure_example_ops();
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {3});
  auto y = throttle(root.with_name("t"), x, {.rate = 1000, .burst = 10});
  auto z = ops::mul(root.with_name("z"), y, y);
  auto dx = graph::add_gradients(root, {z}, {x});
  REQUIRE(dx.ok());
  auto r = make_session(root)->run({{"x", tensor::from_vector<float>({1, 2, 3})}}, {(*dx)[0].name()});
  if (!r.ok()) FAIL(r.error().to_string());
  CHECK(r->at(0).equals(tensor::from_vector<float>({2, 4, 6})));
}
