// nn::sampled_softmax_loss through a session with real variables: the loss against a
// float64 reference built from the candidates the sampler drew in the same step (with and
// without accidental hits removed, num_true 1 and 2, float and double); the sampler
// advancing between steps and replaying for the same seed; the mean sampled loss over many
// steps against the full softmax loss on a small vocabulary; training with the sampled
// loss (sharded weights and sparse gradient descent, one variable and Adagrad) lowering
// the full softmax loss; errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "actors/session.h"
#include "tests/actors/session_fixture.h"
#include "graph/initializers.h"
#include "graph/nn.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "graph/variables.h"

using namespace troupe;
using troupe::testing::make_session;
using graph::output;
using graph::scope;
using graph::variable;

namespace {

std::vector<tensor> run(actors::session& s, const actors::feed_list& feeds, const std::vector<output>& fetches) {
  std::vector<std::string> names;
  for (const auto& f : fetches) names.push_back(f.name());
  auto out = s.run(feeds, names);
  if (!out.ok()) FAIL(out.error());
  return std::move(*out);
}

std::vector<double> as_doubles(const tensor& t) {
  std::vector<double> out;
  visit_dtype<float_types>(t.type(), [&]<class T>() {
    for (T v : t.flat<T>()) out.push_back(static_cast<double>(v));
  });
  return out;
}

tensor random_tensor(dtype type, const tensor_shape& shape, std::mt19937& rng, double stddev) {
  tensor t(type, shape);
  std::normal_distribution<double> normal(0.0, stddev);
  visit_dtype<float_types>(type, [&]<class T>() {
    for (T& v : t.flat<T>()) v = static_cast<T>(normal(rng));
  });
  return t;
}

// Labels drawn from the log-uniform law the sampler assumes (frequent classes first).
std::vector<std::int64_t> zipf_labels(std::int64_t count, std::int64_t classes, std::mt19937& rng) {
  std::vector<double> p;
  for (std::int64_t k = 0; k < classes; ++k) p.push_back(std::log((k + 2.0) / (k + 1.0)));
  std::discrete_distribution<std::int64_t> draw(p.begin(), p.end());
  std::vector<std::int64_t> labels(static_cast<std::size_t>(count));
  for (auto& l : labels) l = draw(rng);
  return labels;
}

// The full softmax cross-entropy of each row of x against W, b (row-major [C, D], [C]).
std::vector<double> full_softmax_loss(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>& b, const std::vector<std::int64_t>& labels,
                                      std::int64_t classes, std::int64_t dim) {
  std::vector<double> loss;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    std::vector<double> logits(static_cast<std::size_t>(classes));
    double top = -1e300;
    for (std::int64_t c = 0; c < classes; ++c) {
      double z = b[static_cast<std::size_t>(c)];
      for (std::int64_t d = 0; d < dim; ++d) z += x[i * dim + d] * w[static_cast<std::size_t>(c * dim + d)];
      logits[static_cast<std::size_t>(c)] = z;
      top = std::max(top, z);
    }
    double total = 0;
    for (double z : logits) total += std::exp(z - top);
    loss.push_back(top + std::log(total) - logits[static_cast<std::size_t>(labels[i])]);
  }
  return loss;
}

// A linear classifier with weights w [classes, dim] and biases b [classes] held in one
// variable each, from given values.
struct linear_model {
  scope root = scope::new_root();
  graph::variable_collection vars;
  variable w, b;
  output x, labels;
};

linear_model make_linear_model(const tensor& w, const tensor& b, std::int64_t num_true) {
  linear_model m;
  m.w = graph::make_variable(m.root, "w", w.shape(), w.type(), ops::constant(m.root, w));
  m.b = graph::make_variable(m.root, "b", b.shape(), b.type(), ops::constant(m.root, b));
  m.vars.add(m.w);
  m.vars.add(m.b);
  m.x = ops::placeholder(m.root.with_name("x"), w.type(), {-1, w.dim(1)});
  m.labels = ops::placeholder(m.root.with_name("labels"), dtype::int64, {-1, num_true});
  return m;
}

}  // namespace

