// Send/Recv between the device actors of two tasks in one process: a graph split across
// /job:a/task:0 and /job:b/task:0 whose step moves `transfers` independent scalar float
// tensors from a to b (a Const on a, an Identity on b, joined by a NoOp on b), so each
// step costs one step start per device plus `transfers` _Send/_Recv pairs through the
// rendezvous of b's device actor.
//
//   build/bench/bench_sendrecv --benchmark_counters_tabular=true
//
// Counters: transfer_time is seconds per transfer (step time / transfers; the target is
// at most 2 us with many transfers per step), transfers/s its inverse. With transfers = 1
// real_time is the latency of a two-device step. Args: transfers, actor_threads (CAF
// scheduler threads; the compute pool has one thread, which runs kernels inline).
#include "actors/cluster.h"
#include "bench/bench_util.h"

namespace troupe::bench {
namespace {

void send_recv(benchmark::State& state) {
  const int transfers = static_cast<int>(state.range(0));
  auto spec = placement::cluster_spec::from_task_counts({{"a", 1}, {"b", 1}});
  if (skip_on_error(state, spec)) return;
  actors::cluster_options co;
  co.spec = *spec;
  co.compute_threads = 1;
  co.actor_threads = static_cast<int>(state.range(1));
  auto c = actors::cluster::create(co);
  if (skip_on_error(state, c)) return;

  auto root = graph::scope::new_root();
  auto a = root.with_device("/job:a/task:0");
  auto b = root.with_device("/job:b/task:0");
  std::vector<graph::operation> received;
  for (int i = 0; i < transfers; ++i) {
    const std::string index = std::to_string(i);
    auto x = ops::scalar(a.with_name(std::string("x").append(index)), static_cast<float>(i));
    auto y = ops::identity(b.with_name(std::string("y").append(index)), x);
    received.push_back(graph::operation{y.node, {y}});
  }
  ops::no_op(b.with_name("join").with_control_dependencies(received));
  auto g = root.to_graph();
  if (skip_on_error(state, g)) return;
  actors::session_options so;
  so.cluster = *c;
  so.allow_soft_placement = false;
  auto s = actors::session::create(std::move(*g), so);
  if (skip_on_error(state, s)) return;
  if (skip_on_error(state, (*s)->run({}, {}, {"join"}))) return;  // prepares the partitions
  for (auto _ : state) {
    auto r = (*s)->run({}, {}, {"join"});
    if (skip_on_error(state, r)) return;
  }
  const double moved = static_cast<double>(state.iterations()) * transfers;
  state.counters["transfers/s"] = benchmark::Counter(moved, benchmark::Counter::kIsRate);
  state.counters["transfer_time"] =
      benchmark::Counter(moved, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(send_recv)
    ->ArgNames({"transfers", "actor_threads"})
    ->ArgsProduct({{1, 100, 1000}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace troupe::bench

BENCHMARK_MAIN();
