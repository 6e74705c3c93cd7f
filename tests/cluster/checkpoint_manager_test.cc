// The checkpoint manager against a cluster: saves taken while two threads train are
// consistent cuts (each step's updates to two PS tasks all in or all out), a restore sets
// every variable bit for bit, onto another number of PS tasks too, a mismatching
// checkpoint changes nothing, and a failing disk costs a save, not the run or the
// committed checkpoints.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cluster/checkpoint_manager.h"
#include "cluster/step_gate.h"
#include "graph/nn.h"
#include "graph/ops.h"
#include "placement/replica_device_setter.h"
#include "graph/train.h"
#include "graph/variables.h"
#include "tests/actors/session_fixture.h"
#include "tests/cluster/counting_model.h"
#include "tests/temp_dir.h"
#include "cluster/fault_injector.h"

using namespace troupe;
using graph::scope;

namespace {

using troupe::testing::build_counting_model;
using troupe::testing::counting_model;
using troupe::testing::temp_dir;

std::shared_ptr<actors::cluster> cluster_of(int ps) {
  if (ps == 0) {
    auto spec = placement::cluster_spec::from_task_counts({{"worker", 1}});
    REQUIRE(spec.ok());
    actors::cluster_options o;
    o.spec = *spec;
    o.compute_threads = 2;
    auto c = actors::cluster::create(o);
    REQUIRE(c.ok());
    return *c;
  }
  return troupe::testing::ps_worker_cluster(ps, 1);
}

graph::graph graph_of(const counting_model& m) {
  auto g = m.root.to_graph();
  if (!g.ok()) FAIL(g.error().to_string());
  return std::move(*g);
}

std::unique_ptr<actors::session> session_on(const std::shared_ptr<actors::cluster>& c, const counting_model& m) {
  actors::session_options o;
  o.cluster = c;
  o.default_device = "/job:worker/task:0";
  return troupe::testing::make_session(m.root, o);
}

// A cluster of `ps` PS tasks and a worker with the counting model on it, initialized.
struct counting_run {
  std::shared_ptr<actors::cluster> c;
  std::unique_ptr<counting_model> model;
  std::unique_ptr<actors::session> s;
};

counting_run start_counting(int ps, std::int64_t n = 300) {
  counting_run r;
  r.c = cluster_of(ps);
  r.model = build_counting_model(ps, n);
  r.s = session_on(r.c, *r.model);
  REQUIRE(r.s->run({}, {}, {"init"}).ok());
  return r;
}

std::unique_ptr<cluster::checkpoint_manager> manager_on(const std::shared_ptr<actors::cluster>& c,
                                                        const counting_model& m, cluster::checkpoint_manager_options o) {
  o.default_device = "/job:worker/task:0";
  auto manager = cluster::checkpoint_manager::create(c, graph_of(m), std::move(o));
  if (!manager.ok()) FAIL(manager.error().to_string());
  return std::move(*manager);
}

graph::graph graph_of_copy(const graph::graph& g) {
  auto copy = graph::graph::from_graph_def(g.to_graph_def());
  if (!copy.ok()) FAIL(copy.error().to_string());
  return std::move(*copy);
}


}  // namespace

