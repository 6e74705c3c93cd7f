// Op schemas: element-wise math, spelled as TensorFlow's raw ops.
//
//   unary      Neg Abs Square Sqrt Rsqrt Exp Log Tanh Sigmoid Relu     (x -> y; Relu:
//              Floor Ceil Round Sin Cos Erf Expm1 Log1p                 features -> activations)
//              IsNan IsFinite (-> bool)
//   binary     Add AddV2 Sub Mul RealDiv Div DivNoNan (0 where y is 0) Maximum Minimum
//              Mod (truncated, sign of x) SquaredDifference
//              (x, y -> z),
//              numpy broadcasting
//   compare    Equal NotEqual Less LessEqual Greater GreaterEqual      (x, y -> z: bool)
//   logical    LogicalAnd LogicalOr (x, y -> z, booleans, broadcasting), LogicalNot
//   select     Select (TF1: condition of x's shape, a vector over x's first dimension,
//              or a scalar), SelectV2 (three-way broadcasting)
//   other      Cast (SrcT -> DstT), ZerosLike, OnesLike, AddN (N inputs of one shape)
//
// Type sets are TensorFlow's, narrowed to the dtypes troupe computes with. Where
// TensorFlow accepts any type (Equal, Select, Cast, ZerosLike, ...) so does the schema,
// and a dtype without a kernel is reported by the kernel lookup.
// Kernels: kernels/cpu/cwise_kernels.cc.
//
// Gradients follow TensorFlow's math_grad.py: binary ops sum their gradient over the
// broadcast axes (sum_to_shape_of), comparisons, ZerosLike and OnesLike have none.
#include <cstdio>
#include <cstdlib>

#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops.h"

