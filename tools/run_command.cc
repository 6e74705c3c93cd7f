// troupe run SCENARIO [--steps N] [--trace FILE.json] [--summary FILE.json] [--no-faults]
// troupe calibrate SCENARIO [--steps N] [--out FILE.json]
// troupe graph dot SCENARIO|GRAPH.pbtxt|GRAPH.pb [--worker N] [--out FILE.dot]
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "cluster/loopback_probe.h"
#include "core/cpu_time.h"
#include "core/file.h"
#include "core/spin_wait.h"
#include "graph/graph_io.h"
#include "placement/graph_dot.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"
#include "scenarios/summary.h"
#include "sim/calibration.h"
#include "core/thread_pool.h"
#include "tools/commands.h"

namespace troupe::tools {

namespace {

// A scenario by path, or by the name of an example ("default" is scenarios/default.pbtxt).
// The loader's notes go to `err`.
result<scenario::Scenario> find_scenario(const std::string& arg, std::ostream& err) {
  std::vector<std::string> notes;
  std::string path = arg;
  std::ifstream probe(arg);
  if (!probe && arg.find('/') == std::string::npos) {
    std::string name = arg.ends_with(".pbtxt") ? arg : arg + ".pbtxt";
    std::string example = scenarios::examples_dir() + "/" + name;
    if (std::ifstream(example)) path = example;
  }
  auto s = scenarios::load_scenario(path, &notes);
  for (const auto& n : notes) err << "note: " << n << "\n";
  return s;
}

bool parse_int(const std::string& s, std::int64_t* out) {
  try {
    std::size_t used = 0;
    *out = std::stoll(s, &used);
    return used == s.size();
  } catch (...) {
    return false;
  }
}

}  // namespace

int run_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  constexpr const char* usage =
      "usage: troupe run SCENARIO.pbtxt|NAME [--steps N] [--trace FILE.json] [--summary FILE.json] [--no-faults]\n";
  std::string path, summary_file;
  scenarios::run_options options;
  options.out = &out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if ((a == "--steps" || a == "--trace" || a == "--summary") && i + 1 >= args.size()) {
      err << "troupe run: " << a << " needs a value\n" << usage;
      return 2;
    }
    if (a == "--steps") {
      if (!parse_int(args[++i], &options.steps) || options.steps <= 0) {
        err << "troupe run: --steps wants a positive integer, not '" << args[i] << "'\n";
        return 2;
      }
    } else if (a == "--trace") {
      options.trace_file = args[++i];
    } else if (a == "--summary") {
      summary_file = args[++i];
    } else if (a == "--no-faults") {
      options.no_faults = true;
    } else if (a.starts_with("-")) {
      err << "troupe run: unknown option '" << a << "'\n" << usage;
      return 2;
    } else if (path.empty()) {
      path = a;
    } else {
      err << "troupe run: one scenario at a time ('" << path << "' and '" << a << "')\n" << usage;
      return 2;
    }
  }
  if (path.empty()) {
    err << usage;
    return 2;
  }
  auto sc = find_scenario(path, err);
  if (!sc.ok()) {
    err << sc.error().message() << "\n";
    return 1;
  }
  auto started = std::chrono::steady_clock::now();
  auto summary = scenarios::run_scenario(*sc, options);
  if (!summary_file.empty()) {
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    auto json = scenarios::summary_json(scenarios::make_run_summary(
        *sc, summary.ok() ? &*summary : nullptr, summary.ok() ? status() : summary.error(), wall));
    status written = json.ok() ? write_file(summary_file, *json) : json.error();
    if (!written.ok()) {
      err << "troupe run: --summary " << summary_file << ": " << written.to_string() << "\n";
      return 1;
    }
  }
  if (!summary.ok()) {
    err << "troupe run: " << summary.error().to_string() << "\n";
    return 1;
  }
  if (!summary->expectations_met) {
    err << "troupe run: expectation not met: " << summary->expectation_report << "\n";
    return 1;
  }
  return 0;
}

namespace {

// The CPU's model name, as /proc/cpuinfo says it ("" when it does not).
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return {};
}

// The job of the scenario's workers (cluster.worker_job, which loading fills in), or null.
scenario::Cluster::Job* worker_job_of(scenario::Scenario& s) {
  for (auto& job : *s.mutable_cluster()->mutable_job()) {
    if (job.name() == s.cluster().worker_job()) return &job;
  }
  return nullptr;
}

