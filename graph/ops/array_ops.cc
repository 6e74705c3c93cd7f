// Op schemas: array ops that create, pass through or rearrange tensors (Const,
// Placeholder, Identity, Reshape, Shape, ShapeN, Fill, Range, LinSpace, Transpose, ConcatV2, Pack, ExpandDims,
// Squeeze, ...), with TensorFlow's raw-op names, inputs and attributes.
//
// Shape functions use the graph-time value of an input when it is a Const (the shape
// operand of Reshape, the axis of ConcatV2, ...) to give fully known shapes, and fall back
// to a known rank or an unknown shape otherwise. They report only what is certainly wrong.
//
// Gradients (TensorFlow's array_grad.py): ops that only move values pass the gradient back
// rearranged the inverse way; sources, shape queries and StopGradient have none.
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops.h"
#include "graph/ops/index_ops.h"

namespace troupe::graph {

namespace {

// The shape described by a shape-vector input (Fill's dims, a random op's shape): fully
// known from its value, else of known rank from its own length, else unknown.
status shape_from_shape_input(shape_context& ctx, int input, partial_shape* out) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(input, 1));
  if (const tensor* value = ctx.input_value(input)) {
    std::vector<std::int64_t> dims = index_values(*value);
    for (std::size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] < 0) {
        return ctx.error("input ", input, " asks for a negative dimension ", dims[i], " at index ",
                         i, " in ", value->debug_string());
      }
    }
    *out = partial_shape(std::move(dims));
    return status();
  }
  const partial_shape& s = ctx.input(input);
  if (s.known_rank() && s.dim(0) >= 0) {
    *out = partial_shape::unknown_of_rank(static_cast<int>(s.dim(0)));
  } else {
    *out = partial_shape::unknown();
  }
  return status();
}

// A scalar int32/int64 input's value when known at graph time.
std::optional<std::int64_t> scalar_input_value(const shape_context& ctx, int input) {
  const tensor* value = ctx.input_value(input);
  if (value == nullptr || value->num_elements() != 1) return std::nullopt;
  return index_values(*value)[0];
}

status const_shape(shape_context& ctx) {
  auto it = ctx.node().attr().find("value");
  if (it == ctx.node().attr().end() || !it->second.has_tensor()) {
    return ctx.error("attribute 'value' must hold a tensor");
  }
  ctx.set_output(0, shape_from_proto(it->second.tensor().tensor_shape()));
  return status();
}

status placeholder_shape(shape_context& ctx) {
  partial_shape shape;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("shape", &shape));
  ctx.set_output(0, std::move(shape));
  return status();
}

status placeholder_with_default_shape(shape_context& ctx) {
  partial_shape shape;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("shape", &shape));
  if (!shape.is_compatible_with(ctx.input(0))) {
    return ctx.error("the default value's shape ", ctx.input(0).to_string(),
                     " is not compatible with the 'shape' attribute ", shape.to_string());
  }
  ctx.set_output(0, std::move(shape));
  return status();
}

status identity_n_shape(shape_context& ctx) {
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, ctx.input(i));
  return status();
}

// Reshape: the requested shape with one -1 resolved when the input's size is known.
status reshape_shape(shape_context& ctx) {
  const partial_shape& input = ctx.input(0);
  const tensor* value = ctx.input_value(1);
  if (value == nullptr) {
    const partial_shape& s = ctx.input(1);
    if (s.known_rank() && s.rank() == 1 && s.dim(0) >= 0) {
      ctx.set_output(0, partial_shape::unknown_of_rank(static_cast<int>(s.dim(0))));
    } else if (s.known_rank() && s.rank() == 0) {
      ctx.set_output(0, partial_shape::unknown_of_rank(1));
    } else {
      ctx.set_output(0, partial_shape::unknown());
    }
    return status();
  }
  if (value->rank() > 1) {
    return ctx.error("shape must be a vector, but has shape ", value->shape().to_string());
  }
  std::vector<std::int64_t> dims = index_values(*value);
  int unknown_index = -1;
  std::int64_t product = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (unknown_index >= 0) {
        return ctx.error("only one dimension of the requested shape ", value->debug_string(),
                         " may be -1");
      }
      unknown_index = static_cast<int>(i);
    } else if (dims[i] < 0) {
      return ctx.error("requested shape ", value->debug_string(), " has a negative dimension ",
                       dims[i], " at index ", i);
    } else {
      product *= dims[i];
    }
  }
  std::int64_t input_elements = input.known_rank() ? input.num_elements() : -1;
  if (unknown_index >= 0) {
    if (input_elements >= 0 && product > 0) {
      if (input_elements % product != 0) {
        return ctx.error("cannot reshape a tensor of shape ", input.to_string(), " (",
                         input_elements, " values) into shape ", value->debug_string());
      }
      dims[static_cast<std::size_t>(unknown_index)] = input_elements / product;
    }
  } else if (input_elements >= 0 && input_elements != product) {
    return ctx.error("cannot reshape a tensor of shape ", input.to_string(), " (", input_elements,
                     " values) into shape ", partial_shape(dims).to_string(), " (", product,
                     " values)");
  }
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