namespace troupe::graph {

namespace {

// The type sets, named after TensorFlow's.
constexpr const char* k_real_types = "T: {float, double, int8, int16, int32, int64, uint8, uint16}";
constexpr const char* k_signed_types = "T: {float, double, int8, int16, int32, int64}";
constexpr const char* k_float_types = "T: {float, double}";

// Equal and NotEqual with incompatible_shape_error = false answer a scalar (false, true)
// for shapes that do not broadcast, so then the output shape is not known.
status equality_shape(shape_context& ctx) {
  bool incompatible_shape_error = true;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("incompatible_shape_error", &incompatible_shape_error));
  auto s = broadcast_shapes(ctx.input(0), ctx.input(1));
  if (!s.ok()) {
    if (incompatible_shape_error) return ctx.error(s.error().message());
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  ctx.set_output(0, std::move(*s));
  return status();
}

// Select: t and e have one shape; the condition has that shape too, or is a vector over
// its first dimension, or a scalar.
status select_shape(shape_context& ctx) {
  auto out = ctx.input(1).merge(ctx.input(2));
  if (!out.ok()) {
    return ctx.error("'t' and 'e' must have the same shape, but have ", ctx.input(1).to_string(),
                     " and ", ctx.input(2).to_string());
  }
  const partial_shape& cond = ctx.input(0);
  if (cond.known_rank() && out->known_rank() && cond.rank() != 0) {
    bool ok = false;
    if (cond.rank() == out->rank()) {
      auto merged = cond.merge(*out);
      ok = merged.ok();
      if (ok) *out = std::move(*merged);
    } else if (cond.rank() == 1 && out->rank() >= 1) {
      ok = cond.dim(0) < 0 || out->dim(0) < 0 || cond.dim(0) == out->dim(0);
    }
    if (!ok) {
      return ctx.error("'condition' of shape ", cond.to_string(),
                       " must be a scalar, have the shape of 't' and 'e' (", out->to_string(),
                       "), or be a vector over their first dimension");
    }
  }
  ctx.set_output(0, std::move(*out));
  return status();
}

status select_v2_shape(shape_context& ctx) {
  auto te = broadcast_shapes(ctx.input(1), ctx.input(2));
  if (!te.ok()) return ctx.error(te.error().message());
  auto out = broadcast_shapes(ctx.input(0), *te);
  if (!out.ok()) return ctx.error(out.error().message());
  ctx.set_output(0, std::move(*out));
  return status();
}

// AddN: every input has the output's shape.
status add_n_shape(shape_context& ctx) {
  partial_shape out = ctx.input(0);
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    auto merged = out.merge(ctx.input(i));
    if (!merged.ok()) {
      return ctx.error("all inputs must have the same shape, but input 0 is ",
                       ctx.input(0).to_string(), " and input ", i, " is ",
                       ctx.input(i).to_string());
    }
    out = std::move(*merged);
  }
  ctx.set_output(0, std::move(out));
  return status();
}

op_schema unary_schema(const char* name, const char* types, const char* in = "x: T",
                       const char* out = "y: T") {
  return std::move(op_schema(name).input(in).output(out).attr(types).shape_fn(unchanged_shape));
}

op_schema binary_schema(const char* name, const char* types) {
  return std::move(op_schema(name).input("x: T").input("y: T").output("z: T").attr(types).shape_fn(
      broadcast_binary_shape));
}

// ---- Gradients. dy is the gradient of the (only) output; it is always valid there. ----

using grads = std::vector<output>*;

output dy_of(const gradient_context& ctx) { return ctx.grad_outputs[0]; }
output x_of(const gradient_context& ctx) { return ctx.inputs[0]; }
output y_of(const gradient_context& ctx) { return ctx.outputs[0]; }
// An op of the form (a, b -> c) without an ops:: wrapper.
output binary_op(const scope& s, const char* op, output a, output b) { return s.add(op, {a, b}).out(); }

status neg_grad(const gradient_context& ctx, grads dx) {
  *dx = {ops::neg(ctx.s, dy_of(ctx))};
  return status();
}
status abs_grad(const gradient_context& ctx, grads dx) {
  *dx = {ops::mul(ctx.s, dy_of(ctx), ctx.s.add("Sign", {x_of(ctx)}).out())};
  return status();
}
status square_grad(const gradient_context& ctx, grads dx) {
  output two = scalar_of(ctx.s, x_of(ctx).type, 2.0);
  *dx = {ops::mul(ctx.s, dy_of(ctx), ops::mul(ctx.s, two, x_of(ctx)))};
  return status();
}
status sqrt_grad(const gradient_context& ctx, grads dx) {
  *dx = {binary_op(ctx.s, "SqrtGrad", y_of(ctx), dy_of(ctx))};
  return status();
}
status rsqrt_grad(const gradient_context& ctx, grads dx) {
  *dx = {binary_op(ctx.s, "RsqrtGrad", y_of(ctx), dy_of(ctx))};
  return status();
}
status exp_grad(const gradient_context& ctx, grads dx) {
  *dx = {ops::mul(ctx.s, dy_of(ctx), y_of(ctx))};
  return status();
}
status log_grad(const gradient_context& ctx, grads dx) {
  *dx = {ops::div(ctx.s, dy_of(ctx), x_of(ctx))};
  return status();
}
status tanh_grad(const gradient_context& ctx, grads dx) {
  *dx = {binary_op(ctx.s, "TanhGrad", y_of(ctx), dy_of(ctx))};
  return status();
}
status sigmoid_grad(const gradient_context& ctx, grads dx) {
  *dx = {binary_op(ctx.s, "SigmoidGrad", y_of(ctx), dy_of(ctx))};
  return status();
}
status relu_grad(const gradient_context& ctx, grads dx) {
  *dx = {binary_op(ctx.s, "ReluGrad", dy_of(ctx), x_of(ctx))};
  return status();
}

// Binary ops: the gradients with respect to the broadcast result, summed back to each
// input's shape.
status binary_grads(const gradient_context& ctx, grads dx, output dx_full, output dy_full) {
  *dx = {sum_to_shape_of(ctx.s, dx_full, ctx.inputs[0]), sum_to_shape_of(ctx.s, dy_full, ctx.inputs[1])};
  return status();
}
status add_grad(const gradient_context& ctx, grads dx) {
  return binary_grads(ctx, dx, dy_of(ctx), dy_of(ctx));
}
status sub_grad(const gradient_context& ctx, grads dx) {
  return binary_grads(ctx, dx, dy_of(ctx), ops::neg(ctx.s, dy_of(ctx)));
}
status mul_grad(const gradient_context& ctx, grads dx) {
  const output& x = ctx.inputs[0];
  const output& y = ctx.inputs[1];
  return binary_grads(ctx, dx, ops::mul(ctx.s, dy_of(ctx), y), ops::mul(ctx.s, x, dy_of(ctx)));
}
// d(x/y)/dy = -x / y^2.
status real_div_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& x = ctx.inputs[0];
  const output& y = ctx.inputs[1];
  output neg_x_over_y2 = ops::div(s, ops::div(s, ops::neg(s, x), y), y);
  return binary_grads(ctx, dx, ops::div(s, dy_of(ctx), y), ops::mul(s, dy_of(ctx), neg_x_over_y2));
}
// DivNoNan (TensorFlow's): as RealDiv's, each quotient by y taken as 0 where y is 0.
status div_no_nan_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& x = ctx.inputs[0];
  const output& y = ctx.inputs[1];
  auto div_no_nan = [&](const output& a, const output& b) { return binary_op(s, "DivNoNan", a, b); };
  return binary_grads(ctx, dx, div_no_nan(dy_of(ctx), y),
                      ops::mul(s, dy_of(ctx), div_no_nan(div_no_nan(ops::neg(s, x), y), y)));
}
// The gradients of the <cmath> functions (TensorFlow's math_grad.py).
status sin_grad(const gradient_context& ctx, grads dx) {
  *dx = {ops::mul(ctx.s, dy_of(ctx), ctx.s.add("Cos", {x_of(ctx)}).out())};
  return status();
}
status cos_grad(const gradient_context& ctx, grads dx) {
  *dx = {ops::neg(ctx.s, ops::mul(ctx.s, dy_of(ctx), ctx.s.add("Sin", {x_of(ctx)}).out()))};
  return status();
}
// erf'(x) = 2 / sqrt(pi) * exp(-x^2)
status erf_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  output two_over_sqrt_pi = scalar_of(s, x_of(ctx).type, 1.1283791670955126);
  output e = ops::exp(s, ops::neg(s, ops::square(s, x_of(ctx))));
  *dx = {ops::mul(s, dy_of(ctx), ops::mul(s, two_over_sqrt_pi, e))};
  return status();
}
status expm1_grad(const gradient_context& ctx, grads dx) {
  *dx = {ops::mul(ctx.s, dy_of(ctx), ops::exp(ctx.s, x_of(ctx)))};
  return status();
}
status log1p_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  *dx = {ops::div(s, dy_of(ctx), ops::add(s, scalar_of(s, x_of(ctx).type, 1.0), x_of(ctx)))};
  return status();
}
status squared_difference_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  output two_d = ops::mul(s, scalar_of(s, x_of(ctx).type, 2.0), ops::sub(s, ctx.inputs[0], ctx.inputs[1]));
  output g = ops::mul(s, dy_of(ctx), two_d);
  return binary_grads(ctx, dx, g, ops::neg(s, g));
}
// Mod: x - trunc(x / y) * y, so dx = dy and dy_ = -dy * trunc(x / y) (TensorFlow's FloorMod
// gradient, with truncation for Mod's truncated quotient).
status mod_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& x = ctx.inputs[0];
  const output& y = ctx.inputs[1];
  output q = ops::div(s, x, y);
  output truncated = ops::mul(s, s.add("Sign", {q}).out(), s.add("Floor", {ops::abs(s, q)}).out());
  return binary_grads(ctx, dx, dy_of(ctx), ops::mul(s, ops::neg(s, dy_of(ctx)), truncated));
}
// Maximum/Minimum: the gradient goes to x where x wins (ties go to x, as in TensorFlow).
status select_binary_grad(const gradient_context& ctx, grads dx, const char* x_wins) {
  const scope& s = ctx.s;
  output mask = binary_op(s, x_wins, ctx.inputs[0], ctx.inputs[1]);
  output zeros = ops::zeros_like(s, dy_of(ctx));
  return binary_grads(ctx, dx, ops::select(s, mask, dy_of(ctx), zeros),
                      ops::select(s, mask, zeros, dy_of(ctx)));
}
status maximum_grad(const gradient_context& ctx, grads dx) {
  return select_binary_grad(ctx, dx, "GreaterEqual");
}
status minimum_grad(const gradient_context& ctx, grads dx) {
  return select_binary_grad(ctx, dx, "LessEqual");
}

