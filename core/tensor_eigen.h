// Eigen views of a tensor's bytes (no copies). Row-major, as tensors are stored.
#pragma once

#include <Eigen/Core>

#include "core/tensor.h"

namespace troupe {

template <class T>
using row_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The tensor as a flat Eigen array.
template <class T>
Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> flat_array(const tensor& t) {
  return {t.data<T>(), t.num_elements()};
}

// The tensor as a rows x cols row-major matrix. REQUIRES: rows * cols == num_elements().
template <class T>
Eigen::Map<row_matrix<T>> matrix_view(const tensor& t, std::int64_t rows,
                                                        std::int64_t cols) {
  return {t.data<T>(), rows, cols};
}

// A rank-2 tensor as a matrix. REQUIRES: t.rank() == 2.
template <class T>
Eigen::Map<row_matrix<T>> matrix_view(const tensor& t) {
  return matrix_view<T>(t, t.dim(0), t.dim(1));
}

}  // namespace troupe
