// The messages actors exchange, and how a troupe status crosses an actor boundary.
//
// A status travels as a caf::error of category "troupe" whose code is the canonical
// code and whose context holds the message; to_status() turns any caf::error back into
// a status (CAF's own errors, such as a request timeout, map to the nearest code).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/executor.h"
#include "actors/reply.h"
#include "core/status.h"
#include "core/tensor.h"

namespace troupe::actors {

using prepare_atom = caf::atom_constant<caf::atom("prepare")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using step_done_atom = caf::atom_constant<caf::atom("stepdone")>;
using step_fail_atom = caf::atom_constant<caf::atom("stepfail")>;

// What a client asks of a session's master for one step.
struct run_request {
  std::vector<std::string> feed_names;
  std::vector<tensor> feed_values;
  std::vector<std::string> fetches;
  std::vector<std::string> targets;
};

caf::error to_caf_error(const status& s);
status to_status(const caf::error& e);

}  // namespace troupe::actors

// In-process message payloads (they share buffers, never serialized).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::run_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::executable_spec)
