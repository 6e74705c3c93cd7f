// Reading and writing NumPy's .npy format (version 1.0 and 2.0 headers; C order;
// little-endian or byte-order-neutral dtypes): the way tensors enter and leave the
// `troupe` command line. Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//
// Reading is strict, since a file may come from anywhere: the header must be the dict
// numpy writes (exactly the keys 'descr', 'fortran_order' and 'shape'), and the data must
// be exactly the bytes the shape needs. Errors are invalid_argument (unimplemented for a
// dtype or layout troupe does not read, resource_exhausted for a tensor over the memory
// limit of core/memory.h) and name the source and what is wrong. Nothing
// is allocated from the header's shape before it has been checked against the bytes
// present, so a header that lies about its size costs nothing. A bool array's non-zero
// bytes are read as 1 (true), as numpy reads them.
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
