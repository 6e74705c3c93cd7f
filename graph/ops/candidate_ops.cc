// Op schemas: candidate sampling for sampled losses (nn::sampled_softmax_loss), spelled as
// TensorFlow's raw ops.
//
//   LogUniformCandidateSampler   num_sampled classes from [0, range_max) drawn from
//                                P(k) = (log(k + 2) - log(k + 1)) / log(range_max + 1),
//                                with the expected count of each true and sampled class
//   ComputeAccidentalHits        where the sampled candidates equal a row's true classes
//
// The sampler is stateful (it draws new candidates on every run); neither op has a
// gradient. Kernels: kernels/cpu/candidate_kernels.cc.
#include <cstdio>
#include <cstdlib>

#include "graph/op_registry.h"

namespace troupe::graph {

namespace {

// true_classes is a [batch, num_true] matrix (the number of columns, when known, must be
// num_true).
status check_true_classes(shape_context& ctx, std::int64_t num_true) {
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(0, 2));
  const partial_shape& classes = ctx.input(0);
  if (classes.known_rank() && classes.dim(1) >= 0 && classes.dim(1) != num_true) {
    return ctx.error("true_classes ", classes.to_string(), " must have num_true = ", num_true,
                     " columns");
  }
  return status();
}

status log_uniform_sampler_shape(shape_context& ctx) {
  std::int64_t num_true = 0, num_sampled = 0, range_max = 0;
  bool unique = false;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("num_true", &num_true));
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("num_sampled", &num_sampled));
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("range_max", &range_max));
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("unique", &unique));
  TROUPE_RETURN_IF_ERROR(check_true_classes(ctx, num_true));
  if (unique && num_sampled > range_max) {
    return ctx.error("cannot draw num_sampled = ", num_sampled, " unique candidates from range_max = ",
                     range_max, " classes (unique needs num_sampled <= range_max)");
  }
  const partial_shape& classes = ctx.input(0);
  std::int64_t batch = classes.known_rank() ? classes.dim(0) : -1;
  ctx.set_output(0, partial_shape{num_sampled});
  ctx.set_output(1, partial_shape{batch, num_true});
  ctx.set_output(2, partial_shape{num_sampled});
  return status();
}

status accidental_hits_shape(shape_context& ctx) {
  std::int64_t num_true = 0;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("num_true", &num_true));
  TROUPE_RETURN_IF_ERROR(check_true_classes(ctx, num_true));
  TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 1));
  // One entry per hit: how many is known only when the kernel runs.
  for (int i = 0; i < 3; ++i) ctx.set_output(i, partial_shape{-1});
  return status();
}

}  // namespace

void register_candidate_ops(op_registry& registry) {
  // unique: sample without replacement (by rejection); the expected counts then become
  // 1 - (1 - p)^num_tries, num_tries being how many draws it took.
  add_builtin_op(registry, op_schema("LogUniformCandidateSampler")
                             .input("true_classes: int64")
                             .output("sampled_candidates: int64")
                             .output("true_expected_count: float")
                             .output("sampled_expected_count: float")
                             .attr("num_true: int >= 1")
                             .attr("num_sampled: int >= 1")
                             .attr("unique: bool")
                             .attr("range_max: int >= 1")
                             .attr("seed: int = 0")
                             .attr("seed2: int = 0")
                             .stateful()
                             .shape_fn(log_uniform_sampler_shape)
                             .no_gradient());
  // indices: the row of true_classes; ids: the position in sampled_candidates; weights:
  // -FLT_MAX, to be added to that sampled logit. seed and seed2 are unused (TensorFlow
  // declares them too).
  add_builtin_op(registry, op_schema("ComputeAccidentalHits")
                             .input("true_classes: int64")
                             .input("sampled_candidates: int64")
                             .output("indices: int32")
                             .output("ids: int64")
                             .output("weights: float")
                             .attr("num_true: int")
                             .attr("seed: int = 0")
                             .attr("seed2: int = 0")
                             .shape_fn(accidental_hits_shape)
                             .no_gradient());
}

}  // namespace troupe::graph
