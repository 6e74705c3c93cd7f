// Op schemas: TensorFlow's fused LSTM over a whole sequence, spelled as its raw ops.
//
//   BlockLSTM     (seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b
//                  -> i, cs, f, o, ci, co, h)
//   BlockLSTMV2   the same with gate columns i, f, ci, o (BlockLSTM: i, ci, f, o), no
//                 forget_bias attribute (the bias vector carries it) and cell_clip 0
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

// Checks the ranks and agreement of BlockLSTM's nine inputs (the first nine of its
// gradient's too) and finds time, batch, input and cell sizes (-1: unknown).
status block_lstm_sizes(const shape_context& ctx, std::int64_t* time, std::int64_t* batch,
                        std::int64_t* input, std::int64_t* cell) {
  constexpr std::array<int, 9> ranks = {0, 3, 2, 2, 2, 1, 1, 1, 1};
  for (int i = 0; i < 9; ++i) TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, ranks[static_cast<std::size_t>(i)]));
  *time = dim_of(ctx, 1, 0);
  *batch = dim_of(ctx, 1, 1);
  *input = dim_of(ctx, 1, 2);
  *cell = -1;
  std::int64_t four_cell = -1;
  bool ok = merge_into(dim_of(ctx, 2, 0), batch) && merge_into(dim_of(ctx, 3, 0), batch) &&
            merge_into(dim_of(ctx, 2, 1), cell) && merge_into(dim_of(ctx, 3, 1), cell) &&
            merge_into(dim_of(ctx, 5, 0), cell) && merge_into(dim_of(ctx, 6, 0), cell) &&
            merge_into(dim_of(ctx, 7, 0), cell) && merge_into(dim_of(ctx, 4, 1), &four_cell) &&
            merge_into(dim_of(ctx, 8, 0), &four_cell);
  if (ok && four_cell >= 0) ok = four_cell % 4 == 0 && merge_into(four_cell / 4, cell);
  const std::int64_t w_rows = dim_of(ctx, 4, 0);
  if (ok && w_rows >= 0 && *input >= 0 && *cell >= 0) ok = w_rows == *input + *cell;
  if (!ok) {
    std::string shapes;
    for (int i = 1; i < 9; ++i) {
      shapes += std::string(i == 1 ? "" : ", ") + k_inputs[static_cast<std::size_t>(i)] + " " +
                ctx.input(i).to_string();
    }
    return ctx.error("inputs do not agree (x [time, batch, input]; cs_prev, h_prev [batch, cell]; "
                     "w [input + cell, 4 cell]; wci, wcf, wco [cell]; b [4 cell]): ", shapes);
  }
  return status();
}

status block_lstm_shape(shape_context& ctx) {
  std::int64_t time = -1, batch = -1, input = -1, cell = -1;
  TROUPE_RETURN_IF_ERROR(block_lstm_sizes(ctx, &time, &batch, &input, &cell));
  for (int i = 0; i < 7; ++i) ctx.set_output(i, partial_shape{time, batch, cell});
  return status();
}

status block_lstm_grad_shape(shape_context& ctx) {
  std::int64_t time = -1, batch = -1, input = -1, cell = -1;
  TROUPE_RETURN_IF_ERROR(block_lstm_sizes(ctx, &time, &batch, &input, &cell));
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
