// troupe demo: the tour a newcomer sees first. It builds a two-layer perceptron with the
// C++ builder API, saves the GraphDef, runs steps through a session (one, then many from
// several threads at once), shows pruning and a clear error, and says what it did.
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <thread>

#include "actors/session.h"
#include "core/npy.h"
#include "graph/graph_io.h"
#include "graph/ops.h"
#include "tools/commands.h"

namespace troupe::tools {

int demo_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string save_dir = "troupe-demo";
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--out" && i + 1 < args.size()) {
      save_dir = args[++i];
    } else {
      err << "usage: troupe demo [--out DIR]\n";
      return 2;
    }
  }
  constexpr int k_seed = 42;
  out << "troupe demo (seed " << k_seed << ")\n\n";

  // 1. Build: logits = relu(x W1 + b1) W2 + b2, probabilities = softmax(logits).
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 784});
  std::vector<std::string> weights;  // the weight tensors' names, to fetch once and feed after
  auto layer = [&](const std::string& name, graph::output in, std::int64_t fan_in, std::int64_t fan_out, int seed) {
    auto s = root.sub(name);
    auto shape = ops::constant(s.with_name("shape"), tensor::from_vector<std::int32_t>(
                                                         {static_cast<int>(fan_in), static_cast<int>(fan_out)}));
    auto w = ops::mul(s, ops::truncated_normal(s.with_name("init"), shape, dtype::float32, k_seed, seed),
                      ops::scalar(s.with_name("stddev"), 0.05f));
    weights.push_back(w.name());
    auto b = ops::constant(s.with_name("bias"), tensor::zeros(dtype::float32, {fan_out}));
    return ops::bias_add(s, ops::matmul(s, in, w), b);
  };
  auto hidden = ops::relu(root.with_name("hidden"), layer("layer1", x, 784, 512, 1));
  auto logits = layer("layer2", hidden, 512, 10, 2);
  auto prob = ops::softmax(root.with_name("prob"), logits);
  auto predicted = ops::argmax(root.with_name("predicted"), logits, ops::scalar<std::int32_t>(root, 1));
  // A branch that would fail if it ran: pruning keeps it out of steps that don't need it.
  auto unused = ops::placeholder(root.with_name("never_fed"), dtype::float32, {});
  ops::identity(root.with_name("needs_never_fed"), unused);

  auto g = root.to_graph();
  if (!g.ok()) {
    err << "building the graph failed: " << g.error() << "\n";
    return 1;
  }
  std::filesystem::create_directories(save_dir);
  std::string graph_path = save_dir + "/mlp.pbtxt";
  if (auto s = graph::write_graph_def(graph_path, g->to_graph_def()); !s.ok()) {
    err << s << "\n";
    return 1;
  }
  out << "1. built a 784-512-10 perceptron: " << g->num_nodes() << " nodes, saved as " << graph_path
      << "\n   (run it again with: build/troupe eval --graph " << graph_path << " --feed x="
      << save_dir << "/x.npy --fetch prob --out OUT)\n";

  // 2. One step.
  auto session = actors::session::create(std::move(*g));
  if (!session.ok()) {
    err << session.error() << "\n";
    return 1;
  }
  tensor batch(dtype::float32, {64, 784});
  for (std::int64_t i = 0; i < batch.num_elements(); ++i) {
    batch.data<float>()[i] = static_cast<float>((i * 7919) % 256) / 255.0f;
  }
  // The random initializers draw new values every step (as TensorFlow's do), so the first
  // step also fetches the weights, and later steps feed them back in.
  if (auto s = write_npy(save_dir + "/x.npy", batch); !s.ok()) {
    err << s << "\n";
    return 1;
  }
  auto result = (*session)->run({{"x", batch}}, {"prob", "predicted", weights[0], weights[1]});
  if (!result.ok()) {
    err << "step failed: " << result.error() << "\n";
    return 1;
  }
  const tensor& p = (*result)[0];
  float row_sum = 0;
  for (int j = 0; j < 10; ++j) row_sum += p.data<float>()[j];
  out << "2. ran one step on a batch of 64: prob is " << dtype_name(p.type()) << " "
      << p.shape().to_string() << " (row 0 sums to " << std::fixed << std::setprecision(4)
      << row_sum << "), predicted is " << (*result)[1].debug_string(8) << "\n";
  actors::feed_list feeds = {{"x", batch}, {weights[0], (*result)[2]}, {weights[1], (*result)[3]}};

  // 3. Many steps at once, from several threads, sharing the prepared step.
  constexpr int k_threads = 4;
  constexpr int k_steps = 50;
  std::atomic<int> failures{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < k_steps; ++i) {
        auto r = (*session)->run(feeds, {"prob"});
        if (!r.ok() || !r->at(0).equals(p)) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out << "3. ran " << k_threads * k_steps << " steps (weights fed) from " << k_threads << " threads in "
      << std::setprecision(3) << seconds << " s (" << std::setprecision(1)
      << k_threads * k_steps / seconds << " steps/s); " << failures.load()
      << " differed from step 2; prepared step signatures: " << (*session)->num_prepared() << "\n";

  // 4. Errors name what failed.
  auto bad = (*session)->run({}, {"needs_never_fed"});
  out << "4. fetching a tensor that needs an unfed placeholder fails clearly:\n   "
      << bad.to_status() << "\n";
  auto wrong = (*session)->run({{"x", tensor::zeros(dtype::float32, {2, 10})}}, {"prob"});
  out << "   and so does a feed of the wrong shape:\n   " << wrong.to_status() << "\n";
  out << "\ndone.\n";
  return failures.load() == 0 && !bad.ok() && !wrong.ok() ? 0 : 1;
}

}  // namespace troupe::tools
