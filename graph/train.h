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
//     dtype (use_locking false);
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

}  // namespace troupe::train
