// Op schemas: resource variables and the training updates that act on them, spelled as
// TensorFlow's raw ops.
//
//   VarHandleOp                 -> resource        a handle to the variable `shared_name`
//   ReadVariableOp              resource -> value  a snapshot of the value
//   AssignVariableOp            resource, value    replace the value (the first assignment
//   AssignAddVariableOp         resource, value    creates it); += and -=
//   AssignSubVariableOp
//   ResourceGather              resource, indices -> rows (GatherV2 on axis batch_dims)
//   ResourceScatterAdd          resource, indices, updates: var[indices] += updates
//   VarIsInitializedOp          resource -> bool
//   DestroyResourceOp           resource
//   ResourceApplyGradientDescent, ResourceApplyMomentum, ResourceApplyAdagrad,
//   ResourceApplyAdam, ResourceApplyRMSProp: one optimizer step on var (and its slots),
//                               formulas in kernels/training_ops.h
//   TroupeApplyGradientDescentMatMul  resource, alpha, a, b: var -= alpha * op(a) op(b)
//                               (troupe's own: a gradient-descent step whose gradient is
//                               a MatMul's product, accumulated into the variable)
//
// Every op here is stateful. Kernels are actors (actors/); the update math is in
// kernels/training_ops.h.
//
// Shapes: a variable's dtype and shape live in its VarHandleOp's attributes. When a
// consumer's handle comes straight from a VarHandleOp the shape functions use them
// (ReadVariableOp's output shape, dtype checks, value and gradient shapes merged with the
// variable's); otherwise (a handle through Identity, a fed handle) the shape is unknown
// and the checks happen when the kernel runs. Scalar hyper-parameters must have rank 0.
//
// Gradients: none of these ops passes a gradient. Gradients are taken with respect to
// the value a read produces (ReadVariableOp's or ResourceGather's output), never the
// handle; add_gradients does not walk resource-typed edges.
#include <string>

#include "graph/attr.h"
#include "graph/op_registry.h"

namespace troupe::graph {

namespace {

// The float types the training updates compute with (TensorFlow allows every number
// type; kernels/training_ops.h supports these).
constexpr const char* k_apply_types = "T: {float, double}";

// What the graph knows about the variable behind input `i`: its VarHandleOp's node,
// dtype and shape, when the handle comes straight from one.
struct variable_info {
  const tf::NodeDef* node = nullptr;  // nullptr: unknown
  dtype type = dtype::invalid;
  partial_shape shape;
};

status variable_of(const shape_context& ctx, int i, variable_info* out) {
  *out = variable_info{};
  const tf::NodeDef* producer = ctx.input_node(i);
  if (producer == nullptr || producer->op() != "VarHandleOp") return status();
  out->node = producer;
  TROUPE_RETURN_IF_ERROR(get_attr(*producer, "dtype", &out->type));
  TROUPE_RETURN_IF_ERROR(get_attr(*producer, "shape", &out->shape));
  return status();
}

// Checks that a variable of dtype `have` is used as `want` (the op's dtype attribute).
status check_variable_dtype(const shape_context& ctx, const variable_info& var, dtype want,
                            const char* what) {
  if (var.node == nullptr || var.type == want) return status();
  return ctx.error(what, " variable '", var.node->name(), "' of dtype ", dtype_name(var.type),
                   " as ", dtype_name(want));
}

// Merges `value` (input `i`, named `what`) with the variable's shape.
status merge_with_variable(const shape_context& ctx, const variable_info& var, int i,
                           const char* what) {
  if (var.node == nullptr) return status();
  auto merged = var.shape.merge(ctx.input(i));
  if (!merged.ok()) {
    return ctx.error(what, " has shape ", ctx.input(i).to_string(), " but variable '",
                     var.node->name(), "' has shape ", var.shape.to_string());
  }
  return status();
}

status handle_rank(const shape_context& ctx, int i) {
  const partial_shape& s = ctx.input(i);
  if (s.known_rank() && s.rank() != 0) {
    return ctx.error("input ", i, " must be a scalar resource handle but has shape ", s.to_string());
  }
  return status();
}

status var_handle_shape(shape_context& ctx) {
  ctx.set_output(0, partial_shape::scalar());
  return status();
}

status read_variable_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(handle_rank(ctx, 0));
  dtype type = dtype::invalid;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("dtype", &type));
  variable_info var;
  TROUPE_RETURN_IF_ERROR(variable_of(ctx, 0, &var));
  TROUPE_RETURN_IF_ERROR(check_variable_dtype(ctx, var, type, "reads"));
  ctx.set_output(0, var.node != nullptr ? var.shape : partial_shape::unknown());
  return status();
}

