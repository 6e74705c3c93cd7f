// Variables as actors and graphs split across the tasks of one process: reads, updates,
// snapshots, concurrent steps sharing variables, Send/Recv between devices of different
// tasks, and a step that aborts mid-flight while another device waits in a Recv.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include "actors/cluster.h"
#include "actors/session.h"
#include "tests/actors/session_fixture.h"
#include "graph/attr.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "graph/variables.h"

using namespace troupe;
using troupe::testing::make_session;
using troupe::testing::ps_worker_cluster;

namespace {

float scalar_of(const result<std::vector<tensor>>& r, std::size_t i = 0) {
  if (!r.ok()) FAIL(r.error().to_string());
  return r->at(i).scalar_value<float>();
}

}  // namespace

TEST_CASE("a variable is read, assigned and updated through its actor") {
  auto root = graph::scope::new_root();
  auto v = graph::make_variable(root, "v", {}, dtype::float32, ops::scalar(root, 1.5f));
  auto inc = root.with_name("inc").add("AssignAddVariableOp", {v.handle, ops::scalar(root, 2.0f)});
  auto is_init = root.with_name("is_init").add("VarIsInitializedOp", {v.handle});
  auto s = make_session(root);

  auto before = s->run({}, {"is_init"});
  REQUIRE(before.ok());
  CHECK_FALSE(before->at(0).scalar_value<bool>());
  auto uninit = s->run({}, {v.value.name()});
  REQUIRE_FALSE(uninit.ok());
  CHECK(uninit.error().error_code() == code::failed_precondition);
  CHECK_THAT(uninit.error().message(), Catch::Contains("'v'") && Catch::Contains("uninitialized"));

  REQUIRE(s->run({}, {}, {v.initializer.node}).ok());
  CHECK(scalar_of(s->run({}, {v.value.name()})) == 1.5f);
  REQUIRE(s->run({}, {}, {"inc"}).ok());
  REQUIRE(s->run({}, {}, {"inc"}).ok());
  CHECK(scalar_of(s->run({}, {v.value.name()})) == 5.5f);
  CHECK(s->run({}, {"is_init"})->at(0).scalar_value<bool>());
}

TEST_CASE("a read is a snapshot that later updates do not change") {
  auto root = graph::scope::new_root();
  auto v = graph::make_variable(root, "w", {4}, dtype::float32,
                                ops::constant(root, tensor::from_vector<float>({1, 2, 3, 4})));
  root.with_name("dec").add("AssignSubVariableOp", {v.handle, ops::constant(root, tensor::from_vector<float>({1, 1, 1, 1}))});
  auto s = make_session(root);
  REQUIRE(s->run({}, {}, {v.initializer.node}).ok());
  auto snapshot = s->run({}, {v.value.name()});
  REQUIRE(snapshot.ok());
  for (int i = 0; i < 3; ++i) REQUIRE(s->run({}, {}, {"dec"}).ok());
  CHECK(snapshot->at(0).flat<float>()[0] == 1.0f);
  CHECK(snapshot->at(0).flat<float>()[3] == 4.0f);
  auto now = s->run({}, {v.value.name()});
  REQUIRE(now.ok());
  CHECK(now->at(0).flat<float>()[0] == -2.0f);
}

TEST_CASE("concurrent steps serialize their updates in the variable's mailbox") {
  auto root = graph::scope::new_root();
  auto v = graph::make_variable(root, "counter", {}, dtype::float32, ops::scalar(root, 0.0f));
  root.with_name("inc").add("AssignAddVariableOp", {v.handle, ops::scalar(root, 1.0f)});
  auto s = make_session(root);
  REQUIRE(s->run({}, {}, {v.initializer.node}).ok());
  // Catch2 assertions belong to the test's thread: the others count failures.
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) failures += s->run({}, {}, {"inc"}).ok() ? 0 : 1;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(scalar_of(s->run({}, {v.value.name()})) == 800.0f);
}

