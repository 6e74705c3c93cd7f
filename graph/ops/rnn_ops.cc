// Op schemas: TensorFlow's fused LSTM over a whole sequence, spelled as its raw ops.
//
//   BlockLSTM     (seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b
//                  -> i, cs, f, o, ci, co, h)
//   BlockLSTMV2   the same with gate columns i, f, ci, o (BlockLSTM: i, ci, f, o), no
//                 forget_bias attribute (the bias vector carries it) and cell_clip 0
//   LSTMBlockCell (x, cs_prev, h_prev, w, wci, wcf, wco, b -> i, cs, f, o, ci, co, h): one
//                 step of BlockLSTM, x [batch, input], every output [batch, cell]
//   LSTMBlockCellGrad (x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad,
//                 h_grad -> cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad): the step's
//                 cell backwards, dicfo the gates' gradient [batch, 4 cell]; its gradient
//                 function adds the products with w (TensorFlow's _LSTMBlockCellGrad)
//   BlockLSTMGrad, BlockLSTMGradV2
//                 (seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co,
//                  h, cs_grad, h_grad -> x_grad, cs_prev_grad, h_prev_grad, w_grad, wci_grad,
//                  wcf_grad, wco_grad, b_grad)
//
// Shapes: x [time, batch, input]; cs_prev, h_prev [batch, cell]; w [input + cell, 4 cell];
// wci, wcf, wco (the peephole weights, read only with use_peephole) [cell]; b [4 cell];
// seq_len_max an int64 scalar in [0, time]. Every forward output is [time, batch, cell].
// Per step t < seq_len_max, with xh = [x_t, h_{t-1}] and gates = xh w + b:
//
//   i  = sigmoid(gates_i + cs_{t-1} wci)        ci = tanh(gates_ci)
//   f  = sigmoid(gates_f + forget_bias + cs_{t-1} wcf)
//   cs = clip(ci i + cs_{t-1} f, cell_clip)     (clipped only when cell_clip > 0)
//   o  = sigmoid(gates_o + cs wco)              co = tanh(cs),  h = co o
//
// the peephole terms only with use_peephole. Steps from seq_len_max on are zeros in every
// output (TensorFlow zeroes cs and h there and leaves the others unset). The gradient takes
// the gradients of cs and h (TensorFlow's _block_lstm_grad ignores the rest) and, as
// TensorFlow's kernel, does not differentiate the clip.
//
// Types: float, and double so that the gradients can be checked in float64 (TensorFlow:
// half and float). Kernels: kernels/cpu/rnn_kernels.cc. nn::fused_lstm (graph/nn.h) builds
// BlockLSTM with BasicLSTMCell's weights.
#include <array>

#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops.h"

namespace troupe::graph {

namespace {

constexpr const char* k_types = "T: {float, double}";
constexpr std::array<const char*, 9> k_inputs = {"seq_len_max", "x",   "cs_prev", "h_prev", "w",
                                                 "wci",         "wcf", "wco",     "b"};
constexpr std::array<const char*, 7> k_outputs = {"i", "cs", "f", "o", "ci", "co", "h"};

// Merges a known dimension into `*into` (-1: unknown); false when both are known and differ.
bool merge_into(std::int64_t dim, std::int64_t* into) {
  if (dim < 0) return true;
  if (*into >= 0 && *into != dim) return false;
  *into = dim;
  return true;
}

// The dimension of input i at d, or -1 when its rank is unknown.
std::int64_t dim_of(const shape_context& ctx, int i, int d) {
  return ctx.input(i).known_rank() ? ctx.input(i).dim(d) : -1;
}

// Checks the ranks and agreement of an LSTM op's inputs x, cs_prev, h_prev, w, wci, wcf,
// wco, b (from input `base` on: BlockLSTM's and its gradient's after seq_len_max, with x
// [time, batch, input]; LSTMBlockCell's and its gradient's from 0, x [batch, input]) and
// finds time (1 for a cell), batch, input and cell sizes (-1: unknown).
status lstm_sizes(const shape_context& ctx, int base, std::int64_t* time, std::int64_t* batch,
                  std::int64_t* input, std::int64_t* cell) {
  const bool sequence = base == 1;
  if (sequence) TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 0));
  const std::array<int, 8> ranks = {sequence ? 3 : 2, 2, 2, 2, 1, 1, 1, 1};
  for (int i = 0; i < 8; ++i) TROUPE_RETURN_IF_ERROR(ctx.require_rank(base + i, ranks[static_cast<std::size_t>(i)]));
  auto dim = [&](int k, int d) { return dim_of(ctx, base + k, d); };  // k: 0 x ... 7 b
  *time = sequence ? dim(0, 0) : 1;
  *batch = dim(0, sequence ? 1 : 0);
  *input = dim(0, sequence ? 2 : 1);
  *cell = -1;
  std::int64_t four_cell = -1;
  bool ok = merge_into(dim(1, 0), batch) && merge_into(dim(2, 0), batch) && merge_into(dim(1, 1), cell) &&
            merge_into(dim(2, 1), cell) && merge_into(dim(4, 0), cell) && merge_into(dim(5, 0), cell) &&
            merge_into(dim(6, 0), cell) && merge_into(dim(3, 1), &four_cell) && merge_into(dim(7, 0), &four_cell);
  if (ok && four_cell >= 0) ok = four_cell % 4 == 0 && merge_into(four_cell / 4, cell);
  const std::int64_t w_rows = dim(3, 0);
  if (ok && w_rows >= 0 && *input >= 0 && *cell >= 0) ok = w_rows == *input + *cell;
  if (!ok) {
    std::string shapes;
    for (int k = 0; k < 8; ++k) {
      shapes += std::string(k == 0 ? "" : ", ") + k_inputs[static_cast<std::size_t>(k + 1)] + " " +
                ctx.input(base + k).to_string();
    }
    return ctx.error("inputs do not agree (x ", sequence ? "[time, batch, input]" : "[batch, input]",
                     "; cs_prev, h_prev [batch, cell]; w [input + cell, 4 cell]; wci, wcf, wco [cell]; "
                     "b [4 cell]): ", shapes);
  }
  return status();
}

