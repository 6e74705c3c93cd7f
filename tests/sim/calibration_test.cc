// Calibration (sim/calibration.h): kernels' durations by op, inputs and attributes, their
// statistics, the JSON table and its refusals, and a scenario's training measured.
#include "sim/calibration.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/cpu_time.h"
#include "graph/attr.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"

using namespace troupe;
using clock_type = std::chrono::steady_clock;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".json")).string();
}

// A MatMul of [2,3] x [3,4] that took `us` microseconds (and `cpu_us` of CPU time, when
// >= 0),
// begun at `start`.
void matmul_span(sim::calibration_recorder& r, const tf::NodeDef& def, int us, bool asynchronous = false,
                 double cpu_us = -1, clock_type::time_point start = clock_type::now()) {
  const tensor a(dtype::float32, {2, 3}), b(dtype::float32, {3, 4});
  const tensor inputs[] = {a, b};
  r.node_span("/job:worker/replica:0/task:0", "CPU:0", def.name(), def.op(), 1, start, start + std::chrono::microseconds(us),
              {inputs, asynchronous, &def, cpu_us >= 0 ? cpu_us * 1e3 : -1});
}

}  // namespace

TEST_CASE("calibration: durations by op, inputs and cost attributes, after a warm-up", "[sim]") {
  tf::NodeDef plain, transposed;
  plain.set_name("mm");
  plain.set_op("MatMul");
  (*plain.mutable_attr())["T"] = graph::attr_value(dtype::float32);
  (*plain.mutable_attr())["transpose_a"] = graph::attr_value(false);
  (*plain.mutable_attr())["transpose_b"] = graph::attr_value(false);
  (*plain.mutable_attr())["_class"] = graph::attr_value(std::string("loc:@x"));
  transposed = plain;
  (*transposed.mutable_attr())["transpose_b"] = graph::attr_value(true);
  CHECK(sim::cost_attrs(plain) == std::vector<std::string>{"transpose_a=false", "transpose_b=false"});
  // A transfer's cost does not depend on its ends' lives (random per server process).
  tf::NodeDef send;
  send.set_op("_Send");
  (*send.mutable_attr())["client_terminated"] = graph::attr_value(false);
  (*send.mutable_attr())["send_device_incarnation"] = graph::attr_value(std::int64_t{12345});
  (*send.mutable_attr())["recv_device_incarnation"] = graph::attr_value(std::int64_t{-678});
  CHECK(sim::cost_attrs(send) == std::vector<std::string>{"client_terminated=false"});

  sim::calibration_recorder r;
  // Two warm-up runs (1000 us each) do not count; then 10, 20, ..., 50 us.
  matmul_span(r, plain, 1000);
  matmul_span(r, plain, 1000);
  for (int us : {30, 10, 50, 20, 40}) matmul_span(r, plain, us);
  for (int i = 0; i < 3; ++i) matmul_span(r, transposed, 7);
  matmul_span(r, plain, 99999, /*asynchronous=*/true);  // waiting, not computing: ignored
  const sim::Calibration t = r.table();
  REQUIRE(t.kernels_size() == 2);
  const auto* c = sim::find_cost(t, "MatMul", "CPU", {"float[2,3]", "float[3,4]"}, {"transpose_a=false", "transpose_b=false"});
  REQUIRE(c != nullptr);
  CHECK(c->count() == 5);
  CHECK(c->median_ns() == Approx(30000).epsilon(0.01));
  CHECK(c->mean_ns() == Approx(30000).epsilon(0.01));
  CHECK(c->min_ns() == Approx(10000).epsilon(0.01));
  CHECK(c->p90_ns() == Approx(50000).epsilon(0.01));
  const auto* t2 = sim::find_cost(t, "MatMul", "CPU", {"float[2,3]", "float[3,4]"}, {"transpose_a=false", "transpose_b=true"});
  REQUIRE(t2 != nullptr);
  CHECK(t2->count() == 1);
  CHECK(sim::find_cost(t, "MatMul", "CPU", {"float[2,3]"}, {"transpose_a=false", "transpose_b=false"}) == nullptr);
  CHECK(sim::find_cost(t, "MatMul", "GPU", {"float[2,3]", "float[3,4]"}, {"transpose_a=false", "transpose_b=false"}) == nullptr);
  CHECK(sim::input_signature(tensor::scalar(std::int32_t{1})) == "int32[]");
  CHECK(c->median_cpu_ns() == 0);  // no CPU time given: none measured
  CHECK(c->mean_cpu_ns() == 0);

  // CPU times: their median and their mean (what a step's sum of kernels costs).
  sim::calibration_recorder with_cpu;
  for (double cpu : {5.0, 5.0, 100.0, 600.0, 200.0}) matmul_span(with_cpu, plain, 700, false, cpu);
  const auto* cpu = sim::find_cost(with_cpu.table(), "MatMul", "CPU", {"float[2,3]", "float[3,4]"},
                                   {"transpose_a=false", "transpose_b=false"});
  REQUIRE(cpu != nullptr);
  CHECK(cpu->median_cpu_ns() == Approx(200000).epsilon(0.01));
  CHECK(cpu->mean_cpu_ns() == Approx(300000).epsilon(0.01));

  // Each entry's time alone: the mean wall time of the same kernel in a table measured
  // with one worker; entries it lacks keep none.
  sim::calibration_recorder alone;
  for (int us : {1, 1, 10, 20}) matmul_span(alone, plain, us);
  sim::Calibration merged = t;
  CHECK(sim::add_alone_times(merged, alone.table()) == 1);
  CHECK(sim::find_cost(merged, "MatMul", "CPU", {"float[2,3]", "float[3,4]"}, {"transpose_a=false", "transpose_b=false"})
            ->alone_ns() == Approx(15000).epsilon(0.01));
  CHECK(sim::find_cost(merged, "MatMul", "CPU", {"float[2,3]", "float[3,4]"}, {"transpose_a=false", "transpose_b=true"})
            ->alone_ns() == 0);

  // The JSON table round-trips; a damaged one is refused naming the file.
  const std::string path = temp_path("troupe-calibration");
  REQUIRE(sim::save_calibration(t, path).ok());
  auto back = sim::load_calibration(path);
  REQUIRE(back.ok());
  CHECK(back->SerializeAsString() == t.SerializeAsString());
  std::ifstream in(path);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(json, Catch::Contains("\"median_ns\"") && Catch::Contains("\"transpose_b=true\""));
  std::ofstream(path) << "{\"kernels\": [{\"op\": \"MatMul\", \"count\": 0}]}";
  auto empty = sim::load_calibration(path);
  REQUIRE_FALSE(empty.ok());
  CHECK_THAT(empty.error().message(), Catch::Contains(path) && Catch::Contains("kernels[0]"));
  // Figures no measurement gives, which the simulation would turn into a clock that
  // stands still or overflows: each refused naming the file, the entry and the field.
  const struct {
    const char* json;
    const char* names;
  } absurd[] = {
      {R"({"kernels": [{"op": "MatMul", "count": 3, "median_ns": 5}, {"op": "Relu", "count": 1, "mean_cpu_ns": 1e300}]})",
       "kernels[1] (Relu): mean_cpu_ns (is 1e+300)"},
      {R"({"kernels": [{"op": "MatMul", "count": 3, "median_cpu_ns": "Infinity"}]})", "kernels[0] (MatMul): median_cpu_ns (is inf)"},
      {R"({"kernels": [{"op": "MatMul", "count": 3, "alone_ns": "NaN"}]})", "kernels[0] (MatMul): alone_ns (is nan)"},
      {R"({"kernels": [{"op": "MatMul", "count": 3, "median_ns": -1}]})", "kernels[0] (MatMul): median_ns (is -1)"},
      {R"({"runtime_ns_per_kernel": -2000})", "runtime_ns_per_kernel (is -2000)"},
      {R"({"loopback": {"latency_us": 1e13}})", "loopback.latency_us (is 1e+13)"},
      {R"({"tasks": -3})", "tasks (is -3)"},
      {R"({"loopback": {"transits": "-1"}})", "loopback.transits (is -1)"},
  };
  for (const auto& a : absurd) {
    std::ofstream(path) << a.json;
    auto bad = sim::load_calibration(path);
    INFO(a.json);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().error_code() == code::invalid_argument);
    CHECK_THAT(bad.error().message(), Catch::Contains(path) && Catch::Contains(a.names) &&
                                          Catch::Contains("must be a number in [0, 10^12]"));
  }
  // The largest figure is taken.
  std::ofstream(path) << R"({"kernels": [{"op": "MatMul", "count": 1, "mean_cpu_ns": 1e12}], "loopback": {"busy_wait_us": 0}})";
  CHECK(sim::load_calibration(path).ok());
  // A negative zero reads as 0 (JSON's writer leaves a zero out: it must come back the
  // same; the fuzzer found "-0e12").
  std::ofstream(path) << R"({"runtime_ns_per_kernel": -0e12, "kernels": [{"op": "MatMul", "count": 1, "alone_ns": -0}]})";
  auto zero = sim::load_calibration(path);
  REQUIRE(zero.ok());
  CHECK_FALSE(std::signbit(zero->runtime_ns_per_kernel()));
  CHECK_FALSE(std::signbit(zero->kernels(0).alone_ns()));
  REQUIRE(sim::save_calibration(*zero, path).ok());
  auto zero_again = sim::load_calibration(path);
  REQUIRE(zero_again.ok());
  CHECK(zero_again->SerializeAsString() == zero->SerializeAsString());
  std::ofstream(path) << "not json";
  auto garbage = sim::load_calibration(path);
  REQUIRE_FALSE(garbage.ok());
  CHECK_THAT(garbage.error().message(), Catch::Contains(path));
  std::filesystem::remove(path);
  auto missing = sim::load_calibration(path);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message(), Catch::Contains(path));
}