result<std::int64_t> range_size_of_floats(const tensor& start, const tensor& limit, const tensor& delta) {
  auto value = [](const tensor& t) {
    return t.type() == dtype::float32 ? double{t.scalar_value<float>()} : t.scalar_value<double>();
  };
  return range_size(value(start), value(limit), value(delta));
}

status check_numerics_grad(const gradient_context& ctx, std::vector<output>* dx) {
  std::string message;
  TROUPE_RETURN_IF_ERROR(get_attr(ctx.forward.def, "message", &message));
  *dx = {ctx.s.add("CheckNumerics", {ctx.grad_outputs[0]},
                   {{"message", attr_value("Not a number (NaN) or infinity (Inf) values detected in gradient. " +
                                           message)}}).out()};
  return status();
}

// Shape and ShapeN: output i is the shape vector of input i (its length: the rank).
status shape_shape(shape_context& ctx) {
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const partial_shape& input = ctx.input(i);
    ctx.set_output(i, partial_shape{input.known_rank() ? input.rank() : -1});
  }
  return status();
}

// Range: the length when start, limit and delta are all known (a Const each), else a
// vector of unknown length. Errors as the kernel's, found early.
status range_shape(shape_context& ctx) {
  for (int i = 0; i < 3; ++i) TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, 0));
  const tensor* start = ctx.input_value(0);
  const tensor* limit = ctx.input_value(1);
  const tensor* delta = ctx.input_value(2);
  if (start == nullptr || limit == nullptr || delta == nullptr) {
    ctx.set_output(0, partial_shape{-1});
    return status();
  }
  result<std::int64_t> size = 0;
  if (is_floating(start->type())) {
    size = range_size_of_floats(*start, *limit, *delta);
  } else {
    size = range_size(index_values(*start)[0], index_values(*limit)[0], index_values(*delta)[0]);
  }
  if (!size.ok()) return ctx.error(size.error().message());
  ctx.set_output(0, partial_shape{*size});
  return status();
}

// LinSpace: a vector of num elements (known when num is a Const).
status lin_space_shape(shape_context& ctx) {
  for (int i = 0; i < 3; ++i) TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, 0));
  const tensor* num = ctx.input_value(2);
  if (num == nullptr) {
    ctx.set_output(0, partial_shape{-1});
    return status();
  }
  std::int64_t n = index_values(*num)[0];
  if (n <= 0) return ctx.error("num must be positive, but is ", n);
  ctx.set_output(0, partial_shape{n});
  return status();
}

status fill_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 0));
  partial_shape shape;
  TROUPE_RETURN_IF_ERROR(shape_from_shape_input(ctx, 0, &shape));
  ctx.set_output(0, std::move(shape));
  return status();
}

