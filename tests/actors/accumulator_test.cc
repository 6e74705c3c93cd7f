// Conditional accumulators as conversations: applies and takes in either order, stale and
// late (backup) gradients, the fixed summation order, sparse aggregates, a reset by
// set_global_step, bad gradients, a cancelled take and the actor dying with a take
// parked; then the accumulator ops as kernels in a session, with the step's client as the
// gradient's source.
#include <catch2/catch.hpp>

#include <cmath>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "actors/accumulator.h"
#include "actors/session.h"
#include "graph/attr.h"
#include "graph/graph_io.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "tests/actors/answer.h"

using namespace troupe;
using namespace std::chrono_literals;
using actors::accumulator_options;
using testing::answer;

namespace {

// What the observer heard.
class recorded_events final : public actors::sync_observer {
 public:
  void gradient(const std::string&, const std::string& source, std::int64_t local_step, std::int64_t global_step,
                bool kept) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!kept) dropped.push_back(source + "@" + std::to_string(local_step) + "<" + std::to_string(global_step));
  }
  void aggregated(const std::string&, std::int64_t step, const std::vector<std::string>& sources) override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string s = std::to_string(step) + ":";
    for (const auto& x : sources) s += " " + x;
    takes.push_back(s);
  }
  std::vector<std::string> dropped, takes;

 private:
  std::mutex mutex_;
};

struct fixture {
  caf::actor_system sys{testing::test_config()};
  recorded_events events;
  std::vector<caf::actor> spawned;

  std::shared_ptr<actors::accumulator_resource> make(accumulator_options o) {
    o.observer = &events;
    auto a = actors::make_accumulator(sys, std::move(o));
    REQUIRE(a.ok());
    spawned.push_back((*a)->actor());
    return *a;
  }
  ~fixture() {
    for (auto& a : spawned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
};

accumulator_options dense(std::string name = "acc") {
  accumulator_options o;
  o.name = std::move(name);
  o.type = dtype::float32;
  o.shape = partial_shape({3});
  return o;
}

status apply(actors::accumulator_resource& a, std::int64_t local_step, const std::string& source, tensor g,
             tensor indices = tensor(), tensor shape = tensor()) {
  answer<actors::done_t> done;
  caf::anon_send(a.actor(), actors::accumulator_apply{local_step, source, std::move(g), std::move(indices),
                                                      std::move(shape), done.reply()});
  auto r = done.wait();
  return r.ok() ? status() : r.error();
}

answer<std::vector<tensor>> take(actors::accumulator_resource& a, std::int32_t n, std::uint64_t id = 0) {
  answer<std::vector<tensor>> out;
  caf::anon_send(a.actor(), actors::accumulator_take{id, n, out.reply()});
  return out;
}

std::int32_t count(actors::accumulator_resource& a) {
  answer<std::vector<tensor>> out;
  caf::anon_send(a.actor(), actors::accumulator_count{out.reply()});
  auto r = out.wait();
  REQUIRE(r.ok());
  return r->at(0).scalar_value<std::int32_t>();
}

tensor vec(std::vector<float> v) { return tensor::from_vector(v); }

}  // namespace

TEST_CASE("a take waits for num_required gradients, then averages them and advances the step", "[accumulator]") {
  fixture f;
  auto a = f.make(dense());
  auto t = take(*a, 2);
  REQUIRE(apply(*a, 0, "/job:worker/task:0", vec({1, 2, 3})).ok());
  CHECK_FALSE(t.arrived());
  CHECK(count(*a) == 1);
  REQUIRE(apply(*a, 0, "/job:worker/task:1", vec({3, 4, 5})).ok());
  auto r = t.wait();
  REQUIRE(r.ok());
  CHECK(r->at(0).equals(vec({2, 3, 4})));
  CHECK(count(*a) == 0);
  // The accumulator is at step 1 now: a gradient of step 0 is stale, one of step 1 counts.
  REQUIRE(apply(*a, 0, "/job:worker/task:2", vec({9, 9, 9})).ok());
  CHECK(count(*a) == 0);
  REQUIRE(apply(*a, 1, "/job:worker/task:2", vec({1, 1, 1})).ok());
  CHECK(count(*a) == 1);
  // And one from a later step (a step rolled back by a recovery) is dropped too.
  REQUIRE(apply(*a, 5, "/job:worker/task:0", vec({1, 1, 1})).ok());
  CHECK(count(*a) == 1);
  CHECK(f.events.dropped == std::vector<std::string>{"/job:worker/task:2@0<1", "/job:worker/task:0@5<1"});
  CHECK(f.events.takes == std::vector<std::string>{"0: /job:worker/task:0 /job:worker/task:1"});
}

TEST_CASE("the sum is taken by worker index, whatever order the gradients arrived in", "[accumulator]") {
  // Floating-point addition is not associative: 1e8 + 1 - 1e8 depends on the order.
  const std::vector<std::pair<std::string, float>> grads = {
      {"/job:worker/task:0", 1e8f}, {"/job:worker/task:2", 1.0f}, {"/job:worker/task:10", -1e8f}, {"/job:worker/task:1", 3.0f}};
  std::vector<tensor> results;
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}}) {
    fixture f;
    auto a = f.make(dense());
    auto t = take(*a, 4);
    for (int i : order) {
      const auto& [source, x] = grads[static_cast<std::size_t>(i)];
      REQUIRE(apply(*a, 0, source, vec({x, -x, 2 * x})).ok());
    }
    auto r = t.wait();
    REQUIRE(r.ok());
    results.push_back(r->at(0));
    CHECK(f.events.takes ==
          std::vector<std::string>{"0: /job:worker/task:0 /job:worker/task:1 /job:worker/task:2 /job:worker/task:10"});
  }
  // Task order 0, 1, 2, 10 (not 0, 1, 10, 2 as text): ((1e8 + 3) + 1) - 1e8, then / 4.
  const float expected = (((1e8f + 3.0f) + 1.0f) + -1e8f) / 4.0f;
  CHECK(results[0].flat<float>()[0] == expected);
  CHECK(results[1].equals(results[0]));
  CHECK(results[2].equals(results[0]));
}

