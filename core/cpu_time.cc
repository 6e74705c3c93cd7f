#include "core/cpu_time.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace troupe {
namespace {
thread_local double* open_sink = nullptr;
}  // namespace

cpu_meter::cpu_meter() : start_(thread_cpu_ns()), outer_(open_sink) { open_sink = &helpers_ns_; }

cpu_meter::~cpu_meter() { open_sink = outer_; }

double* cpu_meter::helper_sink() { return open_sink; }

namespace {
// The fields of /proc/PID/stat after the command's ")" (field 3, the state, first).
std::vector<std::string> stat_fields(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::vector<std::string> fields;
  if (pid <= 0 || !std::getline(in, line)) return fields;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return fields;
  std::istringstream rest(line.substr(close + 1));
  for (std::string f; rest >> f;) fields.push_back(std::move(f));
  return fields;
}
double cpu_ns_of(const std::vector<std::string>& fields) {
  if (fields.size() < 13) return -1;  // utime and stime are fields 14 and 15
  const double ticks = std::strtod(fields[11].c_str(), nullptr) + std::strtod(fields[12].c_str(), nullptr);
  return ticks * 1e9 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}
}  // namespace

double process_cpu_ns_of(int pid) { return cpu_ns_of(stat_fields(pid)); }

double children_cpu_ns() {
  const std::string me = std::to_string(::getpid());
  double sum = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto fields = stat_fields(std::atoi(name.c_str()));
    if (fields.size() >= 13 && fields[1] == me) sum += std::max(0.0, cpu_ns_of(fields));  // field 4: the parent
  }
  return sum;
}

}  // namespace troupe
