// Phantom tensors: a dtype and a shape whose contents stand for nothing. A shape-only
// simulation (simulation.execute_kernels: false, doc/simulation.md) moves them through
// the cluster in place of the tensors its kernels would have computed: their sizes are
// real (transfers and kernels take their time), their bytes are not.
//
//   tensor t = phantom_tensor(dtype::float32, {4096, 4096});  // 64 MB, none of it allocated
//   is_phantom(t);   // true; t.on_host() is false: no kernel may read it
//
// A phantom of at most k_readable_phantom_bytes of a plain dtype reads as zeros (a scalar
// loss a caller prints, say); a larger one has no bytes at all and is not on_host(). A
// phantom is charged to no memory account: a model larger than this machine's memory
// fits. Whatever is computed from a phantom is a phantom.
#pragma once

#include <cstddef>
#include <span>

#include "core/tensor.h"

namespace troupe {

inline constexpr std::size_t k_readable_phantom_bytes = 4096;

// The dtypes whose values a phantom can stand for: not strings, resource handles or
// variants (C++ objects, which no zero bytes make).
bool phantom_stands_for(dtype type);

tensor phantom_tensor(dtype type, tensor_shape shape);
bool is_phantom(const tensor& t);
bool any_phantom(std::span<const tensor> tensors);

}  // namespace troupe
