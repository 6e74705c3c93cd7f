// One training step of an LSTM language model: vocabulary 10,000, embedding and hidden
// size 512, one LSTM layer over 20 steps, batch 32, plain SGD, through actors::session on
// a local cluster. The layer is nn::fused_lstm (one BlockLSTM op, as TensorFlow's
// LSTMBlockFusedCell; the `unrolled_*` runs build BasicLSTMCell's graph, one cell per
// step, with the same weights, for comparison in the same run). Word ids and next-word labels are fed as
// placeholders (time-major, [unroll, batch]). Two output layers:
//
//   full      dense 512 -> 10,000 and softmax cross-entropy over the whole vocabulary;
//   sampled   nn::sampled_softmax_loss (tf.nn.sampled_softmax_loss): 512 classes drawn
//             per step in the graph by the unique log-uniform (Zipf) sampler, the true
//             and sampled rows of a [10,000, 512] weight gathered (so its update is
//             sparse), logits corrected by log(expected count), accidental hits removed.
//
// The PyTorch peer is bench/peers/lstm_peer.py (torch.nn.LSTM, the same two losses).
//
//   build/bench/bench_lstm --benchmark_counters_tabular=true
//
// real_time is ms per step; items_per_second is words per second (batch x unroll per
// step). Args: threads.
#include <algorithm>
#include <cmath>

#include "bench/models.h"
#include "graph/attr.h"
#include "graph/nn.h"
#include "graph/train.h"
#include "graph/variables.h"
#include "kernels/kernel_registry.h"
#include "kernels/kernel_runner.h"

namespace troupe::bench {
namespace {

void lstm_step(benchmark::State& state, bool sampled, bool fused) {
  run_training(state, build_lm(sampled, fused), static_cast<int>(state.range(0)));
}

// The fused layer's two kernels alone (BlockLSTM, BlockLSTMGrad on the benchmark's
// shapes: 20 steps, batch 32, input and cell 512), built once, compute() timed.
void lstm_kernel(benchmark::State& state, bool backward) {
  const lm_shape shape;
  const std::int64_t time = shape.unroll, batch = shape.batch, cell = shape.hidden;
  std::mt19937 rng(42);
  tensor steps(dtype::int64, tensor_shape{});
  steps.data<std::int64_t>()[0] = time;
  std::vector<tensor> inputs = {steps,
                                uniform_tensor({time, batch, cell}, rng),
                                uniform_tensor({batch, cell}, rng),
                                uniform_tensor({batch, cell}, rng),
                                uniform_tensor({2 * cell, 4 * cell}, rng, -0.05f, 0.05f),
                                uniform_tensor({cell}, rng),
                                uniform_tensor({cell}, rng),
                                uniform_tensor({cell}, rng),
                                uniform_tensor({4 * cell}, rng)};
  compute_pool pool(static_cast<int>(state.range(0)));
  auto make = [&](const std::string& op) {
    tf::NodeDef node;
    node.set_name(op);
    node.set_op(op);
    (*node.mutable_attr())["T"] = graph::attr_value(dtype::float32);
    if (op == "BlockLSTMGrad") (*node.mutable_attr())["use_peephole"] = graph::attr_value(false);
    return node;
  };
  auto forward = kernels::run_kernel(make("BlockLSTM"), inputs, &pool);
  if (skip_on_error(state, forward)) return;
  std::vector<tensor> grad_inputs = inputs;
  grad_inputs.insert(grad_inputs.end(), forward->begin(), forward->end());
  grad_inputs.push_back(uniform_tensor({time, batch, cell}, rng));
  grad_inputs.push_back(uniform_tensor({time, batch, cell}, rng));
  const std::string op = backward ? "BlockLSTMGrad" : "BlockLSTM";
  const std::vector<tensor>& in = backward ? grad_inputs : inputs;
  auto checked = kernels::check_node(make(op), in);
  if (skip_on_error(state, checked)) return;
  auto kernel = kernels::kernel_registry::builtin().create("CPU", checked->node, *checked->op, checked->input_types,
                                                           checked->output_types);
  if (skip_on_error(state, kernel)) return;
  for (auto _ : state) {
    auto out = kernels::compute_once(**kernel, *checked, in, &pool);
    if (skip_on_error(state, out)) return;
    benchmark::DoNotOptimize(out->front().raw_data());
  }
  // Products: forward 2 x time x batch x (2 cell) x (4 cell) multiply-adds, backward twice that.
  const double flops = 2.0 * (backward ? 2.0 : 1.0) * static_cast<double>(time * batch * 2 * cell * 4 * cell);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK_CAPTURE(lstm_kernel, forward, false)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(lstm_kernel, backward, true)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(lstm_step, full, false, true)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(lstm_step, sampled, true, true)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(lstm_step, unrolled_full, false, false)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(lstm_step, unrolled_sampled, true, false)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace troupe::bench

BENCHMARK_MAIN();
