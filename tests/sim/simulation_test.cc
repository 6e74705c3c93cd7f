// The simulation (sim/simulation.h): kernels take the compute model's virtual time on a
// device's virtual cores, transfers the network model's, and a SIMULATED scenario replays
// byte for byte from its seed while another seed gives another interleaving.
#include "sim/simulation.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "actors/cluster.h"
#include "actors/session.h"
#include "core/file.h"
#include "core/phantom.h"
#include "graph/ops.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"
#include "scenarios/summary.h"

using namespace troupe;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".json")).string();
}

// One step of a graph in simulation `s` (one task, one device), fed `feeds`: its virtual
// seconds and what it fetched.
struct timed_step {
  double seconds = 0;
  result<std::vector<tensor>> out = internal_error("not run");
};
timed_step one_step(sim::simulation& s, const graph::scope& root, const std::vector<std::string>& fetch,
                    const actors::feed_list& feeds = {}) {
  actors::cluster_options co;
  co.simulation = &s;
  auto c = actors::cluster::create(co);
  REQUIRE(c.ok());
  actors::session_options so;
  so.cluster = *c;
  auto session = actors::session::create(*root.to_graph(), so);
  REQUIRE(session.ok());
  timed_step r;
  const auto t0 = env::now();
  r.out = (*session)->run(feeds, fetch);
  r.seconds = std::chrono::duration<double>(env::now() - t0).count();
  session->reset();
  c->reset();
  return r;
}

// Virtual seconds of one step fetching two independent 256^3 MatMuls on one device with
// `cores` virtual cores, at 1 GFLOP/s (each: 2 * 256^3 flops = 33.6 ms of work); with
// `one`, only the first.
// With `table`, the MatMuls' costs come from it.
double two_matmuls_seconds(int cores, int intra_op_threads = 1, bool one = false,
                           std::optional<sim::Calibration> table = std::nullopt) {
  sim::simulation_options o;
  o.compute.gflops = 1;
  o.compute.cores_per_device = cores;
  o.compute.intra_op_threads = intra_op_threads;
  o.compute.table = std::move(table);
  const bool from_table = o.compute.table.has_value();
  sim::simulation s(o);
  auto root = graph::scope::new_root();
  auto a = ops::fill(root, ops::constant(root, tensor::from_vector<std::int32_t>({256, 256})), ops::scalar(root, 1.0f));
  ops::matmul(root.with_name("x"), a, a);
  ops::matmul(root.with_name("y"), a, a);
  const timed_step r = one_step(s, root, one ? std::vector<std::string>{"x"} : std::vector<std::string>{"x", "y"});
  REQUIRE(r.out.ok());
  CHECK(r.out->at(0).flat<float>()[0] == 256.0f);  // the kernels ran: real numbers
  if (!one) CHECK(r.out->at(1).flat<float>()[7] == 256.0f);
  if (from_table) CHECK(s.kernels_from_table() == (one ? 1 : 2));
  return r.seconds;
}

// A table in which the 256^3 MatMul costs `cpu_ms` of CPU and took `alone_ms` alone.
sim::Calibration matmul_table(double cpu_ms, double alone_ms) {
  sim::Calibration t;
  sim::KernelCost* c = t.add_kernels();
  c->set_op("MatMul");
  c->set_device_type("CPU");
  c->add_inputs("float[256,256]");
  c->add_inputs("float[256,256]");
  c->add_attrs("transpose_a=false");
  c->add_attrs("transpose_b=false");
  c->set_count(10);
  c->set_median_ns(alone_ms * 1e6);
  c->set_median_cpu_ns(cpu_ms * 1e6);
  c->set_mean_cpu_ns(cpu_ms * 1e6);
  c->set_alone_ns(alone_ms * 1e6);
  return t;
}

const char* k_scenario = R"(
name: "sim"
cluster {
  mode: SIMULATED
  job { name: "ps" tasks: 1 }
  job { name: "worker" tasks: 2 }
}
model { name: "mlp" hidden_units: [32] }
dataset { name: "fashion-mnist" shuffle: true reader_threads: 1 }
training {
  optimizer { name: "sgd" learning_rate: 0.05 }
  steps: 60
  batch_size: 16
  seed: 5
  replication: ASYNC
  eval_every: 0
}
report { progress: OFF }
)";

struct outcome {
  std::string trace, summary;  // the summary without its wall time
  double virtual_seconds = 0, training_seconds = 0, steady_seconds = 0;
  std::int64_t steady_steps = 0;
};

outcome run(const std::string& simulation) {
  auto sc = scenarios::parse_scenario(std::string(k_scenario) + simulation, "sim.pbtxt");
  REQUIRE(sc.ok());
  std::ostringstream out;
  scenarios::run_options o;
  o.out = &out;
  o.trace_file = temp_path("troupe-sim-trace");
  auto summary = scenarios::run_scenario(*sc, o);
  INFO(out.str());
  REQUIRE(summary.ok());
  CHECK(summary->steps >= 60);
  outcome r;
  auto trace = read_file(o.trace_file);
  REQUIRE(trace.ok());
  r.trace = *trace;
  std::filesystem::remove(o.trace_file);
  auto json = scenarios::summary_json(scenarios::make_run_summary(*sc, &*summary, status(), /*wall_seconds=*/0));
  REQUIRE(json.ok());
  r.summary = *json;
  r.virtual_seconds = summary->virtual_seconds;
  r.training_seconds = summary->seconds;
  r.steady_seconds = summary->steady_seconds;
  r.steady_steps = summary->steady_steps;
  return r;
}

}  // namespace

TEST_CASE("simulation: kernels share the device's virtual cores", "[sim]") {
  // Two kernels of 33.6 ms of work: sharing one core, both end at 67 ms; side by side on
  // two cores, at 33.6 ms.
  CHECK(two_matmuls_seconds(1) == Approx(2 * 0.0336).epsilon(0.05));
  CHECK(two_matmuls_seconds(2) == Approx(0.0336).epsilon(0.05));
  // One kernel that may use two threads takes both cores: half the time; two such
  // kernels share them.
  CHECK(two_matmuls_seconds(2, 2, /*one=*/true) == Approx(0.0168).epsilon(0.05));
  CHECK(two_matmuls_seconds(2, 2) == Approx(0.0336).epsilon(0.05));
  CHECK(two_matmuls_seconds(4, 2) == Approx(0.0168).epsilon(0.05));
}