status add_n_grad(const gradient_context& ctx, grads dx) {
  dx->assign(ctx.inputs.size(), dy_of(ctx));
  return status();
}
// Only casts between floating types carry a gradient.
status cast_grad(const gradient_context& ctx, grads dx) {
  dtype from = ctx.inputs[0].type;
  dtype to = ctx.outputs[0].type;
  if (is_floating(from) && is_floating(to)) *dx = {ops::cast(ctx.s, dy_of(ctx), from)};
  else *dx = {output{}};
  return status();
}
// Select (TF1): t and e have the output's shape; the condition gets no gradient.
status select_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& c = ctx.inputs[0];
  output zeros = ops::zeros_like(s, ctx.inputs[1]);
  *dx = {output{}, s.add("Select", {c, dy_of(ctx), zeros}).out(),
         s.add("Select", {c, zeros, dy_of(ctx)}).out()};
  return status();
}
status select_v2_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& c = ctx.inputs[0];
  output zeros = ops::zeros_like(s, dy_of(ctx));
  *dx = {output{}, sum_to_shape_of(s, ops::select(s, c, dy_of(ctx), zeros), ctx.inputs[1]),
         sum_to_shape_of(s, ops::select(s, c, zeros, dy_of(ctx)), ctx.inputs[2])};
  return status();
}

