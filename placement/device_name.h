// Device names: TensorFlow's `/job:NAME/replica:N/task:N/device:TYPE:ID`, full or partial.
//
// A device_name is a set of optional fields. A *full* (complete) name has all five and
// names one device of a cluster; a *partial* name is a pattern that any device agreeing
// on the fields it has matches:
//
//   "/job:ps/replica:0/task:1/device:CPU:0"   complete
//   "/job:worker"                              every device of job worker
//   "/device:CPU:*"                            every CPU ("*" leaves a field unset)
//   "/cpu:0", "/gpu:1"                         legacy device part, read as /device:CPU:0 ...
//   "/job:ps/task:1/cpu:0"                     legacy device part after a task
//   ""                                         no constraint at all
//
// Parsing accepts the components in any order (each at most once), an optional leading
// "/", "*" for any field, and device types in any case; types are stored and printed in
// upper case ("cpu" -> "CPU"). Printing always gives the canonical order
// (job, replica, task, device) and the `/device:TYPE:ID` form; a type without an id
// prints as "TYPE:*".
//
//   auto d = placement::parse_device_name("/job:ps/task:1/cpu:0");   // result<device_name>
//   placement::to_string(*d);   // "/job:ps/task:1/device:CPU:0"
//
// Everything here is a pure function on values; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace troupe::placement {

struct device_name {
  std::optional<std::string> job;
  std::optional<int> replica;
  std::optional<int> task;
  std::optional<std::string> type;  // upper case: "CPU", "GPU"
  std::optional<int> id;            // unset: any device of the type ("TYPE:*")

  bool empty() const { return !job && !replica && !task && !type && !id; }
  friend bool operator==(const device_name&, const device_name&) = default;
};

// Parses a full or partial name. Errors are invalid_argument naming the whole string,
// the offending component and the accepted forms.
result<device_name> parse_device_name(std::string_view text);

// Canonical form: "/job:ps/replica:0/task:1/device:CPU:0"; missing fields are left out
// ("/job:ps/task:1"); the empty name prints as "".
std::string to_string(const device_name& name);

// True when every field is set: the name of exactly one device.
bool is_complete(const device_name& name);

// True when `name` satisfies the pattern `partial`: every field set in `partial` is set
// to the same value in `name`. An empty pattern matches everything.
bool matches(const device_name& partial, const device_name& name);

// How merge treats a field that both names set to different values.
enum class merge_mode {
  strict,    // any conflict is an error
  soft,      // a type conflict drops type and id, an id conflict drops the id (as TF's
             // allow_soft_placement); a job, replica or task conflict is still an error
  override,  // `b` wins every conflict
};

// The name carrying every field of `a` and `b`. Errors (invalid_argument) name both
// devices and the conflicting field: "cannot merge devices '/job:ps' and '/job:worker':
// they name different jobs ('ps' and 'worker')".
result<device_name> merge(const device_name& a, const device_name& b,
                          merge_mode mode = merge_mode::strict);

// `name` with each unset field taken from `defaults` (never fails: `name` wins).
device_name fill_missing(const device_name& name, const device_name& defaults);

// The task part (job, replica, task) of a name, e.g. for "/job:ps/replica:0/task:1".
device_name task_of(const device_name& name);
// The canonical task prefix of a device, "/job:ps/replica:0/task:1"; fields the name
// lacks are left out.
std::string task_prefix(const device_name& name);

// The task part of a complete name in canonical form (as the placer, the cluster spec
// and the runtime write them), without parsing: "/job:ps/replica:0/task:1" of
// "/job:ps/replica:0/task:1/device:CPU:0". For names from elsewhere, parse_device_name
// and task_of.
inline std::string_view task_of_full_name(std::string_view full) { return full.substr(0, full.find("/device:")); }

// Parses a name that must be complete (a device of a cluster, an assignment); the error
// names `what` ("device of node 'x'") and the missing fields.
result<device_name> parse_full_device_name(std::string_view text, std::string_view what);

}  // namespace troupe::placement
