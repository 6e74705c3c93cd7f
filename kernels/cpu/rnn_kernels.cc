// CPU kernels for the ops of graph/ops/rnn_ops.cc: BlockLSTM(V2) and BlockLSTMGrad(V2),
// an LSTM over a whole sequence in one kernel, and LSTMBlockCell (BlockLSTM's kernel on one
// step) with LSTMBlockCellGrad (the cell backwards BlockLSTMGrad runs per step).
//
// Where the time goes, and how it is split. Of an LSTM's products, only the recurrent one
// (h_{t-1} times the last `cell` rows of w) has to wait for the step before; the rest are
// one product each over all time steps:
//
//   forward   gates[t] = x[t] w_x for every t at once ([time * batch, input] x [input, 4 cell]),
//             then per step gates[t] += h_{t-1} w_h and the element-wise cell;
//   backward  per step (last to first) the element-wise cell gives dgates[t] and
//             dh_{t-1} = dgates[t] w_h^T; then x_grad = dgates w_x^T, w_grad = [x, h_prev]^T
//             dgates and b_grad = the column sums of dgates, each one product over all steps
//             (an unrolled graph instead builds a [input + cell, 4 cell] product per step and
//             sums them).
//
// A step's work is split over the compute pool by blocks of cell units: a block computes
// its units' columns of the four gates (four products of [batch, cell] x [cell, units]) and
// then their element-wise cell, which needs no other block's columns; so threads meet once
// per step, and each keeps its slice of w_h in its own cache from step to step. Products
// run on kernels/cpu/gemm_backend.h's `gemm`; the element-wise cell on Eigen arrays (its
// vectorized tanh and logistic).
#include <Eigen/Core>

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm_backend.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