TEST_CASE("saves taken while two threads train are consistent cuts", "[cluster][checkpoint]") {
  temp_dir dir;
  auto [c, model, s] = start_counting(2);
  cluster::step_gate gate;
  cluster::checkpoint_manager_options o;
  o.dir = dir.path;
  o.keep = 1000;
  o.every_steps = 7;
  o.gate = &gate;
  auto manager = manager_on(c, *model, o);
  std::atomic<std::int64_t> steps{0};
  std::vector<std::thread> trainers;
  for (int t = 0; t < 2; ++t) {
    trainers.emplace_back([&] {
      // At least 300 steps, and on until five saves have committed while training ran.
      while (steps.load() < 300 || manager->stats().committed < 5) {
        {
          cluster::step_gate::pass p(gate);
          auto r = s->run({}, {}, {"train"});
          if (!r.ok()) FAIL_CHECK(r.error().to_string());
        }
        manager->step_done(++steps);
      }
    });
  }
  for (auto& t : trainers) t.join();
  auto last = manager->save_now();
  REQUIRE(last.ok());
  CHECK(last->step == steps.load());
  auto st = manager->stats();
  CHECK(st.failed == 0);
  CHECK(st.latest_step == steps.load());
  INFO("saves: " << st.committed << ", longest stop " << st.longest_stop_seconds << " s");

  auto d = checkpoint::directory::open(dir.path, {.keep = 1000});
  REQUIRE(d.ok());
  auto list = d->list();
  REQUIRE(list.ok());
  // The final save replaces a periodic one of the same step, if any.
  CHECK(static_cast<int>(list->size()) >= 5);
  CHECK(static_cast<int>(list->size()) <= st.committed);
  for (const auto& entry : *list) {
    auto r = checkpoint::reader::open(entry.path);
    REQUIRE(r.ok());
    auto a = r->read("a"), b = r->read("b"), step = r->read("global_step");
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(step.ok());
    // Every step adds 1 to all of a and b, then to the step: a cut has them all equal.
    const auto expected = static_cast<float>(step->scalar_value<std::int64_t>());
    INFO(entry.path);
    CHECK(r->global_step() == step->scalar_value<std::int64_t>());
    for (float x : a->flat<float>()) REQUIRE(x == expected);
    for (float x : b->flat<float>()) REQUIRE(x == expected);
  }
}

TEST_CASE("a restore sets every variable bit for bit, onto 2, 3 or no PS tasks", "[cluster][checkpoint]") {
  temp_dir dir;
  std::vector<tensor> saved;
  {
    auto [c, model, s] = start_counting(2);
    for (int i = 0; i < 5; ++i) REQUIRE(s->run({}, {}, {"train"}).ok());
    cluster::checkpoint_manager_options o;
    o.dir = dir.path;
    auto manager = manager_on(c, *model, o);
    auto committed = manager->save_now();
    REQUIRE(committed.ok());
    CHECK(committed->step == 5);
    auto values = s->run({}, {"a/Read/ReadVariableOp", "b/Read/ReadVariableOp", "global_step/Read/ReadVariableOp"});
    REQUIRE(values.ok());
    saved = std::move(*values);
  }
  for (int ps : {2, 3, 0}) {
    INFO("restoring onto " << ps << " PS tasks");
    auto [c, model, s] = start_counting(ps);
    std::vector<std::string> lines;
    cluster::checkpoint_manager_options o;
    o.dir = dir.path;
    o.log = [&](const std::string& line) { lines.push_back(line); };
    auto manager = manager_on(c, *model, o);
    auto from = manager->restore_latest();
    REQUIRE(from.ok());
    REQUIRE(from->has_value());
    CHECK(**from == 5);
    CHECK(manager->stats().restored_step == 5);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("restored 3 variables") != std::string::npos);
    auto values = s->run({}, {"a/Read/ReadVariableOp", "b/Read/ReadVariableOp", "global_step/Read/ReadVariableOp"});
    REQUIRE(values.ok());
    for (std::size_t i = 0; i < saved.size(); ++i) CHECK(values->at(i).equals(saved[i]));
    // Training goes on from there.
    REQUIRE(s->run({}, {}, {"train"}).ok());
    auto step = s->run({}, {"global_step/Read/ReadVariableOp"});
    REQUIRE(step.ok());
    CHECK(step->at(0).scalar_value<std::int64_t>() == 6);
  }
}

TEST_CASE("no checkpoint yet: restore_latest says so and changes nothing", "[cluster][checkpoint]") {
  temp_dir dir;
  auto [c, model, s] = start_counting(1);
  cluster::checkpoint_manager_options o;
  o.dir = dir.path;
  auto manager = manager_on(c, *model, o);
  auto from = manager->restore_latest();
  REQUIRE(from.ok());
  CHECK_FALSE(from->has_value());
}

