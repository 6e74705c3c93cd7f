// CPU kernels: (being written).
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

void register_matmul_kernels(kernel_registry& registry) {}

}  // namespace troupe::kernels
