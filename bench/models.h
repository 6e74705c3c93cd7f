// The models the benchmarks train, shared by the CPU programs (bench_alexnet, bench_lstm)
// and bench_gpu (the same steps on a GPU against PyTorch's there). Each builder returns a
// training_model (bench_util.h): its graph, initializer, train op and fed batches, with
// small shapes under TROUPE_BENCH_SMOKE.
#pragma once

#include <algorithm>
#include <cmath>

#include "bench/bench_util.h"
#include "graph/attr.h"
#include "graph/nn.h"
#include "graph/train.h"
#include "graph/variables.h"

namespace troupe::bench {

// AlexNet on 224x224x3 images of `batch` (alexnet_bench.cc says the layers): one training
// step is forward, backward and plain SGD (lr 0.01).
inline training_model build_alexnet(std::int64_t batch) {
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

// The LSTM language model (lstm_bench.cc says it): vocabulary 10,000, embedding and hidden
// 512, 20 steps, batch 32; the full softmax or the sampled one; nn::fused_lstm (one
// BlockLSTM op) or nn::lstm's cell per step.
struct lm_shape {
  std::int64_t vocab = size(10000, 50);
  std::int64_t hidden = size(512, 8);
  std::int64_t batch = size(32, 2);
  std::int64_t unroll = size(20, 3);
  std::int64_t samples = size(512, 8);
};

inline graph::output i32(const graph::scope& s, std::vector<std::int32_t> v) {
  return ops::constant(s, tensor::from_vector<std::int32_t>(v));
}

// nn::sampled_softmax_loss over `h` [n, hidden] and `labels` [n]: a [vocab, hidden] weight
// and [vocab] bias, 512 classes drawn per step in the graph, accidental hits removed.
inline graph::output sampled_softmax(const graph::scope& root, graph::variable_collection& vars,
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

inline training_model build_lm(bool sampled, bool fused) {
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

}  // namespace troupe::bench
