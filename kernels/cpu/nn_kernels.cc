// CPU kernels: (being written).
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

void register_nn_kernels(kernel_registry& registry) {}

}  // namespace troupe::kernels