TEST_CASE("a take uses the first num_required gradients; the later ones are dropped as backups", "[accumulator]") {
  fixture f;
  auto a = f.make(dense());
  REQUIRE(apply(*a, 0, "/job:worker/task:2", vec({1, 1, 1})).ok());
  REQUIRE(apply(*a, 0, "/job:worker/task:0", vec({3, 3, 3})).ok());
  REQUIRE(apply(*a, 0, "/job:worker/task:1", vec({100, 100, 100})).ok());
  auto r = take(*a, 2).wait();
  REQUIRE(r.ok());
  CHECK(r->at(0).equals(vec({2, 2, 2})));
  CHECK(f.events.dropped == std::vector<std::string>{"/job:worker/task:1@0<1"});
  // A backup arriving after the take is stale.
  REQUIRE(apply(*a, 0, "/job:worker/task:3", vec({1, 1, 1})).ok());
  CHECK(f.events.dropped.back() == "/job:worker/task:3@0<1");
}

TEST_CASE("with one_per_source, a worker's second gradient for a step is dropped", "[accumulator]") {
  fixture f;
  auto o = dense();
  o.one_per_source = true;
  auto a = f.make(o);
  REQUIRE(apply(*a, 0, "/job:worker/task:0", vec({1, 1, 1})).ok());
  REQUIRE(apply(*a, 0, "/job:worker/task:0", vec({9, 9, 9})).ok());  // the same step, run again
  CHECK(count(*a) == 1);
  REQUIRE(apply(*a, 0, "", vec({5, 5, 5})).ok());  // unknown sources are not merged
  REQUIRE(apply(*a, 0, "", vec({5, 5, 5})).ok());
  CHECK(count(*a) == 3);
  auto r = take(*a, 3).wait();
  REQUIRE(r.ok());
  CHECK(r->at(0).equals(vec({11.0f / 3, 11.0f / 3, 11.0f / 3})));
  CHECK(f.events.dropped == std::vector<std::string>{"/job:worker/task:0@0<0"});
}

TEST_CASE("sparse aggregates: each index once, ascending; MEAN per index, SUM in total", "[accumulator]") {
  for (auto reduction : {actors::accumulator_reduction::mean, actors::accumulator_reduction::sum}) {
    fixture f;
    accumulator_options o;
    o.name = "emb";
    o.type = dtype::float32;
    o.shape = partial_shape({5, 2});
    o.sparse = true;
    o.reduction = reduction;
    auto a = f.make(o);
    auto t = take(*a, 2);
    REQUIRE(apply(*a, 0, "/job:worker/task:1", tensor::from_vector<float>({1, 1, 2, 2}, tensor_shape{2, 2}),
                  tensor::from_vector<std::int64_t>({4, 1}))
                .ok());
    REQUIRE(apply(*a, 0, "/job:worker/task:0", tensor::from_vector<float>({3, 3}, tensor_shape{1, 2}),
                  tensor::from_vector<std::int64_t>({4}), tensor::from_vector<std::int64_t>({5, 2}))
                .ok());
    auto r = t.wait();
    REQUIRE(r.ok());
    CHECK(r->at(0).equals(tensor::from_vector<std::int64_t>({1, 4})));
    const bool mean = reduction == actors::accumulator_reduction::mean;
    CHECK(r->at(1).equals(tensor::from_vector<float>({2, 2, mean ? 2.0f : 4.0f, mean ? 2.0f : 4.0f}, tensor_shape{2, 2})));
    CHECK(r->at(2).equals(tensor::from_vector<std::int64_t>({5, 2})));
    // An index outside the table is refused.
    status bad = apply(*a, 1, "", tensor::from_vector<float>({1, 1}, tensor_shape{1, 2}), tensor::from_vector<std::int64_t>({5}));
    CHECK(bad.error_code() == code::invalid_argument);
    CHECK_THAT(bad.message(), Catch::Contains("index 5 is outside [0, 5)"));
  }
}