TEST_CASE("calibration: transfers between tasks, their bytes and the tasks' parts of steps", "[sim]") {
  auto send = [](const std::string& from, const std::string& to) {
    tf::NodeDef def;
    def.set_name("send");
    def.set_op("_Send");
    (*def.mutable_attr())["send_device"] = graph::attr_value(from);
    (*def.mutable_attr())["recv_device"] = graph::attr_value(to);
    return def;
  };
  const std::string worker = "/job:worker/replica:0/task:0", ps = "/job:ps/replica:0/task:0";
  const tf::NodeDef across = send(worker + "/device:CPU:0", ps + "/device:CPU:0");
  const tf::NodeDef within = send(worker + "/device:CPU:0", worker + "/device:CPU:1");
  sim::calibration_recorder r;
  auto span = [&](const std::string& task, const tf::NodeDef& def, std::int64_t step, const tensor& value) {
    const tensor inputs[] = {value};
    const auto at = clock_type::now();
    r.node_span(task, task + "/device:CPU:0", def.name(), def.op(), step, at, at, {inputs, true, &def, -1});
  };
  const tensor ten(dtype::float32, {10}), three(dtype::int64, {3});
  span(worker, across, 1, ten);    // 40 bytes
  span(worker, across, 1, three);  // 24 bytes
  span(worker, within, 1, ten);    // another device of the same task: not between tasks
  span(ps, within, 1, ten);        // the ps's part of step 1
  span(worker, across, 2, ten);
  r.pause();
  span(worker, across, 3, ten);  // paused: not counted
  r.resume();
  const auto moved = r.between_tasks();
  CHECK(moved.transfers == 3);
  CHECK(moved.bytes == 40 + 24 + 40);
  CHECK(moved.parts == 3);  // (1, worker), (1, ps), (2, worker)
  r.reset();
  CHECK(r.between_tasks().transfers == 0);
  CHECK(r.between_tasks().parts == 0);
}

