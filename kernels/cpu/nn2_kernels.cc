// CPU kernels for the ops of graph/ops/nn2_ops.cc: activations and their gradients,
// Reciprocal, Pow, FloorDiv, FloorMod, ClipByValue, L2Loss, LRN, FusedBatchNormV3.
//
// Element-wise ops are functors run by three generic kernels:
//
//   unary_kernel<T, Op>        y = op(x)
//   same_shape_kernel<T, Op>   z = op(a, b), both inputs of one shape (the *Grad ops)
//   broadcast_kernel<T, Op>    z = op(x, y) with numpy broadcasting (kernels/cpu/broadcast.h)
//
// A functor is built from the kernel_construction (LeakyRelu reads alpha there) and may
// add check_rhs(values) to refuse inputs before anything is computed (integer division
// by zero, integers to negative powers). Integer semantics are TensorFlow's: FloorDiv and
// FloorMod round toward negative infinity, the most negative value divided by -1 wraps.
//
// LRN and FusedBatchNorm accumulate their sums in double whatever T is.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/broadcast.h"
#include "kernels/kernel_registry.h"
#include "kernels/shape_checks.h"

namespace troupe::kernels {

namespace {

// Integers wrap (two's complement) instead of overflowing into undefined behaviour.
template <class T>
using wide_unsigned = std::conditional_t<sizeof(T) <= 4, std::uint32_t, std::uint64_t>;

template <class T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<wide_unsigned<T>>(a) * static_cast<wide_unsigned<T>>(b));
  } else {
    return a * b;
  }
}

template <class T>
T wrap_neg(T a) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(wide_unsigned<T>(0) - static_cast<wide_unsigned<T>>(a));
  } else {
    return -a;
  }
}

template <class T>
status check_no_integer_zero(std::span<const T> values, const char* what) {
  if constexpr (std::is_integral_v<T>) {
    if (std::find(values.begin(), values.end(), T(0)) != values.end()) {
      return invalid_argument_error("Integer division by zero (", what, " has a zero)");
    }
  }
  return status();
}

// --- Functors ------------------------------------------------------------------------------

struct relu6_op {
  explicit relu6_op(kernel_construction&) {}
  template <class T>
  T operator()(T x) const {
    if (x < T(0)) return T(0);
    return x > T(6) ? T(6) : x;
  }
};

// (gradients, features): the gradient passes where 0 < features < 6.
struct relu6_grad_op {
  explicit relu6_grad_op(kernel_construction&) {}
  template <class T>
  T operator()(T gradients, T features) const {
    return features > T(0) && features < T(6) ? gradients : T(0);
  }
};

struct elu_op {
  explicit elu_op(kernel_construction&) {}
  template <class T>
  T operator()(T x) const {
    return x < T(0) ? std::expm1(x) : x;
  }
};

// (gradients, outputs): d elu = outputs + 1 where outputs < 0.
struct elu_grad_op {
  explicit elu_grad_op(kernel_construction&) {}
  template <class T>
  T operator()(T gradients, T outputs) const {
    return outputs < T(0) ? gradients * (outputs + T(1)) : gradients;
  }
};

// selu(x) = scale * x for x > 0, scale * alpha * (exp(x) - 1) otherwise (TensorFlow's
// constants); (gradients, outputs): d selu = scale for outputs > 0, outputs + scale * alpha
// otherwise.
constexpr double k_selu_alpha = 1.6732632423543772848170429916717;
constexpr double k_selu_scale = 1.0507009873554804934193349852946;
struct selu_op {
  explicit selu_op(kernel_construction&) {}
  template <class T>
  T operator()(T x) const {
    return x > T(0) ? static_cast<T>(k_selu_scale) * x : static_cast<T>(k_selu_scale * k_selu_alpha) * std::expm1(x);
  }
};
struct selu_grad_op {
  explicit selu_grad_op(kernel_construction&) {}
  template <class T>
  T operator()(T gradients, T outputs) const {
    return outputs > T(0) ? gradients * static_cast<T>(k_selu_scale)
                          : gradients * (outputs + static_cast<T>(k_selu_scale * k_selu_alpha));
  }
};

