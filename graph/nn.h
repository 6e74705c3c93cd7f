// Layers: graph builders for common neural-network blocks, in TensorFlow's layer
// conventions (NHWC images, BasicLSTMCell gates, embedding_lookup partition strategies).
//
//   auto root = graph::scope::new_root();
//   graph::variable_collection vars;
//   auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 784});
//   output h = nn::dense(root, vars, x, 128, {.activation = ops::relu, .name = "hidden"});
//   h = nn::dropout(root, h, 0.5, /*seed=*/3, /*training=*/true);
//   output logits = nn::dense(root, vars, h, 10, {.name = "logits"});
//   // vars.trainable: hidden/kernel, hidden/bias, logits/kernel, logits/bias
//
// Every layer that owns weights takes the variable_collection to record them in (trainable
// weights in `trainable` and `global`; batch_norm's moving statistics in `global` only,
// and its update ops in `update_ops`) and builds its nodes under s.sub(name). Variables
// are named "<name>/kernel", "<name>/bias", ... as TensorFlow names them; a name taken
// twice gets a suffix from the scope ("dense/kernel_1"), so give layers distinct names.
//
// Initial values come from the layer's initializers with a seed derived from
// options.seed and each variable's full name (graph/variables.h): a graph built twice
// starts from the same values, and no two variables start alike by accident.
//
// Shapes: the dimension a layer's weights depend on (dense: x's last; conv2d: channels)
// must be known when the layer is built. Errors are recorded in the scope, as every
// builder error is, and the outputs are then invalid.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/builder.h"
#include "graph/initializers.h"
#include "graph/variables.h"

