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
// The CPU time of process `pid` (all its threads) from /proc/PID/stat, at the clock
// tick's resolution; -1 when it cannot be read.
double process_cpu_ns_of(int pid);
// The CPU time of this process's children that are alive now (troupe run's servers),
// from /proc, at the clock tick's resolution.
double children_cpu_ns();

// The CPU time of one piece of work on every thread that did it: the thread that opened
// the meter, plus what compute_pool::parallel_for's helper threads spent on the blocks
// they ran for it (they report through helper_sink()). A kernel split over the pool
// costs that much of the machine's cores, whoever ran its blocks. Meters nest; each is
// used on the thread that opened it.
//
//   cpu_meter m;  kernel->compute(ctx);  double ns = m.elapsed_ns();
class cpu_meter {
 public:
  cpu_meter();
  ~cpu_meter();
  cpu_meter(const cpu_meter&) = delete;
  cpu_meter& operator=(const cpu_meter&) = delete;

  double elapsed_ns() const { return thread_cpu_ns() - start_ + helpers_ns_; }

  // Where the innermost meter open on this thread takes helpers' time; null when none is
  // (then nothing is measured).
  static double* helper_sink();

 private:
  double start_;
  double helpers_ns_ = 0;
  double* outer_;
};

}  // namespace troupe