// Loopback's in-situ fields (sim/calibration.proto): from the CPU time per global step of
// the scenario's processes in mode REAL and of the one process in IN_PROCESS, and what an
// IN_PROCESS step moved between tasks over `steps` global steps.
void in_situ_costs(sim::Loopback& l, double real_us, double in_process_us,
                   const sim::calibration_recorder::traffic& moved, std::int64_t steps, std::ostream& out) {
  l.set_message_cpu_quiet_us(l.message_cpu_us());
  if (real_us <= 0 || in_process_us <= 0 || steps <= 0) {
    out << "calibrate: (no steady state measured in both modes: message_cpu_us stays the probe's)\n";
    return;
  }
  const double n = static_cast<double>(steps);
  l.set_real_cpu_us_per_step(real_us);
  l.set_in_process_cpu_us_per_step(in_process_us);
  l.set_transfers_per_step(static_cast<double>(moved.transfers) / n);
  l.set_bytes_per_step(static_cast<double>(moved.bytes) / n);
  l.set_parts_per_step(static_cast<double>(moved.parts) / n);
  // What more processes cost: the growth of the CPU per global step with three times the
  // workers, per part of a step and process added.
  if (l.real_cpu_us_per_step_crowded() > 0 && l.crowded_processes() > l.processes() && l.parts_per_step() > 0) {
    l.set_process_cpu_us(std::max(0.0, (l.real_cpu_us_per_step_crowded() - real_us) / l.parts_per_step() /
                                           (l.crowded_processes() - l.processes())));
  }
  // Both ends of each transfer: what REAL costs more, less the copies and the parts'
  // control plane (with the crowding of the scenario's processes) that the model
  // already charges.
  const double copies_us = l.copy_gbps() > 0 ? 2 * l.bytes_per_step() / l.copy_gbps() / 1e3 : 0;
  const double part_us = l.step_cpu_us() + l.process_cpu_us() * l.processes();
  const double rest_us = real_us - in_process_us - copies_us - l.parts_per_step() * part_us;
  if (l.transfers_per_step() > 0) l.set_message_cpu_us(std::max(l.message_cpu_quiet_us(), rest_us / (2 * l.transfers_per_step())));
  out << "calibrate: CPU per global step " << real_us << " us in mode REAL, " << in_process_us << " us in process; "
      << l.transfers_per_step() << " transfers (" << l.bytes_per_step() << " bytes) and " << l.parts_per_step()
      << " parts of steps per step: message_cpu_us " << l.message_cpu_us() << " in situ (" << l.message_cpu_quiet_us()
      << " between idle servers)\n";
  if (l.crowded_processes() > 0) {
    out << "calibrate: CPU per global step " << l.real_cpu_us_per_step_crowded() << " us with " << l.crowded_processes()
        << " processes against " << real_us << " with " << l.processes() << ": process_cpu_us " << l.process_cpu_us()
        << " per part of a step and process\n";
  }
}

// Loopback's latency in situ (sim/calibration.proto) from the links' transits of a REAL
// run of the scenario.
void in_situ_latency(sim::Loopback& l, const sim::calibration_recorder::transits& t, std::ostream& out) {
  l.set_latency_quiet_us(l.latency_us());
  if (t.count == 0) {
    out << "calibrate: (no transits between the servers timed: latency_us stays the probe's)\n";
    return;
  }
  l.set_transits(t.count);
  l.set_transit_mean_us(t.mean_us);
  l.set_transit_mean_bytes(t.mean_bytes);
  const double wire_us = l.bandwidth_gbps() > 0 ? t.mean_bytes * 8 / (l.bandwidth_gbps() * 1e3) : 0;
  l.set_latency_us(std::max(l.latency_quiet_us(), t.mean_us - wire_us));
  l.set_send_waits(t.send_waits);
  l.set_send_wait_us(t.send_wait_us);
  out << "calibrate: " << t.count << " transits between the servers, " << t.mean_us << " us for " << t.mean_bytes
      << " bytes on average (fitted: " << t.latency_us << " us + bytes at " << t.bandwidth_gbps
      << " Gb/s): latency_us " << l.latency_us() << " in situ (" << l.latency_quiet_us() << " between idle servers)\n";
  out << "calibrate: " << t.send_waits << " of them paired with their hand-offs: the senders waited " << t.send_wait_us
      << " us on average before the first write, beyond their link's turn\n";
}

