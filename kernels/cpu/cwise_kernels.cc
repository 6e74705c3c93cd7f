// CPU kernels: element-wise ops (schemas in graph/ops/math_ops.cc).
//
// Every op is a functor; a few generic kernels do everything else:
//
//   unary_kernel<T, Op>    y = op(x); Op may also give an Eigen array form (vectorized
//                          exp, log, tanh, ...)
//   binary_kernel<T, Op>   z = op(x, y) with numpy broadcasting: a flat loop when the
//                          shapes are equal, a scalar-vs-tensor loop, else a
//                          broadcast_plan (kernels/cpu/broadcast.h) walked in runs
//   select, cast, constant_like, add_n kernels for the rest
//
// so an op is one functor and one line in register_cwise_kernels (the op list).
//
// Every kernel reuses an input's buffer for its output when no one else holds it
// (forward_input_or_allocate_output), splits large tensors over the device pool, and
// estimates its time from its functor's cost per element, so that the executor runs it
// inline when it is small and on the pool when it is large.
//
// Integer arithmetic wraps around (two's complement), as TensorFlow's does, instead of
// being undefined behaviour; integer RealDiv fails on a zero divisor. Cast from floating
// point to integers saturates and maps NaN to 0 (as XLA does; C++ leaves it undefined).

// GCC 12 reports Eigen's AVX-512 math (built on _mm512_undefined_*) as "maybe
// uninitialized"; a known false positive that would bury real warnings from this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <concepts>
#include <initializer_list>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>

#include "kernels/cpu/broadcast.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

namespace {

using signed_types =
    type_list<float, double, std::int8_t, std::int16_t, std::int32_t, std::int64_t>;

// --- Wrapping integer arithmetic ---------------------------------------------------------

// Integers are computed in an unsigned type at least as wide as int, so that neither
// signed overflow nor promotion of small unsigned types to int can be undefined.
template <class T>
using wide_unsigned = std::conditional_t<sizeof(T) <= 4, std::uint32_t, std::uint64_t>;

template <class T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<wide_unsigned<T>>(a) + static_cast<wide_unsigned<T>>(b));
  } else {
    return a + b;
  }
}
template <class T>
T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<wide_unsigned<T>>(a) - static_cast<wide_unsigned<T>>(b));
  } else {
    return a - b;
  }
}
template <class T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<wide_unsigned<T>>(a) * static_cast<wide_unsigned<T>>(b));
  } else {
    return a * b;
  }
}

// --- The ops -----------------------------------------------------------------------------
//
// A functor's operator() computes one element. `cost` estimates nanoseconds per element
// for parallel_for. A unary functor may add array(x), an Eigen expression computing the
// same thing on a whole array (used for contiguous data). A binary functor may add
// check_rhs(y) to validate the right operand before anything is computed.

struct neg_op {
  static constexpr double cost = 0.3;
  template <class T>
  T operator()(T x) const {
    return wrap_sub(T(0), x);
  }
};

struct abs_op {
  static constexpr double cost = 0.3;
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return std::abs(x);
    else
      return x < T(0) ? wrap_sub(T(0), x) : x;
  }
};

struct square_op {
  static constexpr double cost = 0.3;
  template <class T>
  T operator()(T x) const {
    return wrap_mul(x, x);
  }
};

struct sqrt_op {
  static constexpr double cost = 1.0;
  template <class T>
  T operator()(T x) const {
    return std::sqrt(x);
  }
  template <class A>
  auto array(const A& x) const {
    return x.sqrt();
  }
};

struct rsqrt_op {
  static constexpr double cost = 1.0;
  template <class T>
  T operator()(T x) const {
    return T(1) / std::sqrt(x);
  }
  template <class A>
  auto array(const A& x) const {
    return x.rsqrt();
  }
};