namespace {

// Where each gate's columns start in gates, w and b, in units of `cell`.
struct gate_columns {
  std::int64_t i, c, f, o;
};
// BlockLSTM: i, ci, f, o (BasicLSTMCell's i, j, f, o); BlockLSTMV2: i, f, ci, o (Keras').
constexpr gate_columns k_icfo{0, 1, 2, 3};
constexpr gate_columns k_ifco{0, 2, 1, 3};

struct lstm_sizes {
  std::int64_t time = 0, batch = 0, input = 0, cell = 0;
  std::int64_t steps = 0;  // seq_len_max
};

// Checks an LSTM op's inputs x, cs_prev, h_prev, w, wci, wcf, wco, b (`in`, in that order)
// and reads the sizes: BlockLSTM's (x [time, batch, input], `seq_len_max` given) or
// LSTMBlockCell's (x [batch, input], one step).
result<lstm_sizes> lstm_sizes_of(const std::string& op, std::span<const tensor> in, const tensor* seq_len_max) {
  const tensor& x = in[0];
  if (seq_len_max != nullptr && seq_len_max->rank() != 0) {
    return invalid_argument_error(op, ": seq_len_max must be a scalar, got ", seq_len_max->shape());
  }
  const bool sequence = seq_len_max != nullptr;
  if (x.rank() != (sequence ? 3 : 2)) {
    return invalid_argument_error(op, ": x must be ", sequence ? "[time, batch, input]" : "[batch, input]", ", got ",
                                  x.shape());
  }
  if (in[1].rank() != 2) return invalid_argument_error(op, ": cs_prev must be [batch, cell], got ", in[1].shape());
  lstm_sizes s;
  s.time = sequence ? x.dim(0) : 1;
  s.batch = x.dim(sequence ? 1 : 0);
  s.input = x.dim(sequence ? 2 : 1);
  s.cell = in[1].dim(1);
  const tensor_shape state{s.batch, s.cell}, cell_vector{s.cell};
  const std::array<std::pair<const char*, tensor_shape>, 7> expected = {{
      {"cs_prev", state},
      {"h_prev", state},
      {"w", tensor_shape{s.input + s.cell, 4 * s.cell}},
      {"wci", cell_vector},
      {"wcf", cell_vector},
      {"wco", cell_vector},
      {"b", tensor_shape{4 * s.cell}},
  }};
  for (std::size_t k = 0; k < expected.size(); ++k) {
    if (in[k + 1].shape() != expected[k].second) {
      return invalid_argument_error(op, ": ", expected[k].first, " is ", in[k + 1].shape(), "; with x ",
                                    x.shape(), " and cs_prev ", in[1].shape(), " it must be ",
                                    expected[k].second);
    }
  }
  s.steps = sequence ? seq_len_max->data<std::int64_t>()[0] : 1;
  if (s.steps < 0 || s.steps > s.time) {
    return invalid_argument_error(op, ": seq_len_max is ", s.steps, "; it must be in [0, ", s.time,
                                  "] (x has ", s.time, " time steps)");
  }
  constexpr std::int64_t k_int_max = std::numeric_limits<int>::max();
  if (s.time * s.batch > k_int_max || s.input + s.cell > k_int_max || 4 * s.cell > k_int_max) {
    return unimplemented_error(op, ": x ", x.shape(), " with cell size ", s.cell,
                               " exceeds the BLAS index range");
  }
  return s;
}

// Blocks of cell units a step is split into: one per pool thread, 16-unit aligned (whole
// vectors), none smaller than 16 units.
struct unit_blocks {
  std::int64_t size = 0, count = 0;
  unit_blocks(std::int64_t cell, int threads) {
    const std::int64_t per_thread = (cell + threads - 1) / std::max(threads, 1);
    size = std::max<std::int64_t>(16, (per_thread + 15) / 16 * 16);
    count = cell == 0 ? 0 : (cell + size - 1) / size;
  }
  std::int64_t begin(std::int64_t block) const { return block * size; }
  std::int64_t end(std::int64_t block, std::int64_t cell) const { return std::min(cell, (block + 1) * size); }
};

// Runs fn(step, block) for every step in [0, steps) and block in [0, blocks), step by
// step: a block of step t starts once every block of step t - 1 has finished. Blocks are
// claimed in order by whichever of the pool's threads join (the caller always does), and
// a thread waits (spinning, then yielding) only for blocks other threads have claimed and
// are running, so it never waits on a thread that is busy elsewhere. One parallel_for for
// all the steps: a parallel_for per step cost a helper's wake-up each (about 60 us per
// step of the LSTM benchmark, a sixth of the step's work).
template <class F>
void run_in_step_order(compute_pool& pool, std::int64_t steps, std::int64_t blocks, double block_ns, const F& fn) {
  const std::int64_t total = steps * blocks;
  if (total == 0) return;
  std::atomic<std::int64_t> next{0}, done{0};
  // Set when a block throws: the blocks that wait for it give up (parallel_for hands the
  // exception to the caller) instead of spinning forever.
  std::atomic<bool> failed{false};
  auto work = [&](std::int64_t, std::int64_t) {
    for (std::int64_t index = next.fetch_add(1); index < total; index = next.fetch_add(1)) {
      const std::int64_t step = index / blocks;
      for (int spins = 0; done.load(std::memory_order_acquire) < step * blocks; ++spins) {
        if (failed.load(std::memory_order_relaxed)) return;
        if (spins < 4096) {
          _mm_pause();
        } else {
          std::this_thread::yield();
        }
      }
      try {
        fn(step, index % blocks);
      } catch (...) {
        failed.store(true, std::memory_order_relaxed);
        throw;
      }
      done.fetch_add(1, std::memory_order_acq_rel);
    }
  };
  const int threads = static_cast<int>(std::min<std::int64_t>(pool.num_threads(), blocks));
  pool.parallel_for(threads, block_ns * static_cast<double>(total) / threads, work);
}

template <class T>
using array_map = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using const_array_map = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <class T>
class block_lstm_kernel final : public op_kernel {
 public:
  explicit block_lstm_kernel(kernel_construction& c) : op_kernel(c) {
    v2_ = c.op().name == "BlockLSTMV2";
    base_ = c.op().name == "LSTMBlockCell" ? 0 : 1;
    if (!v2_) c.get_attr("forget_bias", &forget_bias_);
    c.get_attrs("cell_clip", &cell_clip_, "use_peephole", &use_peephole_);
  }