TEST_CASE("the sampled loss is the softmax over the true and the drawn classes", "[sampled_softmax]") {
  const std::int64_t classes = 12, dim = 3, batch = 6;
  for (dtype type : {dtype::float32, dtype::float64}) {
    for (int num_true : {1, 2}) {
      for (bool remove_hits : {true, false}) {
        INFO(dtype_name(type) << ", num_true " << num_true << ", remove_accidental_hits " << remove_hits
                              << ", seed std::mt19937(23)");
        std::mt19937 rng(23);
        tensor w = random_tensor(type, {classes, dim}, rng, 1.0);
        tensor b = random_tensor(type, {classes}, rng, 0.5);
        tensor x = random_tensor(type, {batch, dim}, rng, 1.0);
        // Frequent classes as labels, so that the sampler hits them by accident often.
        std::vector<std::int64_t> label_values = zipf_labels(batch * num_true, 4, rng);
        tensor labels = tensor::from_vector(label_values, {batch, num_true});
        linear_model m = make_linear_model(w, b, num_true);
        const int num_sampled = 6;
        auto sampled = nn::compute_sampled_logits(m.root, {m.w}, {m.b}, m.labels, m.x, num_sampled, classes,
                                                  num_true, remove_hits, /*seed=*/7);
        // sampled_softmax_loss is this cross-entropy; building it here lets the step fetch
        // the candidates its loss was computed from.
        output loss = ops::softmax_cross_entropy_with_logits(m.root, sampled.logits, sampled.labels).out(0);
        REQUIRE(m.root.ok());
        CHECK(sampled.sampler.out(0).shape == partial_shape{num_sampled});
        CHECK(sampled.logits.shape == partial_shape{-1, num_true + num_sampled});
        auto init = graph::global_variables_initializer(m.root, m.vars);
        auto session = make_session(m.root);
        REQUIRE(session->run({}, {}, {init.node}).ok());
        auto wv = as_doubles(w), bv = as_doubles(b), xv = as_doubles(x);
        int hits_seen = 0;
        for (int step = 0; step < 5; ++step) {
          auto out = run(*session, {{"x", x}, {"labels", labels}},
                         {loss, sampled.sampler.out(0), sampled.sampler.out(1), sampled.sampler.out(2)});
          auto got = as_doubles(out[0]);
          auto candidates = out[1].flat<std::int64_t>();
          auto true_count = out[2].flat<float>();
          auto sampled_count = out[3].flat<float>();
          REQUIRE(std::set<std::int64_t>(candidates.begin(), candidates.end()).size() == candidates.size());
          auto logit = [&](std::int64_t row, std::int64_t c) {
            double z = bv[static_cast<std::size_t>(c)];
            for (std::int64_t d = 0; d < dim; ++d) z += xv[row * dim + d] * wv[static_cast<std::size_t>(c * dim + d)];
            return z;
          };
          for (std::int64_t i = 0; i < batch; ++i) {
            std::vector<double> true_logits, all_logits;
            std::set<std::int64_t> row_classes;
            for (int j = 0; j < num_true; ++j) {
              std::int64_t c = label_values[static_cast<std::size_t>(i * num_true + j)];
              row_classes.insert(c);
              true_logits.push_back(logit(i, c) - std::log(double{true_count[static_cast<std::size_t>(i * num_true + j)]}));
              all_logits.push_back(true_logits.back());
            }
            for (int k = 0; k < num_sampled; ++k) {
              std::int64_t c = candidates[static_cast<std::size_t>(k)];
              if (row_classes.count(c) != 0) {
                ++hits_seen;
                if (remove_hits) continue;
              }
              all_logits.push_back(logit(i, c) - std::log(double{sampled_count[static_cast<std::size_t>(k)]}));
            }
            double top = *std::max_element(all_logits.begin(), all_logits.end());
            double total = 0;
            for (double z : all_logits) total += std::exp(z - top);
            double lse = top + std::log(total);
            double expected = 0;
            for (double z : true_logits) expected += (lse - z) / num_true;
            INFO("step " << step << ", row " << i);
            CHECK(got[static_cast<std::size_t>(i)] == Approx(expected).epsilon(type == dtype::float32 ? 1e-4 : 1e-9));
          }
        }
        CHECK(hits_seen > 0);
      }
    }
  }
}