// softsign(x) = x / (1 + |x|); (gradients, features): d softsign = 1 / (1 + |x|)^2.
struct softsign_op {
  explicit softsign_op(kernel_construction&) {}
  template <class T>
  T operator()(T x) const {
    return x / (T(1) + std::abs(x));
  }
};
struct softsign_grad_op {
  explicit softsign_grad_op(kernel_construction&) {}
  template <class T>
  T operator()(T gradients, T features) const {
    const T d = T(1) + std::abs(features);
    return gradients / (d * d);
  }
};

// log(1 + exp(x)) with TensorFlow's thresholds: x itself where exp(x) would swamp the 1,
// exp(x) where the 1 would swamp exp(x).
struct softplus_op {
  explicit softplus_op(kernel_construction&) {}
  template <class T>
  T operator()(T x) const {
    const T threshold = std::log(std::numeric_limits<T>::epsilon()) + T(2);
    if (x > -threshold) return x;
    if (x < threshold) return std::exp(x);
    return std::log1p(std::exp(x));
  }
};

// (gradients, features): d softplus = sigmoid(features).
struct softplus_grad_op {
  explicit softplus_grad_op(kernel_construction&) {}
  template <class T>
  T operator()(T gradients, T features) const {
    return gradients / (T(1) + std::exp(-features));
  }
};

class leaky_relu_base {
 public:
  explicit leaky_relu_base(kernel_construction& c) { c.get_attr("alpha", &alpha_); }

 protected:
  float alpha_ = 0.2f;
};

struct leaky_relu_op : leaky_relu_base {
  using leaky_relu_base::leaky_relu_base;
  template <class T>
  T operator()(T x) const {
    return x > T(0) ? x : x * static_cast<T>(alpha_);
  }
};

// (gradients, features).
struct leaky_relu_grad_op : leaky_relu_base {
  using leaky_relu_base::leaky_relu_base;
  template <class T>
  T operator()(T gradients, T features) const {
    return features > T(0) ? gradients : gradients * static_cast<T>(alpha_);
  }
};

// Integers: 1 / x truncating (so 0 except for 1 and -1); a zero is refused.
struct reciprocal_op {
  explicit reciprocal_op(kernel_construction&) {}
  template <class T>
  T operator()(T x) const {
    return static_cast<T>(T(1) / x);
  }
  template <class T>
  static status check_rhs(std::span<const T> x) {
    return check_no_integer_zero(x, "the input 'x'");
  }
};

// (y, dy) with y = 1 / x: dx = -dy * y * y.
struct reciprocal_grad_op {
  explicit reciprocal_grad_op(kernel_construction&) {}
  template <class T>
  T operator()(T y, T dy) const {
    return -dy * y * y;
  }
};

// Integers: exact powers by squaring (wrapping); negative exponents are refused, as
// TensorFlow does.
struct pow_op {
  explicit pow_op(kernel_construction&) {}
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      T result = 1;
      T base = x;
      for (T e = y; e > 0; e /= 2) {
        if (e % 2 != 0) result = wrap_mul(result, base);
        base = wrap_mul(base, base);
      }
      return result;
    } else {
      return std::pow(x, y);
    }
  }
  template <class T>
  static status check_rhs(std::span<const T> y) {
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      if (std::any_of(y.begin(), y.end(), [](T v) { return v < 0; })) {
        return invalid_argument_error("Integers to negative integer powers are not allowed");
      }
    }
    return status();
  }
};

// floor(x / y). Integer quotients round toward negative infinity.
struct floor_div_op {
  explicit floor_div_op(kernel_construction&) {}
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_signed_v<T>) {
        if (y == T(-1)) return wrap_neg(x);
        T q = static_cast<T>(x / y);
        if (x % y != 0 && ((x < 0) != (y < 0))) --q;
        return q;
      } else {
        return static_cast<T>(x / y);
      }
    } else {
      return std::floor(x / y);
    }
  }
  template <class T>
  static status check_rhs(std::span<const T> y) {
    return check_no_integer_zero(y, "the divisor 'y'");
  }
};