TEST_CASE("calibration: the links' transits fitted as latency and bandwidth, counted by when they arrived",
          "[sim]") {
  using std::chrono::microseconds;
  const std::string worker = "/job:worker/replica:0/task:0", ps = "/job:ps/replica:0/task:0";
  sim::calibration_recorder r;
  CHECK(r.link_transits().count == 0);
  // 100 us + 1 us per 1,000 bytes (8 Gb/s), at three sizes.
  const auto t0 = clock_type::now();
  auto transit = [&](std::int64_t bytes, clock_type::time_point arrived) {
    r.link_transit(worker, ps, bytes, arrived - microseconds(100 + bytes / 1000), arrived, "", 0);
  };
  for (std::int64_t bytes : {0, 100000, 1000000}) transit(bytes, t0);
  auto t = r.link_transits();
  CHECK(t.count == 3);
  CHECK(t.mean_bytes == Approx(1100000.0 / 3));
  CHECK(t.mean_us == Approx(100 + 1100.0 / 3));
  CHECK(t.latency_us == Approx(100).margin(1e-6));
  CHECK(t.bandwidth_gbps == Approx(8));
  // Handed over late, as a REAL run's are: one that arrived while paused is left out,
  // whenever it is reported, and one that arrived after the pause too.
  r.reset();
  r.pause();
  const auto paused_at = clock_type::now();
  std::this_thread::sleep_for(microseconds(200));
  r.resume();
  const auto resumed_at = clock_type::now();
  std::this_thread::sleep_for(microseconds(200));
  r.pause();
  transit(5000, paused_at + microseconds(50));   // while paused
  transit(5000, resumed_at + microseconds(50));  // while recording
  transit(5000, clock_type::now() + microseconds(50));  // after the pause
  t = r.link_transits();
  CHECK(t.count == 1);
  CHECK(t.mean_us == Approx(105));
  CHECK(t.bandwidth_gbps == 0);  // one size: no fit of the bytes
  CHECK(t.latency_us == Approx(105));
}

