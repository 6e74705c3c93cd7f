#include "scenarios/model_zoo.h"

#include "graph/nn.h"
#include "graph/ops.h"

namespace troupe::scenarios {

namespace {

using graph::output;
using graph::scope;

output relu(const scope& s, output x) { return ops::relu(s, std::move(x)); }

output mlp(const scope& s, graph::variable_collection& vars, const scenario::Model& model, output x,
           std::int64_t seed) {
  std::vector<int> hidden(model.hidden_units().begin(), model.hidden_units().end());
  if (hidden.empty()) hidden = {512, 512};
  for (std::size_t i = 0; i < hidden.size(); ++i) {
    nn::dense_options o;
    o.activation = relu;
    o.kernel_initializer = init::he_normal_initializer();
    o.seed = seed;
    o.name = str_cat("hidden", i + 1);
    x = nn::dense(s, vars, x, hidden[i], o);
  }
  nn::dense_options o;
  o.seed = seed;
  o.name = "logits";
  return nn::dense(s, vars, x, 10, o);
}

// LeNet-5 (LeCun et al., 1998) with ReLU and max pooling: the 28x28 image padded to keep
// its size in the first convolution (the original took 32x32 inputs).
output lenet(const scope& s, graph::variable_collection& vars, output x, std::int64_t seed) {
  x = ops::reshape(s.with_name("image"), x, ops::constant(s, tensor::from_vector<std::int32_t>({-1, 28, 28, 1})));
  struct conv_layer {
    int filters;
    const char* padding;
    const char* name;
  };
  for (const conv_layer& layer : {conv_layer{6, "SAME", "conv1"}, conv_layer{16, "VALID", "conv2"}}) {
    nn::conv2d_options c;
    c.kernel_height = c.kernel_width = 5;
    c.padding = layer.padding;
    c.activation = relu;
    c.kernel_initializer = init::he_normal_initializer();
    c.seed = seed;
    c.name = layer.name;
    x = nn::conv2d(s, vars, x, layer.filters, c);
    x = nn::max_pool(s, x, 2, 2);
  }
  // 28x28 -> conv1 28x28x6 -> 14x14x6 -> conv2 10x10x16 -> 5x5x16.
  x = ops::reshape(s.with_name("flatten"), x, ops::constant(s, tensor::from_vector<std::int32_t>({-1, 5 * 5 * 16})));
  for (auto [units, name] : {std::pair{120, "fc1"}, std::pair{84, "fc2"}}) {
    nn::dense_options d;
    d.activation = relu;
    d.kernel_initializer = init::he_normal_initializer();
    d.seed = seed;
    d.name = name;
    x = nn::dense(s, vars, x, units, d);
  }
  nn::dense_options l;
  l.seed = seed;
  l.name = "logits";
  return nn::dense(s, vars, x, 10, l);
}

}  // namespace

result<model_outputs> build_model(const graph::scope& s, graph::variable_collection& vars,
                                  const scenario::Model& model, const graph::output& images,
                                  const graph::output& labels, bool training, std::int64_t seed) {
  model_outputs m;
  if (model.name() == "mlp") {
    m.logits = mlp(s, vars, model, images, seed);
  } else if (model.name() == "lenet") {
    m.logits = lenet(s, vars, images, seed);
  } else {
    return invalid_argument_error("unknown model '", model.name(), "' (valid: mlp, lenet)");
  }
  (void)training;  // neither model has dropout or batch normalization
  auto xent = ops::sparse_softmax_cross_entropy_with_logits(s.with_name("xent"), m.logits, labels);
  m.loss = ops::mean(s.with_name("loss"), xent.out(0), ops::constant(s, tensor::from_vector<std::int32_t>({0})));
  auto predicted = ops::argmax(s, m.logits, ops::scalar<std::int32_t>(s, 1), dtype::int32);
  auto hits = ops::cast(s, ops::equal(s, predicted, labels), dtype::int32);
  m.correct = ops::sum(s.with_name("correct"), hits, ops::constant(s, tensor::from_vector<std::int32_t>({0})));
  if (!s.ok()) return s.get_status().with_context(str_cat("building model '", model.name(), "'"));
  return m;
}

}  // namespace troupe::scenarios
