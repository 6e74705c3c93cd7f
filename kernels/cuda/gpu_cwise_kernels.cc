// GPU kernels for element-wise ops: arithmetic and comparisons with numpy broadcasting,
// activations and their gradients, Cast, Fill, ZerosLike, OnesLike, AddN, BiasAdd,
// BiasAddGrad, ClipByValue, Select and SelectV2, registered for device type "GPU".
//
// Each kernel checks its shapes on the host, with the CPU kernel's rules and error messages
// (broadcasting through kernels/cpu/broadcast.h), then enqueues one launcher of
// gpu_cwise_launch.h, which computes as the CPU kernel does. Broadcasts reach the launchers
// collapsed (broadcast_geometry): size-1 dimensions dropped and neighbours merged, so that
// [2,3,4] + [4] arrives as [6,4] + [4], which takes the launcher's fast row path.
//
// Types: the CPU kernels' type constraints restricted to float, double, int32, int64 and
// bool (no GPU kernel for the 8- and 16-bit integers: placement keeps those on the CPU).
// Where the CPU kernel refuses an input for its values (integer division by zero, integers
// to negative powers), the GPU computes a defined value instead: see gpu_cwise_launch.h.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/broadcast.h"
#include "kernels/cuda/gpu_cwise_launch.h"
#include "kernels/cuda/gpu_kernel.h"
#include "kernels/kernel_registry.h"
#include "kernels/shape_checks.h"

namespace troupe::kernels {

namespace gpu {

namespace {

using real_types = type_list<float, double, std::int32_t, std::int64_t>;
using numeric_types = type_list<float, double, std::int32_t, std::int64_t, bool>;

// --- Broadcast geometry --------------------------------------------------------------------

// `dims` (row-major) read by K operands with these strides (0 where one repeats), collapsed
// as broadcast_geometry requires; nullopt when more than k_max_broadcast_rank dimensions
// remain.
template <int K>
std::optional<broadcast_geometry<K>> collapse(const std::vector<std::int64_t>& dims,
                                              const std::array<std::vector<std::int64_t>, K>& strides) {
  broadcast_geometry<K> g;
  g.rank = 0;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = dims[i];
    if (d == 1) continue;  // contributes nothing to any offset
    bool merge = g.rank > 0;
    for (int k = 0; k < K && merge; ++k) merge = g.strides[k][g.rank - 1] == strides[k][i] * d;
    if (merge) {
      g.dims[g.rank - 1] *= d;
      for (int k = 0; k < K; ++k) g.strides[k][g.rank - 1] = strides[k][i];
      continue;
    }
    if (g.rank == k_max_broadcast_rank) return std::nullopt;
    g.dims[g.rank] = d;
    for (int k = 0; k < K; ++k) g.strides[k][g.rank] = strides[k][i];
    ++g.rank;
  }
  if (g.rank == 0) {  // every dimension is 1: a single element
    g.rank = 1;
    g.dims[0] = 1;
    for (int k = 0; k < K; ++k) g.strides[k][0] = 0;
  }
  return g;
}

template <int K>
struct broadcast {
  tensor_shape shape;  // the output's
  broadcast_geometry<K> geometry;
};

// The broadcast of K operand shapes. Errors: the CPU's invalid_argument "Incompatible
// shapes: [2,3] vs. [4]"; unimplemented beyond k_max_broadcast_rank collapsed dimensions.
template <int K>
result<broadcast<K>> broadcast_shapes(const std::array<tensor_shape, K>& shapes) {
  auto plan = broadcast_plan<K>::make(shapes);
  if (!plan.ok()) return plan.error();
  const tensor_shape& out = plan->output_shape();
  const int rank = out.rank();
  std::array<std::vector<std::int64_t>, K> strides;
  for (int k = 0; k < K; ++k) {
    strides[k].assign(static_cast<std::size_t>(rank), 0);
    std::int64_t stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
      const int j = shapes[k].rank() - rank + i;  // operand k's dimension aligned with i
      const std::int64_t d = j >= 0 ? shapes[k].dim(j) : 1;
      strides[k][static_cast<std::size_t>(i)] = d == 1 ? 0 : stride;
      stride *= d;
    }
  }
  auto g = collapse<K>(out.dims(), strides);
  if (!g) {
    std::string operands;
    for (int k = 0; k < K; ++k) operands += (k > 0 ? " vs. " : "") + shapes[k].to_string();
    return unimplemented_error("broadcasting ", operands, " needs more than ", k_max_broadcast_rank,
                               " dimensions even after merging neighbours, the most the GPU kernels take");
  }
  return broadcast<K>{out, *g};
}

// Two operands of one shape walked together.
broadcast_geometry<2> same_shape_geometry(std::int64_t n) {
  broadcast_geometry<2> g;
  g.dims[0] = n;
  g.strides[0][0] = g.strides[1][0] = 1;
  return g;
}

// --- Element-wise kernels ------------------------------------------------------------------

template <class T>
class unary_kernel final : public gpu_kernel {
 public:
  unary_kernel(kernel_construction& c, unary_op code) : gpu_kernel(c), code_(code) {
    if (code == unary_op::leaky_relu) c.get_attr("alpha", &alpha_);
  }

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    const tensor& x = ctx.input(0);
    tensor& y = allocate_output(ctx, 0, x.shape());
    if (x.num_elements() == 0) return;
    launch_unary(code_, alpha_, x.data<T>(), y.data<T>(), x.num_elements(), stream());
    check_launch(ctx, op());
  }

