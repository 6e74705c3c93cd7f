// Shapes. tensor_shape is the fully known shape of a tensor at run time; partial_shape is
// what graph-time shape inference knows: possibly an unknown rank, and dimensions that may
// be unknown (-1), as TensorFlow's TensorShapeProto writes them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/status.h"

namespace troupe {

class tensor_shape {
 public:
  tensor_shape() = default;  // a scalar
  tensor_shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  explicit tensor_shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

  // Checks that every dimension is >= 0 and the element count fits in int64.
  static result<tensor_shape> make(std::vector<std::int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  std::int64_t dim(int i) const { return dims_[static_cast<std::size_t>(i)]; }
  const std::vector<std::int64_t>& dims() const { return dims_; }
  std::int64_t num_elements() const;

  void set_dim(int i, std::int64_t size) { dims_[static_cast<std::size_t>(i)] = size; }
  void add_dim(std::int64_t size) { dims_.push_back(size); }
  void insert_dim(int i, std::int64_t size) { dims_.insert(dims_.begin() + i, size); }
  void remove_dim(int i) { dims_.erase(dims_.begin() + i); }

  std::string to_string() const;  // "[2,3]", "[]" for a scalar
  friend bool operator==(const tensor_shape&, const tensor_shape&) = default;

 private:
  std::vector<std::int64_t> dims_;
};

std::ostream& operator<<(std::ostream& out, const tensor_shape& s);

class partial_shape {
 public:
  partial_shape() = default;  // unknown rank
  partial_shape(std::initializer_list<std::int64_t> dims) : known_rank_(true), dims_(dims) {}
  explicit partial_shape(std::vector<std::int64_t> dims)
      : known_rank_(true), dims_(std::move(dims)) {}
  partial_shape(const tensor_shape& s)  // NOLINT: every known shape is a partial one
      : known_rank_(true), dims_(s.dims()) {}

  // Note: partial_shape{} is the unknown shape; a scalar is partial_shape::scalar().
  static partial_shape unknown() { return partial_shape(); }
  static partial_shape scalar() { return partial_shape(std::vector<std::int64_t>{}); }
  static partial_shape unknown_of_rank(int rank) {
    return partial_shape(std::vector<std::int64_t>(static_cast<std::size_t>(rank), -1));
  }

  bool known_rank() const { return known_rank_; }
  int rank() const { return known_rank_ ? static_cast<int>(dims_.size()) : -1; }
  std::int64_t dim(int i) const { return dims_[static_cast<std::size_t>(i)]; }
  const std::vector<std::int64_t>& dims() const { return dims_; }
  bool fully_defined() const;
  // REQUIRES: fully_defined().
  tensor_shape to_shape() const { return tensor_shape(dims_); }
  // -1 when unknown.
  std::int64_t num_elements() const;

  // True when `s` could be a value of this shape.
  bool is_compatible_with(const tensor_shape& s) const;
  bool is_compatible_with(const partial_shape& s) const;
  // The most specific shape compatible with both, or an error naming both.
  result<partial_shape> merge(const partial_shape& other) const;

  std::string to_string() const;  // "[?,3]", "<unknown>"
  friend bool operator==(const partial_shape&, const partial_shape&) = default;

 private:
  bool known_rank_ = false;
  std::vector<std::int64_t> dims_;
};

std::ostream& operator<<(std::ostream& out, const partial_shape& s);

}  // namespace troupe