// Loopback's busy_wait_us and send_busy_wait_us (sim/calibration.proto): the scenario
// `in_process` simulated with `table` (complete but for these: its kernels' times alone
// say how many cores each keeps busy; shape-only, the kernels' times come from the table
// by their shapes), its links at the quiet latency and `l`'s other costs, on this
// machine's cores and the compute pool's `threads`: the share of its messages that arrive
// while the kernels keep every core busy and the share of its transfers handed over
// while they do, some of them the sender's; the waits that give them the in-situ
// latency's excess and the senders' measured wait on average. The waits move the
// messages (one that waits finds the cores busier, and so do the ones behind it), so
// both are found as one fixed point: from the targets over the shares without waits,
// then three times halfway to the targets over the shares with them; a last simulation
// with the waits found gives the shares kept. (Simulated also without a target: the
// shares say how loaded the scenario keeps the cores.)
void in_situ_waits(sim::Loopback& l, const sim::Calibration& table, const scenario::Scenario& in_process,
                   std::int64_t steps, int threads, std::ostream& out) {
  constexpr double k_max_wait_us = 1e6;  // network.busy_wait_us's and send_busy_wait_us's range
  struct waits {
    double arrive_us = 0, send_us = 0;
  };
  struct shares {
    double arrived = -1, sent = -1;  // < 0: the scenario could not be simulated
  };
  const waits target{std::max(0.0, l.latency_us() - l.latency_quiet_us()), std::max(0.0, l.send_wait_us())};
  // The simulation's network: the links at the quiet latency, `w` for busy cores.
  auto network = [&l](const waits& w) {
    return str_cat("network { latency_us: ", l.latency_quiet_us(), " transfer_us: ", l.transfer_us(),
                   " bandwidth_gbps: ", l.bandwidth_gbps(), " copy_gbps: ", l.copy_gbps(),
                   " message_cpu_us: ", l.message_cpu_us(), " step_cpu_us: ", l.step_cpu_us(),
                   " process_cpu_us: ", l.process_cpu_us(), " busy_wait_us: ", w.arrive_us,
                   " send_busy_wait_us: ", w.send_us, " }");
  };
  const std::string cores = str_cat("machine_cores: ", std::thread::hardware_concurrency(), " intra_op_threads: ", threads);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / str_cat("troupe-calibrate-", ::getpid(), ".json");
  struct removed {
    const std::filesystem::path& path;
    ~removed() {
      std::error_code ignored;
      std::filesystem::remove(path, ignored);
    }
  } cleanup{path};
  sim::Calibration t = table;
  *t.mutable_loopback() = l;
  if (status s = sim::save_calibration(t, path.string()); !s.ok()) {
    out << "calibrate: (" << s.to_string() << ": busy_wait_us and send_busy_wait_us 0)\n";
    return;
  }
  scenario::Scenario s = in_process;
  s.mutable_cluster()->set_mode(scenario::Cluster::SIMULATED);
  s.clear_simulation();
  s.mutable_training()->set_eval_every(0);  // shape-only: nothing to evaluate
  auto shares_with = [&](const waits& w) -> shares {
    const std::string text = str_cat(scenarios::scenario_to_text(s), "\nsimulation { seed: 1 execute_kernels: false ",
                                     network(w), " compute { table: \"", path.string(), "\" ", cores, " } }\n");
    auto simulated = scenarios::parse_scenario(text, "calibrate's simulation");
    std::ostringstream quiet;
    scenarios::run_options o;
    o.out = &quiet;
    o.steps = steps;
    auto summary = simulated.ok() ? scenarios::run_scenario(*simulated, o) : result<scenarios::run_summary>(simulated.error());
    if (!summary.ok() || summary->messages_arrived <= 0 || summary->messages_sent <= 0) {
      out << "calibrate: (" << (!summary.ok() ? summary.error().to_string() : std::string("no message simulated"))
          << ": busy_wait_us and send_busy_wait_us 0)\n";
      return {};
    }
    out << "calibrate: simulated with busy_wait_us " << w.arrive_us << " and send_busy_wait_us " << w.send_us << ": "
        << summary->messages_arrived_busy << " of " << summary->messages_arrived
        << " messages arrived while the kernels kept every core busy, " << summary->messages_sent_busy << " of "
        << summary->messages_sent << " transfers were handed over while they did, some of them the sender's\n";
    return {static_cast<double>(summary->messages_arrived_busy) / static_cast<double>(summary->messages_arrived),
            static_cast<double>(summary->messages_sent_busy) / static_cast<double>(summary->messages_sent)};
  };
  // Halfway from wait `w` to `goal` over `share` (all the way from 0).
  auto toward = [&](double w, double goal, double share) {
    if (goal <= 0 || share <= 0) return w;  // (no target, or the waits took every message off the busy times)
    return std::min(k_max_wait_us, w > 0 ? (w + goal / share) / 2 : goal / share);
  };
  shares sh = shares_with({});
  if (sh.arrived < 0) return;
  l.set_busy_share(sh.arrived);
  l.set_send_busy_share(sh.sent);
  waits w;
  for (int round = 0; round < 4; ++round) {
    const waits next{toward(w.arrive_us, target.arrive_us, sh.arrived), toward(w.send_us, target.send_us, sh.sent)};
    if (next.arrive_us == w.arrive_us && next.send_us == w.send_us) break;
    w = next;
    sh = shares_with(w);
    if (sh.arrived < 0) return;
  }
  l.set_busy_wait_us(w.arrive_us);
  l.set_busy_share(sh.arrived);
  l.set_send_busy_wait_us(w.send_us);
  l.set_send_busy_share(sh.sent);
  out << "calibrate: busy_wait_us " << w.arrive_us << ": the in-situ latency's " << target.arrive_us
      << " us over the quiet one (" << l.latency_quiet_us() << "), on " << 100 * sh.arrived << "% of the messages ("
      << w.arrive_us * sh.arrived << " us on average)\n";
  out << "calibrate: send_busy_wait_us " << w.send_us << ": the senders' " << target.send_us << " us on "
      << 100 * sh.sent << "% of the transfers (" << w.send_us * sh.sent << " us on average)\n";
  out << "calibrate: for the simulation: " << network(w) << " compute { " << cores << " }\n";
}

