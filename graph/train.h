// Optimizers as graph builders: minimize() adds to the graph the gradients of a loss,
// the optimizer's slot variables and one ResourceApply* per variable, grouped into one
// train op, as TensorFlow 1's Optimizer.minimize does.
//
//   graph::variable_collection vars;
//   ... layers from graph/nn.h fill vars ...
//   graph::variable step = train::make_global_step(root, vars);
//   auto train_op = train::minimize(root, train::adam(1e-3), loss, vars, step);
//   if (!train_op.ok()) ...;
//   graph::operation init = graph::global_variables_initializer(root, vars);  // after minimize:
//                                                                            // slots are variables too
//   // run `init` once; each run of *train_op is one step.
//
// What minimize builds, for optimizer O ("GradientDescent", "Momentum", "Adagrad", "Adam",
// "RMSProp") and each trainable variable v that the loss depends on:
//   - gradients (graph::add_gradients) of `loss` with respect to every read of v: each
//     ReadVariableOp of v's handle (dense; several reads are summed) and each
//     ResourceGather of it (sparse: rows at indices);
//   - slot variables "<v.name>/O" (and "<v.name>/O_1") in the scope, of v's shape and
//     dtype, added to vars.global (not trainable): Momentum: accumulator (zeros);
//     Adagrad: accumulator (initial_accumulator); Adam: m, v (zeros) and the scalars
//     "beta1_power", "beta2_power" (initialized to beta1, beta2; multiplied by them after
//     every step's updates); RMSProp: ms (ones, as TensorFlow 1) and mom (zeros);
//   - "O/update_<v.name>/ResourceApply..." with the hyper-parameters as constants of v's
//     dtype (use_locking false) but a decayed learning rate ("O/learning_rate_decayed",
//     optimizer::decay_steps); for gradient descent, TroupeApplyGradientDescentMatMul
//     where the gradient is a MatMul's product (optimizer::fuse_matmul_updates);
//   - for sparse gradients: gradient descent adds ResourceScatterAdd(v, indices,
//     -lr * rows) (only the gathered rows change); the other optimizers turn the rows into
//     a dense gradient with UnsortedSegmentSum over v's first dimension and apply the dense
//     update (so, as TensorFlow's dense kernels, every row's slots decay each step; this
//     costs one full-size tensor per step for a large table);
//   - the train op: a NoOp named O depending on every update, on vars.update_ops
//     (batch-norm moving averages) and, when a global step is given, on
//     AssignAddVariableOp(global_step, 1), which itself runs after the updates.
//
// Errors (returned, and nothing more is added): an invalid or non-floating loss, an empty
// vars.trainable, a trainable variable of a dtype other than float or double that the
// loss depends on, a ResourceGather with batch_dims != 0 on a path to the loss
// (unimplemented, naming the variable), and no gradient reaching any trainable variable
// (invalid_argument listing them). A trainable variable the loss does not depend on is
// skipped, as TensorFlow 1 skips a variable whose gradient is None.
//
// Thread safety: as the builder.
#pragma once

#include <string>

#include "core/status.h"
#include "graph/builder.h"
#include "graph/variables.h"

namespace troupe::train {

using graph::operation;
using graph::output;
using graph::scope;
using graph::variable;
using graph::variable_collection;

enum class algorithm { gradient_descent, momentum, adagrad, adam, rms_prop };

// An optimizer's kind and hyper-parameters (the factories below fill in the ones that
// apply, with TensorFlow 1's defaults).
struct optimizer {
  algorithm kind = algorithm::gradient_descent;
  double learning_rate = 0.01;
  double momentum = 0.0;             // momentum, rms_prop
  bool use_nesterov = false;         // momentum, adam
  double initial_accumulator = 0.1;  // adagrad
  double beta1 = 0.9;                // adam
  double beta2 = 0.999;              // adam
  double decay = 0.9;                // rms_prop (the op's rho)
  double epsilon = 1e-8;             // adam, rms_prop
  // gradient_descent: a variable whose whole gradient is a MatMul's product (a dense
  // layer's kernel: x^T dy) requesting the variable's device is updated by
  // TroupeApplyGradientDescentMatMul(v, lr, x, dy), one gemm accumulating into the
  // variable, instead of MatMul + ResourceApplyGradientDescent: the gradient is never
  // written out and read back (AlexNet's first dense layer's is 151 MB; 5-10% of its
  // step and of the MLP's). The values differ from the unfused update's in rounding only.
  // Off by default: the product then runs where the variable lives, so in a graph whose
  // devices are assigned later (replica_device_setter puts variables on parameter
  // servers) the servers would compute it. Turn it on for single-device training.
  bool fuse_matmul_updates = false;
  // Learning-rate decay (TensorFlow 1's tf.train.exponential_decay): with decay_steps > 0
  // each step's rate is learning_rate * decay_rate ^ (global_step / decay_steps), the
  // exponent rounded down with staircase; computed where the global step lives, in the
  // variables' dtype, from its value when the step's updates start. Needs a global step.
  std::int64_t decay_steps = 0;  // 0: a constant learning rate
  double decay_rate = 1.0;
  bool staircase = false;