TEST_CASE("simulation: a calibrated kernel keeps busy the cores it kept busy alone", "[sim]") {
  // 20 ms of CPU that took 10 ms alone: two cores' worth. Alone on two cores it takes
  // 10 ms; two of them share the cores (40 ms of work on two cores: 20 ms).
  CHECK(two_matmuls_seconds(2, 2, /*one=*/true, matmul_table(20, 10)) == Approx(0.010).epsilon(0.05));
  CHECK(two_matmuls_seconds(2, 2, /*one=*/false, matmul_table(20, 10)) == Approx(0.020).epsilon(0.05));
  // One that kept one core busy alone takes its CPU time, however many cores are free
  // (the 20 us blocks of parallel_for would say two).
  CHECK(two_matmuls_seconds(2, 2, /*one=*/true, matmul_table(20, 20)) == Approx(0.020).epsilon(0.05));
  // One that waited half of its time alone (page faults, a lock) takes that time alone,
  // and leaves the other core to another kernel.
  CHECK(two_matmuls_seconds(2, 2, /*one=*/true, matmul_table(10, 20)) == Approx(0.020).epsilon(0.05));
  CHECK(two_matmuls_seconds(1, 2, /*one=*/false, matmul_table(10, 20)) == Approx(0.020).epsilon(0.05));
  // Never more cores than intra_op_threads.
  CHECK(two_matmuls_seconds(4, 2, /*one=*/true, matmul_table(40, 10)) == Approx(0.020).epsilon(0.05));
}

TEST_CASE("simulation: the table's runtime cost per kernel is added to every kernel", "[sim]") {
  // The MatMul's 20 ms alone; with 5 ms of the runtime's on it and on the Fill before it,
  // about 10 ms more. A table measured untraced whose runtime came out 0 adds nothing.
  sim::Calibration untraced = matmul_table(20, 20);
  untraced.set_cpu_us_per_step(1000);
  const double none = two_matmuls_seconds(2, 2, /*one=*/true, untraced);
  CHECK(none == Approx(0.020).epsilon(0.05));
  sim::Calibration with_runtime = matmul_table(20, 20);
  with_runtime.set_runtime_ns_per_kernel(5e6);
  CHECK(two_matmuls_seconds(2, 2, /*one=*/true, with_runtime) >= none + 0.0095);
}

TEST_CASE("simulation: the roofline rates", "[sim]") {
  auto root = graph::scope::new_root();
  auto a = ops::placeholder(root.with_name("a"), dtype::float32);
  auto m = ops::matmul(root.with_name("m"), a, a, /*transpose_a=*/true);
  auto s = ops::add(root.with_name("s"), a, a);
  auto g = root.to_graph();
  REQUIRE(g.ok());
  const tensor x(dtype::float32, {8, 4});
  const tensor inputs[] = {x, x};
  const tensor product(dtype::float32, {4, 4});
  // transpose_a: [4,8] x [8,4]: k = 8; 2 * 8 * 16 outputs.
  const sim::kernel_work mm = sim::work_of(*g->find("m"), inputs, {&product, 1});
  CHECK(mm.flops == 2 * 8 * 16);
  CHECK(mm.bytes == (32 + 32 + 16) * 4);
  const sim::kernel_work add = sim::work_of(*g->find("s"), inputs, {&x, 1});
  CHECK(add.flops == 32);
}

TEST_CASE("simulation: a scenario replays byte for byte from its seed; another seed interleaves otherwise", "[sim]") {
  const outcome first = run("simulation { seed: 3 }\n");
  const outcome again = run("simulation { seed: 3 }\n");
  CHECK(first.trace == again.trace);
  CHECK(first.summary == again.summary);
  CHECK(first.virtual_seconds > 0);
  CHECK(first.summary.find("\"mode\": \"SIMULATED\"") != std::string::npos);
  const outcome other = run("simulation { seed: 4 }\n");
  CHECK(other.trace != first.trace);
}

TEST_CASE("simulation: the network's latency is on every step's path", "[sim]") {
  const outcome fast = run("simulation { network { latency_us: 10 } }\n");
  const outcome slow = run("simulation { network { latency_us: 5000 } }\n");
  // Each step of a worker waits for the variables from the PS and sends its gradients
  // back: two latencies at least, the two workers side by side: 60 steps >= 60 x 5 ms.
  CHECK(slow.training_seconds >= 60 * 0.005);
  CHECK(fast.training_seconds < slow.training_seconds / 10);
  // The steady state, from global step 15 (a quarter of 60) to the end: the same rate.
  CHECK(slow.steady_steps >= 40);
  CHECK(slow.steady_steps <= 50);
  CHECK(slow.steady_seconds < slow.training_seconds);
  CHECK(slow.steady_seconds >= 0.9 * 0.005 * static_cast<double>(slow.steady_steps));
}

