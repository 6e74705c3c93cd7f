// tensor: a dtype, a shape and a shared reference to a buffer.
//
// Copying a tensor is cheap (one atomic increment) and shares the bytes: tensors are
// values whose contents are treated as immutable once a kernel has produced them. A
// kernel that wants to write into an input in place asks whether the buffer is shared
// (ref_count_is_one) first. A default-constructed tensor is "uninitialized" (no buffer).
//
//   tensor t(dtype::float32, {2, 3});
//   auto v = t.flat<float>();         // std::span<float> of 6 elements
//   tensor s = tensor::scalar<int32_t>(7);
//   tensor m = tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
//
// Eigen views live in core/tensor_eigen.h to keep this header light.
#pragma once

#include <cassert>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/resource.h"
#include "core/shape.h"

namespace troupe {

class tensor {
 public:
  tensor() = default;
  // Allocates an uninitialized tensor. REQUIRES: dtype_size(type) > 0.
  tensor(dtype type, tensor_shape shape);
  // A tensor over `adopted`'s bytes, taking over the caller's reference (buffer::adopt:
  // a device's memory). REQUIRES: adopted->size() >= the shape's size in bytes.
  tensor(dtype type, tensor_shape shape, buffer* adopted)
      : dtype_(type), shape_(std::move(shape)), buffer_(adopted), data_(adopted->data()) {}
  ~tensor() { release(); }

  tensor(const tensor& other) noexcept
      : dtype_(other.dtype_), shape_(other.shape_), buffer_(other.buffer_), data_(other.data_) {
    if (buffer_ != nullptr) buffer_->ref();
  }
  tensor(tensor&& other) noexcept
      : dtype_(other.dtype_),
        shape_(std::move(other.shape_)),
        buffer_(std::exchange(other.buffer_, nullptr)),
        data_(std::exchange(other.data_, nullptr)) {}
  tensor& operator=(const tensor& other) noexcept {
    if (this != &other) {
      if (other.buffer_ != nullptr) other.buffer_->ref();
      release();
      dtype_ = other.dtype_;
      shape_ = other.shape_;
      buffer_ = other.buffer_;
      data_ = other.data_;
    }
    return *this;
  }
  tensor& operator=(tensor&& other) noexcept {
    if (this != &other) {
      release();
      dtype_ = other.dtype_;
      shape_ = std::move(other.shape_);
      buffer_ = std::exchange(other.buffer_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
    }
    return *this;
  }

  template <class T>
  static tensor scalar(T value) {
    tensor t(dtype_of<T>, tensor_shape{});
    *t.data<T>() = value;
    return t;
  }
  // REQUIRES: values.size() == shape.num_elements().
  template <class T>
  static tensor from_vector(const std::vector<T>& values, tensor_shape shape) {
    tensor t(dtype_of<T>, std::move(shape));
    assert(static_cast<std::int64_t>(values.size()) == t.num_elements());
    for (std::size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
    return t;
  }
  template <class T>
  static tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, tensor_shape{static_cast<std::int64_t>(values.size())});
  }
  // A tensor of `type` and `shape` with every element set to zero.
  static tensor zeros(dtype type, tensor_shape shape);
  // A scalar of dtype resource holding `handle` (see core/resource.h).
  static tensor from_resource(resource_handle handle);

  bool initialized() const { return buffer_ != nullptr; }
  dtype type() const { return dtype_; }
  const tensor_shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  std::int64_t dim(int i) const { return shape_.dim(i); }
  std::int64_t num_elements() const { return shape_.num_elements(); }
  std::size_t byte_size() const {
    return static_cast<std::size_t>(num_elements()) * dtype_size(dtype_);
  }

  void* raw_data() const { return data_; }
  // False for a tensor in a device's memory (a GPU's): only that device's kernels and
  // copies may touch its bytes.
  bool on_host() const { return buffer_ == nullptr || buffer_->host_accessible(); }
  // Whoever lent the bytes (buffer::adopt: a device's memory, core/phantom.h), or null.
  const external_memory* memory_owner() const { return buffer_ != nullptr ? buffer_->owner() : nullptr; }
  template <class T>
  T* data() const {
    assert(dtype_of<T> == dtype_);
    return static_cast<T*>(data_);
  }
  template <class T>
  std::span<T> flat() const {
    return {data<T>(), static_cast<std::size_t>(num_elements())};
  }
  // The single element of a tensor with one element. REQUIRES: num_elements() == 1.
  template <class T>
  T scalar_value() const {
    return *data<T>();
  }

  // The same bytes seen with another shape. REQUIRES: same number of elements.
  tensor reshaped(tensor_shape shape) const;
  // A tensor with its own copy of the bytes (a phantom's: another phantom, core/phantom.h).
  // REQUIRES: on_host() or a phantom.
  tensor deep_copy() const;

  bool shares_buffer_with(const tensor& other) const {
    return buffer_ != nullptr && buffer_ == other.buffer_;
  }
  // True when no other tensor refers to the bytes: an in-place update is safe.
  bool ref_count_is_one() const { return buffer_ != nullptr && buffer_->ref_count_is_one(); }

  // The handle of a resource scalar. REQUIRES: type() == dtype::resource and
  // num_elements() == 1.
  const resource_handle& resource_value() const {
    assert(dtype_ == dtype::resource && num_elements() == 1);
    return *static_cast<const resource_handle*>(data_);
  }

  // "float [2,3] {1, 2, 3, 4, 5, 6}" with at most `max_entries` values.
  std::string debug_string(int max_entries = 16) const;

  // Element-wise equality of dtype, shape and bytes; false when either is not on_host().
  bool equals(const tensor& other) const;

 private:
  void release() {
    if (buffer_ != nullptr) buffer_->unref();
    buffer_ = nullptr;
    data_ = nullptr;
  }

  dtype dtype_ = dtype::invalid;
  tensor_shape shape_;
  buffer* buffer_ = nullptr;
  void* data_ = nullptr;
};

// The elements of an int32 or int64 tensor (of any rank) as int64: shapes, axes,
// permutations and indices given as tensors. Empty for other dtypes.
std::vector<std::int64_t> index_values(const tensor& t);

}  // namespace troupe
