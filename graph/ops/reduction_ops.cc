// Op schemas: reductions over axes given as a tensor, spelled as TensorFlow's raw ops.
//
//   Sum, Mean, Max, Min, Prod (input, reduction_indices; keep_dims)
//   ArgMax, ArgMin            (input, dimension; output_type)
//   Cumsum, Cumprod           (x, axis; exclusive, reverse): running sums and products
//   All, Any                  (booleans, reduction_indices; keep_dims)
//
// Axes may be negative (counted from the end); an empty axis list leaves the input as it
// is; a repeated axis is an error. Kernels: kernels/cpu/reduction_kernels.cc.
//
// Gradients (TensorFlow's math_grad.py): Sum and Mean spread the gradient back over the
// reduced axes by broadcasting; Max and Min split it evenly among the elements equal to
// the extremum; Prod gives each element the product of the others in its group (zeros
// handled without dividing by them, see prod_grad); ArgMax and ArgMin are not
// differentiable.
#include <cstdio>
#include <cstdlib>

#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops.h"

namespace troupe::graph {

namespace {

// The axes held by an int32 or int64 tensor of rank 0 or 1.
result<std::vector<std::int64_t>> read_axes(const tensor& t) {
  std::vector<std::int64_t> axes;
  if (t.rank() > 1) return invalid_argument_error("axes must be a scalar or a vector, not ", t.shape());
  bool ok = visit_dtype<index_types>(t.type(), [&]<class I>() {
    for (I a : t.flat<I>()) axes.push_back(static_cast<std::int64_t>(a));
  });
  if (!ok) return invalid_argument_error("axes must be int32 or int64, not ", dtype_name(t.type()));
  return axes;
}

status reduction_shape(shape_context& ctx) {
  bool keep_dims = false;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("keep_dims", &keep_dims));
  if (ctx.input(1).known_rank() && ctx.input(1).rank() > 1) {
    return ctx.error("reduction_indices must be a scalar or a vector, not ",
                     ctx.input(1).to_string());
  }
  const partial_shape& input = ctx.input(0);
  const tensor* axes_value = ctx.input_value(1);
  if (axes_value == nullptr || !input.known_rank()) {
    // Without the axes (or the rank) only keep_dims tells anything: the rank is kept.
    ctx.set_output(0, keep_dims && input.known_rank() ? partial_shape::unknown_of_rank(input.rank())
                                                      : partial_shape::unknown());
    return status();
  }
  auto axes = read_axes(*axes_value);
  if (!axes.ok()) return ctx.error(axes.error().message());
  int rank = input.rank();
  std::vector<bool> reduced(static_cast<std::size_t>(rank), false);
  for (std::int64_t axis : *axes) {
    if (axis < -rank || axis >= rank) {
      return ctx.error("reduction axis ", axis, " is out of range for input ", input.to_string(),
                       " (valid: [", -rank, ", ", rank, "))");
    }
    std::int64_t a = axis < 0 ? axis + rank : axis;
    if (reduced[static_cast<std::size_t>(a)]) {
      return ctx.error("reduction axes contain dimension ", a, " twice (input ",
                       input.to_string(), ")");
    }
    reduced[static_cast<std::size_t>(a)] = true;
  }
  std::vector<std::int64_t> dims;
  for (int i = 0; i < rank; ++i) {
    if (!reduced[static_cast<std::size_t>(i)]) dims.push_back(input.dim(i));
    else if (keep_dims) dims.push_back(1);
  }
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

status arg_reduction_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 0));
  const partial_shape& input = ctx.input(0);
  if (!input.known_rank()) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  int rank = input.rank();
  if (rank == 0) return ctx.error("input must have rank >= 1, not a scalar");
  const tensor* dimension = ctx.input_value(1);
  if (dimension == nullptr) {
    ctx.set_output(0, partial_shape::unknown_of_rank(rank - 1));
    return status();
  }
  auto axes = read_axes(*dimension);
  if (!axes.ok()) return ctx.error(axes.error().message());
  if (dimension->rank() != 0) return ctx.error("dimension must be a scalar, not ", dimension->shape());
  std::int64_t axis = (*axes)[0];
  if (axis < -rank || axis >= rank) {
    return ctx.error("dimension ", axis, " is out of range for input ", input.to_string(),
                     " (valid: [", -rank, ", ", rank, "))");
  }
  if (axis < 0) axis += rank;
  std::vector<std::int64_t> dims = input.dims();
  if (dims[static_cast<std::size_t>(axis)] == 0) {
    return ctx.error("cannot take the arg-reduction over empty dimension ", axis, " of input ",
                     input.to_string());
  }
  dims.erase(dims.begin() + axis);
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