namespace {

// k_scenario with SYNC replication and `ps` PS tasks.
std::string sync_scenario(int ps = 1) {
  std::string text = k_scenario;
  text.replace(text.find("replication: ASYNC"), 18, "replication: SYNC");
  const std::string one_ps = "job { name: \"ps\" tasks: 1 }";
  text.replace(text.find(one_ps), one_ps.size(), str_cat("job { name: \"ps\" tasks: ", ps, " }"));
  return text;
}

// Runs `base` (k_scenario unless given) with `extra` after it.
result<scenarios::run_summary> run_with(const std::string& extra, std::string* output = nullptr,
                                        const std::string& base = k_scenario) {
  auto sc = scenarios::parse_scenario(base + extra, "sim.pbtxt");
  if (!sc.ok()) return sc.error();
  std::ostringstream out;
  scenarios::run_options o;
  o.out = &out;
  auto summary = scenarios::run_scenario(*sc, o);
  if (output != nullptr) *output = out.str();
  return summary;
}

// Runs k_scenario with each of `extras`; each run must succeed.
std::vector<scenarios::run_summary> runs_with(const std::vector<std::string>& extras) {
  std::vector<scenarios::run_summary> out;
  for (const std::string& extra : extras) {
    auto r = run_with(extra);
    INFO(extra);
    REQUIRE(r.ok());
    out.push_back(std::move(*r));
  }
  return out;
}

// What a wait for a busy core (network field `field` at 2000 us, its messages counted by
// `count` and the busy ones by `busy`) does in any scenario: the same again from the same
// seed; nothing with cores to spare (none busy: the same run to the nanosecond) or without
// machine_cores (no machine to be busy: not counted). Returns the runs on one core
// without and with the wait.
std::pair<scenarios::run_summary, scenarios::run_summary> check_busy_wait(
    const std::string& field, std::int64_t scenarios::run_summary::*count, std::int64_t scenarios::run_summary::*busy) {
  const std::string with = str_cat(" ", field, ": 2000");
  auto r = runs_with({
      "simulation { seed: 2 network { latency_us: 100 } compute { machine_cores: 1 } }\n",
      str_cat("simulation { seed: 2 network { latency_us: 100", with, " } compute { machine_cores: 1 } }\n"),
      str_cat("simulation { seed: 2 network { latency_us: 100", with, " } compute { machine_cores: 1 } }\n"),
      "simulation { seed: 2 network { latency_us: 100 } compute { machine_cores: 64 } }\n",
      str_cat("simulation { seed: 2 network { latency_us: 100", with, " } compute { machine_cores: 64 } }\n"),
      "simulation { seed: 2 network { latency_us: 100 } }\n",
      str_cat("simulation { seed: 2 network { latency_us: 100", with, " } }\n"),
  });
  const scenarios::run_summary &free = r[0], &waits = r[1], &again = r[2], &roomy = r[3], &roomy_waits = r[4],
                               &apart = r[5], &apart_waits = r[6];
  INFO(field);
  CHECK(again.virtual_seconds == waits.virtual_seconds);
  CHECK(again.*busy == waits.*busy);
  CHECK(roomy.*count >= 60 * 8);
  CHECK(roomy.*busy == 0);
  CHECK(roomy_waits.virtual_seconds == roomy.virtual_seconds);
  CHECK(apart.*count == 0);
  CHECK(apart_waits.virtual_seconds == apart.virtual_seconds);
  return {free, waits};
}

}  // namespace

TEST_CASE("simulation: swizzle-clogging holds links' transfers, and the run goes on", "[sim]") {
  std::string out;
  auto plain = run_with("simulation { seed: 3 }\n");
  REQUIRE(plain.ok());
  CHECK(plain->links_clogged == 0);
  auto clogged = run_with("simulation { seed: 3 swizzle { every_ms: 2 clog_ms: 10 links: 2 } }\n", &out);
  INFO(out);
  REQUIRE(clogged.ok());
  CHECK(clogged->steps >= 60);
  CHECK(clogged->links_clogged > 0);
  CHECK(out.find("swizzle: ") != std::string::npos);
  // Held transfers make the training longer in virtual time.
  CHECK(clogged->seconds > plain->seconds);
}

TEST_CASE("simulation: the liveness phase lifts the faults and needs a step within its limit", "[sim]") {
  const std::string faults =
      "checkpoint { dir: \"" + temp_path("troupe-sim-liveness") + "\" every_steps: 20 }\n"
      "faults { fault { at_step: 20 until_step: 50 delay_messages { from: \"/job:worker/task:0\" to: \"/job:ps/task:0\" "
      "delay_ms: 30 } } }\n";
  std::string out;
  auto live = run_with(faults + "simulation { swizzle { every_ms: 2 clog_ms: 10 } liveness { steps: 10 within_ms: 1000 } }\n",
                       &out);
  INFO(out);
  REQUIRE(live.ok());
  CHECK(live->liveness_ms >= 0);
  CHECK(live->liveness_ms <= 1000);
  CHECK(out.find("liveness: the first step after the faults stopped") != std::string::npos);
  std::filesystem::remove_all(temp_path("troupe-sim-liveness"));  // or the next run would continue from it
  // A limit no step can meet fails the run, naming the phase: each step waits for two
  // transfers of 20 ms latency, the next global step comes well after 1 ms.
  auto dead = run_with(faults + "simulation { network { latency_us: 20000 } liveness { steps: 10 within_ms: 1 } }\n", &out);
  INFO(out);
  REQUIRE_FALSE(dead.ok());
  CHECK(dead.error().error_code() == code::deadline_exceeded);
  CHECK_THAT(dead.error().message(), Catch::Contains("liveness: no global step within 1 ms"));
  // No fault may be injected inside the phase.
  auto bad = scenarios::parse_scenario(std::string(k_scenario) + faults + "simulation { liveness { steps: 45 } }\n", "l.pbtxt");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("the liveness phase (from global step 15) has no faults"));
  std::filesystem::remove_all(temp_path("troupe-sim-liveness"));
}

namespace {

// One step of `fetch` on one device (four virtual cores at `gflops`) of a graph where
// x = Fill([n, n], 1) and y = x.x; its virtual seconds and what it fetched.
timed_step matmul_step(bool execute_kernels, std::int32_t n, std::vector<std::string> fetch, double gflops = 1) {
  sim::simulation_options o;
  o.compute.gflops = gflops;
  o.compute.cores_per_device = 4;
  o.execute_kernels = execute_kernels;
  sim::simulation s(o);
  auto root = graph::scope::new_root();
  auto x = ops::fill(root.with_name("x"), ops::constant(root, tensor::from_vector<std::int32_t>({n, n})), ops::scalar(root, 1.0f));
  auto y = ops::matmul(root.with_name("y"), x, x);
  ops::shape(root.with_name("shape"), y);
  auto total = ops::sum(root.with_name("total"), y, ops::constant(root, tensor::from_vector<std::int32_t>({0, 1})));
  // A shape only y's values say: a shape-only run cannot know it.
  auto rows = ops::cast(root, total, dtype::int32);
  ops::reshape(root.with_name("by_value"), y, ops::stack(root, {rows, ops::scalar<std::int32_t>(root, -1)}));
  return one_step(s, root, fetch);
}

}  // namespace