TEST_CASE("the sampler draws anew each step and replays for the same seed", "[sampled_softmax]") {
  auto build = [](std::int64_t seed) {
    auto root = scope::new_root();
    auto labels = ops::placeholder(root.with_name("labels"), dtype::int64, {-1, 1});
    root.with_name("sampler").add("LogUniformCandidateSampler", {labels},
                                  {{"num_true", graph::attr_value(1)}, {"num_sampled", graph::attr_value(8)},
                                   {"unique", graph::attr_value(true)}, {"range_max", graph::attr_value(1000)},
                                   {"seed", graph::attr_value(std::int64_t{1})}, {"seed2", graph::attr_value(seed)}});
    return make_session(root);
  };
  auto a = build(5), b = build(5), c = build(6);
  actors::feed_list feeds{{"labels", tensor::from_vector<std::int64_t>({3, 4}, {2, 1})}};
  std::vector<tensor> from_a, from_b, from_c;
  for (int step = 0; step < 3; ++step) {
    for (auto [session, sink] : {std::pair{a.get(), &from_a}, std::pair{b.get(), &from_b}, std::pair{c.get(), &from_c}}) {
      auto out = session->run(feeds, {"sampler"});
      REQUIRE(out.ok());
      sink->push_back(out->at(0));
    }
  }
  for (int step = 0; step < 3; ++step) {
    CHECK(from_a[static_cast<std::size_t>(step)].equals(from_b[static_cast<std::size_t>(step)]));
    CHECK_FALSE(from_a[static_cast<std::size_t>(step)].equals(from_c[static_cast<std::size_t>(step)]));
  }
  CHECK_FALSE(from_a[0].equals(from_a[1]));
  CHECK_FALSE(from_a[1].equals(from_a[2]));
}

TEST_CASE("averaged over many draws, the sampled loss follows the full softmax loss", "[sampled_softmax]") {
  // 20 classes. With 19 of them sampled nearly every class takes part and the mean sampled
  // loss is close to the full loss; with 5 it is a coarser, biased estimate that still
  // ranks the examples as the full loss does.
  const std::int64_t classes = 20, dim = 5, batch = 16;
  std::mt19937 rng(31);
  INFO("seed std::mt19937(31)");
  tensor w = random_tensor(dtype::float32, {classes, dim}, rng, 1.0);
  tensor b = random_tensor(dtype::float32, {classes}, rng, 0.5);
  tensor x = random_tensor(dtype::float32, {batch, dim}, rng, 1.0);
  std::vector<std::int64_t> label_values = zipf_labels(batch, classes, rng);
  tensor labels = tensor::from_vector(label_values, {batch, 1});
  std::vector<double> full = full_softmax_loss(as_doubles(x), as_doubles(w), as_doubles(b), label_values, classes, dim);

  for (int num_sampled : {19, 5}) {
    INFO("num_sampled " << num_sampled);
    linear_model m = make_linear_model(w, b, 1);
    output loss = nn::sampled_softmax_loss(m.root, {m.w}, {m.b}, m.labels, m.x, num_sampled, classes, 1, true,
                                           /*seed=*/num_sampled);
    auto init = graph::global_variables_initializer(m.root, m.vars);
    auto session = make_session(m.root);
    REQUIRE(session->run({}, {}, {init.node}).ok());
    const int steps = 400;
    std::vector<double> mean(static_cast<std::size_t>(batch), 0.0);
    for (int step = 0; step < steps; ++step) {
      auto got = as_doubles(run(*session, {{"x", x}, {"labels", labels}}, {loss})[0]);
      for (std::size_t i = 0; i < mean.size(); ++i) mean[i] += got[i] / steps;
    }
    double mean_full = 0, mean_sampled = 0;
    for (std::size_t i = 0; i < mean.size(); ++i) {
      mean_full += full[i] / batch;
      mean_sampled += mean[i] / batch;
    }
    double cov = 0, var_full = 0, var_sampled = 0, worst = 0;
    for (std::size_t i = 0; i < mean.size(); ++i) {
      cov += (full[i] - mean_full) * (mean[i] - mean_sampled);
      var_full += (full[i] - mean_full) * (full[i] - mean_full);
      var_sampled += (mean[i] - mean_sampled) * (mean[i] - mean_sampled);
      worst = std::max(worst, std::abs(mean[i] - full[i]));
    }
    double correlation = cov / std::sqrt(var_full * var_sampled);
    INFO("mean full loss " << mean_full << ", mean sampled loss " << mean_sampled << ", correlation "
                           << correlation << ", largest per-example gap " << worst);
    CHECK(correlation > (num_sampled == 19 ? 0.99 : 0.9));
    if (num_sampled == 19) {
      CHECK(std::abs(mean_sampled - mean_full) < 0.1 * mean_full);
      CHECK(worst < 0.3);
    } else {
      CHECK(mean_sampled < mean_full);  // fewer competitors: an underestimate, as TensorFlow says
      CHECK(mean_sampled > 0.3 * mean_full);
    }
  }
}