void add_comparison(op_registry& registry, const char* name) {
  add_builtin_op(registry, op_schema(name)
                       .input("x: T")
                       .input("y: T")
                       .output("z: bool")
                       .attr(k_real_types)
                       .shape_fn(broadcast_binary_shape)
                       .no_gradient());
}

void add_equality(op_registry& registry, const char* name) {
  add_builtin_op(registry, op_schema(name)
                       .input("x: T")
                       .input("y: T")
                       .output("z: bool")
                       .attr("T: type")
                       .attr("incompatible_shape_error: bool = true")
                       .shape_fn(equality_shape)
                       .no_gradient());
}

}  // namespace

void register_math_ops(op_registry& registry) {
  add_builtin_op(registry, unary_schema("Neg", k_signed_types).gradient(neg_grad));
  for (const char* name : {"Floor", "Ceil"}) add_builtin_op(registry, unary_schema(name, k_float_types).no_gradient());
  add_builtin_op(registry, unary_schema("Round", k_signed_types).no_gradient());
  add_builtin_op(registry, unary_schema("Sin", k_float_types).gradient(sin_grad));
  add_builtin_op(registry, unary_schema("Cos", k_float_types).gradient(cos_grad));
  add_builtin_op(registry, unary_schema("Erf", k_float_types).gradient(erf_grad));
  add_builtin_op(registry, unary_schema("Expm1", k_float_types).gradient(expm1_grad));
  add_builtin_op(registry, unary_schema("Log1p", k_float_types).gradient(log1p_grad));
  for (const char* name : {"IsNan", "IsFinite"}) {
    add_builtin_op(registry, unary_schema(name, k_float_types, "x: T", "y: bool").no_gradient());
  }
  add_builtin_op(registry, unary_schema("Abs", k_signed_types).gradient(abs_grad));
  add_builtin_op(registry, unary_schema("Square", k_real_types).gradient(square_grad));
  add_builtin_op(registry, unary_schema("Sqrt", k_float_types).gradient(sqrt_grad));
  add_builtin_op(registry, unary_schema("Rsqrt", k_float_types).gradient(rsqrt_grad));
  add_builtin_op(registry, unary_schema("Exp", k_float_types).gradient(exp_grad));
  add_builtin_op(registry, unary_schema("Log", k_float_types).gradient(log_grad));
  add_builtin_op(registry, unary_schema("Tanh", k_float_types).gradient(tanh_grad));
  add_builtin_op(registry, unary_schema("Sigmoid", k_float_types).gradient(sigmoid_grad));
  add_builtin_op(registry, unary_schema("Relu", k_real_types, "features: T", "activations: T")
                             .gradient(relu_grad));

  add_builtin_op(registry, binary_schema("Add", k_real_types).gradient(add_grad));
  add_builtin_op(registry, binary_schema("AddV2", k_real_types).gradient(add_grad));
  add_builtin_op(registry, binary_schema("Sub", k_real_types).gradient(sub_grad));
  add_builtin_op(registry, binary_schema("Mul", k_real_types).gradient(mul_grad));
  add_builtin_op(registry, binary_schema("RealDiv", k_real_types).gradient(real_div_grad));
  add_builtin_op(registry, binary_schema("DivNoNan", k_float_types).gradient(div_no_nan_grad));
  // Div: RealDiv for floats (its gradient too), truncating division for integers.
  add_builtin_op(registry, binary_schema("Div", k_real_types).gradient(real_div_grad));
  add_builtin_op(registry, binary_schema("Mod", k_real_types).gradient(mod_grad));
  add_builtin_op(registry, binary_schema("SquaredDifference", k_real_types).gradient(squared_difference_grad));
  add_builtin_op(registry, binary_schema("Maximum", k_real_types).gradient(maximum_grad));
  add_builtin_op(registry, binary_schema("Minimum", k_real_types).gradient(minimum_grad));

  for (const char* name : {"LogicalAnd", "LogicalOr"}) {
    add_builtin_op(registry, op_schema(name)
                         .input("x: bool")
                         .input("y: bool")
                         .output("z: bool")
                         .shape_fn(broadcast_binary_shape)
                         .no_gradient());
  }
  add_builtin_op(registry, op_schema("LogicalNot")
                       .input("x: bool")
                       .output("y: bool")
                       .shape_fn(unchanged_shape)
                       .no_gradient());
  add_equality(registry, "Equal");
  add_equality(registry, "NotEqual");
  add_comparison(registry, "Less");
  add_comparison(registry, "LessEqual");
  add_comparison(registry, "Greater");
  add_comparison(registry, "GreaterEqual");

  add_builtin_op(registry, op_schema("Select")
                       .input("condition: bool")
                       .input("t: T")
                       .input("e: T")
                       .output("output: T")
                       .attr("T: type")
                       .shape_fn(select_shape)
                       .gradient(select_grad));
  add_builtin_op(registry, op_schema("SelectV2")
                       .input("condition: bool")
                       .input("t: T")
                       .input("e: T")
                       .output("output: T")
                       .attr("T: type")
                       .shape_fn(select_v2_shape)
                       .gradient(select_v2_grad));

  add_builtin_op(registry, op_schema("Cast")
                       .input("x: SrcT")
                       .output("y: DstT")
                       .attr("SrcT: type")
                       .attr("DstT: type")
                       .attr("Truncate: bool = false")
                       .shape_fn(unchanged_shape)
                       .gradient(cast_grad));
  add_builtin_op(registry, unary_schema("ZerosLike", "T: type").no_gradient());
  add_builtin_op(registry, unary_schema("OnesLike", "T: type").no_gradient());
  add_builtin_op(registry, op_schema("AddN")
                       .input("inputs: N * T")
                       .output("sum: T")
                       .attr("N: int >= 1")
                       .attr(k_real_types)
                       .shape_fn(add_n_shape)
                       .gradient(add_n_grad));
}

}  // namespace troupe::graph
