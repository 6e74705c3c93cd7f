// Op schemas: element-wise math, spelled as TensorFlow's raw ops.
//
//   unary      Neg Abs Square Sqrt Rsqrt Exp Log Tanh Sigmoid Relu     (x -> y; Relu:
//              features -> activations)
//   binary     Add AddV2 Sub Mul RealDiv Maximum Minimum               (x, y -> z),
//              numpy broadcasting
//   compare    Equal NotEqual Less LessEqual Greater GreaterEqual      (x, y -> z: bool)
//   select     Select (TF1: condition of x's shape, a vector over x's first dimension,
//              or a scalar), SelectV2 (three-way broadcasting)
//   other      Cast (SrcT -> DstT), ZerosLike, OnesLike, AddN (N inputs of one shape)
//
// Type sets are TensorFlow's, narrowed to the dtypes troupe computes with. Where
// TensorFlow accepts any type (Equal, Select, Cast, ZerosLike, ...) so does the schema,
// and a dtype without a kernel is reported by the kernel lookup.
// Kernels: kernels/cpu/cwise_kernels.cc.
#include <cstdio>
#include <cstdlib>

#include "graph/op_registry.h"

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

void add_unary(op_registry& registry, const char* name, const char* types, const char* in = "x: T",
               const char* out = "y: T") {
  add_builtin_op(registry, op_schema(name).input(in).output(out).attr(types).shape_fn(unchanged_shape));
}

void add_binary(op_registry& registry, const char* name, const char* types) {
  add_builtin_op(registry, op_schema(name).input("x: T").input("y: T").output("z: T").attr(types).shape_fn(
                       broadcast_binary_shape));
}

void add_comparison(op_registry& registry, const char* name) {
  add_builtin_op(registry, op_schema(name)
                       .input("x: T")
                       .input("y: T")
                       .output("z: bool")
                       .attr(k_real_types)
                       .shape_fn(broadcast_binary_shape));
}

void add_equality(op_registry& registry, const char* name) {
  add_builtin_op(registry, op_schema(name)
                       .input("x: T")
                       .input("y: T")
                       .output("z: bool")
                       .attr("T: type")
                       .attr("incompatible_shape_error: bool = true")
                       .shape_fn(equality_shape));
}

}  // namespace

void register_math_ops(op_registry& registry) {
  add_unary(registry, "Neg", k_signed_types);
  add_unary(registry, "Abs", k_signed_types);
  add_unary(registry, "Square", k_real_types);
  add_unary(registry, "Sqrt", k_float_types);
  add_unary(registry, "Rsqrt", k_float_types);
  add_unary(registry, "Exp", k_float_types);
  add_unary(registry, "Log", k_float_types);
  add_unary(registry, "Tanh", k_float_types);
  add_unary(registry, "Sigmoid", k_float_types);
  add_unary(registry, "Relu", k_real_types, "features: T", "activations: T");

  add_binary(registry, "Add", k_real_types);
  add_binary(registry, "AddV2", k_real_types);
  add_binary(registry, "Sub", k_real_types);
  add_binary(registry, "Mul", k_real_types);
  add_binary(registry, "RealDiv", k_real_types);
  add_binary(registry, "Maximum", k_real_types);
  add_binary(registry, "Minimum", k_real_types);

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
                       .shape_fn(select_shape));
  add_builtin_op(registry, op_schema("SelectV2")
                       .input("condition: bool")
                       .input("t: T")
                       .input("e: T")
                       .output("output: T")
                       .attr("T: type")
                       .shape_fn(select_v2_shape));

  add_builtin_op(registry, op_schema("Cast")
                       .input("x: SrcT")
                       .output("y: DstT")
                       .attr("SrcT: type")
                       .attr("DstT: type")
                       .attr("Truncate: bool = false")
                       .shape_fn(unchanged_shape));
  add_unary(registry, "ZerosLike", "T: type");
  add_unary(registry, "OnesLike", "T: type");
  add_builtin_op(registry, op_schema("AddN")
                       .input("inputs: N * T")
                       .output("sum: T")
                       .attr("N: int >= 1")
                       .attr(k_real_types)
                       .shape_fn(add_n_shape));
}

}  // namespace troupe::graph
