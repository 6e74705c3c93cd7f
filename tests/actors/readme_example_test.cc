// The README's training example, as written there, builds and trains.
#include <catch2/catch.hpp>

#include <random>

#include "actors/cluster.h"
#include "actors/session.h"
#include "graph/nn.h"
#include "graph/ops.h"
#include "graph/train.h"

using namespace troupe;

TEST_CASE("the README's training example runs and its loss falls") {
  auto spec = placement::cluster_spec::from_task_counts({{"ps", 1}, {"worker", 1}});
  auto cluster = actors::cluster::create({.spec = *spec});
  REQUIRE(cluster.ok());

  auto root = graph::scope::new_root();
  graph::variable_collection vars;
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 784});
  auto y = ops::placeholder(root.with_name("y"), dtype::int32, {-1});
  auto logits = nn::dense(root.with_device("/job:ps/task:0"), vars, x, 10);  // variables on the PS
  auto xent = ops::sparse_softmax_cross_entropy_with_logits(root, logits, y);
  auto loss = ops::mean(root.with_name("loss"), xent.out(0), ops::scalar<int32_t>(root, 0));
  auto train_op = train::minimize(root, train::adam(1e-3), loss, vars);       // result<operation>
  auto init = graph::global_variables_initializer(root, vars);

  actors::session_options options;
  options.cluster = *cluster;
  options.default_device = "/job:worker/task:0";
  auto s = actors::session::create(*root.to_graph(), options);
  REQUIRE(s.ok());
  REQUIRE((*s)->run({}, {}, {init.node}).ok());

  // A learnable batch: the label is which tenth of the image is brightest.
  tensor images(dtype::float32, {64, 784});
  tensor labels(dtype::int32, {64});
  std::mt19937 rng(42);
  auto px = images.flat<float>();
  for (auto& v : px) v = static_cast<float>(rng() % 100) / 1000.0f;
  for (int i = 0; i < 64; ++i) {
    int label = i % 10;
    labels.flat<std::int32_t>()[i] = label;
    for (int j = label * 78; j < label * 78 + 78; ++j) px[static_cast<std::size_t>(i * 784 + j)] += 1.0f;
  }
  float first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    auto r = (*s)->run({{"x", images}, {"y", labels}}, {"loss"}, {train_op->node});
    if (!r.ok()) FAIL(r.error().to_string());
    (step == 0 ? first : last) = r->at(0).scalar_value<float>();
  }
  CHECK(last < 0.5f * first);
}