  void compute(kernel_context& ctx) override {
    auto sizes = lstm_sizes_of(op(), ctx.inputs().subspan(static_cast<std::size_t>(base_), 8),
                               base_ == 1 ? &ctx.input(0) : nullptr);
    if (!sizes.ok()) return ctx.fail(sizes.error());
    const lstm_sizes s = *sizes;
    const std::int64_t batch = s.batch, cell = s.cell, input = s.input, width = 4 * cell;
    const tensor_shape sequence = base_ == 1 ? tensor_shape{s.time, batch, cell} : tensor_shape{batch, cell};
    std::array<T*, 7> out{};  // i, cs, f, o, ci, co, h
    for (int k = 0; k < 7; ++k) out[static_cast<std::size_t>(k)] = ctx.allocate_output(k, sequence).template data<T>();
    const std::int64_t per_step = batch * cell;
    // Steps from seq_len_max on are zeros.
    for (T* o : out) std::fill(o + s.steps * per_step, o + s.time * per_step, T(0));
    if (s.steps == 0 || per_step == 0) return;

    const T* x = in_arg(ctx, 1).template data<T>();
    const T* w = in_arg(ctx, 4).template data<T>();
    const T* w_h = w + input * width;
    tensor gates_tensor(dtype_of<T>, tensor_shape{s.steps * batch, width});
    T* gates = gates_tensor.data<T>();
    if (input > 0) {
      parallel_gemm<T>(ctx.pool(), false, false, s.steps * batch, width, input, T(1), x, input, w, width, T(0),
                       gates, width);
    } else {
      std::fill_n(gates, s.steps * batch * width, T(0));
    }
    const gate_columns g = v2_ ? k_ifco : k_icfo;
    const unit_blocks blocks(cell, ctx.pool().num_threads());
    run_in_step_order(ctx.pool(), s.steps, blocks.count, gemm_ns(batch, 4 * blocks.size, cell) + 50.0 * batch * blocks.size,
                      [&](std::int64_t t, std::int64_t block) {
                        const T* h_before = t == 0 ? in_arg(ctx, 3).template data<T>() : out[6] + (t - 1) * per_step;
                        const T* cs_before = t == 0 ? in_arg(ctx, 2).template data<T>() : out[1] + (t - 1) * per_step;
                        T* step_gates = gates + t * batch * width;
                        const std::int64_t u0 = blocks.begin(block), u1 = blocks.end(block, cell);
                        for (int q = 0; q < 4; ++q) {
                          gemm(false, false, batch, u1 - u0, cell, T(1), h_before, cell, w_h + q * cell + u0, width,
                               T(1), step_gates + q * cell + u0, width);
                        }
                        cell_forward(ctx, g, s, t, u0, u1, step_gates, cs_before, out);
                      });
  }

