// Initializers and layers (graph/initializers.h, graph/nn.h) run through a session, with
// no variable kernels involved: variables' reads are fed (a fed tensor cuts its edge, so
// the VarHandleOp never runs). Initializer statistics and seeding, dense, conv2d, pools,
// batch_norm (training and inference, and the moving-average deltas), dropout, the LSTM
// against a float64 reference, and embedding_lookup's id partitioning ("mod" and "div").
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "actors/session.h"
#include "tests/actors/session_fixture.h"
#include "graph/gradients.h"
#include "graph/initializers.h"
#include "graph/nn.h"
#include "graph/ops.h"
#include "graph/train.h"

using namespace troupe;
using troupe::testing::make_session;
using graph::output;
using graph::scope;

namespace {

std::vector<tensor> run(const scope& root, const actors::feed_list& feeds, const std::vector<output>& fetches) {
  auto session = make_session(root);
  std::vector<std::string> names;
  for (const auto& f : fetches) names.push_back(f.name());
  auto out = session->run(feeds, names);
  if (!out.ok()) FAIL(out.error());
  return std::move(*out);
}

std::vector<double> values(const tensor& t) {
  std::vector<double> out;
  visit_dtype<float_types>(t.type(), [&]<class T>() {
    for (T v : t.flat<T>()) out.push_back(static_cast<double>(v));
  });
  return out;
}

tensor random_tensor(const tensor_shape& shape, std::mt19937& rng, double lo = -1, double hi = 1) {
  tensor t(dtype::float64, shape);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (double& v : t.flat<double>()) v = dist(rng);
  return t;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double stddev_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tolerance = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= tolerance * std::max(1.0, std::abs(want[i])))) {
      FAIL("[" << i << "]: got " << got[i] << ", want " << want[i]);
    }
  }
}

std::string read_of(const std::string& variable) { return variable + "/Read/ReadVariableOp"; }

}  // namespace

TEST_CASE("initializers: seeded values with the documented distributions", "[train_layers]") {
  auto build = [](const scope& root) {
    return std::vector<output>{
        init::glorot_uniform(root, {200, 300}, dtype::float32, 3),
        init::glorot_uniform(root, {200, 300}, dtype::float32, 3),
        init::glorot_uniform(root, {200, 300}, dtype::float32, 4),
        init::he_normal(root, {100, 400}, dtype::float64, 5),
        init::truncated_normal(root, {20000}, dtype::float32, 0.5, 6),
        init::random_normal(root, {20000}, dtype::float64, 2.0, 7),
        init::zeros(root, {3, 2}, dtype::int64),
        init::constant(root, {2}, dtype::float32, 1.5),
    };
  };
  auto root = scope::new_root();
  auto outs = build(root);
  auto got = run(root, {}, outs);

  const double limit = std::sqrt(6.0 / 500.0);
  auto glorot = values(got[0]);
  for (double v : glorot) REQUIRE(std::abs(v) <= limit);
  CHECK(std::abs(mean_of(glorot)) < 0.01 * limit);
  CHECK(stddev_of(glorot) == Approx(limit / std::sqrt(3.0)).epsilon(0.02));
  CHECK(got[0].equals(got[1]));        // same seed, same values
  CHECK_FALSE(got[0].equals(got[2]));  // another seed

  const double he_stddev = std::sqrt(2.0 / 100.0);
  auto he = values(got[3]);
  for (double v : he) REQUIRE(std::abs(v) <= 2 * he_stddev / 0.87962566103423978 + 1e-12);
  CHECK(stddev_of(he) == Approx(he_stddev).epsilon(0.03));

  for (double v : values(got[4])) REQUIRE(std::abs(v) <= 1.0 + 1e-6);
  CHECK(stddev_of(values(got[5])) == Approx(2.0).epsilon(0.03));
  CHECK(got[6].equals(tensor::zeros(dtype::int64, {3, 2})));
  CHECK(got[7].equals(tensor::from_vector<float>({1.5f, 1.5f})));

  // A graph built again gives the same values.
  auto again = scope::new_root();
  auto again_out = run(again, {}, build(again));
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i].equals(again_out[i]));
}