 private:
  unary_op code_;
  float alpha_ = 0;
};

// Broadcasting operands (Add, Pow, ...) or operands of one shape (the *Grad ops).
enum class operands { broadcast, same_shape };

template <class T>
class binary_kernel final : public gpu_kernel {
 public:
  binary_kernel(kernel_construction& c, binary_op code, operands kind) : gpu_kernel(c), code_(code), kind_(kind) {
    if (code == binary_op::leaky_relu_grad) c.get_attr("alpha", &alpha_);
  }

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    const tensor& x = ctx.input(0);
    const tensor& y = ctx.input(1);
    broadcast_geometry<2> geometry;
    tensor_shape shape;
    if (kind_ == operands::same_shape) {
      if (x.shape() != y.shape()) {
        return ctx.fail_invalid_argument(op(), " inputs must have the same shape, but have ", x.shape(), " and ",
                                         y.shape());
      }
      shape = x.shape();
      geometry = same_shape_geometry(x.num_elements());
    } else {
      auto b = broadcast_shapes<2>({x.shape(), y.shape()});
      if (!b.ok()) return ctx.fail(b.error());
      shape = b->shape;
      geometry = b->geometry;
    }
    tensor& z = allocate_output(ctx, 0, shape);
    if (z.num_elements() == 0) return;
    launch_binary(code_, alpha_, geometry, x.data<T>(), y.data<T>(), z.data<T>(), stream());
    check_launch(ctx, op());
  }

 private:
  binary_op code_;
  operands kind_;
  float alpha_ = 0;
};

template <class T>
class compare_kernel final : public gpu_kernel {
 public:
  compare_kernel(kernel_construction& c, compare_op code) : gpu_kernel(c), code_(code) {
    if (code == compare_op::equal || code == compare_op::not_equal) {
      c.get_attr("incompatible_shape_error", &incompatible_shape_error_);
    }
  }

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    const tensor& x = ctx.input(0);
    const tensor& y = ctx.input(1);
    auto b = broadcast_shapes<2>({x.shape(), y.shape()});
    if (!b.ok()) {
      // Equal and NotEqual may answer shapes that do not broadcast with a scalar, as the CPU.
      if (!incompatible_shape_error_ && b.error().error_code() == code::invalid_argument) {
        tensor& z = allocate_output(ctx, 0, tensor_shape{});
        launch_fill(code_ == compare_op::not_equal, z.data<bool>(), 1, stream());
        check_launch(ctx, op());
        return;
      }
      return ctx.fail(b.error());
    }
    tensor& z = allocate_output(ctx, 0, b->shape);
    if (z.num_elements() == 0) return;
    launch_compare(code_, b->geometry, x.data<T>(), y.data<T>(), z.data<bool>(), stream());
    check_launch(ctx, op());
  }

 private:
  compare_op code_;
  bool incompatible_shape_error_ = true;
};

