#include "actors/runtime_kernels.h"

#include <mutex>

namespace troupe::actors {

void register_runtime_kernels(kernels::kernel_registry& registry) {
  register_variable_kernels(registry);
  register_sendrecv_kernels(registry);
  register_queue_kernels(registry);
  register_accumulator_kernels(registry);
}

void ensure_runtime_kernels() {
  static std::once_flag once;
  std::call_once(once, [] { register_runtime_kernels(kernels::kernel_registry::builtin()); });
}

}  // namespace troupe::actors