struct exp_op {
  static constexpr double cost = 2.0;
  template <class T>
  T operator()(T x) const {
    return std::exp(x);
  }
  template <class A>
  auto array(const A& x) const {
    return x.exp();
  }
};

struct log_op {
  static constexpr double cost = 2.0;
  template <class T>
  T operator()(T x) const {
    return std::log(x);
  }
  template <class A>
  auto array(const A& x) const {
    return x.log();
  }
};

struct tanh_op {
  static constexpr double cost = 2.0;
  template <class T>
  T operator()(T x) const {
    return std::tanh(x);
  }
  template <class A>
  auto array(const A& x) const {
    return x.tanh();
  }
};

struct sigmoid_op {
  static constexpr double cost = 2.0;
  template <class T>
  T operator()(T x) const {
    return T(1) / (T(1) + std::exp(-x));
  }
  template <class A>
  auto array(const A& x) const {
    return x.logistic();
  }
};

// Relu keeps NaN, as TensorFlow's does.
struct relu_op {
  static constexpr double cost = 0.3;
  template <class T>
  T operator()(T x) const {
    return x < T(0) ? T(0) : x;
  }
};

struct add_op {
  static constexpr double cost = 0.3;
  template <class T>
  T operator()(T a, T b) const {
    return wrap_add(a, b);
  }
};

struct sub_op {
  static constexpr double cost = 0.3;
  template <class T>
  T operator()(T a, T b) const {
    return wrap_sub(a, b);
  }
};

struct mul_op {
  static constexpr double cost = 0.3;
  template <class T>
  T operator()(T a, T b) const {
    return wrap_mul(a, b);
  }
};

// Integers divide truncating toward zero; the most negative value divided by -1 wraps.
// Integer division by zero would trap: the dividing ops refuse it up front.
struct integer_divisor {
  template <class T>
  requires std::is_integral_v<T>
  static status check_rhs(std::span<const T> y) {
    if (std::find(y.begin(), y.end(), T(0)) != y.end()) {
      return invalid_argument_error("Integer division by zero (the divisor 'y' has a zero)");
    }
    return status();
  }
};

struct real_div_op : integer_divisor {
  static constexpr double cost = 1.0;
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_signed_v<T> && std::is_integral_v<T>) {
      if (b == T(-1)) return wrap_sub(T(0), a);
    }
    return static_cast<T>(a / b);
  }
};

// Maximum and Minimum propagate NaN, as TensorFlow's do.
struct maximum_op {
  static constexpr double cost = 0.3;
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a > b ? a : b;
  }
};

struct minimum_op {
  static constexpr double cost = 0.3;
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? a : b;
  }
};

// Equal and NotEqual give this scalar for shapes that do not broadcast when the node's
// incompatible_shape_error is false.
struct equal_op {
  static constexpr double cost = 0.3;
  static constexpr bool incompatible_shapes_result = false;
  template <class T>
  bool operator()(T a, T b) const {
    return a == b;
  }
};

struct not_equal_op {
  static constexpr double cost = 0.3;
  static constexpr bool incompatible_shapes_result = true;
  template <class T>
  bool operator()(T a, T b) const {
    return a != b;
  }
};

struct less_op {
  static constexpr double cost = 0.3;
  template <class T>
  bool operator()(T a, T b) const {
    return a < b;
  }
};

struct less_equal_op {
  static constexpr double cost = 0.3;
  template <class T>
  bool operator()(T a, T b) const {
    return a <= b;
  }
};

struct greater_op {
  static constexpr double cost = 0.3;
  template <class T>
  bool operator()(T a, T b) const {
    return a > b;
  }
};

struct greater_equal_op {
  static constexpr double cost = 0.3;
  template <class T>
  bool operator()(T a, T b) const {
    return a >= b;
  }
};

struct div_no_nan_op {
  static constexpr double cost = 1.0;
  template <class T>
  T operator()(T a, T b) const {
    return b == T(0) ? T(0) : static_cast<T>(a / b);
  }
};

