// graph::add_gradients: every registered gradient against central differences, computed
// through a session in float64 (one table row per op, each run with known and with unknown
// input shapes so both the static and the Shape-based paths are checked; random inputs
// unless a row fixes them); broadcasting, several consumers, unreachable xs, StopGradient,
// errors; a small MLP trained by feeding its weights back.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "actors/session.h"
#include "tests/actors/session_fixture.h"
#include "graph/gradients.h"
#include "graph/ops.h"

using namespace troupe;
using troupe::testing::make_session;
using graph::output;
using graph::scope;

namespace {

tensor random_tensor(const tensor_shape& shape, std::mt19937& rng, double lo, double hi) {
  tensor t(dtype::float64, shape);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (double& v : t.flat<double>()) v = dist(rng);
  return t;
}

output i32(const scope& s, std::vector<std::int32_t> values) {
  return ops::constant(s, tensor::from_vector(values));
}
output i32_scalar(const scope& s, std::int32_t value) { return ops::scalar(s, value); }

using build_fn = std::function<output(const scope&, const std::vector<output>&)>;

struct gradient_case {
  std::string name;
  std::vector<tensor_shape> shapes;
  build_fn build;
  double lo = -1.0;  // inputs are uniform in [lo, hi]...
  double hi = 1.0;
  std::vector<std::vector<double>> values = {};  // ...unless given here, one per shape
};

// Builds y = f(x...) on float64 placeholders, takes the gradient of sum(y * c) for a random
// c (fed as grad_ys) and compares it with central differences of the same sum.
void check_gradient(const gradient_case& c, bool known_shapes) {
  const unsigned seed = 7;
  INFO("case " << c.name << ", " << (known_shapes ? "known" : "unknown")
               << " input shapes, seed std::mt19937(" << seed << ")");
  std::mt19937 rng(seed);
  auto root = scope::new_root();
  std::vector<output> xs;
  std::vector<tensor> values;
  for (std::size_t i = 0; i < c.shapes.size(); ++i) {
    xs.push_back(ops::placeholder(root.with_name("x" + std::to_string(i)), dtype::float64,
                                  known_shapes ? partial_shape(c.shapes[i]) : partial_shape::unknown()));
    values.push_back(c.values.empty() ? random_tensor(c.shapes[i], rng, c.lo, c.hi)
                                      : tensor::from_vector(c.values[i], c.shapes[i]));
  }
  output y = c.build(root, xs);
  output weights = ops::placeholder(root.with_name("c"), dtype::float64);
  REQUIRE(root.ok());
  auto grads = graph::add_gradients(root, {y}, xs, {weights});
  if (!grads.ok()) FAIL(grads.error());
  REQUIRE(grads->size() == xs.size());
  REQUIRE(root.ok());
  auto session = make_session(root);

  auto feeds = [&](const std::vector<tensor>& inputs, const tensor* c_value) {
    actors::feed_list f;
    for (std::size_t i = 0; i < inputs.size(); ++i) f.emplace_back(xs[i].name(), inputs[i]);
    if (c_value != nullptr) f.emplace_back("c", *c_value);
    return f;
  };
  auto y0 = session->run(feeds(values, nullptr), {y.name()});
  REQUIRE(y0.ok());
  tensor c_value = random_tensor((*y0)[0].shape(), rng, -1.0, 1.0);
  auto weighted_sum = [&](const std::vector<tensor>& inputs) {
    auto out = session->run(feeds(inputs, nullptr), {y.name()});
    REQUIRE(out.ok());
    double total = 0;
    auto yv = (*out)[0].flat<double>();
    auto cv = c_value.flat<double>();
    for (std::size_t k = 0; k < yv.size(); ++k) total += yv[k] * cv[k];
    return total;
  };

  std::vector<std::string> fetches;
  for (const output& g : *grads) {
    REQUIRE(g.valid());
    fetches.push_back(g.name());
  }
  auto analytic = session->run(feeds(values, &c_value), fetches);
  if (!analytic.ok()) FAIL(analytic.error());

  const double eps = 1e-6;
  const double tolerance = 1e-5;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const tensor& got = (*analytic)[i];
    REQUIRE(got.type() == dtype::float64);
    REQUIRE(got.shape() == c.shapes[i]);
    for (std::int64_t k = 0; k < values[i].num_elements(); ++k) {
      std::vector<tensor> plus = values, minus = values;
      plus[i] = values[i].deep_copy();
      minus[i] = values[i].deep_copy();
      plus[i].data<double>()[k] += eps;
      minus[i].data<double>()[k] -= eps;
      double numeric = (weighted_sum(plus) - weighted_sum(minus)) / (2 * eps);
      double a = got.data<double>()[k];
      if (!(std::abs(a - numeric) <= tolerance * std::max(1.0, std::abs(numeric)))) {
        FAIL("d/dx" << i << "[" << k << "]: analytic " << a << ", numeric " << numeric
                    << " (inputs " << values[i].debug_string() << ")");
      }
    }
  }
}