TEST_CASE("simulation: shape-only moves phantoms of the right shapes in the same virtual time", "[sim]") {
  const timed_step real = matmul_step(true, 256, {"y", "shape", "total"});
  const timed_step shapes = matmul_step(false, 256, {"y", "shape", "total"});
  REQUIRE(real.out.ok());
  REQUIRE(shapes.out.ok());
  CHECK(real.out->at(0).flat<float>()[0] == 256.0f);
  CHECK_FALSE(is_phantom(real.out->at(0)));
  // The MatMul's result is a phantom of its shape; Shape reads only shapes and is real.
  const tensor& y = shapes.out->at(0);
  CHECK(is_phantom(y));
  CHECK_FALSE(y.on_host());
  CHECK(y.shape() == tensor_shape({256, 256}));
  CHECK(shapes.out->at(1).equals(tensor::from_vector<std::int32_t>({256, 256})));
  // A small phantom (a loss, say) reads as zeros.
  CHECK(is_phantom(shapes.out->at(2)));
  CHECK(shapes.out->at(2).scalar_value<float>() == 0.0f);
  // The compute model sees the same shapes: the same virtual time to the nanosecond.
  CHECK(real.seconds > 0.03);  // 2 * 256^3 flops at 1 GFLOP/s
  CHECK(shapes.seconds == real.seconds);
}

TEST_CASE("simulation: shape-only runs a model larger than this machine's memory", "[sim]") {
  // x and y are 64 GiB each: nothing of them is allocated.
  const timed_step big = matmul_step(false, 131072, {"y", "shape"}, /*gflops=*/1e6);
  REQUIRE(big.out.ok());
  CHECK(is_phantom(big.out->at(0)));
  CHECK(big.out->at(0).byte_size() == std::size_t{131072} * 131072 * 4);
  CHECK(big.out->at(1).equals(tensor::from_vector<std::int32_t>({131072, 131072})));
  CHECK(big.seconds > 4.5);  // 2 * 2^51 flops at 10^6 GFLOP/s
}

TEST_CASE("simulation: a kernel of absurd work takes the longest duration, and the step's deadline ends it", "[sim]") {
  // 2 * 2^51 flops at 10^-300 GFLOP/s: 10^317 ns, more than a double's nanoseconds on the
  // clock could hold. It takes k_longest_ns (3 years) of the cores, so the step's hour
  // of deadline passes first, and the cluster ends (its actors wait for the kernel) in a
  // few thousand turns of the world, not one turn per virtual millisecond.
  const timed_step absurd = matmul_step(false, 131072, {"y"}, /*gflops=*/1e-300);
  REQUIRE_FALSE(absurd.out.ok());
  CHECK(absurd.out.error().error_code() == code::deadline_exceeded);
  CHECK_THAT(absurd.out.error().message(),
             Catch::Contains("step timeout of 3600000 ms of virtual time (session_options::step_timeout; the "
                             "simulation's rates (simulation.compute, simulation.network) set how long its kernels "
                             "and transfers take)"));
  CHECK(absurd.seconds == Approx(3600).epsilon(0.01));
  // A scenario at that rate: the first step (the variables' initialization) fails the
  // same way, and the run ends with its error (its cluster's actors waiting for the
  // kernels: a turn per virtual millisecond would take 10^14 turns).
  auto sc = scenarios::parse_scenario(std::string(k_scenario) + "simulation { compute { gflops: 1e-300 } }\n", "sim.pbtxt");
  REQUIRE(sc.ok());
  std::ostringstream out;
  scenarios::run_options o;
  o.out = &out;
  auto summary = scenarios::run_scenario(*sc, o);
  REQUIRE_FALSE(summary.ok());
  CHECK(summary.error().error_code() == code::deadline_exceeded);
  CHECK_THAT(summary.error().message(), Catch::Contains("initializing the variables") && Catch::Contains("step timeout"));
  // The clock's conversion saturates: no overflow, no NaN, nothing negative.
  CHECK(sim::virtual_duration(1e300).count() == static_cast<std::int64_t>(sim::k_longest_ns));
  CHECK(sim::virtual_duration(std::numeric_limits<double>::quiet_NaN()).count() ==
        static_cast<std::int64_t>(sim::k_longest_ns));
  CHECK(sim::virtual_duration(std::numeric_limits<double>::infinity()).count() ==
        static_cast<std::int64_t>(sim::k_longest_ns));
  CHECK(sim::virtual_duration(-5).count() == 0);
  CHECK(sim::virtual_duration(1234.9).count() == 1234);
}

TEST_CASE("simulation: shape-only names the node whose shape only values would give", "[sim]") {
  const timed_step r = matmul_step(false, 64, {"by_value"});
  REQUIRE_FALSE(r.out.ok());
  CHECK(r.out.error().error_code() == code::unimplemented);
  CHECK_THAT(r.out.error().message(),
             Catch::Contains("shape-only simulation: node 'by_value' (Reshape) output 0 has shape [?,?], which its "
                             "inputs' shapes do not determine; run this graph with simulation.execute_kernels: true"));
}

TEST_CASE("simulation: a shape-only scenario trains as the full one does, in the same virtual time", "[sim]") {
  const outcome full = run("simulation { seed: 3 }\n");
  const outcome shapes = run("simulation { seed: 3 execute_kernels: false }\n");
  CHECK(shapes.summary.find("\"shape_only\": true") != std::string::npos);
  CHECK(full.summary.find("\"shape_only\": false") != std::string::npos);
  CHECK(shapes.training_seconds == full.training_seconds);
  CHECK(shapes.virtual_seconds < full.virtual_seconds);  // no final evaluation
  CHECK(shapes.trace.size() > 1000);
}

TEST_CASE("simulation: shape-only SYNC replication aggregates phantom gradients", "[sim]") {
  std::string out;
  auto r = run_with("simulation { seed: 5 execute_kernels: false }\n", &out, sync_scenario());
  INFO(out);
  REQUIRE(r.ok());
  CHECK(r->steps == 60);
  CHECK(r->shape_only);
  CHECK(out.find("shape-only: no loss or accuracy") != std::string::npos);
}

