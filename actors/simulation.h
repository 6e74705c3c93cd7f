// simulation: what a cluster asks of the simulated world it runs in (mode SIMULATED,
// sim/simulation.h implements it). With cluster_options::simulation set, the cluster's
// actors run on CAF's testing scheduler driven by the simulated world's turns and virtual
// clock, the compute pool has no threads, each device's synchronous kernels take the
// virtual time the compute model gives them on the device's virtual cores, and every
// tensor sent from one task to another arrives after the network model's delay.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "actors/executor.h"

namespace troupe::actors {

class simulation {
 public:
  virtual ~simulation() = default;
  // Adjusts the actor system's configuration (CAF's testing scheduler).
  virtual void configure(caf::actor_system_config& config) = 0;
  // Shape-only (simulation.execute_kernels: false): kernels compute nothing but the shapes
  // of their outputs, phantom tensors (core/phantom.h), unless their inputs are all real
  // and their outputs small (shapes, steps, labels); variable updates and aggregations of
  // phantoms leave phantoms.
  virtual bool shape_only() const = 0;
  // The actor system the world runs from now on; null before it goes.
  virtual void attach(caf::actor_system* system) = 0;
  // The timer of device `device`'s kernels (its virtual cores), of task `task`; it lives
  // as long as the simulation, and a restarted device gets the same one.
  virtual kernel_timer* timer_of(const std::string& device, const std::string& task) = 0;
  // A transfer of `bytes` leaving task `from` now for task `to`: `deliver` is called once,
  // on the world's turn, when it arrives (latency, the link's bandwidth shared in turn by
  // the transfers on it, jitter, and on one machine the CPU its copies take).
  virtual void transfer(const std::string& from, const std::string& to, std::int64_t bytes,
                        std::function<void()> deliver) = 0;
  // A part of a step about to start on a device of task `task`, with `feed_bytes` of
  // tensors fed by the client: true when the control plane delays it, and `start` is then
  // called once, on the world's turn, when it may start (the network model's step_cpu_us,
  // the feeds' copies, the latency); false: it starts at once (`start` unused).
  virtual bool delay_step_start(const std::string& task, std::int64_t feed_bytes, std::function<void()> start) = 0;
};

}  // namespace troupe::actors
