// The executor and the session: correctness, pruning, errors with node names,
// concurrent and asynchronous steps, asynchronous kernels, aborts.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include "actors/executor.h"
#include "actors/session.h"
#include "core/float_env.h"
#include "tests/actors/session_fixture.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "graph/variables.h"

using namespace troupe;
using troupe::testing::make_session;

namespace {

// A test op whose kernel is asynchronous: it finishes on another thread after a delay,
// and counts how many times it ran.
std::atomic<int> g_delay_runs{0};

class delay_kernel final : public kernels::async_op_kernel {
 public:
  explicit delay_kernel(kernels::kernel_construction& c) : async_op_kernel(c) {
    c.get_attr("fail", &fail_);
  }
  void compute_async(kernels::kernel_context& ctx, done_callback done) override {
    ++g_delay_runs;
    tensor in = ctx.input(0);
    bool fail = fail_;
    std::thread([&ctx, in, fail, done] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (fail) ctx.fail(aborted_error("TestDelay was told to fail"));
      else ctx.set_output(0, in);
      done();
    }).detach();
  }

 private:
  bool fail_ = false;
};

void register_test_ops() {
  static bool once = [] {
    auto& ops = graph::op_registry::builtin();
    status s = ops.add(graph::op_schema("TestDelay")
                           .input("x: float").output("y: float").attr("fail: bool = false")
                           .shape_fn(graph::unchanged_shape));
    REQUIRE(s.ok());
    kernels::kernel_registry::builtin().add("TestDelay", "CPU", {}, kernels::make_kernel<delay_kernel>);
    return true;
  }();
  (void)once;
}

}  // namespace

TEST_CASE("a session computes fetches from feeds", "[actors]") {
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 2});
  auto w = ops::constant(root.with_name("w"), tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  auto y = ops::matmul(root.with_name("y"), x, w);
  auto z = ops::relu(root.with_name("z"), ops::sub(root, y, ops::scalar(root, 10.0f)));
  auto s = make_session(root);
  auto out = s->run({{"x", tensor::from_vector<float>({1, 1, 2, 2}, {2, 2})}}, {"y", "z:0", "x"});
  REQUIRE(out.ok());
  CHECK(out->at(0).equals(tensor::from_vector<float>({4, 6, 8, 12}, {2, 2})));
  CHECK(out->at(1).equals(tensor::from_vector<float>({0, 0, 0, 2}, {2, 2})));
  CHECK(out->at(2).equals(tensor::from_vector<float>({1, 1, 2, 2}, {2, 2})));  // a fed fetch
  // The same signature is prepared once.
  REQUIRE(s->run({{"x", tensor::from_vector<float>({0, 0}, {1, 2})}}, {"y", "z:0", "x"}).ok());
  CHECK(s->num_prepared() == 1);
  REQUIRE(s->run({{"x", tensor::from_vector<float>({0, 0}, {1, 2})}}, {"y"}).ok());
  CHECK(s->num_prepared() == 2);
}

TEST_CASE("feeding an intermediate tensor replaces it; unneeded nodes never run", "[actors]") {
  register_test_ops();
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32);
  auto counted = root.with_name("counted").add("TestDelay", {x}).out();
  auto y = ops::square(root.with_name("y"), counted);
  auto fails = root.with_name("fails").add("TestDelay", {x}, {{"fail", graph::attr_value(true)}}).out();
  ops::identity(root.with_name("uses_fails"), fails);
  auto s = make_session(root);
  int before = g_delay_runs.load();
  auto out = s->run({{"counted", tensor::scalar(3.0f)}}, {"y"});
  REQUIRE(out.ok());
  CHECK(out->at(0).scalar_value<float>() == 9.0f);
  CHECK(g_delay_runs.load() == before);  // neither TestDelay ran
  auto through = s->run({{"x", tensor::scalar(2.0f)}}, {"y"});
  REQUIRE(through.ok());
  CHECK(through->at(0).scalar_value<float>() == 4.0f);
  CHECK(g_delay_runs.load() == before + 1);
}