// Rounding and the functions of <cmath> TensorFlow has as ops. Round rounds half to even,
// as TensorFlow's (and numpy's) does.
struct floor_op {
  static constexpr double cost = 0.5;
  template <class T>
  T operator()(T x) const { return std::floor(x); }
};
struct ceil_op {
  static constexpr double cost = 0.5;
  template <class T>
  T operator()(T x) const { return std::ceil(x); }
};
struct round_op {
  static constexpr double cost = 0.5;
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::nearbyint(x);  // FE_TONEAREST: half to even
    else return x;
  }
};
struct sin_op {
  static constexpr double cost = 4.0;
  template <class T>
  T operator()(T x) const { return std::sin(x); }
};
struct cos_op {
  static constexpr double cost = 4.0;
  template <class T>
  T operator()(T x) const { return std::cos(x); }
};
struct erf_op {
  static constexpr double cost = 4.0;
  template <class T>
  T operator()(T x) const { return std::erf(x); }
};
struct expm1_op {
  static constexpr double cost = 3.0;
  template <class T>
  T operator()(T x) const { return std::expm1(x); }
};
struct log1p_op {
  static constexpr double cost = 3.0;
  template <class T>
  T operator()(T x) const { return std::log1p(x); }
};
struct is_nan_op {
  static constexpr double cost = 0.3;
  template <class T>
  bool operator()(T x) const { return std::isnan(x); }
};
struct is_finite_op {
  static constexpr double cost = 0.3;
  template <class T>
  bool operator()(T x) const { return std::isfinite(x); }
};
struct squared_difference_op {
  static constexpr double cost = 0.5;
  template <class T>
  T operator()(T a, T b) const {
    T d = wrap_sub(a, b);
    return wrap_mul(d, d);
  }
};
// TensorFlow's Div: RealDiv for floats, C++'s truncating division for integers (an
// integer division by zero is an error, as in RealDiv).
using div_op = real_div_op;
// Mod: the remainder with the dividend's sign (C++'s % and fmod), as TensorFlow's.
struct mod_op : integer_divisor {
  static constexpr double cost = 1.0;
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::fmod(a, b);
    } else {
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
      }
      return static_cast<T>(a % b);
    }
  }
};

struct logical_and_op {
  static constexpr double cost = 0.3;
  bool operator()(bool a, bool b) const { return a && b; }
};

struct logical_or_op {
  static constexpr double cost = 0.3;
  bool operator()(bool a, bool b) const { return a || b; }
};

struct logical_not_op {
  static constexpr double cost = 0.3;
  bool operator()(bool a) const { return !a; }
};

// --- Shared machinery --------------------------------------------------------------------

// Element-wise work costs `ns_per_element` (the figure its parallel_for uses) per element
// of the broadcast result.
class cwise_kernel : public op_kernel {
 public:
  cwise_kernel(kernel_construction& c, double ns_per_element) : op_kernel(c), ns_per_element_(ns_per_element) {}
  double estimated_ns(std::span<const tensor> inputs) const override {
    return elementwise_ns(inputs, ns_per_element_);
  }
  bool estimate_depends_on_inputs() const override { return true; }

 private:
  double ns_per_element_;
};

// Output 0, reusing the first input among `candidates` that may be overwritten (no other
// holder, the output's dtype, the output's element count), else freshly allocated.
// An input with the output's element count has the output's layout: broadcasting only
// ever adds elements.
tensor& forward_any_input_or_allocate(kernel_context& ctx, std::initializer_list<int> candidates,
                                      tensor_shape shape) {
  for (int i : candidates) {
    const tensor& in = ctx.input(i);
    if (in.ref_count_is_one() && in.type() == ctx.output_type(0) &&
        in.num_elements() == shape.num_elements()) {
      return ctx.forward_input_or_allocate_output(i, 0, std::move(shape));
    }
  }
  return ctx.allocate_output(0, std::move(shape));
}

