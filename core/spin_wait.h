// Waiting for an answer that is microseconds away: a short spin before sleeping.
//
// A thread that sleeps (a condition variable, a futex, epoll) and is woken from another
// core pays for that core's wake-up: a few microseconds on bare metal, 25-35 us on a
// virtual machine whose idle vCPU has halted (the host must run it again). Measured with
// `perf sched timehist` on the project's 2-vCPU KVM machines: a small remote step (a
// scalar read from a PS process, bench_remote_step) crossed four hand-offs to a thread on
// the idle vCPU, each waiting 25-33 us to run, and took 132-180 us at the median; 35 us
// with every thread held on one vCPU; 57-125 us with its caller spinning for the answer.
// TensorFlow's thread pools spin before they park for the same reason.
//
// A spin_gate decides whether a waiter spins, and how long: only while the waits it has
// seen are short (not the last k_long_waits (4) all longer than the budget), on machines
// of more than one hardware thread, and by at most (hardware threads - 1) threads of the
// process at once. So waits of milliseconds (a training step) spin only once in
// k_probe_every (64) after the first four, and spinners never hold every core from the
// threads that would answer them. Until 2026-12-06 one wait longer than the budget (a
// preemption) stopped the spinning for good, since the waits that followed, unspun, took
// longer still: bench_remote_step's remote p50 was 235-260 us in most runs against
// 80-130 us spinning, the same binary and machine; now one long wait is forgiven, and a
// probe now and then finds out whether spinning makes the waits short again. A spinner
// yields its core every k_yield_every pauses: the scheduler need not preempt a spinner
// for a thread woken onto its core, which would otherwise wait for the spin's end
// (measured: half the runs of bench_remote_step then took 208 us at the median), and a
// process that computes (an in-process MLP's input readers spin on short steps) loses
// nothing measurable.
//
//   spin_gate gate;                           // one per thread and stream of similar waits
//   const auto start = std::chrono::steady_clock::now();
//   ... send the request ...
//   gate.spin([&] { return answered(); });    // at once when spinning is not worth it
//   ... block until answered ...
//   gate.record(std::chrono::steady_clock::now() - start);
//
// TROUPE_SPIN_US sets the default budget (200 us; 0: never spin). A budget shorter than
// the waits is worse than none (the waiter sleeps just before the answer comes, and the
// spin was spent): 50 us measured 200 us a step where 100-200 us measured 41-44.
// Virtual time (a simulated world) must never spin: its callers wait through env.
// Thread safety: spin and record from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "core/cpu_time.h"

namespace troupe {

// TROUPE_SPIN_US, or 200 us; 0 when the machine has one hardware thread.
std::chrono::microseconds default_spin_budget();
// The default most threads of this process that spin at once: hardware threads - 1.
int default_max_spinners();

class spin_gate {
 public:
  spin_gate() : spin_gate(default_spin_budget(), default_max_spinners()) {}
  spin_gate(std::chrono::microseconds budget, int max_spinners)
      : budget_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(budget).count()),
        max_spinners_(max_spinners) {}

  // Calls ready() until it is true or the budget is spent, when the waits recorded are
  // short and a spinner's place is free; else once. Returns ready()'s last answer.
  template <class Ready>
  bool spin(Ready&& ready) {
    if (budget_ns_ <= 0 || !worth_spinning() || !enter()) return ready();
    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(budget_ns_);
    bool done = ready();
    if (done) return leave(), true;
    const double cpu_start = thread_cpu_ns();
    for (unsigned i = 1; !done && std::chrono::steady_clock::now() < until; ++i) {
      relax(i);
      done = ready();
    }
    leave(static_cast<std::int64_t>(thread_cpu_ns() - cpu_start));
    return done;
  }

  // How long the whole wait took: whether the next one spins.
  void record(std::chrono::nanoseconds took) {
    if (took.count() <= budget_ns_) {
      long_waits_.store(0, std::memory_order_relaxed);
    } else {
      long_waits_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // Long waits in a row that stop the spinning; waits unspun between two probes.
  static constexpr std::int64_t k_long_waits = 4;
  static constexpr std::int64_t k_probe_every = 64;

  // Threads of this process spinning now (for tests).
  static int spinning();
  // The CPU time this process's threads have spent spinning so far, in nanoseconds: not
  // work, though the process's CPU clock counts it (see working_cpu_ns below).
  static std::int64_t spun_cpu_ns();

 private:
  bool enter();
  // Whether this wait spins: fewer than k_long_waits waits in a row took longer than the
  // budget, or k_probe_every waits have not spun since (a probe: a wait that took long
  // because nothing spun for it may be short again spinning).
  bool worth_spinning();
  // Gives the spinner's place back; `spun_ns`: the thread CPU time the spin took.
  static void leave(std::int64_t spun_ns = 0);
  static constexpr unsigned k_yield_every = 32;
  // A pause; every k_yield_every calls, the core for a thread waiting on it.
  static void relax(unsigned i);

  const std::int64_t budget_ns_;
  const int max_spinners_;
  std::atomic<std::int64_t> long_waits_{0};  // waits in a row longer than the budget
  std::atomic<std::int64_t> unspun_{0};      // waits since the last that spun
};

// The process's CPU time less what its threads spent spinning for answers: the CPU its
// work took. `troupe calibrate` measures the runtime's cost with it: the waits for short
// steps spin in an untraced run more than in a traced, slower one (LeNet in process on an
// AMD EPYC: 6.2 ms of CPU per step untraced against 5.0 traced with the spins counted,
// 4.2 without spinning).
double working_cpu_ns();

}  // namespace troupe
