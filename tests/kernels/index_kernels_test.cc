// Index kernels: Pad/PadV2, Tile, BroadcastTo, StridedSlice (against Python slice
// semantics, plus TensorFlow's documented ellipsis/new-axis/shrink examples) and
// StridedSliceGrad, Split/SplitV, GatherV2, UnsortedSegmentSum, TopKV2 against
// element-by-element reference loops on random shapes (fixed seeds, printed on failure);
// DynamicPartition/DynamicStitch, OneHot and Where on small worked examples; errors that
// name the bad index; and shape functions with graph-time constant operands.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

using attr_list = std::vector<std::pair<std::string, tf::AttrValue>>;
using dims_t = std::vector<std::int64_t>;

tf::NodeDef make_node(const std::string& op, const attr_list& attrs) {
  tf::NodeDef node;
  node.set_name(op);
  node.set_op(op);
  for (const auto& [key, value] : attrs) (*node.mutable_attr())[key] = value;
  return node;
}

std::vector<tensor> run_ok(const tf::NodeDef& node, const std::vector<tensor>& inputs) {
  auto outputs = kernels::run_kernel(node, inputs);
  if (!outputs.ok()) FAIL(outputs.error().to_string());
  return std::move(*outputs);
}

std::string run_error(const tf::NodeDef& node, const std::vector<tensor>& inputs) {
  auto outputs = kernels::run_kernel(node, inputs);
  REQUIRE_FALSE(outputs.ok());
  return outputs.error().to_string();
}

tensor i32(std::vector<std::int32_t> v) { return tensor::from_vector(v); }
tensor i64(std::vector<std::int64_t> v) { return tensor::from_vector(v); }

// 0, 1, 2, ... as float, of the given shape.
tensor iota_tensor(const tensor_shape& shape) {
  tensor t(dtype::float32, shape);
  auto v = t.flat<float>();
  std::iota(v.begin(), v.end(), 0.0f);
  return t;
}

tensor_shape random_shape(std::mt19937& rng, int max_rank, int max_dim) {
  std::uniform_int_distribution<int> rank_dist(0, max_rank), dim_dist(0, max_dim);
  tensor_shape s;
  int rank = rank_dist(rng);
  for (int i = 0; i < rank; ++i) s.add_dim(dim_dist(rng));
  return s;
}

