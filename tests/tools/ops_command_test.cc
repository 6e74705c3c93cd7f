// `troupe ops`: every op the build knows, with its kernels' device types and its gradient.
#include <catch2/catch.hpp>

#include <map>
#include <sstream>

#include "graph/op_registry.h"
#include "tests/tools/command_run.h"
#include "tools/commands.h"

using namespace troupe;

TEST_CASE("troupe ops lists every registered op with its kernels and gradient") {
  auto r = troupe::testing::run_command(tools::ops_command, {});
  REQUIRE(r.code == 0);
  std::istringstream lines(r.out);
  std::string name, devices, gradient;
  std::map<std::string, std::pair<std::string, std::string>> listed;
  while (lines >> name >> devices >> gradient) listed[name] = {devices, gradient};
  CHECK(listed.size() == graph::op_registry::builtin().op_names().size());
  CHECK(listed["MatMul"].second == "yes");
  CHECK(listed["MatMul"].first.find("CPU") != std::string::npos);
  CHECK(listed["ArgMax"].second == "none");             // declared not differentiable
  CHECK(listed["FusedBatchNormGradV3"].second == "missing");
  // Runtime kernels, which the actors layer adds: there too.
  CHECK(listed["_Send"].first.find("CPU") != std::string::npos);
  CHECK(listed["ReadVariableOp"].first.find("CPU") != std::string::npos);
}

TEST_CASE("troupe ops takes no arguments") {
  auto r = troupe::testing::run_command(tools::ops_command, {"MatMul"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("usage: troupe ops"));
}
