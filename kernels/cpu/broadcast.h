// Numpy broadcasting for element-wise CPU kernels.
//
// broadcast_plan<K> maps K operand shapes onto their common output shape (numpy rules:
// align on the right, a dimension of 1 stretches, missing leading dimensions are 1) and
// collapses the dimensions: size-1 output dimensions are dropped and neighbours that
// every operand walks contiguously (or every broadcast operand repeats identically) are
// merged, so [2,3,4] + [4] becomes [6,4] + [4] and [3,1] * [1,4] stays [3,4].
//
// A kernel then walks the output in runs along the innermost collapsed dimension:
//
//   auto plan = broadcast_plan<2>::make({x.shape(), y.shape()});
//   if (!plan.ok()) return ctx.fail(plan.error());
//   plan->for_each_run(begin, end, [&](std::int64_t out, const std::array<std::int64_t, 2>& in,
//                                      std::int64_t length,
//                                      const std::array<std::int64_t, 2>& step) { ... });
//
// Within a run operand k advances by step[k] elements, which is always 0 (the operand
// repeats one value) or 1 (contiguous). Any [begin, end) slice can be walked on its own,
// so blocks of a parallel_for each walk theirs.
//
// Thread safety: a plan is immutable once made; for_each_run may run concurrently.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/status.h"

namespace troupe::kernels {

template <int K>
class broadcast_plan {
 public:
  using offsets = std::array<std::int64_t, K>;

  // invalid_argument "Incompatible shapes: [2,3] vs. [4]" when the shapes do not
  // broadcast (TensorFlow's wording).
  static result<broadcast_plan> make(const std::array<tensor_shape, K>& shapes);

  const tensor_shape& output_shape() const { return output_; }

  // Calls run(out_offset, in_offsets, length, steps) for consecutive runs covering the
  // output elements [begin, end). REQUIRES: 0 <= begin <= end <= output elements.
  template <class F>
  void for_each_run(std::int64_t begin, std::int64_t end, F&& run) const;

 private:
  tensor_shape output_;
  std::vector<std::int64_t> dims_;                    // collapsed; at least one
  std::array<std::vector<std::int64_t>, K> strides_;  // per operand, 0 where repeated
};

// The message for shapes that do not broadcast, naming all of them.
template <std::size_t K>
std::string incompatible_shapes_message(const std::array<tensor_shape, K>& shapes) {
  std::string message = "Incompatible shapes: ";
  for (std::size_t k = 0; k < K; ++k) {
    if (k > 0) message += " vs. ";
    message += shapes[k].to_string();
  }
  return message;
}

template <int K>
result<broadcast_plan<K>> broadcast_plan<K>::make(const std::array<tensor_shape, K>& shapes) {
  int rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.rank());
  // dim_of(k, i): operand k's size along output dimension i (1 where it has none).
  auto dim_of = [&](int k, int i) -> std::int64_t {
    int j = shapes[k].rank() - rank + i;
    return j >= 0 ? shapes[k].dim(j) : 1;
  };
  std::vector<std::int64_t> out_dims(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    std::int64_t d = 1;
    for (int k = 0; k < K; ++k) {
      std::int64_t dk = dim_of(k, i);
      if (dk == 1 || dk == d) continue;
      if (d != 1) return invalid_argument_error(incompatible_shapes_message(shapes));
      d = dk;
    }
    out_dims[static_cast<std::size_t>(i)] = d;
  }

  broadcast_plan plan;
  plan.output_ = tensor_shape(out_dims);
  // Row-major strides of each operand within its own shape.
  std::array<std::vector<std::int64_t>, K> own;
  for (int k = 0; k < K; ++k) {
    own[k].resize(static_cast<std::size_t>(rank));
    std::int64_t stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
      own[k][static_cast<std::size_t>(i)] = stride;
      stride *= dim_of(k, i);
    }
  }
  for (int i = 0; i < rank; ++i) {
    std::int64_t d = out_dims[static_cast<std::size_t>(i)];
    if (d == 1) continue;  // contributes nothing to any offset
    std::array<std::int64_t, K> stride;
    for (int k = 0; k < K; ++k) {
      stride[k] = dim_of(k, i) == 1 ? 0 : own[k][static_cast<std::size_t>(i)];
    }
    bool merge = !plan.dims_.empty();
    for (int k = 0; k < K && merge; ++k) merge = plan.strides_[k].back() == stride[k] * d;
    if (merge) {
      plan.dims_.back() *= d;
      for (int k = 0; k < K; ++k) plan.strides_[k].back() = stride[k];
    } else {
      plan.dims_.push_back(d);
      for (int k = 0; k < K; ++k) plan.strides_[k].push_back(stride[k]);
    }
  }
  if (plan.dims_.empty()) {  // every dimension is 1: a single element
    plan.dims_.push_back(1);
    for (int k = 0; k < K; ++k) plan.strides_[k].push_back(0);
  }
  return plan;
}

template <int K>
template <class F>
void broadcast_plan<K>::for_each_run(std::int64_t begin, std::int64_t end, F&& run) const {
  if (begin >= end) return;
  const int outer_rank = static_cast<int>(dims_.size()) - 1;
  const std::int64_t inner = dims_.back();
  offsets step;
  for (int k = 0; k < K; ++k) step[k] = strides_[k].back();

  // The multi-index of `begin` over the outer dimensions, and each operand's offset there.
  std::vector<std::int64_t> index(static_cast<std::size_t>(std::max(outer_rank, 0)));
  offsets base{};
  std::int64_t position = begin % inner;
  std::int64_t rest = begin / inner;
  for (int i = outer_rank - 1; i >= 0; --i) {
    auto u = static_cast<std::size_t>(i);
    index[u] = rest % dims_[u];
    rest /= dims_[u];
    for (int k = 0; k < K; ++k) base[k] += index[u] * strides_[k][u];
  }

  std::int64_t out = begin;
  while (out < end) {
    std::int64_t length = std::min(inner - position, end - out);
    offsets in;
    for (int k = 0; k < K; ++k) in[k] = base[k] + position * step[k];
    run(out, in, length, step);
    out += length;
    position = 0;
    // Advance the outer multi-index by one, carrying.
    for (int i = outer_rank - 1; i >= 0; --i) {
      auto u = static_cast<std::size_t>(i);
      for (int k = 0; k < K; ++k) base[k] += strides_[k][u];
      if (++index[u] < dims_[u]) break;
      for (int k = 0; k < K; ++k) base[k] -= strides_[k][u] * dims_[u];
      index[u] = 0;
    }
  }
}

}  // namespace troupe::kernels
