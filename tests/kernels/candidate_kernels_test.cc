// The kernels of kernels/cpu/candidate_kernels.cc: LogUniformCandidateSampler's draws
// against the log-uniform law (chi-square over many draws), unique sampling (no
// duplicates, a full permutation when num_sampled == range_max), expected counts against
// TensorFlow's formulas, determinism for fixed seeds, errors; ComputeAccidentalHits
// against a brute-force loop and TensorFlow's documented example.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/attr.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

struct sampler_attrs {
  std::int64_t num_true = 1;
  std::int64_t num_sampled = 1;
  bool unique = false;
  std::int64_t range_max = 10;
  std::int64_t seed = 1;
  std::int64_t seed2 = 2;
};

tf::NodeDef sampler_node(const sampler_attrs& a) {
  tf::NodeDef node;
  node.set_name("sampler");
  node.set_op("LogUniformCandidateSampler");
  auto& attrs = *node.mutable_attr();
  attrs["num_true"] = graph::attr_value(a.num_true);
  attrs["num_sampled"] = graph::attr_value(a.num_sampled);
  attrs["unique"] = graph::attr_value(a.unique);
  attrs["range_max"] = graph::attr_value(a.range_max);
  attrs["seed"] = graph::attr_value(a.seed);
  attrs["seed2"] = graph::attr_value(a.seed2);
  return node;
}

std::vector<tensor> run(const tf::NodeDef& node, const std::vector<tensor>& inputs) {
  auto out = kernels::run_kernel(node, inputs);
  if (!out.ok()) FAIL(out.error());
  return std::move(*out);
}

double log_uniform_p(std::int64_t k, std::int64_t range_max) {
  return std::log((k + 2.0) / (k + 1.0)) / std::log(range_max + 1.0);
}

// Pearson's statistic of the sampled candidates against P(k) * n.
double chi_square(const tensor& sampled, std::int64_t range_max) {
  std::vector<double> counts(static_cast<std::size_t>(range_max), 0.0);
  std::int64_t outside = 0;
  for (std::int64_t k : sampled.flat<std::int64_t>()) {
    if (k < 0 || k >= range_max) ++outside;
    else counts[static_cast<std::size_t>(k)] += 1;
  }
  REQUIRE(outside == 0);
  const auto n = static_cast<double>(sampled.num_elements());
  double statistic = 0;
  for (std::int64_t k = 0; k < range_max; ++k) {
    double expected = n * log_uniform_p(k, range_max);
    double d = counts[static_cast<std::size_t>(k)] - expected;
    statistic += d * d / expected;
  }
  return statistic;
}

tensor classes(std::vector<std::int64_t> values, std::int64_t num_true) {
  auto rows = static_cast<std::int64_t>(values.size()) / num_true;
  return tensor::from_vector(values, {rows, num_true});
}

}  // namespace

TEST_CASE("LogUniformCandidateSampler draws the log-uniform law", "[candidate_kernels]") {
  // Upper 1e-6 quantiles of chi-square with range_max - 1 degrees of freedom.
  const std::pair<std::int64_t, double> cases[] = {{10, 46.0}, {50, 101.0}, {1000, 1230.0}};
  for (auto [range_max, bound] : cases) {
    sampler_attrs a{.num_sampled = 200000, .range_max = range_max, .seed = 11, .seed2 = range_max};
    INFO("range_max " << range_max << ", seeds (11, " << range_max << ")");
    auto out = run(sampler_node(a), {classes({0, 1}, 1)});
    double statistic = chi_square(out[0], range_max);
    INFO("chi-square " << statistic << " with " << range_max - 1 << " degrees of freedom");
    CHECK(statistic < bound);
    // And it is not trivially small either (a sampler returning exact proportions would
    // be suspicious): above the 1e-6 lower quantile, roughly df / 4 here.
    CHECK(statistic > 0.2 * static_cast<double>(range_max - 1));
  }
}