 private:
  // The element-wise cell of step t for units [u0, u1) of every batch row.
  void cell_forward(const kernel_context& ctx, const gate_columns& g, const lstm_sizes& s, std::int64_t t,
                    std::int64_t u0, std::int64_t u1, const T* step_gates, const T* cs_before,
                    const std::array<T*, 7>& out) const {
    const std::int64_t cell = s.cell, width = 4 * cell, n = u1 - u0;
    const T* b = in_arg(ctx, 8).template data<T>();
    const_array_map<T> b_i(b + g.i * cell + u0, n), b_c(b + g.c * cell + u0, n), b_f(b + g.f * cell + u0, n),
        b_o(b + g.o * cell + u0, n);
    const_array_map<T> wci(in_arg(ctx, 5).template data<T>() + u0, n), wcf(in_arg(ctx, 6).template data<T>() + u0, n),
        wco(in_arg(ctx, 7).template data<T>() + u0, n);
    const T forget_bias = static_cast<T>(forget_bias_), clip = static_cast<T>(cell_clip_);
    for (std::int64_t row = 0; row < s.batch; ++row) {
      const T* gr = step_gates + row * width;
      const std::int64_t at = t * s.batch * cell + row * cell + u0;
      const_array_map<T> gi(gr + g.i * cell + u0, n), gc(gr + g.c * cell + u0, n), gf(gr + g.f * cell + u0, n),
          go(gr + g.o * cell + u0, n), cs_prev(cs_before + row * cell + u0, n);
      array_map<T> i(out[0] + at, n), cs(out[1] + at, n), f(out[2] + at, n), o(out[3] + at, n), ci(out[4] + at, n),
          co(out[5] + at, n), h(out[6] + at, n);
      if (use_peephole_) {
        i = (gi + b_i + cs_prev * wci).logistic();
        f = (gf + b_f + forget_bias + cs_prev * wcf).logistic();
      } else {
        i = (gi + b_i).logistic();
        f = (gf + b_f + forget_bias).logistic();
      }
      ci = (gc + b_c).tanh();
      cs = ci * i + cs_prev * f;
      if (clip > T(0)) cs = cs.max(-clip).min(clip);
      co = cs.tanh();
      if (use_peephole_) {
        o = (go + b_o + cs * wco).logistic();
      } else {
        o = (go + b_o).logistic();
      }
      h = co * o;
    }
  }

  // Input k as BlockLSTM numbers them (1: x ... 8: b); LSTMBlockCell has no seq_len_max.
  const tensor& in_arg(const kernel_context& ctx, int k) const { return ctx.input(k - 1 + base_); }

  bool v2_ = false;
  int base_ = 1;  // where x is among the inputs
  float forget_bias_ = 0.0f;
  float cell_clip_ = 0.0f;
  bool use_peephole_ = false;
};

// One step's tensors for the cell's gradient, each [batch, cell] (rows `cell` apart).
template <class T>
struct cell_step {
  const T *cs_prev, *i, *cs, *f, *o, *ci, *co, *cs_grad, *h_grad;
};

// A step's cell backwards for units [u0, u1) of every batch row (TensorFlow's
// LSTMBlockCellBprop): from dh (h_grad + dh_carry, when given) and dcs (cs_grad + dcs_carry)
// to the gates' gradients (dgates' columns, in layout g), dcs_carry's next value (the
// gradient of cs_prev) and the peephole weights' gradients, added into (the block owns its
// units' entries). wci, wcf, wco and the peephole gradients are read only with peepholes.
template <class T>
void cell_backward(const gate_columns& g, std::int64_t batch, std::int64_t cell, std::int64_t u0, std::int64_t u1,
                   const cell_step<T>& step, const T* dh_carry, T* dcs_carry, T* dgates,
                   const std::array<const T*, 3>& peepholes, const std::array<T*, 3>& peephole_grads,
                   bool use_peephole) {
  const std::int64_t width = 4 * cell, n = u1 - u0;
  Eigen::Array<T, Eigen::Dynamic, 1> dcs(n), dh(n);
  for (std::int64_t row = 0; row < batch; ++row) {
    const std::int64_t at = row * cell + u0;
    const_array_map<T> cs_prev(step.cs_prev + at, n), i(step.i + at, n), cs(step.cs + at, n), f(step.f + at, n),
        o(step.o + at, n), ci(step.ci + at, n), co(step.co + at, n), cs_grad(step.cs_grad + at, n),
        h_grad(step.h_grad + at, n);
    array_map<T> dcs_next(dcs_carry + at, n);
    T* dg = dgates + row * width;
    array_map<T> di(dg + g.i * cell + u0, n), dci(dg + g.c * cell + u0, n), df(dg + g.f * cell + u0, n),
        d_o(dg + g.o * cell + u0, n);
    if (dh_carry != nullptr) {
      dh = h_grad + const_array_map<T>(dh_carry + at, n);
    } else {
      dh = h_grad;
    }
    d_o = o * (T(1) - o) * dh * co;
    dcs = (T(1) - co * co) * dh * o + cs_grad + dcs_next;
    if (use_peephole) dcs += d_o * const_array_map<T>(peepholes[2] + u0, n);
    dci = (T(1) - ci * ci) * dcs * i;
    df = f * (T(1) - f) * dcs * cs_prev;
    di = i * (T(1) - i) * dcs * ci;
    dcs_next = dcs * f;
    if (use_peephole) {
      dcs_next += di * const_array_map<T>(peepholes[0] + u0, n) + df * const_array_map<T>(peepholes[1] + u0, n);
      array_map<T>(peephole_grads[0] + u0, n) += di * cs_prev;
      array_map<T>(peephole_grads[1] + u0, n) += df * cs_prev;
      array_map<T>(peephole_grads[2] + u0, n) += d_o * cs;
    }
  }
}

template <class T>
class block_lstm_grad_kernel final : public op_kernel {
 public:
  explicit block_lstm_grad_kernel(kernel_construction& c) : op_kernel(c) {
    v2_ = c.op().name == "BlockLSTMGradV2";
    c.get_attr("use_peephole", &use_peephole_);
  }

