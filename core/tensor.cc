#include "core/tensor.h"

#include <sstream>

#include "core/memory.h"
#include "core/phantom.h"
#include "core/status.h"

namespace troupe {

tensor::tensor(dtype type, tensor_shape shape) : dtype_(type), shape_(std::move(shape)) {
  assert(dtype_size(type) > 0);
  auto describe = [&] { return str_cat("cannot allocate ", dtype_name(type), " ", shape_.to_string()); };
  // The size in bytes, refusing shapes whose size does not fit in 62 bits (num_elements()
  // would overflow) before anything is allocated.
  std::int64_t bytes = static_cast<std::int64_t>(dtype_size(type));
  for (int i = 0; i < shape_.rank(); ++i) {
    const std::int64_t d = shape_.dim(i);
    if (d == 0) {
      bytes = 0;
      break;
    }
    if (d < 0 || bytes > (std::int64_t{1} << 62) / d) {
      throw allocation_error(describe(), "its size does not fit in 62 bits");
    }
    bytes *= d;
  }
  try {
    buffer_ = buffer::allocate(static_cast<std::size_t>(bytes));
  } catch (const allocation_error& e) {
    throw e.described_as(str_cat(describe(), ", ", describe_bytes(bytes)));
  }
  data_ = buffer_->data();
}

tensor tensor::zeros(dtype type, tensor_shape shape) {
  tensor t(type, std::move(shape));
  std::memset(t.raw_data(), 0, t.byte_size());
  return t;
}

tensor tensor::from_resource(resource_handle handle) {
  tensor t;
  t.dtype_ = dtype::resource;
  t.buffer_ = buffer::allocate(sizeof(resource_handle));
  t.data_ = t.buffer_->data();
  new (t.data_) resource_handle(std::move(handle));
  t.buffer_->set_destroy([](void* data, std::size_t) { static_cast<resource_handle*>(data)->~resource_handle(); });
  return t;
}

std::string resource_handle::debug_string() const {
  std::string kind = target ? std::string(target->kind()) : std::string("resource");
  return str_cat(kind, " '", container.empty() ? name : container + "/" + name, "' on ",
                 device.empty() ? std::string("this device") : device);
}

tensor tensor::reshaped(tensor_shape shape) const {
  assert(shape.num_elements() == num_elements());
  tensor t(*this);
  t.shape_ = std::move(shape);
  return t;
}

tensor tensor::deep_copy() const {
  if (!initialized()) return tensor();
  if (dtype_ == dtype::resource) return from_resource(resource_value());
  if (is_phantom(*this)) return phantom_tensor(dtype_, shape_);  // nothing to copy
  tensor t(dtype_, shape_);
  std::memcpy(t.raw_data(), raw_data(), byte_size());
  return t;
}

std::string tensor::debug_string(int max_entries) const {
  if (!initialized()) return "<uninitialized tensor>";
  if (dtype_ == dtype::resource) return "resource [] {" + resource_value().debug_string() + "}";
  std::ostringstream out;
  out << dtype_name(dtype_) << " " << shape_.to_string() << " {";
  if (!on_host()) return out.str() + "in device memory}";
  std::int64_t n = std::min<std::int64_t>(num_elements(), max_entries);
  visit_dtype(dtype_, [&]<class T>() {
    for (std::int64_t i = 0; i < n; ++i) {
      if (i > 0) out << ", ";
      T v = data<T>()[i];
      if constexpr (sizeof(T) == 1 && !std::is_same_v<T, bool>) {
        out << static_cast<int>(v);
      } else {
        out << v;
      }
    }
  });
  if (num_elements() > n) out << ", ...";
  out << "}";
  return out.str();
}

bool tensor::equals(const tensor& other) const {
  if (initialized() != other.initialized()) return false;
  if (!initialized()) return true;
  if (!on_host() || !other.on_host()) return false;
  if (dtype_ == dtype::resource || other.dtype_ == dtype::resource) {
    return dtype_ == other.dtype_ && resource_value().target == other.resource_value().target &&
           resource_value().name == other.resource_value().name;
  }
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         std::memcmp(raw_data(), other.raw_data(), byte_size()) == 0;
}

std::vector<std::int64_t> index_values(const tensor& t) {
  std::vector<std::int64_t> values;
  values.reserve(static_cast<std::size_t>(t.num_elements()));
  visit_dtype<index_types>(t.type(), [&]<class T>() {
    for (T v : t.flat<T>()) values.push_back(static_cast<std::int64_t>(v));
  });
  return values;
}

}  // namespace troupe
