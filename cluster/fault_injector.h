// fault_injector: the faults of a scenario, injected by the runtime when training reaches
// their global step (doc/fault_tolerance.md).
//
//   cluster::fault_injector faults(the_cluster, {{"kill", "/job:ps/task:0", 300}}, log);
//   // after each training step, any thread:  faults.step_reached(global_step);
//
// Each fault is injected once, by the first step_reached() whose step is at or past its
// at_step (a step redone after a rollback does not inject it again). Faults act at the
// runtime's seams, never in model code: `kill` is actors::cluster::kill_task (the task's
// devices, variables and queues are gone; its supervisor restarts it).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/cluster.h"

namespace troupe::cluster {

struct fault_spec {
  std::string kind;  // "kill"
  std::string task;  // the task it hits, as the scenario names it
  std::int64_t at_step = 0;
};

struct injected_fault {
  fault_spec spec;
  std::string task;        // canonical: "/job:ps/replica:0/task:0"
  std::int64_t step = 0;   // the global step that injected it
  std::chrono::steady_clock::time_point at;
  status outcome;          // what injecting it returned
};

class fault_injector {
 public:
  fault_injector(std::shared_ptr<actors::cluster> cluster, std::vector<fault_spec> faults,
                 std::function<void(const std::string&)> log = {});

  // Injects every fault not injected yet whose at_step is <= global_step.
  void step_reached(std::int64_t global_step);
  std::vector<injected_fault> injected() const;
  // How many faults of `kind` have been injected.
  int count(std::string_view kind) const;

 private:
  std::shared_ptr<actors::cluster> cluster_;
  std::function<void(const std::string&)> log_;
  mutable std::mutex mutex_;
  std::vector<fault_spec> faults_;  // by at_step
  std::vector<bool> done_;
  std::vector<injected_fault> injected_;
};

}  // namespace troupe::cluster
