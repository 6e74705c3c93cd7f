// The HDF5 C API as checkpoint.cc uses it: owned handles, errors as statuses (HDF5's own
// error stack, never printed), troupe dtypes as HDF5 types (as h5py writes them: bool an
// enum of int8, float16 a 2-byte IEEE float, complex a compound of r and i), attributes.
// Internal to checkpoint/.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace troupe::checkpoint::hdf5 {

// An hid_t closed with its kind's close function when it goes.
class handle {
 public:
  handle() = default;
  explicit handle(hid_t id) : id_(id) {}
  handle(handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
  handle& operator=(handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  handle(const handle&) = delete;
  handle& operator=(const handle&) = delete;
  ~handle() { reset(); }

  hid_t get() const { return id_; }
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Turns off HDF5's printing of its error stack on this thread (it is per thread).
void quiet();

// The most specific messages of HDF5's current error stack ("" when empty).
std::string last_error();

// `id` when valid, else an error "<what>: <HDF5's reason>" with code `c`.
result<handle> check(hid_t id, code c, std::string_view what);
status check(herr_t rc, code c, std::string_view what);

// The HDF5 type a dtype is stored and read as. INVALID_ARGUMENT for dtypes without one
// (string, resource, variant).
result<handle> type_of(dtype t);

// The dtype whose type_of() `type` is; INVALID_ARGUMENT for any other type.
result<dtype> dtype_of(hid_t type);

// Attributes on an object (file, group or dataset).
status write_string_attribute(hid_t object, const char* name, const std::string& value);
status write_int64_attribute(hid_t object, const char* name, std::int64_t value);
status write_uint32_attribute(hid_t object, const char* name, std::uint32_t value);
// A 2-D int64 attribute of rows x columns values (row-major).
status write_int64_matrix_attribute(hid_t object, const char* name, const std::vector<std::int64_t>& values,
                                    std::int64_t rows, std::int64_t columns);
status write_int64_array_attribute(hid_t object, const char* name, const std::vector<std::int64_t>& values);

result<std::string> read_string_attribute(hid_t object, const char* name);
result<std::int64_t> read_int64_attribute(hid_t object, const char* name);
result<std::uint32_t> read_uint32_attribute(hid_t object, const char* name);
// All values, and the attribute's dimensions.
result<std::vector<std::int64_t>> read_int64_attribute_values(hid_t object, const char* name,
                                                              std::vector<hsize_t>* dims);
bool has_attribute(hid_t object, const char* name);

}  // namespace troupe::checkpoint::hdf5
