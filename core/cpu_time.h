// CPU time consumed so far, in nanoseconds: by the calling thread (what a kernel costs on
// the thread that ran it) or by the whole process. Real time on purpose: a simulation's
// virtual clock (core/env.h) does not replace it.
#pragma once

#include <time.h>

namespace troupe {

inline double cpu_ns(clockid_t clock) {
  timespec t{};
  ::clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}
inline double thread_cpu_ns() { return cpu_ns(CLOCK_THREAD_CPUTIME_ID); }
inline double process_cpu_ns() { return cpu_ns(CLOCK_PROCESS_CPUTIME_ID); }

}  // namespace troupe