TEST_CASE("set_global_step moves the step and discards what was kept", "[accumulator]") {
  fixture f;
  auto a = f.make(dense());
  REQUIRE(apply(*a, 0, "w", vec({1, 1, 1})).ok());
  answer<actors::done_t> set;
  caf::anon_send(a->actor(), actors::accumulator_set_step{7, set.reply()});
  REQUIRE(set.wait().ok());
  CHECK(count(*a) == 0);
  REQUIRE(apply(*a, 6, "w", vec({1, 1, 1})).ok());
  REQUIRE(apply(*a, 7, "w", vec({4, 4, 4})).ok());
  auto r = take(*a, 1).wait();
  REQUIRE(r.ok());
  CHECK(r->at(0).equals(vec({4, 4, 4})));
  CHECK(f.events.takes == std::vector<std::string>{"7: w"});
}

TEST_CASE("bad gradients and bad takes are refused with the accumulator's name", "[accumulator]") {
  fixture f;
  auto a = f.make(dense("grads"));
  status s = apply(*a, 0, "", tensor::from_vector<double>({1, 2, 3}));
  CHECK(s.error_code() == code::invalid_argument);
  CHECK_THAT(s.message(), Catch::Contains("accumulator 'grads'") && Catch::Contains("float") && Catch::Contains("double"));
  s = apply(*a, 0, "", vec({1, 2}));
  CHECK_THAT(s.message(), Catch::Contains("shape [3]") && Catch::Contains("[2]"));
  auto r = take(*a, 0).wait();
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message(), Catch::Contains("num_required is 0"));
  accumulator_options o = dense();
  o.type = dtype::bool_;
  CHECK(actors::make_accumulator(f.sys, o).error().error_code() == code::unimplemented);
}

TEST_CASE("a parked take is cancelled by its id, and fails unavailable when the actor ends", "[accumulator]") {
  fixture f;
  auto a = f.make(dense());
  auto cancelled = take(*a, 1, 42);
  auto orphan = take(*a, 1, 43);
  caf::anon_send(a->actor(), actors::accumulator_cancel{42});
  auto r = cancelled.wait();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().error_code() == code::cancelled);
  CHECK_FALSE(orphan.arrived());
  caf::anon_send_exit(a->actor(), caf::exit_reason::kill);
  r = orphan.wait();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().error_code() == code::unavailable);
}

TEST_CASE("accumulator ops in a session, as TensorFlow graphs use them", "[accumulator]") {
  auto root = graph::scope::new_root();
  const std::map<std::string, tf::AttrValue> attrs = {{"dtype", graph::attr_value(dtype::float32)},
                                                      {"shape", graph::attr_value(partial_shape({2}))},
                                                      {"shared_name", graph::attr_value(std::string("g"))}};
  auto acc = root.with_name("acc").add("ConditionalAccumulator", {}, attrs);
  auto grad = ops::placeholder(root.with_name("grad"), dtype::float32, partial_shape({2}));
  auto step = ops::placeholder(root.with_name("step"), dtype::int64, partial_shape::scalar());
  root.with_name("apply").add("AccumulatorApplyGradient", {acc.out(), step, grad}, {{"dtype", graph::attr_value(dtype::float32)}});
  root.with_name("take").add("AccumulatorTakeGradient", {acc.out(), ops::scalar<std::int32_t>(root, 2)},
                             {{"dtype", graph::attr_value(dtype::float32)}});
  root.with_name("count").add("AccumulatorNumAccumulated", {acc.out()});
  root.with_name("set").add("AccumulatorSetGlobalStep", {acc.out(), step});
  auto g = root.to_graph();
  REQUIRE(g.ok());
  auto s = actors::session::create(std::move(*g));
  REQUIRE(s.ok());
  auto& session = **s;
  REQUIRE(session.run({{"step", tensor::scalar<std::int64_t>(3)}}, {}, {"set"}).ok());
  REQUIRE(session.run({{"grad", vec({1, 2})}, {"step", tensor::scalar<std::int64_t>(3)}}, {}, {"apply"}).ok());
  REQUIRE(session.run({{"grad", vec({5, 5})}, {"step", tensor::scalar<std::int64_t>(2)}}, {}, {"apply"}).ok());  // stale
  REQUIRE(session.run({{"grad", vec({3, 4})}, {"step", tensor::scalar<std::int64_t>(3)}}, {}, {"apply"}).ok());
  auto n = session.run({}, {"count"});
  REQUIRE(n.ok());
  CHECK(n->at(0).scalar_value<std::int32_t>() == 2);
  auto avg = session.run({}, {"take"});
  REQUIRE(avg.ok());
  CHECK(avg->at(0).equals(vec({2, 3})));
}

