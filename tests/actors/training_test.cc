// Small models learn synthetic tasks through a session with real variables and plain
// gradient descent (graph/train.h): a CNN (conv2d -> relu -> max_pool -> dense) telling
// apart short strokes by their direction, and an LSTM deciding whether a sequence of
// +-1 holds more +1 than -1. Each loss must fall well below where it starts, and the
// trained model must classify held-out examples. Fixed seeds; each case takes a few
// seconds (the time is printed).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "actors/session.h"
#include "tests/actors/session_fixture.h"
#include "graph/nn.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "graph/variables.h"

using namespace troupe;
using troupe::testing::make_session;
using graph::output;
using graph::scope;

namespace {

output axes(const scope& s, std::vector<std::int32_t> values) {
  return ops::constant(s, tensor::from_vector(values));
}

struct labelled {
  tensor x;
  tensor labels;  // int32 [n]
};

// What a classifier graph exposes to the training loop.
struct classifier {
  scope root = scope::new_root();
  graph::variable_collection vars;
  output loss;      // mean cross-entropy
  output accuracy;  // fraction of argmax(logits) == labels
};

void finish_classifier(classifier& c, const output& logits, const output& labels) {
  const scope& root = c.root;
  output xent = ops::sparse_softmax_cross_entropy_with_logits(root, logits, labels).out(0);
  c.loss = ops::mean(root.with_name("loss"), xent, axes(root, {0}));
  output predicted = ops::argmax(root, logits, ops::scalar<std::int32_t>(root, 1), dtype::int32);
  c.accuracy = ops::mean(root.with_name("accuracy"), ops::cast(root, ops::equal(root, predicted, labels), dtype::float32),
                         axes(root, {0}));
}

struct training_outcome {
  double first_loss = 0;
  double last_loss = 0;
  double test_accuracy = 0;
  double seconds = 0;
};

// Runs `steps` of gradient descent on the training set (one full batch per step), then
// measures the loss on it and the accuracy on the test set.
training_outcome run_training(classifier& c, double learning_rate, int steps, const labelled& training,
                       const labelled& test) {
  auto start = std::chrono::steady_clock::now();
  auto train_op = train::minimize(c.root, train::gradient_descent(learning_rate), c.loss, c.vars);
  if (!train_op.ok()) FAIL(train_op.error());
  auto init = graph::global_variables_initializer(c.root, c.vars);
  auto session = make_session(c.root);
  REQUIRE(session->run({}, {}, {init.node}).ok());
  actors::feed_list feeds{{"x", training.x}, {"labels", training.labels}};
  training_outcome outcome;
  for (int step = 0; step < steps; ++step) {
    auto r = session->run(feeds, step == 0 ? std::vector<std::string>{c.loss.name()} : std::vector<std::string>{},
                          {train_op->node});
    if (!r.ok()) FAIL(r.error());
    if (step == 0) outcome.first_loss = r->at(0).scalar_value<float>();  // before the update
  }
  auto last = session->run(feeds, {c.loss.name()});
  REQUIRE(last.ok());
  outcome.last_loss = last->at(0).scalar_value<float>();
  auto accuracy = session->run({{"x", test.x}, {"labels", test.labels}}, {c.accuracy.name()});
  REQUIRE(accuracy.ok());
  outcome.test_accuracy = accuracy->at(0).scalar_value<float>();
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return outcome;
}

// 8x8 images, each a stroke of three pixels in one of four directions (class 0: -,
// 1: |, 2: \, 3: /) at a random place, plus Gaussian noise.
labelled make_strokes(int n, std::mt19937& rng) {
  constexpr int size = 8;
  const int dy[4] = {0, 1, 1, 1};
  const int dx[4] = {1, 0, 1, -1};
  labelled data{tensor::zeros(dtype::float32, {n, size, size, 1}), tensor(dtype::int32, {n})};
  std::normal_distribution<float> noise(0.0f, 0.1f);
  std::uniform_int_distribution<int> kind(0, 3), place(0, size - 3);
  auto pixels = data.x.flat<float>();
  for (float& p : pixels) p = noise(rng);
  for (int i = 0; i < n; ++i) {
    int k = kind(rng);
    data.labels.flat<std::int32_t>()[static_cast<std::size_t>(i)] = k;
    int row = place(rng), col = place(rng) + (dx[k] < 0 ? 2 : 0);
    for (int step = 0; step < 3; ++step) {
      int r = row + step * dy[k], c = col + step * dx[k];
      pixels[static_cast<std::size_t>((i * size + r) * size + c)] += 1.0f;
    }
  }
  return data;
}

// Sequences of `length` values +-1 (x [n, length]); the label is 1 when +1 is the majority.
labelled make_majority(int n, int length, std::mt19937& rng) {
  labelled data{tensor(dtype::float32, {n, length}), tensor(dtype::int32, {n})};
  std::bernoulli_distribution coin(0.5);
  for (int i = 0; i < n; ++i) {
    int total = 0;
    for (int t = 0; t < length; ++t) {
      int v = coin(rng) ? 1 : -1;
      total += v;
      data.x.flat<float>()[static_cast<std::size_t>(i * length + t)] = static_cast<float>(v);
    }
    data.labels.flat<std::int32_t>()[static_cast<std::size_t>(i)] = total > 0 ? 1 : 0;
  }
  return data;
}

}  // namespace