template <class T, class Out, class Op>
void unary_run(const Op& op, const T* x, Out* y, std::int64_t n) {
  if constexpr (requires(Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> a) { op.array(a); }) {
    Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> in(x, n);
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> out(y, n);
    out = op.array(in);
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
  }
}

// z[i] = op(x[i * x_step], y[i * y_step]) for i in [0, n), each step 0 or 1. The cases
// are spelled out so that each loop has constant strides and vectorizes. z may alias x
// or y (an in-place output), never with a different offset.
template <class T, class Out, class Op>
void binary_run(const Op& op, const T* x, std::int64_t x_step, const T* y, std::int64_t y_step,
                Out* z, std::int64_t n) {
  if (x_step == 1 && y_step == 1) {
    for (std::int64_t i = 0; i < n; ++i) z[i] = op(x[i], y[i]);
  } else if (x_step == 1) {
    const T b = *y;
    for (std::int64_t i = 0; i < n; ++i) z[i] = op(x[i], b);
  } else if (y_step == 1) {
    const T a = *x;
    for (std::int64_t i = 0; i < n; ++i) z[i] = op(a, y[i]);
  } else {
    const Out c = op(*x, *y);
    std::fill(z, z + n, c);
  }
}

// out[i] = cond[i * cond_step] ? t[i * t_step] : e[i * e_step], each step 0 or 1.
template <class T>
void select_run(const bool* cond, std::int64_t cond_step, const T* t, std::int64_t t_step,
                const T* e, std::int64_t e_step, T* out, std::int64_t n) {
  if (cond_step == 1 && t_step == 1 && e_step == 1) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = cond[i] ? t[i] : e[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = cond[i * cond_step] ? t[i * t_step] : e[i * e_step];
    }
  }
}

// --- Kernels -----------------------------------------------------------------------------

template <class T, class Op>
class unary_kernel final : public cwise_kernel {
 public:
  using out_type = std::invoke_result_t<Op, T>;

  explicit unary_kernel(kernel_construction& c) : cwise_kernel(c, Op::cost) {}

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    tensor& y = std::is_same_v<out_type, T> ? ctx.forward_input_or_allocate_output(0, 0, x.shape())
                                            : ctx.allocate_output(0, x.shape());
    const T* in = x.data<T>();
    out_type* out = y.data<out_type>();
    ctx.pool().parallel_for(x.num_elements(), Op::cost, [&](std::int64_t begin, std::int64_t end) {
      unary_run(Op{}, in + begin, out + begin, end - begin);
    });
  }
};

template <class T, class Op>
class binary_kernel final : public cwise_kernel {
 public:
  using out_type = std::invoke_result_t<Op, T, T>;

  explicit binary_kernel(kernel_construction& c) : cwise_kernel(c, Op::cost) {
    if constexpr (requires { Op::incompatible_shapes_result; }) {
      c.get_attr("incompatible_shape_error", &incompatible_shape_error_);
    }
  }

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    const tensor& y = ctx.input(1);
    // Fast paths: equal shapes, or one side a single element that adds no dimensions.
    std::int64_t x_step = 1;
    std::int64_t y_step = 1;
    const tensor_shape* flat_shape = nullptr;
    if (x.shape() == y.shape()) {
      flat_shape = &x.shape();
    } else if (y.num_elements() == 1 && y.rank() <= x.rank()) {
      flat_shape = &x.shape();
      y_step = 0;
    } else if (x.num_elements() == 1 && x.rank() <= y.rank()) {
      flat_shape = &y.shape();
      x_step = 0;
    }
    std::optional<broadcast_plan<2>> plan;
    if (flat_shape == nullptr) {
      auto made = broadcast_plan<2>::make({x.shape(), y.shape()});
      if (!made.ok()) {
        if constexpr (requires { Op::incompatible_shapes_result; }) {
          if (!incompatible_shape_error_) {
            ctx.allocate_output(0, tensor_shape{}).data<bool>()[0] = Op::incompatible_shapes_result;
            return;
          }
        }
        ctx.fail(made.error());
        return;
      }
      plan = std::move(*made);
    }
    const tensor_shape& out_shape = plan ? plan->output_shape() : *flat_shape;
    const std::int64_t n = out_shape.num_elements();
    if constexpr (requires(std::span<const T> divisor) { Op::template check_rhs<T>(divisor); }) {
      if (n > 0) {  // then every element of y is used
        status s = Op::template check_rhs<T>(std::span<const T>(y.flat<T>()));
        if (!s.ok()) return ctx.fail(std::move(s));
      }
    }