// x - floor(x / y) * y: the result takes the divisor's sign.
struct floor_mod_op {
  explicit floor_mod_op(kernel_construction&) {}
  template <class T>
  T operator()(T x, T y) const {
    T trunc_mod;
    if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_signed_v<T>) {
        if (y == T(-1)) return T(0);
      }
      trunc_mod = static_cast<T>(x % y);
    } else {
      trunc_mod = std::fmod(x, y);
    }
    if (trunc_mod != T(0) && ((y < T(0)) != (trunc_mod < T(0)))) {
      return static_cast<T>(trunc_mod + y);
    }
    return trunc_mod;
  }
  template <class T>
  static status check_rhs(std::span<const T> y) {
    return check_no_integer_zero(y, "the divisor 'y'");
  }
};

// --- Generic element-wise kernels ----------------------------------------------------------

constexpr double k_cwise_ns_per_element = 1.0;

// Element-wise gradients and activations: k_cwise_ns_per_element per element (the figure
// their parallel_for uses), run inline when small.
class cwise_kernel : public op_kernel {
 public:
  using op_kernel::op_kernel;
  double estimated_ns(std::span<const tensor> inputs) const override {
    return elementwise_ns(inputs, k_cwise_ns_per_element);
  }
  bool estimate_depends_on_inputs() const override { return true; }
};

template <class T, class Op>
class unary_kernel final : public cwise_kernel {
 public:
  explicit unary_kernel(kernel_construction& c) : cwise_kernel(c), op_(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    if constexpr (requires(std::span<const T> v) { Op::template check_rhs<T>(v); }) {
      status s = Op::template check_rhs<T>(std::span<const T>(x.flat<T>()));
      if (!s.ok()) return ctx.fail(std::move(s));
    }
    tensor& y = ctx.forward_input_or_allocate_output(0, 0, x.shape());
    const T* in = x.data<T>();
    T* out = y.data<T>();
    ctx.pool().parallel_for(x.num_elements(), k_cwise_ns_per_element,
                            [&](std::int64_t begin, std::int64_t end) {
                              for (std::int64_t i = begin; i < end; ++i) out[i] = op_(in[i]);
                            });
  }

 private:
  Op op_;
};

template <class T, class Op>
class same_shape_kernel final : public cwise_kernel {
 public:
  explicit same_shape_kernel(kernel_construction& c) : cwise_kernel(c), op_(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& a = ctx.input(0);
    const tensor& b = ctx.input(1);
    if (a.shape() != b.shape()) {
      return ctx.fail_invalid_argument(op(), " inputs must have the same shape, but have ",
                                       a.shape(), " and ", b.shape());
    }
    tensor& z = ctx.forward_input_or_allocate_output(0, 0, a.shape());
    const T* a_data = a.data<T>();
    const T* b_data = b.data<T>();
    T* out = z.data<T>();
    ctx.pool().parallel_for(a.num_elements(), k_cwise_ns_per_element,
                            [&](std::int64_t begin, std::int64_t end) {
                              for (std::int64_t i = begin; i < end; ++i) {
                                out[i] = op_(a_data[i], b_data[i]);
                              }
                            });
  }

 private:
  Op op_;
};

template <class T, class Op>
class broadcast_kernel final : public cwise_kernel {
 public:
  explicit broadcast_kernel(kernel_construction& c) : cwise_kernel(c), op_(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    const tensor& y = ctx.input(1);
    auto plan = broadcast_plan<2>::make({x.shape(), y.shape()});
    if (!plan.ok()) return ctx.fail(plan.error());
    const std::int64_t n = plan->output_shape().num_elements();
    if constexpr (requires(std::span<const T> v) { Op::template check_rhs<T>(v); }) {
      if (n > 0) {  // then every element of y is used
        status s = Op::template check_rhs<T>(std::span<const T>(y.flat<T>()));
        if (!s.ok()) return ctx.fail(std::move(s));
      }
    }
    tensor& z = ctx.allocate_output(0, plan->output_shape());
    const T* x_data = x.data<T>();
    const T* y_data = y.data<T>();
    T* z_data = z.data<T>();
    ctx.pool().parallel_for(n, k_cwise_ns_per_element, [&](std::int64_t begin, std::int64_t end) {
      plan->for_each_run(begin, end,
                         [&](std::int64_t out, const std::array<std::int64_t, 2>& in,
                             std::int64_t length, const std::array<std::int64_t, 2>& step) {
                           for (std::int64_t i = 0; i < length; ++i) {
                             z_data[out + i] = op_(x_data[in[0] + i * step[0]],
                                                   y_data[in[1] + i * step[1]]);
                           }
                         });
    });
  }

