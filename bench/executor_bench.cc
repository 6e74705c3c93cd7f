// Executor overhead: trivial ops per second through a prepared step, on one compute
// thread, for a chain (each NoOp waits for the previous) and a wide fan (one root, many
// independent NoOps, one join). items_per_second is null ops per second. The
// session_* variants include the whole actor path (client -> master -> device -> pool).
#include <benchmark/benchmark.h>

#include "actors/executor.h"
#include "actors/session.h"
#include "graph/ops.h"

using namespace troupe;

namespace {

constexpr int k_nodes = 10000;

std::shared_ptr<const graph::graph> null_graph(bool chain) {
  auto root = graph::scope::new_root();
  auto first = ops::no_op(root.with_name("first"));
  std::vector<graph::operation> fan;
  graph::operation previous = first;
  for (int i = 0; i < k_nodes; ++i) {
    auto op = ops::no_op(root.with_control_dependencies({chain ? previous : first}));
    previous = op;
    if (!chain) fan.push_back(op);
  }
  ops::no_op(root.with_name("last").with_control_dependencies(chain ? std::vector<graph::operation>{previous} : fan));
  return std::make_shared<const graph::graph>(std::move(*root.to_graph()));
}

void run_executor(benchmark::State& state, bool chain) {
  auto g = null_graph(chain);
  actors::executable_spec spec;
  spec.graph = g;
  for (int i = 0; i < g->num_nodes(); ++i) spec.nodes.push_back(i);
  auto exec = actors::executable::create(spec);
  compute_pool pool(1);
  std::int64_t step = 0;
  for (auto _ : state) {
    auto r = (*exec)->run_and_wait(++step, {}, pool);
    if (!r.ok()) state.SkipWithError(r.error().to_string().c_str());
  }
  state.SetItemsProcessed(state.iterations() * g->num_nodes());
}

void run_session(benchmark::State& state, bool chain) {
  auto g = null_graph(chain);
  actors::session_options options;
  options.compute_threads = 1;
  auto s = actors::session::create(g, options);
  for (auto _ : state) {
    auto r = (*s)->run({}, {}, {"last"});
    if (!r.ok()) state.SkipWithError(r.error().to_string().c_str());
  }
  state.SetItemsProcessed(state.iterations() * g->num_nodes());
}

void null_step(benchmark::State& state) {
  auto root = graph::scope::new_root();
  ops::no_op(root.with_name("nothing"));
  actors::session_options options;
  options.compute_threads = 1;
  auto s = actors::session::create(*root.to_graph(), options);
  for (auto _ : state) {
    auto r = (*s)->run({}, {}, {"nothing"});
    if (!r.ok()) state.SkipWithError(r.error().to_string().c_str());
  }
}

}  // namespace

BENCHMARK_CAPTURE(run_executor, chain, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run_executor, fan, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run_session, chain, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run_session, fan, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(null_step)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_MAIN();