// ---- Gradients. ----

using grads = std::vector<output>*;

// The forward output's shape with the reduced axes kept as 1: a constant when the input's
// shape and the axes are known now, else the shape of a keep_dims reduction of the input.
output kept_dims_shape(const gradient_context& ctx) {
  const scope& s = ctx.s;
  const output& x = ctx.inputs[0];
  const tensor* axes_value = s.current_graph().constant_value(ctx.forward.inputs[1]);
  if (axes_value != nullptr && x.shape.known_rank() && x.shape.fully_defined()) {
    auto axes = read_axes(*axes_value);
    if (axes.ok()) {
      std::vector<std::int32_t> dims;
      for (std::int64_t d : x.shape.dims()) dims.push_back(static_cast<std::int32_t>(d));
      for (std::int64_t a : *axes) dims[static_cast<std::size_t>(a < 0 ? a + x.shape.rank() : a)] = 1;
      return ops::constant(s, tensor::from_vector(dims));
    }
  }
  return ops::shape(s, s.add(ctx.forward.op_name(), {x, ctx.inputs[1]},
                             {{"keep_dims", attr_value(true)}, {"Tidx", attr_value(ctx.inputs[1].type)}})
                           .out());
}

// `value` (of the forward output's shape) reshaped to keep the reduced axes as 1.
output with_kept_dims(const gradient_context& ctx, const output& value) {
  bool keep_dims = false;
  if (get_attr(ctx.forward.def, "keep_dims", &keep_dims).ok() && keep_dims) return value;
  return ops::reshape(ctx.s, value, kept_dims_shape(ctx));
}

// dy broadcast back over the reduced axes.
output spread_over_reduced_axes(const gradient_context& ctx) {
  const scope& s = ctx.s;
  return ops::add(s, with_kept_dims(ctx, ctx.grad_outputs[0]), ops::zeros_like(s, ctx.inputs[0]));
}

status sum_grad(const gradient_context& ctx, grads dx) {
  *dx = {spread_over_reduced_axes(ctx), output{}};
  return status();
}

// Sum's gradient divided by how many inputs each output averaged.
status mean_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& x = ctx.inputs[0];
  const output& y = ctx.outputs[0];
  output count;
  if (x.shape.known_rank() && x.shape.fully_defined() && y.shape.known_rank() &&
      y.shape.fully_defined()) {
    double n = static_cast<double>(x.shape.num_elements()) /
               static_cast<double>(std::max<std::int64_t>(1, y.shape.num_elements()));
    count = scalar_of(s, x.type, n);
  } else {
    count = ops::div(s, ops::cast(s, ops::size(s, x), x.type), ops::cast(s, ops::size(s, y), x.type));
  }
  *dx = {ops::div(s, spread_over_reduced_axes(ctx), count), output{}};
  return status();
}

// Max and Min: the elements equal to the extremum share its gradient equally.
status extremum_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& x = ctx.inputs[0];
  output y_kept = with_kept_dims(ctx, ctx.outputs[0]);
  output dy_kept = with_kept_dims(ctx, ctx.grad_outputs[0]);
  output selected = ops::cast(s, ops::equal(s, y_kept, x), x.type);
  output num_selected = ops::sum(s, selected, ctx.inputs[1], true);
  *dx = {ops::mul(s, ops::div(s, selected, num_selected), dy_kept), output{}};
  return status();
}

// Prod: d(prod)/d(x_i) is the product of the other elements of x_i's group. TensorFlow
// builds it from exclusive cumulative products; this builds it from reductions instead.
// With q the product of the group's non-zero elements and z the number of its zeros:
//   z == 0: q / x_i;   z == 1: q at the zero, 0 elsewhere;   z >= 2: 0 everywhere.
// q / x_i agrees with the product of the others to a rounding, unless q itself under- or
// overflows while that product would not (a group of very small or very large values):
// there TensorFlow's cumulative products are the more accurate.
status prod_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const output& x = ctx.inputs[0];
  const output& axes = ctx.inputs[1];
  const tf::AttrValue keep = attr_value(true);
  const tf::AttrValue tidx = attr_value(axes.type);
  output zero = scalar_of(s, x.type, 0.0);
  output one = scalar_of(s, x.type, 1.0);
  output is_zero = ops::equal(s, x, zero);
  output nonzero = ops::select(s, is_zero, one, x);
  output q = s.add("Prod", {nonzero, axes}, {{"keep_dims", keep}, {"Tidx", tidx}}).out();
  output zeros = s.add("Sum", {ops::cast(s, is_zero, x.type), axes}, {{"keep_dims", keep}, {"Tidx", tidx}}).out();
  output at_zero = ops::select(s, ops::equal(s, zeros, one), q, zero);
  output elsewhere = ops::select(s, ops::equal(s, zeros, zero), ops::div(s, q, nonzero), zero);
  output others = ops::select(s, is_zero, at_zero, elsewhere);
  *dx = {ops::mul(s, others, with_kept_dims(ctx, ctx.grad_outputs[0])), output{}};
  return status();
}

