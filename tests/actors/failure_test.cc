// The runtime when something fails, as conversations: a device actor killed at each step
// of the master's protocol (before a step is prepared, while a device builds it, between
// steps, while a step is parked in it), a variable actor killed under a lease, two updates
// leasing in opposite orders, a kernel that throws, an allocation over the limit, a step
// over its timeout, sessions opened and closed on one cluster, the bound on prepared
// steps, and concurrent first runs. Every wait is bounded: a step that is never answered
// fails the test (pending_step::wait) instead of hanging it.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "actors/cluster.h"
#include "actors/device_actor.h"
#include "actors/messages.h"
#include "actors/session.h"
#include "actors/variable.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "graph/variables.h"
#include "tests/actors/session_fixture.h"

using namespace troupe;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using testing::make_session;
using testing::pending_step;
using testing::ps_worker_cluster;

namespace {

constexpr const char* k_ps = "/job:ps/replica:0/task:0/device:CPU:0";
constexpr const char* k_worker = "/job:worker/replica:0/task:0/device:CPU:0";

actors::session_options on(const std::shared_ptr<actors::cluster>& c) {
  actors::session_options o;
  o.cluster = c;
  o.default_device = "/job:worker/task:0";
  return o;
}

// A graph whose step "parked" waits on the PS in a dequeue from an empty queue and sends
// the element to the worker ("y" = -element); "local" runs on the worker alone.
graph::scope parked_on_ps_graph() {
  auto root = graph::scope::new_root();
  auto ps = root.with_device("/job:ps/task:0");
  const tf::AttrValue types = graph::attr_value(std::vector<dtype>{dtype::float32});
  auto q = ps.with_name("q").add("FIFOQueueV2", {},
                                 {{"component_types", types},
                                  {"shapes", graph::attr_value(std::vector<partial_shape>{partial_shape::scalar()})}});
  auto element = ps.with_name("dequeue").add("QueueDequeueV2", {q.out(0)}, {{"component_types", types}}).out(0);
  auto x = ps.with_name("x").add("Placeholder", {}, {{"dtype", graph::attr_value(dtype::float32)}}).out(0);
  ps.with_name("enqueue").add("QueueEnqueueV2", {q.out(0), std::vector<graph::output>{x}});
  ops::neg(root.with_name("y"), element);
  auto z = ops::placeholder(root.with_name("z"), dtype::float32);
  ops::neg(root.with_name("local"), z);
  return root;
}

const actors::feed_list k_local_feed = {{"z", tensor::scalar(2.0f)}};

// Adds `op`'s built-in kernel to `registry` (tests that replace one kernel still need the
// others of their graph).
void add_builtin_kernel(kernels::kernel_registry& registry, const std::string& op) {
  registry.add(op, "CPU", {}, [](kernels::kernel_construction& c) -> std::unique_ptr<kernels::op_kernel> {
    auto k = kernels::kernel_registry::builtin().create("CPU", c.node(), c.op(), c.input_types(), c.output_types(),
                                                         c.device());
    if (!k.ok()) {
      c.fail(k.error());
      return nullptr;
    }
    return std::move(*k);
  });
}

// Waits until `device` holds no partition (unregistering is asynchronous).
bool partitions_drain(actors::cluster& c, const std::string& device, std::chrono::milliseconds within = 5s) {
  const auto deadline = clock_type::now() + within;
  for (;;) {
    auto stats = c.stats(device);
    if (stats.ok() && stats->partitions == 0) return true;
    if (clock_type::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
}

}  // namespace

TEST_CASE("a device killed while a step is parked in it fails the step at once, naming it", "[actors][failure]") {
  auto cluster = ps_worker_cluster(1, 1);
  auto s = make_session(parked_on_ps_graph(), on(cluster));
  REQUIRE(s->run(k_local_feed, {"local"}).ok());
  pending_step parked(*s, {}, {"y"});
  REQUIRE_FALSE(parked.ended(200ms));  // parked in the dequeue on the PS
  // kill: no exit handler runs, so no promise is answered; only the master's monitor
  // learns of it. user_shutdown: the device's exit answers its own requests.
  const auto reason = GENERATE(caf::exit_reason::kill, caf::exit_reason::user_shutdown);
  const auto killed = clock_type::now();
  caf::anon_send_exit(cluster->device_actor(k_ps), reason);
  auto r = parked.wait(5s);
  REQUIRE_FALSE(r.ok());
  INFO(r.error().to_string());
  CHECK(r.error().error_code() == code::unavailable);
  CHECK_THAT(r.error().message(), Catch::Contains(k_ps));
  CHECK(parked.finished() - killed < 1s);
  // The session goes on for steps that do not need the dead device.
  auto local = s->run(k_local_feed, {"local"});
  REQUIRE(local.ok());
  CHECK(local->at(0).scalar_value<float>() == -2.0f);
  // One that needs it fails quickly rather than hanging.
  auto again = pending_step(*s, {}, {"y"}).wait(5s);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().error_code() != code::deadline_exceeded);
}

TEST_CASE("a run with its reply is answered with its fetches, and also for an unknown partition, a wrong feed "
          "and a device that dies", "[actors][failure]") {
  auto cluster = ps_worker_cluster(1, 1);
  caf::actor device = cluster->device_actor(k_ps);
  caf::scoped_actor self{cluster->system()};
  auto prepare = [&](actors::executable_spec spec) {
    result<std::uint64_t> handle = internal_error("no answer");
    self->request(device, 10s, actors::prepare_atom::value, std::uint64_t{1}, std::move(spec))
        .receive([&](std::uint64_t h) { handle = h; }, [&](caf::error& e) { handle = actors::to_status(e); });
    return handle;
  };
  // Runs partition `handle` with its reply; the answer, when it comes within `within`.
  auto run = [&](std::uint64_t handle, std::int64_t step, std::vector<tensor> feeds) {
    auto answered = std::make_shared<std::promise<result<std::vector<tensor>>>>();
    auto future = answered->get_future();
    caf::anon_send(device, actors::run_atom::value, handle, step, std::move(feeds),
                   actors::reply<std::vector<tensor>>(
                       [answered](result<std::vector<tensor>> r) { answered->set_value(std::move(r)); },
                       "the device"));
    return future;
  };
  auto negate = prepare(testing::negate_spec());
  REQUIRE(negate.ok());
  auto answer = run(*negate, 1, {tensor::scalar(2.0f)});
  REQUIRE(answer.wait_for(5s) == std::future_status::ready);
  auto fetched = answer.get();
  REQUIRE(fetched.ok());
  CHECK((*fetched)[0].scalar_value<float>() == -2.0f);
  auto unknown = run(99, 2, {});
  REQUIRE(unknown.wait_for(5s) == std::future_status::ready);
  auto missing = unknown.get();
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().error_code() == code::not_found);
  CHECK_THAT(missing.error().message(), Catch::Contains("no partition 99"));
  auto wrong_feed = run(*negate, 3, {});
  REQUIRE(wrong_feed.wait_for(5s) == std::future_status::ready);
  CHECK_FALSE(wrong_feed.get().ok());
  // Started from this thread (start_run, as a link's reader does): answered, and gone
  // from the device's running steps once answered; what the actor must decide (a
  // partition it lacks, feeds that do not fit, a step aborted here) is left to it.
  {
    actors::runtime_device* dev = cluster->find_device(k_ps);
    REQUIRE(dev != nullptr);
    auto answered = std::make_shared<std::promise<result<std::vector<tensor>>>>();
    auto future = answered->get_future();
    actors::reply<std::vector<tensor>> reply(
        [answered](result<std::vector<tensor>> r) { answered->set_value(std::move(r)); }, "the device");
    std::vector<tensor> feeds{tensor::scalar(3.0f)};
    REQUIRE(actors::start_run(*dev, *negate, 6, feeds, reply, caf::actor_addr()));
    REQUIRE(future.wait_for(5s) == std::future_status::ready);
    auto direct = future.get();
    REQUIRE(direct.ok());
    CHECK((*direct)[0].scalar_value<float>() == -3.0f);
    auto stats = [&] {
      result<actors::device_stats> out = internal_error("no answer");
      self->request(device, 10s, actors::stats_atom::value)
          .receive([&](actors::device_stats& d) { out = d; }, [&](caf::error& e) { out = actors::to_status(e); });
      return out;
    };
    bool closed = false;  // (the step closes after its answer, on the thread that ends it)
    for (int i = 0; i < 500 && !closed; ++i) {
      auto now = stats();
      REQUIRE(now.ok());
      closed = now->running_steps == 0;
      if (!closed) std::this_thread::sleep_for(10ms);
    }
    CHECK(closed);
    std::vector<tensor> kept{tensor::scalar(4.0f)};
    CHECK_FALSE(actors::start_run(*dev, 99, 7, kept, reply, caf::actor_addr()));
    std::vector<tensor> none;
    CHECK_FALSE(actors::start_run(*dev, *negate, 8, none, reply, caf::actor_addr()));
    caf::anon_send(device, actors::abort_step_atom::value, std::int64_t{9},
                   actors::to_caf_error(cancelled_error("aborted by the test")));
    REQUIRE(stats().ok());  // (answered after the abort: its mailbox keeps the order)
    CHECK_FALSE(actors::start_run(*dev, *negate, 9, kept, reply, caf::actor_addr()));
    REQUIRE(kept.size() == 1);  // untouched when refused
    CHECK(kept[0].scalar_value<float>() == 4.0f);
  }
  // Parked in a dequeue when the device ends: answered UNAVAILABLE naming the device (its
  // exit handler answers before it cancels the step). Killed, it runs no handler: the
  // step's end or the reply's last copy answers, UNAVAILABLE too.
  const auto reason = GENERATE(caf::exit_reason::user_shutdown, caf::exit_reason::kill);
  auto parked = prepare(testing::parked_spec());
  REQUIRE(parked.ok());
  auto waiting = run(*parked, 4, {});
  REQUIRE(waiting.wait_for(200ms) == std::future_status::timeout);
  caf::anon_send_exit(device, reason);
  REQUIRE(waiting.wait_for(5s) == std::future_status::ready);
  auto gone = waiting.get();
  REQUIRE_FALSE(gone.ok());
  INFO(gone.error().to_string());
  CHECK(gone.error().error_code() == code::unavailable);
  if (reason == caf::exit_reason::user_shutdown) CHECK_THAT(gone.error().message(), Catch::Contains(k_ps));
  // Sent to a device already gone: its reply answers for it.
  auto late = run(*negate, 5, {tensor::scalar(1.0f)});
  REQUIRE(late.wait_for(5s) == std::future_status::ready);
  auto after = late.get();
  REQUIRE_FALSE(after.ok());
  CHECK(after.error().error_code() == code::unavailable);
}

