// Op schemas: the helper ops gradient functions build, spelled as TensorFlow's raw ops.
//
//   BroadcastGradientArgs  (s0, s1 -> r0, r1) the axes to sum a broadcast result's
//                          gradient over, to get the gradient of an s0 (r0) or s1 (r1) input
//   ReluGrad               (gradients, features -> backprops) gradients * (features > 0)
//   TanhGrad SigmoidGrad SqrtGrad RsqrtGrad   (y, dy -> z), y the forward output
//   Sign                   -1, 0 or 1
//   Slice                  (input, begin, size -> output), size -1: to the end
//   Unpack                 (value -> num outputs) the inverse of Pack
//   InvertPermutation      (x -> y) y[x[i]] = i
//   ConcatOffset           (concat_dim, N shapes -> N offsets) where each ConcatV2 input
//                          starts in the output
//
// Kernels: kernels/cpu/grad_kernels.cc. Gradients are defined for Sign (none) and Unpack;
// the others are not differentiated (second derivatives are not supported yet).
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops.h"

namespace troupe::graph {

namespace {

status broadcast_gradient_args_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 1));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  ctx.set_output(0, partial_shape{-1});
  ctx.set_output(1, partial_shape{-1});
  return status();
}

status broadcast_args_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 1));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  std::int64_t n0 = ctx.input(0).known_rank() ? ctx.input(0).dim(0) : -1;
  std::int64_t n1 = ctx.input(1).known_rank() ? ctx.input(1).dim(0) : -1;
  ctx.set_output(0, partial_shape{n0 >= 0 && n1 >= 0 ? std::max(n0, n1) : -1});
  return status();
}

status slice_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(2, 1));
  const partial_shape& input = ctx.input(0);
  const tensor* begin = ctx.input_value(1);
  const tensor* size = ctx.input_value(2);
  int rank = input.rank();
  if (rank < 0 && ctx.input(2).known_rank() && ctx.input(2).dim(0) >= 0) {
    rank = static_cast<int>(ctx.input(2).dim(0));
  }
  if (rank < 0) {
    ctx.set_output(0, partial_shape::unknown());
    return status();
  }
  if (size == nullptr) {
    ctx.set_output(0, partial_shape::unknown_of_rank(rank));
    return status();
  }
  std::vector<std::int64_t> sizes = index_values(*size);
  if (static_cast<int>(sizes.size()) != rank) {
    return ctx.error("size ", size->debug_string(), " has ", sizes.size(),
                     " entries but the input has rank ", rank);
  }
  std::vector<std::int64_t> begins;
  if (begin != nullptr) begins = index_values(*begin);
  std::vector<std::int64_t> dims(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] >= 0) {
      dims[i] = sizes[i];
    } else if (sizes[i] == -1 && !begins.empty() && input.known_rank() &&
               input.dim(static_cast<int>(i)) >= 0) {
      dims[i] = input.dim(static_cast<int>(i)) - begins[i];
    } else if (sizes[i] == -1) {
      dims[i] = -1;
    } else {
      return ctx.error("size ", size->debug_string(), " has entry ", sizes[i], " at index ", i,
                       "; valid sizes are >= 0, or -1 for everything after begin");
    }
  }
  ctx.set_output(0, partial_shape(std::move(dims)));
  return status();
}

status unpack_shape(shape_context& ctx) {
  std::int64_t num = 0, axis = 0;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("num", &num));
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("axis", &axis));
  const partial_shape& value = ctx.input(0);
  partial_shape out = partial_shape::unknown();
  if (value.known_rank()) {
    int rank = value.rank();
    std::int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) {
      return ctx.error("axis ", axis, " is out of range for a value of shape ", value.to_string(),
                       " (valid: [", -rank, ", ", rank, "))");
    }
    std::int64_t along = value.dim(static_cast<int>(a));
    if (along >= 0 && along != num) {
      return ctx.error("num is ", num, " but dimension ", a, " of value ", value.to_string(),
                       " has size ", along);
    }
    std::vector<std::int64_t> dims = value.dims();
    dims.erase(dims.begin() + a);
    out = partial_shape(std::move(dims));
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, out);
  return status();
}