TEST_CASE("simulation: a task's network interface carries its transfers one after another", "[sim]") {
  // Each of 60 steps reads the model (25,450 floats: 101,800 bytes) from the PS and sends
  // as many bytes of gradients to it: at 0.1 Gb/s on the PS's interface, each direction
  // takes 8.1 ms per step, whichever worker the step is from.
  auto links = run_with("simulation { seed: 2 network { bandwidth_gbps: 10 } }\n");
  auto nic = run_with("simulation { seed: 2 network { bandwidth_gbps: 10 nic_gbps: 0.1 } }\n");
  REQUIRE(links.ok());
  REQUIRE(nic.ok());
  CHECK(nic->seconds >= 60 * 101800 * 8 / 0.1e9);
  CHECK(links->seconds < nic->seconds / 4);
}

TEST_CASE("simulation: compute noise makes kernels slower now and then, the same for a seed", "[sim]") {
  const auto r = runs_with({"simulation { seed: 2 compute { gflops: 1 } }\n",
                            "simulation { seed: 2 compute { gflops: 1 noise: 0.5 } }\n",
                            "simulation { seed: 2 compute { gflops: 1 noise: 0.5 } }\n"});
  const auto &plain = r[0], &noisy = r[1], &again = r[2];
  // Kernels take 1.5 times as long on average: the steps too, give or take.
  CHECK(noisy.seconds > 1.2 * plain.seconds);
  CHECK(noisy.seconds < 2.0 * plain.seconds);
  CHECK(again.seconds == noisy.seconds);
}

TEST_CASE("simulation: SYNC over several PS tasks, with steps longer than the coordinator's first wait", "[sim]") {
  // Two PS tasks (the accumulators beside their variables, the step they are set to read
  // beside the global step), and steps of ~8 s of virtual time: the coordinator's first
  // wait for gradients (5 s) gives one step up, then waits twice as long, then adapts.
  std::string log;
  auto r = run_with("simulation { seed: 5 compute { gflops: 0.0003 } }\n", &log, sync_scenario(2));
  INFO(log);
  REQUIRE(r.ok());
  CHECK(r->steps == 60);
  CHECK(r->seconds > 60 * 5.0);
  std::size_t lost = 0;
  for (std::size_t at = log.find("did not all come within"); at != std::string::npos;
       at = log.find("did not all come within", at + 1)) {
    ++lost;
  }
  CHECK(lost == 1);
}

TEST_CASE("simulation: BUGGIFY sites fire by seed, replay alike, and every run finishes with its checkpoints", "[sim]") {
  std::map<std::string, std::int64_t> fired;  // over all seeds
  int failed_saves = 0;
  for (const std::string& base : {std::string(k_scenario), sync_scenario()}) {
    for (int seed = 1; seed <= 8; ++seed) {
      const std::string dir = temp_path(str_cat("troupe-sim-buggify-", seed));
      const std::string extra = "checkpoint { dir: \"" + dir + "\" every_steps: 10 }\n"
                                "faults { random { buggify: true } }\n" +
                                str_cat("simulation { seed: ", seed, " }\n");
      std::string out;
      auto r = run_with(extra, &out, base);
      INFO(out);
      REQUIRE(r.ok());
      CHECK(r->steps >= 60);
      // The final checkpoint always commits (only periodic saves are made to fail).
      CHECK(r->checkpoints.latest_step >= 60);
      CHECK(std::filesystem::exists(r->checkpoints.latest_path));
      failed_saves += r->checkpoints.failed;
      for (const auto& [site, n] : r->buggify_fires) fired[site] += n;
      if (!r->buggify_fires.empty()) CHECK(out.find("buggify: live sites fired ") != std::string::npos);
      std::filesystem::remove_all(dir);
    }
  }
  // (step.lost_answer is live in none of these seeds: its own test below forces it.)
  for (const char* site : {"network.spike", "kernel.slow", "variable.slow_update", "checkpoint.save_fails",
                           "checkpoint.slow_cut", "checkpoint.slow_write", "input.slow_reader", "sync.slow_tokens", "sync.lost_aggregates",
                           "step.unavailable", "partition.slow_prepare"}) {
    INFO(site);
    CHECK(fired[site] > 0);
  }
  CHECK(failed_saves > 0);
  // A seed replays its fires exactly; without buggify nothing fires.
  const auto r = runs_with({"faults { random { buggify: true } }\nsimulation { seed: 3 }\n",
                            "faults { random { buggify: true } }\nsimulation { seed: 3 }\n", "simulation { seed: 3 }\n"});
  CHECK(r[0].buggify_fires == r[1].buggify_fires);
  CHECK(r[0].seconds == r[1].seconds);
  CHECK(r[2].buggify_fires.empty());
}

// Runs `base` with BUGGIFY on in simulation seed `seed`, checkpoints every 10 steps into a
// fresh directory (removed after) and `task` killed at step `at_step`; its output in *out.
// TROUPE_BUGGIFY_LIVE=`sites` while it lives: those sites live in every BUGGIFY run.
struct live_sites {
  explicit live_sites(const char* sites) { ::setenv("TROUPE_BUGGIFY_LIVE", sites, 1); }
  ~live_sites() { ::unsetenv("TROUPE_BUGGIFY_LIVE"); }
  live_sites(const live_sites&) = delete;
  live_sites& operator=(const live_sites&) = delete;
};

result<scenarios::run_summary> run_killed_with_buggify(const std::string& base, int seed, int at_step,
                                                       const std::string& task, std::string* out) {
  const std::string dir = temp_path(str_cat("troupe-sim-buggify-kill-", seed));
  auto r = run_with(str_cat("checkpoint { dir: \"", dir, "\" every_steps: 10 }\n", "faults { fault { at_step: ", at_step,
                            " kill { task: \"", task, "\" } } random { buggify: true } }\n", "simulation { seed: ", seed,
                            " }\n"),
                    out, base);
  std::filesystem::remove_all(dir);
  return r;
}

