// What a fuzz target asserts beyond "no crash, no hang, no sanitizer report": the
// invariants of the parser it drives. A failed one aborts, which libFuzzer records as a
// crash (with the input) and the regression driver (regression_main.cc) as a failed test.
#pragma once

#include <google/protobuf/stubs/logging.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/status.h"

namespace troupe::fuzz {

// Aborts with `what` (and `detail`) when `condition` is false; unlike assert, in every build.
inline void require(bool condition, std::string_view what, std::string_view detail = {}) {
  if (condition) return;
  std::string message = "fuzz invariant failed: ";
  message.append(what).append("\n").append(detail).append("\n");
  std::fwrite(message.data(), 1, message.size(), stderr);
  std::abort();
}

// Silences protobuf's own log (it reports every string field with invalid UTF-8 on stderr,
// which would drown the fuzzer's output); the parse still fails and troupe says so.
inline void quiet_protobuf() {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
}

inline bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// Whether `loaded` holds a value; when it holds an error, requires that the error begin
// with `named` (errors name the file they are about) and says false.
template <class T>
bool loaded_or_named(const result<T>& loaded, std::string_view named) {
  if (loaded.ok()) return true;
  require(starts_with(loaded.error().message(), named), "an error that does not name the file",
          loaded.error().message());
  return false;
}

}  // namespace troupe::fuzz
