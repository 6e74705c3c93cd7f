// simulation: a cluster run in virtual time (mode SIMULATED, doc/simulation.md).
//
//   sim::simulation_options o;  o.seed = 7;  o.network.latency_us = 50;
//   sim::simulation s(o);                     // this thread joins its world (sim/world.h)
//   actors::cluster_options co;  co.simulation = &s;  co.spec = ...;
//   auto c = actors::cluster::create(co);     // the same actors, under the world's turns
//   ... sessions, steps, env::threads ...
//   s.world().elapsed();                      // virtual time taken
//
// The compute model gives each synchronous kernel a virtual duration: the median that
// `troupe calibrate` measured for its op, inputs and attributes when the table has it,
// otherwise a roofline estimate from its floating-point operations and the bytes it
// reads and writes at stated rates. A device runs its kernels on `cores_per_device`
// virtual cores: a kernel starts when one is free. The network model delays every tensor
// sent between two tasks by the link's latency plus its size over the link's bandwidth,
// with the transfers on one link (one direction between two tasks) sent one after
// another, plus a jitter drawn from the seed.
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
};

struct compute_model {
  std::optional<Calibration> table;  // troupe calibrate's; kernels it lacks use the rates
  double gflops = 20;                // floating-point operations, 1e9 per second
  double memory_gbps = 10;           // bytes read and written, 1e9 per second
  double kernel_overhead_us = 1;     // every kernel, on top
  int cores_per_device = 1;          // kernels a device runs at once
};

struct simulation_options {
  std::uint64_t seed = 1;
  network_model network;
  compute_model compute;
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
  // The virtual nanoseconds of a kernel of `node` on these inputs and outputs.
  double kernel_ns(const graph::node& node, const std::string& device_type, std::span<const tensor> inputs,
                   std::span<const tensor> outputs);

  // actors::simulation
  void configure(caf::actor_system_config& config) override { world::configure(config); }
  void attach(caf::actor_system* system) override { world_.attach(system); }
  actors::kernel_timer* timer_of(const std::string& device, const std::string& task) override;
  std::chrono::nanoseconds transfer_delay(const std::string& from, const std::string& to, std::int64_t bytes) override;

 private:
  class device_timer;
  const simulation_options options_;
  sim::world world_;
  std::unordered_map<std::string, double> table_;  // median ns by op, device, inputs and attributes
  std::map<std::string, std::unique_ptr<device_timer>> timers_;  // by device
  std::map<std::pair<std::string, std::string>, env::clock::time_point> links_free_;  // (from, to): the link is busy until
  std::int64_t from_table_ = 0, from_rates_ = 0;
};

}  // namespace troupe::sim