TEST_CASE("a GraphDef as TensorFlow writes it, dense and sparse accumulators, loads and runs", "[accumulator]") {
  // tf.compat.v1.ConditionalAccumulator / SparseConditionalAccumulator and their apply and
  // take ops, in TensorFlow's text format (its handles are Ref(string) edges; troupe
  // carries a resource handle over the same edges).
  const std::string text = R"pb(
node { name: "grad" op: "Placeholder"
       attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 2 } } } } }
node { name: "step" op: "Placeholder"
       attr { key: "dtype" value { type: DT_INT64 } } attr { key: "shape" value { shape { } } } }
node { name: "acc" op: "ConditionalAccumulator"
       attr { key: "container" value { s: "" } } attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "reduction_type" value { s: "MEAN" } }
       attr { key: "shape" value { shape { dim { size: 2 } } } } attr { key: "shared_name" value { s: "" } } }
node { name: "apply" op: "AccumulatorApplyGradient" input: "acc" input: "step" input: "grad"
       attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "num_required" op: "Const"
       attr { key: "dtype" value { type: DT_INT32 } }
       attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { } int_val: 2 } } } }
node { name: "take" op: "AccumulatorTakeGradient" input: "acc" input: "num_required"
       attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "sacc" op: "SparseConditionalAccumulator"
       attr { key: "container" value { s: "" } } attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "reduction_type" value { s: "MEAN" } }
       attr { key: "shape" value { shape { dim { size: 4 } dim { size: 2 } } } } attr { key: "shared_name" value { s: "" } } }
node { name: "idx" op: "Placeholder"
       attr { key: "dtype" value { type: DT_INT64 } } attr { key: "shape" value { shape { dim { size: -1 } } } } }
node { name: "rows" op: "Placeholder"
       attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "shape" value { shape { dim { size: -1 } dim { size: 2 } } } } }
node { name: "dense_shape" op: "Const"
       attr { key: "dtype" value { type: DT_INT64 } }
       attr { key: "value" value { tensor { dtype: DT_INT64 tensor_shape { dim { size: 2 } } int64_val: 4 int64_val: 2 } } } }
node { name: "sapply" op: "SparseAccumulatorApplyGradient" input: "sacc" input: "step" input: "idx" input: "rows" input: "dense_shape"
       attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "has_known_shape" value { b: true } } }
node { name: "stake" op: "SparseAccumulatorTakeGradient" input: "sacc" input: "num_required"
       attr { key: "dtype" value { type: DT_FLOAT } } }
)pb";
  auto def = graph::parse_graph_def_text(text, "accumulators.pbtxt");
  if (!def.ok()) FAIL(def.error().to_string());
  auto g = graph::graph::from_graph_def(std::move(*def));
  if (!g.ok()) FAIL(g.error().to_string());
  auto s = actors::session::create(std::move(*g));
  REQUIRE(s.ok());
  auto& session = **s;
  const tensor step0 = tensor::scalar<std::int64_t>(0);
  for (const auto& [grad, idx, rows] :
       std::vector<std::tuple<tensor, tensor, tensor>>{{vec({1, 2}), tensor::from_vector<std::int64_t>({3}),
                                                        tensor::from_vector<float>({2, 2}, tensor_shape{1, 2})},
                                                       {vec({3, 6}), tensor::from_vector<std::int64_t>({3, 0}),
                                                        tensor::from_vector<float>({4, 4, 1, 1}, tensor_shape{2, 2})}}) {
    REQUIRE(session.run({{"grad", grad}, {"step", step0}, {"idx", idx}, {"rows", rows}}, {}, {"apply", "sapply"}).ok());
  }
  auto dense = session.run({}, {"take"});
  REQUIRE(dense.ok());
  CHECK(dense->at(0).equals(vec({2, 4})));
  auto sparse = session.run({}, {"stake:0", "stake:1", "stake:2"});
  REQUIRE(sparse.ok());
  CHECK(sparse->at(0).equals(tensor::from_vector<std::int64_t>({0, 3})));
  // MEAN per index: row 0 had one gradient (1), row 3 two ((2 + 4) / 2).
  CHECK(sparse->at(1).equals(tensor::from_vector<float>({1, 1, 3, 3}, tensor_shape{2, 2})));
  CHECK(sparse->at(2).equals(tensor::from_vector<std::int64_t>({4, 2})));
}
