// The Catch2 main shared by every test executable. Before any test runs it checks the
// skip conditions of tests/skip.h; one that holds ends the executable with
// k_skip_return_code, which CTest reports as SKIPPED.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "kernels/cpu/cpu_features.h"
#include "tests/skip.h"

namespace {

// CTest runs the kernel and model tests a second time with TROUPE_HIDE_AVX512 set, so that
// a machine with AVX-512 also tests what an AVX2 machine runs; on a machine without
// AVX-512 that second run would repeat the first.
const troupe::testing::skip_when nothing_to_hide([]() -> std::optional<std::string> {
  if (troupe::kernels::avx512_hidden() && !troupe::kernels::processor_has_avx512f()) {
    return std::string("TROUPE_HIDE_AVX512 is set, but this processor has no AVX-512 to hide: the run without it "
                       "already tests what an AVX2 machine runs");
  }
  return std::nullopt;
});

}  // namespace

int main(int argc, char* argv[]) {
  for (const auto& condition : troupe::testing::skip_conditions()) {
    if (auto why = condition()) {
      std::printf("SKIPPED: %s\n", why->c_str());
      return troupe::testing::k_skip_return_code;
    }
  }
  return Catch::Session().run(argc, argv);
}
