// status and result<T>: how every fallible call in troupe reports failure.
//
// A status is either ok or carries a canonical code (TensorFlow's / gRPC's numbering) and
// a message that says what went wrong and where. An ok status costs one null pointer;
// errors are heap-allocated since they are rare. Statuses are threaded linearly:
//
//   status s = graph.validate();
//   if (!s.ok()) return s;            // or TROUPE_RETURN_IF_ERROR(graph.validate());
//
// result<T> holds either a T or a non-ok status. Thread safety: as a std::string.
#pragma once

#include <charconv>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace troupe {

// Canonical error codes, numbered as in TensorFlow's error_codes.proto.
enum class code : int {
  ok = 0,
  cancelled = 1,
  unknown = 2,
  invalid_argument = 3,
  deadline_exceeded = 4,
  not_found = 5,
  already_exists = 6,
  permission_denied = 7,
  resource_exhausted = 8,
  failed_precondition = 9,
  aborted = 10,
  out_of_range = 11,
  unimplemented = 12,
  internal = 13,
  unavailable = 14,
  data_loss = 15,
  unauthenticated = 16,
};

std::string_view code_name(code c);

namespace detail {
// Strings, characters and integers (bool included) are appended directly, as a stream
// would write them without manipulators.
template <class T>
constexpr bool appends_directly = std::is_convertible_v<const T&, std::string_view> || std::is_integral_v<T>;

template <class T>
void str_append(std::string& out, const T& value) {
  if constexpr (std::is_pointer_v<T> && std::is_convertible_v<T, const char*>) {
    if (value != nullptr) out.append(value);
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out.append(std::string_view(value));
  } else if constexpr (std::is_same_v<T, char> || std::is_same_v<T, signed char> ||
                       std::is_same_v<T, unsigned char>) {
    out.push_back(static_cast<char>(value));
  } else if constexpr (std::is_same_v<T, bool>) {
    out.push_back(value ? '1' : '0');
  } else {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
    out.append(digits, end);
  }
}
}  // namespace detail

// Concatenates anything that has an operator<< into a string, as one stream would write
// it (manipulators such as std::hex apply to what follows). Strings, characters and
// integers alone skip the stream and its locale.
template <class... Args>
std::string str_cat(const Args&... args) {
  if constexpr ((detail::appends_directly<Args> && ...)) {
    std::string out;
    (detail::str_append(out, args), ...);
    return out;
  } else {
    std::ostringstream out;
    (out << ... << args);
    return out.str();
  }
}

class [[nodiscard]] status {
 public:
  status() = default;  // ok
  status(code c, std::string message);
  status(const status& other);
  status& operator=(const status& other);
  status(status&&) noexcept = default;
  status& operator=(status&&) noexcept = default;

  static status ok_status() { return status(); }

  bool ok() const { return state_ == nullptr; }
  code error_code() const { return state_ ? state_->error_code : code::ok; }
  const std::string& message() const;

  // "INVALID_ARGUMENT: message", or "OK".
  std::string to_string() const;

  // Returns a copy whose message is "prefix: message" (ok stays ok).
  status with_context(std::string_view prefix) const;

  // Marks a status as deliberately dropped.
  void ignore_error() const {}

  friend bool operator==(const status& a, const status& b) {
    return a.error_code() == b.error_code() && a.message() == b.message();
  }

 private:
  struct state {
    code error_code;
    std::string message;
  };
  std::unique_ptr<state> state_;
};

std::ostream& operator<<(std::ostream& out, const status& s);

// One constructor per canonical code; arguments are concatenated with str_cat.
template <class... Args>
status make_error(code c, const Args&... args) {
  return status(c, str_cat(args...));
}
template <class... Args>
status cancelled_error(const Args&... args) {
  return make_error(code::cancelled, args...);
}
template <class... Args>
status unknown_error(const Args&... args) {
  return make_error(code::unknown, args...);
}
template <class... Args>
status invalid_argument_error(const Args&... args) {
  return make_error(code::invalid_argument, args...);
}
template <class... Args>
status deadline_exceeded_error(const Args&... args) {
  return make_error(code::deadline_exceeded, args...);
}
template <class... Args>
status not_found_error(const Args&... args) {
  return make_error(code::not_found, args...);
}
template <class... Args>
status already_exists_error(const Args&... args) {
  return make_error(code::already_exists, args...);
}
template <class... Args>
status permission_denied_error(const Args&... args) {
  return make_error(code::permission_denied, args...);
}
template <class... Args>
status resource_exhausted_error(const Args&... args) {
  return make_error(code::resource_exhausted, args...);
}
template <class... Args>
status failed_precondition_error(const Args&... args) {
  return make_error(code::failed_precondition, args...);
}
template <class... Args>
status aborted_error(const Args&... args) {
  return make_error(code::aborted, args...);
}
template <class... Args>
status out_of_range_error(const Args&... args) {
  return make_error(code::out_of_range, args...);
}
template <class... Args>
status unimplemented_error(const Args&... args) {
  return make_error(code::unimplemented, args...);
}
template <class... Args>
status internal_error(const Args&... args) {
  return make_error(code::internal, args...);
}
template <class... Args>
status unavailable_error(const Args&... args) {
  return make_error(code::unavailable, args...);
}
template <class... Args>
status data_loss_error(const Args&... args) {
  return make_error(code::data_loss, args...);
}
template <class... Args>
status unauthenticated_error(const Args&... args) {
  return make_error(code::unauthenticated, args...);
}

// Whether an operation (a step) that failed with `s` may succeed if run again: it was
// caught by a task's failure or a lost connection (UNAVAILABLE, ABORTED), not by its own
// mistake.
inline bool is_retryable(const status& s) {
  return s.error_code() == code::unavailable || s.error_code() == code::aborted;
}

// Holds a T or the status explaining why there is none. REQUIRES: the status is not ok.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : value_(std::in_place_index<0>, std::move(value)) {}  // NOLINT
  result(status error) : value_(std::in_place_index<1>, std::move(error)) {  // NOLINT
    if (std::get<1>(value_).ok()) {
      value_.template emplace<1>(code::internal, "result<T> built from an ok status");
    }
  }

  bool ok() const { return value_.index() == 0; }
  const status& error() const { return std::get<1>(value_); }
  status to_status() const { return ok() ? status() : error(); }

  T& value() & { return std::get<0>(value_); }
  const T& value() const& { return std::get<0>(value_); }
  T&& value() && { return std::get<0>(std::move(value_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, status> value_;
};

// The one propagation macro: returns the status of `expr` from the enclosing function
// when it is not ok.
#define TROUPE_RETURN_IF_ERROR(expr)              \
  do {                                            \
    ::troupe::status troupe_status_ = (expr);     \
    if (!troupe_status_.ok()) return troupe_status_; \
  } while (false)

}  // namespace troupe
