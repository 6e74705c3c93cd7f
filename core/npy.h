// Reading and writing NumPy's .npy format (version 1.0 and 2.0 headers; C order;
// little-endian or byte-order-neutral dtypes): the way tensors enter and leave the
// `troupe` command line. Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace troupe {

// Parses a whole .npy file's bytes. `what` names the source in error messages.
result<tensor> parse_npy(const std::string& bytes, const std::string& what);
result<tensor> read_npy(const std::string& path);

std::string serialize_npy(const tensor& t);
status write_npy(const std::string& path, const tensor& t);

}  // namespace troupe