TEST_CASE("dense, conv2d and pools compute what they say", "[train_layers]") {
  std::mt19937 rng(21);
  auto root = scope::new_root();
  graph::variable_collection vars;
  output x = ops::placeholder(root.with_name("x"), dtype::float64, {-1, 3});
  output y = nn::dense(root, vars, x, 4, {.activation = ops::relu});
  output images = ops::placeholder(root.with_name("images"), dtype::float64, {1, 2, 2, 2});
  output c = nn::conv2d(root, vars, images, 2, {.kernel_height = 1, .kernel_width = 1});
  output mp = nn::max_pool(root, c);
  output ap = nn::avg_pool(root, c);
  REQUIRE(root.ok());

  tensor xv = random_tensor({2, 3}, rng), w = random_tensor({3, 4}, rng), b = random_tensor({4}, rng);
  tensor iv = random_tensor({1, 2, 2, 2}, rng);
  tensor k = tensor::from_vector<double>({2, 0, 0, 3}, {1, 1, 2, 2});  // channel 0 x2, channel 1 x3
  tensor cb = tensor::from_vector<double>({1, -1});
  auto got = run(root,
                 {{"x", xv}, {read_of("dense/kernel"), w}, {read_of("dense/bias"), b}, {"images", iv},
                  {read_of("conv2d/kernel"), k}, {read_of("conv2d/bias"), cb}},
                 {y, c, mp, ap});
  std::vector<double> want_y;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      double s = b.data<double>()[j];
      for (int q = 0; q < 3; ++q) s += xv.data<double>()[i * 3 + q] * w.data<double>()[q * 4 + j];
      want_y.push_back(std::max(0.0, s));
    }
  }
  check_close(values(got[0]), want_y);
  std::vector<double> want_c;
  const double* in = iv.data<double>();
  for (int p = 0; p < 4; ++p) {
    want_c.push_back(2 * in[p * 2] + 1);
    want_c.push_back(3 * in[p * 2 + 1] - 1);
  }
  check_close(values(got[1]), want_c);
  for (int ch = 0; ch < 2; ++ch) {
    double mx = -1e9, sum = 0;
    for (int p = 0; p < 4; ++p) {
      mx = std::max(mx, want_c[static_cast<std::size_t>(p * 2 + ch)]);
      sum += want_c[static_cast<std::size_t>(p * 2 + ch)];
    }
    CHECK(values(got[2])[static_cast<std::size_t>(ch)] == Approx(mx));
    CHECK(values(got[3])[static_cast<std::size_t>(ch)] == Approx(sum / 4));
  }
}

TEST_CASE("batch_norm: batch statistics in training, moving ones in inference", "[train_layers]") {
  std::mt19937 rng(5);
  const double eps = 1e-3, momentum = 0.9;
  tensor xv = random_tensor({6, 3}, rng, -2, 3);
  tensor gamma = random_tensor({3}, rng, 0.5, 2), beta = random_tensor({3}, rng);
  tensor mm = random_tensor({3}, rng), mv = random_tensor({3}, rng, 0.5, 2);
  const double* xd = xv.data<double>();
  std::vector<double> mean(3, 0), var(3, 0);
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 6; ++i) mean[c] += xd[i * 3 + c] / 6;
    for (int i = 0; i < 6; ++i) var[c] += (xd[i * 3 + c] - mean[c]) * (xd[i * 3 + c] - mean[c]) / 6;
  }
  for (bool training : {true, false}) {
    INFO((training ? "training" : "inference"));
    auto root = scope::new_root();
    graph::variable_collection vars;
    output x = ops::placeholder(root.with_name("x"), dtype::float64, {6, 3});
    output y = nn::batch_norm(root, vars, x, training, {.momentum = momentum, .epsilon = eps});
    REQUIRE(root.ok());
    std::vector<output> fetches{y};
    for (const auto& op : vars.update_ops) {
      const graph::node& n = *root.current_graph().find(op.node);
      fetches.push_back(graph::output_of(*root.current_graph().find(n.def.input(1)), 0));
    }
    auto got = run(root,
                   {{"x", xv}, {read_of("batch_norm/gamma"), gamma}, {read_of("batch_norm/beta"), beta},
                    {read_of("batch_norm/moving_mean"), mm}, {read_of("batch_norm/moving_variance"), mv}},
                   fetches);
    std::vector<double> want;
    for (int i = 0; i < 6; ++i) {
      for (int c = 0; c < 3; ++c) {
        double m = training ? mean[c] : mm.data<double>()[c];
        double v = training ? var[c] : mv.data<double>()[c];
        want.push_back((xd[i * 3 + c] - m) / std::sqrt(v + eps) * gamma.data<double>()[c] + beta.data<double>()[c]);
      }
    }
    check_close(values(got[0]), want, 1e-9);
    if (!training) {
      CHECK(got.size() == 1);
      continue;
    }
    REQUIRE(got.size() == 3);
    // moving -= (moving - batch) * (1 - momentum); the variance is the unbiased one.
    std::vector<double> mean_delta, var_delta;
    for (int c = 0; c < 3; ++c) {
      mean_delta.push_back((mm.data<double>()[c] - mean[c]) * (1 - momentum));
      var_delta.push_back((mv.data<double>()[c] - var[c] * 6 / 5) * (1 - momentum));
    }
    check_close(values(got[1]), mean_delta, 1e-9);
    check_close(values(got[2]), var_delta, 1e-9);
  }
}

