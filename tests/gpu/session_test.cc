// Whole steps on a real GPU through sessions: a small MLP trained for a few steps on the
// GPU (nodes with GPU kernels there, the variables and their updates too: the device's
// ResourceApply* kernels; the rest on the CPU, Send/Recv between) takes the same losses as
// on the CPU alone with each optimizer, and fetches come back in host memory.
// Skipped (CTest SKIPPED) on a machine without a GPU.
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "actors/session.h"
#include "graph/nn.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "kernels/device.h"
#include "tests/skip.h"

namespace troupe::testing {
namespace {

const skip_when no_gpu([]() -> std::optional<std::string> {
  if (kernels::visible_gpus() == 0) return "no GPU on this machine (or troupe built without CUDA)";
  return std::nullopt;
});

struct mlp {
  std::shared_ptr<const graph::graph> graph;
  std::string train, init;
};

mlp build_mlp(const train::optimizer& opt) {
  auto root = graph::scope::new_root();
  graph::variable_collection vars;
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 20});
  auto labels = ops::placeholder(root.with_name("labels"), dtype::int32, {-1});
  nn::dense_options hidden, output;
  hidden.activation = ops::relu;
  hidden.seed = 1;
  hidden.name = "hidden";
  output.seed = 2;
  output.name = "logits";
  auto h = nn::dense(root, vars, x, 32, hidden);
  auto logits = nn::dense(root, vars, h, 10, output);
  auto xent = ops::sparse_softmax_cross_entropy_with_logits(root, logits, labels);
  auto loss = ops::mean(root.with_name("loss"), xent.out(0), ops::constant(root, tensor::from_vector<std::int32_t>({0})));
  auto step = train::minimize(root.with_name("train"), opt, loss, vars);
  REQUIRE(step.ok());
  graph::global_variables_initializer(root.with_name("init"), vars);
  auto g = root.to_graph();
  if (!g.ok()) FAIL(g.error().to_string());
  return {std::make_shared<const graph::graph>(std::move(*g)), step->node, "init"};
}

std::vector<float> losses(int gpus, int steps, const train::optimizer& opt) {
  mlp m = build_mlp(opt);
  actors::session_options o;
  o.gpus = gpus;
  auto s = actors::session::create(m.graph, o);
  if (!s.ok()) FAIL(s.error().to_string());
  REQUIRE((*s)->run({}, {}, {m.init}).ok());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  tensor x(dtype::float32, {16, 20});
  for (float& v : x.flat<float>()) v = u(rng);
  tensor labels(dtype::int32, {16});
  for (int i = 0; i < 16; ++i) labels.flat<std::int32_t>()[i] = i % 10;
  std::vector<float> out;
  for (int i = 0; i < steps; ++i) {
    auto r = (*s)->run({{"x", x}, {"labels", labels}}, {"loss"}, {m.train});
    if (!r.ok()) FAIL("step " << i << " with " << gpus << " GPUs: " << r.error().to_string());
    REQUIRE(r->at(0).on_host());
    out.push_back(r->at(0).scalar_value<float>());
  }
  return out;
}

}  // namespace

TEST_CASE("an MLP trains on the GPU as on the CPU, its variables updated on the GPU by each optimizer",
          "[gpu][session]") {
  for (const auto& [label, opt] : std::vector<std::pair<std::string, train::optimizer>>{
           {"gradient descent", train::gradient_descent(0.5)},
           {"momentum", train::momentum(0.1, 0.9)},
           {"nesterov momentum", train::momentum(0.1, 0.9, true)},
           {"adagrad", train::adagrad(0.1)},
           {"adam", train::adam(0.01)},
           {"rms_prop", train::rms_prop(0.01, 0.9, 0.5)}}) {
    const std::vector<float> cpu = losses(0, 8, opt), gpu = losses(1, 8, opt);
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      INFO(label << ", step " << i << ": CPU loss " << cpu[i] << ", GPU loss " << gpu[i]);
      CHECK(std::fabs(cpu[i] - gpu[i]) <= 1e-4 * std::fabs(cpu[i]) + 1e-5);
    }
    INFO(label);
    CHECK(gpu.back() < gpu.front());  // it learns
  }
}

}  // namespace troupe::testing