// Cumsum, Cumprod: one output of the input's shape. The axis is a scalar.
status scan_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 0));
  ctx.set_output(0, ctx.input(0));
  return status();
}

// A scan like the forward one (same axis and exclusive), running the other way.
output reversed_scan(const gradient_context& ctx, const char* op, const output& x) {
  bool reverse = false;
  (void)get_attr(ctx.forward.def, "reverse", &reverse);
  const auto& attrs = ctx.forward.def.attr();
  return ctx.s.add(op, {x, ctx.inputs[1]}, {{"exclusive", attrs.at("exclusive")}, {"reverse", attr_value(!reverse)},
                                            {"Tidx", attrs.at("Tidx")}}).out();
}

// TensorFlow's: the gradient of a sum of prefixes is the sum of suffixes of the gradient.
status cumsum_grad(const gradient_context& ctx, grads dx) {
  *dx = {reversed_scan(ctx, "Cumsum", ctx.grad_outputs[0]), output{}};
  return status();
}

// TensorFlow's: dx = reversed cumsum(cumprod(x) * dy) / x; like TensorFlow's, only for x
// without zeros.
status cumprod_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  output weighted = reversed_scan(ctx, "Cumsum", ops::mul(s, ctx.outputs[0], ctx.grad_outputs[0]));
  *dx = {ops::div(s, weighted, ctx.inputs[0]), output{}};
  return status();
}

constexpr const char* k_reduction_types = "T: {float, double, int8, int16, int32, int64, uint8, uint16}";

}  // namespace

void register_reduction_ops(op_registry& registry) {
  const std::pair<const char*, gradient_function> reductions[] = {
      {"Sum", sum_grad}, {"Mean", mean_grad}, {"Max", extremum_grad}, {"Min", extremum_grad},
      {"Prod", prod_grad}};
  for (const auto& [name, gradient] : reductions) {
    add_builtin_op(registry, op_schema(name)
                               .input("input: T")
                               .input("reduction_indices: Tidx")
                               .output("output: T")
                               .attr("keep_dims: bool = false")
                               .attr(k_reduction_types)
                               .attr("Tidx: {int32, int64} = DT_INT32")
                               .shape_fn(reduction_shape)
                               .gradient(gradient));
  }
  // All, Any: the logical and / or of booleans over the axes.
  for (const char* name : {"All", "Any"}) {
    add_builtin_op(registry, op_schema(name)
                               .input("input: bool")
                               .input("reduction_indices: Tidx")
                               .output("output: bool")
                               .attr("keep_dims: bool = false")
                               .attr("Tidx: {int32, int64} = DT_INT32")
                               .shape_fn(reduction_shape)
                               .no_gradient());
  }
  const std::pair<const char*, gradient_function> scans[] = {{"Cumsum", cumsum_grad}, {"Cumprod", cumprod_grad}};
  for (const auto& [name, gradient] : scans) {
    add_builtin_op(registry, op_schema(name)
                               .input("x: T")
                               .input("axis: Tidx")
                               .output("out: T")
                               .attr("exclusive: bool = false")
                               .attr("reverse: bool = false")
                               .attr(k_reduction_types)
                               .attr("Tidx: {int32, int64} = DT_INT32")
                               .shape_fn(scan_shape)
                               .gradient(gradient));
  }
  for (const char* name : {"ArgMax", "ArgMin"}) {
    add_builtin_op(registry, op_schema(name)
                               .input("input: T")
                               .input("dimension: Tidx")
                               .output("output: output_type")
                               .attr(k_reduction_types)
                               .attr("Tidx: {int32, int64} = DT_INT32")
                               .attr("output_type: {int32, int64} = DT_INT64")
                               .shape_fn(arg_reduction_shape)
                               .no_gradient());
  }
}

}  // namespace troupe::graph