TEST_CASE("dropout keeps 1 - rate of the elements, scaled, reproducibly", "[train_layers]") {
  auto build = [](const scope& root) {
    output x = ops::constant(root, tensor::from_vector<double>(std::vector<double>(10000, 1.0), {100, 100}));
    return std::vector<output>{nn::dropout(root, x, 0.3, 17, true), nn::dropout(root, x, 0.3, 17, false)};
  };
  auto root = scope::new_root();
  auto got = run(root, {}, build(root));
  int kept = 0;
  for (double v : values(got[0])) {
    if (v != 0) {
      ++kept;
      REQUIRE(v == Approx(1 / 0.7));
    }
  }
  CHECK(kept == Approx(7000).margin(250));
  for (double v : values(got[1])) REQUIRE(v == 1.0);
  auto again = scope::new_root();
  CHECK(run(again, {}, build(again))[0].equals(got[0]));
}

namespace {

void check_lstm_against_reference(bool fused) {
  INFO((fused ? "fused" : "unrolled"));
  std::mt19937 rng(8);
  const int batch = 2, input_size = 2, units = 3, steps = 3;
  auto root = scope::new_root();
  graph::variable_collection vars;
  std::vector<output> inputs;
  actors::feed_list feeds;
  std::vector<tensor> xs;
  for (int t = 0; t < steps; ++t) {
    std::string name = "x" + std::to_string(t);
    inputs.push_back(ops::placeholder(root.with_name(name), dtype::float64, {batch, input_size}));
    xs.push_back(random_tensor({batch, input_size}, rng));
    feeds.emplace_back(name, xs.back());
  }
  nn::lstm_result r = nn::lstm(root, vars, inputs, units, {.forget_bias = 1.0, .fused = fused});
  REQUIRE(root.ok());
  tensor kernel = random_tensor({input_size + units, 4 * units}, rng);
  tensor bias = random_tensor({4 * units}, rng);
  feeds.emplace_back(read_of("lstm/kernel"), kernel);
  feeds.emplace_back(read_of("lstm/bias"), bias);
  std::vector<output> fetches = r.outputs;
  fetches.push_back(r.final_state.c);
  fetches.push_back(r.final_state.h);
  auto got = run(root, feeds, fetches);

  auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  std::vector<double> c(batch * units, 0), h(batch * units, 0);
  for (int t = 0; t < steps; ++t) {
    std::vector<double> nc(c.size()), nh(h.size());
    for (int b = 0; b < batch; ++b) {
      std::vector<double> xh;
      for (int q = 0; q < input_size; ++q) xh.push_back(xs[t].data<double>()[b * input_size + q]);
      for (int q = 0; q < units; ++q) xh.push_back(h[static_cast<std::size_t>(b * units + q)]);
      std::vector<double> gates(4 * units);
      for (int g = 0; g < 4 * units; ++g) {
        double s = bias.data<double>()[g];
        for (int q = 0; q < input_size + units; ++q) s += xh[static_cast<std::size_t>(q)] * kernel.data<double>()[q * 4 * units + g];
        gates[static_cast<std::size_t>(g)] = s;
      }
      for (int u = 0; u < units; ++u) {
        double i = gates[u], j = gates[units + u], f = gates[2 * units + u], o = gates[3 * units + u];
        auto k = static_cast<std::size_t>(b * units + u);
        nc[k] = c[k] * sigmoid(f + 1.0) + sigmoid(i) * std::tanh(j);
        nh[k] = std::tanh(nc[k]) * sigmoid(o);
      }
    }
    c = nc;
    h = nh;
    INFO("step " << t);
    check_close(values(got[static_cast<std::size_t>(t)]), h, 1e-12);
  }
  check_close(values(got[steps]), c, 1e-12);
  check_close(values(got[steps + 1]), h, 1e-12);
}

}  // namespace

