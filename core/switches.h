// Switches read from the environment: the TROUPE_* variables that turn one mechanism off
// (or on) for a measurement or a test, each documented where its mechanism is. One
// reading rule for all of them.
//
//   static const bool inline_writes = env_switch("TROUPE_LINK_INLINE", true);
//
// Thread safety: reads the environment (callers read once, at first use).
#pragma once

#include <cstdlib>
#include <string_view>

namespace troupe {

// The switch `name`: `fallback` when it is unset or empty, false when it is "0", true
// for any other value.
inline bool env_switch(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::string_view(v) != "0";
}

}  // namespace troupe