TEST_CASE("step errors name the culprit", "[actors]") {
  register_test_ops();
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 3});
  auto r = ops::reshape(root.with_name("r"), x, ops::constant(root, tensor::from_vector<std::int32_t>({4, -1})));
  auto fails = root.with_name("fails").add("TestDelay", {ops::scalar(root, 1.0f)}, {{"fail", graph::attr_value(true)}}).out();
  auto after = ops::identity(root.with_name("after"), fails);
  auto s = make_session(root);
  SECTION("unfed placeholder") {
    auto out = s->run({}, {"r"});
    CHECK_THAT(out.error().message(), Catch::Contains("placeholder 'x' must be fed"));
  }
  SECTION("feed of the wrong dtype") {
    auto out = s->run({{"x", tensor::zeros(dtype::int32, {1, 3})}}, {"r"});
    CHECK(out.error().error_code() == code::invalid_argument);
    CHECK_THAT(out.error().message(), Catch::Contains("feed 'x' is int32 but the graph expects float"));
  }
  SECTION("feed of the wrong shape") {
    auto out = s->run({{"x", tensor::zeros(dtype::float32, {2, 4})}}, {"r"});
    CHECK_THAT(out.error().message(), Catch::Contains("feed 'x' has shape [2,4]") && Catch::Contains("[?,3]"));
  }
  SECTION("unknown fetch, feed and target") {
    CHECK_THAT(s->run({}, {"nope"}).error().message(), Catch::Contains("fetch 'nope'"));
    CHECK_THAT(s->run({{"nope:1", tensor::scalar(1.0f)}}, {"r"}).error().message(), Catch::Contains("feed 'nope:1'"));
    CHECK_THAT(s->run({}, {}, {"nope"}).error().message(), Catch::Contains("target 'nope'"));
    CHECK_THAT(s->run({}, {"x:3"}).error().message(), Catch::Contains("has 1 output"));
  }
  SECTION("a kernel error carries its node's name") {
    auto out = s->run({{"x", tensor::zeros(dtype::float32, {3, 3})}}, {"r"});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("'r'"));
  }
  SECTION("an asynchronous kernel's error aborts the step") {
    auto out = s->run({}, {"after"});
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().error_code() == code::aborted);
    CHECK_THAT(out.error().message(), Catch::Contains("node 'fails' (TestDelay)"));
  }
  SECTION("the session still works after errors") {
    REQUIRE_FALSE(s->run({}, {"after"}).ok());
    auto ok = s->run({{"x", tensor::zeros(dtype::float32, {4, 3})}}, {"r"});
    REQUIRE(ok.ok());
    CHECK(ok->at(0).shape() == tensor_shape{4, 3});
  }
}

TEST_CASE("an error in one branch aborts the step while another branch is busy", "[actors]") {
  register_test_ops();
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32);
  // A long chain of asynchronous nodes on one side, an immediate failure on the other.
  graph::output chain = x;
  for (int i = 0; i < 20; ++i) chain = root.add("TestDelay", {chain}).out();
  auto bad = root.with_name("bad").add("TestDelay", {x}, {{"fail", graph::attr_value(true)}}).out();
  auto s = make_session(root);
  int before = g_delay_runs.load();
  auto out = s->run({{"x", tensor::scalar(1.0f)}}, {chain.name(), bad.name()});
  REQUIRE_FALSE(out.ok());
  CHECK_THAT(out.error().message(), Catch::Contains("'bad'"));
  // The chain stopped early instead of running all 20 nodes.
  CHECK(g_delay_runs.load() - before < 21);
}

TEST_CASE("many threads run steps on one session at once", "[actors]") {
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1});
  auto y = ops::add(root.with_name("y"), ops::mul(root, x, x), ops::scalar(root, 1.0f));
  auto s = make_session(root);
  constexpr int k_threads = 8;
  constexpr int k_steps = 100;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < k_steps; ++i) {
        float v = static_cast<float>(t * 100 + i);  // v * v + 1 stays exact in float
        auto out = s->run({{"x", tensor::from_vector<float>({v, -v})}}, {"y"});
        if (!out.ok() || out->at(0).data<float>()[0] != v * v + 1 || out->at(0).data<float>()[1] != v * v + 1) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong.load() == 0);
  CHECK(s->num_prepared() == 1);
}

TEST_CASE("run_async calls back once per step", "[actors]") {
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::int32, {});
  ops::square(root.with_name("y"), x);
  auto s = make_session(root);
  constexpr int k_steps = 50;
  std::vector<std::promise<result<std::vector<tensor>>>> promises(k_steps);
  for (int i = 0; i < k_steps; ++i) {
    s->run_async({{"x", tensor::scalar<std::int32_t>(i)}}, {"y"}, {},
                 [&promises, i](result<std::vector<tensor>> r) { promises[static_cast<std::size_t>(i)].set_value(std::move(r)); });
  }
  for (int i = 0; i < k_steps; ++i) {
    auto r = promises[static_cast<std::size_t>(i)].get_future().get();
    REQUIRE(r.ok());
    CHECK(r->at(0).scalar_value<std::int32_t>() == i * i);
  }
  std::promise<status> failed;
  s->run_async({}, {"y"}, {}, [&](result<std::vector<tensor>> r) { failed.set_value(r.to_status()); });
  CHECK_THAT(failed.get_future().get().message(), Catch::Contains("placeholder 'x' must be fed"));
}