TEST_CASE("without unique, expected counts are p * num_sampled", "[candidate_kernels]") {
  sampler_attrs a{.num_true = 2, .num_sampled = 64, .range_max = 100, .seed = 3, .seed2 = 4};
  tensor true_classes = classes({0, 99, 5, 5, 17, 42}, 2);
  auto out = run(sampler_node(a), {true_classes});
  REQUIRE(out.size() == 3);
  REQUIRE(out[0].shape() == tensor_shape{64});
  REQUIRE(out[1].shape() == tensor_shape{3, 2});
  REQUIRE(out[2].shape() == tensor_shape{64});
  auto sampled = out[0].flat<std::int64_t>();
  for (std::size_t i = 0; i < sampled.size(); ++i) {
    CHECK(out[2].flat<float>()[i] == Approx(64 * log_uniform_p(sampled[i], 100)).epsilon(1e-6));
  }
  auto tc = true_classes.flat<std::int64_t>();
  for (std::size_t i = 0; i < tc.size(); ++i) {
    CHECK(out[1].flat<float>()[i] == Approx(64 * log_uniform_p(tc[i], 100)).epsilon(1e-6));
  }
}

TEST_CASE("unique sampling never repeats and its expected counts follow the number of tries",
          "[candidate_kernels]") {
  const std::int64_t range_max = 20;
  for (std::int64_t num_sampled : {1, 5, 19, 20}) {
    int runs_with_rejections = 0;
    for (std::int64_t seed2 = 1; seed2 <= 100; ++seed2) {
      INFO("num_sampled " << num_sampled << ", seeds (5, " << seed2 << ")");
      sampler_attrs a{.num_sampled = num_sampled, .unique = true, .range_max = range_max, .seed = 5, .seed2 = seed2};
      tensor true_classes = classes({0, 7, 19}, 1);
      auto out = run(sampler_node(a), {true_classes});
      auto sampled = out[0].flat<std::int64_t>();
      std::set<std::int64_t> distinct(sampled.begin(), sampled.end());
      REQUIRE(distinct.size() == sampled.size());
      REQUIRE(*distinct.begin() >= 0);
      REQUIRE(*distinct.rbegin() < range_max);

      // Every count is 1 - (1 - p)^t for one number of tries t >= num_sampled (or
      // p * num_sampled when no draw was rejected). Recover t from the rarest candidate,
      // whose count is furthest from 1 and so the most precise.
      std::size_t rarest = 0;
      for (std::size_t i = 0; i < sampled.size(); ++i) {
        if (sampled[i] > sampled[rarest]) rarest = i;
      }
      double p_rare = log_uniform_p(sampled[rarest], range_max);
      double c_rare = out[2].flat<float>()[rarest];
      double tries = std::round(std::log1p(-c_rare) / std::log1p(-p_rare));
      bool rejected = std::abs(c_rare - p_rare * static_cast<double>(num_sampled)) > 1e-6 * c_rare;
      auto expected = [&](std::int64_t k) {
        double p = log_uniform_p(k, range_max);
        return rejected ? -std::expm1(tries * std::log1p(-p)) : p * static_cast<double>(num_sampled);
      };
      if (rejected) {
        ++runs_with_rejections;
        CHECK(tries > static_cast<double>(num_sampled));
      }
      for (std::size_t i = 0; i < sampled.size(); ++i) {
        CHECK(out[2].flat<float>()[i] == Approx(expected(sampled[i])).epsilon(1e-4));
      }
      auto tc = true_classes.flat<std::int64_t>();
      for (std::size_t i = 0; i < tc.size(); ++i) {
        CHECK(out[1].flat<float>()[i] == Approx(expected(tc[i])).epsilon(1e-4));
      }
    }
    INFO("num_sampled " << num_sampled);
    if (num_sampled == 1) CHECK(runs_with_rejections == 0);  // a single draw is never rejected
    if (num_sampled >= 19) CHECK(runs_with_rejections == 100);
  }
}

TEST_CASE("the sampler is deterministic for fixed seeds", "[candidate_kernels]") {
  sampler_attrs a{.num_sampled = 32, .unique = true, .range_max = 1000, .seed = 9, .seed2 = 10};
  auto first = run(sampler_node(a), {classes({3}, 1)});
  auto again = run(sampler_node(a), {classes({3}, 1)});
  for (int i = 0; i < 3; ++i) CHECK(first[static_cast<std::size_t>(i)].equals(again[static_cast<std::size_t>(i)]));
  a.seed2 = 11;
  auto other = run(sampler_node(a), {classes({3}, 1)});
  CHECK_FALSE(first[0].equals(other[0]));
}