status invert_permutation_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 1));
  ctx.set_output(0, ctx.input(0).known_rank() ? ctx.input(0) : partial_shape{-1});
  return status();
}

status concat_offset_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 0));
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, 1));
    ctx.set_output(i - 1, ctx.input(i));
  }
  return status();
}

// Unpack's gradient: Pack the output gradients back (zeros where none flows).
status unpack_grad(const gradient_context& ctx, std::vector<output>* grad_inputs) {
  std::int64_t axis = 0;
  TROUPE_RETURN_IF_ERROR(get_attr(ctx.forward.def, "axis", &axis));
  std::vector<output> grads;
  for (int i = 0; i < static_cast<int>(ctx.outputs.size()); ++i) grads.push_back(grad_or_zeros(ctx, i));
  *grad_inputs = {ops::stack(ctx.s, grads, static_cast<int>(axis))};
  return status();
}

constexpr const char* k_float_types = "T: {float, double}";

void add_output_grad(op_registry& registry, const char* name) {
  add_builtin_op(registry, op_schema(name)
                             .input("y: T")
                             .input("dy: T")
                             .output("z: T")
                             .attr(k_float_types)
                             .shape_fn(same_shape_binary));
}

}  // namespace

void register_grad_ops(op_registry& registry) {
  add_builtin_op(registry, op_schema("BroadcastGradientArgs")
                             .input("s0: T")
                             .input("s1: T")
                             .output("r0: T")
                             .output("r1: T")
                             .attr("T: {int32, int64} = DT_INT32")
                             .shape_fn(broadcast_gradient_args_shape)
                             .no_gradient());
  add_builtin_op(registry, op_schema("BroadcastArgs")
                             .input("s0: T")
                             .input("s1: T")
                             .output("r0: T")
                             .attr("T: {int32, int64} = DT_INT32")
                             .shape_fn(broadcast_args_shape)
                             .no_gradient());
  add_builtin_op(registry, op_schema("ReluGrad")
                             .input("gradients: T")
                             .input("features: T")
                             .output("backprops: T")
                             .attr("T: {float, double, int8, int16, int32, int64, uint8, uint16}")
                             .shape_fn(same_shape_binary));
  add_output_grad(registry, "TanhGrad");
  add_output_grad(registry, "SigmoidGrad");
  add_output_grad(registry, "SqrtGrad");
  add_output_grad(registry, "RsqrtGrad");
  add_builtin_op(registry, op_schema("Sign")
                             .input("x: T")
                             .output("y: T")
                             .attr("T: {float, double, int8, int16, int32, int64}")
                             .shape_fn(unchanged_shape)
                             .no_gradient());
  add_builtin_op(registry, op_schema("Slice")
                             .input("input: T")
                             .input("begin: Index")
                             .input("size: Index")
                             .output("output: T")
                             .attr("T: type")
                             .attr("Index: {int32, int64}")
                             .shape_fn(slice_shape));
  add_builtin_op(registry, op_schema("Unpack")
                             .input("value: T")
                             .output("output: num * T")
                             .attr("num: int >= 0")
                             .attr("T: type")
                             .attr("axis: int = 0")
                             .shape_fn(unpack_shape)
                             .gradient(unpack_grad));
  add_builtin_op(registry, op_schema("InvertPermutation")
                             .input("x: T")
                             .output("y: T")
                             .attr("T: {int32, int64} = DT_INT32")
                             .shape_fn(invert_permutation_shape)
                             .no_gradient());
  add_builtin_op(registry, op_schema("ConcatOffset")
                             .input("concat_dim: int32")
                             .input("shape: N * int32")
                             .output("offset: N * int32")
                             .attr("N: int >= 2")
                             .shape_fn(concat_offset_shape)
                             .no_gradient());
}

}  // namespace troupe::graph
