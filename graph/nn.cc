#include "graph/nn.h"

#include <cfloat>
#include <numeric>

#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/ops.h"

namespace troupe::nn {

using graph::attr_value;
using graph::operation;

namespace {

bool fail(const scope& s, status error) {
  s.record(std::move(error));
  return false;
}

// The size of dimension `dim` of x's shape, which must be known; records an error naming
// the layer otherwise.
bool known_dim(const scope& s, const char* layer, const output& x, int rank, int dim,
               std::int64_t* out) {
  if (!x.shape.known_rank() || x.shape.rank() != rank) {
    return fail(s, invalid_argument_error(layer, ": input '", x.name(), "' must have rank ", rank,
                                          " but has shape ", x.shape.to_string()));
  }
  *out = x.shape.dim(dim);
  if (*out < 0) {
    return fail(s, invalid_argument_error(layer, ": dimension ", dim, " of input '", x.name(),
                                          "' (shape ", x.shape.to_string(),
                                          ") must be known to size the layer's weights"));
  }
  return true;
}

bool check_float(const scope& s, const char* layer, const output& x) {
  if (x.type == dtype::float32 || x.type == dtype::float64) return true;
  return fail(s, invalid_argument_error(layer, ": input '", x.name(), "' has dtype ",
                                        dtype_name(x.type), "; float or double needed"));
}

// Makes a variable, records it, and reports whether it is valid.
bool add_variable(const scope& s, variable_collection& vars, const std::string& name,
                  const tensor_shape& shape, dtype type, const init::initializer& init,
                  std::int64_t seed, bool trainable, variable* out,
                  const std::map<std::string, tf::AttrValue>& handle_attrs = {}) {
  *out = graph::make_variable(s, name, shape, type, init, seed, handle_attrs);
  if (!out->valid()) return false;
  vars.add(*out, trainable);
  return true;
}

output activate(const scope& s, const activation_fn& activation, const output& y) {
  return activation ? activation(s, y) : y;
}

tf::AttrValue window(int size) { return attr_value(std::vector<int>{1, size, size, 1}); }

output pool(const scope& s, const char* op, const output& x, int size, int stride,
            const std::string& padding) {
  if (size < 1 || stride < 1) {
    s.record(invalid_argument_error(op, ": size ", size, " and stride ", stride, " must be >= 1"));
    return output{};
  }
  return s.add(op, {x}, {{"ksize", window(size)}, {"strides", window(stride)},
                         {"padding", attr_value(padding)}})
      .out();
}

}  // namespace

output dense(const scope& s, variable_collection& vars, const output& x, int units,
             const dense_options& options) {
  if (!s.ok() || !x.valid()) return output{};
  const scope ls = s.sub(options.name);
  std::int64_t in = 0;
  if (!check_float(s, "dense", x) || !known_dim(s, "dense", x, 2, 1, &in)) return output{};
  if (units < 1) {
    s.record(invalid_argument_error("dense '", options.name, "': units is ", units, " but must be >= 1"));
    return output{};
  }
  variable kernel, bias;
  if (!add_variable(ls, vars, "kernel", {in, units}, x.type, options.kernel_initializer,
                    options.seed, options.trainable, &kernel)) {
    return output{};
  }
  output y = ops::matmul(ls, x, kernel.value);
  if (options.use_bias) {
    if (!add_variable(ls, vars, "bias", {units}, x.type, options.bias_initializer, options.seed,
                      options.trainable, &bias)) {
      return output{};
    }
    y = ops::bias_add(ls, y, bias.value);
  }
  return activate(ls, options.activation, y);
}

output conv2d(const scope& s, variable_collection& vars, const output& x, int filters,
              const conv2d_options& options) {
  if (!s.ok() || !x.valid()) return output{};
  const scope ls = s.sub(options.name);
  std::int64_t in = 0;
  if (!check_float(s, "conv2d", x) || !known_dim(s, "conv2d", x, 4, 3, &in)) return output{};
  if (filters < 1 || options.kernel_height < 1 || options.kernel_width < 1 || options.stride < 1) {
    s.record(invalid_argument_error("conv2d '", options.name, "': filters (", filters,
                                    "), kernel size (", options.kernel_height, "x",
                                    options.kernel_width, ") and stride (", options.stride,
                                    ") must be >= 1"));
    return output{};
  }
  variable kernel, bias;
  if (!add_variable(ls, vars, "kernel",
                    {options.kernel_height, options.kernel_width, in, filters}, x.type,
                    options.kernel_initializer, options.seed, options.trainable, &kernel)) {
    return output{};
  }
  output y = ls.add("Conv2D", {x, kernel.value},
                    {{"strides", window(options.stride)}, {"padding", attr_value(options.padding)}})
                 .out();
  if (options.use_bias) {
    if (!add_variable(ls, vars, "bias", {filters}, x.type, options.bias_initializer,
                      options.seed, options.trainable, &bias)) {
      return output{};
    }
    y = ops::bias_add(ls, y, bias.value);
  }
  return activate(ls, options.activation, y);
}

output max_pool(const scope& s, const output& x, int size, int stride, const std::string& padding) {
  return pool(s, "MaxPool", x, size, stride, padding);
}

output avg_pool(const scope& s, const output& x, int size, int stride, const std::string& padding) {
  return pool(s, "AvgPool", x, size, stride, padding);
}

output batch_norm(const scope& s, variable_collection& vars, const output& x, bool training,
                  const batch_norm_options& options) {
  if (!s.ok() || !x.valid()) return output{};
  const scope ls = s.sub(options.name);
  if (!check_float(s, "batch_norm", x)) return output{};
  const int rank = x.shape.known_rank() ? x.shape.rank() : -1;
  if (rank != 2 && rank != 4) {
    s.record(invalid_argument_error("batch_norm: input '", x.name(),
                                    "' must have rank 2 or 4 (NHWC) but has shape ",
                                    x.shape.to_string()));
    return output{};
  }
  std::int64_t channels = 0;
  if (!known_dim(s, "batch_norm", x, rank, rank - 1, &channels)) return output{};
  const tensor_shape shape{channels};
  variable gamma, beta, moving_mean, moving_variance;
  output scale, offset;
  if (options.scale) {
    if (!add_variable(ls, vars, "gamma", shape, x.type, init::constant_initializer(1.0), 0, true, &gamma)) {
      return output{};
    }
    scale = gamma.value;
  } else {
    scale = init::constant(ls, shape, x.type, 1.0);
  }
  if (options.center) {
    if (!add_variable(ls, vars, "beta", shape, x.type, init::zeros_initializer(), 0, true, &beta)) {
      return output{};
    }
    offset = beta.value;
  } else {
    offset = init::zeros(ls, shape, x.type);
  }
  if (!add_variable(ls, vars, "moving_mean", shape, x.type, init::zeros_initializer(), 0, false,
                    &moving_mean) ||
      !add_variable(ls, vars, "moving_variance", shape, x.type, init::constant_initializer(1.0), 0,
                    false, &moving_variance)) {
    return output{};
  }
  output input = rank == 4 ? x : ops::reshape(ls, x, ops::int32_vector(ls, {-1, 1, 1, static_cast<std::int32_t>(channels)}));
  operation bn = ls.add("FusedBatchNormV3", {input, scale, offset, moving_mean.value, moving_variance.value},
                        {{"epsilon", attr_value(static_cast<float>(options.epsilon))},
                         {"is_training", attr_value(training)}});
  if (!bn.valid()) return output{};
  output y = rank == 4 ? bn.out(0)
                       : ops::reshape(ls, bn.out(0), ops::int32_vector(ls, {-1, static_cast<std::int32_t>(channels)}));
  if (training) {
    const scope us = ls.sub("update");
    output decay = graph::scalar_of(us, x.type, 1.0 - options.momentum);
    for (auto [moving, batch] : {std::pair{&moving_mean, bn.out(1)}, std::pair{&moving_variance, bn.out(2)}}) {
      output delta = ops::mul(us, ops::sub(us, moving->value, batch), decay);
      vars.update_ops.push_back(us.add("AssignSubVariableOp", {moving->handle, delta}));
    }
  }
  return y;
}

output dropout(const scope& s, const output& x, double rate, std::int64_t seed, bool training) {
  if (!s.ok() || !x.valid()) return output{};
  if (!(rate >= 0 && rate < 1)) {
    s.record(invalid_argument_error("dropout: rate is ", rate, " but must be in [0, 1)"));
    return output{};
  }
  if (!training || rate == 0) return x;
  const scope ds = s.sub("dropout");
  if (!check_float(s, "dropout", x)) return output{};
  output u = ds.add("RandomUniform", {graph::shape_of(ds, x)},
                    {{"dtype", attr_value(x.type)},
                     {"seed", attr_value(init::k_graph_seed)},
                     {"seed2", attr_value(seed)}})
                 .out();
  output keep = ds.add("GreaterEqual", {u, graph::scalar_of(ds, x.type, rate)}).out();
  output scaled = ops::mul(ds, x, graph::scalar_of(ds, x.type, 1.0 / (1.0 - rate)));
  return ops::mul(ds, scaled, ops::cast(ds, keep, x.type));
}

lstm_weights make_lstm_weights(const scope& s, variable_collection& vars, int input_size,
                               int units, dtype type, const lstm_options& options) {
  lstm_weights w;
  if (!s.ok()) return w;
  if (input_size < 1 || units < 1) {
    s.record(invalid_argument_error("lstm '", options.name, "': input size ", input_size,
                                    " and units ", units, " must be >= 1"));
    return w;
  }
  const scope ls = s.sub(options.name);
  if (!add_variable(ls, vars, "kernel", {input_size + units, 4 * units}, type,
                    options.kernel_initializer, options.seed, options.trainable, &w.kernel) ||
      !add_variable(ls, vars, "bias", {4 * units}, type, options.bias_initializer, options.seed,
                    options.trainable, &w.bias)) {
    return lstm_weights{};
  }
  w.units = units;
  w.forget_bias = options.forget_bias;
  return w;
}

lstm_state lstm_cell(const scope& s, const lstm_weights& w, const output& x, const lstm_state& state) {
  if (!s.ok() || !w.kernel.valid() || !x.valid()) return lstm_state{};
  output xh = ops::concat(s, {x, state.h}, ops::scalar<std::int32_t>(s, 1));
  output gates = ops::bias_add(s, ops::matmul(s, xh, w.kernel.value), w.bias.value);
  operation split = s.add("Split", {ops::scalar<std::int32_t>(s, 1), gates},
                          {{"num_split", attr_value(4)}});
  if (!split.valid()) return lstm_state{};
  output i = split.out(0), j = split.out(1), f = split.out(2), o = split.out(3);
  output forget = ops::sigmoid(s, ops::add(s, f, graph::scalar_of(s, x.type, w.forget_bias)));
  output c = ops::add(s, ops::mul(s, state.c, forget), ops::mul(s, ops::sigmoid(s, i), ops::tanh(s, j)));
  output h = ops::mul(s, ops::tanh(s, c), ops::sigmoid(s, o));
  return lstm_state{c, h};
}

namespace {

// Zeros of shape [batch, units], batch being x's dimension `batch_axis`.
output zero_state(const scope& s, const output& x, int batch_axis, int units) {
  if (x.shape.known_rank() && x.shape.rank() > batch_axis && x.shape.dim(batch_axis) >= 0) {
    return init::zeros(s, {x.shape.dim(batch_axis), units}, x.type);
  }
  output batch =
      s.add("Slice", {ops::shape(s, x), ops::int32_vector(s, {batch_axis}), ops::int32_vector(s, {1})}).out();
  output dims = ops::concat(s, {batch, ops::int32_vector(s, {units})}, ops::scalar<std::int32_t>(s, 0));
  return ops::fill(s, dims, graph::scalar_of(s, x.type, 0.0));
}

}  // namespace

lstm_state lstm_zero_state(const scope& s, const output& x, int units) {
  if (!s.ok() || !x.valid()) return lstm_state{};
  output zeros = zero_state(s, x, 0, units);
  return lstm_state{zeros, zeros};
}

fused_lstm_result fused_lstm(const scope& s, variable_collection& vars, const output& x, int units,
                             const lstm_options& options) {
  fused_lstm_result result;
  if (!s.ok() || !x.valid()) return result;
  std::int64_t input_size = 0;
  if (!check_float(s, "fused_lstm", x) || !known_dim(s, "fused_lstm", x, 3, 2, &input_size)) return result;
  result.weights = make_lstm_weights(s, vars, static_cast<int>(input_size), units, x.type, options);
  if (!result.weights.kernel.valid()) return result;
  const scope ls = s.sub(options.name);
  const std::int64_t time = x.shape.dim(0);
  output seq_len_max =
      time >= 0 ? ops::scalar<std::int64_t>(ls, time)
                : ops::reshape(ls, ls.add("Slice", {ops::shape(ls, x, dtype::int64), ops::int32_vector(ls, {0}),
                                                    ops::int32_vector(ls, {1})})
                                       .out(),
                               ops::int32_vector(ls, {}));
  output zeros = zero_state(ls.sub("zero_state"), x, 1, units);
  output no_peephole = init::zeros(ls, {units}, x.type);
  operation block = ls.add("BlockLSTM",
                           {seq_len_max, x, zeros, zeros, result.weights.kernel.value, no_peephole, no_peephole,
                            no_peephole, result.weights.bias.value},
                           {{"forget_bias", attr_value(static_cast<float>(options.forget_bias))},
                            {"cell_clip", attr_value(0.0f)},
                            {"use_peephole", attr_value(false)}});
  if (!block.valid()) return result;
  result.outputs = block.out(6);
  output last = ops::sub(ls, seq_len_max, ops::scalar<std::int64_t>(ls, 1));
  auto final_step = [&](const output& sequence) {
    return ls.add("GatherV2", {sequence, last, ops::scalar<std::int32_t>(ls, 0)}).out();
  };
  result.final_state = lstm_state{final_step(block.out(1)), final_step(block.out(6))};
  return result;
}

lstm_result lstm(const scope& s, variable_collection& vars, const std::vector<output>& inputs,
                 int units, const lstm_options& options) {
  lstm_result result;
  if (!s.ok()) return result;
  if (inputs.empty()) {
    s.record(invalid_argument_error("lstm '", options.name, "': no inputs (one per time step)"));
    return result;
  }
  std::int64_t input_size = 0;
  if (!inputs[0].valid() || !check_float(s, "lstm", inputs[0]) ||
      !known_dim(s, "lstm", inputs[0], 2, 1, &input_size)) {
    return result;
  }
  if (options.fused) {
    fused_lstm_result fused =
        fused_lstm(s, vars, ops::stack(s.sub(options.name), inputs, 0), units, options);
    if (!fused.outputs.valid()) return result;
    operation steps = s.sub(options.name)
                          .add("Unpack", {fused.outputs},
                               {{"num", attr_value(static_cast<std::int64_t>(inputs.size()))},
                                {"axis", attr_value(0)}});
    for (std::size_t t = 0; t < inputs.size(); ++t) result.outputs.push_back(steps.out(static_cast<int>(t)));
    result.final_state = fused.final_state;
    result.weights = fused.weights;
    return result;
  }
  result.weights = make_lstm_weights(s, vars, static_cast<int>(input_size), units, inputs[0].type, options);
  if (!result.weights.kernel.valid()) return result;
  const scope ls = s.sub(options.name);
  lstm_state state = lstm_zero_state(ls.sub("zero_state"), inputs[0], units);
  for (std::size_t t = 0; t < inputs.size(); ++t) {
    state = lstm_cell(ls.sub(std::to_string(t)), result.weights, inputs[t], state);
    result.outputs.push_back(state.h);
  }
  result.final_state = state;
  return result;
}

std::vector<variable> make_embedding(const scope& s, variable_collection& vars,
                                     std::int64_t vocab_size, std::int64_t dim, int num_shards,
                                     dtype type, const embedding_options& options) {
  std::vector<variable> shards;
  if (!s.ok()) return shards;
  if (num_shards < 1 || dim < 1 || vocab_size < num_shards) {
    s.record(invalid_argument_error("embedding '", options.name, "': vocab_size ", vocab_size,
                                    ", dim ", dim, " and num_shards ", num_shards,
                                    " must satisfy 1 <= num_shards <= vocab_size and dim >= 1"));
    return shards;
  }
  if (!options.partition_strategy.empty() && options.partition_strategy != "mod" &&
      options.partition_strategy != "div") {
    s.record(invalid_argument_error("embedding '", options.name, "': partition_strategy is '",
                                    options.partition_strategy, "'; use 'mod' or 'div'"));
    return shards;
  }
  const scope es = s.sub(options.name);
  const std::string full_name = es.next_name("x").substr(0, es.next_name("x").rfind('/'));
  std::int64_t first_row = 0;
  for (int i = 0; i < num_shards; ++i) {
    std::int64_t rows = vocab_size / num_shards + (i < vocab_size % num_shards ? 1 : 0);
    std::map<std::string, tf::AttrValue> marks = {
        {"_save_slice_info", attr_value(str_cat(full_name, " ", vocab_size, " ", dim, " ", first_row, ",", rows, ":-"))}};
    if (!options.partition_strategy.empty()) marks["_partition_strategy"] = attr_value(options.partition_strategy);
    variable shard;
    if (!add_variable(es, vars, "part_" + std::to_string(i), {rows, dim}, type, options.initializer,
                      options.seed, options.trainable, &shard, marks)) {
      return {};
    }
    shards.push_back(shard);
    first_row += rows;
  }
  return shards;
}

output embedding_lookup(const scope& s, const std::vector<variable>& shards, const output& ids,
                        const std::string& partition_strategy, const std::string& name) {
  if (!s.ok() || !ids.valid()) return output{};
  const scope ls = s.sub(name);
  auto error = [&](const auto&... args) {
    s.record(invalid_argument_error("embedding_lookup '", name, "': ", args...));
    return output{};
  };
  if (shards.empty()) return error("no shards");
  if (ids.type != dtype::int32 && ids.type != dtype::int64) {
    return error("ids '", ids.name(), "' have dtype ", dtype_name(ids.type), "; int32 or int64 needed");
  }
  if (partition_strategy != "mod" && partition_strategy != "div") {
    return error("partition_strategy is '", partition_strategy, "'; use 'mod' or 'div'");
  }
  for (const variable& shard : shards) {
    const auto* n = s.current_graph().find(shard.handle.node);
    std::string made;
    if (n != nullptr && graph::has_attr(n->def, "_partition_strategy") &&
        graph::get_attr(n->def, "_partition_strategy", &made).ok() &&
        made != partition_strategy && shards.size() > 1) {
      return error("the shards of '", shard.name, "' were made for partition_strategy '", made, "', not '",
                   partition_strategy, "'");
    }
  }
  const variable& first = shards.front();
  std::int64_t total_rows = 0;
  for (const variable& v : shards) {
    if (!v.valid()) return output{};
    std::vector<std::int64_t> inner(v.shape.dims().begin() + (v.shape.rank() > 0 ? 1 : 0), v.shape.dims().end());
    std::vector<std::int64_t> first_inner(first.shape.dims().begin() + (first.shape.rank() > 0 ? 1 : 0),
                                          first.shape.dims().end());
    if (v.shape.rank() < 1 || v.type != first.type || inner != first_inner) {
      return error("shard '", v.name, "' (", dtype_name(v.type), " ", v.shape.to_string(),
                   ") does not match shard '", first.name, "' (", dtype_name(first.type), " ",
                   first.shape.to_string(), "): shards share dtype and row shape");
    }
    total_rows += v.shape.dim(0);
  }
  auto gather = [&](const variable& v, const output& indices) {
    return ls.add("ResourceGather", {v.handle, indices}, {{"dtype", attr_value(v.type)}}).out();
  };
  if (shards.size() == 1) return gather(first, ids);

  const auto n = static_cast<std::int64_t>(shards.size());
  auto id_scalar = [&](std::int64_t value) { return graph::scalar_of(ls, ids.type, static_cast<double>(value)); };
  auto binary = [&](const char* op, const output& a, const output& b) { return ls.add(op, {a, b}).out(); };
  output flat = ops::reshape(ls, ids, ops::int32_vector(ls, {-1}));
  output assignment, new_ids;
  if (partition_strategy == "mod") {
    assignment = binary("FloorMod", flat, id_scalar(n));
    new_ids = binary("FloorDiv", flat, id_scalar(n));
  } else {
    const std::int64_t per_shard = total_rows / n;
    const std::int64_t extras = total_rows % n;
    if (per_shard == 0) return error("'div' needs at least one row per shard");
    output shifted = ops::sub(ls, flat, id_scalar(extras));
    assignment = ops::maximum(ls, binary("FloorDiv", flat, id_scalar(per_shard + 1)),
                              binary("FloorDiv", shifted, id_scalar(per_shard)));
    new_ids = ops::select(ls, ops::less(ls, assignment, id_scalar(extras)),
                          binary("FloorMod", flat, id_scalar(per_shard + 1)),
                          binary("FloorMod", shifted, id_scalar(per_shard)));
  }
  if (assignment.type != dtype::int32) assignment = ops::cast(ls, assignment, dtype::int32);
  const tf::AttrValue num_partitions = attr_value(n);
  operation parts = ls.add("DynamicPartition", {new_ids, assignment}, {{"num_partitions", num_partitions}});
  // The position of every id, partitioned alike, tells DynamicStitch where rows go back.
  output positions;
  if (flat.shape.known_rank() && flat.shape.dim(0) >= 0) {
    std::vector<std::int32_t> range(static_cast<std::size_t>(flat.shape.dim(0)));
    std::iota(range.begin(), range.end(), 0);
    positions = ops::constant(ls, tensor::from_vector(range, tensor_shape{flat.shape.dim(0)}));
  } else {
    output all = ops::fill(ls, ops::reshape(ls, ops::size(ls, assignment), ops::int32_vector(ls, {1})),
                           ops::constant(ls, tensor::scalar<bool>(true)));
    positions = ops::reshape(ls, ops::cast(ls, ls.add("Where", {all}).out(), dtype::int32),
                             ops::int32_vector(ls, {-1}));
  }
  operation position_parts =
      ls.add("DynamicPartition", {positions, assignment}, {{"num_partitions", num_partitions}});
  if (!parts.valid() || !position_parts.valid()) return output{};
  std::vector<output> rows, where;
  for (std::int64_t i = 0; i < n; ++i) {
    rows.push_back(gather(shards[static_cast<std::size_t>(i)], parts.out(static_cast<int>(i))));
    where.push_back(position_parts.out(static_cast<int>(i)));
  }
  output stitched = ls.add("DynamicStitch", {graph::input(where), graph::input(rows)}).out();
  // Back to ids.shape + the row shape.
  std::vector<std::int32_t> row_dims;
  for (int i = 1; i < first.shape.rank(); ++i) row_dims.push_back(static_cast<std::int32_t>(first.shape.dim(i)));
  output shape;
  if (ids.shape.known_rank() && ids.shape.fully_defined()) {
    std::vector<std::int32_t> dims;
    for (std::int64_t d : ids.shape.dims()) dims.push_back(static_cast<std::int32_t>(d));
    dims.insert(dims.end(), row_dims.begin(), row_dims.end());
    shape = ops::int32_vector(ls, dims);
  } else {
    shape = ops::concat(ls, {ops::shape(ls, ids), ops::int32_vector(ls, row_dims)},
                        ops::scalar<std::int32_t>(ls, 0));
  }
  return ops::reshape(ls, stitched, shape);
}

namespace {

// The rows of `shards` together, when every shard has `rank`, `type` and (for rank 2) `dim`
// columns; records an error naming `what` otherwise.
bool sharded_rows(const scope& s, const std::string& name, const char* what,
                  const std::vector<variable>& shards, int rank, dtype type, std::int64_t dim,
                  std::int64_t* rows) {
  if (shards.empty()) {
    return fail(s, invalid_argument_error("sampled_softmax_loss '", name, "': no ", what));
  }
  *rows = 0;
  for (const variable& v : shards) {
    if (!v.valid()) return false;
    if (v.type != type || v.shape.rank() != rank || (rank == 2 && v.shape.dim(1) != dim)) {
      return fail(s, invalid_argument_error(
                         "sampled_softmax_loss '", name, "': ", what, " shard '", v.name, "' is ",
                         dtype_name(v.type), " ", v.shape.to_string(), " but must be ", dtype_name(type),
                         rank == 2 ? " [rows, " + std::to_string(dim) + "]" : std::string(" [rows]"),
                         " (the inputs' dtype", rank == 2 ? " and dimension)" : ")"));
    }
    *rows += v.shape.dim(0);
  }
  return true;
}

}  // namespace

sampled_logits compute_sampled_logits(const scope& s, const std::vector<variable>& weights,
                                      const std::vector<variable>& biases, const output& labels,
                                      const output& inputs, int num_sampled,
                                      std::int64_t num_classes, int num_true,
                                      bool remove_accidental_hits, std::int64_t seed,
                                      const std::string& partition_strategy,
                                      const std::string& name) {
  if (!s.ok() || !labels.valid() || !inputs.valid()) return {};
  auto error = [&](const auto&... args) {
    s.record(invalid_argument_error("sampled_softmax_loss '", name, "': ", args...));
    return sampled_logits{};
  };
  if (num_true < 1 || num_classes < 1 || num_sampled < 1 || num_sampled > num_classes) {
    return error("num_true (", num_true, "), num_sampled (", num_sampled, ") and num_classes (",
                 num_classes, ") must satisfy num_true >= 1 and 1 <= num_sampled <= num_classes");
  }
  std::int64_t dim = 0;
  if (!check_float(s, "sampled_softmax_loss", inputs) ||
      !known_dim(s, "sampled_softmax_loss", inputs, 2, 1, &dim)) {
    return {};
  }
  if (labels.type != dtype::int32 && labels.type != dtype::int64) {
    return error("labels '", labels.name(), "' have dtype ", dtype_name(labels.type),
                 "; int32 or int64 needed");
  }
  if (!labels.shape.known_rank() || labels.shape.rank() != 2 ||
      (labels.shape.dim(1) >= 0 && labels.shape.dim(1) != num_true)) {
    return error("labels '", labels.name(), "' have shape ", labels.shape.to_string(),
                 " but must be [batch, num_true = ", num_true, "]");
  }
  std::int64_t weight_rows = 0, bias_rows = 0;
  if (!sharded_rows(s, name, "weights", weights, 2, inputs.type, dim, &weight_rows) ||
      !sharded_rows(s, name, "biases", biases, 1, inputs.type, dim, &bias_rows)) {
    return {};
  }
  if (weight_rows != num_classes || bias_rows != num_classes) {
    return error("weights have ", weight_rows, " rows and biases ", bias_rows,
                 " in all, but num_classes is ", num_classes);
  }

  const scope ls = s.sub(name);
  const dtype type = inputs.type;
  output classes = labels.type == dtype::int64 ? labels : ops::cast(ls, labels, dtype::int64);
  sampled_logits result;
  result.sampler = ls.add("LogUniformCandidateSampler", {classes},
                          {{"num_true", attr_value(num_true)},
                           {"num_sampled", attr_value(num_sampled)},
                           {"unique", attr_value(true)},
                           {"range_max", attr_value(num_classes)},
                           {"seed", attr_value(init::k_graph_seed)},
                           {"seed2", attr_value(seed)}});
  if (!result.sampler.valid()) return {};
  const output sampled = result.sampler.out(0);
  const output true_count = result.sampler.out(1);
  const output sampled_count = result.sampler.out(2);

  // One lookup of the true classes' rows followed by the sampled ones', split apart again.
  output true_ids = ops::reshape(ls, classes, ops::int32_vector(ls, {-1}));
  output all_ids = ops::concat(ls, {true_ids, sampled}, ops::scalar<std::int32_t>(ls, 0));
  output all_w = embedding_lookup(ls, weights, all_ids, partition_strategy, "weights_lookup");
  output all_b = embedding_lookup(ls, biases, all_ids, partition_strategy, "biases_lookup");
  auto split = [&](const output& value) {
    return ls.add("SplitV", {value, ops::int32_vector(ls, {-1, num_sampled}), ops::scalar<std::int32_t>(ls, 0)},
                  {{"num_split", attr_value(2)}});
  };
  operation w_parts = split(all_w);
  operation b_parts = split(all_b);
  if (!w_parts.valid() || !b_parts.valid()) return {};

  // True logits: row i of inputs against its num_true rows of weights.
  const auto d = static_cast<std::int32_t>(dim);
  output true_w = ops::reshape(ls, w_parts.out(0), ops::int32_vector(ls, {-1, num_true, d}));
  output rows = ls.add("ExpandDims", {inputs, ops::scalar<std::int32_t>(ls, 1)}).out();
  output true_logits = ops::sum(ls, ops::mul(ls, rows, true_w), ops::scalar<std::int32_t>(ls, 2));
  true_logits = ops::add(ls, true_logits, ops::reshape(ls, b_parts.out(0), ops::int32_vector(ls, {-1, num_true})));
  output sampled_logits_value = ops::bias_add(ls, ops::matmul(ls, inputs, w_parts.out(1), false, true), b_parts.out(1));

  if (remove_accidental_hits) {
    // TensorFlow scatters the hits' weights with SparseToDense; here they are summed into
    // place with UnsortedSegmentSum, clamped so a class listed twice in a row stays finite.
    const scope hs = ls.sub("remove_accidental_hits");
    operation hits = hs.add("ComputeAccidentalHits", {classes, sampled}, {{"num_true", attr_value(num_true)}});
    if (!hits.valid()) return {};
    output position = ops::add(hs, ops::mul(hs, hits.out(0), ops::scalar<std::int32_t>(hs, num_sampled)),
                               ops::cast(hs, hits.out(1), dtype::int32));
    output mask = hs.add("UnsortedSegmentSum", {ops::cast(hs, hits.out(2), type), position,
                                                ops::size(hs, sampled_logits_value)})
                      .out();
    mask = ops::maximum(hs, mask, graph::scalar_of(hs, type, -FLT_MAX));
    sampled_logits_value =
        ops::add(hs, sampled_logits_value, ops::reshape(hs, mask, ops::int32_vector(hs, {-1, num_sampled})));
  }
  // Subtract log Q: the logits of the classes the sampler favours are lowered to match.
  true_logits = ops::sub(ls, true_logits, ops::log(ls, ops::cast(ls, true_count, type)));
  sampled_logits_value = ops::sub(ls, sampled_logits_value, ops::log(ls, ops::cast(ls, sampled_count, type)));

  output axis = ops::scalar<std::int32_t>(ls, 1);
  result.logits = ops::concat(ls, {true_logits, sampled_logits_value}, axis);
  output true_labels = ops::div(ls, ops::ones_like(ls, true_logits), graph::scalar_of(ls, type, num_true));
  result.labels = ls.add("StopGradient", {ops::concat(ls, {true_labels, ops::zeros_like(ls, sampled_logits_value)}, axis)})
                      .out();
  if (!result.logits.valid() || !result.labels.valid()) return {};
  return result;
}

output sampled_softmax_loss(const scope& s, const std::vector<variable>& weights,
                            const std::vector<variable>& biases, const output& labels,
                            const output& inputs, int num_sampled, std::int64_t num_classes,
                            int num_true, bool remove_accidental_hits, std::int64_t seed,
                            const std::string& partition_strategy, const std::string& name) {
  sampled_logits sampled = compute_sampled_logits(s, weights, biases, labels, inputs, num_sampled, num_classes,
                                                  num_true, remove_accidental_hits, seed,
                                                  partition_strategy, name);
  if (!sampled.logits.valid()) return output{};
  const scope ls = s.sub(name);
  return ops::softmax_cross_entropy_with_logits(ls, sampled.logits, sampled.labels).out(0);
}

}  // namespace troupe::nn
