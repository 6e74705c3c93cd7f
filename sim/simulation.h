// simulation: a cluster run in virtual time (mode SIMULATED, doc/simulation.md).
//
//   sim::simulation_options o;  o.seed = 7;  o.network.latency_us = 50;
//   sim::simulation s(o);                     // this thread joins its world (sim/world.h)
//   actors::cluster_options co;  co.simulation = &s;  co.spec = ...;
//   auto c = actors::cluster::create(co);     // the same actors, under the world's turns
//   ... sessions, steps, env::threads ...
//   s.world().elapsed();                      // virtual time taken
//
// The compute model gives each synchronous kernel its work: the mean CPU time that
// `troupe calibrate` measured for its op, inputs and attributes when the table has it
// (on as many cores as it kept busy alone), otherwise a roofline estimate from its
// floating-point operations and the bytes it reads and writes at stated rates, plus a
// per-kernel overhead; a variable update holds its leases for the table's CPU time or its
// own estimate. The kernels running at once on a set of cores (a device's
// `cores_per_device`, or the whole cluster's `machine_cores`) share them as an operating
// system does: each gets an equal share, at most what it can keep busy; a kernel ends
// when its work is done. The network model delays every tensor sent between two tasks by
// the link's latency plus its size over the link's bandwidth (and a fixed time per
// transfer), with the transfers on one link (one direction between two tasks) sent one
// after another, plus a jitter drawn from the seed; with a network interface rate, a
// task's outgoing and incoming transfers also take turns on its interface. On one
// machine, transfers' copies and messages and the control plane's requests take its
// cores too.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/simulation.h"
#include "sim/calibration.h"
#include "sim/world.h"