// AssignVariableOp, AssignAddVariableOp, AssignSubVariableOp: the value has the
// variable's dtype and a shape compatible with the variable's.
status assign_variable_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(handle_rank(ctx, 0));
  dtype type = dtype::invalid;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("dtype", &type));
  variable_info var;
  TROUPE_RETURN_IF_ERROR(variable_of(ctx, 0, &var));
  TROUPE_RETURN_IF_ERROR(check_variable_dtype(ctx, var, type, "assigns to"));
  return merge_with_variable(ctx, var, 1, "the value");
}

// output = params[:batch_dims] + indices[batch_dims:] + params[batch_dims + 1:].
status resource_gather_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(handle_rank(ctx, 0));
  dtype type = dtype::invalid;
  std::int64_t batch_dims = 0;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("dtype", &type));
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("batch_dims", &batch_dims));
  if (batch_dims < 0) return ctx.error("batch_dims is ", batch_dims, " but must be >= 0");
  variable_info var;
  TROUPE_RETURN_IF_ERROR(variable_of(ctx, 0, &var));
  TROUPE_RETURN_IF_ERROR(check_variable_dtype(ctx, var, type, "gathers from"));
  const partial_shape& indices = ctx.input(1);
  const int b = static_cast<int>(batch_dims);
  if (indices.known_rank() && indices.rank() < b) {
    return ctx.error("indices of shape ", indices.to_string(), " have rank < batch_dims ", b);
  }
  if (var.node == nullptr || !var.shape.known_rank() || !indices.known_rank()) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  const partial_shape& params = var.shape;
  if (params.rank() < b + 1) {
    return ctx.error("variable '", var.node->name(), "' of shape ", params.to_string(),
                     " must have rank >= batch_dims + 1 = ", b + 1);
  }
  std::vector<std::int64_t> dims;
  for (int i = 0; i < b; ++i) {
    std::int64_t p = params.dim(i), q = indices.dim(i);
    if (p >= 0 && q >= 0 && p != q) {
      return ctx.error("batch dimension ", i, " differs: variable '", var.node->name(), "' ",
                       params.to_string(), ", indices ", indices.to_string());
    }
    dims.push_back(p >= 0 ? p : q);
  }
  for (int i = b; i < indices.rank(); ++i) dims.push_back(indices.dim(i));
  for (int i = b + 1; i < params.rank(); ++i) dims.push_back(params.dim(i));
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

// updates: a scalar, or indices.shape + var.shape[1:].
status resource_scatter_add_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(handle_rank(ctx, 0));
  dtype type = dtype::invalid;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("dtype", &type));
  variable_info var;
  TROUPE_RETURN_IF_ERROR(variable_of(ctx, 0, &var));
  TROUPE_RETURN_IF_ERROR(check_variable_dtype(ctx, var, type, "scatters into"));
  const partial_shape& indices = ctx.input(1);
  const partial_shape& updates = ctx.input(2);
  if (var.node == nullptr || !var.shape.known_rank() || !indices.known_rank() ||
      !updates.known_rank() || updates.rank() == 0) {
    return status();
  }
  if (var.shape.rank() < 1) {
    return ctx.error("variable '", var.node->name(), "' is a scalar; scatter needs rank >= 1");
  }
  std::vector<std::int64_t> want = indices.dims();
  for (int i = 1; i < var.shape.rank(); ++i) want.push_back(var.shape.dim(i));
  if (!updates.merge(partial_shape(want)).ok()) {
    return ctx.error("updates have shape ", updates.to_string(), " but indices ",
                     indices.to_string(), " into variable '", var.node->name(), "' of shape ",
                     var.shape.to_string(), " need ", partial_shape(want).to_string(),
                     " (or a scalar)");
  }
  return status();
}

