// The run summary that `troupe run SCENARIO --summary FILE.json` writes: the message
// RunSummary of scenarios/summary.proto, as JSON by protobuf's mapping (keys are the
// proto's field names; doc/scenarios.md, "The run summary").
//
//   auto summary = scenarios::run_scenario(s, options);
//   auto json = scenarios::summary_json(scenarios::make_run_summary(
//       s, summary.ok() ? &*summary : nullptr, summary.ok() ? status() : summary.error(), wall));
//
// Thread safety: plain functions.
#pragma once

#include <string>

#include "core/status.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.pb.h"
#include "scenarios/summary.pb.h"

namespace troupe::scenarios {

// What a run of `s` did: `summary` when it finished (null when it stopped with `error`),
// and how long the whole run took.
scenario::RunSummary make_run_summary(const scenario::Scenario& s, const run_summary* summary, const status& error,
                                      double wall_seconds);

// Pretty-printed JSON, every field written (also when zero or empty), ending in a newline.
result<std::string> summary_json(const scenario::RunSummary& summary);

}  // namespace troupe::scenarios
