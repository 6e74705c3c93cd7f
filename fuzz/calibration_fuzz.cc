// Fuzz target: a calibration table (`simulation { compute { table: "calib.json" } }`, the
// file `troupe calibrate` writes), read by sim/calibration_table.h. Errors must name the
// file; a table that loads must hold only figures the simulation can put on its clock
// (numbers in [0, 10^12]: no NaN, infinity or negative time) and kernels with an op and a
// count, and must load again, unchanged, from the JSON save_calibration writes.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"
#include "graph/text_proto.h"
#include "sim/calibration_table.h"

namespace {

void require_figure(double x, const char* what) {
  troupe::fuzz::require(std::isfinite(x) && x >= 0 && x <= troupe::sim::k_largest_figure,
                        "a figure the simulation cannot put on its clock", what);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  troupe::fuzz::quiet_protobuf();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace troupe;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto t = sim::parse_calibration(text, "fuzz.json");
  if (!fuzz::loaded_or_named(t, "calibration fuzz.json")) return 0;
  // What the simulation reads (sim/simulation.cc): each kernel's times and the runtime's.
  for (const sim::KernelCost& c : t->kernels()) {
    fuzz::require(!c.op().empty() && c.count() > 0, "a kernel without an op or a count", c.op());
    for (double x : {c.median_ns(), c.mean_ns(), c.p90_ns(), c.min_ns(), c.median_cpu_ns(), c.mean_cpu_ns(),
                     c.alone_ns()}) {
      require_figure(x, c.op().c_str());
    }
  }
  require_figure(t->runtime_ns_per_kernel(), "runtime_ns_per_kernel");
  require_figure(t->cpu_us_per_step(), "cpu_us_per_step");
  auto json = graph::to_json(*t, "the calibration");
  fuzz::require(json.ok(), "a loaded table that cannot be written", json.ok() ? "" : json.error().message());
  auto again = sim::parse_calibration(*json, "fuzz.json");
  fuzz::require(again.ok(), "the JSON of a loaded table does not load", again.ok() ? "" : again.error().message());
  fuzz::require(again->SerializeAsString() == t->SerializeAsString(),
                "a table changed on a round trip through its JSON");
  return 0;
}