namespace troupe::sim {

struct network_model {
  double latency_us = 50;      // one way, per transfer
  double bandwidth_gbps = 10;  // per link and direction, gigabits per second
  double jitter_us = 0;        // each transfer a further uniform [0, jitter_us)
  // > 0 (with compute_model::machine_cores): the tasks share one machine, whose cores
  // copy each transfer's bytes, once sending and once receiving, at this many GB/s
  // (a loopback connection's cost); the transfer arrives when both copies are done.
  double copy_gbps = 0;
  // > 0 (with compute_model::machine_cores): each transfer also costs this many
  // microseconds of one core at each end (a message's system calls and the transport's
  // own work, whatever its size).
  double message_cpu_us = 0;
  // > 0: each task's network interface, per direction, in gigabits per second: the
  // transfers leaving a task go through its egress one after another, those arriving
  // through its ingress (a PS that 200 workers talk to is limited by it, not by each
  // link). 0: only the links limit.
  double nic_gbps = 0;
  // Each transfer also holds its link (and interfaces) this long, whatever its size: the
  // transport's turn per message.
  double transfer_us = 0;
  // > 0 (with compute_model::machine_cores): each task's part of each step takes this
  // much of one core, then the latency, before it starts (the control plane between
  // processes: the client's request to the task, and its answer).
  double step_cpu_us = 0;
  // > 0 (with compute_model::machine_cores): each task's part of each step also takes
  // this much of one core, beside it (it delays nothing by itself, it only takes the
  // cores): what crowding the cluster's processes onto the machine costs beyond their
  // work (the scenario's network.process_cpu_us times the processes).
  double crowding_cpu_us = 0;
  // > 0 (with compute_model::machine_cores): a message between tasks (a transfer, and
  // with step_cpu_us a step's request) that arrives while the kernels running keep every core of the
  // machine busy waits a further time drawn from an exponential distribution of this
  // mean: its process's thread waits for the operating system to give it a core, which
  // an idle core gives at once. (Only on arrival: the links time transits from the
  // sender's first write, so a wait before it is not in the in-situ latency this is
  // calibrated against; doc/simulation.md.)
  double busy_wait_us = 0;
  // > 0 (with compute_model::machine_cores): a transfer handed to its link while the
  // kernels running keep every core busy, some of them its own task's, and the link idle,
  // starts a time drawn from an exponential distribution of this mean later (transfers
  // handed to the link meanwhile go with it): the sending process's link thread waits
  // for a core its own kernels hold. (The wait before the first write that the links'
  // timing leaves out; `troupe calibrate` measures it apart, doc/simulation.md.)
  double send_busy_wait_us = 0;
};

struct compute_model {
  std::optional<Calibration> table;  // troupe calibrate's; kernels it lacks use the rates
  double gflops = 20;                // floating-point operations, 1e9 per second
  double memory_gbps = 10;           // bytes read and written, 1e9 per second
  double kernel_overhead_us = 1;     // every kernel, on top (unless the table measured it)
  int cores_per_device = 1;          // each device's cores
  // The cores one kernel can use (TensorFlow's intra_op_parallelism_threads): a kernel of
  // w ns of work uses at most w / 20 us of them, as compute_pool::parallel_for splits it.
  int intra_op_threads = 1;
  // > 0: every device of every task takes its kernels' cores from one set of this many,
  // as tasks on one machine do (IN_PROCESS, or REAL on one machine); cores_per_device
  // is then unused.
  int machine_cores = 0;
  // > 0: each device's kernels take 1 + x times their work, x drawn from the seed from
  // an exponential distribution of this mean, drawn again for each kernel or, with
  // noise_ms > 0, for the first kernel after every noise_ms of virtual time (how real
  // machines vary: now and then a worker much slower than the others for a while, which
  // backup workers are for).
  double noise = 0;
  double noise_ms = 0;
};

// Swizzle-clogging (FoundationDB's): every `every_ms` of virtual time, `links` links
// drawn from those that carried a transfer are clogged, each for a random part of
// [clog_ms / 2, clog_ms]: they deliver nothing until they unclog (in a random order), and
// then everything they held at once. 0: off.
struct swizzle_model {
  double every_ms = 0;
  double clog_ms = 0;
  int links = 1;
};

struct simulation_options {
  std::uint64_t seed = 1;
  network_model network;
  compute_model compute;
  swizzle_model swizzle;
  bool execute_kernels = true;  // false: shape-only (actors::simulation::shape_only)
};

// The roofline estimate of a kernel of `op` on these inputs and outputs: floating-point
// operations (2mnk for MatMul, 2 per output and filter tap for convolutions, otherwise
// one per element of the outputs or of the largest input, whichever is more) and bytes
// read and written.
struct kernel_work {
  double flops = 0;
  double bytes = 0;
};
kernel_work work_of(const graph::node& node, std::span<const tensor> inputs, std::span<const tensor> outputs);

// The longest duration the models put on the virtual clock: 10^17 ns (about 3 years). A
// kernel or a transfer that would take longer (a shape-only model's product of absurd
// size, a rate near 0) takes this long, beyond any step's deadline, which then fails the
// step naming its device, instead of overflowing the clock. A NaN takes this long too, a
// negative duration none.
inline constexpr double k_longest_ns = 1e17;
std::chrono::nanoseconds virtual_duration(double ns);

class simulation final : public actors::simulation {
 public:
  explicit simulation(simulation_options o);
  ~simulation() override;

  sim::world& world() { return world_; }
  const simulation_options& options() const { return options_; }
  // How a kernel's virtual duration was found, for doc/simulation.md's tables: by the
  // calibration table, or by the rates.
  std::int64_t kernels_from_table() const { return from_table_; }
  std::int64_t kernels_from_rates() const { return from_rates_; }
  // Swizzle-clogging (options().swizzle) from now on, until stop_swizzle(); links clogged
  // so far. On the world's turn.
  void start_swizzle();
  void stop_swizzle();
  std::int64_t links_clogged() const { return clogs_; }
  // With compute_model::machine_cores: the messages between tasks that arrived (transfers
  // and, with network_model::step_cpu_us, steps' requests), and how many of them found the kernels keeping every core busy
  // (network_model::busy_wait_us).
  std::int64_t messages_arrived() const { return arrived_; }
  std::int64_t messages_arrived_busy() const { return arrived_busy_; }
  // With compute_model::machine_cores: the transfers handed to their links, and how many
  // of them found the kernels keeping every core busy, some of them the sender's, and
  // waited (network_model::send_busy_wait_us; one that joined a wait already drawn for
  // its link counts too).
  std::int64_t messages_sent() const { return sent_; }
  std::int64_t messages_sent_busy() const { return sent_busy_; }
  // A kernel of `node` on these inputs and outputs: its work (virtual nanoseconds on one
  // core) and the cores it can keep busy.
  struct kernel_cost {
    double work_ns;
    double threads;
  };
  kernel_cost kernel_cost_of(const graph::node& node, const std::string& device_type, std::span<const tensor> inputs,
                             std::span<const tensor> outputs);

