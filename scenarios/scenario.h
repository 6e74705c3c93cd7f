// Loading scenario files: protobuf text (*.pbtxt) for troupe.scenario.Scenario
// (scenarios/scenario.proto, described field by field in doc/scenarios.md).
//
// A scenario is loaded in three passes, and the first that fails stops the load, so a
// bad file never starts anything:
//
//  1. Syntax: protobuf text format, no unknown fields. The parser's first error, with a
//     suggestion for a misspelled field and the valid values of an enum.
//  2. Meaning: names outside the model zoo, the datasets and the optimizers (with the
//     valid list), values out of range (the counts and sizes also have a largest value,
//     k_max_* below), jobs defined twice or not used, a worker job that is not in the
//     cluster, parameters the chosen optimizer does not have, ... Every such error is
//     reported, one per line, each naming the field by its path and, when the
//     file contains it, its position (else the position of the enclosing message).
//  3. Defaults: every field left out gets its value (documented in the .proto), so the
//     returned scenario is complete; in particular training.seed is always set, drawn at
//     random when the file has none. Whoever runs a scenario prints the seed.
//
// Errors are invalid_argument (not_found for a file that cannot be read) and read
//
//   scenarios/bad.pbtxt:7:5: training.optimizer.name: unknown optimizer 'adamw' (valid: sgd, momentum, adagrad, adam, rmsprop)
//
// with 1-based lines and columns, as compilers write them. Example:
//
//   auto s = scenarios::load_scenario("scenarios/default.pbtxt");
//   if (!s.ok()) { std::cerr << s.error().message() << "\n"; return 1; }
//   std::cout << "seed " << s->training().seed() << "\n";
//
// Thread safety: the functions keep no state and may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "scenarios/scenario.pb.h"

namespace troupe::scenarios {

// The largest values the loader accepts (doc/scenarios.md, "Limits"). Beyond them a run
// would not fit in one machine (threads, memory), or arithmetic on the values and on the
// defaults derived from them (min_after_dequeue = 4 * batch_size, ...) would overflow.
inline constexpr std::int32_t k_max_tasks = 1024;               // in the whole cluster
inline constexpr std::int32_t k_max_hidden_layers = 32;         // model.hidden_units entries
inline constexpr std::int32_t k_max_hidden_units = 16384;       // each entry
inline constexpr std::int32_t k_max_batch_size = 65536;         // training.batch_size
inline constexpr std::int32_t k_max_queue_capacity = 1 << 20;   // dataset.queue_capacity
inline constexpr std::int32_t k_max_reader_threads = 64;        // dataset.reader_threads
inline constexpr std::int64_t k_max_steps = 1'000'000'000'000;  // steps, eval_every, progress_every,
                                                                 // checkpoint.every_steps
inline constexpr std::int32_t k_max_checkpoints_kept = 1000;    // checkpoint.keep
inline constexpr std::int32_t k_max_restarts = 1000;            // supervision.max_restarts
inline constexpr double k_max_window_seconds = 86400;           // supervision.within_seconds

// Reads, checks and completes the scenario in `path`. `notes`, when given, gets what the
// reader should know that is not an error ("file:line:col: field: note"; an old
// `mode: SIMULATED` without a simulation section runs as IN_PROCESS).
result<scenario::Scenario> load_scenario(const std::string& path, std::vector<std::string>* notes = nullptr);

// The same for text already in memory; `filename` names it in errors and gives the
// default scenario name (its base name without extension).
result<scenario::Scenario> parse_scenario(const std::string& text, const std::string& filename,
                                          std::vector<std::string>* notes = nullptr);

// The complete scenario as protobuf text, to print before a run.
std::string scenario_to_text(const scenario::Scenario& s);

// The valid values of the name fields, in the order error messages list them.
const std::vector<std::string>& model_names();      // mlp, lenet
const std::vector<std::string>& dataset_names();    // fashion-mnist
const std::vector<std::string>& optimizer_names();  // sgd, momentum, adagrad, adam, rmsprop

// The dataset's gzip-compressed IDX files, from its dir.
struct dataset_files {
  std::string train_images;
  std::string train_labels;
  std::string test_images;
  std::string test_labels;
};
dataset_files files_of(const scenario::Dataset& dataset);

// Checks that the dataset's files exist, before anything starts. not_found naming the
// first missing file and, for the fashion-mnist default folder, the Debian package.
status check_dataset_files(const scenario::Dataset& dataset);

// How many tasks `job` has in the cluster (0 when there is no such job).
int num_tasks(const scenario::Cluster& cluster, std::string_view job);
// How many tasks the cluster has, every job's.
int num_tasks(const scenario::Cluster& cluster);

// Mode REAL with servers started by hand (addresses or a cluster_file), which troupe run
// can reach but not signal.
bool servers_by_hand(const scenario::Cluster& cluster);

// The folder holding the example scenarios (default.pbtxt, ...): this source tree's
// scenarios/, fixed when the build was configured.
std::string examples_dir();

}  // namespace troupe::scenarios
