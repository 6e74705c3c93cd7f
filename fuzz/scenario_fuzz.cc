// Fuzz target: a scenario file (`troupe run S.pbtxt`), loaded by scenarios/scenario.h:
// syntax, then every check and default. Errors must name the file; a scenario that loads
// must be complete with every count and size in its documented range (the runner does
// arithmetic on them), and must load again, unchanged, from the text a run prints
// (scenario_to_text).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"
#include "scenarios/scenario.h"

namespace {

using namespace troupe::scenarios;

template <class T>
bool in(T value, std::int64_t min, std::int64_t max) {
  return value >= min && value <= max;
}

void check_ranges(const troupe::scenario::Scenario& s) {
  using troupe::fuzz::require;
  std::int64_t tasks = 0;
  for (const auto& job : s.cluster().job()) {
    require(in(job.tasks(), 1, k_max_tasks), "a job's tasks out of range");
    tasks += job.tasks();
  }
  require(in(tasks, 1, k_max_tasks), "the cluster's tasks out of range");
  require(num_tasks(s.cluster(), s.cluster().worker_job()) >= 1, "no worker task");
  require(in(s.model().hidden_units_size(), 0, k_max_hidden_layers), "too many hidden layers");
  for (int units : s.model().hidden_units()) {
    require(in(units, 1, k_max_hidden_units), "hidden_units out of range");
  }
  const auto& t = s.training();
  require(in(t.steps(), 1, k_max_steps), "steps out of range");
  require(in(t.batch_size(), 1, k_max_batch_size), "batch_size out of range");
  require(in(t.eval_every(), 0, k_max_steps), "eval_every out of range");
  require(t.has_seed(), "no seed");
  const auto& d = s.dataset();
  require(in(d.reader_threads(), 1, k_max_reader_threads), "reader_threads out of range");
  require(in(d.min_after_dequeue(), 0, k_max_queue_capacity - 1), "min_after_dequeue out of range");
  require(in(d.queue_capacity(), t.batch_size(), k_max_queue_capacity) &&
              d.queue_capacity() > d.min_after_dequeue(),
          "queue_capacity out of range");
  require(in(s.report().progress_every(), 1, k_max_steps), "progress_every out of range");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  troupe::fuzz::quiet_protobuf();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace troupe;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto s = scenarios::parse_scenario(text, "fuzz.pbtxt");
  if (!fuzz::loaded_or_named(s, "fuzz.pbtxt")) return 0;
  check_ranges(*s);
  auto again = scenarios::parse_scenario(scenarios::scenario_to_text(*s), "fuzz.pbtxt");
  fuzz::require(again.ok(), "the text of a loaded scenario does not load",
                again.ok() ? "" : again.error().message());
  fuzz::require(again->SerializeAsString() == s->SerializeAsString(),
                "a scenario changed on a round trip through scenario_to_text");
  return 0;
}
