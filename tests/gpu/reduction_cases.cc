// Reductions (Sum, Mean, Max, Min, Prod, ArgMax, ArgMin), the softmax family, L2Loss and
// the index ops (GatherV2, UnsortedSegmentSum, OneHot) on the GPU against the CPU.
//
// Geometries cover each path of the GPU reductions: a warp per short row, a block per long
// row, column tiles (inner > 1, also narrower than a warp), chunked reductions with a second
// pass (few outputs, ~1e6 elements), transposed non-adjacent axes, size-1 and empty
// dimensions. Float inputs are scaled so that sums and products stay near 1. Only in-range
// labels and indices: out-of-range ones are where the GPU kernels deliberately differ.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tests/gpu/consistency.h"

namespace troupe::testing {

namespace {

using graph::attr_value;

const dtype k_reduction_dtypes[] = {dtype::float32, dtype::float64, dtype::int32, dtype::int64};
const dtype k_float_dtypes[] = {dtype::float32, dtype::float64};

tolerance summed(dtype type) {
  if (type == dtype::float32) return k_float32_sum;
  if (type == dtype::float64) return k_float64;
  return k_exact;
}

// A 1-D index tensor (or a scalar) of `type` holding `values`.
tensor index_tensor(dtype type, const std::vector<std::int64_t>& values, bool scalar = false) {
  const tensor_shape shape = scalar ? tensor_shape{} : tensor_shape{static_cast<std::int64_t>(values.size())};
  if (type == dtype::int32) {
    return tensor::from_vector(std::vector<std::int32_t>(values.begin(), values.end()), shape);
  }
  return tensor::from_vector(values, shape);
}

std::string list(const std::vector<std::int64_t>& values) {
  std::string s = "{";
  for (std::size_t i = 0; i < values.size(); ++i) s += str_cat(i > 0 ? "," : "", values[i]);
  return s + "}";
}

// Floors a float tensor's values (so that they repeat: ties for ArgMax).
void floor_values(tensor& t) {
  if (t.type() == dtype::float32) {
    for (float& x : t.flat<float>()) x = std::floor(x);
  } else if (t.type() == dtype::float64) {
    for (double& x : t.flat<double>()) x = std::floor(x);
  }
}

// Sets the given flat positions of a float tensor to NaN.
void put_nans(tensor& t, const std::vector<std::int64_t>& positions) {
  for (std::int64_t p : positions) {
    if (t.type() == dtype::float32) t.data<float>()[p] = std::numeric_limits<float>::quiet_NaN();
    else t.data<double>()[p] = std::numeric_limits<double>::quiet_NaN();
  }
}

struct reduction_geometry {
  tensor_shape shape;
  std::vector<std::int64_t> axes;
  bool scalar_axis = false;  // pass the single axis as a scalar
};

// The element count each output combines.
std::int64_t reduced_count(const reduction_geometry& g) {
  std::int64_t n = 1;
  for (std::int64_t a : g.axes) n *= g.shape.dim(static_cast<int>(a < 0 ? a + g.shape.rank() : a));
  return n;
}

void sum_like_cases(consistency_rng& rng) {
  const std::vector<reduction_geometry> geometries = {
      {{2, 3, 4}, {1}},                  // a middle run: columns
      {{2, 3, 4}, {-1}, true},           // the last axis, as a scalar: rows
      {{2, 3, 4}, {0}},                  // the first axis
      {{2, 3, 4}, {0, 2}},               // non-adjacent: transposed
      {{2, 3, 4}, {2, 0, 1}},            // all, in any order
      {{2, 3, 4}, {}},                   // none: the input reshaped
      {{3, 4, 5, 6}, {1, 3}},            // two runs apart
      {{2, 3, 2, 3, 2}, {0, 2, 4}},      // three runs apart
      {{5, 1, 7}, {1}},                  // only a size-1 axis: nothing to combine
      {{1, 7, 1}, {0, 1}},               // size-1 dimensions around
      {{9, 1, 1, 4}, {0, 2}},            // a size-1 axis beside a real one
      {{}, {}},                          // a scalar
      {{37, 513, 3}, {1}},               // odd columns narrower than a warp
      {{3, 100003}, {1}},                // long rows: chunked
      {{100003, 3}, {0}},                // long columns: chunked
      {{1000, 1000}, {1}},               // 1e6 elements, many rows of a block each
      {{1000, 1000}, {0}},               // 1e6 elements, wide columns
      {{1000000}, {0}},                  // everything into one output: chunked
      {{3, 700, 40}, {0, 2}},            // transposed, then long rows
      {{5, 0}, {1}},                     // empty reduction: the identity
      {{0, 5}, {1}},                     // empty output
      {{0}, {0}},                        // empty reduction into a scalar
      {{4, 0, 3}, {0, 2}},               // empty, several axes
  };
  const char* ops[] = {"Sum", "Mean", "Max", "Min", "Prod"};
  for (const char* op : ops) {
    const std::string name = op;
    for (dtype type : k_reduction_dtypes) {
      const bool is_float = type == dtype::float32 || type == dtype::float64;
      for (const reduction_geometry& g : geometries) {
        const std::int64_t count = std::max<std::int64_t>(reduced_count(g), 1);
        const double r = 1.0 / std::sqrt(static_cast<double>(count));
        tensor input;
        if (!is_float) {
          input = name == "Prod" ? rng.uniform(type, g.shape, 1, 3) : rng.uniform(type, g.shape, -1000, 1000);
        } else if (name == "Sum") {
          input = rng.uniform(type, g.shape, -r, r);
        } else if (name == "Prod") {
          const double spread = std::min(0.1, r);
          input = rng.uniform(type, g.shape, 1 - spread, 1 + spread);
        } else {
          input = rng.uniform(type, g.shape, -1, 1);
        }
        const bool small = g.shape.num_elements() < 100000;
        for (bool keep_dims : {false, true}) {
          if (keep_dims && !small) continue;
          for (dtype index_type : {dtype::int32, dtype::int64}) {
            if (index_type == dtype::int64 && !small) continue;
            check_consistency({str_cat(op, " ", dtype_name(type), " ", g.shape, " axes ", list(g.axes),
                                       keep_dims ? " keep_dims" : "", " Tidx ", dtype_name(index_type)),
                               node(op, {{"T", attr_value(type)},
                                         {"Tidx", attr_value(index_type)},
                                         {"keep_dims", attr_value(keep_dims)}}),
                               {input, index_tensor(index_type, g.axes, g.scalar_axis)},
                               name == "Max" || name == "Min" ? k_exact : summed(type)});
          }
        }
      }
    }
  }
  // Integer sums that overflow wrap as in the narrow type; Mean divides the true sum.
  for (const char* op : {"Sum", "Mean", "Prod"}) {
    for (dtype type : {dtype::int32, dtype::int64}) {
      const double hi = type == dtype::int32 ? 2.1e9 : 9e18;
      check_consistency({str_cat(op, " ", dtype_name(type), " overflowing [4,1000] axes {1}"),
                         node(op, {{"T", attr_value(type)}}),
                         {rng.uniform(type, {4, 1000}, hi / 2, hi), index_tensor(dtype::int32, {1})},
                         k_exact});
    }
  }
  // NaN wins in Max and Min, wherever it is.
  for (dtype type : k_float_dtypes) {
    tensor input = rng.uniform(type, {5, 700}, -1, 1);
    put_nans(input, {3, 701, 1399, 3000});
    for (const char* op : {"Max", "Min"}) {
      for (std::int64_t axis : {0, 1}) {
        check_consistency({str_cat(op, " ", dtype_name(type), " with NaNs [5,700] axis ", axis),
                           node(op, {{"T", attr_value(type)}}),
                           {input, index_tensor(dtype::int32, {axis})}, k_exact});
      }
    }
  }
  check_gpu_error({"Sum with an axis out of range", node("Sum", {{"T", attr_value(dtype::float32)}}),
                   {rng.uniform(dtype::float32, {2, 3}), index_tensor(dtype::int32, {2})}, k_exact},
                  "reduction axis 2 is out of range");
  check_gpu_error({"Max with a repeated axis", node("Max", {{"T", attr_value(dtype::int32)}}),
                   {rng.uniform(dtype::int32, {2, 3}), index_tensor(dtype::int32, {1, -1})}, k_exact},
                  "twice");
}

void arg_reduction_cases(consistency_rng& rng) {
  struct geometry {
    tensor_shape shape;
    std::int64_t axis;
  };
  const geometry geometries[] = {
      {{7, 300, 5}, 0}, {{7, 300, 5}, 1}, {{7, 300, 5}, -1}, {{1}, 0},           {{6}, 0},
      {{4, 1, 3}, 1},   {{3, 100003}, 1}, {{100003, 3}, 0},  {{1000, 1000}, 1}, {{1000, 1000}, 0},
      {{1000000}, 0},   {{0, 5}, 1},
  };
  for (const char* op : {"ArgMax", "ArgMin"}) {
    for (dtype type : k_reduction_dtypes) {
      for (const geometry& g : geometries) {
        // Few distinct values: many ties, which the first index wins.
        tensor input = rng.uniform(type, g.shape, 0, 4);
        floor_values(input);
        for (dtype output_type : {dtype::int64, dtype::int32}) {
          check_consistency({str_cat(op, " ", dtype_name(type), " ", g.shape, " axis ", g.axis, " -> ",
                                     dtype_name(output_type)),
                             node(op, {{"T", attr_value(type)}, {"output_type", attr_value(output_type)}}),
                             {input, index_tensor(dtype::int32, {g.axis}, true)}, k_exact});
        }
      }
    }
    for (dtype type : k_float_dtypes) {
      tensor input = rng.uniform(type, {5, 700}, -1, 1);
      put_nans(input, {3, 701, 1399, 1404, 3000});
      for (std::int64_t axis : {0, 1}) {
        check_consistency({str_cat(op, " ", dtype_name(type), " with NaNs [5,700] axis ", axis),
                           node(op, {{"T", attr_value(type)}, {"Tidx", attr_value(dtype::int64)}}),
                           {input, index_tensor(dtype::int64, {axis}, true)}, k_exact});
      }
    }
  }
  check_gpu_error({"ArgMax over an empty dimension", node("ArgMax", {{"T", attr_value(dtype::float32)}}),
                   {rng.uniform(dtype::float32, {3, 0}), index_tensor(dtype::int32, {1}, true)}, k_exact},
                  "cannot take ArgMax over empty dimension 1");
  check_gpu_error({"ArgMin with a dimension out of range", node("ArgMin", {{"T", attr_value(dtype::float32)}}),
                   {rng.uniform(dtype::float32, {3, 4}), index_tensor(dtype::int32, {-3}, true)}, k_exact},
                  "dimension -3 is out of range");
}

void softmax_cases(consistency_rng& rng) {
  const tensor_shape shapes[] = {{4, 1}, {7, 10}, {3, 1000}, {2, 5000}, {1000, 37}, {2, 3, 10}, {10}, {0, 10}, {4, 0}};
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (dtype type : k_float_dtypes) {
      for (const tensor_shape& shape : shapes) {
        check_consistency({str_cat(op, " ", dtype_name(type), " ", shape), node(op, {{"T", attr_value(type)}}),
                           {rng.uniform(type, shape, -5, 5)}, type == dtype::float32 ? k_float32_sum : k_float64});
      }
    }
  }
  check_gpu_error({"Softmax of a scalar", node("Softmax", {{"T", attr_value(dtype::float32)}}),
                   {rng.uniform(dtype::float32, {})}, k_exact},
                  "logits must have rank >= 1");