  // "GradientDescent", "Momentum", "Adagrad", "Adam", "RMSProp".
  std::string name() const;
};

optimizer gradient_descent(double learning_rate);
optimizer momentum(double learning_rate, double momentum, bool use_nesterov = false);
optimizer adagrad(double learning_rate, double initial_accumulator = 0.1);
optimizer adam(double learning_rate = 0.001, double beta1 = 0.9, double beta2 = 0.999,
               double epsilon = 1e-8);
optimizer rms_prop(double learning_rate, double decay = 0.9, double momentum = 0.0,
                   double epsilon = 1e-10);

// An int64 scalar variable "global_step" initialized to 0, added to vars.global.
variable make_global_step(const scope& s, variable_collection& vars);

// Builds one training step of `opt` on vars.trainable against `loss` (see above). A
// global_step that is not valid() (the default) means none.
[[nodiscard]] result<operation> minimize(const scope& s, const optimizer& opt, const output& loss,
                                         variable_collection& vars,
                                         const variable& global_step = variable{});

// ---- Synchronous replication (TensorFlow 1's SyncReplicasOptimizer, with backup workers).
//
//   auto sync = train::sync_replicas(train::gradient_descent(0.1), /*replicas_to_aggregate=*/3,
//                                    /*total_num_replicas=*/4);      // one backup worker
//   auto ops = train::minimize(root, sync, loss, vars, step, /*replica=*/w);
//
// Every replica (worker) builds the same graph but for its own `replica` index; the
// variables, their accumulators and the token queues are shared by name. What it adds:
//   - for each trainable variable v the loss reaches, an accumulator colocated with v,
//     shared as "<v.name>/sync_accumulator": a ResourceConditionalAccumulator (MEAN) of
//     the dense gradient, or, when v is only read by ResourceGather (an embedding), a
//     SparseConditionalAccumulator (SUM, the taken rows scaled by 1/replicas_to_aggregate,
//     so that every row is the mean over the step's gradients as a dense one would be);
//   - `train` (a replica's step): each gradient into its accumulator, tagged with the
//     fed `local_step` (an int64 Placeholder "sync_replicas/local_step"), then a token
//     from this replica's token queue; `next_local_step` is the global step read after
//     the token: feed it as the next step's local_step. The same in two steps: `apply`
//     (the gradients only), then `after_token` (waits for a token, then reads the global
//     step) — how cluster code keeps the wait for a token out of its step gate;
//   - `update` (the chief's, which cluster::sync_coordinator runs, never a worker): takes
//     the aggregate of replicas_to_aggregate gradients from every accumulator, then (after
//     every take) applies them with the base optimizer and adds 1 to the global step;
//   - `init`: every accumulator's global step := the global step (after a restore too);
//   - per replica r, a FIFO token queue "sync_token_queue_<r>" (int64 tokens) colocated
//     with the global step, `token_size[r]` (its size) and `token_enqueue[r]` (enqueues
//     the global step): the coordinator gives a replica a token after an update when
//     its queue is empty, so no replica takes another's token and none is ever handed
//     a stale one; `close_tokens` closes them all (waiting replicas fail `cancelled`).
// Semantics: a gradient computed at a local step older than its accumulator's step is
// dropped as stale, and so is a worker's second gradient for a step (a step it ran again
// after a failure: accumulators made here keep one per worker); a step's aggregate is of the first replicas_to_aggregate gradients
// to arrive (the others of that step are dropped: with total_num_replicas >
// replicas_to_aggregate they are the backups), summed in a fixed order (by worker
// index), so that with no backups the same inputs give the same bits on every run.
// TensorFlow differs in three ways: one token queue shared by every replica (a fast one
// may take a slow one's token and then work on a stale step), its default of
// replicas_to_aggregate initial tokens (every replica's first step counted twice), and
// a take of every gradient kept (more than required when the chief is late).
struct sync_replicas_optimizer {
  optimizer base;
  int replicas_to_aggregate = 1;
  int total_num_replicas = 1;
};

// total_num_replicas <= 0 means replicas_to_aggregate (no backups).
sync_replicas_optimizer sync_replicas(optimizer base, int replicas_to_aggregate, int total_num_replicas = 0);

struct sync_replicas_ops {
  operation train;         // a replica's step
  output local_step;       // fed: int64 scalar
  output next_local_step;  // fetched after train: int64 scalar
  operation apply;         // train's first half
  output after_token;      // train's second half: int64 scalar, like next_local_step
  operation update;        // the chief's step
  // The aggregates the update applies: (a take's output, the tensor the update reads in
  // its place). A chief may run the takes alone, fetching the first of each pair, then
  // the update feeding them as the second (how cluster::sync_coordinator keeps its
  // waiting for gradients out of the step gate).
  std::vector<std::pair<output, output>> aggregates;
  output step_after_update;  // the global step, read after `update`
  operation init;          // accumulators' global step := the global step
  output step_at_init;     // the global step init sets them to (fetch it with init)
  std::vector<output> token_size;         // per replica: int32 scalar
  std::vector<operation> token_enqueue;   // per replica
  operation close_tokens;
};

// Errors: minimize's; a global step that is not valid(); replicas_to_aggregate < 1;
// replica outside [0, max(total_num_replicas, replicas_to_aggregate)).
[[nodiscard]] result<sync_replicas_ops> minimize(const scope& s, const sync_replicas_optimizer& opt, const output& loss,
                                                 variable_collection& vars, const variable& global_step, int replica);

}  // namespace troupe::train
