// troupe checkpoint ls DIR | inspect PATH [--variable NAME]: what a checkpoint directory
// holds, and what one checkpoint holds (doc/checkpoints.md).
#include <ctime>
#include <filesystem>
#include <iomanip>

#include "checkpoint/checkpoint.h"
#include "tools/commands.h"

namespace troupe::tools {
namespace {

constexpr const char* k_checkpoint_usage =
    "usage: troupe checkpoint ls DIR\n"
    "       troupe checkpoint inspect PATH [--variable NAME]\n"
    "ls lists the committed checkpoints of DIR, newest first (step, size, time).\n"
    "inspect lists the variables of a checkpoint file (or of DIR's newest one that reads\n"
    "back whole): dtype, shape and the slices it was saved as; with --variable, one\n"
    "variable and its first values.\n";

std::string utc_time(std::int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm parts{};
  gmtime_r(&t, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

std::string slices_text(const checkpoint::variable_info& v) {
  std::string out;
  for (const auto& [start, extent] : v.saved_slices) {
    if (!out.empty()) out += " ";
    std::string begin;
    for (std::size_t d = 0; d < start.size(); ++d) begin += str_cat(d ? "," : "", start[d]);
    out += str_cat("[", begin, "]+", extent.to_string());
  }
  return out;
}

int list_checkpoints(const std::string& dir, std::ostream& out, std::ostream& err) {
  if (!std::filesystem::is_directory(dir)) {
    err << "troupe checkpoint ls: '" << dir << "' is not a directory\n";
    return 1;
  }
  auto d = checkpoint::directory::open(dir);
  auto entries = d.ok() ? d->list() : result<std::vector<checkpoint::committed>>(d.error());
  if (!entries.ok()) {
    err << "troupe checkpoint ls: " << entries.error() << "\n";
    return 1;
  }
  if (entries->empty()) {
    out << "no committed checkpoint in " << dir << "\n";
    return 0;
  }
  out << std::left << std::setw(12) << "step" << std::setw(24) << "file" << std::setw(14) << "bytes"
      << "committed (UTC)\n";
  for (const auto& c : *entries) {
    out << std::left << std::setw(12) << c.step << std::setw(24) << base_name(c.path) << std::setw(14) << c.bytes
        << utc_time(c.unix_seconds) << "\n";
  }
  return 0;
}

int inspect_checkpoint(const std::string& path, const std::string& variable, std::ostream& out, std::ostream& err) {
  std::vector<std::string> warnings;
  result<checkpoint::reader> r = internal_error("unset");
  if (!std::filesystem::exists(path)) {
    err << "troupe checkpoint inspect: '" << path << "' does not exist\n";
    return 1;
  }
  if (std::filesystem::is_directory(path)) {
    auto d = checkpoint::directory::open(path);
    r = d.ok() ? d->open_latest(&warnings) : result<checkpoint::reader>(d.error());
  } else {
    r = checkpoint::reader::open(path);
  }
  for (const auto& w : warnings) err << "warning: " << w << "\n";
  if (!r.ok()) {
    err << "troupe checkpoint inspect: " << r.error() << "\n";
    return 1;
  }
  out << "checkpoint " << r->path() << "\nglobal step " << r->global_step() << "\n";
  if (!variable.empty()) {
    const checkpoint::variable_info* v = r->find(variable);
    if (v == nullptr) {
      err << "troupe checkpoint inspect: " << r->path() << " has no variable '" << variable << "'\n";
      return 1;
    }
    auto value = r->read(variable);
    if (!value.ok()) {
      err << "troupe checkpoint inspect: " << value.error() << "\n";
      return 1;
    }
    out << "variable " << v->name << "\n  dataset " << v->dataset << "\n  dtype " << dtype_name(v->type) << "\n  shape " << v->shape.to_string()
        << "\n  saved as " << v->saved_slices.size() << " slice(s): " << slices_text(*v) << "\n  values "
        << value->debug_string(16) << "\n";
    return 0;
  }
  out << r->variables().size() << " variable(s):\n";
  for (const auto& v : r->variables()) {
    out << "  " << std::left << std::setw(32) << v.name << " " << std::setw(9) << dtype_name(v.type) << " "
        << std::setw(16) << v.shape.to_string() << " " << v.saved_slices.size() << " slice(s) " << slices_text(v)
        << (v.dataset.starts_with("slots/") ? "  (at slots/)" : "") << "\n";
  }
  out << r->state_names().size() << " state tensor(s):";
  for (const auto& name : r->state_names()) out << " " << name;
  out << "\n";
  return 0;
}

}  // namespace

int checkpoint_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    out << k_checkpoint_usage;
    return 0;
  }
  if (args.size() == 2 && args[0] == "ls") return list_checkpoints(args[1], out, err);
  if (args.size() >= 2 && args[0] == "inspect") {
    std::string variable;
    if (args.size() == 4 && args[2] == "--variable") {
      variable = args[3];
    } else if (args.size() != 2) {
      err << "troupe checkpoint inspect: unexpected '" << args[2] << "'\n" << k_checkpoint_usage;
      return 2;
    }
    return inspect_checkpoint(args[1], variable, out, err);
  }
  err << "troupe checkpoint: " << (args.empty() ? std::string("missing subcommand") : "bad arguments") << "\n"
      << k_checkpoint_usage;
  return 2;
}

}  // namespace troupe::tools