status transpose_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  const partial_shape& input = ctx.input(0);
  const tensor* perm_value = ctx.input_value(1);
  if (perm_value == nullptr || !input.known_rank()) {
    if (input.known_rank()) {
      ctx.set_output(0, partial_shape::unknown_of_rank(input.rank()));
    } else if (ctx.input(1).known_rank() && ctx.input(1).dim(0) >= 0) {
      ctx.set_output(0, partial_shape::unknown_of_rank(static_cast<int>(ctx.input(1).dim(0))));
    } else {
      ctx.set_output(0, partial_shape::unknown());
    }
    return status();
  }
  std::vector<std::int64_t> perm = index_values(*perm_value);
  int rank = input.rank();
  if (static_cast<int>(perm.size()) != rank) {
    return ctx.error("perm ", perm_value->debug_string(), " has ", perm.size(),
                     " entries but the input has rank ", rank, " (shape ", input.to_string(), ")");
  }
  std::vector<bool> seen(perm.size(), false);
  std::vector<std::int64_t> dims(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) {
    std::int64_t p = perm[i];
    if (p < 0 || p >= rank || seen[static_cast<std::size_t>(p)]) {
      return ctx.error("perm ", perm_value->debug_string(), " is not a permutation of [0, ", rank,
                       ")");
    }
    seen[static_cast<std::size_t>(p)] = true;
    dims[i] = input.dim(static_cast<int>(p));
  }
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

// ConcatV2: inputs 0..N-1 joined along the axis given by input N.
status concat_shape(shape_context& ctx) {
  int n = ctx.num_inputs() - 1;
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(n, 0));
  int rank = -1;
  for (int i = 0; i < n; ++i) {
    if (ctx.input(i).known_rank()) {
      if (rank >= 0 && ctx.input(i).rank() != rank) {
        return ctx.error("all inputs must have the same rank, but earlier values have rank ", rank,
                         " and values[", i, "] has shape ", ctx.input(i).to_string());
      }
      rank = ctx.input(i).rank();
    }
  }
  std::optional<std::int64_t> axis_value = scalar_input_value(ctx, n);
  if (rank < 0) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  if (rank == 0) return ctx.error("cannot concatenate scalars (use Pack)");
  if (!axis_value) {
    ctx.set_output(0, partial_shape::unknown_of_rank(rank));
    return status();
  }
  std::int64_t axis = *axis_value < 0 ? *axis_value + rank : *axis_value;
  if (axis < 0 || axis >= rank) {
    return ctx.error("axis ", *axis_value, " is out of range for inputs of rank ", rank,
                     " (valid: [", -rank, ", ", rank, "))");
  }
  partial_shape others = partial_shape::unknown_of_rank(rank);
  std::int64_t axis_size = 0;
  for (int i = 0; i < n; ++i) {
    const partial_shape& s = ctx.input(i);
    if (!s.known_rank()) {
      axis_size = -1;
      continue;
    }
    std::vector<std::int64_t> d = s.dims();
    std::int64_t along = d[static_cast<std::size_t>(axis)];
    axis_size = (axis_size < 0 || along < 0) ? -1 : axis_size + along;
    d[static_cast<std::size_t>(axis)] = -1;
    auto merged = others.merge(partial_shape(d));
    if (!merged.ok()) {
      return ctx.error("values[", i, "] has shape ", s.to_string(),
                       ", which does not match the other inputs outside axis ", axis, ": ",
                       merged.error().message());
    }
    others = std::move(*merged);
  }
  std::vector<std::int64_t> dims = others.dims();
  dims[static_cast<std::size_t>(axis)] = axis_size;
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

status pack_shape(shape_context& ctx) {
  std::int64_t axis = 0;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("axis", &axis));
  partial_shape merged = partial_shape::unknown();
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    auto m = merged.merge(ctx.input(i));
    if (!m.ok()) {
      return ctx.error("all inputs must have the same shape, but values[", i, "] has shape ",
                       ctx.input(i).to_string(), ": ", m.error().message());
    }
    merged = std::move(*m);
  }
  if (!merged.known_rank()) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  int rank = merged.rank() + 1;
  std::int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    return ctx.error("axis ", axis, " is out of range for stacking inputs of rank ", merged.rank(),
                     " (valid: [", -rank, ", ", rank, "))");
  }
  std::vector<std::int64_t> dims = merged.dims();
  dims.insert(dims.begin() + a, ctx.num_inputs());
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

