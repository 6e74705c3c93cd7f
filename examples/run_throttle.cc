// run_throttle: twelve steps, started at once from client threads, share one Throttle
// (examples/throttle_op.cc) of 20 tokens per second and a burst of 4. The first four pass
// at once; each later one is parked in the bucket actor and woken when its token comes,
// so they finish about 50 ms apart, while no thread waits for them. Then a step that
// will not wait (timeout_ms = 0) is refused, and one whose branch times out aborts its
// step, which withdraws the request parked in its other branch.
//
//   build/examples/run_throttle
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/session.h"
#include "examples/examples.h"
#include "graph/builder.h"
#include "graph/ops.h"

using namespace troupe;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

graph::output throttle(const graph::scope& s, const graph::output& x, std::int64_t timeout_ms) {
  return s.add("Throttle", {x},
               {{"rate", graph::attr_value(20.0f)},
                {"burst", graph::attr_value(4)},
                {"timeout_ms", graph::attr_value(timeout_ms)},
                {"shared_name", graph::attr_value("api")}})
      .out();
}

double ms_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
}

}  // namespace

int main() {
  examples::ensure_example_ops();

  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::int32, partial_shape{});
  throttle(root.with_name("passed"), x, -1);
  throttle(root.with_name("passed_now"), x, 0);
  throttle(root.with_name("passed_soon"), x, 30);
  root.with_name("stats").add("ThrottleStats", {}, {{"shared_name", graph::attr_value("api")}});
  auto g = root.to_graph();
  if (!g.ok()) return std::fprintf(stderr, "%s\n", g.error().to_string().c_str()), 1;
  auto session = actors::session::create(std::move(*g));
  if (!session.ok()) return std::fprintf(stderr, "%s\n", session.error().to_string().c_str()), 1;
  auto& s = **session;

  auto print_stats = [&](const char* when) {
    auto st = s.run({}, {"stats:0", "stats:1", "stats:2"});
    if (!st.ok()) return (void)std::printf("stats: %s\n", st.error().to_string().c_str());
    std::printf("%s: %.2f tokens, %lld waiting, %lld granted\n", when, st->at(0).scalar_value<float>(),
                static_cast<long long>(st->at(1).scalar_value<std::int64_t>()),
                static_cast<long long>(st->at(2).scalar_value<std::int64_t>()));
  };

  // 1. Concurrent steps share the bucket.
  constexpr int k_steps = 12;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::pair<double, std::string>> finished;
  const auto start = clock_type::now();
  for (int i = 0; i < k_steps; ++i) {
    s.run_async({{"x", tensor::scalar<std::int32_t>(i)}}, {"passed"}, {}, [&, i](result<std::vector<tensor>> r) {
      std::string what = r.ok() ? str_cat("step ", i, " passed, output ", r->at(0).scalar_value<std::int32_t>())
                                : str_cat("step ", i, " failed: ", r.error().to_string());
      std::lock_guard<std::mutex> lock(mutex);
      finished.emplace_back(ms_since(start), std::move(what));
      cv.notify_all();
    });
  }
  std::this_thread::sleep_for(20ms);
  print_stats("after 20 ms");
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (!cv.wait_for(lock, 10s, [&] { return finished.size() == k_steps; })) {
      std::fprintf(stderr, "steps did not finish within 10 s\n");
      return 1;
    }
  }
  std::sort(finished.begin(), finished.end());
  for (const auto& [ms, what] : finished) std::printf("%7.1f ms  %s\n", ms, what.c_str());
  print_stats("afterwards");

  // 2. A step that will not wait, when the bucket is empty.
  auto now = s.run({{"x", tensor::scalar<std::int32_t>(100)}}, {"passed_now"});
  std::printf("timeout_ms = 0 on an empty bucket: %s\n", now.ok() ? "passed" : now.error().to_string().c_str());

  // 3. A step with two branches: one waits as long as it takes, one gives up after 30 ms.
  // Drain the bucket so both park; the timeout aborts the step, which withdraws the other.
  for (int i = 0; i < 4; ++i) (void)s.run({{"x", tensor::scalar<std::int32_t>(0)}}, {"passed"});
  auto both = s.run({{"x", tensor::scalar<std::int32_t>(7)}}, {"passed", "passed_soon"});
  std::printf("a step whose other branch timed out: %s\n", both.ok() ? "passed" : both.error().to_string().c_str());
  print_stats("after the aborted step");
  return 0;
}