  // Dense labels, also broadcast from a row, a column or a vector.
  struct xent_shapes {
    tensor_shape features, labels;
  };
  const xent_shapes pairs[] = {{{4, 1}, {4, 1}},       {{7, 10}, {7, 10}},   {{3, 1000}, {3, 1000}},
                               {{2, 5000}, {2, 5000}}, {{1000, 37}, {1000, 37}}, {{6, 10}, {1, 10}},
                               {{10}, {6, 10}},        {{6, 1}, {6, 10}},    {{0, 10}, {0, 10}},
                               {{4, 0}, {4, 0}}};
  for (dtype type : k_float_dtypes) {
    for (const xent_shapes& s : pairs) {
      check_consistency({str_cat("SoftmaxCrossEntropyWithLogits ", dtype_name(type), " features ", s.features,
                                 " labels ", s.labels),
                         node("SoftmaxCrossEntropyWithLogits", {{"T", attr_value(type)}}),
                         {rng.uniform(type, s.features, -5, 5), rng.uniform(type, s.labels, 0, 1)},
                         type == dtype::float32 ? k_float32_sum : k_float64});
    }
  }
  check_gpu_error({"SoftmaxCrossEntropyWithLogits with mismatched shapes",
                   node("SoftmaxCrossEntropyWithLogits", {{"T", attr_value(dtype::float32)}}),
                   {rng.uniform(dtype::float32, {3, 4}), rng.uniform(dtype::float32, {3, 5})}, k_exact},
                  "must broadcast to a [batch, classes] matrix");