// Select (TensorFlow 1): t and e have one shape; the condition has that shape, or is a
// vector choosing whole slices along the first dimension, or is a scalar.
template <class T>
class select_kernel final : public gpu_kernel {
 public:
  explicit select_kernel(kernel_construction& c) : gpu_kernel(c) {}

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    const tensor& cond = ctx.input(0);
    const tensor& t = ctx.input(1);
    const tensor& e = ctx.input(2);
    if (t.shape() != e.shape()) {
      return ctx.fail_invalid_argument("'t' and 'e' must have the same shape, but have ", t.shape(), " and ",
                                       e.shape());
    }
    // The condition as a shape that broadcasts against t: a vector becomes [n, 1, ..., 1].
    tensor_shape cond_shape = cond.shape();
    if (cond.rank() == 1 && t.rank() >= 1 && cond.dim(0) == t.dim(0)) {
      while (cond_shape.rank() < t.rank()) cond_shape.add_dim(1);
    } else if (cond.rank() != 0 && cond.shape() != t.shape()) {
      return ctx.fail_invalid_argument("'condition' of shape ", cond.shape(),
                                       " must be a scalar, have the shape of 't' and 'e' (", t.shape(),
                                       "), or be a vector of their first dimension's size");
    }
    auto b = broadcast_shapes<3>({cond_shape, t.shape(), e.shape()});
    if (!b.ok()) return ctx.fail(b.error());
    tensor& out = allocate_output(ctx, 0, t.shape());
    if (out.num_elements() == 0) return;
    launch_select(b->geometry, cond.data<bool>(), t.data<T>(), e.data<T>(), out.data<T>(), stream());
    check_launch(ctx, op());
  }
};

// SelectV2: condition, t and e broadcast together.
template <class T>
class select_v2_kernel final : public gpu_kernel {
 public:
  explicit select_v2_kernel(kernel_construction& c) : gpu_kernel(c) {}

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    const tensor& cond = ctx.input(0);
    const tensor& t = ctx.input(1);
    const tensor& e = ctx.input(2);
    auto b = broadcast_shapes<3>({cond.shape(), t.shape(), e.shape()});
    if (!b.ok()) return ctx.fail(b.error());
    tensor& out = allocate_output(ctx, 0, b->shape);
    if (out.num_elements() == 0) return;
    launch_select(b->geometry, cond.data<bool>(), t.data<T>(), e.data<T>(), out.data<T>(), stream());
    check_launch(ctx, op());
  }
};

// ClipByValue: max(min(t, clip_value_max), clip_value_min), the bounds broadcast to t's
// shape (the output always has t's shape).
template <class T>
class clip_by_value_kernel final : public gpu_kernel {
 public:
  explicit clip_by_value_kernel(kernel_construction& c) : gpu_kernel(c) {}

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    const tensor& t = ctx.input(0);
    const tensor& lo = ctx.input(1);
    const tensor& hi = ctx.input(2);
    auto b = broadcast_shapes<3>({t.shape(), lo.shape(), hi.shape()});
    if (!b.ok() && b.error().error_code() != code::invalid_argument) return ctx.fail(b.error());
    if (!b.ok() || b->shape != t.shape()) {
      return ctx.fail_invalid_argument("clip_value_min ", lo.shape(), " and clip_value_max ", hi.shape(),
                                       " must broadcast to the shape of t ", t.shape());
    }
    tensor& out = allocate_output(ctx, 0, t.shape());
    if (out.num_elements() == 0) return;
    launch_clip(b->geometry, t.data<T>(), lo.data<T>(), hi.data<T>(), out.data<T>(), stream());
    check_launch(ctx, op());
  }
};

// --- Cast, Fill, ZerosLike, OnesLike, AddN -------------------------------------------------

element_type element_type_of(dtype type) {
  switch (type) {
    case dtype::float64: return element_type::float64;
    case dtype::int32: return element_type::int32;
    case dtype::int64: return element_type::int64;
    case dtype::bool_: return element_type::bool_;
    default: return element_type::float32;  // registered for these five only
  }
}