TEST_CASE("simulation: BUGGIFY step.unavailable live in every run (TROUPE_BUGGIFY_LIVE): every caller runs its "
          "step again, and ASYNC and SYNC runs with a PS lost finish with their checkpoints",
          "[sim]") {
  // A quarter of every session's steps fail before they run (the site's own 1 in 10 made
  // a quarter by TROUPE_BUGGIFY_LIVE's "=0.25"): the set-up's, the
  // trainers', the readers', the SYNC coordinator's turns, resets and tokens, the cuts',
  // the restores', the closing ones. Before each of them was retried, a run failed at
  // its set-up or its restore, or a SYNC run stalled for good (the coordinator waited for
  // a step after the last, or left every replica without a token). And no SYNC turn waits
  // out its stall timeout: a worker that caught up after a failed step read the global
  // step before taking the tokens handed out meanwhile, so an update between the two left
  // it computing the step before with the next step's token spent (seed 1 stalled 5 s).
  const live_sites live("network.spike,step.unavailable=0.25");
  for (const std::string& base : {std::string(k_scenario), sync_scenario()}) {
    for (int seed = 1; seed <= 3; ++seed) {
      std::string out;
      auto r = run_killed_with_buggify(base, seed, 35, "/job:ps/task:0", &out);
      INFO("seed " << seed << "\n" << out);
      REQUIRE(r.ok());
      CHECK(r->steps >= 60);
      CHECK(r->checkpoints.latest_step >= 60);
      CHECK(r->buggify_fires["step.unavailable"] > 0);
      CHECK(r->buggify_fires.count("network.spike") == 1);  // the list names both
      CHECK(out.find("did not all come") == std::string::npos);
      REQUIRE(r->faults.size() == 1);
      CHECK(r->faults[0].recovered);
    }
  }
}

TEST_CASE("simulation: BUGGIFY step.lost_answer live: a SYNC update that went in though its answer was lost "
          "counts, the last one too",
          "[sim]") {
  // A quarter of the steps run but answer UNAVAILABLE (a connection lost after the work):
  // every caller's retry meets a step already done. The SYNC coordinator's reset reads the
  // global step and counts an update past the last it knew; before, a lost answer of the
  // last update left it waiting for the gradients of a step after the last, for ever
  // (seeds 8, 10 and 12 here, since a worker's `train` no longer waits for a transfer
  // after the PS's updates; seed 4 before; the fault matrix's 'kill ps' SYNC seed 15).
  const live_sites live("step.lost_answer=0.25");
  int last_lost = 0;
  for (int seed = 1; seed <= 12; ++seed) {
    std::string out;
    auto r = run_with(str_cat("faults { random { buggify: true } }\nsimulation { seed: ", seed, " }\n"), &out,
                      sync_scenario());
    INFO("seed " << seed << "\n" << out);
    REQUIRE(r.ok());
    CHECK(r->steps == 60);
    CHECK(r->buggify_fires["step.lost_answer"] > 0);
    CHECK(out.find("went in though its answer was lost") != std::string::npos);
    CHECK(out.find("done: 60 steps") != std::string::npos);
    if (out.find("update to global step 60 went in") != std::string::npos) ++last_lost;
  }
  CHECK(last_lost > 0);
}

TEST_CASE("simulation: BUGGIFY supervisor.slow_restart: a worker lost near the end of a SYNC run with a backup "
          "comes back after the last step, and the run keeps its steps",
          "[sim]") {
  // The other worker finishes the run alone while the lost one's restart waits 500 ms;
  // the recovery then restores only the lost worker's state (the run has applied its
  // last step: no rollback), and its trainer has no turn left to wait for. Before, the
  // rollback sent every variable back to step 40 and the restarted worker waited for a
  // SYNC turn until the step timeout (an hour of virtual time).
  std::string base = sync_scenario();
  base.replace(base.find("replication: SYNC"), 17, "replication: SYNC backup_workers: 1");
  int slow = 0;
  for (int seed = 1; seed <= 24; ++seed) {
    std::string out;
    auto r = run_killed_with_buggify(base, seed, 52, "/job:worker/task:1", &out);
    INFO("seed " << seed << "\n" << out);
    REQUIRE(r.ok());
    CHECK(r->steps == 60);
    CHECK(r->checkpoints.latest_step == 60);
    const auto fired = r->buggify_fires.find("supervisor.slow_restart");
    if (fired != r->buggify_fires.end() && fired->second > 0) {
      ++slow;
      CHECK(out.find("has applied its last step") != std::string::npos);
    }
  }
  CHECK(slow > 0);
}

TEST_CASE("simulation: on one machine each transfer costs its cores a fixed CPU time at both ends", "[sim]") {
  // 8 transfers per worker step (4 variables read, 4 gradients sent; 60 steps): at 500
  // us of a core at each end, 60 x 8 x 2 x 0.5 ms over 2 cores = 240 ms more at least.
  auto free = run_with("simulation { seed: 2 compute { machine_cores: 2 } }\n");
  auto costly = run_with("simulation { seed: 2 network { message_cpu_us: 500 } compute { machine_cores: 2 } }\n");
  REQUIRE(free.ok());
  REQUIRE(costly.ok());
  CHECK(costly->seconds >= free->seconds + 0.24);
}

TEST_CASE("simulation: each transfer holds its link for transfer_us, whatever its size", "[sim]") {
  // A worker's step takes 4 variables over its link from the PS and sends 4 gradients
  // back: at 2 ms per transfer held, 16 ms per step; the two workers' links side by side:
  // 30 steps each, 0.48 s at least. The same 2 ms as latency is not held: 4 ms per step.
  auto held = run_with("simulation { seed: 2 network { latency_us: 0 transfer_us: 2000 } }\n");
  auto latency = run_with("simulation { seed: 2 network { latency_us: 2000 } }\n");
  REQUIRE(held.ok());
  REQUIRE(latency.ok());
  CHECK(held->seconds >= 0.45);
  CHECK(latency->seconds < held->seconds / 2);
}

