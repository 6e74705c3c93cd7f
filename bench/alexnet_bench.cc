// One training step (forward, backward, SGD update) of AlexNet on 224x224x3 images, batch
// 16, through actors::session on a local cluster, the batch fed as placeholders.
//
// The layers, NHWC, all ReLU (no LRN, no dropout), with TensorFlow's padding so that the
// PyTorch peer (bench/peers/alexnet_peer.py) can match every shape exactly:
//   conv 11x11/4 64 VALID -> 54x54, max-pool 3/2 -> 26, conv 5x5 192 SAME, max-pool 3/2 -> 12,
//   conv 3x3 384, conv 3x3 256, conv 3x3 256 (SAME), max-pool 3/2 -> 5,
//   dense 6400 -> 4096, dense 4096 -> 4096, dense 4096 -> 1000, softmax cross-entropy.
//
//   build/bench/bench_alexnet --benchmark_counters_tabular=true
//
// real_time is ms per step; items_per_second is images per second. Args: threads.
#include "bench/bench_util.h"
#include "graph/nn.h"
#include "graph/train.h"
#include "graph/variables.h"

namespace troupe::bench {
namespace {

training_model build_alexnet() {
  const std::int64_t batch = size(16, 1);
  const std::int64_t image = size(224, 100);  // smoke: 100 -> 23 -> 11 -> 5 -> 2
  const int fc = static_cast<int>(size(4096, 64));
  const int classes = static_cast<int>(size(1000, 10));
  training_model m;
  auto& root = m.root;
  graph::variable_collection vars;
  auto x = ops::placeholder(root.with_name("images"), dtype::float32, {batch, image, image, 3});
  auto labels = ops::placeholder(root.with_name("labels"), dtype::int32, {batch});
  auto conv = [&](const graph::output& in, int filters, int k, int stride, const char* padding,
                  const char* name) {
    return nn::conv2d(root, vars, in, filters,
                      {.kernel_height = k, .kernel_width = k, .stride = stride, .padding = padding,
                       .activation = ops::relu, .name = name});
  };
  auto h = conv(x, 64, 11, 4, "VALID", "conv1");
  h = nn::max_pool(root, h, 3, 2);
  h = conv(h, 192, 5, 1, "SAME", "conv2");
  h = nn::max_pool(root, h, 3, 2);
  h = conv(h, 384, 3, 1, "SAME", "conv3");
  h = conv(h, 256, 3, 1, "SAME", "conv4");
  h = conv(h, 256, 3, 1, "SAME", "conv5");
  h = nn::max_pool(root, h, 3, 2);
  std::int64_t side = ((((image - 11) / 4 + 1 - 3) / 2 + 1 - 3) / 2 + 1 - 3) / 2 + 1;
  h = ops::reshape(root, h,
                   ops::constant(root, tensor::from_vector<std::int32_t>(
                                           {-1, static_cast<std::int32_t>(side * side * 256)})));
  h = nn::dense(root, vars, h, fc, {.activation = ops::relu, .name = "fc6"});
  h = nn::dense(root, vars, h, fc, {.activation = ops::relu, .name = "fc7"});
  auto logits = nn::dense(root, vars, h, classes, {.name = "fc8"});
  auto loss = mean_xent(root, logits, labels);
  finish_classifier(m, vars, loss, "images", {batch, image, image, 3}, static_cast<std::int32_t>(classes), 2);
  return m;
}

void alexnet_step(benchmark::State& state) {
  run_training(state, build_alexnet(), static_cast<int>(state.range(0)));
}

}  // namespace

BENCHMARK(alexnet_step)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace troupe::bench

BENCHMARK_MAIN();