  // actors::simulation
  void configure(caf::actor_system_config& config) override { world::configure(config); }
  bool shape_only() const override { return !options_.execute_kernels; }
  void attach(caf::actor_system* system) override { world_.attach(system); }
  actors::kernel_timer* timer_of(const std::string& device, const std::string& task) override;
  void transfer(const std::string& from, const std::string& to, std::int64_t bytes,
                std::function<void()> deliver) override;
  bool delay_step_start(const std::string& task, std::int64_t feed_bytes, std::function<void()> start) override;

 private:
  class machine;
  class device_timer;
  // A variable update's work (hold): the table's when it has the kernel, else its own
  // estimate.
  double held_ns(const tf::NodeDef& def, const std::string& device_type, std::span<const tensor> inputs,
                 double estimate_ns);
  // The runtime's own cost per kernel: the table's runtime_ns_per_kernel when it has
  // one, else kernel_overhead_us.
  double kernel_overhead_ns() const;
  // The cores a kernel of `work_ns` can use (intra_op_threads, in blocks of 20 us).
  double threads_for(double work_ns) const;
  // Runs `deliver` when a message reaches its task at `at`: then, or later while the
  // kernels keep every core busy (network_model::busy_wait_us).
  void arrive(env::clock::time_point at, std::function<void()> deliver);
  // Now plus a wait for a core drawn from the seed: exponential, of mean `mean_us` (> 0).
  env::clock::time_point busy_wait_from_now(double mean_us);
  const simulation_options options_;
  sim::world world_;
  struct measured {
    double cpu_ns;    // its work: CPU time (mean, else median, else wall time)
    double alone_ns;  // mean wall time alone; 0 when not measured
  };
  std::unordered_map<std::string, measured> table_;  // by op, device, inputs and attributes
  // The table's entry for node `def` on these inputs (counted in kernels_from_table), or
  // null (counted in kernels_from_rates).
  const measured* measured_of(const tf::NodeDef& def, const std::string& device_type, std::span<const tensor> inputs);
  std::map<std::string, std::unique_ptr<device_timer>> timers_;  // by device
  std::unique_ptr<machine> shared_;                // compute_model::machine_cores' cores
  std::vector<std::unique_ptr<machine>> own_;      // else each device's
  std::map<std::pair<std::string, std::string>, env::clock::time_point> links_free_;  // (from, to): the link is busy until
  std::map<std::string, env::clock::time_point> egress_free_, ingress_free_;  // by task (network_model::nic_gbps)
  std::int64_t from_table_ = 0, from_rates_ = 0;
  std::int64_t arrived_ = 0, arrived_busy_ = 0;
  std::int64_t sent_ = 0, sent_busy_ = 0;
  // network_model::send_busy_wait_us: until when a link's thread waits for a core.
  std::map<std::pair<std::string, std::string>, env::clock::time_point> link_wakes_;
  // A task's number on the shared machine (its kernels' jobs are tagged with it).
  int task_number(const std::string& task);
  std::map<std::string, int> task_numbers_;
  // Swizzle-clogging: clogged links and until when; whether it is on, whether its next
  // round is scheduled (a round is scheduled only while transfers come, so that a run
  // with nothing moving still ends as one that can never go on), the clogs so far.
  void swizzle_round();
  std::map<std::pair<std::string, std::string>, env::clock::time_point> clogged_until_;
  bool swizzling_ = false, swizzle_scheduled_ = false;
  bool moved_since_round_ = false;
  std::int64_t clogs_ = 0;
};

}  // namespace troupe::sim