status block_lstm_shape(shape_context& ctx) {
  std::int64_t time = -1, batch = -1, input = -1, cell = -1;
  TROUPE_RETURN_IF_ERROR(lstm_sizes(ctx, 1, &time, &batch, &input, &cell));
  for (int i = 0; i < 7; ++i) ctx.set_output(i, partial_shape{time, batch, cell});
  return status();
}

status block_lstm_grad_shape(shape_context& ctx) {
  std::int64_t time = -1, batch = -1, input = -1, cell = -1;
  TROUPE_RETURN_IF_ERROR(lstm_sizes(ctx, 1, &time, &batch, &input, &cell));
  const partial_shape sequence{time, batch, cell};
  for (int i = 9; i < 18; ++i) {
    TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, 3));
    if (!ctx.input(i).is_compatible_with(sequence)) {
      const char* name = i < 16 ? k_outputs[static_cast<std::size_t>(i - 9)] : i == 16 ? "cs_grad" : "h_grad";
      return ctx.error(name, " is ", ctx.input(i), "; it must be [time, batch, cell] ", sequence);
    }
  }
  const std::array<partial_shape, 8> shapes = {
      partial_shape{time, batch, input}, partial_shape{batch, cell}, partial_shape{batch, cell},
      partial_shape{input >= 0 && cell >= 0 ? input + cell : -1, cell >= 0 ? 4 * cell : -1},
      partial_shape{cell}, partial_shape{cell}, partial_shape{cell},
      partial_shape{cell >= 0 ? 4 * cell : -1}};
  for (int i = 0; i < 8; ++i) ctx.set_output(i, shapes[static_cast<std::size_t>(i)]);
  return status();
}

status lstm_block_cell_shape(shape_context& ctx) {
  std::int64_t time = -1, batch = -1, input = -1, cell = -1;
  TROUPE_RETURN_IF_ERROR(lstm_sizes(ctx, 0, &time, &batch, &input, &cell));
  for (int i = 0; i < 7; ++i) ctx.set_output(i, partial_shape{batch, cell});
  return status();
}

status lstm_block_cell_grad_shape(shape_context& ctx) {
  std::int64_t time = -1, batch = -1, input = -1, cell = -1;
  TROUPE_RETURN_IF_ERROR(lstm_sizes(ctx, 0, &time, &batch, &input, &cell));
  const partial_shape state{batch, cell};
  for (int i = 8; i < 16; ++i) {
    TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, 2));
    if (!ctx.input(i).is_compatible_with(state)) {
      const char* name = i < 14 ? k_outputs[static_cast<std::size_t>(i - 8)] : i == 14 ? "cs_grad" : "h_grad";
      return ctx.error(name, " is ", ctx.input(i), "; it must be [batch, cell] ", state);
    }
  }
  ctx.set_output(0, state);
  ctx.set_output(1, partial_shape{batch, cell >= 0 ? 4 * cell : -1});
  for (int i = 2; i < 5; ++i) ctx.set_output(i, partial_shape{cell});
  return status();
}