 private:
  Op op_;
};

template <class Op>
struct unary {
  template <class T>
  using kernel = unary_kernel<T, Op>;
};
template <class Op>
struct same_shape {
  template <class T>
  using kernel = same_shape_kernel<T, Op>;
};
template <class Op>
struct broadcasting {
  template <class T>
  using kernel = broadcast_kernel<T, Op>;
};

// ClipByValue: max(min(t, clip_value_max), clip_value_min), the bounds broadcast to t's
// shape (the output always has t's shape).
template <class T>
class clip_by_value_kernel final : public cwise_kernel {
 public:
  explicit clip_by_value_kernel(kernel_construction& c) : cwise_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& t = ctx.input(0);
    const tensor& lo = ctx.input(1);
    const tensor& hi = ctx.input(2);
    auto plan = broadcast_plan<3>::make({t.shape(), lo.shape(), hi.shape()});
    if (!plan.ok() || plan->output_shape() != t.shape()) {
      return ctx.fail_invalid_argument(
          "clip_value_min ", lo.shape(), " and clip_value_max ", hi.shape(),
          " must broadcast to the shape of t ", t.shape());
    }
    tensor& out = ctx.allocate_output(0, t.shape());
    const T* t_data = t.data<T>();
    const T* lo_data = lo.data<T>();
    const T* hi_data = hi.data<T>();
    T* out_data = out.data<T>();
    ctx.pool().parallel_for(t.num_elements(), k_cwise_ns_per_element,
                            [&](std::int64_t begin, std::int64_t end) {
                              plan->for_each_run(begin, end,
                                                 [&](std::int64_t o, const std::array<std::int64_t, 3>& in,
                                                     std::int64_t length,
                                                     const std::array<std::int64_t, 3>& step) {
                                                   for (std::int64_t i = 0; i < length; ++i) {
                                                     T v = t_data[in[0] + i * step[0]];
                                                     T l = lo_data[in[1] + i * step[1]];
                                                     T h = hi_data[in[2] + i * step[2]];
                                                     v = h < v ? h : v;
                                                     out_data[o + i] = v < l ? l : v;
                                                   }
                                                 });
                            });
  }
};

// L2Loss: sum(t^2) / 2, a scalar.
template <class T>
class l2_loss_kernel final : public op_kernel {
 public:
  explicit l2_loss_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& t = ctx.input(0);
    double sum = 0;
    for (T v : t.flat<T>()) sum += static_cast<double>(v) * static_cast<double>(v);
    ctx.allocate_output(0, tensor_shape{}).data<T>()[0] = static_cast<T>(sum / 2);
  }
};

// --- LRN -----------------------------------------------------------------------------------

class lrn_kernel_base : public op_kernel {
 public:
  explicit lrn_kernel_base(kernel_construction& c) : op_kernel(c) {
    if (!c.get_attr("depth_radius", &depth_radius_) || !c.get_attr("bias", &bias_) ||
        !c.get_attr("alpha", &alpha_) || !c.get_attr("beta", &beta_)) {
      return;
    }
    if (depth_radius_ < 0) {
      c.fail(invalid_argument_error("depth_radius must be >= 0, but is ", depth_radius_));
    }
  }

 protected:
  // The window of depths [begin, end) around depth d of a row of `depth` values.
  std::int64_t window_begin(std::int64_t d) const { return std::max<std::int64_t>(0, d - depth_radius_); }
  std::int64_t window_end(std::int64_t d, std::int64_t depth) const {
    return std::min<std::int64_t>(depth, d + depth_radius_ + 1);
  }
  // bias + alpha * sum of squares over the window around d.
  template <class T>
  double norm_at(const T* row, std::int64_t d, std::int64_t depth) const {
    double sum = 0;
    for (std::int64_t k = window_begin(d); k < window_end(d, depth); ++k) {
      sum += static_cast<double>(row[k]) * static_cast<double>(row[k]);
    }
    return static_cast<double>(bias_) + static_cast<double>(alpha_) * sum;
  }