// Cast: registered per (SrcT, DstT) pair. Truncate only matters for half-precision types.
class cast_kernel final : public gpu_kernel {
 public:
  explicit cast_kernel(kernel_construction& c) : gpu_kernel(c) {}

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    const tensor& x = ctx.input(0);
    if (ctx.output_type(0) == x.type()) {
      ctx.set_output(0, x);  // tensors are immutable: share
      return;
    }
    tensor& y = allocate_output(ctx, 0, x.shape());
    if (x.num_elements() == 0) return;
    launch_cast(element_type_of(x.type()), element_type_of(y.type()), x.raw_data(), y.raw_data(), x.num_elements(),
                stream());
    check_launch(ctx, op());
  }
};

// Fill: dims and value are read on the host; the value travels to the GPU as a launch
// argument.
template <class T>
class fill_kernel final : public gpu_kernel {
 public:
  explicit fill_kernel(kernel_construction& c) : gpu_kernel(c) {
    declare_host_memory_input(0);
    declare_host_memory_input(1);
  }

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    const tensor& dims = ctx.input(0);
    const tensor& value = ctx.input(1);
    if (dims.rank() != 1) {
      return ctx.fail_invalid_argument("dims must be a vector, but has shape ", dims.shape().to_string());
    }
    if (value.rank() != 0) {
      return ctx.fail_invalid_argument("value must be a scalar, but has shape ", value.shape().to_string());
    }
    auto shape = tensor_shape::make(index_values(dims));
    if (!shape.ok()) {
      return ctx.fail_invalid_argument("dims ", dims.debug_string(), " is not a valid shape: ", shape.error().message());
    }
    tensor& out = allocate_output(ctx, 0, std::move(*shape));
    if (out.num_elements() == 0) return;
    launch_fill(value.scalar_value<T>(), out.data<T>(), out.num_elements(), stream());
    check_launch(ctx, op());
  }
};

// ZerosLike (value 0) and OnesLike (value 1).
template <class T>
class constant_like_kernel final : public gpu_kernel {
 public:
  constant_like_kernel(kernel_construction& c, int value) : gpu_kernel(c), value_(static_cast<T>(value)) {}

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    tensor& y = allocate_output(ctx, 0, ctx.input(0).shape());
    if (y.num_elements() == 0) return;
    launch_fill(value_, y.data<T>(), y.num_elements(), stream());
    check_launch(ctx, op());
  }

 private:
  T value_;
};

// AddN: the sum of N inputs of one shape, added in input order (as the CPU adds them, so
// floating-point sums agree to the bit).
template <class T>
class add_n_kernel final : public gpu_kernel {
 public:
  explicit add_n_kernel(kernel_construction& c) : gpu_kernel(c) {}

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    const tensor& first = ctx.input(0);
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).shape() != first.shape()) {
        return ctx.fail_invalid_argument("AddN inputs must all have the same shape, but input 0 is ", first.shape(),
                                         " and input ", i, " is ", ctx.input(i).shape());
      }
    }
    if (ctx.num_inputs() == 1) {
      ctx.set_output(0, first);
      return;
    }
    tensor& out = allocate_output(ctx, 0, first.shape());
    if (out.num_elements() == 0) return;
    std::vector<const T*> inputs;
    for (const tensor& t : ctx.inputs()) inputs.push_back(t.data<T>());
    launch_add_n(inputs.data(), ctx.num_inputs(), out.data<T>(), out.num_elements(), stream());
    check_launch(ctx, op());
  }
};

// --- BiasAdd, BiasAddGrad ------------------------------------------------------------------

class bias_kernel_base : public gpu_kernel {
 public:
  explicit bias_kernel_base(kernel_construction& c) : gpu_kernel(c) {
    if (status s = read_bias_format(c.node(), &nchw_); !s.ok()) c.fail(std::move(s));
  }

 protected:
  bool nchw_ = false;
};