// TensorFlow's _LSTMBlockCellGrad: LSTMBlockCellGrad gives the gates' gradient (dicfo) and
// cs_prev's; x's, h_prev's, w's and b's come from products with it here.
status lstm_block_cell_grad(const gradient_context& ctx, std::vector<output>* dx) {
  bool use_peephole = false;
  TROUPE_RETURN_IF_ERROR(get_attr(ctx.forward.def, "use_peephole", &use_peephole));
  std::vector<input> inputs(ctx.inputs.begin(), ctx.inputs.end());
  inputs.insert(inputs.end(), ctx.outputs.begin(), ctx.outputs.begin() + 6);
  inputs.push_back(grad_or_zeros(ctx, 1));
  inputs.push_back(grad_or_zeros(ctx, 6));
  const scope& s = ctx.s;
  auto grad = s.add("LSTMBlockCellGrad", inputs, {{"use_peephole", attr_value(use_peephole)}});
  const output& x = ctx.inputs[0];
  const output& h_prev = ctx.inputs[2];
  const output& w = ctx.inputs[3];
  output dicfo = grad.out(1);
  output xh = ops::concat(s, {x, h_prev}, ops::scalar<std::int32_t>(s, 1));
  output xh_grad = ops::matmul(s, dicfo, w, false, true);
  output x_shape = ops::shape(s, x);
  output input_size = s.add("Slice", {x_shape, ops::int32_vector(s, {1}), ops::int32_vector(s, {1})}).out();
  output h_begin = ops::concat(s, {ops::int32_vector(s, {0}), input_size}, ops::scalar<std::int32_t>(s, 0));
  output x_grad = s.add("Slice", {xh_grad, ops::int32_vector(s, {0, 0}), x_shape}).out();
  output h_prev_grad = s.add("Slice", {xh_grad, h_begin, ops::shape(s, h_prev)}).out();
  output w_grad = ops::matmul(s, xh, dicfo, true, false);
  output b_grad = s.add("BiasAddGrad", {dicfo}).out();
  *dx = {x_grad, grad.out(0), h_prev_grad, w_grad, grad.out(2), grad.out(3), grad.out(4), b_grad};
  return status();
}

// TensorFlow's _block_lstm_grad: only cs's and h's gradients flow back.
status block_lstm_grad(const gradient_context& ctx, std::vector<output>* dx) {
  bool use_peephole = false;
  TROUPE_RETURN_IF_ERROR(get_attr(ctx.forward.def, "use_peephole", &use_peephole));
  std::vector<input> inputs(ctx.inputs.begin(), ctx.inputs.end());
  inputs.insert(inputs.end(), ctx.outputs.begin(), ctx.outputs.end());
  inputs.push_back(grad_or_zeros(ctx, 1));
  inputs.push_back(grad_or_zeros(ctx, 6));
  const bool v2 = ctx.forward.def.op() == "BlockLSTMV2";
  auto grad = ctx.s.add(v2 ? "BlockLSTMGradV2" : "BlockLSTMGrad", inputs,
                        {{"use_peephole", attr_value(use_peephole)}});
  dx->assign({output{}});
  for (int i = 0; i < 8; ++i) dx->push_back(grad.out(i));
  return status();
}

op_schema with_inputs(op_schema schema) {
  schema.input("seq_len_max: int64");
  for (std::size_t i = 1; i < k_inputs.size(); ++i) schema.input(std::string(k_inputs[i]) + ": T");
  return schema;
}

}  // namespace

void register_rnn_ops(op_registry& registry) {
  op_schema cell("LSTMBlockCell");
  for (std::size_t i = 1; i < k_inputs.size(); ++i) cell.input(std::string(k_inputs[i]) + ": T");
  for (const char* out : k_outputs) cell.output(std::string(out) + ": T");
  add_builtin_op(registry, std::move(cell.attr("forget_bias: float = 1.0")
                                         .attr("cell_clip: float = 3.0")
                                         .attr("use_peephole: bool = false")
                                         .attr(k_types)
                                         .shape_fn(lstm_block_cell_shape)
                                         .gradient(lstm_block_cell_grad)));
  op_schema cell_grad("LSTMBlockCellGrad");
  for (std::size_t i = 1; i < k_inputs.size(); ++i) cell_grad.input(std::string(k_inputs[i]) + ": T");
  for (std::size_t i = 0; i + 1 < k_outputs.size(); ++i) cell_grad.input(std::string(k_outputs[i]) + ": T");
  cell_grad.input("cs_grad: T").input("h_grad: T");
  cell_grad.output("cs_prev_grad: T").output("dicfo: T").output("wci_grad: T").output("wcf_grad: T").output("wco_grad: T");
  add_builtin_op(registry, std::move(cell_grad.attr("use_peephole: bool").attr(k_types).shape_fn(lstm_block_cell_grad_shape)));

  for (bool v2 : {false, true}) {
    op_schema forward = with_inputs(op_schema(v2 ? "BlockLSTMV2" : "BlockLSTM"));
    for (const char* out : k_outputs) forward.output(std::string(out) + ": T");
    if (!v2) forward.attr("forget_bias: float = 1.0");
    forward.attr(v2 ? "cell_clip: float = 0.0" : "cell_clip: float = 3.0")
        .attr("use_peephole: bool = false")
        .attr(k_types)
        .shape_fn(block_lstm_shape)
        .gradient(block_lstm_grad);
    add_builtin_op(registry, std::move(forward));

    op_schema backward = with_inputs(op_schema(v2 ? "BlockLSTMGradV2" : "BlockLSTMGrad"));
    for (const char* out : k_outputs) backward.input(std::string(out) + ": T");
    backward.input("cs_grad: T").input("h_grad: T");
    for (const char* in : k_inputs) {
      if (std::string_view(in) != "seq_len_max") backward.output(std::string(in) + "_grad: T");
    }
    backward.attr("use_peephole: bool").attr(k_types).shape_fn(block_lstm_grad_shape);
    add_builtin_op(registry, std::move(backward));
  }
}

}  // namespace troupe::graph