namespace troupe::nn {

using graph::operation;
using graph::output;
using graph::scope;
using graph::variable;
using graph::variable_collection;

// An element-wise activation, such as ops::relu; empty: none (linear).
using activation_fn = std::function<output(const scope&, output)>;

struct dense_options {
  activation_fn activation;
  bool use_bias = true;
  init::initializer kernel_initializer = init::glorot_uniform_initializer();
  init::initializer bias_initializer = init::zeros_initializer();
  std::int64_t seed = 0;
  bool trainable = true;
  std::string name = "dense";
};

// activation(x kernel + bias): x [batch, in] -> [batch, units]; kernel [in, units], bias [units].
output dense(const scope& s, variable_collection& vars, const output& x, int units,
             const dense_options& options = {});

struct conv2d_options {
  int kernel_height = 3;
  int kernel_width = 3;
  int stride = 1;                 // the same along height and width
  std::string padding = "SAME";   // or "VALID"
  activation_fn activation;
  bool use_bias = true;
  init::initializer kernel_initializer = init::glorot_uniform_initializer();
  init::initializer bias_initializer = init::zeros_initializer();
  std::int64_t seed = 0;
  bool trainable = true;
  std::string name = "conv2d";
};

// activation(Conv2D(x, kernel) + bias): x NHWC [batch, h, w, in] -> [batch, h', w',
// filters]; kernel [kernel_height, kernel_width, in, filters], bias [filters].
output conv2d(const scope& s, variable_collection& vars, const output& x, int filters,
              const conv2d_options& options = {});

// MaxPool / AvgPool over size x size windows (NHWC), stride along height and width.
output max_pool(const scope& s, const output& x, int size = 2, int stride = 2,
                const std::string& padding = "VALID");
output avg_pool(const scope& s, const output& x, int size = 2, int stride = 2,
                const std::string& padding = "VALID");

struct batch_norm_options {
  double momentum = 0.99;  // moving = momentum * moving + (1 - momentum) * batch statistic
  double epsilon = 1e-3;
  bool center = true;      // learn beta (offset)
  bool scale = true;       // learn gamma (scale)
  std::string name = "batch_norm";
};

// FusedBatchNormV3 over the last dimension of x ([batch, channels] or NHWC). Variables
// gamma (ones), beta (zeros), moving_mean (zeros), moving_variance (ones). training:
// normalizes with the batch's statistics and adds to vars.update_ops one
// AssignSubVariableOp per moving statistic, moving -= (moving - batch) * (1 - momentum)
// (TensorFlow's batch_variance output is the unbiased one); otherwise normalizes with the
// moving statistics and adds no update.
output batch_norm(const scope& s, variable_collection& vars, const output& x, bool training,
                  const batch_norm_options& options = {});

// Inverted dropout: during training each element is kept with probability 1 - rate and
// scaled by 1 / (1 - rate) (keep = RandomUniform >= rate, seeded as init:: seeds);
// otherwise, or when rate is 0, x itself. REQUIRES 0 <= rate < 1 (else a scope error).
output dropout(const scope& s, const output& x, double rate, std::int64_t seed, bool training);

// An LSTM cell's weights, as TensorFlow's BasicLSTMCell keeps them.
struct lstm_weights {
  variable kernel;  // [input_size + units, 4 * units]; gate columns i, j, f, o
  variable bias;    // [4 * units], zeros
  int units = 0;
  double forget_bias = 1.0;
};

struct lstm_state {
  output c;  // [batch, units]
  output h;  // [batch, units]
};

struct lstm_options {
  double forget_bias = 1.0;
  init::initializer kernel_initializer = init::glorot_uniform_initializer();
  init::initializer bias_initializer = init::zeros_initializer();
  std::int64_t seed = 0;
  bool trainable = true;
  std::string name = "lstm";
  // lstm(): one BlockLSTM op over all the steps (fused_lstm) instead of one cell per step.
  bool fused = false;
};

lstm_weights make_lstm_weights(const scope& s, variable_collection& vars, int input_size,
                               int units, dtype type, const lstm_options& options = {});

// One step: i, j, f, o = split(concat(x, h) kernel + bias);
// c' = c sigmoid(f + forget_bias) + sigmoid(i) tanh(j); h' = tanh(c') sigmoid(o).
lstm_state lstm_cell(const scope& s, const lstm_weights& weights, const output& x,
                     const lstm_state& state);

// Zeros of shape [batch, units], batch taken from x's first dimension.
lstm_state lstm_zero_state(const scope& s, const output& x, int units);

struct lstm_result {
  std::vector<output> outputs;  // h after each step
  lstm_state final_state;
  lstm_weights weights;
};

// An LSTM unrolled over `inputs` (one [batch, input_size] tensor per time step), starting
// from zeros; one set of weights shared by all steps, step t built under "<name>/t". With
// options.fused, the steps are stacked into one fused_lstm (same weights, same values)
// and its outputs unstacked.
lstm_result lstm(const scope& s, variable_collection& vars, const std::vector<output>& inputs,
                 int units, const lstm_options& options = {});

struct fused_lstm_result {
  output outputs;  // h after each step, [time, batch, units]
  lstm_state final_state;
  lstm_weights weights;
};

// The LSTM of lstm() over a whole sequence x [time, batch, input_size] (time may be
// unknown until run time) in one BlockLSTM op, as TensorFlow's LSTMBlockFusedCell: the
// cell of lstm_cell with the same weights (names, layout, forget_bias), starting from
// zeros, without peepholes or cell clipping. Its gradient is one BlockLSTMGrad, which
// computes the weights' gradient as one product over all steps instead of one per step
// and a sum (kernels/cpu/rnn_kernels.cc); on the benchmark's language model it trains
// about twice as fast as the unrolled cells (doc/benchmarks.md).
fused_lstm_result fused_lstm(const scope& s, variable_collection& vars, const output& x, int units,
                             const lstm_options& options = {});

struct embedding_options {
  init::initializer initializer = init::truncated_normal_initializer(1.0);
  std::int64_t seed = 0;
  bool trainable = true;
  std::string name = "embedding";
  // How embedding_lookup maps ids to the shards: "mod" or "div", recorded on the shards so
  // that checkpoints hold the table in id order (and restore it onto any number of
  // shards) and a lookup with the other strategy is an error. Empty (the default): not
  // recorded; checkpoints then hold the shards' rows one after the other, which is the
  // table in id order for "div" (TensorFlow's Saver does the same).
  std::string partition_strategy;
};

// A [vocab_size, dim] table split by rows into num_shards variables "<name>/part_<i>":
// shard i has vocab_size / num_shards rows, plus one when i < vocab_size % num_shards
// (TensorFlow's fixed_size_partitioner). With "mod" shard i holds the ids with
// id % num_shards == i (row id / num_shards); with "div" it holds a contiguous range.
// Each part's VarHandleOp carries `_save_slice_info` (TensorFlow's SaveSliceInfo spec:
// "<name> <vocab_size> <dim> <first row>,<rows>:-") and, when options.partition_strategy
// is set, `_partition_strategy`, so that a checkpoint holds the whole table in id order
// and restores it onto any number of shards (cluster/checkpoint_manager.h).
std::vector<variable> make_embedding(const scope& s, variable_collection& vars,
                                     std::int64_t vocab_size, std::int64_t dim, int num_shards,
                                     dtype type, const embedding_options& options = {});

// Rows of the sharded table for `ids` (int32 or int64, any shape): ids.shape + [dim].
// One shard: ResourceGather. Several: ids are split by shard with DynamicPartition, each
// shard is read with ResourceGather and DynamicStitch puts the rows back in order.
// Gradients reach the ResourceGather outputs; train::minimize turns them into sparse
// updates of the shards.
output embedding_lookup(const scope& s, const std::vector<variable>& shards, const output& ids,
                        const std::string& partition_strategy = "mod",
                        const std::string& name = "embedding_lookup");

// Sampled softmax (TensorFlow 1's tf.nn.sampled_softmax_loss): a softmax over the true
// classes and num_sampled classes drawn for the whole batch, instead of all num_classes.
// For training only: it estimates (and is generally below) the full softmax
// cross-entropy, which evaluation should use. Per step:
//   1. LogUniformCandidateSampler(labels, unique = true, range_max = num_classes, seed =
//      init::k_graph_seed, seed2 = seed) draws the candidates S and the expected counts
//      Q of the true and the sampled classes (classes should be ordered by decreasing
//      frequency: P(k) is log-uniform);
//   2. the rows of weights and biases for labels then S are gathered with one
//      embedding_lookup each (ResourceGather: minimize updates only those rows);
//   3. logits = inputs . w^T + b, for the true classes [batch, num_true] and the sampled
//      ones [batch, num_sampled], each minus log(Q);
//   4. with remove_accidental_hits, a sampled logit whose class is one of the row's true
//      classes (ComputeAccidentalHits) gets -FLT_MAX added, so it drops out of the softmax;
//   5. the loss is SoftmaxCrossEntropyWithLogits over [true | sampled] with labels
//      1 / num_true on the true columns and 0 elsewhere.
//
// weights: [num_classes, dim] as one variable or split by rows into shards as
// make_embedding splits them (partition_strategy "mod" or "div", as embedding_lookup);
// biases: [num_classes], one variable or shards split alike. labels: int32 or int64
// [batch, num_true], each in [0, num_classes). inputs: [batch, dim] of the weights' dtype
// (float or double), dim known. REQUIRES 1 <= num_sampled <= num_classes. Errors are
// recorded in the scope (the outputs are then invalid). Nodes are built under s.sub(name).
struct sampled_logits {
  output logits;          // [batch, num_true + num_sampled]
  output labels;          // alike: 1 / num_true for the true classes, 0 for the sampled
  operation sampler;      // LogUniformCandidateSampler: sampled_candidates [num_sampled],
                          // true_expected_count [batch, num_true], sampled_expected_count
};

// Steps 1 to 4: the logits and labels the loss is computed from.
sampled_logits compute_sampled_logits(const scope& s, const std::vector<variable>& weights,
                                      const std::vector<variable>& biases, const output& labels,
                                      const output& inputs, int num_sampled,
                                      std::int64_t num_classes, int num_true = 1,
                                      bool remove_accidental_hits = true, std::int64_t seed = 0,
                                      const std::string& partition_strategy = "mod",
                                      const std::string& name = "sampled_softmax_loss");

// The per-example loss [batch].
output sampled_softmax_loss(const scope& s, const std::vector<variable>& weights,
                            const std::vector<variable>& biases, const output& labels,
                            const output& inputs, int num_sampled, std::int64_t num_classes,
                            int num_true = 1, bool remove_accidental_hits = true,
                            std::int64_t seed = 0, const std::string& partition_strategy = "mod",
                            const std::string& name = "sampled_softmax_loss");

}  // namespace troupe::nn