TEST_CASE("simulation: on one machine each task's part of a step costs the control plane's CPU first", "[sim]") {
  // A worker's training step has a part on its own task and one on the PS: 2 x 1 ms of
  // the one core before they start, 60 steps: 0.12 s more at least.
  auto free = run_with("simulation { seed: 2 network { latency_us: 0 } compute { machine_cores: 1 } }\n");
  auto costly = run_with("simulation { seed: 2 network { latency_us: 0 step_cpu_us: 1000 } compute { machine_cores: 1 } }\n");
  REQUIRE(free.ok());
  REQUIRE(costly.ok());
  CHECK(costly->seconds >= free->seconds + 0.12);
  // Without machine_cores it is not modelled: the same run to the nanosecond.
  auto apart = run_with("simulation { seed: 2 network { latency_us: 0 } }\n");
  auto apart_costly = run_with("simulation { seed: 2 network { latency_us: 0 step_cpu_us: 1000 } }\n");
  REQUIRE(apart.ok());
  REQUIRE(apart_costly.ok());
  CHECK(apart_costly->virtual_seconds == apart->virtual_seconds);
}

TEST_CASE("simulation: the crowding of processes takes the machine's cores beside each part of a step", "[sim]") {
  // process_cpu_us 1000 for each of the 4 processes (3 tasks and the client): each part
  // of a step takes 4 ms of a core beside it, 2 parts a worker step, 60 steps: 0.48 s of
  // the one core's time, which the kernels share with it.
  auto free = run_with("simulation { seed: 2 network { latency_us: 0 } compute { machine_cores: 1 } }\n");
  auto crowded = run_with("simulation { seed: 2 network { latency_us: 0 process_cpu_us: 1000 } compute { machine_cores: 1 } }\n");
  REQUIRE(free.ok());
  REQUIRE(crowded.ok());
  CHECK(crowded->virtual_seconds >= free->virtual_seconds + 0.2);
  // With cores to spare it delays next to nothing (step_cpu_us of the same 4 ms, which
  // comes before each part, 60 x 2 x 4 ms along the steps).
  auto roomy = run_with("simulation { seed: 2 network { latency_us: 0 } compute { machine_cores: 64 } }\n");
  auto roomy_crowded = run_with("simulation { seed: 2 network { latency_us: 0 process_cpu_us: 1000 } compute { machine_cores: 64 } }\n");
  auto roomy_step = run_with("simulation { seed: 2 network { latency_us: 0 step_cpu_us: 4000 } compute { machine_cores: 64 } }\n");
  REQUIRE(roomy.ok());
  REQUIRE(roomy_crowded.ok());
  REQUIRE(roomy_step.ok());
  INFO(free->virtual_seconds << " " << crowded->virtual_seconds << " " << roomy->virtual_seconds << " "
                             << roomy_crowded->virtual_seconds << " " << roomy_step->virtual_seconds);
  // (its jobs' ends are events of the world too, and move the workers' interleaving a little)
  CHECK(roomy_step->virtual_seconds >= roomy->virtual_seconds + 0.15);
  CHECK(roomy_crowded->virtual_seconds < roomy->virtual_seconds + 0.02);
}

TEST_CASE("simulation: the crowding of tasks in one process takes the cores for each task beyond the table's", "[sim]") {
  // task_cpu_us 1000 for each of the 3 tasks (no table): the same crowding of each part
  // of a step as process_cpu_us 750 for each of the 4 processes (3 tasks and the client),
  // to the nanosecond: one mechanism.
  const auto r = runs_with({"simulation { seed: 2 network { latency_us: 0 } compute { machine_cores: 1 } }\n",
                            "simulation { seed: 2 network { latency_us: 0 } compute { machine_cores: 1 task_cpu_us: 1000 } }\n",
                            "simulation { seed: 2 network { latency_us: 0 process_cpu_us: 750 } compute { machine_cores: 1 } }\n",
                            "simulation { seed: 2 network { latency_us: 0 process_cpu_us: 500 } compute { machine_cores: 1 } }\n"});
  const double free = r[0].virtual_seconds, tasks = r[1].virtual_seconds, processes = r[2].virtual_seconds,
               two_beyond = r[3].virtual_seconds;
  CHECK(tasks >= free + 0.15);
  CHECK(tasks == processes);
  // A table measured with these 3 tasks holds their crowding in its kernels' times: none
  // more; one measured with a single task: the 2 tasks beyond it (process_cpu_us 500).
  const std::string path = temp_path("troupe-sim-tasks");
  auto with_table = [&](int table_tasks) {
    std::ofstream(path) << "{\"tasks\": " << table_tasks << "}";
    return run_with("simulation { seed: 2 network { latency_us: 0 } compute { machine_cores: 1 task_cpu_us: 1000 table: \"" +
                    path + "\" } }\n");
  };
  auto same = with_table(3);
  auto fewer = with_table(1);
  std::filesystem::remove(path);
  REQUIRE(same.ok());
  REQUIRE(fewer.ok());
  CHECK(same->virtual_seconds == free);
  CHECK(fewer->virtual_seconds == two_beyond);
}

TEST_CASE("simulation: a message that finds the kernels keeping every core busy waits busy_wait_us more", "[sim]") {
  // One core: while a worker's kernel runs, the other worker's tensors and requests
  // arriving find it busy, and wait 2 ms on average each. (Drawn from the seed, none on
  // 64 cores, none without machine_cores: check_busy_wait.)
  const auto [free, waits] = check_busy_wait("busy_wait_us", &scenarios::run_summary::messages_arrived,
                                             &scenarios::run_summary::messages_arrived_busy);
  INFO(free.messages_arrived << " " << free.messages_arrived_busy << " " << free.virtual_seconds << " "
                             << waits.messages_arrived << " " << waits.messages_arrived_busy << " "
                             << waits.virtual_seconds);
  // 60 worker steps: each reads 4 variables and sends 4 gradients (without step_cpu_us
  // the steps' requests are not messages of the model), and the input pipeline's.
  CHECK(free.messages_arrived >= 60 * 8);
  CHECK(free.messages_arrived_busy > 0);
  CHECK(free.messages_arrived_busy < free.messages_arrived);
  CHECK(waits.messages_arrived_busy > 0);
  // Each busy arrival delays its step, by 2 ms on average; the workers' steps overlap.
  CHECK(waits.virtual_seconds >= free.virtual_seconds + 0.001 * static_cast<double>(waits.messages_arrived_busy) / 4);
  // With step_cpu_us the steps' requests are messages too.
  auto requests = run_with("simulation { seed: 2 network { latency_us: 100 step_cpu_us: 10 } compute { machine_cores: 1 } }\n");
  REQUIRE(requests.ok());
  CHECK(requests->messages_arrived >= free.messages_arrived + 60 * 2 - 20);
}