    tensor& z = forward_any_input_or_allocate(ctx, {0, 1}, out_shape);
    const T* x_data = x.data<T>();
    const T* y_data = y.data<T>();
    out_type* z_data = z.data<out_type>();
    if (!plan) {
      ctx.pool().parallel_for(n, Op::cost, [&](std::int64_t begin, std::int64_t end) {
        binary_run(Op{}, x_data + begin * x_step, x_step, y_data + begin * y_step, y_step,
                   z_data + begin, end - begin);
      });
      return;
    }
    ctx.pool().parallel_for(n, Op::cost, [&](std::int64_t begin, std::int64_t end) {
      plan->for_each_run(begin, end,
                         [&](std::int64_t out, const std::array<std::int64_t, 2>& in,
                             std::int64_t length, const std::array<std::int64_t, 2>& step) {
                           binary_run(Op{}, x_data + in[0], step[0], y_data + in[1], step[1],
                                      z_data + out, length);
                         });
    });
  }

 private:
  bool incompatible_shape_error_ = true;
};

// Select (TensorFlow 1): t and e have one shape; the condition has that shape, or is a
// vector choosing whole slices along the first dimension, or is a scalar.
template <class T>
class select_kernel final : public cwise_kernel {
 public:
  explicit select_kernel(kernel_construction& c) : cwise_kernel(c, 0.3) {}

  void compute(kernel_context& ctx) override {
    const tensor& cond = ctx.input(0);
    const tensor& t = ctx.input(1);
    const tensor& e = ctx.input(2);
    if (t.shape() != e.shape()) {
      return ctx.fail_invalid_argument("'t' and 'e' must have the same shape, but have ", t.shape(),
                                       " and ", e.shape());
    }
    if (cond.rank() == 0) {
      ctx.set_output(0, cond.scalar_value<bool>() ? t : e);  // tensors are immutable: share
      return;
    }
    std::int64_t slice = 0;  // elements chosen by one condition value
    if (cond.shape() == t.shape()) {
      slice = 1;
    } else if (cond.rank() == 1 && t.rank() >= 1 && cond.dim(0) == t.dim(0)) {
      slice = t.dim(0) == 0 ? 0 : t.num_elements() / t.dim(0);
    } else {
      return ctx.fail_invalid_argument("'condition' of shape ", cond.shape(),
                                       " must be a scalar, have the shape of 't' and 'e' (",
                                       t.shape(),
                                       "), or be a vector of their first dimension's size");
    }
    tensor& out = forward_any_input_or_allocate(ctx, {1, 2}, t.shape());
    const bool* cond_data = cond.data<bool>();
    const T* t_data = t.data<T>();
    const T* e_data = e.data<T>();
    T* out_data = out.data<T>();
    if (slice == 1) {
      ctx.pool().parallel_for(t.num_elements(), 0.3, [&](std::int64_t begin, std::int64_t end) {
        select_run(cond_data + begin, 1, t_data + begin, 1, e_data + begin, 1, out_data + begin,
                   end - begin);
      });
      return;
    }
    ctx.pool().parallel_for(cond.dim(0), 0.3 * static_cast<double>(slice),
                            [&](std::int64_t begin, std::int64_t end) {
                              for (std::int64_t row = begin; row < end; ++row) {
                                const T* from = (cond_data[row] ? t_data : e_data) + row * slice;
                                T* to = out_data + row * slice;
                                if (from != to) std::copy(from, from + slice, to);
                              }
                            });
  }
};