// A ResourceApply* op: `num_vars` resource inputs (the variable, then its slots), then
// the inputs named in `scalars` (rank 0) and `grad` (the variable's shape).
struct apply_layout {
  int num_vars;
  std::vector<int> scalars;
  int grad;
};

// Checks the variables (and slots) of an update whose gradient has shape `grad`.
status check_apply(shape_context& ctx, const apply_layout& layout, const partial_shape& grad) {
  dtype type = dtype::invalid;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("T", &type));
  partial_shape shape = grad;
  for (int i = 0; i < layout.num_vars; ++i) {
    TROUPE_RETURN_IF_ERROR(handle_rank(ctx, i));
    variable_info var;
    TROUPE_RETURN_IF_ERROR(variable_of(ctx, i, &var));
    TROUPE_RETURN_IF_ERROR(check_variable_dtype(ctx, var, type, "updates"));
    if (var.node == nullptr) continue;
    auto merged = shape.merge(var.shape);
    if (!merged.ok()) {
      return ctx.error("grad has shape ", grad.to_string(), " but variable '", var.node->name(), "' (input ", i,
                       ") has shape ", var.shape.to_string());
    }
    shape = std::move(*merged);
  }
  for (int i : layout.scalars) TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, 0));
  return status();
}

shape_function apply_shape(apply_layout layout) {
  return [layout](shape_context& ctx) -> status { return check_apply(ctx, layout, ctx.input(layout.grad)); };
}

// TroupeApplyGradientDescentMatMul: the gradient is op(a) op(b), [m, k] x [k, n].
status apply_matmul_shape(shape_context& ctx) {
  bool transpose_a = false, transpose_b = false;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("transpose_a", &transpose_a));
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("transpose_b", &transpose_b));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(2, 2));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(3, 2));
  const partial_shape& a = ctx.input(2);
  const partial_shape& b = ctx.input(3);
  auto dim = [](const partial_shape& x, int d) { return x.known_rank() ? x.dim(d) : std::int64_t{-1}; };
  const std::int64_t m = dim(a, transpose_a ? 1 : 0), k_a = dim(a, transpose_a ? 0 : 1);
  const std::int64_t k_b = dim(b, transpose_b ? 1 : 0), n = dim(b, transpose_b ? 0 : 1);
  if (k_a >= 0 && k_b >= 0 && k_a != k_b) {
    return ctx.error("a ", a.to_string(), " and b ", b.to_string(), " (transpose_a ", transpose_a,
                     ", transpose_b ", transpose_b, ") do not multiply: inner dimensions ", k_a, " and ", k_b);
  }
  return check_apply(ctx, {1, {1}, -1}, partial_shape{m, n});
}

op_schema variable_op(std::string name) {
  op_schema schema(std::move(name));
  schema.stateful().no_gradient();
  return schema;
}

}  // namespace