TEST_CASE("lstm, unrolled and fused, matches a float64 reference of BasicLSTMCell", "[train_layers]") {
  check_lstm_against_reference(false);
  check_lstm_against_reference(true);
}

// The fused layer's gradient (one BlockLSTMGrad) against the unrolled cells' (TensorFlow's
// gradients of each op, summed over the steps), for the weights, the bias and every input.
TEST_CASE("fused_lstm's gradients equal the unrolled lstm's", "[train_layers]") {
  std::mt19937 rng(9);
  const int batch = 3, input_size = 4, units = 5, steps = 4;
  std::vector<tensor> xs;
  for (int t = 0; t < steps; ++t) xs.push_back(random_tensor({batch, input_size}, rng));
  tensor kernel = random_tensor({input_size + units, 4 * units}, rng);
  tensor bias = random_tensor({4 * units}, rng);
  std::vector<tensor> weights_of_h;  // d loss / d h_t, one per step
  for (int t = 0; t < steps; ++t) weights_of_h.push_back(random_tensor({batch, units}, rng));
  std::vector<std::vector<tensor>> results;
  for (bool fused : {false, true}) {
    auto root = scope::new_root();
    graph::variable_collection vars;
    std::vector<output> inputs;
    actors::feed_list feeds;
    for (int t = 0; t < steps; ++t) {
      std::string name = "x" + std::to_string(t);
      inputs.push_back(ops::placeholder(root.with_name(name), dtype::float64, {batch, input_size}));
      feeds.emplace_back(name, xs[static_cast<std::size_t>(t)]);
    }
    nn::lstm_result r = nn::lstm(root, vars, inputs, units, {.forget_bias = 0.5, .fused = fused});
    std::vector<output> terms;
    for (int t = 0; t < steps; ++t) {
      output w = ops::constant(root, weights_of_h[static_cast<std::size_t>(t)]);
      terms.push_back(ops::sum(root, ops::mul(root, r.outputs[static_cast<std::size_t>(t)], w),
                               ops::constant(root, tensor::from_vector<std::int32_t>({0, 1}))));
    }
    output loss = ops::add(root, ops::add_n(root, terms), ops::sum(root, r.final_state.c, ops::constant(root, tensor::from_vector<std::int32_t>({0, 1}))));
    std::vector<output> xs_of_grad = {r.weights.kernel.value, r.weights.bias.value};
    xs_of_grad.insert(xs_of_grad.end(), inputs.begin(), inputs.end());
    auto grads = graph::add_gradients(root, {loss}, xs_of_grad);
    REQUIRE(grads.ok());
    REQUIRE(root.ok());
    feeds.emplace_back(read_of("lstm/kernel"), kernel);
    feeds.emplace_back(read_of("lstm/bias"), bias);
    results.push_back(run(root, feeds, *grads));
  }
  REQUIRE(results[0].size() == results[1].size());
  for (std::size_t k = 0; k < results[0].size(); ++k) {
    INFO("gradient " << k << " (0: kernel, 1: bias, then the inputs)");
    check_close(values(results[1][k]), values(results[0][k]), 1e-12);
  }
}