std::vector<std::int64_t> strides_of(const dims_t& dims) {
  dims_t strides(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

// The multi-index of flat position k.
dims_t unravel(std::int64_t k, const dims_t& dims) {
  dims_t index(dims.size());
  for (std::size_t i = dims.size(); i-- > 0;) {
    index[i] = k % dims[i];
    k /= dims[i];
  }
  return index;
}

std::int64_t ravel(const dims_t& index, const dims_t& dims) {
  std::int64_t k = 0;
  for (std::size_t i = 0; i < dims.size(); ++i) k = k * dims[i] + index[i];
  return k;
}

void check_values(const tensor& got, const tensor_shape& shape, const std::vector<float>& want) {
  REQUIRE(got.shape() == shape);
  auto v = got.flat<float>();
  REQUIRE(v.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(v[i] == want[i]);
  }
}

TEST_CASE("Pad and PadV2 match a reference loop", "[index]") {
  const unsigned seed = 11;
  INFO("seed std::mt19937(" << seed << ")");
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pad_dist(0, 2);
  for (int trial = 0; trial < 40; ++trial) {
    tensor_shape shape = random_shape(rng, 4, 3);
    tensor x = iota_tensor(shape);
    std::vector<std::int64_t> p;
    dims_t out_dims;
    for (int i = 0; i < shape.rank(); ++i) {
      p.push_back(pad_dist(rng));
      p.push_back(pad_dist(rng));
      out_dims.push_back(shape.dim(i) + p[p.size() - 2] + p.back());
    }
    bool v2 = trial % 2 == 1;
    float c = v2 ? -7.0f : 0.0f;
    tensor paddings = tensor::from_vector(p, tensor_shape{shape.rank(), 2});
    INFO("input " << shape << " paddings " << paddings.debug_string());
    auto out = v2 ? run_ok(make_node("PadV2", {{"T", graph::attr_value(dtype::float32)},
                                               {"Tpaddings", graph::attr_value(dtype::int64)}}),
                           {x, paddings, tensor::scalar(c)})
                  : run_ok(make_node("Pad", {{"T", graph::attr_value(dtype::float32)},
                                             {"Tpaddings", graph::attr_value(dtype::int64)}}),
                           {x, paddings});
    std::vector<float> want;
    std::int64_t total = 1;
    for (auto d : out_dims) total *= d;
    for (std::int64_t k = 0; k < total; ++k) {
      dims_t o = unravel(k, out_dims), in(o.size());
      bool inside = true;
      for (std::size_t i = 0; i < o.size(); ++i) {
        in[i] = o[i] - p[2 * i];
        inside = inside && in[i] >= 0 && in[i] < shape.dim(static_cast<int>(i));
      }
      want.push_back(inside ? static_cast<float>(ravel(in, shape.dims())) : c);
    }
    check_values(out[0], tensor_shape(out_dims), want);
  }
  auto node = make_node("Pad", {{"T", graph::attr_value(dtype::float32)}, {"Tpaddings", graph::attr_value(dtype::int32)}});
  CHECK_THAT(run_error(node, {iota_tensor({2}), tensor::from_vector<std::int32_t>({-1, 0}, {1, 2})}),
             Catch::Contains("non-negative"));
  CHECK_THAT(run_error(node, {iota_tensor({2}), tensor::from_vector<std::int32_t>({1, 0, 0, 0}, {2, 2})}),
             Catch::Contains("[1,2]"));
}

TEST_CASE("Pad moves int8 and bool elements too", "[index]") {
  auto node = make_node("Pad", {{"T", graph::attr_value(dtype::int8)}, {"Tpaddings", graph::attr_value(dtype::int32)}});
  auto out = run_ok(node, {tensor::from_vector<std::int8_t>({3, 4}), tensor::from_vector<std::int32_t>({1, 2}, {1, 2})});
  CHECK(out[0].equals(tensor::from_vector<std::int8_t>({0, 3, 4, 0, 0})));
}

TEST_CASE("Tile and BroadcastTo match a reference loop", "[index]") {
  const unsigned seed = 12;
  INFO("seed std::mt19937(" << seed << ")");
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> m_dist(0, 3), coin(0, 1);
  for (int trial = 0; trial < 40; ++trial) {
    tensor_shape shape = random_shape(rng, 4, 3);
    tensor x = iota_tensor(shape);
    dims_t m, tiled, target;
    for (int i = 0; i < shape.rank(); ++i) {
      m.push_back(m_dist(rng));
      tiled.push_back(shape.dim(i) * m.back());
    }
    INFO("input " << shape);
    auto out = run_ok(make_node("Tile", {{"T", graph::attr_value(dtype::float32)},
                                          {"Tmultiples", graph::attr_value(dtype::int64)}}),
                      {x, i64(m)});
    std::vector<float> want;
    std::int64_t total = tensor_shape(tiled).num_elements();
    for (std::int64_t k = 0; k < total; ++k) {
      dims_t o = unravel(k, tiled);
      for (std::size_t i = 0; i < o.size(); ++i) o[i] %= shape.dim(static_cast<int>(i));
      want.push_back(static_cast<float>(ravel(o, shape.dims())));
    }
    check_values(out[0], tensor_shape(tiled), want);

    // BroadcastTo: size-1 dimensions (and new leading ones) stretched.
    dims_t ones = shape.dims();
    for (auto& d : ones) d = coin(rng) ? 1 : d;
    tensor small = iota_tensor(tensor_shape(ones));
    int lead = coin(rng) + coin(rng);
    for (int i = 0; i < lead; ++i) target.push_back(2);
    for (std::size_t i = 0; i < ones.size(); ++i) target.push_back(ones[i] == 1 ? m[i] : ones[i]);
    auto b = run_ok(make_node("BroadcastTo", {{"T", graph::attr_value(dtype::float32)},
                                               {"Tidx", graph::attr_value(dtype::int64)}}),
                    {small, i64(target)});
    want.clear();
    for (std::int64_t k = 0; k < tensor_shape(target).num_elements(); ++k) {
      dims_t o = unravel(k, target);
      dims_t in(o.begin() + lead, o.end());
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = ones[i] == 1 ? 0 : in[i];
      want.push_back(static_cast<float>(ravel(in, ones)));
    }
    check_values(b[0], tensor_shape(target), want);
  }
  CHECK_THAT(run_error(make_node("BroadcastTo", {{"T", graph::attr_value(dtype::float32)}, {"Tidx", graph::attr_value(dtype::int32)}}),
                       {iota_tensor({3}), i32({2, 2})}),
             Catch::Contains("cannot broadcast"));
}

// Python's slice(begin, end, stride).indices(n), then range(): an independent reference.
dims_t python_slice(std::int64_t n, std::int64_t begin, std::int64_t end, std::int64_t stride,
                    bool begin_masked, bool end_masked) {
  std::int64_t lower = stride > 0 ? 0 : -1, upper = stride > 0 ? n : n - 1;
  auto fix = [&](std::int64_t v) { return v < 0 ? std::max(v + n, lower) : std::min(v, upper); };
  std::int64_t start = begin_masked ? (stride > 0 ? lower : upper) : fix(begin);
  std::int64_t stop = end_masked ? (stride > 0 ? upper : lower) : fix(end);
  dims_t out;
  for (std::int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride) out.push_back(i);
  return out;
}

tf::NodeDef strided_slice_node(const std::string& op, std::int64_t begin_mask, std::int64_t end_mask,
                               std::int64_t ellipsis = 0, std::int64_t new_axis = 0, std::int64_t shrink = 0,
                               dtype index = dtype::int32) {
  return make_node(op, {{"T", graph::attr_value(dtype::float32)},
                        {"Index", graph::attr_value(index)},
                        {"begin_mask", graph::attr_value(begin_mask)},
                        {"end_mask", graph::attr_value(end_mask)},
                        {"ellipsis_mask", graph::attr_value(ellipsis)},
                        {"new_axis_mask", graph::attr_value(new_axis)},
                        {"shrink_axis_mask", graph::attr_value(shrink)}});
}

TEST_CASE("StridedSlice and StridedSliceGrad follow Python slicing", "[index]") {
  const unsigned seed = 13;
  INFO("seed std::mt19937(" << seed << ")");
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dim_dist(1, 5), rank_dist(1, 3), pos(-7, 7), stride_dist(-3, 3), coin(0, 3);
  for (int trial = 0; trial < 200; ++trial) {
    dims_t dims;
    int rank = rank_dist(rng);
    for (int i = 0; i < rank; ++i) dims.push_back(dim_dist(rng));
    dims_t begin, end, strides;
    std::int64_t begin_mask = 0, end_mask = 0, shrink = 0;
    std::vector<dims_t> picks;
    dims_t out_dims;
    for (int i = 0; i < rank; ++i) {
      std::int64_t s = 0;
      while (s == 0) s = stride_dist(rng);
      begin.push_back(pos(rng));
      end.push_back(pos(rng));
      strides.push_back(s);
      if (coin(rng) == 0) begin_mask |= 1 << i;
      if (coin(rng) == 0) end_mask |= 1 << i;
      auto b = static_cast<std::size_t>(i);
      if (coin(rng) == 0 && begin[b] >= -dims[b] && begin[b] < dims[b]) {
        // An index: shrinks the dimension (begin_mask is ignored there).
        shrink |= 1 << i;
        strides[b] = 1;
        begin_mask &= ~(std::int64_t{1} << i);
        picks.push_back({begin[b] < 0 ? begin[b] + dims[b] : begin[b]});
        continue;
      }
      picks.push_back(python_slice(dims[b], begin[b], end[b], s, (begin_mask >> i) & 1, (end_mask >> i) & 1));
      out_dims.push_back(static_cast<std::int64_t>(picks.back().size()));
    }
    INFO("shape " << tensor_shape(dims) << " begin " << i64(begin).debug_string() << " end "
                  << i64(end).debug_string() << " strides " << i64(strides).debug_string() << " masks "
                  << begin_mask << "/" << end_mask << " shrink " << shrink);
    tensor x = iota_tensor(tensor_shape(dims));
    auto out = run_ok(strided_slice_node("StridedSlice", begin_mask, end_mask, 0, 0, shrink, dtype::int64),
                      {x, i64(begin), i64(end), i64(strides)});
    dims_t box;
    for (const auto& p : picks) box.push_back(static_cast<std::int64_t>(p.size()));
    std::vector<float> want;
    tensor grad_want = tensor::zeros(dtype::float32, tensor_shape(dims));
    for (std::int64_t k = 0; k < tensor_shape(box).num_elements(); ++k) {
      dims_t b = unravel(k, box), in(b.size());
      for (std::size_t i = 0; i < b.size(); ++i) in[i] = picks[i][static_cast<std::size_t>(b[i])];
      want.push_back(static_cast<float>(ravel(in, dims)));
      grad_want.data<float>()[ravel(in, dims)] = static_cast<float>(k + 1);
    }
    check_values(out[0], tensor_shape(out_dims), want);
    // The gradient puts dy back where each element came from.
    tensor dy(dtype::float32, tensor_shape(out_dims));
    std::iota(dy.flat<float>().begin(), dy.flat<float>().end(), 1.0f);
    auto grad = run_ok(strided_slice_node("StridedSliceGrad", begin_mask, end_mask, 0, 0, shrink, dtype::int64),
                       {i64(dims), i64(begin), i64(end), i64(strides), dy});
    CHECK(grad[0].equals(grad_want));
  }
}

TEST_CASE("StridedSlice with ellipsis and new axes (TensorFlow's examples)", "[index]") {
  tensor x = iota_tensor({2, 3, 4});
  // x[..., 1]  ->  shape [2, 3]
  auto a = run_ok(strided_slice_node("StridedSlice", 0, 0, 1, 0, 2), {x, i32({0, 1}), i32({0, 2}), i32({1, 1})});
  check_values(a[0], {2, 3}, {1, 5, 9, 13, 17, 21});
  // x[:, tf.newaxis, ::-2]  ->  shape [2, 1, 2, 4]
  auto b = run_ok(strided_slice_node("StridedSlice", 0b101, 0b101, 0, 0b010, 0),
                  {x, i32({0, 0, 0}), i32({0, 0, 0}), i32({1, 1, -2})});
  check_values(b[0], {2, 1, 2, 4}, {8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15});
  // x[1, ..., tf.newaxis, -1]  ->  shape [3, 1]
  auto c = run_ok(strided_slice_node("StridedSlice", 0, 0, 0b0010, 0b0100, 0b1001),
                  {x, i32({1, 0, 0, -1}), i32({2, 0, 0, 0}), i32({1, 1, 1, 1})});
  check_values(c[0], {3, 1}, {15, 19, 23});
  // x[-1:0:-1, 5:1:-2]  (the second clamps to the end)
  auto d = run_ok(strided_slice_node("StridedSlice", 0, 0), {x, i32({-1, 5}), i32({0, 1}), i32({-1, -2})});
  check_values(d[0], {1, 1, 4}, {20, 21, 22, 23});

  CHECK_THAT(run_error(strided_slice_node("StridedSlice", 0, 0, 0, 0, 1), {x, i32({2}), i32({3}), i32({1})}),
             Catch::Contains("out of bounds"));
  CHECK_THAT(run_error(strided_slice_node("StridedSlice", 0, 0), {x, i32({0}), i32({1}), i32({0})}),
             Catch::Contains("non-zero"));
  CHECK_THAT(run_error(strided_slice_node("StridedSlice", 0, 0), {x, i32({0, 0, 0, 0}), i32({1, 1, 1, 1}), i32({1, 1, 1, 1})}),
             Catch::Contains("out of range"));
}

TEST_CASE("Split and SplitV match a reference loop", "[index]") {
  const unsigned seed = 14;
  INFO("seed std::mt19937(" << seed << ")");
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> rank_dist(1, 4), dim_dist(0, 3), num_dist(1, 3);
  for (int trial = 0; trial < 40; ++trial) {
    dims_t dims;
    int rank = rank_dist(rng);
    for (int i = 0; i < rank; ++i) dims.push_back(dim_dist(rng));
    int axis = std::uniform_int_distribution<int>(-rank, rank - 1)(rng);
    auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
    int num = num_dist(rng);
    dims[a] = num * dim_dist(rng);
    tensor x = iota_tensor(tensor_shape(dims));
    INFO("shape " << tensor_shape(dims) << " axis " << axis << " num_split " << num);
    auto check_parts = [&](const std::vector<tensor>& parts, const dims_t& sizes) {
      REQUIRE(parts.size() == sizes.size());
      std::int64_t start = 0;
      for (std::size_t p = 0; p < parts.size(); ++p) {
        dims_t part_dims = dims;
        part_dims[a] = sizes[p];
        std::vector<float> want;
        for (std::int64_t k = 0; k < tensor_shape(part_dims).num_elements(); ++k) {
          dims_t idx = unravel(k, part_dims);
          idx[a] += start;
          want.push_back(static_cast<float>(ravel(idx, dims)));
        }
        check_values(parts[p], tensor_shape(part_dims), want);
        start += sizes[p];
      }
    };
    auto parts = run_ok(make_node("Split", {{"T", graph::attr_value(dtype::float32)}, {"num_split", graph::attr_value(num)}}),
                        {tensor::scalar<std::int32_t>(axis), x});
    check_parts(parts, dims_t(static_cast<std::size_t>(num), dims[a] / num));

    // SplitV: random sizes, one of them given as -1.
    dims_t sizes;
    std::int64_t left = dims[a];
    for (int p = 0; p + 1 < num; ++p) {
      sizes.push_back(std::uniform_int_distribution<std::int64_t>(0, left)(rng));
      left -= sizes.back();
    }
    sizes.push_back(left);
    dims_t given = sizes;
    given[static_cast<std::size_t>(trial) % given.size()] = -1;
    auto v = run_ok(make_node("SplitV", {{"T", graph::attr_value(dtype::float32)}, {"num_split", graph::attr_value(num)},
                                          {"Tlen", graph::attr_value(dtype::int64)}}),
                    {x, i64(given), tensor::scalar<std::int32_t>(axis)});
    check_parts(v, sizes);
  }
  CHECK_THAT(run_error(make_node("Split", {{"T", graph::attr_value(dtype::float32)}, {"num_split", graph::attr_value(2)}}),
                       {tensor::scalar<std::int32_t>(0), iota_tensor({3})}),
             Catch::Contains("evenly"));
  CHECK_THAT(run_error(make_node("SplitV", {{"T", graph::attr_value(dtype::float32)}, {"num_split", graph::attr_value(2)},
                                             {"Tlen", graph::attr_value(dtype::int32)}}),
                       {iota_tensor({3}), i32({1, 1}), tensor::scalar<std::int32_t>(0)}),
             Catch::Contains("adding up"));
}

TEST_CASE("GatherV2 matches a reference loop and names a bad index", "[index]") {
  const unsigned seed = 15;
  INFO("seed std::mt19937(" << seed << ")");
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> rank_dist(1, 3), dim_dist(1, 3);
  auto node = make_node("GatherV2", {{"Tparams", graph::attr_value(dtype::float32)},
                                     {"Tindices", graph::attr_value(dtype::int64)},
                                     {"Taxis", graph::attr_value(dtype::int32)}});
  for (int trial = 0; trial < 40; ++trial) {
    dims_t dims;
    int rank = rank_dist(rng);
    for (int i = 0; i < rank; ++i) dims.push_back(dim_dist(rng));
    int axis = std::uniform_int_distribution<int>(-rank, rank - 1)(rng);
    auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
    tensor_shape index_shape = random_shape(rng, 2, 3);
    tensor indices(dtype::int64, index_shape);
    for (auto& v : indices.flat<std::int64_t>()) v = std::uniform_int_distribution<std::int64_t>(0, dims[a] - 1)(rng);
    INFO("params " << tensor_shape(dims) << " indices " << indices.debug_string() << " axis " << axis);
    auto out = run_ok(node, {iota_tensor(tensor_shape(dims)), indices, tensor::scalar<std::int32_t>(axis)});
    dims_t out_dims(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(a));
    out_dims.insert(out_dims.end(), index_shape.dims().begin(), index_shape.dims().end());
    out_dims.insert(out_dims.end(), dims.begin() + static_cast<std::ptrdiff_t>(a) + 1, dims.end());
    std::vector<float> want;
    for (std::int64_t k = 0; k < tensor_shape(out_dims).num_elements(); ++k) {
      dims_t o = unravel(k, out_dims);
      dims_t in(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(a));
      dims_t at(o.begin() + static_cast<std::ptrdiff_t>(a), o.begin() + static_cast<std::ptrdiff_t>(a) + index_shape.rank());
      in.push_back(indices.data<std::int64_t>()[ravel(at, index_shape.dims())]);
      in.insert(in.end(), o.begin() + static_cast<std::ptrdiff_t>(a) + index_shape.rank(), o.end());
      want.push_back(static_cast<float>(ravel(in, dims)));
    }
    check_values(out[0], tensor_shape(out_dims), want);
  }
  std::string error = run_error(node, {iota_tensor({5, 2}), tensor::from_vector<std::int64_t>({0, 1, 2, 7}, {2, 2}),
                                       tensor::scalar<std::int32_t>(0)});
  CHECK_THAT(error, Catch::Contains("INVALID_ARGUMENT") || Catch::Contains("invalid"));
  CHECK_THAT(error, Catch::Contains("indices[1,1] = 7 is not in [0, 5)"));
}

TEST_CASE("UnsortedSegmentSum matches a reference loop", "[index]") {
  const unsigned seed = 16;
  INFO("seed std::mt19937(" << seed << ")");
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 30; ++trial) {
    tensor_shape ids_shape = random_shape(rng, 2, 3);
    dims_t dims = ids_shape.dims();
    tensor_shape inner = random_shape(rng, 2, 3);
    dims.insert(dims.end(), inner.dims().begin(), inner.dims().end());
    std::int64_t num = std::uniform_int_distribution<std::int64_t>(0, 4)(rng);
    tensor ids(dtype::int32, ids_shape);
    for (auto& v : ids.flat<std::int32_t>()) v = std::uniform_int_distribution<std::int32_t>(-1, static_cast<std::int32_t>(num) - 1)(rng);
    tensor data(dtype::int32, tensor_shape(dims));
    std::iota(data.flat<std::int32_t>().begin(), data.flat<std::int32_t>().end(), 1);
    INFO("data " << tensor_shape(dims) << " ids " << ids.debug_string() << " num " << num);
    auto out = run_ok(make_node("UnsortedSegmentSum", {{"T", graph::attr_value(dtype::int32)},
                                                       {"Tindices", graph::attr_value(dtype::int32)}}),
                      {data, ids, tensor::scalar<std::int32_t>(static_cast<std::int32_t>(num))});
    dims_t out_dims{num};
    out_dims.insert(out_dims.end(), inner.dims().begin(), inner.dims().end());
    tensor want = tensor::zeros(dtype::int32, tensor_shape(out_dims));
    const std::int64_t n_inner = inner.num_elements();
    for (std::int64_t j = 0; j < ids.num_elements(); ++j) {
      std::int32_t s = ids.data<std::int32_t>()[j];
      if (s < 0) continue;
      for (std::int64_t i = 0; i < n_inner; ++i) want.data<std::int32_t>()[s * n_inner + i] += data.data<std::int32_t>()[j * n_inner + i];
    }
    CHECK(out[0].equals(want));
  }
  CHECK_THAT(run_error(make_node("UnsortedSegmentSum", {{"T", graph::attr_value(dtype::float32)},
                                                        {"Tindices", graph::attr_value(dtype::int32)}}),
                       {iota_tensor({3}), i32({0, 4, 1}), tensor::scalar<std::int32_t>(2)}),
             Catch::Contains("segment_ids[1] = 4"));
}

TEST_CASE("DynamicPartition and DynamicStitch", "[index]") {
  tensor data = iota_tensor({5, 2});
  tensor partitions = i32({1, 0, 1, 2, 0});
  auto parts = run_ok(make_node("DynamicPartition", {{"T", graph::attr_value(dtype::float32)},
                                                     {"num_partitions", graph::attr_value(3)}}),
                      {data, partitions});
  REQUIRE(parts.size() == 3);
  check_values(parts[0], {2, 2}, {2, 3, 8, 9});
  check_values(parts[1], {2, 2}, {0, 1, 4, 5});
  check_values(parts[2], {1, 2}, {6, 7});
  // Stitching the parts back with the partitioned positions restores the data.
  auto stitched = run_ok(make_node("DynamicStitch", {{"T", graph::attr_value(dtype::float32)}, {"N", graph::attr_value(3)}}),
                         {i32({1, 4}), i32({0, 2}), i32({3}), parts[0], parts[1], parts[2]});
  CHECK(stitched[0].equals(data));
  // Later inputs win where indices repeat.
  auto merged = run_ok(make_node("DynamicStitch", {{"T", graph::attr_value(dtype::float32)}, {"N", graph::attr_value(2)}}),
                       {i32({0, 1}), i32({1}), tensor::from_vector<float>({10, 11}), tensor::from_vector<float>({20})});
  check_values(merged[0], {2}, {10, 20});
  CHECK_THAT(run_error(make_node("DynamicPartition", {{"T", graph::attr_value(dtype::float32)},
                                                      {"num_partitions", graph::attr_value(2)}}),
                       {iota_tensor({2}), i32({0, 2})}),
             Catch::Contains("partitions[1] = 2"));
}

TEST_CASE("OneHot on each axis, with out-of-range indices", "[index]") {
  auto node = [](int axis) {
    return make_node("OneHot", {{"T", graph::attr_value(dtype::float32)}, {"TI", graph::attr_value(dtype::int32)},
                                {"axis", graph::attr_value(axis)}});
  };
  tensor indices = tensor::from_vector<std::int32_t>({0, 2, -1, 1}, {2, 2});
  std::vector<tensor> in = {indices, tensor::scalar<std::int32_t>(3), tensor::scalar(5.0f), tensor::scalar(-1.0f)};
  check_values(run_ok(node(-1), in)[0], {2, 2, 3}, {5, -1, -1, -1, -1, 5, -1, -1, -1, -1, 5, -1});
  check_values(run_ok(node(0), in)[0], {3, 2, 2}, {5, -1, -1, -1, -1, -1, -1, 5, -1, 5, -1, -1});
  check_values(run_ok(node(1), in)[0], {2, 3, 2}, {5, -1, -1, -1, -1, 5, -1, -1, -1, 5, -1, -1});
}

TEST_CASE("TopKV2 matches a stable sort, largest first", "[index]") {
  const unsigned seed = 17;
  INFO("seed std::mt19937(" << seed << ")");
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> value(0, 4);
  for (int trial = 0; trial < 30; ++trial) {
    tensor_shape shape = random_shape(rng, 3, 5);
    if (shape.rank() == 0) shape.add_dim(4);
    const std::int64_t n = shape.dim(shape.rank() - 1);
    std::int64_t k = std::uniform_int_distribution<std::int64_t>(0, n)(rng);
    tensor x(dtype::int32, shape);
    for (auto& v : x.flat<std::int32_t>()) v = value(rng);  // many ties
    INFO("input " << x.debug_string(64) << " k " << k);
    auto out = run_ok(make_node("TopKV2", {{"T", graph::attr_value(dtype::int32)}}),
                      {x, tensor::scalar<std::int32_t>(static_cast<std::int32_t>(k))});
    tensor_shape out_shape = shape;
    out_shape.set_dim(shape.rank() - 1, k);
    REQUIRE(out[0].shape() == out_shape);
    REQUIRE(out[1].type() == dtype::int32);
    const std::int64_t rows = n == 0 ? 0 : x.num_elements() / n;
    for (std::int64_t r = 0; r < rows; ++r) {
      std::vector<std::int64_t> order(static_cast<std::size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      const std::int32_t* row = x.data<std::int32_t>() + r * n;
      std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return row[a] > row[b]; });
      for (std::int64_t j = 0; j < k; ++j) {
        CHECK(out[1].data<std::int32_t>()[r * k + j] == order[static_cast<std::size_t>(j)]);
        CHECK(out[0].data<std::int32_t>()[r * k + j] == row[order[static_cast<std::size_t>(j)]]);
      }
    }
  }
  CHECK_THAT(run_error(make_node("TopKV2", {{"T", graph::attr_value(dtype::float32)}}),
                       {iota_tensor({2, 3}), tensor::scalar<std::int32_t>(4)}),
             Catch::Contains("k = 4"));
}

