// One training step of the MLP 784-512-512-10 (ReLU, batch 64, softmax cross-entropy,
// plain SGD) through actors::session on a local cluster, the batch fed as placeholders.
// The PyTorch peer for the same model is bench/peers/mlp_peer.py.
//
//   build/bench/bench_mlp --benchmark_counters_tabular=true
//
// real_time is ms per step; items_per_second is examples per second. Args: threads (the
// compute pool's size; the report keeps the better of 1 and 2, as it does for the peer).
#include "bench/bench_util.h"
#include "graph/nn.h"
#include "graph/train.h"
#include "graph/variables.h"

namespace troupe::bench {
namespace {

training_model build_mlp() {
  const std::int64_t batch = size(64, 4);
  const int hidden = static_cast<int>(size(512, 16));
  training_model m;
  auto& root = m.root;
  graph::variable_collection vars;
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {batch, 784});
  auto labels = ops::placeholder(root.with_name("labels"), dtype::int32, {batch});
  auto h = nn::dense(root, vars, x, hidden, {.activation = ops::relu, .name = "hidden1"});
  h = nn::dense(root, vars, h, hidden, {.activation = ops::relu, .name = "hidden2"});
  auto logits = nn::dense(root, vars, h, 10, {.name = "logits"});
  auto loss = mean_xent(root, logits, labels);
  finish_classifier(m, vars, loss, "x", {batch, 784}, 10, 4);
  return m;
}

void mlp_step(benchmark::State& state) {
  run_training(state, build_mlp(), static_cast<int>(state.range(0)));
}

}  // namespace

BENCHMARK(mlp_step)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace troupe::bench

BENCHMARK_MAIN();
