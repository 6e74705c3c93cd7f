// The TensorFlow GraphDef corpus (tests/tf_compat/README.md): every case under corpus/ is a
// GraphDef TensorFlow wrote and the session runs TensorFlow made on it; troupe loads the
// graph with its GraphDef reader, makes the same runs in one session and must fetch what
// TensorFlow fetched: integers and booleans exactly, floats within the case's tolerances
// (|troupe - tf| <= atol + rtol * |tf|; defaults below), NaN where TensorFlow has NaN.
//
// TROUPE_TF_CASE=SUBSTRING runs only the cases whose folder name contains it.
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "actors/session.h"
#include "core/npy.h"
#include "graph/graph.h"
#include "graph/graph_io.h"
#include "tests/tf_compat/tf_case.pb.h"

namespace fs = std::filesystem;
using namespace troupe;

namespace {

const fs::path k_corpus = fs::path(TROUPE_SOURCE_DIR) / "tests/tf_compat/corpus";

struct tolerance {
  double rtol;
  double atol;
};

tolerance tolerance_of(const tf_compat::Case& c, dtype type) {
  tolerance t = type == dtype::float64 ? tolerance{1e-12, 1e-12} : tolerance{2e-6, 1e-6};
  if (c.rtol() > 0) t.rtol = std::max(t.rtol, c.rtol());
  if (c.atol() > 0) t.atol = std::max(t.atol, c.atol());
  return t;
}

// Elements as doubles (exact for every integer troupe fetches here) in C order.
std::vector<double> as_doubles(const tensor& t) {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(t.num_elements()));
  bool known = visit_dtype(t.type(), [&]<class T>() {
    if constexpr (std::is_arithmetic_v<T>) {
      for (T v : t.flat<T>()) out.push_back(static_cast<double>(v));
    }
  });
  (void)known;
  return out;
}

// Empty when they match; otherwise what differs, for a person.
std::string compare(const tensor& got, const tensor& want, tf_compat::TensorFile::Compare how,
                    tolerance tol) {
  if (got.type() != want.type()) {
    return "dtype " + std::string(dtype_name(got.type())) + ", TensorFlow's " +
           std::string(dtype_name(want.type()));
  }
  if (got.shape() != want.shape()) {
    return "shape " + got.shape().to_string() + ", TensorFlow's " + want.shape().to_string();
  }
  if (how == tf_compat::TensorFile::SHAPE) return "";
  std::vector<double> a = as_doubles(got), b = as_doubles(want);
  if (how == tf_compat::TensorFile::SORTED) {
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
  }
  bool exact = got.type() != dtype::float32 && got.type() != dtype::float64;
  for (std::size_t i = 0; i < a.size(); ++i) {
    bool ok = exact ? a[i] == b[i]
                    : (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i] ||
                          std::abs(a[i] - b[i]) <= tol.atol + tol.rtol * std::abs(b[i]);
    if (!ok) {
      std::ostringstream s;
      s.precision(9);
      s << "element " << i << " is " << a[i] << ", TensorFlow's " << b[i] << "\n      troupe: "
        << got.debug_string(8) << "\n      tf:     " << want.debug_string(8);
      return s.str();
    }
  }
  return "";
}

// Runs one case; empty when it passes, else why not.
std::string run_case(const fs::path& folder) {
  std::ifstream in(folder / "case.pbtxt");
  std::stringstream text;
  text << in.rdbuf();
  tf_compat::Case c;
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), &c)) return "case.pbtxt does not parse";
  auto def = graph::read_graph_def((folder / c.graph()).string());
  if (!def.ok()) return "reading the graph: " + def.error().to_string();
  auto g = graph::graph::from_graph_def(std::move(*def));
  if (!g.ok()) return "loading the graph: " + g.error().to_string();
  actors::session_options options;
  options.compute_threads = 1;
  options.gpus = 0;
  auto s = actors::session::create(std::move(*g), options);
  if (!s.ok()) return "creating a session: " + s.error().to_string();
  for (int r = 0; r < c.run_size(); ++r) {
    const tf_compat::Run& run = c.run(r);
    actors::feed_list feeds;
    for (const auto& f : run.feed()) {
      auto t = read_npy((folder / f.file()).string());
      if (!t.ok()) return "reading " + f.file() + ": " + t.error().to_string();
      feeds.emplace_back(f.name(), std::move(*t));
    }
    std::vector<std::string> fetches;
    for (const auto& f : run.fetch()) fetches.push_back(f.name());
    std::vector<std::string> targets(run.target().begin(), run.target().end());
    result<std::vector<tensor>> out = std::vector<tensor>{};
    for (int i = 0; i < std::max(1, run.repeat()); ++i) {
      out = (*s)->run(feeds, fetches, targets);
      if (!run.error().empty()) {
        if (out.ok()) return "run " + std::to_string(r) + " succeeded; TensorFlow failed with '" + run.error() + "'";
        if (out.error().message().find(run.error()) == std::string::npos) {
          return "run " + std::to_string(r) + " failed with " + out.error().to_string() + "; TensorFlow's error has '" +
                 run.error() + "'";
        }
        break;
      }
      if (!out.ok()) return "run " + std::to_string(r) + ": " + out.error().to_string();
    }
    if (!run.error().empty()) continue;
    for (int i = 0; i < run.fetch_size(); ++i) {
      const auto& f = run.fetch(i);
      auto want = read_npy((folder / f.file()).string());
      if (!want.ok()) return "reading " + f.file() + ": " + want.error().to_string();
      std::string diff = compare((*out)[i], *want, f.compare(), tolerance_of(c, want->type()));
      if (!diff.empty()) return "run " + std::to_string(r) + ", fetch " + f.name() + ": " + diff;
    }
  }
  return "";
}

}  // namespace

TEST_CASE("every case TensorFlow wrote runs in troupe and fetches what TensorFlow fetched") {
  REQUIRE(fs::is_directory(k_corpus));
  const char* only = std::getenv("TROUPE_TF_CASE");
  std::vector<fs::path> folders;
  for (const auto& entry : fs::directory_iterator(k_corpus)) {
    if (!entry.is_directory()) continue;
    if (only != nullptr && entry.path().filename().string().find(only) == std::string::npos) continue;
    folders.push_back(entry.path());
  }
  std::sort(folders.begin(), folders.end());
  REQUIRE(!folders.empty());
  int failed = 0;
  for (const fs::path& folder : folders) {
    std::string why = run_case(folder);
    if (!why.empty()) {
      ++failed;
      UNSCOPED_INFO(folder.filename().string() << ": " << why);
    }
  }
  INFO(failed << " of " << folders.size() << " cases failed");
  CHECK(failed == 0);
}