TEST_CASE("assigning the wrong dtype or shape names the variable") {
  auto root = graph::scope::new_root();
  auto v = graph::make_variable(root, "m", {2}, dtype::float32, ops::constant(root, tensor::from_vector<float>({1, 2})));
  auto x = ops::placeholder(root.with_name("x"), dtype::float32);
  root.with_name("assign").add("AssignVariableOp", {v.handle, x});
  auto s = make_session(root);
  auto r = s->run({{"x", tensor::from_vector<float>({1, 2, 3})}}, {}, {"assign"});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message(), Catch::Contains("'m'") && Catch::Contains("[3]"));
}

TEST_CASE("a graph split over ps and worker tasks computes through Send/Recv") {
  auto cluster = ps_worker_cluster(2, 2);
  auto root = graph::scope::new_root();
  auto ps0 = root.with_device("/job:ps/task:0");
  auto ps1 = root.with_device("/job:ps/task:1");
  auto w = graph::make_variable(ps0, "w", {2, 2}, dtype::float32,
                                ops::constant(root, tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})));
  auto b = graph::make_variable(ps1, "b", {2}, dtype::float32,
                                ops::constant(root, tensor::from_vector<float>({10, 20})));
  auto worker = root.with_device("/job:worker/task:1");
  auto x = ops::placeholder(worker.with_name("x"), dtype::float32, partial_shape({-1, 2}));
  auto y = ops::bias_add(worker.with_name("y"), ops::matmul(worker, x, w.value), b.value);
  auto init = graph::global_variables_initializer(root, std::vector<graph::variable>{w, b});
  actors::session_options o;
  o.cluster = cluster;
  auto s = make_session(root, o);
  REQUIRE(s->run({}, {}, {init.node}).ok());
  auto r = s->run({{"x", tensor::from_vector<float>({1, 1, 0, 1}, {2, 2})}}, {"y"});
  if (!r.ok()) FAIL(r.error().to_string());
  auto out = r->at(0).flat<float>();
  CHECK(out[0] == 14.0f);  // [1,1] x w = [4, 6] + b
  CHECK(out[1] == 26.0f);
  CHECK(out[2] == 13.0f);  // [0,1] x w = [3, 4] + b
  CHECK(out[3] == 24.0f);
  // The same step again reuses the prepared partitions.
  int prepared = s->num_prepared();
  REQUIRE(s->run({{"x", tensor::from_vector<float>({1, 1, 0, 1}, {2, 2})}}, {"y"}).ok());
  CHECK(s->num_prepared() == prepared);
}

TEST_CASE("with one actor thread, every transfer of a step meets its Recv whichever end comes first") {
  // One CAF thread runs both device actors: a Recv that asks before its tensor arrives
  // must park (a blocked thread would hang the step), and one that asks after must find
  // it. Each step moves 50 tensors, many times over.
  auto spec = placement::cluster_spec::from_task_counts({{"a", 1}, {"b", 1}});
  REQUIRE(spec.ok());
  actors::cluster_options co;
  co.spec = *spec;
  co.compute_threads = 1;
  co.actor_threads = 1;
  auto cluster = actors::cluster::create(co);
  REQUIRE(cluster.ok());
  auto root = graph::scope::new_root();
  auto a = root.with_device("/job:a/task:0");
  auto b = root.with_device("/job:b/task:0");
  constexpr int k_transfers = 50;
  std::vector<std::string> fetches;
  for (int i = 0; i < k_transfers; ++i) {
    auto x = ops::scalar(a.with_name(str_cat("x", i)), static_cast<float>(i));
    ops::identity(b.with_name(str_cat("y", i)), x);
    fetches.push_back(str_cat("y", i));
  }
  actors::session_options o;
  o.cluster = *cluster;
  o.allow_soft_placement = false;
  auto s = make_session(root, o);
  for (int step = 0; step < 20; ++step) {
    auto r = s->run({}, fetches);
    if (!r.ok()) FAIL(r.error().to_string());
    for (int i = 0; i < k_transfers; ++i) CHECK(scalar_of(r, static_cast<std::size_t>(i)) == static_cast<float>(i));
  }
}

