// The kernels of kernels/cpu/rnn_kernels.cc: BlockLSTM and BlockLSTMV2 against a
// double-precision reference loop (xh = [x, h], one product per step, as TensorFlow's
// kernel computes it) on shapes that split a step into one or several blocks of units
// (pools of 1 and 3 threads), with and without peepholes, clipping and seq_len_max below
// the time length; BlockLSTMGrad(V2) against central differences of the forward kernel
// in float64; error paths. Seed 42.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/attr.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

struct lstm_case {
  std::int64_t time, batch, input, cell, steps;
  bool peephole = false;
  float clip = 0.0f;
  bool v2 = false;
  float forget_bias = 1.0f;
};

std::string describe(const lstm_case& c) {
  return "time " + std::to_string(c.time) + " batch " + std::to_string(c.batch) + " input " +
         std::to_string(c.input) + " cell " + std::to_string(c.cell) + " seq_len_max " + std::to_string(c.steps) +
         (c.peephole ? " peephole" : "") + (c.clip > 0 ? " clip " + std::to_string(c.clip) : "") +
         (c.v2 ? " V2" : "");
}

tf::NodeDef lstm_node(const lstm_case& c, dtype type, bool grad) {
  tf::NodeDef node;
  const std::string op = std::string(grad ? "BlockLSTMGrad" : "BlockLSTM") + (c.v2 ? "V2" : "");
  node.set_name(op);
  node.set_op(op);
  (*node.mutable_attr())["T"] = graph::attr_value(type);
  (*node.mutable_attr())["use_peephole"] = graph::attr_value(c.peephole);
  if (!grad) {
    (*node.mutable_attr())["cell_clip"] = graph::attr_value(c.clip);
    if (!c.v2) (*node.mutable_attr())["forget_bias"] = graph::attr_value(c.forget_bias);
  }
  return node;
}

template <class T>
tensor random_tensor(const tensor_shape& shape, std::mt19937& rng, double scale = 1.0) {
  tensor t(dtype_of<T>, shape);
  std::uniform_real_distribution<double> dist(-scale, scale);
  for (T& x : t.flat<T>()) x = static_cast<T>(dist(rng));
  return t;
}

// The nine inputs of BlockLSTM: seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b.
template <class T>
std::vector<tensor> random_inputs(const lstm_case& c, std::mt19937& rng) {
  tensor steps(dtype::int64, tensor_shape{});
  steps.data<std::int64_t>()[0] = c.steps;
  return {steps,
          random_tensor<T>({c.time, c.batch, c.input}, rng),
          random_tensor<T>({c.batch, c.cell}, rng),
          random_tensor<T>({c.batch, c.cell}, rng),
          random_tensor<T>({c.input + c.cell, 4 * c.cell}, rng, 0.5),
          random_tensor<T>({c.cell}, rng),
          random_tensor<T>({c.cell}, rng),
          random_tensor<T>({c.cell}, rng),
          random_tensor<T>({4 * c.cell}, rng)};
}

