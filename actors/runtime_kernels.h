// The kernels that need the actor runtime (variables, queues, accumulators, Send/Recv), and the one
// call that adds them to a kernel registry.
//
// Sessions and clusters use kernels::kernel_registry::builtin(); the first one created
// adds these kernels to it (once per process). A program that builds its own registry
// calls register_runtime_kernels on it.
#pragma once

#include "kernels/kernel_registry.h"

namespace troupe::actors {

void register_variable_kernels(kernels::kernel_registry& registry);
void register_sendrecv_kernels(kernels::kernel_registry& registry);
void register_queue_kernels(kernels::kernel_registry& registry);
void register_accumulator_kernels(kernels::kernel_registry& registry);

// All of the above.
void register_runtime_kernels(kernels::kernel_registry& registry);
// Adds them to kernels::kernel_registry::builtin() the first time it is called.
void ensure_runtime_kernels();

}  // namespace troupe::actors
