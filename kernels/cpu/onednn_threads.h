// oneDNN inside the compute pool's thread budget.
//
// Debian builds oneDNN on OpenMP, and oneDNN sizes its parallel regions by the calling
// thread's OpenMP thread count, both when a primitive is built and when it (or
// dnnl_sgemm) runs. Kernels split their work over the compute pool themselves, so every
// thread that calls oneDNN first sets its own OpenMP count to one: an OpenMP team per
// kernel would fight the pool for the cores.
#pragma once

#include <omp.h>

namespace troupe::kernels::onednn {

// Makes oneDNN calls from this thread single-threaded. Cheap after the first call.
inline void single_threaded_openmp() {
  thread_local bool done = false;
  if (done) return;
  omp_set_num_threads(1);
  done = true;
}

}  // namespace troupe::kernels::onednn