TEST_CASE("a checkpoint that does not match the graph names the variable and the file, and changes nothing",
          "[cluster][checkpoint]") {
  temp_dir dir;
  {
    auto [c, model, s] = start_counting(1, 300);
    REQUIRE(s->run({}, {}, {"train"}).ok());
    cluster::checkpoint_manager_options o;
    o.dir = dir.path;
    REQUIRE(manager_on(c, *model, o)->save_now().ok());
  }
  auto [c, model, s] = start_counting(1, 200);  // a and b of another shape
  REQUIRE(s->run({}, {}, {"train"}).ok());
  REQUIRE(s->run({}, {}, {"train"}).ok());
  cluster::checkpoint_manager_options o;
  o.dir = dir.path;
  auto manager = manager_on(c, *model, o);
  auto from = manager->restore_latest();
  REQUIRE_FALSE(from.ok());
  INFO(from.error().to_string());
  CHECK(from.error().message().find("'a'") != std::string::npos);
  CHECK(from.error().message().find("ckpt-1.h5") != std::string::npos);
  auto values = s->run({}, {"a/Read/ReadVariableOp", "global_step/Read/ReadVariableOp"});
  REQUIRE(values.ok());
  CHECK(values->at(0).flat<float>()[0] == 2.0f);
  CHECK(values->at(1).scalar_value<std::int64_t>() == 2);
}

TEST_CASE("a full disk fails a save, not the run, and the committed checkpoints stay", "[cluster][checkpoint]") {
  temp_dir dir;
  auto [c, model, s] = start_counting(1);
  cluster::faulty_file_system fs;
  std::vector<std::string> lines;
  cluster::checkpoint_manager_options o;
  o.dir = dir.path;
  o.fs = &fs;
  o.log = [&](const std::string& line) { lines.push_back(line); };
  auto manager = manager_on(c, *model, o);
  REQUIRE(s->run({}, {}, {"train"}).ok());
  REQUIRE(manager->save_now().ok());
  fs.full = true;
  REQUIRE(s->run({}, {}, {"train"}).ok());
  auto failed = manager->save_now();
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().error_code() == code::resource_exhausted);
  REQUIRE(s->run({}, {}, {"train"}).ok());  // training goes on
  auto st = manager->stats();
  CHECK(st.committed == 1);
  CHECK(st.failed == 1);
  REQUIRE(st.errors.size() == 1);
  CHECK(st.errors[0].find("No space left on device") != std::string::npos);
  CHECK(lines.back().find("save failed") != std::string::npos);
  auto d = checkpoint::directory::open(dir.path);
  REQUIRE(d.ok());
  auto list = d->list();
  REQUIRE(list.ok());
  REQUIRE(list->size() == 1);
  CHECK(list->at(0).step == 1);
  fs.full = false;
  auto again = manager->save_now();
  REQUIRE(again.ok());
  CHECK(again->step == 3);
}