TEST_CASE("calibration: the runtime's cost per kernel from the same training untraced", "[sim]") {
  tf::NodeDef def;
  def.set_name("mm");
  def.set_op("MatMul");
  sim::calibration_recorder r;
  for (int i = 0; i < 10; ++i) matmul_span(r, def, 50, false, 30);  // 10 runs of 30 us CPU
  matmul_span(r, def, 99999, /*asynchronous=*/true);               // waiting: not a run
  const auto runs = r.kernels_run();
  CHECK(runs.runs == 10);
  CHECK(runs.cpu_ns == Approx(300000));
  sim::Calibration t = r.table();
  t.set_runtime_ns_per_kernel(12000);  // as a traced run measured it
  // 2 steps of 5 kernels each; untraced, a step took 200 us of CPU: 40 us a kernel, 30 of
  // them the kernel's own.
  REQUIRE(sim::set_runtime_untraced(t, runs, 2, 200));
  CHECK(t.runtime_ns_per_kernel() == Approx(10000));
  CHECK(t.runtime_traced_ns_per_kernel() == Approx(12000));
  CHECK(t.kernels_per_step() == Approx(5));
  CHECK(t.cpu_us_per_step() == Approx(200));
  // More than the traced run's runtime cost (the machine slower for the untraced run: 60
  // us a kernel, 30 of them the kernel's own): at most the traced figure.
  t.set_runtime_ns_per_kernel(12000);
  REQUIRE(sim::set_runtime_untraced(t, runs, 2, 300));
  CHECK(t.runtime_ns_per_kernel() == Approx(12000));
  // Less CPU untraced than the kernels' own: no runtime cost, never a negative one.
  REQUIRE(sim::set_runtime_untraced(t, runs, 2, 100));
  CHECK(t.runtime_ns_per_kernel() == 0);
  // Nothing measured: the table unchanged.
  sim::Calibration before = t;
  CHECK_FALSE(sim::set_runtime_untraced(t, runs, 0, 200));
  CHECK_FALSE(sim::set_runtime_untraced(t, runs, 2, 0));
  CHECK_FALSE(sim::set_runtime_untraced(t, {}, 2, 200));
  CHECK(t.SerializeAsString() == before.SerializeAsString());
}

