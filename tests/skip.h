// Skipping a whole test executable whose hardware is missing, so that CTest reports it
// SKIPPED instead of passed.
//
// A test file declares, at namespace scope, the conditions under which nothing it would
// run can run on this machine; tests/main.cc checks them all before any test starts and,
// when one holds, prints why and exits with k_skip_return_code, which CMake declares as
// every test's SKIP_RETURN_CODE:
//
//   const troupe::testing::skip_when no_direct_kernels([]() -> std::optional<std::string> {
//     if (forced_direct() && !kernels::has_avx512f()) return "TROUPE_CONV=direct needs AVX-512F";
//     return std::nullopt;
//   });
//
// Catch2 v2 has no way to skip a single test case: a test case that needs hardware goes in
// a CTest entry of its own (a hidden tag selected by that entry's arguments) whose
// executable skips when the hardware is missing.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace troupe::testing {

constexpr int k_skip_return_code = 77;

using skip_condition = std::function<std::optional<std::string>()>;

// The conditions declared by this executable's test files (and main.cc's own).
inline std::vector<skip_condition>& skip_conditions() {
  static std::vector<skip_condition> conditions;
  return conditions;
}

struct skip_when {
  explicit skip_when(skip_condition condition) { skip_conditions().push_back(std::move(condition)); }
};

}  // namespace troupe::testing
