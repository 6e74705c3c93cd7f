// fault_injector: the faults of a scenario, injected by the runtime when training reaches
// their global step (doc/fault_tolerance.md).
//
//   cluster::fault_injector faults(the_cluster, {{.kind = "kill", .task = "/job:ps/task:0", .at_step = 300}}, o);
//   // after each training step, any thread:  faults.step_reached(global_step);
//
// Each fault is injected once, by the first step_reached() whose step is at or past its
// at_step (a step redone after a rollback does not inject it again), and a fault with an
// until_step is lifted by the first one at or past that. Faults act at the runtime's
// seams, never in model code:
//   kill                actors::cluster::kill_task: the task's devices, variables and
//                       queues are gone (its supervisor restarts it);
//   straggle            every step partition on the task's devices starts delay_ms late,
//                       until until_step (a timer in the device actor, no thread blocked);
//   stall               no step partition starts on the task's devices for duration_ms;
//   corrupt_checkpoint  bytes in the middle of the newest committed checkpoint file are
//                       flipped (restores fall back past it, with a warning);
//   disk_full           the checkpoint file system refuses to create files ("No space
//                       left on device"), until until_step.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/cluster.h"
#include "core/file.h"

namespace troupe::cluster {

// The real file system, which fails every create() with RESOURCE_EXHAUSTED while `full`
// is set (the disk_full fault). Files created before keep working.
class faulty_file_system final : public file_system {
 public:
  std::atomic<bool> full{false};

  result<std::unique_ptr<writable_file>> create(const std::string& path) override;
  status rename(const std::string& from, const std::string& to) override { return real().rename(from, to); }
  status remove(const std::string& path) override { return real().remove(path); }
  status sync_dir(const std::string& dir) override { return real().sync_dir(dir); }
  status create_dir(const std::string& dir) override { return real().create_dir(dir); }
  result<std::vector<std::string>> list_dir(const std::string& dir) override { return real().list_dir(dir); }
  result<std::int64_t> file_size(const std::string& path) override { return real().file_size(path); }
};

struct fault_spec {
  std::string kind;              // "kill", "straggle", "stall", "corrupt_checkpoint", "disk_full"
  std::string task;              // the task it hits, as the scenario names it ("" for none)
  std::int64_t at_step = 0;
  std::int64_t until_step = 0;   // straggle, disk_full: lifted there; 0: at the end
  std::int64_t delay_ms = 0;     // straggle
  std::int64_t duration_ms = 0;  // stall
};

struct injected_fault {
  fault_spec spec;
  std::string task;        // canonical: "/job:ps/replica:0/task:0" ("" for none)
  std::int64_t step = 0;   // the global step that injected it
  std::chrono::steady_clock::time_point at;
  std::optional<std::chrono::steady_clock::time_point> lifted_at;  // when a ranged fault ended
  std::string detail;      // what it did ("flipped 64 bytes of ckpt-400.h5 at offset ...")
  status outcome;          // what injecting it returned
};

struct fault_injector_options {
  std::string checkpoint_dir;         // corrupt_checkpoint's target
  faulty_file_system* fs = nullptr;   // disk_full's target
  std::function<void(const std::string&)> log;
};

class fault_injector {
 public:
  fault_injector(std::shared_ptr<actors::cluster> cluster, std::vector<fault_spec> faults,
                 fault_injector_options options = {});

  // Injects every fault not injected yet whose at_step is <= global_step, and lifts every
  // ranged fault whose until_step is <= global_step.
  void step_reached(std::int64_t global_step);
  // Lifts every fault still in force (the end of training).
  void lift_all();
  std::vector<injected_fault> injected() const;
  // How many faults of `kind` have been injected.
  int count(std::string_view kind) const;

 private:
  status inject(injected_fault& f);
  void lift(injected_fault& f);
  void log(const std::string& line) const;

  std::shared_ptr<actors::cluster> cluster_;
  fault_injector_options options_;
  mutable std::mutex mutex_;  // guards the members below; held while injecting
  std::vector<fault_spec> faults_;  // by at_step
  std::vector<bool> done_;
  std::vector<injected_fault> injected_;
};

}  // namespace troupe::cluster
