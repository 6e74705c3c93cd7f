#include "placement/device_name.h"

#include <cctype>
#include <charconv>
#include <vector>

namespace troupe::placement {

namespace {

constexpr std::string_view k_valid_forms =
    "expected components /job:NAME, /replica:N, /task:N, /device:TYPE:ID (ID a number or *), "
    "or the legacy /cpu:ID and /gpu:ID, e.g. '/job:ps/replica:0/task:1/device:CPU:0'";

// NAME and TYPE: a letter, then letters, digits and '_' (TensorFlow's rule).
bool is_identifier(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// A non-negative decimal number that fits an int, or "*" (any: nullopt).
bool parse_index(std::string_view s, std::optional<int>* out) {
  if (s == "*") {
    out->reset();
    return true;
  }
  if (s.empty() || s.size() > 9) return false;
  int value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size() || value < 0) return false;
  *out = value;
  return true;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    std::size_t at = s.find(sep, start);
    parts.push_back(
        s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

}  // namespace

result<device_name> parse_device_name(std::string_view text) {
  device_name out;
  std::string_view rest = text;
  if (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  if (rest.empty()) return out;
  bool seen_job = false, seen_replica = false, seen_task = false, seen_device = false;
  auto bad = [&](std::string_view component, std::string_view why) {
    return invalid_argument_error("'", text, "' is not a device name: component '", component, "' ",
                                  why, "; ", k_valid_forms);
  };
  auto once = [&](bool* seen, std::string_view component) -> status {
    if (*seen) return bad(component, "repeats a field given earlier");
    *seen = true;
    return status();
  };
  for (std::string_view component : split(rest, '/')) {
    if (component.empty()) return bad(component, "is empty (two '/' in a row or a trailing '/')");
    std::vector<std::string_view> fields = split(component, ':');
    std::string_view key = fields[0];
    if (key == "job" && fields.size() == 2) {
      TROUPE_RETURN_IF_ERROR(once(&seen_job, component));
      if (fields[1] == "*") continue;
      if (!is_identifier(fields[1])) {
        return bad(component,
                   "has a job name that is not a letter followed by letters, digits and '_'");
      }
      out.job = std::string(fields[1]);
    } else if ((key == "replica" || key == "task") && fields.size() == 2) {
      bool is_replica = key == "replica";
      TROUPE_RETURN_IF_ERROR(once(is_replica ? &seen_replica : &seen_task, component));
      std::optional<int>* field = is_replica ? &out.replica : &out.task;
      if (!parse_index(fields[1], field)) {
        return bad(component, "needs a non-negative number or *");
      }
    } else if (key == "device" && (fields.size() == 2 || fields.size() == 3)) {
      TROUPE_RETURN_IF_ERROR(once(&seen_device, component));
      if (fields[1] != "*") {
        if (!is_identifier(fields[1])) {
          return bad(component,
                     "has a device type that is not a letter followed by letters, digits and '_'");
        }
        out.type = upper(fields[1]);
      }
      if (fields.size() == 3 && !parse_index(fields[2], &out.id)) {
        return bad(component, "needs a non-negative device id or *");
      }
    } else if ((upper(key) == "CPU" || upper(key) == "GPU") && fields.size() == 2) {
      TROUPE_RETURN_IF_ERROR(once(&seen_device, component));
      out.type = upper(key);
      if (!parse_index(fields[1], &out.id))
        return bad(component, "needs a non-negative device id or *");
    } else {
      return bad(component, "is not recognised");
    }
  }
  return out;
}

std::string to_string(const device_name& name) {
  std::string out;
  if (name.job) out += str_cat("/job:", *name.job);
  if (name.replica) out += str_cat("/replica:", *name.replica);
  if (name.task) out += str_cat("/task:", *name.task);
  if (name.type) {
    out += str_cat("/device:", *name.type, ":");
    out += name.id ? std::to_string(*name.id) : std::string("*");
  } else if (name.id) {
    out += str_cat("/device:*:", *name.id);
  }
  return out;
}

bool is_complete(const device_name& name) {
  return name.job && name.replica && name.task && name.type && name.id;
}

bool matches(const device_name& partial, const device_name& name) {
  auto agrees = [](const auto& want, const auto& have) { return !want || want == have; };
  return agrees(partial.job, name.job) && agrees(partial.replica, name.replica) &&
         agrees(partial.task, name.task) && agrees(partial.type, name.type) &&
         agrees(partial.id, name.id);
}

result<device_name> merge(const device_name& a, const device_name& b, merge_mode mode) {
  device_name out = a;
  auto conflict = [&](std::string_view what, const auto& x, const auto& y) {
    return invalid_argument_error("cannot merge devices '", to_string(a), "' and '", to_string(b),
                                  "': they name different ", what, " (", x, " and ", y, ")");
  };
  // Returns false on a conflict that the mode does not resolve.
  auto take = [&](auto& field, const auto& other) -> bool {
    if (!other) return true;
    if (!field || mode == merge_mode::override) {
      field = other;
      return true;
    }
    return *field == *other;
  };
  if (!take(out.job, b.job))
    return conflict("jobs", str_cat("'", *a.job, "'"), str_cat("'", *b.job, "'"));
  if (!take(out.replica, b.replica)) return conflict("replicas", *a.replica, *b.replica);
  if (!take(out.task, b.task)) return conflict("tasks", *a.task, *b.task);
  if (!take(out.type, b.type)) {
    if (mode != merge_mode::soft) return conflict("device types", *a.type, *b.type);
    out.type.reset();
    out.id.reset();
    return out;
  }
  if (!take(out.id, b.id)) {
    if (mode != merge_mode::soft) return conflict("device ids", *a.id, *b.id);
    out.id.reset();
  }
  return out;
}

device_name fill_missing(const device_name& name, const device_name& defaults) {
  device_name out = name;
  if (!out.job) out.job = defaults.job;
  if (!out.replica) out.replica = defaults.replica;
  if (!out.task) out.task = defaults.task;
  if (!out.type) out.type = defaults.type;
  if (!out.id) out.id = defaults.id;
  return out;
}

device_name task_of(const device_name& name) {
  device_name out;
  out.job = name.job;
  out.replica = name.replica;
  out.task = name.task;
  return out;
}

std::string task_prefix(const device_name& name) { return to_string(task_of(name)); }

result<device_name> parse_full_device_name(std::string_view text, std::string_view what) {
  auto parsed = parse_device_name(text);
  if (!parsed.ok()) return parsed.error().with_context(what);
  if (!is_complete(*parsed)) {
    std::string missing;
    auto note = [&](bool has, std::string_view field) {
      if (!has) missing += str_cat(missing.empty() ? "" : ", ", field);
    };
    note(parsed->job.has_value(), "job");
    note(parsed->replica.has_value(), "replica");
    note(parsed->task.has_value(), "task");
    note(parsed->type.has_value(), "device type");
    note(parsed->id.has_value(), "device id");
    return invalid_argument_error(what, ": '", text, "' is not a complete device name (missing ",
                                  missing,
                                  "); expected the form /job:NAME/replica:N/task:N/device:TYPE:ID");
  }
  return parsed;
}

}  // namespace troupe::placement