  std::int64_t depth_radius_ = 5;
  float bias_ = 1, alpha_ = 1, beta_ = 0.5f;
};

// output = input / (bias + alpha * sum over the depth window of input^2)^beta, over the
// last dimension of a rank-4 (NHWC) input.
template <class T>
class lrn_kernel final : public lrn_kernel_base {
 public:
  using lrn_kernel_base::lrn_kernel_base;

  void compute(kernel_context& ctx) override {
    const tensor& in = ctx.input(0);
    if (in.rank() != 4) {
      return ctx.fail_invalid_argument("LRN input must be 4-dimensional (NHWC), but is ",
                                       in.shape());
    }
    tensor& out = ctx.allocate_output(0, in.shape());
    const std::int64_t depth = in.dim(3);
    if (out.num_elements() == 0) return;
    const std::int64_t rows = in.num_elements() / depth;
    const T* x = in.data<T>();
    T* y = out.data<T>();
    const double cost = static_cast<double>(depth) * static_cast<double>(2 * depth_radius_ + 2);
    ctx.pool().parallel_for(rows, cost, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const T* row = x + r * depth;
        for (std::int64_t d = 0; d < depth; ++d) {
          double norm = norm_at(row, d, depth);
          y[r * depth + d] = static_cast<T>(static_cast<double>(row[d]) *
                                            std::pow(norm, -static_cast<double>(beta_)));
        }
      }
    });
  }
};

// LRNGrad(input_grads, input_image, output_image): for each depth j and each k in j's
// window, dx[k] += dy[j] * ([k == j] * norm_j^-beta - 2 alpha beta x[k] y[j] / norm_j).
template <class T>
class lrn_grad_kernel final : public lrn_kernel_base {
 public:
  using lrn_kernel_base::lrn_kernel_base;

  void compute(kernel_context& ctx) override {
    const tensor& dy = ctx.input(0);
    const tensor& in = ctx.input(1);
    const tensor& out = ctx.input(2);
    if (in.rank() != 4 || dy.shape() != in.shape() || out.shape() != in.shape()) {
      return ctx.fail_invalid_argument(
          "LRNGrad inputs must be 4-dimensional (NHWC) and of one shape, but input_grads is ",
          dy.shape(), ", input_image ", in.shape(), " and output_image ", out.shape());
    }
    tensor& result = ctx.allocate_output(0, in.shape());
    const std::int64_t depth = in.dim(3);
    if (result.num_elements() == 0) return;
    const std::int64_t rows = in.num_elements() / depth;
    const T* g = dy.data<T>();
    const T* x = in.data<T>();
    const T* y = out.data<T>();
    T* dx = result.data<T>();
    const double alpha = alpha_, beta = beta_;
    const double cost = static_cast<double>(depth) * static_cast<double>(4 * depth_radius_ + 4);
    ctx.pool().parallel_for(rows, cost, [&](std::int64_t begin, std::int64_t end) {
      std::vector<double> acc(static_cast<std::size_t>(depth));
      for (std::int64_t r = begin; r < end; ++r) {
        const T* x_row = x + r * depth;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t j = 0; j < depth; ++j) {
          double norm = norm_at(x_row, j, depth);
          double gj = static_cast<double>(g[r * depth + j]);
          double yj = static_cast<double>(y[r * depth + j]);
          for (std::int64_t k = window_begin(j); k < window_end(j, depth); ++k) {
            double d = -2.0 * alpha * beta * static_cast<double>(x_row[k]) * yj / norm;
            if (k == j) d += std::pow(norm, -beta);
            acc[static_cast<std::size_t>(k)] += d * gj;
          }
        }
        for (std::int64_t k = 0; k < depth; ++k) {
          dx[r * depth + k] = static_cast<T>(acc[static_cast<std::size_t>(k)]);
        }
      }
    });
  }
};

// --- FusedBatchNormV3 and its gradient -----------------------------------------------------