TEST_CASE("calibration: the senders' waits, each transit paired by its key with its hand-off", "[sim]") {
  using std::chrono::microseconds;
  const std::string worker = "/job:worker/replica:0/task:0", ps = "/job:ps/replica:0/task:0";
  sim::calibration_recorder r;
  const auto t0 = clock_type::now();
  // Handed over at t0, first written 50 us later: 50 us waited.
  r.transfer_sent("g1", 7, worker, "CPU:0", t0);
  r.link_transit(worker, ps, 1000, t0 + microseconds(50), t0 + microseconds(150), "g1", 7);
  // Handed over at t0 + 20 us, behind the first on the link (in at t0 + 150 us), first
  // written at t0 + 170 us: 20 us waited for a core, 130 for the link.
  r.transfer_sent("g2", 7, worker, "CPU:0", t0 + microseconds(20));
  r.link_transit(worker, ps, 1000, t0 + microseconds(170), t0 + microseconds(200), "g2", 7);
  // The other way, a link of its own: handed over at t0 + 100, written at t0 + 110.
  r.transfer_sent("v1", 8, ps, "CPU:0", t0 + microseconds(100));
  r.link_transit(ps, worker, 1000, t0 + microseconds(110), t0 + microseconds(180), "v1", 8);
  // Not paired: a key never handed over (its step differs), one without a key, one
  // handed over after its first write (no such order: not this transfer's).
  r.transfer_sent("g3", 7, worker, "CPU:0", t0 + microseconds(400));
  r.link_transit(worker, ps, 1000, t0 + microseconds(300), t0 + microseconds(350), "g1", 9);
  r.link_transit(worker, ps, 1000, t0 + microseconds(310), t0 + microseconds(360), "", 0);
  r.link_transit(worker, ps, 1000, t0 + microseconds(320), t0 + microseconds(370), "g3", 7);
  auto t = r.link_transits();
  CHECK(t.count == 6);
  CHECK(t.send_waits == 3);
  CHECK(t.send_wait_us == Approx((50.0 + 20 + 10) / 3));
  // Hand-offs while paused are not kept: nothing pairs.
  r.reset();
  r.pause();
  r.transfer_sent("g1", 7, worker, "CPU:0", clock_type::now());
  r.resume();
  const auto t1 = clock_type::now();
  r.link_transit(worker, ps, 1000, t1 + microseconds(5), t1 + microseconds(50), "g1", 7);
  t = r.link_transits();
  CHECK(t.count == 1);
  CHECK(t.send_waits == 0);
  CHECK(t.send_wait_us == 0);
}

TEST_CASE("calibration: a traced run much dearer than the untraced one was traced while the machine was slow",
          "[sim]") {
  // What the recorder costs (LeNet 4,571 traced against 3,623 untraced; the MLP 3,468
  // against 2,917) is not a slow machine; a calibration of 7,199 against 3,973 was.
  CHECK_FALSE(sim::traced_while_slow(4571, 3623));
  CHECK_FALSE(sim::traced_while_slow(3468, 2917));
  CHECK(sim::traced_while_slow(7199, 3973));
  // Nothing to compare: not slow.
  CHECK_FALSE(sim::traced_while_slow(7199, 0));
  CHECK_FALSE(sim::traced_while_slow(0, 3973));
}

TEST_CASE("calibration: an untraced CPU per step above the traced one is measured again, the lowest kept", "[sim]") {
  // Measurements in the order the untraced runs would give them; how many were asked.
  auto run = [](double traced, std::vector<double> figures, int* asked, std::vector<double>* rejected) {
    std::size_t next = 0;
    const double us = sim::untraced_cpu_us_per_step(
        traced, [&] { return next < figures.size() ? figures[next++] : 0.0; }, 3,
        [&](double r) { rejected->push_back(r); });
    *asked = static_cast<int>(next);
    return us;
  };
  int asked = 0;
  std::vector<double> rejected;
  // The case met: 6,198 us untraced against 5,251 traced, then 4,400.
  CHECK(run(5251, {6198, 4400, 4300}, &asked, &rejected) == 4400);
  CHECK(asked == 2);
  CHECK(rejected == std::vector<double>{6198});
  rejected.clear();
  CHECK(run(5000, {4200}, &asked, &rejected) == 4200);  // below: kept at once
  CHECK(asked == 1);
  CHECK(run(5000, {6100, 5900, 6000}, &asked, &rejected) == 5900);  // never below: the lowest of three
  CHECK(asked == 3);
  CHECK(rejected == std::vector<double>{6100, 5900});
  rejected.clear();
  CHECK(run(5000, {0}, &asked, &rejected) == 0);  // no steady state: not run again
  CHECK(asked == 1);
  CHECK(run(5000, {6100, 0}, &asked, &rejected) == 6100);  // the one measured
  CHECK(run(0, {6100}, &asked, &rejected) == 6100);         // no traced figure to compare with
  CHECK(asked == 1);
}

