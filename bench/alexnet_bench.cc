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
#include "bench/models.h"

namespace troupe::bench {
namespace {

void alexnet_step(benchmark::State& state) {
  run_training(state, build_alexnet(size(16, 1)), static_cast<int>(state.range(0)));
}

}  // namespace

BENCHMARK(alexnet_step)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace troupe::bench

BENCHMARK_MAIN();