TEST_CASE("a device that is gone before a step is prepared fails the step, not the session", "[actors][failure]") {
  auto cluster = ps_worker_cluster(1, 1);
  auto s = make_session(parked_on_ps_graph(), on(cluster));
  caf::anon_send_exit(cluster->device_actor(k_ps), caf::exit_reason::kill);
  auto r = pending_step(*s, {{"x", tensor::scalar(1.0f)}}, {}, {"enqueue"}).wait(5s);
  REQUIRE_FALSE(r.ok());
  INFO(r.error().to_string());
  CHECK(r.error().error_code() == code::unavailable);
  REQUIRE(s->run(k_local_feed, {"local"}).ok());
}

// A kernel registry whose Neg factory waits until the test opens the gate: a device's
// preparation of a graph with a Neg is then provably in progress on the pool.
struct gated_neg {
  std::mutex mutex;
  std::condition_variable cv;
  bool entered = false, open = false;
  kernels::kernel_registry registry;
  std::shared_ptr<actors::cluster> cluster;

  gated_neg() {
    registry.add("Neg", "CPU", {}, [this](kernels::kernel_construction& c) -> std::unique_ptr<kernels::op_kernel> {
      {
        std::unique_lock<std::mutex> lock(mutex);
        entered = true;
        cv.notify_all();
        cv.wait(lock, [&] { return open; });
      }
      auto k = kernels::kernel_registry::builtin().create("CPU", c.node(), c.op(), c.input_types(), c.output_types(),
                                                           c.device());
      return k.ok() ? std::move(*k) : nullptr;
    });
    add_builtin_kernel(registry, "Placeholder");
    actors::cluster_options co;
    co.kernels = &registry;
    co.compute_threads = 2;
    auto c = actors::cluster::create(co);
    REQUIRE(c.ok());
    cluster = *c;
  }
  ~gated_neg() { let_go(); }
  bool wait_entered() {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, 5s, [&] { return entered; });
  }
  void let_go() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      open = true;
    }
    cv.notify_all();
  }
};

