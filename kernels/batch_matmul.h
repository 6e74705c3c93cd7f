// BatchMatMulV2's geometry, shared by its CPU and GPU kernels: the product of the
// innermost two dimensions of x and y (each adjointed on request: transposed, as these
// dtypes are real), over batch dimensions that broadcast as numpy does.
//
//   auto g = batch_matmul_geometry(x.shape(), y.shape(), adj_x, adj_y, /*broadcast=*/true);
//   for (std::int64_t b = 0; b < g->batches; ++b)
//     C[b] (m x n) = op(X[x_batch[b]]) (m x k) * op(Y[y_batch[b]]) (k x n)
//
// BatchMatMul (version 1) does not broadcast: its batch dimensions must be equal.
#pragma once

#include <cstdint>
#include <vector>

#include "core/shape.h"
#include "core/status.h"

namespace troupe::kernels {

struct batch_matmul_shape {
  tensor_shape output;  // batch dimensions, m, n
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batches = 0;
  // For each output matrix b (row-major over the output's batch dimensions), which
  // matrix of x and of y it multiplies.
  std::vector<std::int64_t> x_batch, y_batch;
};

// Errors (invalid_argument): a rank below 2, inner dimensions that differ, batch
// dimensions that do not broadcast (or, without broadcasting, differ).
result<batch_matmul_shape> batch_matmul_geometry(const tensor_shape& x, const tensor_shape& y, bool adj_x, bool adj_y,
                                                 bool broadcast);

}  // namespace troupe::kernels