void register_state_ops(op_registry& registry) {
  add_builtin_op(registry, variable_op("VarHandleOp")
                               .output("resource: resource")
                               .attr("container: string = ''")
                               .attr("shared_name: string = ''")
                               .attr("debug_name: string = ''")
                               .attr("dtype: type")
                               .attr("shape: shape")
                               .attr("allowed_devices: list(string) = []")
                               .shape_fn(var_handle_shape));
  add_builtin_op(registry, variable_op("ReadVariableOp")
                               .input("resource: resource")
                               .output("value: dtype")
                               .attr("dtype: type")
                               .shape_fn(read_variable_shape));
  add_builtin_op(registry, variable_op("AssignVariableOp")
                               .input("resource: resource")
                               .input("value: dtype")
                               .attr("dtype: type")
                               .attr("validate_shape: bool = false")
                               .shape_fn(assign_variable_shape));
  for (const char* op : {"AssignAddVariableOp", "AssignSubVariableOp"}) {
    add_builtin_op(registry, variable_op(op)
                                 .input("resource: resource")
                                 .input("value: dtype")
                                 .attr("dtype: type")
                                 .shape_fn(assign_variable_shape));
  }
  add_builtin_op(registry, variable_op("ResourceGather")
                               .input("resource: resource")
                               .input("indices: Tindices")
                               .output("output: dtype")
                               .attr("batch_dims: int = 0")
                               .attr("validate_indices: bool = true")
                               .attr("dtype: type")
                               .attr("Tindices: {int32, int64}")
                               .shape_fn(resource_gather_shape));
  add_builtin_op(registry, variable_op("ResourceScatterAdd")
                               .input("resource: resource")
                               .input("indices: Tindices")
                               .input("updates: dtype")
                               .attr("dtype: {float, double, int8, int16, int32, int64, uint8, uint16}")
                               .attr("Tindices: {int32, int64}")
                               .shape_fn(resource_scatter_add_shape));
  add_builtin_op(registry, variable_op("VarIsInitializedOp")
                               .input("resource: resource")
                               .output("is_initialized: bool")
                               .shape_fn(scalar_shape));
  add_builtin_op(registry, variable_op("DestroyResourceOp")
                               .input("resource: resource")
                               .attr("ignore_lookup_error: bool = true")
                               .shape_fn(no_outputs_shape));

  // var -= alpha * delta
  add_builtin_op(registry, variable_op("ResourceApplyGradientDescent")
                               .input("var: resource")
                               .input("alpha: T")
                               .input("delta: T")
                               .attr(k_apply_types)
                               .attr("use_locking: bool = false")
                               .shape_fn(apply_shape({1, {1}, 2})));
  // var -= alpha * op(a) op(b): ResourceApplyGradientDescent of a MatMul's product, with the
  // product accumulated into the variable (troupe's own op; graph/train.h says when
  // minimize builds it).
  add_builtin_op(registry, variable_op("TroupeApplyGradientDescentMatMul")
                               .input("var: resource")
                               .input("alpha: T")
                               .input("a: T")
                               .input("b: T")
                               .attr(k_apply_types)
                               .attr("transpose_a: bool = false")
                               .attr("transpose_b: bool = false")
                               .shape_fn(apply_matmul_shape));
  // accum = accum * momentum + grad; var -= lr * accum (Nesterov: lr * (grad + momentum * accum))
  add_builtin_op(registry, variable_op("ResourceApplyMomentum")
                               .input("var: resource")
                               .input("accum: resource")
                               .input("lr: T")
                               .input("grad: T")
                               .input("momentum: T")
                               .attr(k_apply_types)
                               .attr("use_locking: bool = false")
                               .attr("use_nesterov: bool = false")
                               .shape_fn(apply_shape({2, {2, 4}, 3})));
  // accum += grad^2 (when update_slots); var -= lr * grad / sqrt(accum)
  add_builtin_op(registry, variable_op("ResourceApplyAdagrad")
                               .input("var: resource")
                               .input("accum: resource")
                               .input("lr: T")
                               .input("grad: T")
                               .attr(k_apply_types)
                               .attr("use_locking: bool = false")
                               .attr("update_slots: bool = true")
                               .shape_fn(apply_shape({2, {2}, 3})));
  add_builtin_op(registry, variable_op("ResourceApplyAdam")
                               .input("var: resource")
                               .input("m: resource")
                               .input("v: resource")
                               .input("beta1_power: T")
                               .input("beta2_power: T")
                               .input("lr: T")
                               .input("beta1: T")
                               .input("beta2: T")
                               .input("epsilon: T")
                               .input("grad: T")
                               .attr(k_apply_types)
                               .attr("use_locking: bool = false")
                               .attr("use_nesterov: bool = false")
                               .shape_fn(apply_shape({3, {3, 4, 5, 6, 7, 8}, 9})));
  add_builtin_op(registry, variable_op("ResourceApplyRMSProp")
                               .input("var: resource")
                               .input("ms: resource")
                               .input("mom: resource")
                               .input("lr: T")
                               .input("rho: T")
                               .input("momentum: T")
                               .input("epsilon: T")
                               .input("grad: T")
                               .attr(k_apply_types)
                               .attr("use_locking: bool = false")
                               .shape_fn(apply_shape({3, {3, 4, 5, 6}, 7})));
}

}  // namespace troupe::graph
