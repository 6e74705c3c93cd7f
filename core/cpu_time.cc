#include "core/cpu_time.h"

namespace troupe {
namespace {
thread_local double* open_sink = nullptr;
}  // namespace

cpu_meter::cpu_meter() : start_(thread_cpu_ns()), outer_(open_sink) { open_sink = &helpers_ns_; }

cpu_meter::~cpu_meter() { open_sink = outer_; }

double* cpu_meter::helper_sink() { return open_sink; }

}  // namespace troupe
