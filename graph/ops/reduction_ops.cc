// Op schemas: reductions over axes given as a tensor, spelled as TensorFlow's raw ops.
//
//   Sum, Mean, Max, Min, Prod (input, reduction_indices; keep_dims)
//   ArgMax, ArgMin            (input, dimension; output_type)
//
// Axes may be negative (counted from the end); an empty axis list leaves the input as it
// is; a repeated axis is an error. Kernels: kernels/cpu/reduction_kernels.cc.
#include <cstdio>
#include <cstdlib>

#include "graph/op_registry.h"

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

constexpr const char* k_reduction_types = "T: {float, double, int8, int16, int32, int64, uint8, uint16}";

}  // namespace

void register_reduction_ops(op_registry& registry) {
  for (const char* name : {"Sum", "Mean", "Max", "Min", "Prod"}) {
    add_builtin_op(registry, op_schema(name)
                               .input("input: T")
                               .input("reduction_indices: Tidx")
                               .output("output: T")
                               .attr("keep_dims: bool = false")
                               .attr(k_reduction_types)
                               .attr("Tidx: {int32, int64} = DT_INT32")
                               .shape_fn(reduction_shape));
  }
  for (const char* name : {"ArgMax", "ArgMin"}) {
    add_builtin_op(registry, op_schema(name)
                               .input("input: T")
                               .input("dimension: Tidx")
                               .output("output: output_type")
                               .attr(k_reduction_types)
                               .attr("Tidx: {int32, int64} = DT_INT32")
                               .attr("output_type: {int32, int64} = DT_INT64")
                               .shape_fn(arg_reduction_shape));
  }
}

}  // namespace troupe::graph