// SelectV2: condition, t and e broadcast together.
template <class T>
class select_v2_kernel final : public cwise_kernel {
 public:
  explicit select_v2_kernel(kernel_construction& c) : cwise_kernel(c, 0.5) {}

  void compute(kernel_context& ctx) override {
    const tensor& cond = ctx.input(0);
    const tensor& t = ctx.input(1);
    const tensor& e = ctx.input(2);
    auto plan = broadcast_plan<3>::make({cond.shape(), t.shape(), e.shape()});
    if (!plan.ok()) return ctx.fail(plan.error());
    const std::int64_t n = plan->output_shape().num_elements();
    tensor& out = forward_any_input_or_allocate(ctx, {1, 2}, plan->output_shape());
    const bool* cond_data = cond.data<bool>();
    const T* t_data = t.data<T>();
    const T* e_data = e.data<T>();
    T* out_data = out.data<T>();
    ctx.pool().parallel_for(n, 0.5, [&](std::int64_t begin, std::int64_t end) {
      plan->for_each_run(begin, end,
                         [&](std::int64_t out_offset, const std::array<std::int64_t, 3>& in,
                             std::int64_t length, const std::array<std::int64_t, 3>& step) {
                           select_run(cond_data + in[0], step[0], t_data + in[1], step[1],
                                      e_data + in[2], step[2], out_data + out_offset, length);
                         });
    });
  }
};

// One element converted from S to D. Floating point to integer saturates, NaN gives 0.
template <class D, class S>
D cast_value(S v) {
  if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    constexpr S lowest = static_cast<S>(std::numeric_limits<D>::lowest());
    constexpr S above_max = static_cast<S>(std::numeric_limits<D>::max()) + S(1);
    if (!(v == v)) return D(0);
    if (v <= lowest) return std::numeric_limits<D>::lowest();
    if (v >= above_max) return std::numeric_limits<D>::max();
    return static_cast<D>(v);
  } else {
    return static_cast<D>(v);
  }
}

template <class S, class D>
void cast_range(const tensor& x, tensor& y, std::int64_t begin, std::int64_t end) {
  const S* in = x.data<S>();
  D* out = y.data<D>();
  for (std::int64_t i = begin; i < end; ++i) out[i] = cast_value<D>(in[i]);
}

// Cast: registered per SrcT; the DstT conversion is picked once, at construction.
// Truncate only matters for half-precision types, which troupe does not compute with.
template <class S>
class cast_kernel final : public cwise_kernel {
 public:
  explicit cast_kernel(kernel_construction& c) : cwise_kernel(c, 0.5) {
    dtype dst = dtype::invalid;
    if (!c.get_attr("DstT", &dst)) return;
    bool known = visit_dtype(dst, [&]<class D>() { convert_ = &cast_range<S, D>; });
    if (!known) {
      c.fail(not_found_error("no CPU kernel for Cast from ", dtype_name(dtype_of<S>), " to ",
                             dtype_name(dst),
                             " (DstT must be one of float, double, int8, int16, "
                             "int32, int64, uint8, uint16, bool)"));
    }
  }

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    if (ctx.output_type(0) == x.type()) {
      ctx.set_output(0, x);
      return;
    }
    tensor& y = ctx.forward_input_or_allocate_output(0, 0, x.shape());
    ctx.pool().parallel_for(x.num_elements(), 0.5, [&](std::int64_t begin, std::int64_t end) {
      convert_(x, y, begin, end);
    });
  }

 private:
  void (*convert_)(const tensor&, tensor&, std::int64_t, std::int64_t) = nullptr;
};