template <class T>
double at(const tensor& t, std::int64_t i) {
  return static_cast<double>(t.data<T>()[i]);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The seven outputs (i, cs, f, o, ci, co, h), each [time, batch, cell], in double.
template <class T>
std::vector<std::vector<double>> reference_forward(const lstm_case& c, const std::vector<tensor>& in) {
  const std::int64_t n = c.time * c.batch * c.cell, width = 4 * c.cell;
  std::vector<std::vector<double>> out(7, std::vector<double>(static_cast<std::size_t>(n), 0.0));
  // Gate g's column block: BlockLSTM i, ci, f, o; V2 i, f, ci, o.
  const std::int64_t col_i = 0, col_c = c.v2 ? 2 : 1, col_f = c.v2 ? 1 : 2, col_o = 3;
  for (std::int64_t t = 0; t < c.steps; ++t) {
    for (std::int64_t b = 0; b < c.batch; ++b) {
      std::vector<double> xh;
      for (std::int64_t k = 0; k < c.input; ++k) xh.push_back(at<T>(in[1], (t * c.batch + b) * c.input + k));
      for (std::int64_t k = 0; k < c.cell; ++k) {
        xh.push_back(t == 0 ? at<T>(in[3], b * c.cell + k) : out[6][static_cast<std::size_t>(((t - 1) * c.batch + b) * c.cell + k)]);
      }
      for (std::int64_t u = 0; u < c.cell; ++u) {
        auto gate = [&](std::int64_t block) {
          double sum = at<T>(in[8], block * c.cell + u);
          for (std::size_t k = 0; k < xh.size(); ++k) sum += xh[k] * at<T>(in[4], static_cast<std::int64_t>(k) * width + block * c.cell + u);
          return sum;
        };
        const double cs_prev = t == 0 ? at<T>(in[2], b * c.cell + u) : out[1][static_cast<std::size_t>(((t - 1) * c.batch + b) * c.cell + u)];
        const double peep = c.peephole ? 1.0 : 0.0;
        const double i = sigmoid(gate(col_i) + peep * cs_prev * at<T>(in[5], u));
        const double ci = std::tanh(gate(col_c));
        const double f = sigmoid(gate(col_f) + (c.v2 ? 0.0 : c.forget_bias) + peep * cs_prev * at<T>(in[6], u));
        double cs = ci * i + cs_prev * f;
        if (c.clip > 0) cs = std::max<double>(-c.clip, std::min<double>(c.clip, cs));
        const double co = std::tanh(cs);
        const double o = sigmoid(gate(col_o) + peep * cs * at<T>(in[7], u));
        const auto k = static_cast<std::size_t>((t * c.batch + b) * c.cell + u);
        out[0][k] = i, out[1][k] = cs, out[2][k] = f, out[3][k] = o, out[4][k] = ci, out[5][k] = co;
        out[6][k] = co * o;
      }
    }
  }
  return out;
}

std::vector<tensor> run(const tf::NodeDef& node, const std::vector<tensor>& inputs, compute_pool* pool) {
  auto out = kernels::run_kernel(node, inputs, pool);
  if (!out.ok()) FAIL(out.error());
  return std::move(*out);
}

const std::vector<lstm_case>& cases() {
  static const std::vector<lstm_case> all = {
      {3, 2, 4, 5, 3},
      {4, 3, 6, 40, 4, true, 0.0f},          // three blocks of units on a 3-thread pool
      {5, 2, 3, 33, 3, true, 0.5f},          // clipped, two steps of zeros after seq_len_max
      {4, 2, 5, 17, 4, false, 0.0f, true},   // V2's gate order
      {3, 1, 7, 24, 0},                      // seq_len_max 0: all zeros
      {2, 3, 0, 8, 2, true},                 // no input features
      {1, 4, 3, 1, 1, false, 0.0f, false, 0.5f},
  };
  return all;
}

template <class T>
void check_forward(double tolerance) {
  std::mt19937 rng(42);
  compute_pool three(3);
  for (const lstm_case& c : cases()) {
    for (compute_pool* pool : {static_cast<compute_pool*>(nullptr), &three}) {
      INFO(describe(c) << (pool ? " on 3 threads" : ""));
      auto inputs = random_inputs<T>(c, rng);
      auto want = reference_forward<T>(c, inputs);
      auto got = run(lstm_node(c, dtype_of<T>, false), inputs, pool);
      REQUIRE(got.size() == 7);
      for (std::size_t k = 0; k < 7; ++k) {
        REQUIRE(got[k].shape() == tensor_shape({c.time, c.batch, c.cell}));
        for (std::size_t e = 0; e < want[k].size(); ++e) {
          INFO("output " << k << " element " << e);
          REQUIRE(std::abs(at<T>(got[k], static_cast<std::int64_t>(e)) - want[k][e]) <= tolerance);
        }
      }
    }
  }
}

TEST_CASE("BlockLSTM and BlockLSTMV2 match a reference loop", "[rnn]") {
  check_forward<float>(2e-6);
  check_forward<double>(1e-13);
}

// The gradient of loss = sum(cs * cs_grad) + sum(h * h_grad) with respect to each of
// BlockLSTMGrad's eight inputs, against central differences of the forward kernel.
TEST_CASE("BlockLSTMGrad matches central differences of BlockLSTM", "[rnn]") {
  std::mt19937 rng(42);
  compute_pool three(3);
  for (lstm_case c : cases()) {
    c.clip = 0.0f;  // the gradient does not differentiate the clip (TensorFlow's neither)
    INFO(describe(c));
    auto inputs = random_inputs<double>(c, rng);
    const tensor cs_grad = random_tensor<double>({c.time, c.batch, c.cell}, rng);
    const tensor h_grad = random_tensor<double>({c.time, c.batch, c.cell}, rng);
    auto loss = [&](const std::vector<tensor>& in) {
      auto out = run(lstm_node(c, dtype::float64, false), in, &three);
      double sum = 0;
      for (std::int64_t e = 0; e < out[1].num_elements(); ++e) {
        sum += at<double>(out[1], e) * at<double>(cs_grad, e) + at<double>(out[6], e) * at<double>(h_grad, e);
      }
      return sum;
    };
    auto forward = run(lstm_node(c, dtype::float64, false), inputs, &three);
    std::vector<tensor> grad_inputs = inputs;
    grad_inputs.insert(grad_inputs.end(), forward.begin(), forward.end());
    grad_inputs.push_back(cs_grad);
    grad_inputs.push_back(h_grad);
    auto grads = run(lstm_node(c, dtype::float64, true), grad_inputs, &three);
    REQUIRE(grads.size() == 8);
    for (int k = 1; k <= 8; ++k) {
      const tensor& grad = grads[static_cast<std::size_t>(k - 1)];
      REQUIRE(grad.shape() == inputs[static_cast<std::size_t>(k)].shape());
      for (std::int64_t e = 0; e < grad.num_elements(); ++e) {
        INFO("input " << k << " element " << e);
        const double eps = 1e-6;
        std::vector<tensor> plus = inputs, minus = inputs;
        plus[static_cast<std::size_t>(k)] = inputs[static_cast<std::size_t>(k)].deep_copy();
        minus[static_cast<std::size_t>(k)] = inputs[static_cast<std::size_t>(k)].deep_copy();
        plus[static_cast<std::size_t>(k)].data<double>()[e] += eps;
        minus[static_cast<std::size_t>(k)].data<double>()[e] -= eps;
        const double numeric = (loss(plus) - loss(minus)) / (2 * eps);
        const bool unused_peephole = !c.peephole && k >= 5 && k <= 7;
        REQUIRE(at<double>(grad, e) == Approx(unused_peephole ? 0.0 : numeric).margin(1e-7).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("BlockLSTM reports bad shapes and seq_len_max naming what is wrong", "[rnn]") {
  std::mt19937 rng(42);
  const lstm_case c{3, 2, 4, 5, 3};
  auto expect_error = [&](std::vector<tensor> inputs, const std::string& fragment) {
    auto out = kernels::run_kernel(lstm_node(c, dtype::float32, false), inputs);
    REQUIRE_FALSE(out.ok());
    INFO(out.error().message());
    CHECK(out.error().message().find(fragment) != std::string::npos);
  };
  auto good = random_inputs<float>(c, rng);
  auto bad = good;
  bad[0] = good[0].deep_copy();  // tensors share buffers when copied
  bad[0].data<std::int64_t>()[0] = 4;
  expect_error(bad, "seq_len_max is 4; it must be in [0, 3]");
  bad = good;
  bad[4] = random_tensor<float>({8, 20}, rng);
  expect_error(bad, "w is [8,20]");
  bad = good;
  bad[8] = random_tensor<float>({19}, rng);
  expect_error(bad, "b is [19]");
  bad = good;
  bad[1] = random_tensor<float>({3, 8}, rng);
  expect_error(bad, "x must be [time, batch, input]");
  bad = good;
  bad[0] = good[0].deep_copy();
  bad[0].data<std::int64_t>()[0] = -1;
  expect_error(bad, "seq_len_max is -1; it must be in [0, 3]");

  // The gradient checks the forward outputs and incoming gradients it is given.
  auto forward = run(lstm_node(c, dtype::float32, false), good, nullptr);
  std::vector<tensor> grad_inputs = good;
  grad_inputs.insert(grad_inputs.end(), forward.begin(), forward.end());
  grad_inputs.push_back(random_tensor<float>({3, 2, 5}, rng));
  grad_inputs.push_back(random_tensor<float>({3, 2, 4}, rng));  // h_grad: wrong cell size
  auto out = kernels::run_kernel(lstm_node(c, dtype::float32, true), grad_inputs);
  REQUIRE_FALSE(out.ok());
  INFO(out.error().message());
  CHECK(out.error().message().find("h_grad is [3,2,4]; it must be [time, batch, cell] [3,2,5]") != std::string::npos);
}

// LSTMBlockCell is BlockLSTM's step: the same outputs as BlockLSTM over one step, and its
// gradient op the same cs_prev gradient and (summed over the batch) the same gates'
// gradient as BlockLSTMGrad's bias gradient.
TEST_CASE("LSTMBlockCell and LSTMBlockCellGrad are BlockLSTM's single step", "[rnn]") {
  std::mt19937 rng(42);
  for (bool peephole : {false, true}) {
    INFO("peephole " << peephole);
    const lstm_case c{1, 3, 4, 20, 1, peephole, 0.0f};
    auto inputs = random_inputs<double>(c, rng);
    tf::NodeDef cell_node = lstm_node(c, dtype::float64, false);
    cell_node.set_op("LSTMBlockCell");
    std::vector<tensor> cell_inputs(inputs.begin() + 1, inputs.end());
    cell_inputs[0] = tensor(dtype::float64, {c.batch, c.input});
    std::copy_n(inputs[1].data<double>(), c.batch * c.input, cell_inputs[0].data<double>());
    auto cell_out = run(cell_node, cell_inputs, nullptr);
    auto block_out = run(lstm_node(c, dtype::float64, false), inputs, nullptr);
    REQUIRE(cell_out.size() == 7);
    for (std::size_t k = 0; k < 7; ++k) {
      REQUIRE(cell_out[k].shape() == tensor_shape({c.batch, c.cell}));
      for (std::int64_t e = 0; e < cell_out[k].num_elements(); ++e) {
        REQUIRE(at<double>(cell_out[k], e) == Approx(at<double>(block_out[k], e)).margin(1e-13));
      }
    }
    const tensor cs_grad = random_tensor<double>({c.batch, c.cell}, rng);
    const tensor h_grad = random_tensor<double>({c.batch, c.cell}, rng);
    tf::NodeDef cell_grad_node = lstm_node(c, dtype::float64, true);
    cell_grad_node.set_op("LSTMBlockCellGrad");
    std::vector<tensor> cell_grad_inputs = cell_inputs;
    cell_grad_inputs.insert(cell_grad_inputs.end(), cell_out.begin(), cell_out.begin() + 6);
    cell_grad_inputs.push_back(cs_grad);
    cell_grad_inputs.push_back(h_grad);
    auto cell_grads = run(cell_grad_node, cell_grad_inputs, nullptr);
    std::vector<tensor> block_grad_inputs = inputs;
    block_grad_inputs.insert(block_grad_inputs.end(), block_out.begin(), block_out.end());
    tensor cs_grad_3d(dtype::float64, {1, c.batch, c.cell}), h_grad_3d(dtype::float64, {1, c.batch, c.cell});
    std::copy_n(cs_grad.data<double>(), cs_grad.num_elements(), cs_grad_3d.data<double>());
    std::copy_n(h_grad.data<double>(), h_grad.num_elements(), h_grad_3d.data<double>());
    block_grad_inputs.push_back(cs_grad_3d);
    block_grad_inputs.push_back(h_grad_3d);
    auto block_grads = run(lstm_node(c, dtype::float64, true), block_grad_inputs, nullptr);
    REQUIRE(cell_grads.size() == 5);
    REQUIRE(cell_grads[1].shape() == tensor_shape({c.batch, 4 * c.cell}));
    for (std::int64_t e = 0; e < cell_grads[0].num_elements(); ++e) {  // cs_prev_grad
      REQUIRE(at<double>(cell_grads[0], e) == Approx(at<double>(block_grads[1], e)).margin(1e-13));
    }
    for (std::int64_t col = 0; col < 4 * c.cell; ++col) {  // b_grad = dicfo's column sums
      double sum = 0;
      for (std::int64_t b = 0; b < c.batch; ++b) sum += at<double>(cell_grads[1], b * 4 * c.cell + col);
      REQUIRE(sum == Approx(at<double>(block_grads[7], col)).margin(1e-13));
    }
    for (std::size_t k = 0; k < 3; ++k) {  // peephole gradients
      for (std::int64_t e = 0; e < c.cell; ++e) {
        REQUIRE(at<double>(cell_grads[2 + k], e) == Approx(at<double>(block_grads[4 + k], e)).margin(1e-13));
      }
    }
  }
}

}  // namespace
}  // namespace troupe