TEST_CASE("simulation: a transfer handed over while its own task's kernels keep every core busy waits send_busy_wait_us first", "[sim]") {
  // One core, no latency, the wire next to free: the worker's 10 ms kernel holds the core.
  sim::simulation_options o;
  o.seed = 5;
  o.compute.machine_cores = 1;
  o.network.latency_us = 0;
  o.network.bandwidth_gbps = 1e4;
  o.network.send_busy_wait_us = 1000;
  sim::simulation s(o);
  const std::string worker = "/job:worker/replica:0/task:0", ps = "/job:ps/replica:0/task:0";
  tf::NodeDef def;
  def.set_op("NoOp");
  bool held = false;
  s.timer_of(worker + "/device:CPU:0", worker)->hold(def, {}, 10e6, [&] { held = true; });
  const auto t0 = env::now();
  std::vector<double> at_us(4, -1);
  auto arrived = [&](int i) {
    return [&, i] { at_us[i] = std::chrono::duration<double, std::micro>(env::now() - t0).count(); };
  };
  s.transfer(worker, ps, 64, arrived(0));  // its own kernel fills the core: waits
  s.transfer(worker, ps, 64, arrived(1));  // the same link's thread, still waiting: goes with it
  s.transfer(ps, worker, 64, arrived(2));  // the PS runs nothing: at once
  CHECK(s.messages_sent() == 3);
  CHECK(s.messages_sent_busy() == 2);
  env::sleep_for(std::chrono::milliseconds(20));
  CHECK(held);
  INFO(at_us[0] << " " << at_us[1] << " " << at_us[2]);
  CHECK(at_us[2] >= 0);
  CHECK(at_us[2] < 1);
  CHECK(at_us[0] > 1);  // an exponential draw of mean 1 ms (seed 5)
  CHECK(at_us[1] >= at_us[0]);
  CHECK(at_us[1] < at_us[0] + 1);
  // The kernel done, the core idle: the next leaves at once.
  s.transfer(worker, ps, 64, arrived(3));
  env::sleep_for(std::chrono::milliseconds(1));
  CHECK(s.messages_sent_busy() == 2);
  CHECK(at_us[3] >= 20000);
  CHECK(at_us[3] < 20001);
}

TEST_CASE("simulation: a scenario's transfers wait send_busy_wait_us while their senders' kernels keep every core busy", "[sim]") {
  // (Drawn from the seed, none on 64 cores, none without machine_cores: check_busy_wait.)
  const auto [free, waits] = check_busy_wait("send_busy_wait_us", &scenarios::run_summary::messages_sent,
                                             &scenarios::run_summary::messages_sent_busy);
  INFO(free.messages_sent << " " << free.messages_sent_busy << " " << free.virtual_seconds << " "
                          << waits.messages_sent << " " << waits.messages_sent_busy << " " << waits.virtual_seconds);
  // 60 worker steps: each reads 4 variables and sends 4 gradients, and the input
  // pipeline's; a worker's gradients leave while its other gradients are computed.
  CHECK(free.messages_sent >= 60 * 8);
  CHECK(free.messages_sent_busy > 0);
  CHECK(free.messages_sent_busy < free.messages_sent);
  CHECK(waits.virtual_seconds > free.virtual_seconds + 0.05);
}

TEST_CASE("simulation: a variable update takes the calibration's time, measured as it trained", "[sim]") {
  // The scenario trained for real with a recorder: its variable updates are measured (CPU
  // time, not the leases' waiting) like any kernel.
  auto sc = scenarios::parse_scenario(k_scenario, "sim.pbtxt");
  REQUIRE(sc.ok());
  sc->mutable_cluster()->set_mode(scenario::Cluster::IN_PROCESS);
  sim::calibration_recorder recorder;
  std::ostringstream out;
  scenarios::run_options o;
  o.out = &out;
  o.steps = 20;
  o.tracer = &recorder;
  REQUIRE(scenarios::run_scenario(*sc, o).ok());
  sim::Calibration table = recorder.table();
  int updates = 0;
  for (sim::KernelCost& c : *table.mutable_kernels()) {
    if (c.op() != "ResourceApplyGradientDescent") continue;
    ++updates;
    CHECK(c.mean_cpu_ns() > 0);
    c.set_mean_cpu_ns(5e6);  // 5 ms each
  }
  CHECK(updates == 4);  // the MLP's two weights and two biases
  const std::string path = temp_path("troupe-sim-updates");
  REQUIRE(sim::save_calibration(table, path).ok());
  // 60 steps x 4 updates x 5 ms on the PS's one core: 1.2 s at least.
  auto slow = run_with(str_cat("simulation { seed: 2 compute { table: \"", path, "\" } }\n"));
  std::filesystem::remove(path);
  REQUIRE(slow.ok());
  CHECK(slow->seconds >= 1.2);
}

TEST_CASE("simulation: what a client feeds a task's part of a step is copied at both ends first", "[sim]") {
  // On one core, 10 us of control plane and copies at 1 GB/s: a feed of 1 M floats (4 MB)
  // costs 2 x 4 ms more before the part starts than a scalar's.
  auto feed_seconds = [](std::int64_t elements) {
    sim::simulation_options o;
    o.network.latency_us = 0;
    o.network.step_cpu_us = 10;
    o.network.copy_gbps = 1;
    o.compute.machine_cores = 1;
    sim::simulation s(o);
    auto root = graph::scope::new_root();
    auto x = ops::placeholder(root.with_name("x"), dtype::float32);
    ops::identity(root.with_name("y"), x);
    const tensor value(dtype::float32, {elements});
    std::fill_n(value.data<float>(), elements, 1.0f);
    const timed_step r = one_step(s, root, {"y"}, {{"x", value}});
    REQUIRE(r.out.ok());
    CHECK(r.out->at(0).num_elements() == elements);
    return r.seconds;
  };
  CHECK(feed_seconds(1 << 20) - feed_seconds(1) >= 0.008);
}
