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

#include "bench/bench_util.h"
#include "graph/attr.h"
#include "graph/nn.h"
#include "graph/train.h"
#include "graph/variables.h"
#include "kernels/kernel_registry.h"
#include "kernels/kernel_runner.h"

namespace troupe::bench {
namespace {

struct lm_shape {
  std::int64_t vocab = size(10000, 50);
  std::int64_t hidden = size(512, 8);
  std::int64_t batch = size(32, 2);
  std::int64_t unroll = size(20, 3);
  std::int64_t samples = size(512, 8);
};

graph::output i32(const graph::scope& s, std::vector<std::int32_t> v) {
  return ops::constant(s, tensor::from_vector<std::int32_t>(v));
}

// nn::sampled_softmax_loss over `h` [n, hidden] and `labels` [n]: a [vocab, hidden] weight
// and [vocab] bias, 512 classes drawn per step in the graph, accidental hits removed.
graph::output sampled_softmax(const graph::scope& root, graph::variable_collection& vars,
                              const graph::output& h, const graph::output& labels,
                              const lm_shape& shape) {
  const graph::scope s = root.sub("sampled_softmax");
  auto weights = graph::make_variable(s, "weights", {shape.vocab, shape.hidden}, dtype::float32,
                                      init::glorot_uniform_initializer(), 1);
  auto biases = graph::make_variable(s, "biases", {shape.vocab}, dtype::float32,
                                     init::zeros_initializer());
  vars.add(weights);
  vars.add(biases);
  auto per_example = nn::sampled_softmax_loss(root, {weights}, {biases},
                                              ops::reshape(root, labels, i32(root, {-1, 1})), h,
                                              static_cast<int>(shape.samples), shape.vocab,
                                              /*num_true=*/1, /*remove_accidental_hits=*/true,
                                              /*seed=*/7);
  return ops::mean(root.with_name("loss"), per_example, i32(root, {0}));
}

training_model build_lm(bool sampled, bool fused) {
  lm_shape shape;
  training_model m;
  auto& root = m.root;
  graph::variable_collection vars;
  const std::int64_t n = shape.batch * shape.unroll;
  auto ids = ops::placeholder(root.with_name("ids"), dtype::int32, {shape.unroll, shape.batch});
  auto labels = ops::placeholder(root.with_name("labels"), dtype::int32, {n});
  auto table = nn::make_embedding(root, vars, shape.vocab, shape.hidden, 1, dtype::float32,
                                  {.initializer = init::random_normal_initializer(0.1)});
  auto embedded = nn::embedding_lookup(root, table, ops::reshape(root, ids, i32(root, {-1})));
  embedded = ops::reshape(root, embedded,
                          i32(root, {static_cast<std::int32_t>(shape.unroll),
                                     static_cast<std::int32_t>(shape.batch),
                                     static_cast<std::int32_t>(shape.hidden)}));
  graph::output h;  // [unroll * batch, hidden]
  if (fused) {
    auto rnn = nn::fused_lstm(root, vars, embedded, static_cast<int>(shape.hidden));
    h = ops::reshape(root, rnn.outputs, i32(root, {-1, static_cast<std::int32_t>(shape.hidden)}));
  } else {
    auto steps = root.add("Unpack", {embedded},
                          {{"num", graph::attr_value(shape.unroll)}, {"axis", graph::attr_value(0)}});
    auto rnn = nn::lstm(root, vars, steps.outputs, static_cast<int>(shape.hidden));
    h = ops::concat(root, rnn.outputs, ops::scalar(root, std::int32_t{0}));
  }
  graph::output loss;
  if (sampled) {
    loss = sampled_softmax(root, vars, h, labels, shape);
  } else {
    auto logits = nn::dense(root, vars, h, static_cast<int>(shape.vocab), {.name = "softmax"});
    loss = mean_xent(root, logits, labels);
  }
  auto train_op = train::minimize(root, single_device_sgd(0.1), loss, vars);
  if (!train_op.ok()) {
    root.record(train_op.error());
    return m;
  }
  m.train_op = train_op->node;
  m.init_op = graph::global_variables_initializer(root, vars).node;

  std::mt19937 rng(42);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto log_uniform = [&] {
    auto k = static_cast<std::int64_t>(std::exp(unit(rng) * std::log(shape.vocab + 1.0))) - 1;
    return static_cast<std::int32_t>(std::clamp<std::int64_t>(k, 0, shape.vocab - 1));
  };
  for (int b = 0; b < 4; ++b) {
    tensor id_batch(dtype::int32, {shape.unroll, shape.batch});
    for (auto& x : id_batch.flat<std::int32_t>()) x = log_uniform();
    tensor label_batch(dtype::int32, {n});
    for (auto& x : label_batch.flat<std::int32_t>()) x = log_uniform();
    actors::feed_list feeds = {{"ids", id_batch}, {"labels", label_batch}};
    m.batches.push_back(std::move(feeds));
  }
  m.items_per_step = n;
  return m;
}

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
