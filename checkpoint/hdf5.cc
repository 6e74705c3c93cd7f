#include "checkpoint/hdf5.h"

namespace troupe::checkpoint::hdf5 {

void handle::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string last_error() {
  std::vector<std::string> messages;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* error, void* data) -> herr_t {
        auto* out = static_cast<std::vector<std::string>*>(data);
        if (error->desc != nullptr && *error->desc != '\0') out->emplace_back(error->desc);
        return 0;
      },
      &messages);
  H5Eclear2(H5E_DEFAULT);
  // The innermost two say what went wrong ("unable to open file: file signature not found").
  std::string out;
  const size_t first = messages.size() > 2 ? messages.size() - 2 : 0;
  for (size_t i = first; i < messages.size(); ++i) out += (out.empty() ? "" : ": ") + messages[i];
  return out.empty() ? "HDF5 gave no reason" : out;
}

result<handle> check(hid_t id, code c, std::string_view what) {
  if (id >= 0) return handle(id);
  return status(c, str_cat(what, ": ", last_error()));
}

status check(herr_t rc, code c, std::string_view what) {
  if (rc >= 0) return status();
  return status(c, str_cat(what, ": ", last_error()));
}

namespace {

result<handle> float_type(size_t size, size_t sign, size_t exponent_position, size_t exponent_bits,
                          size_t mantissa_bits, size_t bias) {
  handle t(H5Tcopy(H5T_IEEE_F32LE));
  if (H5Tset_fields(t.get(), sign, exponent_position, exponent_bits, 0, mantissa_bits) < 0 ||
      H5Tset_size(t.get(), size) < 0 || H5Tset_ebias(t.get(), bias) < 0) {
    return internal_error("building a ", size * 8, "-bit float type: ", last_error());
  }
  return t;
}

result<handle> complex_type(hid_t part) {
  const size_t part_size = H5Tget_size(part);
  handle t(H5Tcreate(H5T_COMPOUND, 2 * part_size));
  if (H5Tinsert(t.get(), "r", 0, part) < 0 || H5Tinsert(t.get(), "i", part_size, part) < 0) {
    return internal_error("building a complex type: ", last_error());
  }
  return t;
}

}  // namespace

result<handle> type_of(dtype t) {
  switch (t) {
    case dtype::float32: return handle(H5Tcopy(H5T_IEEE_F32LE));
    case dtype::float64: return handle(H5Tcopy(H5T_IEEE_F64LE));
    case dtype::int8: return handle(H5Tcopy(H5T_STD_I8LE));
    case dtype::int16: return handle(H5Tcopy(H5T_STD_I16LE));
    case dtype::int32: return handle(H5Tcopy(H5T_STD_I32LE));
    case dtype::int64: return handle(H5Tcopy(H5T_STD_I64LE));
    case dtype::uint8: return handle(H5Tcopy(H5T_STD_U8LE));
    case dtype::uint16: return handle(H5Tcopy(H5T_STD_U16LE));
    case dtype::uint32: return handle(H5Tcopy(H5T_STD_U32LE));
    case dtype::uint64: return handle(H5Tcopy(H5T_STD_U64LE));
    case dtype::float16: return float_type(2, 15, 10, 5, 10, 15);
    case dtype::bfloat16: return float_type(2, 15, 7, 8, 7, 127);
    case dtype::complex64: return complex_type(H5T_IEEE_F32LE);
    case dtype::complex128: return complex_type(H5T_IEEE_F64LE);
    case dtype::bool_: {
      handle e(H5Tenum_create(H5T_STD_I8LE));
      const std::int8_t no = 0, yes = 1;
      if (H5Tenum_insert(e.get(), "FALSE", &no) < 0 || H5Tenum_insert(e.get(), "TRUE", &yes) < 0) {
        return internal_error("building the bool type: ", last_error());
      }
      return e;
    }
    default: break;
  }
  return invalid_argument_error("dtype ", dtype_name(t), " cannot be stored in a checkpoint");
}

result<dtype> dtype_of(hid_t type) {
  for (dtype t : {dtype::float32, dtype::float64, dtype::int8, dtype::int16, dtype::int32, dtype::int64, dtype::uint8,
                  dtype::uint16, dtype::uint32, dtype::uint64, dtype::float16, dtype::bfloat16, dtype::complex64,
                  dtype::complex128, dtype::bool_}) {
    auto candidate = type_of(t);
    if (candidate.ok() && H5Tequal(type, candidate->get()) > 0) return t;
  }
  H5Eclear2(H5E_DEFAULT);
  return invalid_argument_error("an HDF5 type that is no troupe dtype");
}

namespace {

status write_attribute(hid_t object, const char* name, hid_t type, hid_t space, const void* value) {
  static const std::int64_t nothing = 0;  // HDF5 wants a buffer even for no values
  if (value == nullptr) value = &nothing;
  if (H5Aexists(object, name) > 0) H5Adelete(object, name);
  auto attribute_or = check(H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT), code::data_loss, str_cat("creating attribute ", name));
  if (!attribute_or.ok()) return attribute_or.error();
  handle attribute = std::move(*attribute_or);
  return check(H5Awrite(attribute.get(), type, value), code::data_loss, str_cat("writing attribute ", name));
}