// What transfers between this machine's processes cost, for the network model of a REAL
// cluster's simulation (troupe calibrate); null when they could not be measured (said on
// `err`).
std::optional<sim::Loopback> loopback_of(const scenario::Cluster& c, std::ostream& out, std::ostream& err) {
  out << "calibrate: measuring transfers between two server processes on loopback"
      << (c.tls() ? " (mutual TLS)" : "") << "\n";
  if (scenarios::servers_by_hand(c)) {
    out << "calibrate: (this machine's loopback, not the network between the scenario's addresses: set that "
           "network's latency and bandwidth in the simulation yourself)\n";
  }
  std::error_code failed;
  const std::string dir = (std::filesystem::temp_directory_path() / str_cat("troupe-calibrate-", ::getpid())).string();
  std::filesystem::create_directories(dir, failed);
  cluster::loopback_probe_options po;
  po.executable = std::filesystem::read_symlink("/proc/self/exe", failed).string();
  po.dir = dir;
  po.tls = c.tls();
  auto costs = cluster::measure_loopback(po);
  std::filesystem::remove_all(dir, failed);
  if (!costs.ok()) {
    err << "troupe calibrate: " << costs.error().to_string() << "\n";
    return std::nullopt;
  }
  sim::Loopback l;
  l.set_latency_us(costs->latency_us);
  l.set_transfer_us(costs->transfer_us);
  l.set_bandwidth_gbps(costs->bandwidth_gbps);
  l.set_message_cpu_us(costs->message_cpu_us);
  l.set_copy_gbps(costs->copy_gbps);
  l.set_step_cpu_us(costs->step_cpu_us);
  l.set_null_step_us(costs->null_step_us);
  out << "calibrate: loopback: network { latency_us: " << costs->latency_us << " transfer_us: " << costs->transfer_us
      << " bandwidth_gbps: " << costs->bandwidth_gbps << " copy_gbps: " << costs->copy_gbps
      << " message_cpu_us: " << costs->message_cpu_us << " step_cpu_us: " << costs->step_cpu_us << " } ("
      << costs->steps << " steps; a null step " << costs->null_step_us << " us)\n";
  return l;
}

}  // namespace

