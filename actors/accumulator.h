// Conditional accumulators as actors: TensorFlow 1.x's ConditionalAccumulator and
// SparseConditionalAccumulator, which synchronous replication (graph/train.h,
// train::sync_replicas) puts beside every variable to gather one step's gradients.
//
// An accumulator has a dtype, a shape (possibly partly unknown: the first gradient fixes
// it), a reduction (MEAN or SUM) and a global step. Contract (TensorFlow's, with the
// differences marked *):
//  1. apply(local_step, gradient): a gradient with local_step < the global step is stale
//     and dropped (the apply still succeeds); one of the global step is kept. *One with a
//     later local step (a step a recovery rolled back) is dropped too. A gradient of the
//     wrong dtype or shape fails with invalid_argument naming the accumulator and both.
//  2. take(num_required): waits (parked in the actor, no thread blocked) until at least
//     num_required gradients are kept, then answers with the average (MEAN) or sum (SUM)
//     of *the first num_required to arrive (TensorFlow: of all kept; the others here are
//     dropped, the backups of synchronous replication), empties the accumulator and
//     advances its global step by one. Takes are served in arrival order; num_required
//     < 1 fails with invalid_argument.
//     Dense: one tensor. Sparse: (indices int64 [k], values [k, ...], shape int64) with
//     each index once, ascending; MEAN divides each row by the number of gradients that
//     had that index (as TensorFlow).
//  3. *Sums are taken in a fixed order, by source (the task that ran the step that
//     applied the gradient: job, then task index) and, for one source, by arrival, so
//     the same gradients give the same bits whatever order they arrived in.
//  4. set_global_step(s): the global step becomes s (TensorFlow only warns when s is
//     lower). *The gradients kept are discarded: a new step starts a new aggregate (after
//     a recovery the ones kept may have been computed on values since rolled back), and
//     the takes waiting fail with ABORTED: an aggregate begun before may not mix with
//     gradients of the new step.
//  5. num_accumulated: how many gradients are kept now.
//  *With one_per_source (the op attribute `_one_per_worker`, which train::sync_replicas
//     sets), a second gradient of one source for the step is dropped: a worker whose step
//     failed after it handed its gradient in, and ran the step again, is counted once.
//  6. cancel(request_id) fails a parked take with `cancelled`; when the actor ends, parked
//     takes fail with `unavailable` (actors/reply.h).
// Every kept or dropped gradient and every take is reported to the device's
// sync_observer (actors/tracing.h), when the cluster has one.
//
// Large sums run on the device's compute pool, never on the actor's thread.
//
// Thread safety: accumulator_resource's methods may be called from any thread.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/actor_resource.h"
#include "actors/reply.h"
#include "actors/tracing.h"
#include "core/shape.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/kernel_registry.h"

namespace troupe::actors {

enum class accumulator_reduction { mean, sum };

struct accumulator_options {
  std::string name;  // used in every message: "accumulator 'name'"
  dtype type = dtype::float32;
  partial_shape shape = partial_shape::unknown();
  accumulator_reduction reduction = accumulator_reduction::mean;
  bool sparse = false;
  bool one_per_source = false;   // keep one gradient per (non-empty) source and step
  compute_pool* pool = nullptr;  // where sums run; null: on the actor
  sync_observer* observer = nullptr;
  caf::actor owner;              // when valid, the accumulator ends with it
};

// Checks the options: a dtype the sums support (float32, float64, int32, int64).
status validate_accumulator_options(const accumulator_options& options);

// ---- Messages (in-process only).
struct accumulator_apply {
  std::int64_t local_step = 0;
  std::string source;  // the task that computed it; may be empty
  tensor gradient;     // dense: the gradient; sparse: the values [k, ...]
  tensor indices;      // sparse only: int64 [k]
  tensor dense_shape;  // sparse only, optional: int64 [rank]
  status_reply done;
};
struct accumulator_take {
  std::uint64_t request_id = 0;
  std::int32_t num_required = 1;
  reply<std::vector<tensor>> done;
};
struct accumulator_set_step {
  std::int64_t step = 0;
  status_reply done;
};
struct accumulator_count {
  reply<std::vector<tensor>> done;  // one int32 scalar
};
struct accumulator_cancel {
  std::uint64_t request_id = 0;
};

caf::actor spawn_accumulator(caf::actor_system& system, accumulator_options options);

// An accumulator as a resource (kind "accumulator"): what an accumulator op's handle
// points at.
class accumulator_resource final : public actor_resource {
 public:
  static constexpr const char* kind_name = "accumulator";
  accumulator_resource(caf::actor actor, accumulator_options options)
      : actor_resource(kind_name, options.name, std::move(actor)), options_(std::move(options)) {}
  const accumulator_options& options() const { return options_; }
  // Ok when `other` (another node naming the same shared accumulator) describes this one.
  status matches(const accumulator_options& other) const;

 private:
  accumulator_options options_;
};

result<std::shared_ptr<accumulator_resource>> make_accumulator(caf::actor_system& system, accumulator_options options);

// Kernels (CPU) for ConditionalAccumulator, ResourceConditionalAccumulator,
// SparseConditionalAccumulator, (Resource)AccumulatorApplyGradient,
// (Resource)AccumulatorTakeGradient, (Resource)AccumulatorNumAccumulated,
// (Resource)AccumulatorSetGlobalStep, SparseAccumulatorApplyGradient and
// SparseAccumulatorTakeGradient. Call once, before lookups begin.
void register_accumulator_kernels(kernels::kernel_registry& registry);

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::accumulator_apply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::accumulator_take)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::accumulator_set_step)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::accumulator_count)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::accumulator_cancel)