// ZerosLike (Value 0) and OnesLike (Value 1).
template <int Value>
struct constant_like {
  template <class T>
  class kernel final : public cwise_kernel {
   public:
    explicit kernel(kernel_construction& c) : cwise_kernel(c, 0.1) {}
    void compute(kernel_context& ctx) override {
      const tensor& x = ctx.input(0);
      tensor& y = ctx.forward_input_or_allocate_output(0, 0, x.shape());
      T* out = y.data<T>();
      ctx.pool().parallel_for(x.num_elements(), 0.1, [&](std::int64_t begin, std::int64_t end) {
        std::fill(out + begin, out + end, static_cast<T>(Value));
      });
    }
  };
};

// AddN: the sum of N inputs of one shape, added in input order (the result does not
// depend on which buffer is reused). Each block is summed in cache-sized tiles.
template <class T>
class add_n_kernel final : public cwise_kernel {
 public:
  explicit add_n_kernel(kernel_construction& c) : cwise_kernel(c, 0.3) {}
  // 0.3 ns per element and term.
  double estimated_ns(std::span<const tensor> inputs) const override {
    return cwise_kernel::estimated_ns(inputs) * static_cast<double>(inputs.size());
  }

  void compute(kernel_context& ctx) override {
    const tensor& first = ctx.input(0);
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).shape() != first.shape()) {
        return ctx.fail_invalid_argument(
            "AddN inputs must all have the same shape, but input 0 is ", first.shape(),
            " and input ", i, " is ", ctx.input(i).shape());
      }
    }
    if (ctx.num_inputs() == 1) {
      ctx.set_output(0, first);
      return;
    }
    // Only input 0 may be reused: it is the first term, so the order stays fixed.
    tensor& out = ctx.forward_input_or_allocate_output(0, 0, first.shape());
    T* sum = out.data<T>();
    const T* x0 = first.data<T>();
    const T* x1 = ctx.input(1).data<T>();
    const double cost = 0.3 * ctx.num_inputs();
    ctx.pool().parallel_for(first.num_elements(), cost, [&](std::int64_t begin, std::int64_t end) {
      constexpr std::int64_t tile = 4096;
      for (std::int64_t lo = begin; lo < end; lo += tile) {
        std::int64_t hi = std::min(lo + tile, end);
        for (std::int64_t i = lo; i < hi; ++i) sum[i] = wrap_add(x0[i], x1[i]);
        for (int k = 2; k < ctx.num_inputs(); ++k) {
          const T* xk = ctx.input(k).data<T>();
          for (std::int64_t i = lo; i < hi; ++i) sum[i] = wrap_add(sum[i], xk[i]);
        }
      }
    });
  }
};

// Binds a functor so that add_typed_kernels sees a one-parameter kernel template.
template <class Op>
struct unary {
  template <class T>
  using kernel = unary_kernel<T, Op>;
};
template <class Op>
struct binary {
  template <class T>
  using kernel = binary_kernel<T, Op>;
};

}  // namespace