  void compute(kernel_context& ctx) override {
    auto sizes = lstm_sizes_of(op(), ctx.inputs().subspan(1, 8), &ctx.input(0));
    if (!sizes.ok()) return ctx.fail(sizes.error());
    const lstm_sizes s = *sizes;
    const std::int64_t batch = s.batch, cell = s.cell, input = s.input, width = 4 * cell;
    const tensor_shape sequence{s.time, batch, cell};
    static constexpr std::array<const char*, 9> k_names = {"i", "cs", "f", "o", "ci", "co", "h", "cs_grad", "h_grad"};
    for (int k = 9; k < 18; ++k) {
      if (ctx.input(k).shape() != sequence) {
        return ctx.fail_invalid_argument(op(), ": ", k_names[static_cast<std::size_t>(k - 9)], " is ",
                                         ctx.input(k).shape(), "; it must be [time, batch, cell] ", sequence);
      }
    }
    T* x_grad = ctx.allocate_output(0, ctx.input(1).shape()).template data<T>();
    T* cs_prev_grad = ctx.allocate_output(1, ctx.input(2).shape()).template data<T>();
    T* h_prev_grad = ctx.allocate_output(2, ctx.input(3).shape()).template data<T>();
    T* w_grad = ctx.allocate_output(3, ctx.input(4).shape()).template data<T>();
    std::array<T*, 3> peephole_grads{};  // wci, wcf, wco
    for (int k = 0; k < 3; ++k) {
      peephole_grads[static_cast<std::size_t>(k)] = ctx.allocate_output(4 + k, ctx.input(5 + k).shape()).template data<T>();
      std::fill_n(peephole_grads[static_cast<std::size_t>(k)], cell, T(0));
    }
    T* b_grad = ctx.allocate_output(7, ctx.input(8).shape()).template data<T>();
    std::fill_n(x_grad + s.steps * batch * input, (s.time - s.steps) * batch * input, T(0));
    const std::int64_t per_step = batch * cell;
    if (s.steps == 0 || per_step == 0) {
      std::fill_n(x_grad, s.time * batch * input, T(0));
      std::fill_n(cs_prev_grad, per_step, T(0));
      std::fill_n(h_prev_grad, per_step, T(0));
      std::fill_n(w_grad, (input + cell) * width, T(0));
      std::fill_n(b_grad, width, T(0));
      return;
    }

    const T* x = ctx.input(1).data<T>();
    const T* w = ctx.input(4).data<T>();
    const T* w_h = w + input * width;
    const T* h = ctx.input(15).data<T>();
    tensor dgates_tensor(dtype_of<T>, tensor_shape{s.steps * batch, width});
    T* dgates = dgates_tensor.data<T>();
    // What flows from step t + 1 into step t: dh (the recurrent product's gradient) and dcs.
    std::vector<T> dh_carry(static_cast<std::size_t>(per_step), T(0));
    std::vector<T> dcs_carry(static_cast<std::size_t>(per_step), T(0));
    const gate_columns g = v2_ ? k_ifco : k_icfo;
    const unit_blocks blocks(cell, ctx.pool().num_threads());
    // w_h^T [4 cell, cell], so that a step's dh = dgates w_h^T is a product of plain
    // (untransposed) operands: [32, 2048] x [2048, 512] ran at 170 GFLOP/s that way and at
    // 115 with w_h read transposed, in oneDNN as in MKL.
    tensor w_h_t_tensor(dtype_of<T>, tensor_shape{width, cell});
    T* w_h_t = w_h_t_tensor.data<T>();
    constexpr std::int64_t k_tile = 32;  // transposed in 32 x 32 tiles, for the caches
    ctx.pool().parallel_for((width + k_tile - 1) / k_tile, static_cast<double>(k_tile * cell) * 0.5,
                            [&](std::int64_t b0, std::int64_t b1) {
                              for (std::int64_t c0 = b0 * k_tile; c0 < std::min(width, b1 * k_tile); c0 += k_tile) {
                                const std::int64_t c1 = std::min(width, c0 + k_tile);
                                for (std::int64_t r0 = 0; r0 < cell; r0 += k_tile) {
                                  const std::int64_t r1 = std::min(cell, r0 + k_tile);
                                  for (std::int64_t c = c0; c < c1; ++c) {
                                    for (std::int64_t r = r0; r < r1; ++r) w_h_t[c * cell + r] = w_h[r * width + c];
                                  }
                                }
                              }
                            });
    run_in_step_order(ctx.pool(), s.steps, blocks.count, gemm_ns(batch, blocks.size, width) + 80.0 * batch * blocks.size,
                      [&](std::int64_t from_last, std::int64_t block) {
                        const std::int64_t t = s.steps - 1 - from_last;  // last step first
                        const std::int64_t u0 = blocks.begin(block), u1 = blocks.end(block, cell);
                        if (t + 1 < s.steps) {
                          gemm(false, false, batch, u1 - u0, width, T(1), dgates + (t + 1) * batch * width, width,
                               w_h_t + u0, cell, T(0), dh_carry.data() + u0, cell);
                        }
                        auto at = [&](int k, std::int64_t step) { return ctx.input(k).data<T>() + step * per_step; };
                        const cell_step<T> step{t == 0 ? ctx.input(2).data<T>() : at(10, t - 1),
                                                at(9, t), at(10, t), at(11, t), at(12, t), at(13, t), at(14, t),
                                                at(16, t), at(17, t)};
                        cell_backward(g, batch, cell, u0, u1, step, t + 1 < s.steps ? dh_carry.data() : nullptr,
                                      dcs_carry.data(), dgates + t * batch * width,
                                      {ctx.input(5).data<T>(), ctx.input(6).data<T>(), ctx.input(7).data<T>()},
                                      peephole_grads, use_peephole_);
                      });
    compute_pool& pool = ctx.pool();
    // The gradients of the initial state: through step 0's recurrent product and its cell.
    parallel_gemm<T>(pool, false, false, batch, cell, width, T(1), dgates, width, w_h_t, cell, T(0), h_prev_grad, cell);
    std::copy(dcs_carry.begin(), dcs_carry.end(), cs_prev_grad);
    const std::int64_t rows = s.steps * batch;
    if (input > 0) {
      parallel_gemm<T>(pool, false, true, rows, input, width, T(1), dgates, width, w, width, T(0), x_grad, input);
    }
    // w's gradient in one product: xh^T dgates, xh [steps * batch, input + cell] holding
    // each step's [x[t], h_{t-1}] (h_{-1} = h_prev), as TensorFlow's per-step xh.
    tensor xh_tensor(dtype_of<T>, tensor_shape{rows, input + cell});
    T* xh = xh_tensor.data<T>();
    pool.parallel_for(rows, static_cast<double>(input + cell) * 0.2, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        std::copy_n(x + r * input, input, xh + r * (input + cell));
        const T* h_before = r < batch ? ctx.input(3).data<T>() + r * cell : h + (r - batch) * cell;
        std::copy_n(h_before, cell, xh + r * (input + cell) + input);
      }
    });
    parallel_gemm<T>(pool, true, false, input + cell, width, rows, T(1), xh, input + cell, dgates, width, T(0), w_grad,
                     width);
    pool.parallel_for(width, static_cast<double>(rows), [&](std::int64_t c0, std::int64_t c1) {
      array_map<T> sum(b_grad + c0, c1 - c0);
      sum.setZero();
      for (std::int64_t r = 0; r < rows; ++r) sum += const_array_map<T>(dgates + r * width + c0, c1 - c0);
    });
  }

 private:
  bool v2_ = false;
  bool use_peephole_ = false;
};