TEST_CASE("a small CNN learns the direction of strokes", "[training]") {
  std::mt19937 rng(101);
  INFO("seed std::mt19937(101)");
  labelled training = make_strokes(128, rng);
  labelled test = make_strokes(128, rng);

  classifier c;
  const scope& root = c.root;
  output x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 8, 8, 1});
  output labels = ops::placeholder(root.with_name("labels"), dtype::int32, {-1});
  output h = nn::conv2d(root, c.vars, x, 8, {.activation = ops::relu, .seed = 1, .name = "conv"});
  h = nn::max_pool(root, h);  // [batch, 4, 4, 8]
  h = ops::reshape(root, h, axes(root, {-1, 4 * 4 * 8}));
  output logits = nn::dense(root, c.vars, h, 4, {.seed = 2, .name = "logits"});
  finish_classifier(c, logits, labels);
  REQUIRE(root.ok());

  training_outcome outcome = run_training(c, 0.2, 300, training, test);
  INFO("loss " << outcome.first_loss << " -> " << outcome.last_loss << ", test accuracy " << outcome.test_accuracy
               << ", " << outcome.seconds << " s");
  CHECK(outcome.first_loss > 1.0);  // about log(4) = 1.39 at the start
  CHECK(outcome.last_loss < 0.5 * outcome.first_loss);
  CHECK(outcome.test_accuracy > 0.9);
}

TEST_CASE("a small LSTM learns which sign is the majority of a sequence", "[training]") {
  const int length = 7;
  std::mt19937 rng(202);
  INFO("seed std::mt19937(202)");
  labelled training = make_majority(256, length, rng);
  labelled test = make_majority(256, length, rng);

  classifier c;
  const scope& root = c.root;
  output x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, length});
  output labels = ops::placeholder(root.with_name("labels"), dtype::int32, {-1});
  graph::operation steps = root.add("Split", {ops::scalar<std::int32_t>(root, 1), x},
                                    {{"num_split", graph::attr_value(length)}});
  std::vector<output> inputs;
  for (int t = 0; t < length; ++t) inputs.push_back(steps.out(t));  // [batch, 1] each
  nn::lstm_result lstm = nn::lstm(root, c.vars, inputs, 8, {.seed = 3});
  output logits = nn::dense(root, c.vars, lstm.final_state.h, 2, {.seed = 4, .name = "logits"});
  finish_classifier(c, logits, labels);
  REQUIRE(root.ok());

  training_outcome outcome = run_training(c, 1.0, 300, training, test);
  INFO("loss " << outcome.first_loss << " -> " << outcome.last_loss << ", test accuracy " << outcome.test_accuracy
               << ", " << outcome.seconds << " s");
  CHECK(outcome.first_loss > 0.6);  // about log(2) = 0.69 at the start
  CHECK(outcome.last_loss < 0.5 * outcome.first_loss);
  CHECK(outcome.test_accuracy > 0.9);
}