graph::scope neg_graph() {
  auto root = graph::scope::new_root();
  ops::neg(root.with_name("y"), ops::placeholder(root.with_name("x"), dtype::float32));
  return root;
}

TEST_CASE("a device that dies while it builds a step's kernels fails the step at once", "[actors][failure]") {
  gated_neg g;
  actors::session_options so;
  so.cluster = g.cluster;
  auto s = make_session(neg_graph(), so);
  pending_step step(*s, {{"x", tensor::scalar(1.0f)}}, {"y"});
  REQUIRE(g.wait_entered());
  const auto killed = clock_type::now();
  caf::anon_send_exit(g.cluster->device_actor(g.cluster->device_names().front()), caf::exit_reason::kill);
  auto r = step.wait(5s);
  g.let_go();
  REQUIRE_FALSE(r.ok());
  INFO(r.error().to_string());
  CHECK(r.error().error_code() == code::unavailable);
  CHECK(step.finished() - killed < 1s);
}

TEST_CASE("a preparation over its timeout fails the step, and the device forgets it when it is done",
          "[actors][failure]") {
  gated_neg g;
  actors::session_options so;
  so.cluster = g.cluster;
  so.prepare_timeout = 200ms;
  auto s = make_session(neg_graph(), so);
  auto r = pending_step(*s, {{"x", tensor::scalar(1.0f)}}, {"y"}).wait(5s);
  REQUIRE_FALSE(r.ok());
  INFO(r.error().to_string());
  CHECK(r.error().error_code() == code::deadline_exceeded);
  CHECK_THAT(r.error().message(), Catch::Contains("prepare timeout of 200 ms"));
  g.let_go();  // the kernels get built after all; the device must not keep them
  CHECK(partitions_drain(*g.cluster, g.cluster->device_names().front()));
  auto again = s->run({{"x", tensor::scalar(1.0f)}}, {"y"});  // built quickly now
  REQUIRE(again.ok());
  CHECK(again->at(0).scalar_value<float>() == -1.0f);
}