// LSTMBlockCellGrad (inputs x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co,
// cs_grad, h_grad): one step's cell backwards; the products with w are the gradient
// function's own MatMuls (graph/ops/rnn_ops.cc), as in TensorFlow.
template <class T>
class lstm_block_cell_grad_kernel final : public op_kernel {
 public:
  explicit lstm_block_cell_grad_kernel(kernel_construction& c) : op_kernel(c) {
    c.get_attr("use_peephole", &use_peephole_);
  }

  void compute(kernel_context& ctx) override {
    auto sizes = lstm_sizes_of(op(), ctx.inputs().subspan(0, 8), nullptr);
    if (!sizes.ok()) return ctx.fail(sizes.error());
    const std::int64_t batch = sizes->batch, cell = sizes->cell;
    const tensor_shape state{batch, cell};
    static constexpr std::array<const char*, 8> k_names = {"i", "cs", "f", "o", "ci", "co", "cs_grad", "h_grad"};
    for (int k = 8; k < 16; ++k) {
      if (ctx.input(k).shape() != state) {
        return ctx.fail_invalid_argument(op(), ": ", k_names[static_cast<std::size_t>(k - 8)], " is ",
                                         ctx.input(k).shape(), "; it must be [batch, cell] ", state);
      }
    }
    T* cs_prev_grad = ctx.allocate_output(0, state).template data<T>();
    T* dicfo = ctx.allocate_output(1, tensor_shape{batch, 4 * cell}).template data<T>();
    std::array<T*, 3> peephole_grads{};
    for (int k = 0; k < 3; ++k) {
      peephole_grads[static_cast<std::size_t>(k)] = ctx.allocate_output(2 + k, tensor_shape{cell}).template data<T>();
      std::fill_n(peephole_grads[static_cast<std::size_t>(k)], cell, T(0));
    }
    std::fill_n(cs_prev_grad, batch * cell, T(0));  // no carry: cs_grad is the whole dcs
    auto in = [&](int k) { return ctx.input(k).data<T>(); };
    const cell_step<T> step{in(1), in(8), in(9), in(10), in(11), in(12), in(13), in(14), in(15)};
    cell_backward(k_icfo, batch, cell, std::int64_t{0}, cell, step, static_cast<const T*>(nullptr), cs_prev_grad,
                  dicfo, {in(4), in(5), in(6)}, peephole_grads, use_peephole_);
  }

 private:
  bool use_peephole_ = false;
};

}  // namespace

void register_rnn_kernels(kernel_registry& registry) {
  add_typed_kernels<block_lstm_kernel, float_types>(registry, "LSTMBlockCell");
  add_typed_kernels<lstm_block_cell_grad_kernel, float_types>(registry, "LSTMBlockCellGrad");
  for (const char* op : {"BlockLSTM", "BlockLSTMV2"}) add_typed_kernels<block_lstm_kernel, float_types>(registry, op);
  for (const char* op : {"BlockLSTMGrad", "BlockLSTMGradV2"}) {
    add_typed_kernels<block_lstm_grad_kernel, float_types>(registry, op);
  }
}

}  // namespace troupe::kernels
