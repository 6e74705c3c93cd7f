#include "kernels/batch_matmul.h"

#include <algorithm>

namespace troupe::kernels {

result<batch_matmul_shape> batch_matmul_geometry(const tensor_shape& x, const tensor_shape& y, bool adj_x, bool adj_y,
                                                 bool broadcast) {
  if (x.rank() < 2 || y.rank() < 2) {
    return invalid_argument_error("BatchMatMul needs tensors of rank 2 or more, but x is ", x.to_string(),
                                  " and y is ", y.to_string());
  }
  batch_matmul_shape g;
  g.m = x.dim(x.rank() - (adj_x ? 1 : 2));
  g.k = x.dim(x.rank() - (adj_x ? 2 : 1));
  const std::int64_t k_y = y.dim(y.rank() - (adj_y ? 1 : 2));
  g.n = y.dim(y.rank() - (adj_y ? 2 : 1));
  if (g.k != k_y) {
    return invalid_argument_error("matrix size-incompatible: x ", x.to_string(), adj_x ? " (adjoint)" : "",
                                  " has inner dimension ", g.k, " but y ", y.to_string(), adj_y ? " (adjoint)" : "",
                                  " has inner dimension ", k_y);
  }
  // Batch dimensions aligned on the right, as numpy broadcasts.
  const int rank = std::max(x.rank(), y.rank()) - 2;
  std::vector<std::int64_t> xb(static_cast<std::size_t>(rank), 1), yb(static_cast<std::size_t>(rank), 1), out;
  for (int i = 0; i < x.rank() - 2; ++i) xb[static_cast<std::size_t>(rank - (x.rank() - 2) + i)] = x.dim(i);
  for (int i = 0; i < y.rank() - 2; ++i) yb[static_cast<std::size_t>(rank - (y.rank() - 2) + i)] = y.dim(i);
  for (int i = 0; i < rank; ++i) {
    const std::int64_t a = xb[static_cast<std::size_t>(i)], b = yb[static_cast<std::size_t>(i)];
    const bool same = a == b && (broadcast || x.rank() == y.rank());
    if (!same && !(broadcast && (a == 1 || b == 1))) {
      return invalid_argument_error(broadcast ? "batch dimensions do not broadcast: x " : "batch dimensions differ: x ",
                                    x.to_string(), " and y ", y.to_string());
    }
    out.push_back(a == 1 ? b : a);
  }
  g.batches = 1;
  for (std::int64_t d : out) g.batches *= d;
  g.x_batch.resize(static_cast<std::size_t>(g.batches));
  g.y_batch.resize(static_cast<std::size_t>(g.batches));
  // Walk the output's batch index, carrying each side's matrix index (0 stride where it
  // broadcasts).
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
  for (std::int64_t b = 0; b < g.batches; ++b) {
    std::int64_t xi = 0, yi = 0;
    for (int d = 0; d < rank; ++d) {
      const auto u = static_cast<std::size_t>(d);
      xi = xi * xb[u] + (xb[u] == 1 ? 0 : index[u]);
      yi = yi * yb[u] + (yb[u] == 1 ? 0 : index[u]);
    }
    g.x_batch[static_cast<std::size_t>(b)] = xi;
    g.y_batch[static_cast<std::size_t>(b)] = yi;
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < out[static_cast<std::size_t>(d)]) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  out.push_back(g.m);
  out.push_back(g.n);
  g.output = tensor_shape(out);
  return g;
}

}  // namespace troupe::kernels