namespace {

struct classification_data {
  tensor x;       // [n, dim]
  tensor labels;  // [n, 1] int64
};

// Points around one random centre per class; labels log-uniform.
classification_data make_clusters(std::int64_t n, std::int64_t classes, std::int64_t dim, std::mt19937& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> centres(static_cast<std::size_t>(classes * dim));
  for (double& c : centres) c = normal(rng);
  std::vector<std::int64_t> labels = zipf_labels(n, classes, rng);
  classification_data data{tensor(dtype::float32, {n, dim}), tensor::from_vector(labels, {n, 1})};
  auto x = data.x.flat<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t d = 0; d < dim; ++d) {
      x[static_cast<std::size_t>(i * dim + d)] =
          static_cast<float>(centres[static_cast<std::size_t>(labels[static_cast<std::size_t>(i)] * dim + d)] +
                             0.3 * normal(rng));
    }
  }
  return data;
}

}  // namespace

TEST_CASE("training with the sampled loss lowers the full softmax loss", "[sampled_softmax]") {
  const std::int64_t classes = 50, dim = 10, n = 256;
  std::mt19937 rng(41);
  INFO("seed std::mt19937(41)");
  classification_data data = make_clusters(n, classes, dim, rng);

  struct setup {
    const char* name;
    int shards;
    train::optimizer optimizer;
  };
  for (const setup& c : {setup{"2 shards ('div'), sparse gradient descent", 2, train::gradient_descent(1.0)},
                         setup{"one variable, Adagrad", 1, train::adagrad(0.5)}}) {
    SECTION(c.name) {
      auto start = std::chrono::steady_clock::now();
      auto root = scope::new_root();
      graph::variable_collection vars;
      auto weights = nn::make_embedding(root, vars, classes, dim, c.shards, dtype::float32,
                                        {.initializer = init::truncated_normal_initializer(0.1), .seed = 3, .name = "w"});
      std::vector<variable> biases;
      for (int i = 0; i < c.shards; ++i) {
        biases.push_back(graph::make_variable(root.sub("b"), "part_" + std::to_string(i), {weights[static_cast<std::size_t>(i)].shape.dim(0)},
                                              dtype::float32, init::zeros_initializer()));
        vars.add(biases.back());
      }
      auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, dim});
      auto labels = ops::placeholder(root.with_name("labels"), dtype::int64, {-1, 1});
      output sampled = nn::sampled_softmax_loss(root, weights, biases, labels, x, 10, classes, 1, true, /*seed=*/1, "div");
      output loss = ops::mean(root, sampled, ops::constant(root, tensor::from_vector<std::int32_t>({0})));
      auto train_op = train::minimize(root, c.optimizer, loss, vars);
      if (!train_op.ok()) FAIL(train_op.error());
      // The full softmax loss, for evaluation: every class's row, in order.
      std::vector<std::int64_t> all(static_cast<std::size_t>(classes));
      std::iota(all.begin(), all.end(), 0);
      output all_ids = ops::constant(root, tensor::from_vector(all));
      output w_all = nn::embedding_lookup(root, weights, all_ids, "div", "all_weights");
      output b_all = nn::embedding_lookup(root, biases, all_ids, "div", "all_biases");
      output logits = ops::bias_add(root, ops::matmul(root, x, w_all, false, true), b_all);
      output flat_labels = ops::reshape(root, labels, ops::constant(root, tensor::from_vector<std::int32_t>({-1})));
      output full_loss = ops::mean(root, ops::sparse_softmax_cross_entropy_with_logits(root, logits, flat_labels).out(0),
                                   ops::constant(root, tensor::from_vector<std::int32_t>({0})));
      auto init = graph::global_variables_initializer(root, vars);
      auto session = make_session(root);
      REQUIRE(session->run({}, {}, {init.node}).ok());
      actors::feed_list feeds{{"x", data.x}, {"labels", data.labels}};
      double before = as_doubles(run(*session, feeds, {full_loss})[0])[0];
      for (int step = 0; step < 300; ++step) {
        auto r = session->run(feeds, {}, {train_op->node});
        if (!r.ok()) FAIL(r.error());
      }
      double after = as_doubles(run(*session, feeds, {full_loss})[0])[0];
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      INFO("full softmax loss " << before << " -> " << after << " in " << seconds << " s");
      CHECK(before > 3.0);  // about log(50) = 3.9 from small weights
      CHECK(after < 0.5 * before);
    }
  }
}

