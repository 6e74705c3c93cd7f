// End to end: minimize() trains small models through a session, with the variable kernels
// of actors/ (each optimizer fits a linear model; sparse gradient descent on a sharded
// embedding; the global step counts steps; batch_norm's moving averages move).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "actors/session.h"
#include "tests/actors/session_fixture.h"
#include "graph/initializers.h"
#include "graph/nn.h"
#include "graph/ops.h"
#include "graph/train.h"

using namespace troupe;
using troupe::testing::make_session;
using graph::output;
using graph::scope;

namespace {

}  // namespace

TEST_CASE("every optimizer fits a linear model", "[train_end_to_end]") {
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  tensor xv(dtype::float32, {64, 4}), yv(dtype::float32, {64, 1});
  const double w[4] = {1.5, -2.0, 0.5, 3.0};
  for (int i = 0; i < 64; ++i) {
    double y = 0.7;
    for (int j = 0; j < 4; ++j) {
      double x = normal(rng);
      xv.data<float>()[i * 4 + j] = static_cast<float>(x);
      y += w[j] * x;
    }
    yv.data<float>()[i] = static_cast<float>(y);
  }
  for (const auto& opt : {train::gradient_descent(0.1), train::momentum(0.05, 0.9), train::momentum(0.05, 0.9, true),
                          train::adagrad(0.5), train::adam(0.1), train::rms_prop(0.02, 0.9, 0.5)}) {
    INFO(opt.name() << " nesterov " << opt.use_nesterov);
    auto root = scope::new_root();
    graph::variable_collection vars;
    output x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 4});
    output y = ops::placeholder(root.with_name("y"), dtype::float32, {-1, 1});
    output pred = nn::dense(root, vars, x, 1);
    output loss = ops::mean(root, ops::square(root, ops::sub(root, pred, y)),
                            ops::constant(root, tensor::from_vector<std::int32_t>({0, 1})));
    auto step = train::make_global_step(root, vars);
    auto train_op = train::minimize(root, opt, loss, vars, step);
    REQUIRE(train_op.ok());
    auto init = graph::global_variables_initializer(root, vars);
    auto session = make_session(root);
    REQUIRE(session->run({}, {}, {init.node}).ok());
    actors::feed_list feeds{{"x", xv}, {"y", yv}};
    auto first = session->run(feeds, {loss.name()});
    if (!first.ok()) FAIL(first.error());
    for (int i = 0; i < 200; ++i) {
      auto r = session->run(feeds, {}, {train_op->node});
      if (!r.ok()) FAIL(r.error());
    }
    auto last = session->run(feeds, {loss.name(), step.value.name()});
    REQUIRE(last.ok());
    double l0 = (*first)[0].scalar_value<float>(), l1 = (*last)[0].scalar_value<float>();
    INFO("loss " << l0 << " -> " << l1);
    CHECK(l1 < 0.01 * l0);
    CHECK((*last)[1].scalar_value<std::int64_t>() == 200);
  }
}

TEST_CASE("a decayed learning rate: each step's rate is lr * rate^(step / decay_steps)", "[train_end_to_end]") {
  // loss = sum(v) has gradient 1 everywhere: each gradient-descent step takes exactly its
  // learning rate off every element, and each Adam step (m / sqrt(v) = 1 for a constant
  // gradient) its bias-corrected rate.
  for (const bool staircase : {false, true}) {
    for (const bool adam : {false, true}) {
      INFO("staircase " << staircase << " adam " << adam);
      auto root = scope::new_root();
      graph::variable_collection vars;
      auto v = graph::make_variable(root, "v", tensor_shape{3}, dtype::float32, init::constant_initializer(1.0));
      vars.add(v, true);
      output loss = ops::sum(root, v.value, ops::constant(root, tensor::from_vector<std::int32_t>({0})));
      auto step = train::make_global_step(root, vars);
      train::optimizer opt = adam ? train::adam(0.1) : train::gradient_descent(0.1);
      opt.decay_steps = 2;
      opt.decay_rate = 0.5;
      opt.staircase = staircase;
      auto train_op = train::minimize(root, opt, loss, vars, step);
      REQUIRE(train_op.ok());
      auto init = graph::global_variables_initializer(root, vars);
      auto session = make_session(root);
      REQUIRE(session->run({}, {}, {init.node}).ok());
      double expected = 1.0;
      for (int i = 0; i < 5; ++i) {
        REQUIRE(session->run({}, {}, {train_op->node}).ok());
        const double exponent = staircase ? std::floor(i / 2.0) : i / 2.0;
        double lr = 0.1 * std::pow(0.5, exponent);
        expected -= lr;
        auto r = session->run({}, {v.value.name()});
        REQUIRE(r.ok());
        INFO("step " << i);
        CHECK((*r)[0].flat<float>()[0] == Approx(expected).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("sparse gradient descent on a sharded embedding", "[train_end_to_end]") {
  for (const char* strategy : {"mod", "div"}) {
    INFO(strategy);
    auto root = scope::new_root();
    graph::variable_collection vars;
    auto shards = nn::make_embedding(root, vars, 10, 3, 3, dtype::float32);
    output ids = ops::placeholder(root.with_name("ids"), dtype::int64, {-1});
    output emb = nn::embedding_lookup(root, shards, ids, strategy);
    // Pull the looked-up rows towards 1.
    output loss = ops::sum(root, ops::square(root, ops::sub(root, emb, ops::scalar(root, 1.0f))),
                           ops::constant(root, tensor::from_vector<std::int32_t>({0, 1})));
    auto train_op = train::minimize(root, train::gradient_descent(0.1), loss, vars);
    REQUIRE(train_op.ok());
    auto init = graph::global_variables_initializer(root, vars);
    auto session = make_session(root);
    REQUIRE(session->run({}, {}, {init.node}).ok());
    tensor idv = tensor::from_vector<std::int64_t>({1, 5, 9, 5});
    std::vector<std::string> reads;
    for (const auto& s : shards) reads.push_back(s.value.name());
    auto before = session->run({}, reads);
    REQUIRE(before.ok());
    for (int i = 0; i < 50; ++i) REQUIRE(session->run({{"ids", idv}}, {}, {train_op->node}).ok());
    auto l = session->run({{"ids", idv}}, {loss.name()});
    REQUIRE(l.ok());
    CHECK((*l)[0].scalar_value<float>() < 1e-4f);
    // Rows never looked up did not move.
    auto after = session->run({}, reads);
    REQUIRE(after.ok());
    auto all_ids = session->run({{"ids", tensor::from_vector<std::int64_t>({0, 2, 3, 4, 6, 7, 8})}}, {emb.name()});
    REQUIRE(all_ids.ok());
    for (float v : (*all_ids)[0].flat<float>()) CHECK(std::abs(v - 1.0f) > 1e-3f);
  }
}