TEST_CASE("embedding_lookup partitions ids as TensorFlow's strategies do", "[train_layers]") {
  // 10 rows over 3 shards: 4, 3, 3 rows.
  struct expectation {
    std::string strategy;
    std::vector<std::vector<std::int64_t>> rows_per_shard;
  };
  for (const auto& e : std::vector<expectation>{{"mod", {{0, 1, 2, 3}, {0, 1, 2}, {0, 1, 2}}},
                                                {"div", {{0, 1, 2, 3}, {0, 1, 2}, {0, 1, 2}}}}) {
    INFO(e.strategy);
    auto root = scope::new_root();
    graph::variable_collection vars;
    auto shards = nn::make_embedding(root, vars, 10, 2, 3, dtype::float32);
    output ids = ops::placeholder(root.with_name("ids"), dtype::int64);
    output emb = nn::embedding_lookup(root, shards, ids, e.strategy);
    REQUIRE(root.ok());
    std::vector<output> parts;
    for (int i = 0; i < 3; ++i) parts.push_back(graph::output{"embedding_lookup/DynamicPartition", i, dtype::int64, {}});
    std::vector<output> positions;
    for (int i = 0; i < 3; ++i) positions.push_back(graph::output{"embedding_lookup/DynamicPartition_1", i, dtype::int32, {}});
    std::vector<std::int64_t> all(10);
    for (int i = 0; i < 10; ++i) all[static_cast<std::size_t>(i)] = i;
    std::vector<output> fetches = parts;
    fetches.insert(fetches.end(), positions.begin(), positions.end());
    auto got = run(root, {{"ids", tensor::from_vector(all, {2, 5})}}, fetches);
    for (int i = 0; i < 3; ++i) {
      INFO("shard " << i);
      const auto& want = e.rows_per_shard[static_cast<std::size_t>(i)];
      CHECK(got[static_cast<std::size_t>(i)].equals(tensor::from_vector(want)));
      // Which ids went there: mod: id % 3 == i; div: a contiguous range.
      std::vector<std::int32_t> where;
      for (int id = 0; id < 10; ++id) {
        bool here = e.strategy == "mod" ? id % 3 == i : (id < 4 ? 0 : id < 7 ? 1 : 2) == i;
        if (here) where.push_back(id);
      }
      CHECK(got[static_cast<std::size_t>(3 + i)].equals(tensor::from_vector(where)));
    }
  }
}

// The fused dense-layer update (TroupeApplyGradientDescentMatMul) trains as the unfused
// one does: three steps of a two-layer network in float64, every variable compared.
TEST_CASE("fuse_matmul_updates trains to the unfused values", "[train_layers]") {
  std::mt19937 rng(11);
  const tensor x = random_tensor({8, 5}, rng);
  std::vector<std::vector<tensor>> finals;
  for (bool fuse : {false, true}) {
    auto root = scope::new_root();
    graph::variable_collection vars;
    output in = ops::placeholder(root.with_name("x"), dtype::float64, {8, 5});
    output h = nn::dense(root, vars, in, 4, {.activation = ops::tanh, .seed = 3, .name = "first"});
    output y = nn::dense(root, vars, h, 3, {.seed = 4, .name = "second"});
    output loss = ops::mean(root, ops::square(root, y), ops::constant(root, tensor::from_vector<std::int32_t>({0, 1})));
    train::optimizer sgd = train::gradient_descent(0.3);
    sgd.fuse_matmul_updates = fuse;
    auto train_op = train::minimize(root, sgd, loss, vars);
    if (!train_op.ok()) FAIL(train_op.error());
    int fused = 0;
    const graph::graph& g = root.current_graph();
    for (int id = 0; id < g.num_nodes(); ++id) fused += g.get(id).op_name() == "TroupeApplyGradientDescentMatMul";
    CHECK(fused == (fuse ? 2 : 0));
    graph::operation init = graph::global_variables_initializer(root, vars);
    auto session = make_session(root);
    REQUIRE(session->run({}, {}, {init.node}).ok());
    for (int step = 0; step < 3; ++step) REQUIRE(session->run({{"x", x}}, {}, std::vector<std::string>{train_op->node}).ok());
    std::vector<std::string> reads;
    for (const char* v : {"first/kernel", "first/bias", "second/kernel", "second/bias"}) reads.push_back(read_of(v));
    auto got = session->run({}, reads);
    REQUIRE(got.ok());
    finals.push_back(*got);
  }
  for (std::size_t i = 0; i < finals[0].size(); ++i) {
    INFO("variable " << i);
    check_close(values(finals[1][i]), values(finals[0][i]), 1e-12);
  }
}
