// Queue throughput through a session: a FIFOQueueV2 (an actor) of float32 elements; each
// step enqueues `elements` elements and then dequeues them (the dequeues wait for a NoOp
// joining the enqueues), so a step is 2 x `elements` requests to the queue actor.
//
//   one    `elements` QueueEnqueueV2 and as many QueueDequeueV2 nodes, scalar elements;
//   many   one QueueEnqueueManyV2 of a [elements, 784] batch and one QueueDequeueManyV2 of
//          it (an input pipeline's MNIST-sized batch; the dequeue returns the enqueued
//          batch without a copy when it takes exactly that batch).
//
//   build/bench/bench_queue --benchmark_counters_tabular=true
//
// Counters: elements/s (enqueued and dequeued). When the queue ops have no kernel in this
// build the benchmark is skipped with the registry's message.
#include "actors/cluster.h"
#include "bench/bench_util.h"
#include "graph/attr.h"

namespace troupe::bench {
namespace {

void enqueue_dequeue(benchmark::State& state, bool many) {
  const std::int64_t elements = state.range(0);
  const partial_shape element = many ? partial_shape{784} : partial_shape::scalar();
  const tf::AttrValue types = graph::attr_value(std::vector<dtype>{dtype::float32});
  auto root = graph::scope::new_root();
  auto q = root.with_name("q").add("FIFOQueueV2", {},
                                   {{"component_types", types},
                                    {"shapes", graph::attr_value(std::vector<partial_shape>{element})},
                                    {"capacity", graph::attr_value(std::int64_t{4 * elements})}});
  std::vector<graph::operation> enqueued;
  if (many) {
    auto batch = ops::constant(root, tensor::zeros(dtype::float32, {elements, 784}));
    enqueued.push_back(root.add("QueueEnqueueManyV2", {q.out(0), std::vector<graph::output>{batch}}));
  } else {
    for (std::int64_t i = 0; i < elements; ++i) {
      auto x = ops::scalar(root, static_cast<float>(i));
      enqueued.push_back(root.add("QueueEnqueueV2", {q.out(0), std::vector<graph::output>{x}}));
    }
  }
  auto after = root.with_control_dependencies({ops::no_op(root.with_control_dependencies(enqueued))});
  std::vector<graph::operation> dequeued;
  if (many) {
    auto n = ops::scalar(root, static_cast<std::int32_t>(elements));
    dequeued.push_back(after.add("QueueDequeueManyV2", {q.out(0), n}, {{"component_types", types}}));
  } else {
    for (std::int64_t i = 0; i < elements; ++i) {
      dequeued.push_back(after.add("QueueDequeueV2", {q.out(0)}, {{"component_types", types}}));
    }
  }
  ops::no_op(root.with_name("step").with_control_dependencies(dequeued));
  auto s = local_session(root, 1);
  if (skip_on_error(state, s)) return;
  auto first = (*s)->run({}, {}, {"step"});
  if (!first.ok()) {
    std::string why = "queue ops do not run yet: " + first.error().to_string();
    state.SkipWithError(why.c_str());
    return;
  }
  for (auto _ : state) {
    auto r = (*s)->run({}, {}, {"step"});
    if (skip_on_error(state, r)) return;
  }
  state.counters["elements/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * elements), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK_CAPTURE(enqueue_dequeue, one, false)
    ->ArgName("elements")->Arg(1)->Arg(100)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(enqueue_dequeue, many, true)
    ->ArgName("elements")->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace troupe::bench

BENCHMARK_MAIN();