result<handle> open_attribute(hid_t object, const char* name) {
  if (H5Aexists(object, name) <= 0) return data_loss_error("attribute '", name, "' is missing");
  return check(H5Aopen(object, name, H5P_DEFAULT), code::data_loss, str_cat("opening attribute ", name));
}

}  // namespace

status write_string_attribute(hid_t object, const char* name, const std::string& value) {
  handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  handle space(H5Screate(H5S_SCALAR));
  const char* text = value.c_str();
  return write_attribute(object, name, type.get(), space.get(), &text);
}

status write_int64_attribute(hid_t object, const char* name, std::int64_t value) {
  handle space(H5Screate(H5S_SCALAR));
  return write_attribute(object, name, H5T_STD_I64LE, space.get(), &value);
}

status write_uint32_attribute(hid_t object, const char* name, std::uint32_t value) {
  handle space(H5Screate(H5S_SCALAR));
  return write_attribute(object, name, H5T_STD_U32LE, space.get(), &value);
}

status write_int64_matrix_attribute(hid_t object, const char* name, const std::vector<std::int64_t>& values,
                                    std::int64_t rows, std::int64_t columns) {
  const hsize_t dims[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(columns)};
  handle space(H5Screate_simple(2, dims, nullptr));
  return write_attribute(object, name, H5T_STD_I64LE, space.get(), values.data());
}

status write_int64_array_attribute(hid_t object, const char* name, const std::vector<std::int64_t>& values) {
  const hsize_t dims[1] = {values.size()};
  handle space(H5Screate_simple(1, dims, nullptr));
  return write_attribute(object, name, H5T_STD_I64LE, space.get(), values.data());
}

bool has_attribute(hid_t object, const char* name) { return H5Aexists(object, name) > 0; }

result<std::string> read_string_attribute(hid_t object, const char* name) {
  auto attribute_or = open_attribute(object, name);
  if (!attribute_or.ok()) return attribute_or.error();
  handle attribute = std::move(*attribute_or);
  handle stored(H5Aget_type(attribute.get()));
  if (H5Tget_class(stored.get()) != H5T_STRING || H5Tis_variable_str(stored.get()) <= 0) {
    return data_loss_error("attribute '", name, "' is not a string");
  }
  handle space(H5Aget_space(attribute.get()));
  if (H5Sget_simple_extent_npoints(space.get()) != 1) return data_loss_error("attribute '", name, "' is not one string");
  handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5Tget_cset(stored.get()));
  char* text = nullptr;
  TROUPE_RETURN_IF_ERROR(check(H5Aread(attribute.get(), type.get(), &text), code::data_loss,
                               str_cat("reading attribute ", name)));
  std::string out = text != nullptr ? text : "";
  H5free_memory(text);
  return out;
}

result<std::vector<std::int64_t>> read_int64_attribute_values(hid_t object, const char* name,
                                                              std::vector<hsize_t>* dims) {
  auto attribute_or = open_attribute(object, name);
  if (!attribute_or.ok()) return attribute_or.error();
  handle attribute = std::move(*attribute_or);
  handle stored(H5Aget_type(attribute.get()));
  if (H5Tget_class(stored.get()) != H5T_INTEGER) return data_loss_error("attribute '", name, "' is not integer");
  handle space(H5Aget_space(attribute.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > 2) return data_loss_error("attribute '", name, "' has rank ", rank);
  dims->assign(static_cast<size_t>(rank), 0);
  H5Sget_simple_extent_dims(space.get(), dims->data(), nullptr);
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  if (count < 0 || count > (1 << 24)) return data_loss_error("attribute '", name, "' holds ", count, " values");
  std::vector<std::int64_t> values(static_cast<size_t>(count));
  if (count > 0) {
    TROUPE_RETURN_IF_ERROR(check(H5Aread(attribute.get(), H5T_NATIVE_INT64, values.data()), code::data_loss,
                                 str_cat("reading attribute ", name)));
  }
  return values;
}

result<std::int64_t> read_int64_attribute(hid_t object, const char* name) {
  std::vector<hsize_t> dims;
  auto values_or = read_int64_attribute_values(object, name, &dims);
  if (!values_or.ok()) return values_or.error();
  auto values = std::move(*values_or);
  if (!dims.empty() || values.size() != 1) return data_loss_error("attribute '", name, "' is not one integer");
  return values[0];
}

result<std::uint32_t> read_uint32_attribute(hid_t object, const char* name) {
  auto value_or = read_int64_attribute(object, name);
  if (!value_or.ok()) return value_or.error();
  auto value = std::move(*value_or);
  if (value < 0 || value > 0xffffffffLL) return data_loss_error("attribute '", name, "' is out of range");
  return static_cast<std::uint32_t>(value);
}

}  // namespace troupe::checkpoint::hdf5
