#include "examples/examples.h"

#include <mutex>

namespace troupe::examples {

void ensure_example_ops() {
  static std::once_flag once;
  std::call_once(once, [] { register_example_ops(graph::op_registry::builtin(), kernels::kernel_registry::builtin()); });
}

}  // namespace troupe::examples