void register_cwise_kernels(kernel_registry& registry) {
  add_typed_kernels<unary<neg_op>::kernel, signed_types>(registry, "Neg");
  add_typed_kernels<unary<abs_op>::kernel, signed_types>(registry, "Abs");
  add_typed_kernels<unary<square_op>::kernel, real_number_types>(registry, "Square");
  add_typed_kernels<unary<sqrt_op>::kernel, float_types>(registry, "Sqrt");
  add_typed_kernels<unary<rsqrt_op>::kernel, float_types>(registry, "Rsqrt");
  add_typed_kernels<unary<exp_op>::kernel, float_types>(registry, "Exp");
  add_typed_kernels<unary<log_op>::kernel, float_types>(registry, "Log");
  add_typed_kernels<unary<tanh_op>::kernel, float_types>(registry, "Tanh");
  add_typed_kernels<unary<sigmoid_op>::kernel, float_types>(registry, "Sigmoid");
  add_typed_kernels<unary<relu_op>::kernel, real_number_types>(registry, "Relu");
  add_typed_kernels<unary<floor_op>::kernel, float_types>(registry, "Floor");
  add_typed_kernels<unary<ceil_op>::kernel, float_types>(registry, "Ceil");
  add_typed_kernels<unary<round_op>::kernel, signed_types>(registry, "Round");
  add_typed_kernels<unary<sin_op>::kernel, float_types>(registry, "Sin");
  add_typed_kernels<unary<cos_op>::kernel, float_types>(registry, "Cos");
  add_typed_kernels<unary<erf_op>::kernel, float_types>(registry, "Erf");
  add_typed_kernels<unary<expm1_op>::kernel, float_types>(registry, "Expm1");
  add_typed_kernels<unary<log1p_op>::kernel, float_types>(registry, "Log1p");
  add_typed_kernels<unary<is_nan_op>::kernel, float_types>(registry, "IsNan");
  add_typed_kernels<unary<is_finite_op>::kernel, float_types>(registry, "IsFinite");

  add_typed_kernels<binary<add_op>::kernel, real_number_types>(registry, "Add");
  add_typed_kernels<binary<add_op>::kernel, real_number_types>(registry, "AddV2");
  add_typed_kernels<binary<sub_op>::kernel, real_number_types>(registry, "Sub");
  add_typed_kernels<binary<mul_op>::kernel, real_number_types>(registry, "Mul");
  add_typed_kernels<binary<real_div_op>::kernel, real_number_types>(registry, "RealDiv");
  add_typed_kernels<binary<div_no_nan_op>::kernel, float_types>(registry, "DivNoNan");
  add_typed_kernels<binary<div_op>::kernel, real_number_types>(registry, "Div");
  add_typed_kernels<binary<mod_op>::kernel, real_number_types>(registry, "Mod");
  add_typed_kernels<binary<squared_difference_op>::kernel, real_number_types>(registry, "SquaredDifference");
  add_typed_kernels<binary<maximum_op>::kernel, real_number_types>(registry, "Maximum");
  add_typed_kernels<binary<minimum_op>::kernel, real_number_types>(registry, "Minimum");

  add_typed_kernels<binary<equal_op>::kernel, all_numeric_types>(registry, "Equal");
  add_typed_kernels<binary<not_equal_op>::kernel, all_numeric_types>(registry, "NotEqual");
  add_typed_kernels<binary<less_op>::kernel, real_number_types>(registry, "Less");
  add_typed_kernels<binary<less_equal_op>::kernel, real_number_types>(registry, "LessEqual");
  add_typed_kernels<binary<greater_op>::kernel, real_number_types>(registry, "Greater");
  add_typed_kernels<binary<greater_equal_op>::kernel, real_number_types>(registry, "GreaterEqual");

  // No type attribute: booleans only.
  registry.add("LogicalAnd", "CPU", {}, make_kernel<binary_kernel<bool, logical_and_op>>);
  registry.add("LogicalOr", "CPU", {}, make_kernel<binary_kernel<bool, logical_or_op>>);
  registry.add("LogicalNot", "CPU", {}, make_kernel<unary_kernel<bool, logical_not_op>>);

  add_typed_kernels<select_kernel, all_numeric_types>(registry, "Select");
  add_typed_kernels<select_v2_kernel, all_numeric_types>(registry, "SelectV2");
  add_typed_kernels<cast_kernel, all_numeric_types>(registry, "Cast", "SrcT");
  add_typed_kernels<constant_like<0>::kernel, all_numeric_types>(registry, "ZerosLike");
  add_typed_kernels<constant_like<1>::kernel, all_numeric_types>(registry, "OnesLike");
  add_typed_kernels<add_n_kernel, real_number_types>(registry, "AddN");
}

}  // namespace troupe::kernels