  const tensor_shape sparse_shapes[] = {{4, 1}, {7, 10}, {3, 1000}, {2, 5000}, {1000, 37}, {0, 10}};
  for (dtype type : k_float_dtypes) {
    for (dtype label_type : {dtype::int32, dtype::int64}) {
      for (const tensor_shape& shape : sparse_shapes) {
        tensor labels = rng.uniform(label_type, {shape.dim(0)}, 0, static_cast<double>(shape.dim(1) - 1));
        check_consistency({str_cat("SparseSoftmaxCrossEntropyWithLogits ", dtype_name(type), " ", shape, " labels ",
                                   dtype_name(label_type)),
                           node("SparseSoftmaxCrossEntropyWithLogits",
                                {{"T", attr_value(type)}, {"Tlabels", attr_value(label_type)}}),
                           {rng.uniform(type, shape, -5, 5), labels},
                           type == dtype::float32 ? k_float32_sum : k_float64});
      }
    }
  }
  check_gpu_error({"SparseSoftmaxCrossEntropyWithLogits with labels of the wrong length",
                   node("SparseSoftmaxCrossEntropyWithLogits",
                        {{"T", attr_value(dtype::float32)}, {"Tlabels", attr_value(dtype::int32)}}),
                   {rng.uniform(dtype::float32, {3, 4}), index_tensor(dtype::int32, {0, 1})}, k_exact},
                  "features must be [batch, classes] and labels [batch]");