status expand_dims_shape(shape_context& ctx) {
  const partial_shape& input = ctx.input(0);
  std::optional<std::int64_t> dim = scalar_input_value(ctx, 1);
  if (!input.known_rank()) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  int rank = input.rank();
  if (!dim) {
    ctx.set_output(0, partial_shape::unknown_of_rank(rank + 1));
    return status();
  }
  std::int64_t d = *dim < 0 ? *dim + rank + 1 : *dim;
  if (d < 0 || d > rank) {
    return ctx.error("dim ", *dim, " is out of range for an input of shape ", input.to_string(),
                     " (valid: [", -rank - 1, ", ", rank, "])");
  }
  std::vector<std::int64_t> dims = input.dims();
  dims.insert(dims.begin() + d, 1);
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

status squeeze_shape(shape_context& ctx) {
  const partial_shape& input = ctx.input(0);
  std::vector<std::int64_t> squeeze_dims;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("squeeze_dims", &squeeze_dims));
  if (!input.known_rank()) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  int rank = input.rank();
  std::vector<bool> squeeze(static_cast<std::size_t>(rank), false);
  for (std::int64_t d : squeeze_dims) {
    std::int64_t a = d < 0 ? d + rank : d;
    if (a < 0 || a >= rank) {
      return ctx.error("squeeze dim ", d, " is out of range for an input of shape ",
                       input.to_string(), " (valid: [", -rank, ", ", rank, "))");
    }
    std::int64_t size = input.dim(static_cast<int>(a));
    if (size >= 0 && size != 1) {
      return ctx.error("cannot squeeze dim ", d, " of shape ", input.to_string(), ": its size is ",
                       size, ", not 1");
    }
    squeeze[static_cast<std::size_t>(a)] = true;
  }
  std::vector<std::int64_t> dims;
  for (int i = 0; i < rank; ++i) {
    std::int64_t size = input.dim(i);
    if (squeeze_dims.empty()) {
      // Which dimensions go depends on sizes we do not know yet.
      if (size < 0) {
        ctx.set_output(0, partial_shape::unknown());
        return status();
      }
      if (size == 1) continue;
    } else if (squeeze[static_cast<std::size_t>(i)]) {
      continue;
    }
    dims.push_back(size);
  }
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

// ---- Gradients. ----

using grads = std::vector<output>*;

// The value of a forward input when it is a constant, else nullptr.
const tensor* constant_input(const gradient_context& ctx, int i) {
  return ctx.s.current_graph().constant_value(ctx.forward.inputs[static_cast<std::size_t>(i)]);
}


// Reshape, ExpandDims, Squeeze: the gradient reshaped to the input's shape.
status reshape_grad(const gradient_context& ctx, grads dx) {
  dx->assign(ctx.inputs.size(), output{});
  (*dx)[0] = reshape_to_shape_of(ctx.s, ctx.grad_outputs[0], ctx.inputs[0]);
  return status();
}

// Fill: the value's gradient is the sum of everything it was copied to.
status fill_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  output flat = ops::reshape(s, ctx.grad_outputs[0], ops::int32_vector(s, {-1}));
  *dx = {output{}, ops::sum(s, flat, ops::constant(s, tensor::scalar<std::int32_t>(0)))};
  return status();
}

status transpose_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  output inverse;
  if (const tensor* perm = constant_input(ctx, 1)) {
    std::vector<std::int64_t> p = index_values(*perm);
    std::vector<std::int32_t> inv(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) inv[static_cast<std::size_t>(p[i])] = static_cast<std::int32_t>(i);
    inverse = ops::constant(s, tensor::from_vector(inv));
  } else {
    inverse = s.add("InvertPermutation", {ctx.inputs[1]}).out();
  }
  *dx = {ops::transpose(s, ctx.grad_outputs[0], inverse), output{}};
  return status();
}