TEST_CASE("sampler errors say what is wrong", "[candidate_kernels]") {
  SECTION("more unique candidates than classes") {
    auto r = kernels::run_kernel(sampler_node({.num_sampled = 11, .unique = true, .range_max = 10}),
                                 {classes({0}, 1)});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message(), Catch::Contains("num_sampled = 11") && Catch::Contains("range_max = 10"));
  }
  SECTION("true_classes with the wrong number of columns") {
    auto r = kernels::run_kernel(sampler_node({.num_true = 2, .num_sampled = 3}), {classes({0, 1, 2}, 3)});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message(), Catch::Contains("[1,3]") && Catch::Contains("num_true = 2"));
  }
  SECTION("a true class outside the range") {
    auto r = kernels::run_kernel(sampler_node({.num_sampled = 3, .range_max = 10}), {classes({4, 10}, 1)});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message(), Catch::Contains("true class 10") && Catch::Contains("[0, range_max = 10)"));
  }
}

namespace {

tf::NodeDef hits_node(std::int64_t num_true) {
  tf::NodeDef node;
  node.set_name("hits");
  node.set_op("ComputeAccidentalHits");
  (*node.mutable_attr())["num_true"] = graph::attr_value(num_true);
  return node;
}

}  // namespace

TEST_CASE("ComputeAccidentalHits matches TensorFlow's example", "[candidate_kernels]") {
  auto out = run(hits_node(2), {classes({1, 2, 0, 4, 3, 3}, 2), tensor::from_vector<std::int64_t>({0, 1, 2, 3, 4})});
  CHECK(out[0].equals(tensor::from_vector<std::int32_t>({0, 0, 1, 1, 2, 2})));
  CHECK(out[1].equals(tensor::from_vector<std::int64_t>({1, 2, 0, 4, 3, 3})));
  for (float w : out[2].flat<float>()) CHECK(w == -FLT_MAX);
}

TEST_CASE("ComputeAccidentalHits agrees with a brute-force loop", "[candidate_kernels]") {
  std::mt19937 rng(17);
  INFO("seed std::mt19937(17)");
  for (int trial = 0; trial < 50; ++trial) {
    std::uniform_int_distribution<std::int64_t> size(0, 12), num_true_dist(1, 4), value(0, 15);
    const std::int64_t batch = size(rng), num_true = num_true_dist(rng), num_sampled = size(rng);
    std::vector<std::int64_t> true_values(static_cast<std::size_t>(batch * num_true));
    std::vector<std::int64_t> sampled(static_cast<std::size_t>(num_sampled));
    for (auto& v : true_values) v = value(rng);
    for (auto& v : sampled) v = value(rng);  // with repeats: the last position counts
    INFO("trial " << trial << ": batch " << batch << ", num_true " << num_true << ", num_sampled " << num_sampled);
    auto out = run(hits_node(num_true), {tensor::from_vector(true_values, {batch, num_true}),
                                         tensor::from_vector(sampled, {num_sampled})});
    std::vector<std::int32_t> rows;
    std::vector<std::int64_t> ids;
    for (std::int64_t i = 0; i < batch; ++i) {
      for (std::int64_t j = 0; j < num_true; ++j) {
        std::int64_t last = -1;
        for (std::int64_t p = 0; p < num_sampled; ++p) {
          if (sampled[static_cast<std::size_t>(p)] == true_values[static_cast<std::size_t>(i * num_true + j)]) last = p;
        }
        if (last >= 0) {
          rows.push_back(static_cast<std::int32_t>(i));
          ids.push_back(last);
        }
      }
    }
    const auto hits = static_cast<std::int64_t>(rows.size());
    CHECK(out[0].equals(tensor::from_vector(rows, {hits})));
    CHECK(out[1].equals(tensor::from_vector(ids, {hits})));
    REQUIRE(out[2].shape() == tensor_shape{hits});
    for (float w : out[2].flat<float>()) CHECK(w == -FLT_MAX);
  }
}

TEST_CASE("ComputeAccidentalHits checks its inputs", "[candidate_kernels]") {
  auto wrong_columns = kernels::run_kernel(hits_node(2), {classes({1, 2, 3}, 3), tensor::from_vector<std::int64_t>({1})});
  REQUIRE_FALSE(wrong_columns.ok());
  CHECK_THAT(wrong_columns.error().message(), Catch::Contains("num_true = 2"));
  auto not_a_vector = kernels::run_kernel(hits_node(1), {classes({1}, 1), tensor::from_vector<std::int64_t>({1, 2}, {1, 2})});
  REQUIRE_FALSE(not_a_vector.ok());
  CHECK_THAT(not_a_vector.error().message(), Catch::Contains("vector"));
}

}  // namespace troupe
