// The model zoo: the models a scenario can name, built with the nn:: layers.
//
//   mlp    fully connected layers with ReLU (hidden_units, input side first), then 10
//          logits: 784-512-512-10 by default.
//   lenet  LeNet-5 with ReLU and max pooling: conv 5x5x6 (SAME), max pool 2x2, conv
//          5x5x16 (VALID), max pool 2x2, dense 120, dense 84, dense 10.
//
// Both read images as float [batch, 784] scaled to [0, 1] and labels as int32 [batch].
// Variables are created in `vars` under fixed names, so two graphs built with the same
// model share variables by name when they run on one cluster (a worker's training graph
// and the evaluation graph, or the graphs of several workers).
//
//   graph::variable_collection vars;
//   auto m = scenarios::build_model(root, vars, scenario.model(), images, labels, true, seed);
//   auto train_op = train::minimize(root, optimizer, m->loss, vars, step);
#pragma once

#include <cstdint>

#include "graph/builder.h"
#include "graph/variables.h"
#include "scenarios/scenario.pb.h"

namespace troupe::scenarios {

struct model_outputs {
  graph::output logits;   // float [batch, 10]
  graph::output loss;     // float scalar: mean softmax cross entropy
  graph::output correct;  // int32 scalar: how many predictions equal the label
};

// Errors: an unknown model name (listing the valid ones), or a builder error.
result<model_outputs> build_model(const graph::scope& s, graph::variable_collection& vars,
                                  const scenario::Model& model, const graph::output& images,
                                  const graph::output& labels, bool training, std::int64_t seed);

}  // namespace troupe::scenarios