// The attributes, the operand checks and x's [outer, channels, inner] layout are the GPU
// kernels' too (kernels/shape_checks.h).
class batch_norm_kernel_base : public op_kernel {
 public:
  explicit batch_norm_kernel_base(kernel_construction& c) : op_kernel(c) {
    if (status s = read_batch_norm_options(c.node(), &options_); !s.ok()) c.fail(std::move(s));
  }

 protected:
  batch_norm_options options_;
};

// Outputs: y, batch_mean, batch_variance, reserve_space_1 (the mean used), reserve_space_2
// (the variance used: biased in training), reserve_space_3 (an unused scalar, as
// TensorFlow's CPU kernel gives).
template <class T, class U>
class fused_batch_norm_kernel final : public batch_norm_kernel_base {
 public:
  explicit fused_batch_norm_kernel(kernel_construction& c) : batch_norm_kernel_base(c) {
    c.get_attr("exponential_avg_factor", &exponential_avg_factor_);
  }

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    const tensor& scale = ctx.input(1);
    const tensor& offset = ctx.input(2);
    const tensor& mean_in = ctx.input(3);
    const tensor& variance_in = ctx.input(4);
    // In training with exponential_avg_factor 1 the running statistics are not read and
    // may be empty.
    const bool reads_statistics = !options_.is_training || exponential_avg_factor_ != 1.0f;
    auto layout = batch_norm_layout(op(), options_, x, scale, offset, mean_in, variance_in, reads_statistics);
    if (!layout.ok()) return ctx.fail(layout.error());
    const channel_layout l = *layout;
    const std::int64_t channels = l.channels;

    tensor& y = ctx.allocate_output(0, x.shape());
    tensor_shape vector{channels};
    U* batch_mean = ctx.allocate_output(1, vector).data<U>();
    U* batch_variance = ctx.allocate_output(2, vector).data<U>();
    U* saved_mean = ctx.allocate_output(3, vector).data<U>();
    U* saved_variance = ctx.allocate_output(4, vector).data<U>();
    if (ctx.num_outputs() > 5) ctx.allocate_output(5, tensor_shape{}).data<U>()[0] = U(0);  // V3 only

    std::vector<double> mean(static_cast<std::size_t>(channels));
    std::vector<double> variance(static_cast<std::size_t>(channels));
    const T* x_data = x.data<T>();
    if (options_.is_training) {
      const std::int64_t n = l.per_channel();
      if (n == 0) {
        std::fill(mean.begin(), mean.end(), std::numeric_limits<double>::quiet_NaN());
        std::fill(variance.begin(), variance.end(), std::numeric_limits<double>::quiet_NaN());
      } else {
        // Two passes (mean, then centred squares) for accuracy.
        l.for_each([&](std::int64_t i, std::int64_t c) {
          mean[static_cast<std::size_t>(c)] += static_cast<double>(x_data[i]);
        });
        for (double& m : mean) m /= static_cast<double>(n);
        l.for_each([&](std::int64_t i, std::int64_t c) {
          double d = static_cast<double>(x_data[i]) - mean[static_cast<std::size_t>(c)];
          variance[static_cast<std::size_t>(c)] += d * d;
        });
        for (double& v : variance) v /= static_cast<double>(n);
      }
      const double bessel = static_cast<double>(n) / static_cast<double>(std::max<std::int64_t>(n - 1, 1));
      const double f = exponential_avg_factor_;
      for (std::int64_t c = 0; c < channels; ++c) {
        auto u = static_cast<std::size_t>(c);
        saved_mean[c] = static_cast<U>(mean[u]);
        saved_variance[c] = static_cast<U>(variance[u]);
        double unbiased = variance[u] * bessel;
        if (f == 1.0) {
          batch_mean[c] = static_cast<U>(mean[u]);
          batch_variance[c] = static_cast<U>(unbiased);
        } else {
          batch_mean[c] = static_cast<U>((1 - f) * static_cast<double>(mean_in.data<U>()[c]) + f * mean[u]);
          batch_variance[c] =
              static_cast<U>((1 - f) * static_cast<double>(variance_in.data<U>()[c]) + f * unbiased);
        }
      }
    } else {
      for (std::int64_t c = 0; c < channels; ++c) {
        auto u = static_cast<std::size_t>(c);
        mean[u] = static_cast<double>(mean_in.data<U>()[c]);
        variance[u] = static_cast<double>(variance_in.data<U>()[c]);
        batch_mean[c] = saved_mean[c] = mean_in.data<U>()[c];
        batch_variance[c] = saved_variance[c] = variance_in.data<U>()[c];
      }
    }