// One row per gradient.
std::vector<gradient_case> gradient_cases() {
  using v = std::vector<output>;
  return {
      // Binary element-wise ops, with broadcasting.
      {"Add [2,3] + [3]", {{2, 3}, {3}}, [](const scope& s, const v& x) { return s.add("Add", {x[0], x[1]}).out(); }},
      {"AddV2 [2,1] + [1,3]", {{2, 1}, {1, 3}}, [](const scope& s, const v& x) { return ops::add(s, x[0], x[1]); }},
      {"Sub scalar - [2,3]", {{}, {2, 3}}, [](const scope& s, const v& x) { return ops::sub(s, x[0], x[1]); }},
      {"Sub [2,3] - [3]", {{2, 3}, {3}}, [](const scope& s, const v& x) { return ops::sub(s, x[0], x[1]); }},
      {"Mul [2,3] * [2,3]", {{2, 3}, {2, 3}}, [](const scope& s, const v& x) { return ops::mul(s, x[0], x[1]); }},
      {"Mul [2,1] * [1,3]", {{2, 1}, {1, 3}}, [](const scope& s, const v& x) { return ops::mul(s, x[0], x[1]); }},
      {"Mul [2,3] * scalar", {{2, 3}, {}}, [](const scope& s, const v& x) { return ops::mul(s, x[0], x[1]); }},
      {"RealDiv [2,3] / [3]", {{2, 3}, {3}}, [](const scope& s, const v& x) { return ops::div(s, x[0], x[1]); }, 0.5, 2.0},
      {"RealDiv scalar / [2,1]", {{}, {2, 1}}, [](const scope& s, const v& x) { return ops::div(s, x[0], x[1]); }, 0.5, 2.0},
      {"DivNoNan [2,3] / [3]", {{2, 3}, {3}}, [](const scope& s, const v& x) { return s.add("DivNoNan", {x[0], x[1]}).out(); }, 0.5, 2.0},
      {"Maximum [2,3], [3]", {{2, 3}, {3}}, [](const scope& s, const v& x) { return ops::maximum(s, x[0], x[1]); }},
      {"Minimum [2,1], [1,3]", {{2, 1}, {1, 3}}, [](const scope& s, const v& x) { return ops::minimum(s, x[0], x[1]); }},
      // Unary.
      {"Sin", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Sin", {x[0]}).out(); }},
      {"Cos", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Cos", {x[0]}).out(); }},
      {"Erf", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Erf", {x[0]}).out(); }},
      {"Expm1", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Expm1", {x[0]}).out(); }},
      {"Log1p", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Log1p", {x[0]}).out(); }, 0.5, 2.0},
      {"Softsign", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Softsign", {x[0]}).out(); }},
      {"Selu", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Selu", {x[0]}).out(); }},
      {"SquaredDifference [2,3], [3]", {{2, 3}, {3}}, [](const scope& s, const v& x) {
         return s.add("SquaredDifference", {x[0], x[1]}).out();
       }},
      {"Div [2,3] / [3]", {{2, 3}, {3}}, [](const scope& s, const v& x) { return s.add("Div", {x[0], x[1]}).out(); }, 0.5, 2.0},
      {"Mod [2,3] % [3]", {{2, 3}, {3}}, [](const scope& s, const v& x) {
         return s.add("Mod", {ops::mul(s, x[0], ops::scalar(s, 5.0)), x[1]}).out();
       }, 0.6, 0.9},
      {"Neg", {{2, 3}}, [](const scope& s, const v& x) { return ops::neg(s, x[0]); }},
      {"Abs", {{2, 3}}, [](const scope& s, const v& x) { return ops::abs(s, x[0]); }},
      {"Square", {{2, 3}}, [](const scope& s, const v& x) { return ops::square(s, x[0]); }},
      {"Sqrt", {{2, 3}}, [](const scope& s, const v& x) { return ops::sqrt(s, x[0]); }, 0.5, 2.0},
      {"Rsqrt", {{2, 3}}, [](const scope& s, const v& x) { return ops::rsqrt(s, x[0]); }, 0.5, 2.0},
      {"Exp", {{2, 3}}, [](const scope& s, const v& x) { return ops::exp(s, x[0]); }},
      {"Log", {{2, 3}}, [](const scope& s, const v& x) { return ops::log(s, x[0]); }, 0.5, 2.0},
      {"Tanh", {{2, 3}}, [](const scope& s, const v& x) { return ops::tanh(s, x[0]); }},
      {"Sigmoid", {{2, 3}}, [](const scope& s, const v& x) { return ops::sigmoid(s, x[0]); }},
      {"Relu", {{2, 3}}, [](const scope& s, const v& x) { return ops::relu(s, x[0]); }},
      {"Cast float64 -> float64", {{2, 3}}, [](const scope& s, const v& x) { return ops::cast(s, x[0], dtype::float64); }},
      {"Identity", {{2, 3}}, [](const scope& s, const v& x) { return ops::identity(s, x[0]); }},
      {"PlaceholderWithDefault", {{2, 3}}, [](const scope& s, const v& x) {
         return ops::square(s, ops::placeholder_with_default(s, x[0], partial_shape::unknown()));
       }},
      {"AddN", {{2, 2}, {2, 2}, {2, 2}}, [](const scope& s, const v& x) {
         return ops::add_n(s, {x[0], ops::mul(s, x[1], x[2]), x[0]});
       }},
      // Selection: the condition is a constant.
      {"Select", {{2, 3}, {2, 3}}, [](const scope& s, const v& x) {
         output c = ops::constant(s, tensor::from_vector<bool>({true, false, true, false, false, true}, {2, 3}));
         return s.add("Select", {c, x[0], x[1]}).out();
       }},
      {"SelectV2 [3] ? [2,3] : scalar", {{2, 3}, {}}, [](const scope& s, const v& x) {
         output c = ops::constant(s, tensor::from_vector<bool>({true, false, true}));
         return ops::select(s, c, x[0], x[1]);
       }},
      // Matrix products and the bias.
      {"MatMul", {{2, 3}, {3, 4}}, [](const scope& s, const v& x) { return ops::matmul(s, x[0], x[1]); }},
      {"MatMul transpose_a", {{3, 2}, {3, 4}}, [](const scope& s, const v& x) { return ops::matmul(s, x[0], x[1], true, false); }},
      {"MatMul transpose_b", {{2, 3}, {4, 3}}, [](const scope& s, const v& x) { return ops::matmul(s, x[0], x[1], false, true); }},
      {"MatMul transpose_a transpose_b", {{3, 2}, {4, 3}}, [](const scope& s, const v& x) { return ops::matmul(s, x[0], x[1], true, true); }},
      {"BatchMatMulV2", {{2, 2, 3}, {2, 3, 4}}, [](const scope& s, const v& x) { return ops::batch_matmul(s, x[0], x[1]); }},
      {"BatchMatMulV2 adj_x adj_y", {{2, 3, 2}, {2, 4, 3}}, [](const scope& s, const v& x) {
         return ops::batch_matmul(s, x[0], x[1], true, true);
       }},
      {"BatchMatMulV2 adj_y, x broadcast [3,2] x [2,1,4,2]", {{2, 3}, {2, 1, 4, 3}}, [](const scope& s, const v& x) {
         return ops::batch_matmul(s, x[0], x[1], false, true);
       }},
      {"BatchMatMulV2 adj_x, batches [2,1] x [3]", {{2, 1, 3, 2}, {3, 3, 4}}, [](const scope& s, const v& x) {
         return ops::batch_matmul(s, x[0], x[1], true, false);
       }},
      {"BiasAdd NHWC", {{2, 3}, {3}}, [](const scope& s, const v& x) { return ops::bias_add(s, x[0], x[1]); }},
      {"BiasAdd NCHW", {{2, 3, 2}, {3}}, [](const scope& s, const v& x) {
         return s.add("BiasAdd", {x[0], x[1]}, {{"data_format", graph::attr_value("NCHW")}}).out();
       }},
      // Reductions.
      {"Sum axis 1", {{2, 3}}, [](const scope& s, const v& x) { return ops::sum(s, x[0], i32(s, {1})); }},
      {"Sum all, keep_dims", {{2, 3}}, [](const scope& s, const v& x) { return ops::sum(s, x[0], i32(s, {0, 1}), true); }},
      {"Sum axis -1 of [2,3,2]", {{2, 3, 2}}, [](const scope& s, const v& x) { return ops::sum(s, x[0], i32_scalar(s, -1)); }},
      {"Mean axis 0", {{2, 3}}, [](const scope& s, const v& x) { return ops::mean(s, x[0], i32(s, {0})); }},
      {"Mean all", {{2, 3}}, [](const scope& s, const v& x) { return ops::mean(s, x[0], i32(s, {0, 1})); }},
      {"Max axis 1", {{2, 3}}, [](const scope& s, const v& x) { return ops::max(s, x[0], i32(s, {1})); }},
      {"Min axis 0, keep_dims", {{3, 2}}, [](const scope& s, const v& x) { return ops::min(s, x[0], i32(s, {0}), true); }},
      // Prod, also over groups holding one zero (the zero's gradient is the product of
      // the others) and two zeros (all gradients 0); central differences are exact there,
      // the product being linear in each element.
      {"Cumsum axis 1", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Cumsum", {x[0], i32_scalar(s, 1)}).out(); }},
      {"Cumsum axis 0, exclusive, reverse", {{3, 2}}, [](const scope& s, const v& x) {
         return s.add("Cumsum", {x[0], i32_scalar(s, 0)}, {{"exclusive", graph::attr_value(true)}, {"reverse", graph::attr_value(true)}}).out();
       }},
      {"Cumprod axis -1", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Cumprod", {x[0], i32_scalar(s, -1)}).out(); }, 0.5, 2.0},
      {"Cumprod axis 0, exclusive, reverse", {{3, 2}}, [](const scope& s, const v& x) {
         return s.add("Cumprod", {x[0], i32_scalar(s, 0)}, {{"exclusive", graph::attr_value(true)}, {"reverse", graph::attr_value(true)}}).out();
       }, 0.5, 2.0},
      {"Prod axis 1", {{2, 3}}, [](const scope& s, const v& x) { return ops::prod(s, x[0], i32(s, {1})); }},
      {"Prod all, keep_dims", {{2, 3}}, [](const scope& s, const v& x) { return ops::prod(s, x[0], i32(s, {0, 1}), true); }},
      {"Prod axis 1, rows with one, two and no zeros", {{3, 3}}, [](const scope& s, const v& x) {
         return ops::prod(s, x[0], i32(s, {1}));
       }, -1.0, 1.0, {{0.5, 0.0, -2.0, 0.0, 0.0, 1.5, 1.25, -0.5, 3.0}}},
      {"Prod axes int64 [0, 2] of [2,3,2] with a zero", {{2, 3, 2}}, [](const scope& s, const v& x) {
         return ops::prod(s, x[0], ops::constant(s, tensor::from_vector<std::int64_t>({0, 2})));
       }, -1.0, 1.0, {{0.5, -1.5, 0.0, 2.0, 1.0, 1.0, 0.75, 1.25, -2.0, 0.5, 0.0, 0.0}}},
      // Classifier ops.
      {"Softmax", {{2, 3}}, [](const scope& s, const v& x) { return ops::softmax(s, x[0]); }},
      {"LogSoftmax", {{2, 4}}, [](const scope& s, const v& x) { return ops::log_softmax(s, x[0]); }},
      // The op's backprop assumes labels that sum to 1: they are a softmax here.
      {"SoftmaxCrossEntropyWithLogits loss", {{2, 3}, {2, 3}}, [](const scope& s, const v& x) {
         return ops::softmax_cross_entropy_with_logits(s, x[0], ops::softmax(s, x[1])).out(0);
       }},
      {"SoftmaxCrossEntropyWithLogits loss and backprop", {{2, 3}, {2, 3}}, [](const scope& s, const v& x) {
         auto xent = ops::softmax_cross_entropy_with_logits(s, x[0], ops::softmax(s, x[1]));
         return ops::add(s, ops::reshape(s, xent.out(0), i32(s, {2, 1})), xent.out(1));
       }},
      {"SoftmaxCrossEntropyWithLogits labels [3]", {{2, 3}, {3}}, [](const scope& s, const v& x) {
         return ops::softmax_cross_entropy_with_logits(s, x[0], ops::softmax(s, x[1])).out(0);
       }},
      {"SoftmaxCrossEntropyWithLogits features [1,3]", {{1, 3}, {2, 3}}, [](const scope& s, const v& x) {
         return ops::softmax_cross_entropy_with_logits(s, x[0], ops::softmax(s, x[1])).out(0);
       }},
      {"SparseSoftmaxCrossEntropyWithLogits", {{3, 4}}, [](const scope& s, const v& x) {
         auto labels = ops::constant(s, tensor::from_vector<std::int32_t>({2, 0, 3}));
         return ops::sparse_softmax_cross_entropy_with_logits(s, x[0], labels).out(0);
       }},
      {"SparseSoftmaxCrossEntropyWithLogits backprop", {{3, 4}}, [](const scope& s, const v& x) {
         auto labels = ops::constant(s, tensor::from_vector<std::int64_t>({1, 1, 0}));
         return ops::sparse_softmax_cross_entropy_with_logits(s, x[0], labels).out(1);
       }},
      // Activations, element-wise math and normalization (graph/ops/nn2_ops.cc).
      {"Relu6", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Relu6", {x[0]}).out(); }, -2.0, 7.0},
      {"Elu", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Elu", {x[0]}).out(); }, -2.0, 2.0},
      {"Softplus", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Softplus", {x[0]}).out(); }, -3.0, 3.0},
      {"LeakyRelu", {{2, 3}}, [](const scope& s, const v& x) { return s.add("LeakyRelu", {x[0]}).out(); }},
      {"LeakyRelu alpha 0.3", {{2, 3}}, [](const scope& s, const v& x) {
         return s.add("LeakyRelu", {x[0]}, {{"alpha", graph::attr_value(0.3f)}}).out();
       }},
      {"Reciprocal", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Reciprocal", {x[0]}).out(); }, 0.5, 2.0},
      {"Pow [2,3] ^ [3]", {{2, 3}, {3}}, [](const scope& s, const v& x) { return s.add("Pow", {x[0], x[1]}).out(); }, 0.5, 2.0},
      {"FloorMod [2,3] % [3]", {{2, 3}, {3}}, [](const scope& s, const v& x) { return s.add("FloorMod", {x[0], x[1]}).out(); }, 0.5, 2.0},
      {"ClipByValue [2,3], scalar, [3]", {{2, 3}, {}, {3}}, [](const scope& s, const v& x) {
         output half = ops::scalar(s, 0.5);
         output lo = ops::sub(s, ops::mul(s, x[1], half), half);  // in [-1, 0]
         output hi = ops::add(s, ops::mul(s, x[2], half), half);  // in [0, 1]
         return s.add("ClipByValue", {x[0], lo, hi}).out();
       }},
      {"L2Loss", {{2, 3}}, [](const scope& s, const v& x) { return s.add("L2Loss", {x[0]}).out(); }},
      {"LRN", {{1, 1, 2, 4}}, [](const scope& s, const v& x) { return s.add("LRN", {x[0]}).out(); }},
      {"LRN depth_radius 2", {{1, 2, 2, 6}}, [](const scope& s, const v& x) {
         return s.add("LRN", {x[0]}, {{"depth_radius", graph::attr_value(2)}, {"bias", graph::attr_value(2.0f)},
                                      {"alpha", graph::attr_value(0.5f)}, {"beta", graph::attr_value(0.75f)}})
             .out();
       }},
      {"FusedBatchNormV3 training NHWC", {{2, 2, 2, 3}, {3}, {3}}, [](const scope& s, const v& x) {
         output empty = ops::constant(s, tensor::zeros(dtype::float64, {0}));
         return s.add("FusedBatchNormV3", {x[0], x[1], x[2], empty, empty}).out(0);
       }},
      {"FusedBatchNormV3 training NCHW", {{2, 3, 2, 1}, {3}, {3}}, [](const scope& s, const v& x) {
         output empty = ops::constant(s, tensor::zeros(dtype::float64, {0}));
         return s.add("FusedBatchNormV3", {x[0], x[1], x[2], empty, empty},
                      {{"data_format", graph::attr_value("NCHW")}}).out(0);
       }},
      {"FusedBatchNormV3 inference", {{2, 2, 1, 3}, {3}, {3}}, [](const scope& s, const v& x) {
         output mean = ops::constant(s, tensor::from_vector<double>({0.1, -0.2, 0.3}));
         output variance = ops::constant(s, tensor::from_vector<double>({0.5, 1.0, 2.0}));
         return s.add("FusedBatchNormV3", {x[0], x[1], x[2], mean, variance},
                      {{"is_training", graph::attr_value(false)}}).out(0);
       }},
      // The fused LSTM (graph/ops/rnn_ops.cc): x, cs_prev, h_prev, w, wci, wcf, wco, b.
      {"BlockLSTM h, peepholes", {{3, 2, 3}, {2, 4}, {2, 4}, {7, 16}, {4}, {4}, {4}, {16}},
       [](const scope& s, const v& x) {
         std::vector<graph::input> in = {ops::scalar<std::int64_t>(s, 3)};
         in.insert(in.end(), x.begin(), x.end());
         return s.add("BlockLSTM", in, {{"use_peephole", graph::attr_value(true)}, {"cell_clip", graph::attr_value(0.0f)}})
             .out(6);
       }},
      {"LSTMBlockCell h, peepholes", {{2, 3}, {2, 4}, {2, 4}, {7, 16}, {4}, {4}, {4}, {16}},
       [](const scope& s, const v& x) {
         return s.add("LSTMBlockCell", {x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]},
                      {{"use_peephole", graph::attr_value(true)}, {"cell_clip", graph::attr_value(0.0f)}})
             .out(6);
       }},
      {"LSTMBlockCell cs", {{2, 3}, {2, 4}, {2, 4}, {7, 16}, {4}, {4}, {4}, {16}},
       [](const scope& s, const v& x) {
         return s.add("LSTMBlockCell", {x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]},
                      {{"cell_clip", graph::attr_value(0.0f)}})
             .out(1);
       }},
      {"BlockLSTMV2 cs, seq_len_max 2 of 3", {{3, 2, 3}, {2, 4}, {2, 4}, {7, 16}, {4}, {4}, {4}, {16}},
       [](const scope& s, const v& x) {
         std::vector<graph::input> in = {ops::scalar<std::int64_t>(s, 2)};
         in.insert(in.end(), x.begin(), x.end());
         return s.add("BlockLSTMV2", in).out(1);
       }},
      // Layout.
      {"Reshape", {{2, 3}}, [](const scope& s, const v& x) { return ops::reshape(s, x[0], i32(s, {3, 2})); }},
      {"ExpandDims", {{2, 3}}, [](const scope& s, const v& x) {
         return s.add("ExpandDims", {x[0], i32_scalar(s, 1)}).out();
       }},
      {"Squeeze", {{2, 1, 3}}, [](const scope& s, const v& x) { return s.add("Squeeze", {x[0]}).out(); }},
      {"Transpose", {{2, 3, 4}}, [](const scope& s, const v& x) { return ops::transpose(s, x[0], i32(s, {2, 0, 1})); }},
      {"Transpose, perm known only at run time", {{2, 3, 4}}, [](const scope& s, const v& x) {
         output perm = ops::placeholder_with_default(s, i32(s, {1, 2, 0}), partial_shape{3});
         return ops::transpose(s, x[0], perm);
       }},
      {"ConcatV2 axis 1", {{2, 3}, {2, 1}}, [](const scope& s, const v& x) { return ops::concat(s, {x[0], x[1]}, i32_scalar(s, 1)); }},
      {"ConcatV2 axis -2, three inputs", {{1, 2}, {2, 2}, {1, 2}}, [](const scope& s, const v& x) {
         return ops::concat(s, {x[0], x[1], x[2]}, i32_scalar(s, -2));
       }},
      {"Pack axis 1", {{2, 3}, {2, 3}}, [](const scope& s, const v& x) { return ops::stack(s, {x[0], x[1]}, 1); }},
      {"Unpack", {{3, 2}}, [](const scope& s, const v& x) {
         auto parts = s.add("Unpack", {x[0]}, {{"num", graph::attr_value(3)}, {"axis", graph::attr_value(0)}});
         return ops::mul(s, parts.out(0), parts.out(2));  // part 1 gets no gradient: zeros
       }},
      {"Fill value", {{}}, [](const scope& s, const v& x) { return ops::fill(s, i32(s, {2, 3}), x[0]); }},
      // Index ops (graph/ops/index_ops.cc).
      {"Pad", {{2, 3}}, [](const scope& s, const v& x) {
         return s.add("Pad", {x[0], ops::constant(s, tensor::from_vector<std::int32_t>({1, 0, 0, 2}, {2, 2}))}).out();
       }},
      {"PadV2 int64 paddings", {{2, 3}}, [](const scope& s, const v& x) {
         return s.add("PadV2", {x[0], ops::constant(s, tensor::from_vector<std::int64_t>({0, 1, 2, 1}, {2, 2})),
                                ops::scalar(s, 0.5)}).out();
       }},
      {"Tile", {{2, 3}}, [](const scope& s, const v& x) { return s.add("Tile", {x[0], i32(s, {2, 3})}).out(); }},
      {"StridedSlice negative stride", {{4, 5}}, [](const scope& s, const v& x) {
         return s.add("StridedSlice", {x[0], i32(s, {3, 0}), i32(s, {0, 5}), i32(s, {-1, 2})}).out();
       }},
      {"StridedSlice x[1, ..., ::-2, newaxis]", {{2, 3, 4}}, [](const scope& s, const v& x) {
         return s.add("StridedSlice", {x[0], i32(s, {1, 0, 0, 0}), i32(s, {2, 0, 0, 0}), i32(s, {1, 1, -2, 1})},
                      {{"ellipsis_mask", graph::attr_value(2)}, {"shrink_axis_mask", graph::attr_value(1)},
                       {"begin_mask", graph::attr_value(4)}, {"end_mask", graph::attr_value(4)},
                       {"new_axis_mask", graph::attr_value(8)}}).out();
       }},
      {"Split axis 1, part 1 unused", {{2, 6}}, [](const scope& s, const v& x) {
         auto parts = s.add("Split", {i32_scalar(s, 1), x[0]}, {{"num_split", graph::attr_value(3)}});
         return ops::mul(s, parts.out(0), parts.out(2));
       }},
      {"SplitV sizes [2, -1, 1]", {{2, 5}}, [](const scope& s, const v& x) {
         auto parts = s.add("SplitV", {x[0], i32(s, {2, -1, 1}), i32_scalar(s, -1)}, {{"num_split", graph::attr_value(3)}});
         return ops::mul(s, parts.out(0), parts.out(1));
       }},
      {"GatherNd rows, a repeated one", {{4, 2}}, [](const scope& s, const v& x) {
         return s.add("GatherNd", {x[0], ops::constant(s, tensor::from_vector<std::int32_t>({2, 0, 2}, tensor_shape{3, 1}))}).out();
       }},
      {"ScatterNd elements, a duplicate", {{3}}, [](const scope& s, const v& x) {
         output indices = ops::constant(s, tensor::from_vector<std::int32_t>({0, 1, 1, 0, 0, 1}, tensor_shape{3, 2}));
         return s.add("ScatterNd", {indices, x[0], i32(s, {2, 2})}).out();
       }},
      {"ReverseV2 axes 0 and -1", {{2, 3}}, [](const scope& s, const v& x) {
         return s.add("ReverseV2", {x[0], i32(s, {0, -1})}).out();
       }},
      {"CheckNumerics", {{2, 3}}, [](const scope& s, const v& x) {
         return s.add("CheckNumerics", {x[0]}, {{"message", graph::attr_value(std::string("x"))}}).out();
       }},
      {"GatherV2 axis 0, repeated index", {{4, 2}}, [](const scope& s, const v& x) {
         return s.add("GatherV2", {x[0], i32(s, {2, 0, 2}), i32_scalar(s, 0)}).out();
       }},
      {"GatherV2 axis 1, matrix of indices", {{3, 4}}, [](const scope& s, const v& x) {
         auto indices = ops::constant(s, tensor::from_vector<std::int64_t>({3, 0, 3, 1}, {2, 2}));
         return s.add("GatherV2", {x[0], indices, i32_scalar(s, 1)}).out();
       }},
      {"UnsortedSegmentSum", {{4, 2}}, [](const scope& s, const v& x) {
         return s.add("UnsortedSegmentSum", {x[0], i32(s, {1, 0, 1, 3}), i32_scalar(s, 4)}).out();
       }},
      {"DynamicPartition, partition 1 unused", {{5, 2}}, [](const scope& s, const v& x) {
         auto parts = s.add("DynamicPartition", {x[0], i32(s, {1, 0, 1, 2, 0})}, {{"num_partitions", graph::attr_value(3)}});
         return ops::concat(s, {ops::square(s, parts.out(0)), parts.out(2)}, i32_scalar(s, 0));
       }},
      {"DynamicStitch", {{2, 2}, {1, 2}}, [](const scope& s, const v& x) {
         return s.add("DynamicStitch", {graph::input({i32(s, {0, 2}), i32(s, {1})}), graph::input({x[0], x[1]})}).out();
       }},
      {"TopKV2 values", {{2, 5}}, [](const scope& s, const v& x) {
         return s.add("TopKV2", {x[0], i32_scalar(s, 3)}).out(0);
       }},
      {"BroadcastTo [3,1] -> [2,3,4]", {{3, 1}}, [](const scope& s, const v& x) {
         return s.add("BroadcastTo", {x[0], i32(s, {2, 3, 4})}).out();
       }},
      // Graph structure: several consumers, a chain, a diamond.
      {"x * x + x", {{2, 3}}, [](const scope& s, const v& x) { return ops::add(s, ops::mul(s, x[0], x[0]), x[0]); }},
      {"tanh(matmul(x, w) + b), then mean", {{2, 3}, {3, 2}, {2}}, [](const scope& s, const v& x) {
         output h = ops::tanh(s, ops::bias_add(s, ops::matmul(s, x[0], x[1]), x[2]));
         return ops::mean(s, ops::mul(s, h, h), i32(s, {0, 1}));
       }},
      {"diamond exp(x) * log(exp(x) + 1)", {{3}}, [](const scope& s, const v& x) {
         output e = ops::exp(s, x[0]);
         return ops::mul(s, e, ops::log(s, ops::add(s, e, ops::scalar(s, 1.0))));
       }},
  };
}

}  // namespace

TEST_CASE("every gradient matches central differences", "[gradients]") {
  for (const auto& c : gradient_cases()) {
    SECTION(c.name) {
      check_gradient(c, true);
      check_gradient(c, false);
    }
  }
}

TEST_CASE("gradient of a tensor with several consumers is their sum", "[gradients]") {
  auto root = scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float64, {2});
  auto y = ops::add(root, ops::mul(root, x, x), x);
  auto grads = graph::add_gradients(root, {y}, {x});
  REQUIRE(grads.ok());
  const auto& dx = (*grads)[0];
  REQUIRE(dx.valid());
  CHECK(dx.node.starts_with("gradients/"));
  auto session = make_session(root);
  auto out = session->run({{"x", tensor::from_vector<double>({1.5, -2.0})}}, {dx.name()});
  REQUIRE(out.ok());
  CHECK((*out)[0].data<double>()[0] == Approx(4.0));   // 2x + 1
  CHECK((*out)[0].data<double>()[1] == Approx(-3.0));
}

TEST_CASE("ys several, and an x that is also on the path", "[gradients]") {
  auto root = scope::new_root();
  auto a = ops::placeholder(root.with_name("a"), dtype::float64, {});
  auto b = ops::square(root.with_name("b"), a);
  auto c = ops::mul(root.with_name("c"), b, a);  // a^3
  auto grads = graph::add_gradients(root, {c, b}, {a, b});
  REQUIRE(grads.ok());
  auto session = make_session(root);
  auto out = session->run({{"a", tensor::scalar(2.0)}}, {(*grads)[0].name(), (*grads)[1].name()});
  REQUIRE(out.ok());
  CHECK((*out)[0].data<double>()[0] == Approx(3 * 4.0 + 2 * 2.0));  // d(a^3 + a^2)/da
  CHECK((*out)[1].data<double>()[0] == Approx(2.0 + 1.0));          // d(b*a + b)/db
}

TEST_CASE("unreachable xs get no gradient, not zeros", "[gradients]") {
  auto root = scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float64, {2});
  auto z = ops::placeholder(root.with_name("z"), dtype::float64, {2});
  auto unrelated = ops::square(root, z);
  auto y = ops::add(root, ops::square(root, x), root.add("StopGradient", {z}).out());
  (void)unrelated;
  auto grads = graph::add_gradients(root, {y}, {x, z, unrelated});
  REQUIRE(grads.ok());
  REQUIRE(grads->size() == 3);
  CHECK((*grads)[0].valid());
  CHECK_FALSE((*grads)[1].valid());  // blocked by StopGradient
  CHECK_FALSE((*grads)[2].valid());  // not on any path to y
  CHECK(root.ok());
}

TEST_CASE("an op on the path without a gradient is an error naming op and node", "[gradients]") {
  // An op made for this test, so that no gradient added to a built-in op later breaks it.
  static const bool registered = [] {
    status s = graph::op_registry::builtin().add(
        graph::op_schema("TestWithoutGradient").input("x: T").output("y: T").attr("T: {float, double}")
            .shape_fn(graph::unchanged_shape));
    REQUIRE(s.ok());
    return true;
  }();
  (void)registered;
  auto root = scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float64, {2, 3});
  auto p = root.with_name("my_op").add("TestWithoutGradient", {x}).out();
  auto y = ops::sum(root, p, i32(root, {0}));
  auto grads = graph::add_gradients(root, {y}, {x});
  REQUIRE_FALSE(grads.ok());
  std::string message = grads.error().message();
  CHECK(message.find("'TestWithoutGradient'") != std::string::npos);
  CHECK(message.find("'my_op'") != std::string::npos);
  CHECK(root.ok());  // the scope stays usable

  // A no_gradient op on the path only blocks: ArgMax's output is not differentiable.
  auto a = ops::argmax(root, x, i32_scalar(root, 1));
  auto grads2 = graph::add_gradients(root, {ops::cast(root, a, dtype::float64)}, {x});
  REQUIRE(grads2.ok());
  CHECK_FALSE((*grads2)[0].valid());
}

TEST_CASE("add_gradients reports bad arguments", "[gradients]") {
  auto root = scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float64, {2});
  auto y = ops::square(root, x);
  CHECK_FALSE(graph::add_gradients(root, {y}, {output{}}).ok());
  auto wrong_type = ops::placeholder(root, dtype::float32, {2});
  auto r = graph::add_gradients(root, {y}, {x}, {wrong_type});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("dtype") != std::string::npos);
  CHECK_FALSE(graph::add_gradients(root, {y}, {x}, {y, y}).ok());
}

TEST_CASE("a cast to float32 passes the gradient back in the source dtype", "[gradients]") {
  auto root = scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float64, {3});
  auto y = ops::mul(root, ops::cast(root, x, dtype::float32), ops::scalar(root, 3.0f));
  auto grads = graph::add_gradients(root, {y}, {x});
  REQUIRE(grads.ok());
  REQUIRE((*grads)[0].type == dtype::float64);
  auto session = make_session(root);
  auto out = session->run({{"x", tensor::from_vector<double>({1, 2, 3})}}, {(*grads)[0].name()});
  REQUIRE(out.ok());
  for (double g : (*out)[0].flat<double>()) CHECK(g == 3.0);
}

TEST_CASE("repeated calls use fresh name scopes", "[gradients]") {
  auto root = scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float64, {2});
  auto y = ops::square(root, x);
  auto g1 = graph::add_gradients(root, {y}, {x});
  auto g2 = graph::add_gradients(root, {y}, {x});
  REQUIRE(g1.ok());
  REQUIRE(g2.ok());
  CHECK((*g1)[0].node.starts_with("gradients/"));
  CHECK((*g2)[0].node.starts_with("gradients_1/"));
}

TEST_CASE("a small MLP learns by gradient descent on fed weights", "[gradients]") {
  // Two Gaussian blobs, labels 0 and 1; a 2-8-2 tanh network; weights live in C++ and are
  // fed each step (there are no variables yet).
  std::mt19937 rng(7);
  INFO("seed std::mt19937(7)");
  const int batch = 32;
  std::normal_distribution<double> noise(0.0, 0.5);
  std::vector<double> points;
  std::vector<std::int32_t> labels;
  for (int i = 0; i < batch; ++i) {
    int label = i % 2;
    double cx = label == 0 ? -1.0 : 1.0;
    points.push_back(cx + noise(rng));
    points.push_back(-cx + noise(rng));
    labels.push_back(label);
  }
  auto root = scope::new_root();
  auto x = ops::constant(root, tensor::from_vector(points, {batch, 2}));
  auto y = ops::constant(root, tensor::from_vector(labels));
  auto w1 = ops::placeholder(root.with_name("w1"), dtype::float64, {2, 8});
  auto b1 = ops::placeholder(root.with_name("b1"), dtype::float64, {8});
  auto w2 = ops::placeholder(root.with_name("w2"), dtype::float64, {8, 2});
  auto b2 = ops::placeholder(root.with_name("b2"), dtype::float64, {2});
  auto hidden = ops::tanh(root, ops::bias_add(root, ops::matmul(root, x, w1), b1));
  auto logits = ops::bias_add(root, ops::matmul(root, hidden, w2), b2);
  auto loss = ops::mean(root.with_name("loss"),
                        ops::sparse_softmax_cross_entropy_with_logits(root, logits, y).out(0),
                        i32(root, {0}));
  std::vector<output> params = {w1, b1, w2, b2};
  auto grads = graph::add_gradients(root, {loss}, params);
  REQUIRE(grads.ok());
  auto session = make_session(root);

  std::vector<tensor> values = {random_tensor({2, 8}, rng, -0.5, 0.5), tensor::zeros(dtype::float64, {8}),
                                random_tensor({8, 2}, rng, -0.5, 0.5), tensor::zeros(dtype::float64, {2})};
  std::vector<std::string> fetches = {"loss"};
  for (const auto& g : *grads) fetches.push_back(g.name());
  double first_loss = 0, last_loss = 0;
  const double learning_rate = 0.3;
  for (int step = 0; step < 300; ++step) {
    actors::feed_list feeds;
    for (std::size_t i = 0; i < params.size(); ++i) feeds.emplace_back(params[i].name(), values[i]);
    auto out = session->run(feeds, fetches);
    REQUIRE(out.ok());
    double l = (*out)[0].data<double>()[0];
    if (step == 0) first_loss = l;
    last_loss = l;
    for (std::size_t i = 0; i < params.size(); ++i) {
      tensor next = values[i].deep_copy();
      auto w = next.flat<double>();
      auto g = (*out)[i + 1].flat<double>();
      for (std::size_t k = 0; k < w.size(); ++k) w[k] -= learning_rate * g[k];
      values[i] = next;
    }
  }
  INFO("loss " << first_loss << " -> " << last_loss);
  CHECK(first_loss > 0.5);
  CHECK(last_loss < 0.1 * first_loss);
}