TEST_CASE("Where lists the coordinates of true elements in row-major order", "[index]") {
  auto out = run_ok(make_node("Where", {{"T", graph::attr_value(dtype::bool_)}}),
                    {tensor::from_vector<bool>({true, false, false, true, true, false}, {2, 3})});
  CHECK(out[0].equals(tensor::from_vector<std::int64_t>({0, 0, 1, 0, 1, 1}, {3, 2})));
  auto none = run_ok(make_node("Where", {{"T", graph::attr_value(dtype::float32)}}), {tensor::from_vector<float>({0, -0.0f})});
  CHECK(none[0].shape() == tensor_shape({0, 1}));
  auto scalar = run_ok(make_node("Where", {{"T", graph::attr_value(dtype::int32)}}), {tensor::scalar<std::int32_t>(3)});
  CHECK(scalar[0].shape() == tensor_shape({1, 0}));
}

TEST_CASE("index op shape functions use constant operands", "[index]") {
  using graph::output;
  auto s = graph::scope::new_root();
  output x = ops::placeholder(s, dtype::float32, partial_shape{2, 3, 4});
  output unknown = ops::placeholder(s, dtype::float32);
  auto c32 = [&](std::vector<std::int32_t> v) { return ops::constant(s, tensor::from_vector(v)); };
  auto scalar32 = [&](std::int32_t v) { return ops::scalar(s, v); };
  CHECK(s.add("Pad", {x, ops::constant(s, tensor::from_vector<std::int32_t>({1, 0, 0, 2, 1, 1}, {3, 2}))}).out().shape ==
        partial_shape({3, 5, 6}));
  CHECK(s.add("Tile", {x, c32({2, 1, 0})}).out().shape == partial_shape({4, 3, 0}));
  graph::operation slice = s.add("StridedSlice", {x, c32({0, 1}), c32({0, 2}), c32({1, 1})},
                                 {{"ellipsis_mask", graph::attr_value(1)}, {"shrink_axis_mask", graph::attr_value(2)}});
  CHECK(slice.out().shape == partial_shape({2, 3}));
  graph::operation split = s.add("Split", {scalar32(-1), x}, {{"num_split", graph::attr_value(2)}});
  CHECK(split.out(1).shape == partial_shape({2, 3, 2}));
  graph::operation split_v = s.add("SplitV", {x, c32({1, -1}), scalar32(1)}, {{"num_split", graph::attr_value(2)}});
  CHECK(split_v.out(1).shape == partial_shape({2, 2, 4}));
  CHECK(s.add("GatherV2", {x, ops::constant(s, tensor::from_vector<std::int32_t>({0, 1, 0, 1, 0, 1}, {2, 3})), scalar32(2)})
            .out().shape == partial_shape({2, 3, 2, 3}));
  CHECK(s.add("UnsortedSegmentSum", {x, c32({0, 1}), scalar32(5)}).out().shape == partial_shape({5, 3, 4}));
  CHECK(s.add("OneHot", {c32({1, 2}), scalar32(4), ops::scalar(s, 1.0f), ops::scalar(s, 0.0f)}).out().shape ==
        partial_shape({2, 4}));
  CHECK(s.add("TopKV2", {x, scalar32(2)}).out(1).shape == partial_shape({2, 3, 2}));
  CHECK(s.add("Where", {x}).out().shape == partial_shape({-1, 3}));
  CHECK(s.add("BroadcastTo", {c32({1, 2}), c32({3, 2})}).out().shape == partial_shape({3, 2}));
  CHECK(s.add("Tile", {unknown, c32({2, 1})}).out().shape == partial_shape({-1, -1}));
  REQUIRE(s.ok());
  // A certainly wrong operand is reported when the node is built.
  s.add("Split", {scalar32(1), x}, {{"num_split", graph::attr_value(2)}});
  CHECK_FALSE(s.ok());
}

}  // namespace
}  // namespace troupe
