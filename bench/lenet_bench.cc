// One training step of LeNet-5 (the model zoo's `lenet` and the baseline of
// ../shared/notes/baselines.md: conv 5x5x6 SAME ReLU, max-pool 2, conv 5x5x16 VALID ReLU,
// max-pool 2, dense 120 ReLU, dense 84 ReLU, dense 10; NHWC 28x28x1,
// batch 64, softmax cross-entropy, plain SGD) through actors::session on a local cluster,
// the batch fed as placeholders. The PyTorch peer is bench/peers/lenet_peer.py.
//
//   build/bench/bench_lenet --benchmark_counters_tabular=true
//
// real_time is ms per step; items_per_second is images per second. Args: threads.
#include "bench/bench_util.h"
#include "graph/nn.h"
#include "graph/train.h"
#include "graph/variables.h"

namespace troupe::bench {
namespace {

training_model build_lenet() {
  const std::int64_t batch = size(64, 2);
  training_model m;
  auto& root = m.root;
  graph::variable_collection vars;
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {batch, 28, 28, 1});
  auto labels = ops::placeholder(root.with_name("labels"), dtype::int32, {batch});
  auto h = nn::conv2d(root, vars, x, 6,
                      {.kernel_height = 5, .kernel_width = 5, .activation = ops::relu, .name = "conv1"});
  h = nn::max_pool(root, h, 2, 2);
  h = nn::conv2d(root, vars, h, 16,
                 {.kernel_height = 5, .kernel_width = 5, .padding = "VALID", .activation = ops::relu,
                  .name = "conv2"});
  h = nn::max_pool(root, h, 2, 2);
  h = ops::reshape(root, h, ops::constant(root, tensor::from_vector<std::int32_t>({-1, 5 * 5 * 16})));
  h = nn::dense(root, vars, h, 120, {.activation = ops::relu, .name = "dense1"});
  h = nn::dense(root, vars, h, 84, {.activation = ops::relu, .name = "dense2"});
  auto logits = nn::dense(root, vars, h, 10, {.name = "logits"});
  auto loss = mean_xent(root, logits, labels);
  finish_classifier(m, vars, loss, "x", {batch, 28, 28, 1}, 10, 4);
  return m;
}

void lenet_step(benchmark::State& state) {
  run_training(state, build_lenet(), static_cast<int>(state.range(0)));
}

}  // namespace

BENCHMARK(lenet_step)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace troupe::bench

BENCHMARK_MAIN();
