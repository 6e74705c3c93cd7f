// Variable read-update-read cycles through a session: ReadVariableOp, then
// AssignAddVariableOp(v, delta), then ReadVariableOp again (ordered by control
// dependencies), each request served by the variable's shard actor.
//
//   per_step   one cycle per step (fetching the second read): what a client sees, step
//              start and fetch included;
//   chained    `cycles` cycles in sequence inside one step: the variable actor's round
//              trip without the step's overhead.
// The variable lives on the client's device (local cluster), or with `remote` on
// /job:ps/task:0 while the step runs on /job:worker/task:0: every read is consumed on the
// worker, so each cycle then adds two tensor transfers between tasks.
//
//   build/bench/bench_variable --benchmark_counters_tabular=true
//
// Counters: cycles/s. Args: elements (of the float32 variable), cycles per step, remote.
#include "actors/cluster.h"
#include "bench/bench_util.h"
#include "graph/attr.h"
#include "graph/variables.h"

namespace troupe::bench {
namespace {

graph::output read(const graph::scope& s, const graph::variable& v) {
  return s.add("ReadVariableOp", {v.handle}, {{"dtype", graph::attr_value(v.type)}}).out();
}

void read_update_read(benchmark::State& state) {
  const std::int64_t elements = state.range(0);
  const int cycles = static_cast<int>(state.range(1));
  const bool remote = state.range(2) != 0;
  auto spec = remote ? placement::cluster_spec::from_task_counts({{"ps", 1}, {"worker", 1}})
                     : result<placement::cluster_spec>(placement::cluster_spec::local());
  if (skip_on_error(state, spec)) return;
  actors::cluster_options co;
  co.spec = *spec;
  co.compute_threads = 1;
  co.actor_threads = 1;
  auto c = actors::cluster::create(co);
  if (skip_on_error(state, c)) return;

  auto root = graph::scope::new_root();
  auto ps = remote ? root.with_device("/job:ps/task:0") : root;
  auto worker = remote ? root.with_device("/job:worker/task:0") : root;
  auto v = graph::make_variable(ps, "v", {elements}, dtype::float32,
                                ops::constant(ps, tensor::zeros(dtype::float32, {elements})));
  auto delta = ops::constant(worker.with_name("delta"), tensor::zeros(dtype::float32, {elements}));
  // Each read is consumed on the worker (an Identity there), so with `remote` every read
  // crosses tasks; the reads and the update themselves run where the variable lives.
  auto consumed = [&](const graph::output& x) {
    auto y = ops::identity(worker, x);
    return graph::operation{y.node, {y}};
  };
  graph::output last;
  std::vector<graph::operation> after;
  for (int i = 0; i < cycles; ++i) {
    auto s = root.sub("cycle" + std::to_string(i)).with_control_dependencies(after);
    auto first = consumed(read(s, v));
    auto add = s.with_control_dependencies({first})
                   .add("AssignAddVariableOp", {v.handle, delta}, {{"dtype", graph::attr_value(v.type)}});
    auto second = consumed(read(s.with_control_dependencies({add}), v));
    last = second.outputs.front();
    after = {second};
  }
  // Fetch a scalar so the figure is the cycle, not the copy of a large fetch.
  auto fetched = ops::sum(worker.with_name("fetched"), last,
                          ops::constant(worker, tensor::from_vector<std::int32_t>({0})));
  auto g = root.to_graph();
  if (skip_on_error(state, g)) return;
  actors::session_options so;
  so.cluster = *c;
  if (remote) so.default_device = "/job:worker/task:0";
  auto sess = actors::session::create(std::move(*g), so);
  if (skip_on_error(state, sess)) return;
  if (skip_on_error(state, (*sess)->run({}, {}, {v.initializer.node}))) return;
  if (skip_on_error(state, (*sess)->run({}, {fetched.name()}))) return;
  for (auto _ : state) {
    auto r = (*sess)->run({}, {fetched.name()});
    if (skip_on_error(state, r)) return;
  }
  state.counters["cycles/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * cycles, benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(read_update_read)
    ->ArgNames({"elements", "cycles", "remote"})
    ->ArgsProduct({{1, 262144}, {1, 100}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace troupe::bench

BENCHMARK_MAIN();