    // y = x * multiplier + shift, per channel.
    std::vector<double> multiplier(static_cast<std::size_t>(channels));
    std::vector<double> shift(static_cast<std::size_t>(channels));
    for (std::int64_t c = 0; c < channels; ++c) {
      auto u = static_cast<std::size_t>(c);
      multiplier[u] = static_cast<double>(scale.data<U>()[c]) /
                      std::sqrt(variance[u] + static_cast<double>(options_.epsilon));
      shift[u] = static_cast<double>(offset.data<U>()[c]) - mean[u] * multiplier[u];
    }
    T* y_data = y.data<T>();
    const std::int64_t block = channels * l.inner;  // one outer index
    ctx.pool().parallel_for(l.outer, static_cast<double>(block), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o) {
        for (std::int64_t c = 0; c < channels; ++c) {
          auto u = static_cast<std::size_t>(c);
          std::int64_t first = o * block + c * l.inner;
          for (std::int64_t k = first; k < first + l.inner; ++k) {
            y_data[k] = static_cast<T>(static_cast<double>(x_data[k]) * multiplier[u] + shift[u]);
          }
        }
      }
    });
  }

 private:
  float exponential_avg_factor_ = 1.0f;
};

// FusedBatchNormGradV3(y_backprop, x, scale, reserve_space_1, reserve_space_2,
// reserve_space_3) -> x_backprop, scale_backprop, offset_backprop, reserve_space_4,
// reserve_space_5 (both empty). reserve_space_1/2 are the mean and variance the forward
// op normalized with: the batch's (biased variance) in training, the given ones in
// inference.
template <class T, class U>
class fused_batch_norm_grad_kernel final : public batch_norm_kernel_base {
 public:
  using batch_norm_kernel_base::batch_norm_kernel_base;

  void compute(kernel_context& ctx) override {
    const tensor& dy = ctx.input(0);
    const tensor& x = ctx.input(1);
    const tensor& scale = ctx.input(2);
    const tensor& mean_in = ctx.input(3);
    const tensor& variance_in = ctx.input(4);
    auto layout = batch_norm_grad_layout(op(), options_, dy, x, scale, mean_in, variance_in);
    if (!layout.ok()) return ctx.fail(layout.error());
    const channel_layout l = *layout;
    const std::int64_t channels = l.channels;

    tensor& dx = ctx.allocate_output(0, x.shape());
    tensor_shape vector{channels};
    U* dscale = ctx.allocate_output(1, vector).data<U>();
    U* doffset = ctx.allocate_output(2, vector).data<U>();
    ctx.allocate_output(3, tensor_shape{0});
    ctx.allocate_output(4, tensor_shape{0});

    auto size = static_cast<std::size_t>(channels);
    std::vector<double> mean(size), inv_std(size), sum_dy(size, 0.0), sum_dy_xhat(size, 0.0);
    for (std::size_t c = 0; c < size; ++c) {
      mean[c] = static_cast<double>(mean_in.data<U>()[c]);
      inv_std[c] = 1.0 / std::sqrt(static_cast<double>(variance_in.data<U>()[c]) +
                                   static_cast<double>(options_.epsilon));
    }
    const T* dy_data = dy.data<T>();
    const T* x_data = x.data<T>();
    l.for_each([&](std::int64_t i, std::int64_t c) {
      auto u = static_cast<std::size_t>(c);
      double g = static_cast<double>(dy_data[i]);
      sum_dy[u] += g;
      sum_dy_xhat[u] += g * (static_cast<double>(x_data[i]) - mean[u]) * inv_std[u];
    });
    for (std::size_t c = 0; c < size; ++c) {
      dscale[c] = static_cast<U>(sum_dy_xhat[c]);
      doffset[c] = static_cast<U>(sum_dy[c]);
    }
    T* dx_data = dx.data<T>();
    const auto n = static_cast<double>(l.per_channel());
    l.for_each([&](std::int64_t i, std::int64_t c) {
      auto u = static_cast<std::size_t>(c);
      double k = static_cast<double>(scale.data<U>()[c]) * inv_std[u];
      double g = static_cast<double>(dy_data[i]);
      if (options_.is_training) {
        double xhat = (static_cast<double>(x_data[i]) - mean[u]) * inv_std[u];
        g -= (sum_dy[u] + xhat * sum_dy_xhat[u]) / n;
      }
      dx_data[i] = static_cast<T>(k * g);
    });
  }
};

