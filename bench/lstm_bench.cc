// One training step of an LSTM language model: vocabulary 10,000, embedding and hidden
// size 512, one BasicLSTMCell layer unrolled 20 steps, batch 32, plain SGD, through
// actors::session on a local cluster. Word ids and next-word labels are fed as
// placeholders (time-major, [unroll, batch]). Two output layers:
//
//   full      dense 512 -> 10,000 and softmax cross-entropy over the whole vocabulary;
//   sampled   sampled softmax with 512 classes drawn per step from the log-uniform (Zipf)
//             sampler: logits of the true class and the sampled ones from ResourceGather
//             rows of a [10,000, 512] weight (so its update is sparse), corrected by
//             log(expected count), with the true class at index 0. This is
//             tf.nn.sampled_softmax_loss without remove_accidental_hits, built from ops
//             because graph/nn.h has no sampled_softmax_loss yet; the samples are drawn
//             by the client when the batches are made, as the peer does.
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

graph::output gather(const graph::scope& s, const graph::variable& v, const graph::output& ids) {
  return s.add("ResourceGather", {v.handle, ids}, {{"dtype", graph::attr_value(v.type)}}).out();
}

// The log-uniform sampler's probability of class k among `vocab` (TensorFlow's
// LogUniformCandidateSampler): log((k + 2) / (k + 1)) / log(vocab + 1).
double log_uniform_probability(std::int64_t k, std::int64_t vocab) {
  return std::log((k + 2.0) / (k + 1.0)) / std::log(vocab + 1.0);
}

// Sampled softmax loss over `h` [n, hidden] and `labels` [n]; candidates and the log
// expected counts are placeholders the batches fill.
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
  auto candidates = ops::placeholder(root.with_name("candidates"), dtype::int32, {shape.samples});
  auto log_q_sampled = ops::placeholder(root.with_name("log_q_sampled"), dtype::float32, {shape.samples});
  auto log_q_true = ops::placeholder(root.with_name("log_q_true"), dtype::float32,
                                     {shape.batch * shape.unroll});
  // True class: one row of the weights per example, dotted with h.
  auto true_logits = ops::sub(s, ops::add(s, ops::sum(s, ops::mul(s, h, gather(s, weights, labels)), i32(s, {1})),
                                          gather(s, biases, labels)),
                              log_q_true);
  true_logits = ops::reshape(s, true_logits, i32(s, {-1, 1}));
  // Sampled classes: [n, hidden] x [samples, hidden]^T.
  auto sampled_logits = ops::matmul(s, h, gather(s, weights, candidates), false, true);
  sampled_logits = ops::sub(s, ops::add(s, sampled_logits, gather(s, biases, candidates)), log_q_sampled);
  auto logits = ops::concat(s, {true_logits, sampled_logits}, ops::scalar(s, std::int32_t{1}));
  auto zeros = ops::constant(s, tensor::zeros(dtype::int32, {shape.batch * shape.unroll}));
  return mean_xent(root, logits, zeros);
}

training_model build_lm(bool sampled) {
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
  auto steps = root.add("Unpack", {embedded},
                        {{"num", graph::attr_value(shape.unroll)}, {"axis", graph::attr_value(0)}});
  auto rnn = nn::lstm(root, vars, steps.outputs, static_cast<int>(shape.hidden));
  auto h = ops::concat(root, rnn.outputs, ops::scalar(root, std::int32_t{0}));  // [unroll * batch, hidden]
  graph::output loss;
  if (sampled) {
    loss = sampled_softmax(root, vars, h, labels, shape);
  } else {
    auto logits = nn::dense(root, vars, h, static_cast<int>(shape.vocab), {.name = "softmax"});
    loss = mean_xent(root, logits, labels);
  }
  auto train_op = train::minimize(root, train::gradient_descent(0.1), loss, vars);
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
    if (sampled) {
      tensor candidates(dtype::int32, {shape.samples});
      tensor log_q_sampled(dtype::float32, {shape.samples});
      tensor log_q_true(dtype::float32, {n});
      auto log_q = [&](std::int64_t k) {
        return static_cast<float>(std::log(shape.samples * log_uniform_probability(k, shape.vocab)));
      };
      for (std::int64_t i = 0; i < shape.samples; ++i) {
        candidates.flat<std::int32_t>()[i] = log_uniform();
        log_q_sampled.flat<float>()[i] = log_q(candidates.flat<std::int32_t>()[i]);
      }
      for (std::int64_t i = 0; i < n; ++i) log_q_true.flat<float>()[i] = log_q(label_batch.flat<std::int32_t>()[i]);
      feeds.emplace_back("candidates", candidates);
      feeds.emplace_back("log_q_sampled", log_q_sampled);
      feeds.emplace_back("log_q_true", log_q_true);
    }
    m.batches.push_back(std::move(feeds));
  }
  m.items_per_step = n;
  return m;
}

void lstm_step(benchmark::State& state, bool sampled) {
  run_training(state, build_lm(sampled), static_cast<int>(state.range(0)));
}

}  // namespace

BENCHMARK_CAPTURE(lstm_step, full, false)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(lstm_step, sampled, true)->ArgName("threads")->Arg(1)->Arg(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace troupe::bench

BENCHMARK_MAIN();
