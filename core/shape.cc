#include "core/shape.h"

#include <limits>
#include <ostream>

namespace troupe {

result<tensor_shape> tensor_shape::make(std::vector<std::int64_t> dims) {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      return invalid_argument_error("dimension ", i, " of a shape is ", dims[i],
                                    "; dimensions must be >= 0");
    }
    if (dims[i] != 0 && n > std::numeric_limits<std::int64_t>::max() / dims[i]) {
      return invalid_argument_error("shape ", tensor_shape(dims).to_string(),
                                    " has more than 2^63 elements");
    }
    n *= dims[i];
  }
  return tensor_shape(std::move(dims));
}

std::int64_t tensor_shape::num_elements() const {
  std::int64_t n = 1;
  for (auto d : dims_) n *= d;
  return n;
}

namespace {
std::string dims_to_string(const std::vector<std::int64_t>& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ",";
    out += dims[i] < 0 ? std::string("?") : std::to_string(dims[i]);
  }
  return out + "]";
}
}  // namespace

std::string tensor_shape::to_string() const { return dims_to_string(dims_); }

std::ostream& operator<<(std::ostream& out, const tensor_shape& s) { return out << s.to_string(); }

bool partial_shape::fully_defined() const {
  if (!known_rank_) return false;
  for (auto d : dims_) {
    if (d < 0) return false;
  }
  return true;
}

std::int64_t partial_shape::num_elements() const {
  if (!fully_defined()) return -1;
  return to_shape().num_elements();
}

bool partial_shape::is_compatible_with(const tensor_shape& s) const {
  return is_compatible_with(partial_shape(s));
}

bool partial_shape::is_compatible_with(const partial_shape& s) const {
  if (!known_rank_ || !s.known_rank_) return true;
  if (dims_.size() != s.dims_.size()) return false;
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i] >= 0 && s.dims_[i] >= 0 && dims_[i] != s.dims_[i]) return false;
  }
  return true;
}

result<partial_shape> partial_shape::merge(const partial_shape& other) const {
  if (!is_compatible_with(other)) {
    return invalid_argument_error("shapes ", to_string(), " and ", other.to_string(),
                                  " are not compatible");
  }
  if (!known_rank_) return other;
  if (!other.known_rank_) return *this;
  partial_shape merged = *this;
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (merged.dims_[i] < 0) merged.dims_[i] = other.dims_[i];
  }
  return merged;
}

std::string partial_shape::to_string() const {
  return known_rank_ ? dims_to_string(dims_) : std::string("<unknown>");
}

std::ostream& operator<<(std::ostream& out, const partial_shape& s) { return out << s.to_string(); }

}  // namespace troupe