// ConcatV2: each input's gradient is its slice of dy. The slices' offsets are constants when
// every input's shape and the axis are known now, else ConcatOffset computes them.
status concat_grad(const gradient_context& ctx, grads dx) {
  const scope& s = ctx.s;
  const int n = static_cast<int>(ctx.inputs.size()) - 1;
  const output& dy = ctx.grad_outputs[0];
  dx->clear();
  const tensor* axis_value = constant_input(ctx, n);
  bool all_known = axis_value != nullptr;
  for (int i = 0; i < n && all_known; ++i) {
    const partial_shape& shape = ctx.inputs[static_cast<std::size_t>(i)].shape;
    all_known = shape.known_rank() && shape.fully_defined();
  }
  if (all_known) {
    int rank = ctx.inputs[0].shape.rank();
    std::int64_t axis = index_values(*axis_value)[0];
    if (axis < 0) axis += rank;
    std::int64_t offset = 0;
    for (int i = 0; i < n; ++i) {
      const partial_shape& shape = ctx.inputs[static_cast<std::size_t>(i)].shape;
      std::vector<std::int32_t> begin(static_cast<std::size_t>(rank), 0);
      begin[static_cast<std::size_t>(axis)] = static_cast<std::int32_t>(offset);
      offset += shape.dim(static_cast<int>(axis));
      dx->push_back(s.add("Slice", {dy, ops::constant(s, tensor::from_vector(begin)),
                                    shape_of(s, ctx.inputs[static_cast<std::size_t>(i)])})
                        .out());
    }
  } else {
    output axis = ctx.inputs[static_cast<std::size_t>(n)];
    if (axis.type != dtype::int32) axis = ops::cast(s, axis, dtype::int32);
    std::vector<output> shapes;
    for (int i = 0; i < n; ++i) shapes.push_back(shape_of(s, ctx.inputs[static_cast<std::size_t>(i)]));
    operation offsets = s.add("ConcatOffset", {axis, input(shapes)});
    for (int i = 0; i < n; ++i) {
      dx->push_back(s.add("Slice", {dy, offsets.out(i), shapes[static_cast<std::size_t>(i)]}).out());
    }
  }
  dx->push_back(output{});
  return status();
}

// Pack: Unpack the gradient along the same axis.
status pack_grad(const gradient_context& ctx, grads dx) {
  std::int64_t axis = 0;
  TROUPE_RETURN_IF_ERROR(get_attr(ctx.forward.def, "axis", &axis));
  auto num = static_cast<std::int64_t>(ctx.inputs.size());
  operation parts = ctx.s.add("Unpack", {ctx.grad_outputs[0]},
                              {{"num", attr_value(num)}, {"axis", attr_value(axis)}});
  dx->clear();
  for (int i = 0; i < static_cast<int>(num); ++i) dx->push_back(parts.out(i));
  return status();
}

}  // namespace