TEST_CASE("a step with nothing to run answers at once with nothing", "[actors][failure]") {
  auto s = make_session(neg_graph());
  auto r = s->run({}, {}, {});
  REQUIRE(r.ok());
  CHECK(r->empty());
  auto fed_only = s->run({{"x", tensor::scalar(3.0f)}}, {"x"});
  REQUIRE(fed_only.ok());
  CHECK(fed_only->at(0).scalar_value<float>() == 3.0f);
}

TEST_CASE("an update naming one variable twice is an error, not a crash", "[actors][failure]") {
  auto root = graph::scope::new_root();
  auto v = graph::make_variable(root, "v", {}, dtype::float32, ops::scalar(root, 1.0f));
  root.with_name("twice").add("ResourceApplyMomentum", {v.handle, v.handle, ops::scalar(root, 0.1f),
                                                        ops::scalar(root, 1.0f), ops::scalar(root, 0.5f)},
                              {{"T", graph::attr_value(dtype::float32)}});
  auto s = make_session(root);
  REQUIRE(s->run({}, {}, {v.initializer.node}).ok());
  auto r = s->run({}, {}, {"twice"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().error_code() == code::invalid_argument);
  CHECK_THAT(r.error().message(), Catch::Contains("names variable") && Catch::Contains("twice"));
}

TEST_CASE("a gather over the memory limit fails its step instead of its variable", "[actors][failure]") {
  actors::session_options o;
  o.memory_limit = 1 << 20;
  auto root = graph::scope::new_root();
  auto v = graph::make_variable(root, "table", {16, 1024}, dtype::float32,
                                ops::fill(root, ops::constant(root, tensor::from_vector<std::int32_t>({16, 1024})),
                                          ops::scalar(root, 1.0f)));
  auto ids = ops::placeholder(root.with_name("ids"), dtype::int32, {-1});
  root.with_name("rows").add("ResourceGather", {v.handle, ids}, {{"dtype", graph::attr_value(dtype::float32)}});
  auto s = make_session(root, o);
  REQUIRE(s->run({}, {}, {v.initializer.node}).ok());
  tensor many(dtype::int32, {1000});  // 1000 rows of 4 KiB: 4 MB, over the limit
  std::fill(many.flat<std::int32_t>().begin(), many.flat<std::int32_t>().end(), 3);
  auto r = s->run({{"ids", many}}, {"rows"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().error_code() == code::resource_exhausted);
  CHECK_THAT(r.error().message(), Catch::Contains("node 'rows'"));
  auto few = s->run({{"ids", tensor::from_vector<std::int32_t>({0, 15})}}, {"rows"});  // the variable is fine
  REQUIRE(few.ok());
  CHECK(few->at(0).shape() == tensor_shape({2, 1024}));
}

// Whether the variable's actor has ended (its cell says so), waiting up to 5 s.
bool ended(actors::variable_cell& cell) {
  for (int i = 0; i < 500; ++i) {
    {
      std::lock_guard<std::mutex> lock(cell.mutex);
      if (!cell.alive) return true;
    }
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

TEST_CASE("an update whose variable actor is gone fails naming the variable; a lease outlives no actor",
          "[actors][failure]") {
  auto cluster = ps_worker_cluster(1, 1);
  auto root = graph::scope::new_root();
  auto v = graph::make_variable(root.with_device("/job:ps/task:0"), "w", {}, dtype::float32, ops::scalar(root, 1.0f));
  root.with_name("add").add("AssignAddVariableOp", {v.handle, ops::scalar(root, 1.0f)},
                            {{"dtype", graph::attr_value(dtype::float32)}});
  auto s = make_session(root, on(cluster));
  REQUIRE(s->run({}, {}, {v.initializer.node}).ok());
  REQUIRE(s->run({}, {}, {"add"}).ok());
  auto var = std::dynamic_pointer_cast<actors::variable_resource>(
      cluster->find_device(k_ps)->resources().lookup("", v.name));
  REQUIRE(var != nullptr);
  caf::anon_send_exit(var->actor(), caf::exit_reason::kill);
  REQUIRE(ended(*var->cell()));  // (a release that comes before the end succeeds)
  auto r = pending_step(*s, {}, {}, {"add"}).wait(5s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().error_code() == code::unavailable);
  CHECK_THAT(r.error().message(), Catch::Contains("variable '" + v.name + "'"));
}

TEST_CASE("a variable killed under a lease: the release learns it, and the requests waiting behind it fail",
          "[actors][failure]") {
  auto cluster = ps_worker_cluster(1, 1);
  caf::actor var = actors::spawn_variable(cluster->system(), "w", dtype::float32, partial_shape::scalar());
  auto answered = std::make_shared<std::promise<status>>();
  caf::anon_send(var, actors::var_assign_atom::value, tensor::scalar(1.0f),
                 actors::status_reply([answered](result<actors::done_t> r) { answered->set_value(r.ok() ? status() : r.error()); }, "variable 'w'"));
  REQUIRE(answered->get_future().get().ok());
  auto leased = std::make_shared<std::promise<result<tensor>>>();
  caf::anon_send(var, actors::var_lease_atom::value, std::uint64_t{1},
                 actors::reply<tensor>([leased](result<tensor> r) { leased->set_value(std::move(r)); }, "variable 'w'"));
  auto value = leased->get_future().get();
  REQUIRE(value.ok());
  auto read = std::make_shared<std::promise<result<tensor>>>();
  auto read_answer = read->get_future();
  caf::anon_send(var, actors::var_read_atom::value,
                 actors::reply<tensor>([read](result<tensor> r) { read->set_value(std::move(r)); }, "variable 'w'"));
  REQUIRE(read_answer.wait_for(100ms) == std::future_status::timeout);  // waits behind the lease
  caf::anon_send_exit(var, caf::exit_reason::kill);
  REQUIRE(read_answer.wait_for(5s) == std::future_status::ready);
  auto read_result = read_answer.get();
  REQUIRE_FALSE(read_result.ok());
  CHECK(read_result.error().error_code() == code::unavailable);
  auto released = std::make_shared<std::promise<status>>();
  auto released_answer = released->get_future();
  caf::anon_send(var, actors::var_release_atom::value, std::move(*value),
                 actors::status_reply([released](result<actors::done_t> r) { released->set_value(r.ok() ? status() : r.error()); },
                                      "variable 'w'"));
  REQUIRE(released_answer.wait_for(5s) == std::future_status::ready);
  status s = released_answer.get();
  REQUIRE_FALSE(s.ok());
  CHECK(s.error_code() == code::unavailable);
  CHECK_THAT(s.message(), Catch::Contains("variable 'w'"));
}

TEST_CASE("an update takes a free variable's lease (a read its value) directly, through the actor while requests "
          "wait there, and none once the actor has ended", "[actors][failure]") {
  auto cluster = ps_worker_cluster(1, 1);
  auto cell = std::make_shared<actors::variable_cell>();
  caf::actor var = actors::spawn_variable(cluster->system(), "w", dtype::float32, partial_shape::scalar(), cell);
  auto read = [&] {
    auto answered = std::make_shared<std::promise<result<tensor>>>();
    auto future = answered->get_future();
    caf::anon_send(var, actors::var_read_atom::value,
                   actors::reply<tensor>([answered](result<tensor> r) { answered->set_value(std::move(r)); }, "variable 'w'"));
    return future;
  };
  auto release = [&](tensor value) {
    auto released = std::make_shared<std::promise<status>>();
    auto future = released->get_future();
    caf::anon_send(var, actors::var_release_atom::value, std::move(value),
                   actors::status_reply([released](result<actors::done_t> r) { released->set_value(r.ok() ? status() : r.error()); },
                                        "variable 'w'"));
    return future;
  };
  tensor leased, snapshot;
  CHECK_FALSE(cell->try_lease(&leased));  // no value yet: the actor says why
  CHECK_FALSE(cell->try_read(&snapshot));
  auto assigned = std::make_shared<std::promise<status>>();
  caf::anon_send(var, actors::var_assign_atom::value, tensor::scalar(1.0f),
                 actors::status_reply([assigned](result<actors::done_t> r) { assigned->set_value(r.ok() ? status() : r.error()); },
                                      "variable 'w'"));
  REQUIRE(assigned->get_future().get().ok());

  REQUIRE(cell->try_read(&snapshot));  // free: no message
  CHECK(snapshot.scalar_value<float>() == 1.0f);
  REQUIRE(cell->try_lease(&leased));  // free: no message
  CHECK(leased.scalar_value<float>() == 1.0f);
  tensor second;
  CHECK_FALSE(cell->try_lease(&second));  // held
  CHECK_FALSE(cell->try_read(&second));   // a read waits for the update too
  auto waiting = read();
  REQUIRE(waiting.wait_for(100ms) == std::future_status::timeout);  // waits in the actor behind the lease
  // The release goes to the actor, which serves the read; with a request waiting there,
  // no direct lease or read slips in before it.
  auto given_back = release(tensor::scalar(2.0f));
  REQUIRE(waiting.wait_for(5s) == std::future_status::ready);
  CHECK(waiting.get()->scalar_value<float>() == 2.0f);
  REQUIRE(given_back.get().ok());

  REQUIRE(cell->try_read(&snapshot));
  CHECK(snapshot.scalar_value<float>() == 2.0f);
  REQUIRE(cell->try_lease(&leased));
  CHECK(leased.scalar_value<float>() == 2.0f);
  REQUIRE(release(tensor::scalar(3.0f)).get().ok());

  // A lease given back directly: free again at once; with a request waiting, the actor
  // is told (var_drain_atom) and serves it.
  REQUIRE(cell->try_lease(&leased));
  bool drain = true;
  REQUIRE(cell->try_release(tensor::scalar(4.0f), &drain));
  CHECK_FALSE(drain);
  REQUIRE(cell->try_read(&snapshot));
  CHECK(snapshot.scalar_value<float>() == 4.0f);
  REQUIRE(cell->try_lease(&leased));
  auto behind = read();
  REQUIRE(behind.wait_for(100ms) == std::future_status::timeout);
  bool parked = false;  // in the actor (the release below does not pass its mailbox)
  for (int i = 0; i < 500 && !parked; ++i) {
    {
      std::lock_guard<std::mutex> lock(cell->mutex);
      parked = cell->waiting == 1;
    }
    if (!parked) std::this_thread::sleep_for(10ms);
  }
  REQUIRE(parked);
  REQUIRE(cell->try_release(tensor::scalar(3.0f), &drain));
  CHECK(drain);
  CHECK_FALSE(cell->try_lease(&second));  // the read waits first
  REQUIRE(behind.wait_for(100ms) == std::future_status::timeout);  // until the actor hears
  caf::anon_send(var, actors::var_drain_atom::value);
  REQUIRE(behind.wait_for(5s) == std::future_status::ready);
  CHECK(behind.get()->scalar_value<float>() == 3.0f);

  // Killed under a direct lease: its release fails, and no direct lease comes after.
  REQUIRE(cell->try_lease(&leased));
  caf::anon_send_exit(var, caf::exit_reason::kill);
  auto late = release(tensor::scalar(4.0f));
  REQUIRE(late.wait_for(5s) == std::future_status::ready);
  CHECK(late.get().error_code() == code::unavailable);
  REQUIRE(ended(*cell));
  CHECK_FALSE(cell->try_lease(&leased));
  CHECK_FALSE(cell->try_read(&snapshot));
  CHECK_FALSE(cell->try_release(tensor::scalar(5.0f), &drain));

  // A variable whose resource let go of it is gone for a direct release at once, before
  // its actor hears that it must end.
  auto cell2 = std::make_shared<actors::variable_cell>();
  auto resource = std::make_shared<actors::variable_resource>(
      "v", "v", dtype::float32, partial_shape::scalar(),
      actors::spawn_variable(cluster->system(), "v", dtype::float32, partial_shape::scalar(), cell2), cell2);
  {
    std::lock_guard<std::mutex> lock(cell2->mutex);
    cell2->value = tensor::scalar(1.0f);
  }
  REQUIRE(cell2->try_lease(&leased));
  resource.reset();
  CHECK_FALSE(cell2->try_release(std::move(leased), &drain));
}

TEST_CASE("a chain of 20,000 updates that each complete at once runs without nesting a call per update",
          "[actors][failure]") {
  // Free variables: each lease, update and release happens inside the kernel's call, so
  // each node completes before its compute_async returns; the executor takes the next
  // one in its loop (a nested call per completion overflowed no stack until it did).
  auto cluster = ps_worker_cluster(1, 1);
  auto root = graph::scope::new_root();
  auto ps = root.with_device("/job:ps/task:0");
  auto v = graph::make_variable(ps, "counter", {}, dtype::float32, ops::scalar(root, 0.0f));
  auto one = ops::scalar(ps, 1.0f);
  constexpr int k_updates = 20000;
  graph::operation last = v.initializer;
  for (int i = 0; i < k_updates; ++i) {
    last = ps.with_control_dependencies({last})
               .with_name("add" + std::to_string(i))
               .add("AssignAddVariableOp", {v.handle, one}, {{"dtype", graph::attr_value(dtype::float32)}});
  }
  ps.with_control_dependencies({last}).with_name("value").add("ReadVariableOp", {v.handle},
                                                                 {{"dtype", graph::attr_value(dtype::float32)}});
  auto s = make_session(root, on(cluster));
  auto r = s->run({}, {"value:0"});
  REQUIRE(r.ok());
  CHECK(r->at(0).scalar_value<float>() == static_cast<float>(k_updates));
}

TEST_CASE("two updates leasing the same variables in opposite input orders never deadlock", "[actors][failure]") {
  auto cluster = ps_worker_cluster(1, 1);
  auto root = graph::scope::new_root();
  auto a = graph::make_variable(root.with_device("/job:ps/task:0"), "a", {64}, dtype::float32,
                                ops::fill(root, ops::constant(root, tensor::from_vector<std::int32_t>({64})), ops::scalar(root, 1.0f)));
  auto b = graph::make_variable(root.with_device("/job:ps/task:0"), "b", {64}, dtype::float32,
                                ops::fill(root, ops::constant(root, tensor::from_vector<std::int32_t>({64})), ops::scalar(root, 1.0f)));
  auto grad = ops::fill(root, ops::constant(root, tensor::from_vector<std::int32_t>({64})), ops::scalar(root, 0.01f));
  auto lr = ops::scalar(root, 0.1f);
  auto momentum = ops::scalar(root, 0.5f);
  // var = a with accumulator b, and var = b with accumulator a.
  auto ab = root.with_name("ab").add("ResourceApplyMomentum", {a.handle, b.handle, lr, grad, momentum},
                                     {{"T", graph::attr_value(dtype::float32)}});
  auto ba = root.with_name("ba").add("ResourceApplyMomentum", {b.handle, a.handle, lr, grad, momentum},
                                     {{"T", graph::attr_value(dtype::float32)}});
  ops::no_op(root.with_name("both").with_control_dependencies({ab, ba}));
  auto s = make_session(root, on(cluster));
  auto init = s->run({}, {}, {a.initializer.node, b.initializer.node});
  if (!init.ok()) FAIL(init.error().to_string());
  std::vector<std::unique_ptr<pending_step>> steps;
  for (int i = 0; i < 200; ++i) steps.push_back(std::make_unique<pending_step>(*s, actors::feed_list{}, std::vector<std::string>{}, std::vector<std::string>{"both"}));
  for (auto& step : steps) {
    auto r = step->wait(20s);
    REQUIRE(r.ok());
  }
}

TEST_CASE("a kernel that throws fails its step naming the node and the exception; the session goes on",
          "[actors][failure]") {
  kernels::kernel_registry registry;
  struct throwing_kernel final : kernels::op_kernel {
    using op_kernel::op_kernel;
    void compute(kernels::kernel_context& ctx) override {
      if (ctx.input(0).scalar_value<float>() < 0) throw std::out_of_range("negative input");
      ctx.set_output(0, ctx.input(0));
    }
  };
  registry.add("Neg", "CPU", {}, kernels::make_kernel<throwing_kernel>);
  add_builtin_kernel(registry, "Placeholder");
  actors::session_options o;
  o.kernels = &registry;
  auto root = graph::scope::new_root();
  ops::neg(root.with_name("y"), ops::placeholder(root.with_name("x"), dtype::float32));
  auto s = make_session(root, o);
  auto r = s->run({{"x", tensor::scalar(-1.0f)}}, {"y"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().error_code() == code::internal);
  CHECK_THAT(r.error().message(), Catch::Contains("node 'y'") && Catch::Contains("std::out_of_range") &&
                                      Catch::Contains("negative input"));
  REQUIRE(s->run({{"x", tensor::scalar(1.0f)}}, {"y"}).ok());
}

TEST_CASE("an allocation over the device's limit fails its step naming node, shape and bytes", "[actors][failure]") {
  actors::session_options o;
  o.memory_limit = 1 << 20;
  auto root = graph::scope::new_root();
  auto shape = ops::placeholder(root.with_name("shape"), dtype::int32, {2});
  root.with_name("r").add("RandomUniform", {shape}, {{"dtype", graph::attr_value(dtype::float32)}});
  auto s = make_session(root, o);
  auto r = s->run({{"shape", tensor::from_vector<std::int32_t>({1000, 1000})}}, {"r"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().error_code() == code::resource_exhausted);
  CHECK_THAT(r.error().message(), Catch::Contains("node 'r'") && Catch::Contains("float [1000,1000]") &&
                                      Catch::Contains("4000000 bytes") && Catch::Contains("memory limit"));
  auto small = s->run({{"shape", tensor::from_vector<std::int32_t>({10, 10})}}, {"r"});
  REQUIRE(small.ok());
  CHECK(small->at(0).num_elements() == 100);
}

TEST_CASE("a device part over the step timeout fails the step and withdraws what it waits for", "[actors][failure]") {
  auto cluster = ps_worker_cluster(1, 1);
  auto o = on(cluster);
  o.step_timeout = 300ms;
  auto s = make_session(parked_on_ps_graph(), o);
  auto r = s->run({}, {"y"});
  REQUIRE_FALSE(r.ok());
  INFO(r.error().to_string());
  CHECK(r.error().error_code() == code::deadline_exceeded);
  CHECK_THAT(r.error().message(), Catch::Contains("step timeout of 300 ms"));
  // The timed-out dequeue was withdrawn from the queue: the next element goes to the next
  // dequeue, not to the abandoned one.
  REQUIRE(s->run({{"x", tensor::scalar(5.0f)}}, {}, {"enqueue"}).ok());
  auto next = s->run({}, {"y"});
  REQUIRE(next.ok());
  CHECK(next->at(0).scalar_value<float>() == -5.0f);
}

TEST_CASE("a step timeout of milliseconds::max() never expires", "[actors][failure]") {
  auto cluster = ps_worker_cluster(1, 1);
  auto o = on(cluster);
  o.step_timeout = std::chrono::milliseconds::max();
  auto s = make_session(parked_on_ps_graph(), o);
  // Parked past the master's deadline checks (once a second at most), then fed.
  auto parked = std::make_shared<std::promise<result<std::vector<tensor>>>>();
  auto answer = parked->get_future();
  s->run_async({}, {"y"}, {}, [parked](result<std::vector<tensor>> r) { parked->set_value(std::move(r)); });
  REQUIRE(answer.wait_for(1500ms) == std::future_status::timeout);
  REQUIRE(s->run({{"x", tensor::scalar(3.0f)}}, {}, {"enqueue"}).ok());
  REQUIRE(answer.wait_for(10s) == std::future_status::ready);
  auto r = answer.get();
  INFO((r.ok() ? std::string("ok") : r.error().to_string()));
  REQUIRE(r.ok());
  CHECK(r->at(0).scalar_value<float>() == -3.0f);
}

TEST_CASE("a session opened and closed 1000 times leaves no partition and no memory behind", "[actors][failure]") {
  auto cluster = ps_worker_cluster(1, 1);
  auto root = graph::scope::new_root();
  auto z = ops::placeholder(root.with_name("z"), dtype::float32, {256});
  ops::neg(root.with_name("local"), ops::mul(root, z, ops::scalar(root, 2.0f)));
  ops::neg(root.with_name("remote"), ops::square(root.with_device("/job:ps/task:0"), z));
  auto g = std::make_shared<const graph::graph>(std::move(*root.to_graph()));
  const tensor feed(dtype::float32, {256});
  std::fill(feed.flat<float>().begin(), feed.flat<float>().end(), 1.0f);
  auto memory_of = [&](const char* device) { return cluster->find_device(device)->memory()->in_use(); };
  const std::int64_t ps_before = memory_of(k_ps), worker_before = memory_of(k_worker);
  for (int i = 0; i < 1000; ++i) {
    auto s = actors::session::create(g, on(cluster));
    REQUIRE(s.ok());
    REQUIRE((*s)->run({{"z", feed}}, {"local", "remote"}).ok());
  }
  CHECK(partitions_drain(*cluster, k_ps));
  CHECK(partitions_drain(*cluster, k_worker));
  CHECK(memory_of(k_ps) == ps_before);
  CHECK(memory_of(k_worker) == worker_before);
}

TEST_CASE("prepared steps are bounded: the least recently used is unregistered", "[actors][failure]") {
  auto cluster = ps_worker_cluster(1, 1);
  auto o = on(cluster);
  o.max_prepared_steps = 2;
  auto root = graph::scope::new_root();
  auto z = ops::placeholder(root.with_name("z"), dtype::float32);
  for (int i = 0; i < 5; ++i) ops::mul(root.with_name(str_cat("m", i)), z, ops::scalar(root, static_cast<float>(i)));
  auto s = make_session(root, o);
  for (int i = 0; i < 5; ++i) REQUIRE(s->run({{"z", tensor::scalar(1.0f)}}, {str_cat("m", i)}).ok());
  CHECK(s->num_prepared() == 5);
  const auto deadline = clock_type::now() + 5s;
  std::int64_t partitions = -1;
  do {
    partitions = cluster->stats(k_worker)->partitions;
  } while (partitions > 2 && clock_type::now() < deadline);
  CHECK(partitions == 2);
  REQUIRE(s->run({{"z", tensor::scalar(1.0f)}}, {"m4"}).ok());  // still prepared
  CHECK(s->num_prepared() == 5);
  REQUIRE(s->run({{"z", tensor::scalar(1.0f)}}, {"m0"}).ok());  // dropped, prepared again
  CHECK(s->num_prepared() == 6);
}

TEST_CASE("concurrent first runs of one signature share one preparation", "[actors][failure]") {
  auto root = graph::scope::new_root();
  auto z = ops::placeholder(root.with_name("z"), dtype::float32);
  ops::neg(root.with_name("y"), ops::square(root, z));
  auto s = make_session(root);
  std::vector<std::unique_ptr<pending_step>> steps;
  for (int i = 0; i < 16; ++i) {
    steps.push_back(std::make_unique<pending_step>(*s, actors::feed_list{{"z", tensor::scalar(static_cast<float>(i))}},
                                                   std::vector<std::string>{"y"}));
  }
  for (int i = 0; i < 16; ++i) {
    auto r = steps[static_cast<std::size_t>(i)]->wait();
    REQUIRE(r.ok());
    CHECK(r->at(0).scalar_value<float>() == -static_cast<float>(i * i));
  }
  CHECK(s->num_prepared() == 1);
}
