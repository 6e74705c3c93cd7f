// Op schemas: random tensors (RandomUniform, RandomStandardNormal, TruncatedNormal) with
// TensorFlow's raw-op names and attributes. They are stateful: each run draws new
// values, so they are never constant-folded or deduplicated. Seeds: when seed and seed2
// are both 0 the kernel picks a fresh seed; otherwise a generator made with the same pair
// replays the same sequence of tensors.
//
// troupe's own: RandomGeneratorSaveState and RandomGeneratorRestoreState read and set
// where a random op's generator is (a resource of its device named after the op; see
// kernels/cpu/random_generator.h), as checkpoints do.
#include <cstdio>
#include <cstdlib>

#include "graph/op_registry.h"

namespace troupe::graph {

namespace {

// Output 0 has the shape given by the value of input 0, a vector of dimensions.
status shape_from_shape_vector(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 1));
  if (const tensor* value = ctx.input_value(0)) {
    std::vector<std::int64_t> dims;
    visit_dtype<index_types>(value->type(), [&]<class T>() {
      for (T d : value->flat<T>()) dims.push_back(static_cast<std::int64_t>(d));
    });
    for (std::size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] < 0) {
        return ctx.error("shape ", value->debug_string(), " has a negative dimension at index ", i);
      }
    }
    ctx.set_output(0, partial_shape(std::move(dims)));
    return status();
  }
  const partial_shape& s = ctx.input(0);
  if (s.known_rank() && s.dim(0) >= 0) {
    ctx.set_output(0, partial_shape::unknown_of_rank(static_cast<int>(s.dim(0))));
  } else {
    ctx.set_output(0, partial_shape::unknown());
  }
  return status();
}

op_schema random_op(std::string name) {
  op_schema schema(std::move(name));
  schema.input("shape: T")
      .output("output: dtype")
      .attr("seed: int = 0")
      .attr("seed2: int = 0")
      .attr("dtype: {float, double}")
      .attr("T: {int32, int64}")
      .stateful()
      .shape_fn(shape_from_shape_vector)
      .no_gradient();
  return schema;
}

}  // namespace

void register_random_ops(op_registry& registry) {
  // Uniform in [0, 1).
  add_builtin_op(registry, random_op("RandomUniform"));
  // Integers uniform in [minval, maxval) (minval and maxval scalars of Tout).
  add_builtin_op(registry, op_schema("RandomUniformInt")
                               .input("shape: T")
                               .input("minval: Tout")
                               .input("maxval: Tout")
                               .output("output: Tout")
                               .attr("seed: int = 0")
                               .attr("seed2: int = 0")
                               .attr("Tout: {int32, int64}")
                               .attr("T: {int32, int64}")
                               .stateful()
                               .shape_fn(shape_from_shape_vector)
                               .no_gradient());
  // Mean 0, standard deviation 1.
  add_builtin_op(registry, random_op("RandomStandardNormal"));
  // Mean 0, standard deviation 1, values more than 2 standard deviations from the mean
  // dropped and drawn again.
  add_builtin_op(registry, random_op("TruncatedNormal"));
  // state: int64 [6], the Philox key (2 words) and counter (4) of the generator of the
  // random op named shared_name (in container) on this device. seed and seed2 are that
  // op's: whichever of them runs first makes the generator.
  add_builtin_op(registry, op_schema("RandomGeneratorSaveState")
                               .output("state: int64")
                               .attr("container: string = ''")
                               .attr("shared_name: string")
                               .attr("seed: int = 0")
                               .attr("seed2: int = 0")
                               .stateful()
                               .shape_fn([](shape_context& ctx) -> status {
                                 ctx.set_output(0, partial_shape({6}));
                                 return status();
                               })
                               .no_gradient());
  add_builtin_op(registry, op_schema("RandomGeneratorRestoreState")
                               .input("state: int64")
                               .attr("container: string = ''")
                               .attr("shared_name: string")
                               .attr("seed: int = 0")
                               .attr("seed2: int = 0")
                               .stateful()
                               .shape_fn([](shape_context& ctx) -> status { return ctx.require_rank(0, 1); })
                               .no_gradient());
}

}  // namespace troupe::graph