int calibrate_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  constexpr const char* usage = "usage: troupe calibrate SCENARIO.pbtxt|NAME [--steps N] [--out FILE.json]\n";
  std::string path, output_file = "calibration.json";
  std::int64_t steps = 200;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if ((a == "--steps" || a == "--out") && i + 1 >= args.size()) {
      err << "troupe calibrate: " << a << " needs a value\n" << usage;
      return 2;
    }
    if (a == "--steps") {
      if (!parse_int(args[++i], &steps) || steps <= 0) {
        err << "troupe calibrate: --steps wants a positive integer, not '" << args[i] << "'\n";
        return 2;
      }
    } else if (a == "--out") {
      output_file = args[++i];
    } else if (path.empty() && !a.starts_with("-")) {
      path = a;
    } else {
      err << "troupe calibrate: unexpected '" << a << "'\n" << usage;
      return 2;
    }
  }
  if (path.empty()) {
    err << usage;
    return 2;
  }
  auto sc = find_scenario(path, err);
  if (!sc.ok()) {
    err << sc.error().message() << "\n";
    return 1;
  }
  // The model's kernels as they run in training, in this process: no faults, checkpoints,
  // trace or expectations, and a real cluster's tasks in this process.
  if (sc->cluster().mode() == scenario::Cluster::SIMULATED) {
    out << "calibrate: the cluster's tasks run in this process in real time (the kernels' real durations)\n";
    sc->mutable_cluster()->set_mode(scenario::Cluster::IN_PROCESS);
    sc->clear_simulation();
  }
  std::optional<sim::Loopback> loopback;
  // A REAL scenario whose servers this process starts: trained that way too (its
  // processes' CPU time per step, Loopback::real_cpu_us_per_step).
  std::optional<scenario::Scenario> real;
  if (sc->cluster().mode() == scenario::Cluster::REAL) {
    loopback = loopback_of(sc->cluster(), out, err);
    if (!loopback) return 1;
    if (!scenarios::servers_by_hand(sc->cluster())) real = *sc;
    out << "calibrate: the cluster's tasks run in this process (mode REAL measures the same kernels)\n";
    sc->mutable_cluster()->set_mode(scenario::Cluster::IN_PROCESS);
    sc->mutable_cluster()->clear_cluster_file();
    sc->mutable_cluster()->set_tls(false);
    for (auto& job : *sc->mutable_cluster()->mutable_job()) job.clear_addresses();
  }
  for (scenario::Scenario* s : {&*sc, real ? &*real : nullptr}) {
    if (s == nullptr) continue;
    s->clear_faults();
    s->clear_checkpoint();
    s->mutable_report()->clear_trace_file();
    s->mutable_report()->clear_expect();
  }
  scenarios::run_options options;
  options.out = &out;
  options.steps = steps;
  options.compute_threads = default_num_threads();
  // Runs `s` with the recorder as tracer: the recorder's table, or the error printed.
  std::optional<std::int64_t> steps_run;
  // The steady state: from a quarter of the steps (first-touch allocations, libraries
  // timed once, caches and the memory pools filling) to the last (not the evaluation).
  const std::int64_t from_step = std::max<std::int64_t>(1, steps / 4);
  // The CPU time `cpu` counted over the steady state, per global step (0: no window).
  struct cpu_window {
    std::mutex mutex;
    std::optional<std::pair<double, std::int64_t>> start, end;  // CPU ns, global step
    double per_step_us() const {
      if (!start || !end || end->second <= start->second) return 0;
      return (end->first - start->first) / 1e3 / static_cast<double>(end->second - start->second);
    }
  };
  // `workers_times` > 1: a run with that many times the scenario's workers, whose
  // workers each reach the steady state at that many times the global steps: its window
  // opens at from_step times it, and is as long as the others'.
  auto run_window = [&](const scenario::Scenario& s, sim::calibration_recorder* recorder, cpu_window& window,
                        const std::function<double()>& cpu, std::int64_t workers_times = 1) -> bool {
    const std::int64_t from = from_step * workers_times, to = steps + from - from_step;
    options.tracer = recorder;
    options.steps = to;
    options.on_step = [&, from, to](std::int64_t step) {
      std::lock_guard<std::mutex> lock(window.mutex);
      if (step >= to) {
        if (window.start && !window.end) window.end.emplace(cpu(), step);
        if (recorder != nullptr) recorder->pause();
      } else if (step >= from && !window.end) {
        if (!window.start) window.start.emplace(cpu(), step);
        if (recorder != nullptr) recorder->resume();
      }
    };
    auto summary = scenarios::run_scenario(s, options);
    options.tracer = nullptr;
    options.on_step = nullptr;
    options.steps = steps;
    if (!summary.ok()) {
      err << "troupe calibrate: " << summary.error().to_string() << "\n";
      return false;
    }
    if (!steps_run) steps_run = summary->steps;
    return true;
  };
  // The least CPU per global step of `s` and, when given, of `crowded` (three times its
  // workers), untraced, each run three times, alternating: a busy host only adds CPU time
  // to a run, so the least is the steadiest figure (the means of two gave the crowding
  // of tasks 1.5 to 37.5 us and that of processes 24 to 47 us in calibrations minutes
  // apart on 2-core VMs). A figure is 0 when one of its runs measured no steady state;
  // nullopt when a run failed (said on err).
  struct least_cpu {
    double base_us = 0, crowded_us = 0;
  };
  auto least_alternating = [&](const scenario::Scenario& s, const scenario::Scenario* crowded,
                               const std::function<double()>& cpu) -> std::optional<least_cpu> {
    least_cpu out;
    bool base_ok = true, crowded_ok = crowded != nullptr;
    const auto least = [](double kept, double us) { return kept > 0 ? std::min(kept, us) : us; };
    for (int r = 0; r < 3; ++r) {
      cpu_window base;
      if (!run_window(s, nullptr, base, cpu)) return std::nullopt;
      base_ok = base_ok && base.per_step_us() > 0;
      out.base_us = least(out.base_us, base.per_step_us());
      if (crowded == nullptr) continue;
      cpu_window more;
      if (!run_window(*crowded, nullptr, more, cpu, 3)) return std::nullopt;
      crowded_ok = crowded_ok && more.per_step_us() > 0;
      out.crowded_us = least(out.crowded_us, more.per_step_us());
    }
    if (!base_ok) out.base_us = 0;
    if (!crowded_ok) out.crowded_us = 0;
    return out;
  };
  auto measure = [&](const scenario::Scenario& s, cpu_window& window, sim::calibration_recorder::traffic* moved,
                     sim::calibration_recorder::kernel_runs* runs) -> std::optional<sim::Calibration> {
    sim::calibration_recorder recorder;
    recorder.pause();
    if (!run_window(s, &recorder, window, working_cpu_ns)) return std::nullopt;
    if (moved != nullptr) *moved = recorder.between_tasks();
    if (runs != nullptr) *runs = recorder.kernels_run();
    return recorder.table();
  };
  // The traced run: the table's kernels, what a step moves between tasks, the kernels run,
  // its CPU per global step and the steps of its window.
  struct traced_run {
    sim::Calibration table;
    sim::calibration_recorder::traffic moved;
    sim::calibration_recorder::kernel_runs runs;
    double us = 0;
    std::int64_t steps = 0;
  };
  auto trace = [&]() -> std::optional<traced_run> {
    cpu_window window;
    traced_run r;
    auto t = measure(*sc, window, &r.moved, &r.runs);
    if (!t) return std::nullopt;
    r.table = std::move(*t);
    r.us = window.per_step_us();
    r.steps = window.end && window.start ? window.end->second - window.start->second : 0;
    return r;
  };
  auto traced = trace();
  if (!traced) return 1;
  // The same training without the recorder (whose metering of every kernel costs CPU
  // too): the CPU per step that the table's kernels and runtime must add up to.
  out << "calibrate: again without the recorder, the CPU time per step\n";
  bool failed = false;
  const double untraced_us = sim::untraced_cpu_us_per_step(
      traced->us,
      [&] {
        cpu_window in_process;
        if (failed || !run_window(*sc, nullptr, in_process, working_cpu_ns)) {
          failed = true;
          return 0.0;
        }
        return in_process.per_step_us();
      },
      3,
      [&](double us) {
        out << "calibrate: " << us << " us of CPU per step untraced, more than traced (" << traced->us
            << "): the machine slowed between the runs; measured again\n";
      });
  if (failed) return 1;
  // A machine slow while it was traced slows the table's kernels: traced again, at most
  // twice, the run of least CPU per step kept.
  for (int again = 0; again < 2 && sim::traced_while_slow(traced->us, untraced_us); ++again) {
    out << "calibrate: " << traced->us << " us of CPU per step traced against " << untraced_us
        << " untraced: the machine was slow while it was traced; traced again\n";
    auto retraced = trace();
    if (!retraced) return 1;
    if (retraced->us > 0 && retraced->us < traced->us) traced = std::move(retraced);
  }
  sim::Calibration table = std::move(traced->table);
  const auto& moved = traced->moved;
  const auto& runs = traced->runs;
  const double traced_us = traced->us;
  const std::int64_t traced_steps = traced->steps;
  if (untraced_us > traced_us && traced_us > 0) {
    out << "calibrate: warning: untraced still above traced after 3 runs: this machine's speed is drifting; "
           "runtime_ns_per_kernel is kept at most the traced run's, and simulations from this table may be off\n";
  } else if (sim::traced_while_slow(traced_us, untraced_us)) {
    out << "calibrate: warning: traced still " << traced_us / untraced_us
        << " times the untraced CPU per step after 3 runs: this machine's speed is drifting; the table's kernels "
           "may be slow\n";
  }
  if (sim::set_runtime_untraced(table, runs, traced_steps, untraced_us)) {
    out << "calibrate: CPU per global step " << table.cpu_us_per_step() << " us untraced ("
        << traced_us << " traced), " << table.kernels_per_step()
        << " kernels per step: runtime_ns_per_kernel " << table.runtime_ns_per_kernel() << " ("
        << table.runtime_traced_ns_per_kernel() << " traced)\n";
  } else {
    out << "calibrate: (no steady state measured untraced: runtime_ns_per_kernel stays the traced run's)\n";
  }
  // The crowding of tasks in one process: the least CPU per global step of the scenario
  // untraced again and with three times its workers (least_alternating); the growth per
  // part of a step and task added: task_cpu_us (ASYNC only: under SYNC a global step of
  // three times the workers is three times the work).
  table.set_tasks(scenarios::num_tasks(sc->cluster()));
  if (auto* w = worker_job_of(*sc); w == nullptr || sc->training().replication() == scenario::Training::SYNC ||
                                    moved.parts <= 0 || traced_steps <= 0) {
    out << "calibrate: (SYNC, or no parts of steps counted: the crowding of tasks is not measured; task_cpu_us "
           "stays 0)\n";
  } else {
    scenario::Scenario more = *sc;
    worker_job_of(more)->set_tasks(3 * w->tasks());
    out << "calibrate: again in process, as it is and with " << 3 * w->tasks()
        << " workers (the crowding of tasks), each three times\n";
    const auto least = least_alternating(*sc, &more, working_cpu_ns);
    if (!least) return 1;
    const double uncrowded_us = least->base_us, crowded_us = least->crowded_us;
    if (uncrowded_us > 0 && crowded_us > 0) {
      table.set_uncrowded_cpu_us_per_step(uncrowded_us);
      table.set_crowded_cpu_us_per_step(crowded_us);
      table.set_crowded_tasks(table.tasks() + 2 * w->tasks());
      table.set_parts_per_step(static_cast<double>(moved.parts) / static_cast<double>(traced_steps));
      table.set_task_cpu_us(std::max(0.0, (crowded_us - uncrowded_us) / table.parts_per_step() / (2 * w->tasks())));
      out << "calibrate: CPU per global step " << crowded_us << " us in process with " << table.crowded_tasks()
          << " tasks against " << uncrowded_us << " with " << table.tasks() << ", " << table.parts_per_step()
          << " parts of steps per step: task_cpu_us " << table.task_cpu_us() << " per part of a step and task\n";
    } else {
      out << "calibrate: (no steady state measured with more workers: task_cpu_us stays 0)\n";
    }
  }
  if (real && loopback) {
    // Mode REAL without the recorder, as the run in process just above.
    out << "calibrate: again in mode REAL, the processes' CPU time per step\n";
    // Mode REAL, and with three times the workers (what more processes on the cores
    // cost): the least of three runs each (least_alternating; the machine drifts between
    // runs by about as much as the crowding costs). (ASYNC only: under SYNC a global step
    // of three times the workers is three times the work.)
    std::optional<scenario::Scenario> more;
    auto* workers = worker_job_of(*real);
    if (workers != nullptr && real->training().replication() == scenario::Training::SYNC) {
      out << "calibrate: (SYNC: the crowding of processes is not measured; process_cpu_us stays 0)\n";
    } else if (workers != nullptr) {
      more = *real;
      const int tasks = scenarios::num_tasks(real->cluster());
      worker_job_of(*more)->set_tasks(3 * workers->tasks());
      out << "calibrate: and in mode REAL with " << 3 * workers->tasks()
          << " workers (the crowding of processes), each three times\n";
      loopback->set_processes(tasks + 1);
      loopback->set_crowded_processes(tasks + 2 * workers->tasks() + 1);
    }
    const auto real_cpu = [] { return working_cpu_ns() + children_cpu_ns(); };
    const auto least = least_alternating(*real, more ? &*more : nullptr, real_cpu);
    if (!least) return 1;
    if (least->crowded_us > 0) loopback->set_real_cpu_us_per_step_crowded(least->crowded_us);
    in_situ_costs(*loopback, least->base_us, untraced_us, moved, traced_steps, out);
    // Once more traced (its servers time their links): the transits of the steady state.
    out << "calibrate: again in mode REAL, the links' transits\n";
    sim::calibration_recorder links;
    links.pause();
    cpu_window unused;
    if (!run_window(*real, &links, unused, [] { return 0.0; })) return 1;
    in_situ_latency(*loopback, links.link_transits(), out);
  }
  // Each kernel alone: with one worker task no other worker's kernels want the cores, so
  // its wall time says how many cores it keeps busy (KernelCost::alone_ns).
  const scenario::Scenario as_trained = *sc;  // (the pass alone changes its workers)
  auto* workers = worker_job_of(*sc);
  if (workers != nullptr && workers->tasks() > 1) {
    out << "calibrate: again with one worker task, each kernel alone\n";
    workers->set_tasks(1);
    sc->mutable_training()->clear_backup_workers();
    cpu_window unused;
    auto alone = measure(*sc, unused, nullptr, nullptr);
    if (!alone) return 1;
    sim::add_alone_times(table, *alone);
  } else {
    sim::add_alone_times(table, table);
  }
  table.set_scenario(sc->name());
  table.set_machine(cpu_model());
  table.set_cores(static_cast<std::int32_t>(std::thread::hardware_concurrency()));
  table.set_compute_threads(options.compute_threads);
  table.set_steps(*steps_run);
  if (loopback) *table.mutable_loopback() = *loopback;
  table.set_skipped_per_kernel(sim::calibration_recorder::k_skipped_per_kernel);
  if (status s = sim::save_calibration(table, output_file); !s.ok()) {
    err << "troupe calibrate: " << s.to_string() << "\n";
    return 1;
  }
  // Last, with the table complete (saved first: what was measured stays, whatever the
  // simulation does): the wait of messages that find the cores busy.
  if (real && loopback) {
    out << "calibrate: the scenario simulated, the messages that find every core busy\n";
    in_situ_waits(*loopback, table, as_trained, steps, options.compute_threads, out);
    *table.mutable_loopback() = *loopback;
    if (status s = sim::save_calibration(table, output_file); !s.ok()) {
      err << "troupe calibrate: " << s.to_string() << "\n";
      return 1;
    }
  }
  out << "calibration: " << table.kernels_size() << " kernels (by op and input shapes) of " << *steps_run
      << " steps -> " << output_file << "\n";
  return 0;
}

