// calibration_table: the file `troupe calibrate` writes and a simulated scenario's
// `compute { table: ... }` reads (doc/simulation.md, "The compute model's cost table"):
// sim::Calibration (sim/calibration.proto) as JSON, checked as it is read. Core and
// protobuf only, so that the fuzzer of the table (fuzz/calibration_fuzz.cc) needs no CAF.
//
//   TROUPE_RETURN_IF_ERROR(save_calibration(table, "calib.json"));
//   auto loaded = load_calibration("calib.json");
//   const sim::KernelCost* c = find_cost(*loaded, "MatMul", "CPU", {"float[64,784]", "float[784,512]"},
//                                        {"transpose_a=false", "transpose_b=false"});
//
// What a read refuses, each error naming the path (and the entry and the field): text that
// is not the table's JSON, a kernel without an op or with a count < 1, and any figure or
// count that is not a number in [0, k_largest_figure] (a NaN, an infinity, a negative time,
// 1e300 ns), which the simulation would turn into a clock that stands still or overflows.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "sim/calibration.pb.h"

namespace troupe::sim {

// The largest figure a table may hold: 10^12 (a kernel of 1,000 s, a transfer's
// microsecond figure of 11 days, a bandwidth of 10^12 Gb/s): beyond any measurement.
inline constexpr double k_largest_figure = 1e12;

// The table as JSON (protobuf's mapping, snake_case keys) and back. Errors name the path.
status save_calibration(const Calibration& table, const std::string& path);
result<Calibration> load_calibration(const std::string& path);
// `json` as if read from `path` (for errors).
result<Calibration> parse_calibration(const std::string& json, const std::string& path);
// The checks of a read, on a table already in memory; errors name `path`.
status check_calibration(const Calibration& table, const std::string& path);

// The entry for `op` on `device_type` with exactly these inputs and attributes, or null.
const KernelCost* find_cost(const Calibration& table, const std::string& op, const std::string& device_type,
                            const std::vector<std::string>& inputs, const std::vector<std::string>& attrs);

}  // namespace troupe::sim