// Registers Kernel<T, T> for each T in float_types, constrained on T and U.
template <template <class, class> class Kernel>
void add_batch_norm_kernels(kernel_registry& registry, const std::string& op) {
  for_each_type<float_types>([&]<class T>() {
    registry.add(op, "CPU", {{"T", dtype_of<T>}, {"U", dtype_of<T>}}, make_kernel<Kernel<T, T>>);
  });
}

using signed_types = type_list<float, double, std::int8_t, std::int16_t, std::int32_t, std::int64_t>;
using reciprocal_types = type_list<float, double, std::int32_t, std::int64_t>;

}  // namespace

void register_nn2_kernels(kernel_registry& registry) {
  add_typed_kernels<unary<relu6_op>::kernel, real_number_types>(registry, "Relu6");
  add_typed_kernels<same_shape<relu6_grad_op>::kernel, real_number_types>(registry, "Relu6Grad");
  add_typed_kernels<unary<elu_op>::kernel, float_types>(registry, "Elu");
  add_typed_kernels<same_shape<elu_grad_op>::kernel, float_types>(registry, "EluGrad");
  add_typed_kernels<unary<softplus_op>::kernel, float_types>(registry, "Softplus");
  add_typed_kernels<same_shape<softplus_grad_op>::kernel, float_types>(registry, "SoftplusGrad");
  add_typed_kernels<unary<leaky_relu_op>::kernel, float_types>(registry, "LeakyRelu");
  add_typed_kernels<same_shape<leaky_relu_grad_op>::kernel, float_types>(registry, "LeakyReluGrad");
  add_typed_kernels<unary<selu_op>::kernel, float_types>(registry, "Selu");
  add_typed_kernels<same_shape<selu_grad_op>::kernel, float_types>(registry, "SeluGrad");
  add_typed_kernels<unary<softsign_op>::kernel, float_types>(registry, "Softsign");
  add_typed_kernels<same_shape<softsign_grad_op>::kernel, float_types>(registry, "SoftsignGrad");
  add_typed_kernels<unary<reciprocal_op>::kernel, reciprocal_types>(registry, "Reciprocal");
  add_typed_kernels<same_shape<reciprocal_grad_op>::kernel, float_types>(registry, "ReciprocalGrad");

  add_typed_kernels<broadcasting<pow_op>::kernel, signed_types>(registry, "Pow");
  add_typed_kernels<broadcasting<floor_div_op>::kernel, real_number_types>(registry, "FloorDiv");
  add_typed_kernels<broadcasting<floor_mod_op>::kernel, real_number_types>(registry, "FloorMod");
  add_typed_kernels<clip_by_value_kernel, real_number_types>(registry, "ClipByValue");
  add_typed_kernels<l2_loss_kernel, float_types>(registry, "L2Loss");

  add_typed_kernels<lrn_kernel, float_types>(registry, "LRN");
  add_typed_kernels<lrn_grad_kernel, float_types>(registry, "LRNGrad");
  for (const char* version : {"V2", "V3"}) {
    add_batch_norm_kernels<fused_batch_norm_kernel>(registry, std::string("FusedBatchNorm") + version);
    add_batch_norm_kernels<fused_batch_norm_grad_kernel>(registry, std::string("FusedBatchNormGrad") + version);
  }
  // FusedBatchNorm and its gradient (TF 1.x's first version): float, no U attribute.
  registry.add("FusedBatchNorm", "CPU", {{"T", dtype::float32}}, make_kernel<fused_batch_norm_kernel<float, float>>);
  registry.add("FusedBatchNormGrad", "CPU", {{"T", dtype::float32}},
               make_kernel<fused_batch_norm_grad_kernel<float, float>>);
}

}  // namespace troupe::kernels
