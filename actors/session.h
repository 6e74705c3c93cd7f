// session: runs steps of one graph, from any number of client threads at once.
//
//   auto root = graph::scope::new_root();
//   auto x = ops::placeholder(root.with_name("x"), dtype::float32);
//   auto y = ops::square(root.with_name("y"), x);
//   auto s = actors::session::create(*root.to_graph());
//   auto out = (*s)->run({{"x", tensor::scalar(3.0f)}}, {"y"});   // out->at(0) == 9
//
// A step names its feeds (tensors that replace the named outputs), fetches (tensors to
// return) and targets (nodes to run for their effects). The master actor prunes the
// graph to what those need, asks the device actor to prepare it once (kernels are
// instantiated once per distinct (feeds, fetches, targets)), and then every step with
// the same signature costs one message to the device. Nodes not needed never run.
//
// Errors name what failed: an unknown feed/fetch/target, a feed of the wrong dtype or
// shape, a Placeholder that must be fed, a kernel error with its node's name.
//
// Thread safety: run and run_async may be called from any number of threads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "kernels/kernel_registry.h"

namespace troupe::actors {

struct session_options {
  int compute_threads = 0;  // threads of the device's compute pool; 0: default_num_threads()
  int actor_threads = 0;    // CAF scheduler threads; 0: min(2, hardware threads)
  const kernels::kernel_registry* kernels = &kernels::kernel_registry::builtin();
};

using feed_list = std::vector<std::pair<std::string, tensor>>;
using run_callback = std::function<void(result<std::vector<tensor>>)>;

class session {
 public:
  static result<std::unique_ptr<session>> create(graph::graph g, session_options options = {});
  static result<std::unique_ptr<session>> create(std::shared_ptr<const graph::graph> g,
                                                 session_options options = {});
  ~session();

  session(const session&) = delete;
  session& operator=(const session&) = delete;

  // Runs one step and waits for it. Returns the fetches in order.
  result<std::vector<tensor>> run(const feed_list& feeds, const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets = {});
  // Starts one step; `done` is called once, on some other thread, with the result.
  void run_async(const feed_list& feeds, const std::vector<std::string>& fetches,
                 const std::vector<std::string>& targets, run_callback done);

  const graph::graph& current_graph() const;
  // How many distinct step signatures have been prepared.
  int num_prepared() const;

 private:
  struct impl;
  explicit session(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::actors