  const tensor_shape l2_shapes[] = {{}, {3, 4}, {1000, 1000}, {100003}, {0}};
  for (dtype type : k_float_dtypes) {
    for (const tensor_shape& shape : l2_shapes) {
      const double r = 1.0 / std::sqrt(static_cast<double>(std::max<std::int64_t>(shape.num_elements(), 1)));
      check_consistency({str_cat("L2Loss ", dtype_name(type), " ", shape), node("L2Loss", {{"T", attr_value(type)}}),
                         {rng.uniform(type, shape, -r, r)}, type == dtype::float32 ? k_float32 : k_float64});
    }
  }
}

void index_cases(consistency_rng& rng) {
  // GatherV2: rows of every element size, moved in units of 1 to 16 bytes.
  struct gather_geometry {
    tensor_shape params, indices;
    std::int64_t axis;
  };
  const gather_geometry gathers[] = {
      {{10, 4}, {5}, 0},      {{3, 7, 5}, {2, 3}, 1}, {{3, 7, 5}, {4}, -1},   {{6}, {4}, 0},
      {{100, 64}, {1000}, 0}, {{5, 3}, {}, 0},        {{5, 3}, {0}, 0},       {{4, 9}, {6}, 1},
      {{0, 3}, {0}, 0},       {{2, 5, 0}, {3}, 1},    {{1000, 33}, {2000}, 0},
  };
  const dtype gather_dtypes[] = {dtype::float32, dtype::float64, dtype::int32, dtype::int64,
                                 dtype::int8,    dtype::uint16,  dtype::bool_};
  for (dtype type : gather_dtypes) {
    for (const gather_geometry& g : gathers) {
      const int rank = g.params.rank();
      const std::int64_t rows = g.params.dim(static_cast<int>(g.axis < 0 ? g.axis + rank : g.axis));
      for (dtype index_type : {dtype::int32, dtype::int64}) {
        tensor indices = rng.uniform(index_type, g.indices, 0, static_cast<double>(std::max<std::int64_t>(rows - 1, 0)));
        check_consistency({str_cat("GatherV2 ", dtype_name(type), " params ", g.params, " indices ", g.indices, " (",
                                   dtype_name(index_type), ") axis ", g.axis),
                           node("GatherV2", {{"Tparams", attr_value(type)},
                                             {"Tindices", attr_value(index_type)},
                                             {"Taxis", attr_value(dtype::int64)}}),
                           {rng.uniform(type, g.params, -100, 100), indices, index_tensor(dtype::int64, {g.axis}, true)},
                           k_exact});
      }
    }
  }
  check_gpu_error({"GatherV2 with an axis out of range",
                   node("GatherV2", {{"Tparams", attr_value(dtype::float32)},
                                     {"Tindices", attr_value(dtype::int32)},
                                     {"Taxis", attr_value(dtype::int32)}}),
                   {rng.uniform(dtype::float32, {3, 4}), index_tensor(dtype::int32, {0}), index_tensor(dtype::int32, {2}, true)},
                   k_exact},
                  "GatherV2: axis 2 is out of range for rank 2");

  // UnsortedSegmentSum: negative ids are dropped; float sums come in any order.
  struct segment_geometry {
    tensor_shape data, ids;
    std::int64_t num;
  };
  const segment_geometry segments[] = {
      {{20, 3}, {20}, 10}, {{4, 5, 6}, {4, 5}, 7}, {{1000, 64}, {1000}, 100}, {{1000000}, {1000000}, 1000},
      {{7}, {}, 3},        {{0, 3}, {0}, 4},       {{5, 2}, {5}, 0},
  };
  for (dtype type : k_reduction_dtypes) {
    for (const segment_geometry& s : segments) {
      for (dtype index_type : {dtype::int32, dtype::int64}) {
        tensor ids = rng.uniform(index_type, s.ids, -1, static_cast<double>(s.num - 1));
        // Floats scaled by 1/sqrt(ids per segment): segment sums stay near 1.
        const std::int64_t per_segment = std::max<std::int64_t>(1, s.ids.num_elements() / std::max<std::int64_t>(s.num, 1));
        const double r = type == dtype::float32 || type == dtype::float64 ? 1 / std::sqrt(static_cast<double>(per_segment)) : 100;
        check_consistency({str_cat("UnsortedSegmentSum ", dtype_name(type), " data ", s.data, " ids ", s.ids, " (",
                                   dtype_name(index_type), ") num_segments ", s.num),
                           node("UnsortedSegmentSum", {{"T", attr_value(type)}, {"Tindices", attr_value(index_type)}}),
                           {rng.uniform(type, s.data, -r, r), ids, index_tensor(dtype::int32, {s.num}, true)},
                           summed(type)});
      }
    }
  }
  check_gpu_error({"UnsortedSegmentSum with ids that are not a prefix of data",
                   node("UnsortedSegmentSum", {{"T", attr_value(dtype::float32)}, {"Tindices", attr_value(dtype::int32)}}),
                   {rng.uniform(dtype::float32, {4, 3}), index_tensor(dtype::int32, {0, 1, 2}),
                    index_tensor(dtype::int32, {3}, true)},
                   k_exact},
                  "must be a prefix of data's shape");

  // OneHot: indices outside [0, depth) (well defined on both) give rows of off_value.
  struct one_hot_geometry {
    tensor_shape indices;
    std::int64_t depth, axis;
  };
  const one_hot_geometry one_hots[] = {{{6}, 5, -1}, {{3, 4}, 5, 0}, {{3, 4}, 7, 1}, {{3, 4}, 3, -1},
                                       {{}, 4, -1},  {{1000}, 1000, -1}, {{0}, 3, -1}, {{5}, 0, -1}};
  const dtype one_hot_dtypes[] = {dtype::float32, dtype::float64, dtype::int32, dtype::int64, dtype::int8, dtype::bool_};
  for (dtype type : one_hot_dtypes) {
    for (dtype index_type : {dtype::uint8, dtype::int8, dtype::int32, dtype::int64}) {
      for (const one_hot_geometry& g : one_hots) {
        const double lo = index_type == dtype::uint8 ? 0 : -1;
        const double hi = std::min<double>(static_cast<double>(g.depth), 127);
        tensor on = rng.uniform(type, {}, 1, 100), off = rng.uniform(type, {}, -100, 0);
        check_consistency({str_cat("OneHot ", dtype_name(type), " indices ", g.indices, " (", dtype_name(index_type),
                                   ") depth ", g.depth, " axis ", g.axis),
                           node("OneHot", {{"T", attr_value(type)}, {"TI", attr_value(index_type)},
                                           {"axis", attr_value(g.axis)}}),
                           {rng.uniform(index_type, g.indices, lo, hi), tensor::scalar<std::int32_t>(static_cast<std::int32_t>(g.depth)),
                            on, off},
                           k_exact});
      }
    }
  }
  check_gpu_error({"OneHot with a negative depth",
                   node("OneHot", {{"T", attr_value(dtype::float32)}, {"TI", attr_value(dtype::int32)}}),
                   {index_tensor(dtype::int32, {0, 1}), tensor::scalar<std::int32_t>(-1), tensor::scalar<float>(1),
                    tensor::scalar<float>(0)},
                   k_exact},
                  "must be non-negative");
}

}  // namespace

void reduction_cases() {
  consistency_rng rng(23);
  sum_like_cases(rng);
  arg_reduction_cases(rng);
  softmax_cases(rng);
  index_cases(rng);
}

}  // namespace troupe::testing
