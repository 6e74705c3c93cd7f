// What the actor tests share: a session over a builder's graph, failing the test (with
// the error) when the graph is invalid or the session cannot start; and a bounded wait
// for a shutdown that might hang.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "actors/session.h"
#include "graph/builder.h"

namespace troupe::testing {

inline std::unique_ptr<actors::session> make_session(const graph::scope& root,
                                                     actors::session_options options = {}) {
  auto g = root.to_graph();
  if (!g.ok()) FAIL(g.error().to_string());
  auto s = actors::session::create(std::move(*g), std::move(options));
  if (!s.ok()) FAIL(s.error().to_string());
  return std::move(*s);
}

// Runs `shutdown` (destroying a session or a cluster) on its own thread, which is not
// the thread that built it (that once hid a hang: actors/spawn.h), and waits up to
// `limit` for it. A shutdown that hangs (~actor_system waiting for an actor that never
// ends, or for a callback that never comes) can be neither failed nor cleaned up in
// this process, so the run aborts, saying what hung, instead of hanging CI.
inline void shutdown_within(std::chrono::seconds limit, const std::string& what, std::function<void()> shutdown) {
  std::promise<void> finished;
  auto future = finished.get_future();
  std::thread t([&] {
    shutdown();
    finished.set_value();
  });
  if (future.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: %s did not finish within %lld s; aborting the test run\n",
                 what.c_str(), static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::abort();
  }
  t.join();
}

}  // namespace troupe::testing