void register_array_ops(op_registry& registry) {
  add_builtin_op(registry, op_schema("Const")
                       .output("output: dtype")
                       .attr("value: tensor")
                       .attr("dtype: type")
                       .shape_fn(const_shape)
                       .no_gradient());
  add_builtin_op(registry, op_schema("Placeholder")
                       .output("output: dtype")
                       .attr("dtype: type")
                       .attr("shape: shape = ?")
                       .shape_fn(placeholder_shape)
                       .no_gradient());
  add_builtin_op(registry, op_schema("PlaceholderWithDefault")
                       .input("input: dtype")
                       .output("output: dtype")
                       .attr("dtype: type")
                       .attr("shape: shape")
                       .shape_fn(placeholder_with_default_shape)
                       .gradient(pass_through_gradient));
  add_builtin_op(registry, op_schema("Identity")
                       .input("input: T")
                       .output("output: T")
                       .attr("T: type")
                       .shape_fn(unchanged_shape)
                       .gradient(pass_through_gradient));
  add_builtin_op(registry, op_schema("IdentityN")
                       .input("input: T")
                       .output("output: T")
                       .attr("T: list(type) >= 1")
                       .shape_fn(identity_n_shape)
                       .gradient(pass_through_gradient));
  add_builtin_op(registry, op_schema("NoOp").shape_fn(no_outputs_shape).no_gradient());
  // CheckNumerics: the tensor, or an error (invalid_argument: "<message> : Tensor had NaN
  // values" or "Inf values") when it holds one. Its gradient checks the gradient.
  add_builtin_op(registry, op_schema("CheckNumerics")
                       .input("tensor: T")
                       .output("output: T")
                       .attr("T: {float, double}")
                       .attr("message: string")
                       .stateful()
                       .shape_fn(unchanged_shape)
                       .gradient(check_numerics_grad));
  add_builtin_op(registry, op_schema("StopGradient")
                       .input("input: T")
                       .output("output: T")
                       .attr("T: type")
                       .shape_fn(unchanged_shape)
                       .no_gradient());
  add_builtin_op(registry, op_schema("Reshape")
                       .input("tensor: T")
                       .input("shape: Tshape")
                       .output("output: T")
                       .attr("T: type")
                       .attr("Tshape: {int32, int64} = DT_INT32")
                       .shape_fn(reshape_shape)
                       .gradient(reshape_grad));
  add_builtin_op(registry, op_schema("Shape")
                       .input("input: T")
                       .output("output: out_type")
                       .attr("T: type")
                       .attr("out_type: {int32, int64} = DT_INT32")
                       .shape_fn(shape_shape)
                       .no_gradient());
  add_builtin_op(registry, op_schema("ShapeN")
                       .input("input: N * T")
                       .output("output: N * out_type")
                       .attr("N: int >= 1")
                       .attr("T: type")
                       .attr("out_type: {int32, int64} = DT_INT32")
                       .shape_fn(shape_shape)
                       .no_gradient());
  add_builtin_op(registry, op_schema("Size")
                       .input("input: T")
                       .output("output: out_type")
                       .attr("T: type")
                       .attr("out_type: {int32, int64} = DT_INT32")
                       .shape_fn(scalar_shape)
                       .no_gradient());
  // As in TensorFlow, Rank has no out_type: it is always int32.
  add_builtin_op(registry, op_schema("Rank")
                       .input("input: T")
                       .output("output: int32")
                       .attr("T: type")
                       .shape_fn(scalar_shape)
                       .no_gradient());
  add_builtin_op(registry, op_schema("Fill")
                       .input("dims: index_type")
                       .input("value: T")
                       .output("output: T")
                       .attr("T: type")
                       .attr("index_type: {int32, int64} = DT_INT32")
                       .shape_fn(fill_shape)
                       .gradient(fill_grad));
  add_builtin_op(registry, op_schema("Range")
                       .input("start: Tidx")
                       .input("limit: Tidx")
                       .input("delta: Tidx")
                       .output("output: Tidx")
                       .attr("Tidx: {float, double, int32, int64} = DT_INT32")
                       .shape_fn(range_shape)
                       .no_gradient());
  add_builtin_op(registry, op_schema("LinSpace")
                       .input("start: T")
                       .input("stop: T")
                       .input("num: Tidx")
                       .output("output: T")
                       .attr("T: {float, double}")
                       .attr("Tidx: {int32, int64} = DT_INT32")
                       .shape_fn(lin_space_shape)
                       .no_gradient());
  add_builtin_op(registry, op_schema("Transpose")
                       .input("x: T")
                       .input("perm: Tperm")
                       .output("y: T")
                       .attr("T: type")
                       .attr("Tperm: {int32, int64} = DT_INT32")
                       .shape_fn(transpose_shape)
                       .gradient(transpose_grad));
  add_builtin_op(registry, op_schema("ConcatV2")
                       .input("values: N * T")
                       .input("axis: Tidx")
                       .output("output: T")
                       .attr("N: int >= 2")
                       .attr("T: type")
                       .attr("Tidx: {int32, int64} = DT_INT32")
                       .shape_fn(concat_shape)
                       .gradient(concat_grad));
  add_builtin_op(registry, op_schema("Pack")
                       .input("values: N * T")
                       .output("output: T")
                       .attr("N: int >= 1")
                       .attr("T: type")
                       .attr("axis: int = 0")
                       .shape_fn(pack_shape)
                       .gradient(pack_grad));
  add_builtin_op(registry, op_schema("ExpandDims")
                       .input("input: T")
                       .input("dim: Tdim")
                       .output("output: T")
                       .attr("T: type")
                       .attr("Tdim: {int32, int64} = DT_INT32")
                       .shape_fn(expand_dims_shape)
                       .gradient(reshape_grad));
  add_builtin_op(registry, op_schema("Squeeze")
                       .input("input: T")
                       .output("output: T")
                       .attr("T: type")
                       .attr("squeeze_dims: list(int) >= 0 = []")
                       .shape_fn(squeeze_shape)
                       .gradient(reshape_grad));
}

}  // namespace troupe::graph
