// Runs a `troupe` subcommand in the test's process and keeps what it printed.
//
//   auto r = troupe::testing::run_command(tools::cert_command, {"check", "--cluster", path});
//   CHECK(r.code == 0);
#pragma once

#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace troupe::testing {

struct command_run {
  int code;
  std::string out;
  std::string err;
};

using command_fn = int (*)(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

inline command_run run_command(command_fn command, const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = command(args, out, err);
  return {code, out.str(), err.str()};
}

}  // namespace troupe::testing
