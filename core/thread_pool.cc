#include "core/thread_pool.h"

#include "core/cpu_time.h"
#include "core/env.h"
#include "core/float_env.h"
#include "core/memory.h"

#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/ThreadPool>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

namespace troupe {

// Eigen's threads, named (what `top -H` and `perf` show for them).
struct named_thread_environment : Eigen::StlThreadEnvironment {
  std::string name;
  EnvThread* CreateThread(std::function<void()> f) {
    return new EnvThread([f = std::move(f), name = name] {
      pthread_setname_np(pthread_self(), name.c_str());
      f();
    });
  }
};

struct compute_pool::impl {
  impl(int threads, bool spin, std::string name) : pool(threads, spin, environment(std::move(name))) {}
  static named_thread_environment environment(std::string name) {
    named_thread_environment e;
    e.name = name.substr(0, 15);  // the kernel keeps 15 characters
    return e;
  }
  Eigen::ThreadPoolTempl<named_thread_environment> pool;
};

compute_pool::compute_pool(int num_threads, std::string name, bool spin)
    : num_threads_(std::max(1, num_threads)),
      impl_(num_threads > 0 ? std::make_unique<impl>(num_threads_, spin, std::move(name)) : nullptr) {}

compute_pool::~compute_pool() = default;

void compute_pool::schedule(std::function<void()> fn) {
  if (impl_ == nullptr) return env::post(std::move(fn));
  impl_->pool.Schedule(std::move(fn));
}

// Without threads, work runs wherever it is: nothing is gained by handing it on.
bool compute_pool::in_pool() const { return impl_ == nullptr || impl_->pool.CurrentThreadId() >= 0; }

namespace {

struct parallel_state {
  std::int64_t n;
  std::int64_t block_size;
  std::int64_t num_blocks;
  std::function<void(std::int64_t, std::int64_t)> fn;
  std::atomic<std::int64_t> next{0};
  std::atomic<std::int64_t> done{0};
  std::mutex mutex;
  std::condition_variable finished;
  std::exception_ptr error;  // the first exception a block threw (under mutex)
  std::atomic<bool> failed{false};
  bool flush = false;  // the caller flushes subnormals
  // With a cpu_meter open on the caller: the CPU time helpers spent on blocks.
  bool metered = false;
  std::atomic<std::int64_t> helpers_cpu_ns{0};

  // Claims and runs blocks until none is left. The first exception a block throws is
  // kept for the caller, and blocks not yet started are skipped. A helper of a metered
  // caller reports each block's CPU time before counting it done. Helpers flush
  // subnormals when the caller does (a kernel's: core/float_env.h), so that every block
  // computes alike.
  void work(bool helper) {
    std::optional<flush_denormals> numerics;
    if (helper && flush) numerics.emplace();
    for (;;) {
      std::int64_t b = next.fetch_add(1, std::memory_order_relaxed);
      if (b >= num_blocks) return;
      std::int64_t begin = b * block_size;
      if (!failed.load(std::memory_order_relaxed)) {
        std::optional<cpu_meter> meter;
        if (helper && metered) meter.emplace();
        try {
          fn(begin, std::min(n, begin + block_size));
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex);
          if (!error) error = std::current_exception();
          failed.store(true, std::memory_order_relaxed);
        }
        if (meter) helpers_cpu_ns.fetch_add(static_cast<std::int64_t>(meter->elapsed_ns()), std::memory_order_relaxed);
      }
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == num_blocks) {
        std::lock_guard<std::mutex> lock(mutex);
        finished.notify_all();
      }
    }
  }
};

}  // namespace

void compute_pool::parallel_for(std::int64_t n, double cost_per_unit,
                                const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  constexpr double k_min_block_ns = 20000;  // below this, a wake-up costs more than it saves
  double total = static_cast<double>(n) * std::max(cost_per_unit, 0.1);
  std::int64_t max_blocks = static_cast<std::int64_t>(total / k_min_block_ns);
  std::int64_t num_blocks = std::min<std::int64_t>({max_blocks, n, 4 * num_threads_});
  if (num_threads_ == 1 || num_blocks <= 1) {
    fn(0, n);
    return;
  }
  auto state = std::make_shared<parallel_state>();
  state->n = n;
  state->block_size = (n + num_blocks - 1) / num_blocks;
  state->num_blocks = (n + state->block_size - 1) / state->block_size;
  state->fn = fn;
  double* sink = cpu_meter::helper_sink();
  state->metered = sink != nullptr;
  state->flush = flush_denormals::active();
  // The caller works too, so num_threads - 1 helpers keep num_threads threads busy. They
  // allocate from the caller's memory account (a kernel's device's).
  int helpers = static_cast<int>(std::min<std::int64_t>(num_threads_, state->num_blocks) - 1);
  memory_account* account = &current_account();
  for (int i = 0; i < helpers; ++i) {
    impl_->pool.Schedule([state, account] {
      account_scope scope(account);
      state->work(/*helper=*/true);
    });
  }
  state->work(/*helper=*/false);
  std::unique_lock<std::mutex> lock(state->mutex);
  state->finished.wait(lock, [&] { return state->done.load() == state->num_blocks; });
  if (sink != nullptr) *sink += static_cast<double>(state->helpers_cpu_ns.load(std::memory_order_relaxed));
  if (state->error) std::rethrow_exception(state->error);
}

int default_num_threads() {
  if (const char* env = std::getenv("TROUPE_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace troupe