TEST_CASE("a periodic save that failed is tried again 1, 2, 4, ... steps later, before the next one due",
          "[cluster][checkpoint]") {
  temp_dir dir;
  auto [c, model, s] = start_counting(1);
  cluster::faulty_file_system fs;
  cluster::checkpoint_manager_options o;
  o.dir = dir.path;
  o.fs = &fs;
  o.every_steps = 8;
  auto manager = manager_on(c, *model, o);
  // The writer saves on its own thread: wait for what it has done (or give up).
  auto wait_for = [&](auto done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done(manager->stats()) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done(manager->stats());
  };
  auto failed = [](int n) { return [n](const cluster::checkpoint_stats& st) { return st.failed == n; }; };
  auto committed = [](int n) { return [n](const cluster::checkpoint_stats& st) { return st.committed == n; }; };
  std::int64_t step = 0;
  auto train_to = [&](std::int64_t last) {
    while (step < last) {
      REQUIRE(s->run({}, {}, {"train"}).ok());
      manager->step_done(++step);
    }
  };
  fs.full = true;
  train_to(8);  // due: fails
  REQUIRE(wait_for(failed(1)));
  train_to(9);  // 1 step later: fails
  REQUIRE(wait_for(failed(2)));
  train_to(11);  // 2 later
  REQUIRE(wait_for(failed(3)));
  train_to(15);  // 4 later (8 later is the schedule's own)
  REQUIRE(wait_for(failed(4)));
  fs.full = false;
  train_to(16);
  REQUIRE(wait_for(committed(1)));
  auto st = manager->stats();
  CHECK(st.latest_step == 16);
  CHECK(st.failed == 4);
  // A commit starts again from 1 step.
  fs.full = true;
  train_to(24);
  REQUIRE(wait_for(failed(5)));
  fs.full = false;
  train_to(25);
  REQUIRE(wait_for(committed(2)));
  CHECK(manager->stats().latest_step == 25);
}