TEST_CASE("workers of one cluster share variables on the ps task") {
  auto cluster = ps_worker_cluster(1, 2);
  auto build = [](const std::string& worker) {
    auto root = graph::scope::new_root();
    auto v = graph::make_variable(root.with_device("/job:ps/task:0"), "shared", {}, dtype::float32,
                                  ops::scalar(root, 0.0f));
    // The update runs where the variable lives (the placer colocates it); its operand is
    // computed on the worker and sent.
    root.with_name("inc").add("AssignAddVariableOp", {v.handle, ops::scalar(root.with_device(worker), 1.0f)});
    return std::make_pair(root, v);
  };
  auto [g0, v0] = build("/job:worker/task:0");
  auto [g1, v1] = build("/job:worker/task:1");
  actors::session_options o0, o1;
  o0.cluster = cluster;
  o0.default_device = "/job:worker/task:0";
  o1.cluster = cluster;
  o1.default_device = "/job:worker/task:1";
  auto s0 = make_session(g0, o0);
  auto s1 = make_session(g1, o1);
  auto init = s0->run({}, {}, {v0.initializer.node});
  if (!init.ok()) FAIL(init.error().to_string());
  std::thread t0([&] { for (int i = 0; i < 50; ++i) REQUIRE(s0->run({}, {}, {"inc"}).ok()); });
  std::thread t1([&] { for (int i = 0; i < 50; ++i) REQUIRE(s1->run({}, {}, {"inc"}).ok()); });
  t0.join();
  t1.join();
  CHECK(scalar_of(s1->run({}, {v1.value.name()})) == 100.0f);
}

TEST_CASE("a failing partition aborts the step while another device waits in a Recv") {
  auto cluster = ps_worker_cluster(1, 1);
  auto root = graph::scope::new_root();
  auto worker = root.with_device("/job:worker/task:0");
  auto ps = root.with_device("/job:ps/task:0");
  auto x = ops::placeholder(worker.with_name("x"), dtype::float32);
  // Reshape to [3] fails for a 4-element input: the worker's partition errors before it
  // sends, and the ps partition's Recv of `bad` must fail instead of waiting forever.
  auto bad = ops::reshape(worker.with_name("bad"), x, ops::constant(worker, tensor::from_vector<std::int32_t>({3})));
  auto z = ops::square(ps.with_name("z"), bad);
  actors::session_options o;
  o.cluster = cluster;
  auto s = make_session(root, o);
  auto r = s->run({{"x", tensor::from_vector<float>({1, 2, 3, 4})}}, {"z"});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message(), Catch::Contains("'bad'"));
  // And the cluster still works afterwards.
  auto ok = s->run({{"x", tensor::from_vector<float>({1, 2, 3})}}, {"z"});
  REQUIRE(ok.ok());
  CHECK(ok->at(0).flat<float>()[2] == 9.0f);
}

TEST_CASE("optimizers update variables on the ps from gradients computed on a worker") {
  auto cluster = ps_worker_cluster(1, 1);
  auto root = graph::scope::new_root();
  graph::variable_collection vars;
  auto w = graph::make_variable(root.with_device("/job:ps/task:0"), "w", {}, dtype::float32, ops::scalar(root, 3.0f));
  vars.add(w);
  auto worker = root.with_device("/job:worker/task:0");
  auto loss = ops::square(worker.with_name("loss"), w.value);  // d/dw = 2w
  auto step = train::make_global_step(root.with_device("/job:ps/task:0"), vars);
  auto train_op = train::minimize(worker, train::gradient_descent(0.25), loss, vars, step);
  REQUIRE(train_op.ok());
  auto init = graph::global_variables_initializer(root, vars);
  actors::session_options o;
  o.cluster = cluster;
  auto s = make_session(root, o);
  auto initialized = s->run({}, {}, {init.node});
  if (!initialized.ok()) FAIL(initialized.error().to_string());
  REQUIRE(s->run({}, {}, {train_op->node}).ok());  // w = 3 - 0.25 * 6 = 1.5
  CHECK(scalar_of(s->run({}, {w.value.name()})) == 1.5f);
  REQUIRE(s->run({}, {}, {train_op->node}).ok());  // w = 1.5 - 0.25 * 3 = 0.75
  auto after = s->run({}, {w.value.name(), step.value.name()});
  REQUIRE(after.ok());
  CHECK(after->at(0).scalar_value<float>() == 0.75f);
  CHECK(after->at(1).scalar_value<std::int64_t>() == 2);
}
