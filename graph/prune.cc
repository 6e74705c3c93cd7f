#include "graph/prune.h"

#include <algorithm>
#include <set>

namespace troupe::graph {

std::vector<int> prune(const graph& g, const std::vector<endpoint>& feeds,
                       const std::vector<endpoint>& fetches, const std::vector<int>& targets) {
  std::set<endpoint> fed(feeds.begin(), feeds.end());
  std::vector<char> needed(static_cast<std::size_t>(g.num_nodes()), 0);
  std::vector<int> stack;
  auto need = [&](int id) {
    if (!needed[static_cast<std::size_t>(id)]) {
      needed[static_cast<std::size_t>(id)] = 1;
      stack.push_back(id);
    }
  };
  for (const auto& e : fetches) {
    if (fed.count(e) == 0) need(e.node);
  }
  for (int t : targets) need(t);
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    const node& n = g.get(id);
    for (const auto& in : n.inputs) {
      if (fed.count(in) == 0) need(in.node);
    }
    for (int c : n.control_inputs) need(c);
  }
  std::vector<int> order;
  for (int id : g.topological_order()) {
    if (needed[static_cast<std::size_t>(id)]) order.push_back(id);
  }
  return order;
}

}  // namespace troupe::graph