TEST_CASE("the sampled softmax example of doc/training.md builds", "[sampled_softmax]") {
  auto root = scope::new_root();
  graph::variable_collection vars;
  auto hidden = ops::placeholder(root.with_name("hidden"), dtype::float32, {-1, 256});
  auto labels = ops::placeholder(root.with_name("labels"), dtype::int64, {-1, 1});
  auto weights = nn::make_embedding(root, vars, /*vocab_size=*/50000, /*dim=*/256, /*num_shards=*/4,
                                    dtype::float32, {.name = "softmax_w"});
  std::vector<graph::variable> biases;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    biases.push_back(graph::make_variable(root.sub("softmax_b"), "part_" + std::to_string(i),
                                          {weights[i].shape.dim(0)}, dtype::float32,
                                          init::zeros_initializer()));
    vars.add(biases.back());
  }
  auto per_example = nn::sampled_softmax_loss(root, weights, biases, labels, hidden,
                                              /*num_sampled=*/64, /*num_classes=*/50000,
                                              /*num_true=*/1, /*remove_accidental_hits=*/true,
                                              /*seed=*/1, /*partition_strategy=*/"mod");
  auto loss = ops::mean(root, per_example, ops::scalar<int32_t>(root, 0));
  auto train_op = train::minimize(root, train::adagrad(0.1), loss, vars);
  if (!train_op.ok()) FAIL(train_op.error());
  CHECK(per_example.shape == partial_shape{-1});
  CHECK(vars.global.size() == 16);  // 4 + 4 shards, and an Adagrad accumulator for each
  REQUIRE(root.to_graph().ok());
}

TEST_CASE("sampled_softmax_loss reports bad arguments in the scope", "[sampled_softmax]") {
  auto check_error = [](auto build, const std::string& expected) {
    linear_model m = make_linear_model(tensor::zeros(dtype::float32, {10, 4}), tensor::zeros(dtype::float32, {10}), 1);
    output loss = build(m);
    CHECK_FALSE(loss.valid());
    REQUIRE_FALSE(m.root.ok());
    CHECK_THAT(m.root.get_status().message(), Catch::Contains("sampled_softmax_loss") && Catch::Contains(expected));
  };
  check_error([](linear_model& m) { return nn::sampled_softmax_loss(m.root, {m.w}, {m.b}, m.labels, m.x, 11, 10); },
              "num_sampled (11)");
  check_error([](linear_model& m) { return nn::sampled_softmax_loss(m.root, {m.w}, {m.b}, m.labels, m.x, 5, 12); },
              "num_classes is 12");
  check_error([](linear_model& m) {
    auto flat = ops::placeholder(m.root.with_name("flat_labels"), dtype::int64, {-1});
    return nn::sampled_softmax_loss(m.root, {m.w}, {m.b}, flat, m.x, 5, 10);
  }, "[batch, num_true = 1]");
  check_error([](linear_model& m) { return nn::sampled_softmax_loss(m.root, {m.w}, {m.w}, m.labels, m.x, 5, 10); },
              "biases shard 'w'");
  check_error([](linear_model& m) {
    auto x64 = ops::placeholder(m.root.with_name("x64"), dtype::float64, {-1, 4});
    return nn::sampled_softmax_loss(m.root, {m.w}, {m.b}, m.labels, x64, 5, 10);
  }, "weights shard 'w' is float");
}
