#include "core/spin_wait.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace troupe {
namespace {

std::atomic<int> spinners{0};
std::atomic<std::int64_t> spun_ns{0};  // spin_gate::spun_cpu_ns

int hardware_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

std::chrono::microseconds read_budget() {
  constexpr std::chrono::microseconds k_default{200};
  if (hardware_threads() < 2) return std::chrono::microseconds{0};
  const char* v = std::getenv("TROUPE_SPIN_US");
  if (v == nullptr || *v == '\0') return k_default;
  char* end = nullptr;
  const long long us = std::strtoll(v, &end, 10);
  if (*end != '\0' || us < 0 || us > 1'000'000) {
    std::fprintf(stderr, "troupe: TROUPE_SPIN_US='%s' is not a number of microseconds in [0, 1000000]; using %lld\n",
                 v, static_cast<long long>(k_default.count()));
    return k_default;
  }
  return std::chrono::microseconds{us};
}

}  // namespace

std::chrono::microseconds default_spin_budget() {
  static const std::chrono::microseconds budget = read_budget();
  return budget;
}

int default_max_spinners() { return hardware_threads() - 1; }

int spin_gate::spinning() { return spinners.load(std::memory_order_relaxed); }

bool spin_gate::worth_spinning() {
  if (long_waits_.load(std::memory_order_relaxed) < k_long_waits) return true;
  if (unspun_.fetch_add(1, std::memory_order_relaxed) + 1 < k_probe_every) return false;
  unspun_.store(0, std::memory_order_relaxed);
  return true;
}

bool spin_gate::enter() {
  int now = spinners.load(std::memory_order_relaxed);
  while (now < max_spinners_) {
    if (spinners.compare_exchange_weak(now, now + 1, std::memory_order_acquire, std::memory_order_relaxed)) return true;
  }
  return false;
}

void spin_gate::leave(std::int64_t spun) {
  if (spun > 0) spun_ns.fetch_add(spun, std::memory_order_relaxed);
  spinners.fetch_sub(1, std::memory_order_release);
}

std::int64_t spin_gate::spun_cpu_ns() { return spun_ns.load(std::memory_order_relaxed); }

double working_cpu_ns() { return process_cpu_ns() - static_cast<double>(spin_gate::spun_cpu_ns()); }

void spin_gate::relax(unsigned i) {
  // A thread woken onto this core would otherwise wait for the spin's end (the scheduler
  // need not preempt a spinner for it): measured, half the runs of bench_remote_step
  // then took 208 us at the median instead of 57.
  if (i % k_yield_every == 0) {
    sched_yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace troupe
