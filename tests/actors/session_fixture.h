// What the actor tests share: a session over a builder's graph, failing the test (with
// the error) when the graph is invalid or the session cannot start.
#pragma once

#include <catch2/catch.hpp>

#include <memory>

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

}  // namespace troupe::testing