TEST_CASE("targets run for their effects and return nothing", "[actors]") {
  register_test_ops();
  auto root = graph::scope::new_root();
  auto side = root.with_name("side").add("TestDelay", {ops::scalar(root, 1.0f)});
  ops::no_op(root.with_name("train").with_control_dependencies({side}));
  auto s = make_session(root);
  int before = g_delay_runs.load();
  auto out = s->run({}, {}, {"train"});
  REQUIRE(out.ok());
  CHECK(out->empty());
  CHECK(g_delay_runs.load() == before + 1);
}

TEST_CASE("the executor runs wide and deep graphs of trivial ops", "[actors]") {
  auto root = graph::scope::new_root();
  auto start = ops::no_op(root.with_name("start"));
  std::vector<graph::operation> fan;
  for (int i = 0; i < 500; ++i) fan.push_back(ops::no_op(root.with_control_dependencies({start})));
  ops::no_op(root.with_name("join").with_control_dependencies(fan));
  graph::output chain = ops::scalar(root, 1.0f);
  for (int i = 0; i < 500; ++i) chain = ops::identity(root, chain);
  auto g = root.to_graph();
  REQUIRE(g.ok());
  auto shared = std::make_shared<const graph::graph>(std::move(*g));
  actors::executable_spec spec;
  spec.graph = shared;
  for (int i = 0; i < shared->num_nodes(); ++i) spec.nodes.push_back(i);
  spec.fetches.push_back(*shared->resolve(chain.name()));
  auto exec = actors::executable::create(spec);
  REQUIRE(exec.ok());
  compute_pool pool(2);
  for (int step = 0; step < 20; ++step) {
    auto out = (*exec)->run_and_wait(step, {}, pool);
    REQUIRE(out.ok());
    CHECK(out->at(0).scalar_value<float>() == 1.0f);
  }
}

TEST_CASE("kernels compute with subnormal floats flushed to zero, as TensorFlow's do", "[actors]") {
  // 1e-20 * 1e-20 = 1e-40 is subnormal in float: kernels make it 0 (doc/runtime.md), on
  // the thread that runs the kernel and on the compute pool's helpers (a large product is
  // split), and so does a variable's update (1.5e-38 - 1.2e-38 * 1 = 3e-39).
  auto root = graph::scope::new_root();
  auto tiny = ops::scalar(root, 1e-20f);
  auto small = ops::mul(root.with_name("small"), tiny, tiny);
  auto many = ops::placeholder(root.with_name("many"), dtype::float32, {-1});
  auto products = ops::mul(root.with_name("products"), many, tiny);
  graph::variable_collection vars;
  auto w = graph::make_variable(root, "w", tensor_shape({4}), dtype::float32, init::constant_initializer(1.5e-38));
  vars.add(w);
  auto loss = ops::sum(root.with_name("loss"), w.value, ops::int32_vector(root, {0}));
  auto train_op = train::minimize(root, train::gradient_descent(1.2e-38), loss, vars);
  REQUIRE(train_op.ok());
  auto init = graph::global_variables_initializer(root, vars);
  actors::session_options options;
  options.compute_threads = 2;
  auto s = make_session(root, options);
  REQUIRE_FALSE(flush_denormals::active());  // the client's thread, before
  auto out = s->run({}, {"small"});
  REQUIRE(out.ok());
  CHECK(out->at(0).scalar_value<float>() == 0.0f);
  std::vector<float> ones(1 << 20, 1e-20f);
  out = s->run({{"many", tensor::from_vector<float>(ones, {1 << 20})}}, {"products"});
  REQUIRE(out.ok());
  const float* p = out->at(0).data<float>();
  std::int64_t nonzero = 0;
  for (std::int64_t i = 0; i < out->at(0).num_elements(); ++i) nonzero += p[i] != 0.0f;
  CHECK(nonzero == 0);
  REQUIRE(s->run({}, {}, {init.node}).ok());
  REQUIRE(s->run({}, {}, {train_op->node}).ok());
  out = s->run({}, {w.value.name()});
  REQUIRE(out.ok());
  CHECK(out->at(0).equals(tensor::from_vector<float>({0, 0, 0, 0}, {4})));
  CHECK_FALSE(flush_denormals::active());  // and after: its own mode
}
