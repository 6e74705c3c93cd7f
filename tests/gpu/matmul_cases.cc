// MatMul: every transpose combination, odd and empty sizes, float32 and float64.
#include <cmath>

#include "tests/gpu/consistency.h"

namespace troupe::testing {

void matmul_cases() {
  consistency_rng rng(11);
  struct geometry {
    std::int64_t m, k, n;
  };
  const geometry geometries[] = {{1, 1, 1}, {3, 5, 7}, {64, 64, 64}, {127, 33, 65}, {256, 512, 384},
                                 {1, 1000, 1}, {0, 4, 3}, {4, 0, 3}, {4, 3, 0}};
  for (dtype type : {dtype::float32, dtype::float64}) {
    for (const geometry& g : geometries) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          // Inputs scaled by 1/sqrt(k) keep the products near 1.
          const double r = 1.0 / std::sqrt(static_cast<double>(std::max<std::int64_t>(g.k, 1)));
          tensor a = rng.uniform(type, ta ? tensor_shape{g.k, g.m} : tensor_shape{g.m, g.k}, -r, r);
          tensor b = rng.uniform(type, tb ? tensor_shape{g.n, g.k} : tensor_shape{g.k, g.n}, -r, r);
          check_consistency({str_cat("MatMul ", dtype_name(type), " m=", g.m, " k=", g.k, " n=", g.n,
                                     ta ? " transpose_a" : "", tb ? " transpose_b" : ""),
                             node("MatMul", {{"T", graph::attr_value(type)},
                                             {"transpose_a", graph::attr_value(ta)},
                                             {"transpose_b", graph::attr_value(tb)}}),
                             {a, b},
                             type == dtype::float32 ? k_float32_sum : k_float64});
        }
      }
    }
  }
  check_gpu_error({"MatMul with mismatched inner dimensions",
                   node("MatMul", {{"T", graph::attr_value(dtype::float32)}}),
                   {rng.uniform(dtype::float32, {2, 3}), rng.uniform(dtype::float32, {4, 2})}, k_float32},
                  "matrix size-incompatible");
}

}  // namespace troupe::testing

namespace troupe::testing {

void batch_matmul_cases() {
  consistency_rng rng(12);
  struct shapes {
    tensor_shape x, y;
  };
  // Equal batches, y broadcast whole, x broadcast whole, and batches that broadcast
  // both ways (one product per matrix).
  const shapes cases[] = {{{4, 33, 17}, {4, 17, 9}}, {{6, 64, 32}, {32, 48}}, {{16, 8}, {3, 8, 12}},
                          {{2, 1, 5, 7}, {3, 7, 6}}, {{2, 0, 7}, {2, 7, 3}}};
  for (dtype type : {dtype::float32, dtype::float64}) {
    for (const shapes& c : cases) {
      for (bool adj_x : {false, true}) {
        for (bool adj_y : {false, true}) {
          auto swap_last = [](tensor_shape s) {
            std::vector<std::int64_t> d = s.dims();
            std::swap(d[d.size() - 1], d[d.size() - 2]);
            return tensor_shape(d);
          };
          tensor_shape xs = adj_x ? swap_last(c.x) : c.x, ys = adj_y ? swap_last(c.y) : c.y;
          const double r = 1.0 / std::sqrt(static_cast<double>(c.x.dim(c.x.rank() - 1) + 1));
          check_consistency({str_cat("BatchMatMulV2 ", dtype_name(type), " x ", xs, adj_x ? " adj_x" : "", " y ", ys,
                                     adj_y ? " adj_y" : ""),
                             node("BatchMatMulV2", {{"T", graph::attr_value(type)},
                                                    {"adj_x", graph::attr_value(adj_x)},
                                                    {"adj_y", graph::attr_value(adj_y)}}),
                             {rng.uniform(type, xs, -r, r), rng.uniform(type, ys, -r, r)},
                             type == dtype::float32 ? k_float32_sum : k_float64});
        }
      }
    }
  }
  check_gpu_error({"BatchMatMulV2 with batches that do not broadcast",
                   node("BatchMatMulV2", {{"T", graph::attr_value(dtype::float32)}}),
                   {rng.uniform(dtype::float32, {2, 3, 4}), rng.uniform(dtype::float32, {3, 4, 5})}, k_float32},
                  "do not broadcast");
}

}  // namespace troupe::testing