// BiasAdd is Add with a geometry of its own: the bias repeats over batch and spatial.
template <class T>
class bias_add_kernel final : public bias_kernel_base {
 public:
  using bias_kernel_base::bias_kernel_base;

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    const tensor& value = ctx.input(0);
    const tensor& bias = ctx.input(1);
    auto layout = bias_add_layout(value.shape(), bias.shape(), nchw_);
    if (!layout.ok()) return ctx.fail(layout.error());
    const bias_layout l = *layout;
    tensor& out = allocate_output(ctx, 0, value.shape());
    if (out.num_elements() == 0) return;
    // Three dimensions never exceed k_max_broadcast_rank: collapse always succeeds.
    const std::array<std::vector<std::int64_t>, 2> strides = {{{l.channels * l.spatial, l.spatial, 1}, {0, 1, 0}}};
    const auto geometry = collapse<2>({l.batch, l.channels, l.spatial}, strides);
    launch_binary(binary_op::add, 0.f, *geometry, value.data<T>(), bias.data<T>(), out.data<T>(), stream());
    check_launch(ctx, op());
  }
};

// The bias gradient: out_backprop summed over every dimension but the channel one.
template <class T>
class bias_add_grad_kernel final : public bias_kernel_base {
 public:
  using bias_kernel_base::bias_kernel_base;

  void compute(kernel_context& ctx) override {
    if (!begin(ctx)) return;
    const tensor& grad = ctx.input(0);
    auto layout = bias_add_grad_layout(grad.shape(), nchw_);
    if (!layout.ok()) return ctx.fail(layout.error());
    const bias_layout l = *layout;
    tensor& out = allocate_output(ctx, 0, tensor_shape{l.channels});
    if (l.channels == 0) return;
    // Partial sums of a split reduction live until the work queued on the stream is done
    // (allocate_temp's guarantee), so `scratch` may go out of scope when compute returns.
    const std::int64_t scratch_size = bias_grad_scratch(l.batch, l.channels, l.spatial);
    tensor scratch;
    if (scratch_size > 0) scratch = allocate_temp(dtype_of<T>, tensor_shape{scratch_size});
    launch_bias_grad(grad.data<T>(), l.batch, l.channels, l.spatial, scratch_size > 0 ? scratch.data<T>() : nullptr,
                     out.data<T>(), stream());
    check_launch(ctx, op());
  }
};

// Registers Kernel<T>(construction, args...) for op on "GPU" for each T of List,
// constrained on attribute T.
template <template <class> class Kernel, class List, class... Args>
void add_gpu_kernels(kernel_registry& registry, const std::string& op, Args... args) {
  for_each_type<List>([&]<class T>() {
    registry.add(op, "GPU", {{"T", dtype_of<T>}}, [=](kernel_construction& c) -> std::unique_ptr<op_kernel> {
      return std::make_unique<Kernel<T>>(c, args...);
    });
  });
}

}  // namespace

}  // namespace gpu

