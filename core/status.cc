#include "core/status.h"

#include <ostream>

namespace troupe {

std::string_view code_name(code c) {
  switch (c) {
    case code::ok: return "OK";
    case code::cancelled: return "CANCELLED";
    case code::unknown: return "UNKNOWN";
    case code::invalid_argument: return "INVALID_ARGUMENT";
    case code::deadline_exceeded: return "DEADLINE_EXCEEDED";
    case code::not_found: return "NOT_FOUND";
    case code::already_exists: return "ALREADY_EXISTS";
    case code::permission_denied: return "PERMISSION_DENIED";
    case code::resource_exhausted: return "RESOURCE_EXHAUSTED";
    case code::failed_precondition: return "FAILED_PRECONDITION";
    case code::aborted: return "ABORTED";
    case code::out_of_range: return "OUT_OF_RANGE";
    case code::unimplemented: return "UNIMPLEMENTED";
    case code::internal: return "INTERNAL";
    case code::unavailable: return "UNAVAILABLE";
    case code::data_loss: return "DATA_LOSS";
    case code::unauthenticated: return "UNAUTHENTICATED";
  }
  return "UNKNOWN_CODE";
}

status::status(code c, std::string message) {
  if (c != code::ok) state_ = std::make_unique<state>(state{c, std::move(message)});
}

status::status(const status& other)
    : state_(other.state_ ? std::make_unique<state>(*other.state_) : nullptr) {}

status& status::operator=(const status& other) {
  if (this != &other) state_ = other.state_ ? std::make_unique<state>(*other.state_) : nullptr;
  return *this;
}

const std::string& status::message() const {
  static const std::string empty;
  return state_ ? state_->message : empty;
}

std::string status::to_string() const {
  if (ok()) return "OK";
  return str_cat(code_name(state_->error_code), ": ", state_->message);
}

status status::with_context(std::string_view prefix) const {
  if (ok()) return status();
  return status(state_->error_code, str_cat(prefix, ": ", state_->message));
}

std::ostream& operator<<(std::ostream& out, const status& s) { return out << s.to_string(); }

}  // namespace troupe