int graph_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  constexpr const char* usage =
      "usage: troupe graph dot SCENARIO.pbtxt|NAME|GRAPH.pbtxt|GRAPH.pb [--worker N] [--out FILE.dot]\n";
  if (args.empty() || args[0] != "dot") {
    err << usage;
    return 2;
  }
  std::string input, output_file;
  std::int64_t worker = 0;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if ((a == "--worker" || a == "--out") && i + 1 >= args.size()) {
      err << "troupe graph dot: " << a << " needs a value\n" << usage;
      return 2;
    }
    if (a == "--worker") {
      if (!parse_int(args[++i], &worker) || worker < 0) {
        err << "troupe graph dot: --worker wants a task index, not '" << args[i] << "'\n";
        return 2;
      }
    } else if (a == "--out") {
      output_file = args[++i];
    } else if (input.empty() && !a.starts_with("-")) {
      input = a;
    } else {
      err << "troupe graph dot: unexpected '" << a << "'\n" << usage;
      return 2;
    }
  }
  if (input.empty()) {
    err << usage;
    return 2;
  }
  std::string dot;
  // A scenario names a model to build; anything else is read as a GraphDef.
  std::ostringstream notes;  // a GraphDef is not a scenario: no notes then
  auto sc = find_scenario(input, notes);
  if (sc.ok()) {
    auto d = scenarios::scenario_dot(*sc, static_cast<int>(worker));
    if (!d.ok()) {
      err << "troupe graph dot: " << d.error().to_string() << "\n";
      return 1;
    }
    dot = std::move(*d);
  } else {
    auto def = graph::read_graph_def(input);
    if (!def.ok()) {
      err << "troupe graph dot: '" << input << "' is neither a scenario (" << sc.error().message()
          << ") nor a GraphDef (" << def.error().message() << ")\n";
      return 1;
    }
    dot = placement::graph_def_to_dot(*def);
  }
  if (output_file.empty()) {
    out << dot;
    return 0;
  }
  status s = write_file(output_file, dot);
  if (!s.ok()) {
    err << "troupe graph dot: " << s.to_string() << "\n";
    return 1;
  }
  out << "wrote " << output_file << "\n";
  return 0;
}

}  // namespace troupe::tools