namespace {

// An embedding of 10 ids x 3 split into `shards` parts round-robin over `ps` PS tasks, and
// "rows": the lookup of ids 0..9 (the table in id order).
graph::graph embedding_graph(int shards, int ps, const std::string& strategy) {
  auto root = scope::new_root();
  graph::variable_collection vars;
  nn::embedding_options eo;
  eo.partition_strategy = strategy;
  eo.seed = shards;  // tables that differ before the restore
  auto parts = nn::make_embedding(root, vars, 10, 3, shards, dtype::float32, eo);
  auto ids = ops::constant(root, tensor::from_vector<std::int32_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  ops::identity(root.with_name("rows"), nn::embedding_lookup(root, parts, ids, strategy));
  graph::global_variables_initializer(root, vars);
  auto def = root.to_graph_def();
  if (!def.ok()) FAIL(def.error().to_string());
  placement::replica_device_setter_options o;
  o.ps_tasks = ps;
  o.worker_device = "/job:worker/task:0";
  REQUIRE(placement::replica_device_setter(&*def, o).ok());
  auto g = graph::graph::from_graph_def(std::move(*def));
  if (!g.ok()) FAIL(g.error().to_string());
  return std::move(*g);
}

}  // namespace

TEST_CASE("a partitioned embedding is one variable in id order; 4 shards on 4 PS restore onto 2 shards on 2 PS",
          "[cluster][checkpoint]") {
  for (const char* strategy : {"mod", "div"}) {
    INFO("partition_strategy " << strategy);
    temp_dir dir;
    tensor table;
    {
      auto c = cluster_of(4);
      auto g = embedding_graph(4, 4, strategy);
      actors::session_options so;
      so.cluster = c;
      so.default_device = "/job:worker/task:0";
      auto s = actors::session::create(graph_of_copy(g), so);
      REQUIRE(s.ok());
      REQUIRE((*s)->run({}, {}, {"init"}).ok());
      auto rows = (*s)->run({}, {"rows"});
      REQUIRE(rows.ok());
      table = rows->at(0);
      cluster::checkpoint_manager_options o;
      o.dir = dir.path;
      o.default_device = "/job:worker/task:0";
      auto m = cluster::checkpoint_manager::create(c, g, o);
      if (!m.ok()) FAIL(m.error().to_string());
      CHECK((*m)->variable_names() == std::vector<std::string>{"embedding"});
      REQUIRE((*m)->save_now().ok());
      // The file holds the table in id order, whatever the parts.
      auto d = checkpoint::directory::open(dir.path);
      REQUIRE(d.ok());
      auto r = d->open_latest(nullptr);
      REQUIRE(r.ok());
      auto saved = r->read("embedding");
      REQUIRE(saved.ok());
      CHECK(saved->equals(table));
    }
    auto c = cluster_of(2);
    auto g = embedding_graph(2, 2, strategy);
    actors::session_options so;
    so.cluster = c;
    so.default_device = "/job:worker/task:0";
    auto s = actors::session::create(graph_of_copy(g), so);
    REQUIRE(s.ok());
    REQUIRE((*s)->run({}, {}, {"init"}).ok());
    auto before = (*s)->run({}, {"rows"});
    REQUIRE(before.ok());
    CHECK_FALSE(before->at(0).equals(table));
    cluster::checkpoint_manager_options o;
    o.dir = dir.path;
    o.default_device = "/job:worker/task:0";
    auto m = cluster::checkpoint_manager::create(c, g, o);
    if (!m.ok()) FAIL(m.error().to_string());
    auto from = (*m)->restore_latest();
    REQUIRE(from.ok());
    REQUIRE(from->has_value());
    auto after = (*s)->run({}, {"rows"});
    REQUIRE(after.ok());
    CHECK(after->at(0).equals(table));
  }
}

TEST_CASE("a restored run draws the random numbers the uninterrupted one draws", "[cluster][checkpoint]") {
  auto with_noise = [](int ps) {
    counting_run r;
    r.c = cluster_of(ps);
    r.model = build_counting_model(ps, 300);
    auto shape = ops::constant(r.model->root.with_name("noise/shape"), tensor::from_vector<std::int32_t>({4}));
    r.model->root.with_name("noise").with_device("/job:worker/task:0").add(
        "RandomUniform", {shape},
        {{"dtype", graph::attr_value(dtype::float32)}, {"seed", graph::attr_value(std::int64_t{3})},
         {"seed2", graph::attr_value(std::int64_t{4})}});
    r.s = session_on(r.c, *r.model);
    REQUIRE(r.s->run({}, {}, {"init"}).ok());
    return r;
  };
  temp_dir dir;
  std::vector<tensor> next;  // what the uninterrupted run draws after the save
  {
    auto [c, model, s] = with_noise(1);
    cluster::checkpoint_manager_options o;
    o.dir = dir.path;
    auto manager = manager_on(c, *model, o);
    for (int i = 0; i < 2; ++i) REQUIRE(s->run({}, {}, {"train"}).ok());
    for (int i = 0; i < 3; ++i) REQUIRE(s->run({}, {"noise"}).ok());
    REQUIRE(manager->save_now().ok());
    for (int i = 0; i < 2; ++i) {
      auto drawn = s->run({}, {"noise"});
      REQUIRE(drawn.ok());
      next.push_back(drawn->at(0));
    }
    CHECK_FALSE(next[0].equals(next[1]));
  }
  // Another cluster, as after a restart: its generator starts afresh until restored.
  auto [c, model, s] = with_noise(1);
  std::vector<std::string> lines;
  cluster::checkpoint_manager_options o;
  o.dir = dir.path;
  o.log = [&](const std::string& line) { lines.push_back(line); };
  auto manager = manager_on(c, *model, o);
  CHECK(manager->holds_pipelines("/job:worker/task:0"));
  auto from = manager->restore_latest();
  REQUIRE(from.ok());
  REQUIRE(from->has_value());
  CHECK(**from == 2);
  REQUIRE_FALSE(lines.empty());
  CHECK_THAT(lines.back(), Catch::Contains("and 1 random generator from"));
  for (const tensor& expected : next) {
    auto drawn = s->run({}, {"noise"});
    REQUIRE(drawn.ok());
    CHECK(drawn->at(0).equals(expected));
  }
  // The file holds it where people find it.
  auto r = checkpoint::reader::open(dir.path + "/ckpt-2.h5");
  REQUIRE(r.ok());
  auto state = r->state("job:worker/replica:0/task:0/noise/generator");
  REQUIRE(state.ok());
  CHECK(state->shape() == tensor_shape({6}));
}