TEST_CASE("calibration: the runtime's CPU per kernel traced is the median of windows, runs begun earlier left out",
          "[sim]") {
  tf::NodeDef def;
  def.set_name("mm");
  def.set_op("MatMul");
  sim::calibration_recorder r;
  r.pause();
  const auto before = clock_type::now();
  r.resume();
  // Begun before the recording resumed (an input reader loading its files): not a run.
  matmul_span(r, def, 50, false, 30, before - std::chrono::milliseconds(1));
  CHECK(r.kernels_run().runs == 0);
  // Each run: 1 us of its own CPU, 20 us of the process's around it (the runtime's).
  const auto run = [&](double cpu_us) {
    const double until = thread_cpu_ns() + 20e3;
    while (thread_cpu_ns() < until) {
    }
    matmul_span(r, def, 25, false, cpu_us);
  };
  const std::int64_t total = sim::calibration_recorder::k_window_after + 5 * sim::calibration_recorder::k_window_kernels;
  for (std::int64_t i = 0; i < total; ++i) {
    // One run ends with a second of CPU time it mostly spent before the window began (its
    // start is not the recording's, but a kernel's CPU is counted when it ends): one
    // window of five takes more than the process spent in it.
    run(i == sim::calibration_recorder::k_window_after + 300 ? 1e6 : 1);
  }
  r.pause();
  CHECK(r.kernels_run().runs == total);
  const double runtime = r.table().runtime_ns_per_kernel();
  CHECK(runtime > 15000);   // 19 us a run and the recorder's own, less than it
  CHECK(runtime < 200000);  // plus what the process's other threads took meanwhile
}

TEST_CASE("calibration: a scenario's training measured kernel by kernel", "[sim]") {
  auto sc = scenarios::parse_scenario(R"(
cluster { job { name: "ps" tasks: 1 } job { name: "worker" tasks: 1 } }
model { name: "mlp" hidden_units: [16] }
training { steps: 20 batch_size: 32 }
report { progress: OFF }
)", "calib.pbtxt");
  REQUIRE(sc.ok());
  sim::calibration_recorder r;
  std::ostringstream out;
  scenarios::run_options o;
  o.out = &out;
  o.compute_threads = 2;
  o.tracer = &r;
  auto summary = scenarios::run_scenario(*sc, o);
  INFO(out.str());
  REQUIRE(summary.ok());
  const sim::Calibration t = r.table();
  // The first layer's forward MatMul: 20 steps, two of them the warm-up.
  const auto* forward = sim::find_cost(t, "MatMul", "CPU", {"float[32,784]", "float[784,16]"},
                                       {"transpose_a=false", "transpose_b=false"});
  REQUIRE(forward != nullptr);
  CHECK(forward->count() >= 18);
  CHECK(forward->median_ns() > 0);
  CHECK(forward->min_ns() <= forward->median_ns());
  CHECK(forward->median_ns() <= forward->p90_ns());
  // Its CPU time on the two compute threads, which the compute model takes: at most
  // what two threads can spend in its wall time (and some slack for the clocks).
  CHECK(forward->median_cpu_ns() > 0);
  CHECK(forward->mean_cpu_ns() > 0);
  CHECK(forward->median_cpu_ns() < 3 * forward->p90_ns());
  // No asynchronous kernel (a _Recv waits for its tensor) is in the table.
  for (const auto& k : t.kernels()) CHECK(k.op() != "_Recv");
  // The weights went to the worker and the gradients to the ps in every step, each a
  // part of the step on both tasks.
  const auto moved = r.between_tasks();
  CHECK(moved.transfers >= 20 * 4);
  CHECK(moved.bytes >= 20 * 2 * (784 * 16 + 16 * 10) * 4);
  CHECK(moved.parts >= 20 * 2);
  // A run cannot take both a trace file and a tracer.
  o.trace_file = temp_path("troupe-calibration-trace");
  auto both = scenarios::run_scenario(*sc, o);
  REQUIRE_FALSE(both.ok());
  CHECK_THAT(both.error().message(), Catch::Contains("not both"));
}
