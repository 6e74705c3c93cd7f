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
//                       left on device"), until until_step;
//   kill_during_checkpoint  the next checkpoint save dies half-way through writing its
//                       file, as a writer killed then would: the partial temporary file
//                       stays (nothing cleans up after a crash), nothing is committed;
//   drop_messages       each tensor sent from task `from` to task `to` is lost with
//                       probability p (the step fails with UNAVAILABLE and is run
//                       again), until until_step;
//   delay_messages      each tensor sent from `from` to `to` arrives delay_ms late,
//                       until until_step;
//   random              chaos: at each global step s, with probability
//                       kills_per_1000_steps / 1000, a kill of a task drawn from the
//                       cluster's; both draws depend on (seed, s) only, so a seed gives
//                       the same kills at the same steps every run.
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
// is set (the disk_full fault). Files created before keep working. With `crash_next`
// set, the next file created dies half-way through its first write, as a writer killed
// then would (kill_during_checkpoint): that write and every file operation after it
// fails with UNAVAILABLE, removing the file included (a dead writer cleans nothing up),
// until the file object is destroyed: then the "restarted" writer works again.
class faulty_file_system final : public file_system {
 public:
  std::atomic<bool> full{false};
  std::atomic<bool> crash_next{false};

  result<std::unique_ptr<writable_file>> create(const std::string& path) override;
  status rename(const std::string& from, const std::string& to) override;
  status remove(const std::string& path) override;
  status sync_dir(const std::string& dir) override { return real().sync_dir(dir); }
  status create_dir(const std::string& dir) override { return real().create_dir(dir); }
  result<std::vector<std::string>> list_dir(const std::string& dir) override { return real().list_dir(dir); }
  result<std::int64_t> file_size(const std::string& path) override { return real().file_size(path); }

 private:
  friend class crashing_file;
  std::atomic<bool> dead_{false};  // between the crash and the dead file's close
};

struct fault_spec {
  std::string kind;              // "kill", "straggle", "stall", "corrupt_checkpoint", "disk_full",
                                 // "kill_during_checkpoint", "drop_messages", "delay_messages"
  std::string task;              // the task it hits, as the scenario names it ("" for none);
                                 // the sending task for drop_messages and delay_messages
  std::string to;                // drop_messages, delay_messages: the receiving task
  std::int64_t at_step = 0;
  std::int64_t until_step = 0;   // ranged faults: lifted there; 0: at the end
  std::int64_t delay_ms = 0;     // straggle, delay_messages
  std::int64_t duration_ms = 0;  // stall
  double probability = 0;        // drop_messages
  std::uint64_t seed = 0;        // drop_messages: of its draws
};

// Seeded random kills (the scenario's faults.random).
struct chaos_spec {
  std::uint64_t seed = 0;
  double kills_per_1000_steps = 0;
  std::vector<std::string> tasks;  // to draw from
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
  faulty_file_system* fs = nullptr;   // disk_full's and kill_during_checkpoint's target
  chaos_spec chaos;                   // kills_per_1000_steps 0: none
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
  // Injects `spec` now (REQUIRES: mutex_ held), logs it and records it; `detail` starts
  // the record's detail ("random" for chaos kills; inject() may replace it).
  void fire(const fault_spec& spec, std::int64_t global_step, std::string detail);
  status inject(injected_fault& f);
  void lift(injected_fault& f);
  void log(const std::string& line) const;

  std::shared_ptr<actors::cluster> cluster_;
  fault_injector_options options_;
  mutable std::mutex mutex_;  // guards the members below; held while injecting
  std::vector<fault_spec> faults_;  // by at_step
  std::vector<bool> done_;
  std::vector<injected_fault> injected_;
  std::int64_t chaos_step_ = 0;  // the last step the random kills were drawn for
};

}  // namespace troupe::cluster
