// flush_denormals (core/float_env.h): subnormal results and inputs become zero inside a
// scope, the thread's previous mode comes back after it, and compute_pool::parallel_for's
// helpers compute in their caller's mode.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "core/float_env.h"
#include "core/thread_pool.h"

using namespace troupe;

namespace {

// Through volatile so that the compiler cannot fold the arithmetic at compile time.
float product(float a, float b) {
  volatile float x = a, y = b;
  return x * y;
}
float sum(float a, float b) {
  volatile float x = a, y = b;
  return x + y;
}

}  // namespace

TEST_CASE("flush_denormals makes subnormal results and inputs zero, then restores the mode", "[core]") {
#if defined(__x86_64__) || defined(__i386__)
  const float subnormal = std::numeric_limits<float>::denorm_min() * 1000;
  REQUIRE_FALSE(flush_denormals::active());
  CHECK(product(1e-30f, 1e-10f) > 0);  // 1e-40: subnormal, kept
  CHECK(sum(subnormal, 0.0f) == subnormal);
  {
    flush_denormals scope;
    CHECK(flush_denormals::active());
    CHECK(product(1e-30f, 1e-10f) == 0);  // flush to zero
    CHECK(sum(subnormal, 0.0f) == 0);     // denormals are zero
    CHECK(product(1e-30f, 1e-5f) == Approx(1e-35f));  // normal numbers as before
    {
      flush_denormals nested;
      CHECK(flush_denormals::active());
    }
    CHECK(flush_denormals::active());  // the inner scope found the mode set and left it
  }
  CHECK_FALSE(flush_denormals::active());
  CHECK(product(1e-30f, 1e-10f) > 0);
#else
  SUCCEED("not x86: the scope changes nothing");
#endif
}

TEST_CASE("parallel_for's helpers flush subnormals when their caller does", "[core]") {
#if defined(__x86_64__) || defined(__i386__)
  compute_pool pool(2);
  for (bool caller_flushes : {true, false, true}) {
    std::optional<flush_denormals> scope;
    if (caller_flushes) scope.emplace();
    std::mutex mutex;
    std::set<std::thread::id> threads;
    std::atomic<int> unlike{0};
    // Until a helper took a block (on a loaded machine it may wake too late for one run).
    for (int attempt = 0; attempt < 50 && threads.size() < 2; ++attempt) {
      pool.parallel_for(64, 1e6, [&](std::int64_t, std::int64_t) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          threads.insert(std::this_thread::get_id());
        }
        std::this_thread::sleep_for(std::chrono::microseconds(500));
        if (flush_denormals::active() != caller_flushes) ++unlike;
        if ((product(1e-30f, 1e-10f) == 0) != caller_flushes) ++unlike;
      });
    }
    CHECK(threads.size() == 2);  // the caller and a helper
    CHECK(unlike.load() == 0);
    CHECK(flush_denormals::active() == caller_flushes);
  }
  // (The helper went from a flushing caller to one that does not and back.)
#else
  SUCCEED("not x86: the scope changes nothing");
#endif
}