void register_gpu_cwise_kernels(kernel_registry& registry) {
  using gpu::add_gpu_kernels;
  using gpu::binary_op;
  using gpu::compare_op;
  using gpu::numeric_types;
  using gpu::operands;
  using gpu::real_types;
  using gpu::unary_op;

  // Unary: the CPU's signed and real types are real_types here; the rest float_types.
  const std::pair<const char*, unary_op> real_unary[] = {
      {"Neg", unary_op::neg},       {"Abs", unary_op::abs},   {"Sign", unary_op::sign},
      {"Square", unary_op::square}, {"Relu", unary_op::relu}, {"Relu6", unary_op::relu6},
      {"Reciprocal", unary_op::reciprocal},
  };
  for (const auto& [op, code] : real_unary) add_gpu_kernels<gpu::unary_kernel, real_types>(registry, op, code);
  const std::pair<const char*, unary_op> float_unary[] = {
      {"Exp", unary_op::exp},     {"Log", unary_op::log},   {"Sqrt", unary_op::sqrt},
      {"Rsqrt", unary_op::rsqrt}, {"Tanh", unary_op::tanh}, {"Sigmoid", unary_op::sigmoid},
      {"Elu", unary_op::elu},     {"LeakyRelu", unary_op::leaky_relu}, {"Softplus", unary_op::softplus},
  };
  for (const auto& [op, code] : float_unary) add_gpu_kernels<gpu::unary_kernel, float_types>(registry, op, code);

  // Binary, broadcasting (Pow: the CPU's signed types, which here are the real ones).
  const std::pair<const char*, binary_op> broadcasting[] = {
      {"Add", binary_op::add},           {"AddV2", binary_op::add},         {"Sub", binary_op::sub},
      {"Mul", binary_op::mul},           {"RealDiv", binary_op::div},       {"Maximum", binary_op::maximum},
      {"Minimum", binary_op::minimum},   {"Pow", binary_op::pow},           {"FloorDiv", binary_op::floor_div},
      {"FloorMod", binary_op::floor_mod},
  };
  for (const auto& [op, code] : broadcasting) {
    add_gpu_kernels<gpu::binary_kernel, real_types>(registry, op, code, operands::broadcast);
  }
  // Gradients: two operands of one shape.
  add_gpu_kernels<gpu::binary_kernel, real_types>(registry, "ReluGrad", binary_op::relu_grad, operands::same_shape);
  add_gpu_kernels<gpu::binary_kernel, real_types>(registry, "Relu6Grad", binary_op::relu6_grad, operands::same_shape);
  const std::pair<const char*, binary_op> float_grads[] = {
      {"EluGrad", binary_op::elu_grad},         {"LeakyReluGrad", binary_op::leaky_relu_grad},
      {"SoftplusGrad", binary_op::softplus_grad}, {"TanhGrad", binary_op::tanh_grad},
      {"SigmoidGrad", binary_op::sigmoid_grad}, {"SqrtGrad", binary_op::sqrt_grad},
      {"RsqrtGrad", binary_op::rsqrt_grad},     {"ReciprocalGrad", binary_op::reciprocal_grad},
  };
  for (const auto& [op, code] : float_grads) {
    add_gpu_kernels<gpu::binary_kernel, float_types>(registry, op, code, operands::same_shape);
  }

  add_gpu_kernels<gpu::compare_kernel, numeric_types>(registry, "Equal", compare_op::equal);
  add_gpu_kernels<gpu::compare_kernel, numeric_types>(registry, "NotEqual", compare_op::not_equal);
  add_gpu_kernels<gpu::compare_kernel, real_types>(registry, "Less", compare_op::less);
  add_gpu_kernels<gpu::compare_kernel, real_types>(registry, "LessEqual", compare_op::less_equal);
  add_gpu_kernels<gpu::compare_kernel, real_types>(registry, "Greater", compare_op::greater);
  add_gpu_kernels<gpu::compare_kernel, real_types>(registry, "GreaterEqual", compare_op::greater_equal);

  add_gpu_kernels<gpu::select_kernel, numeric_types>(registry, "Select");
  add_gpu_kernels<gpu::select_v2_kernel, numeric_types>(registry, "SelectV2");
  add_gpu_kernels<gpu::clip_by_value_kernel, real_types>(registry, "ClipByValue");
  add_gpu_kernels<gpu::constant_like_kernel, numeric_types>(registry, "ZerosLike", 0);
  add_gpu_kernels<gpu::constant_like_kernel, numeric_types>(registry, "OnesLike", 1);
  add_gpu_kernels<gpu::add_n_kernel, real_types>(registry, "AddN");
  add_gpu_kernels<gpu::bias_add_kernel, real_types>(registry, "BiasAdd");
  add_gpu_kernels<gpu::bias_add_grad_kernel, real_types>(registry, "BiasAddGrad");

  for_each_type<numeric_types>([&]<class S>() {
    for_each_type<numeric_types>([&]<class D>() {
      registry.add("Cast", "GPU", {{"SrcT", dtype_of<S>}, {"DstT", dtype_of<D>}}, make_kernel<gpu::cast_kernel>);
    });
    for_each_type<index_types>([&]<class Index>() {
      registry.add("Fill", "GPU", {{"T", dtype_of<S>}, {"index_type", dtype_of<Index>}},
                   make_kernel<gpu::fill_kernel<S>>);
    });
  });
}

}  // namespace troupe::kernels
