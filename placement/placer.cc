#include "placement/placer.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <set>
#include <span>

#include "graph/attr.h"

namespace troupe::placement {

namespace {

constexpr std::string_view k_colocation_prefix = "loc:@";

std::string node_label(const graph::node& n) {
  return str_cat("'", n.name(), "' (", n.op_name(), ")");
}

// Why two nodes were put into one group, for error messages.
struct colocation_edge {
  int a = -1;
  int b = -1;
  std::string reason;
};

// Union-find over node ids plus the edges that joined them.
class colocation_graph {
 public:
  explicit colocation_graph(const graph::graph& g)
      : parent_(static_cast<std::size_t>(g.num_nodes())) {
    std::iota(parent_.begin(), parent_.end(), 0);
    std::map<std::string, int, std::less<>> label_owner;  // `_class` labels naming no node
    for (int id = 0; id < g.num_nodes(); ++id) {
      const graph::node& n = g.get(id);
      std::vector<std::string> classes;
      if (graph::has_attr(n.def, "_class")) {
        status s = graph::get_attr(n.def, "_class", &classes);
        if (!s.ok() && status_.ok()) {
          status_ = invalid_argument_error(
              "node ", node_label(n), ": attribute '_class' must be a list of ",
              "strings such as [\"loc:@other_node\"] (", s.message(), ")");
        }
        for (const auto& c : classes) {
          if (!c.starts_with(k_colocation_prefix)) continue;
          std::string label = c.substr(k_colocation_prefix.size());
          if (const graph::node* target = g.find(label)) {
            join(id, target->id, str_cat("'", n.name(), "' has _class ", c));
          } else if (auto [it, inserted] = label_owner.emplace(label, id); !inserted) {
            join(id, it->second,
                 str_cat("'", n.name(), "' and '", g.get(it->second).name(), "' share _class ", c));
          }
        }
      }
      for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.input_types[i] != dtype::resource) continue;
        const graph::node& producer = g.get(n.inputs[i].node);
        join(id, producer.id,
             str_cat("'", n.name(), "' takes resource input ", i, " from '", producer.name(), "'"));
      }
    }
  }

  // The first malformed `_class` attribute, if any.
  const status& error() const { return status_; }

  int root(int id) {
    while (parent_[static_cast<std::size_t>(id)] != id) {
      int& p = parent_[static_cast<std::size_t>(id)];
      p = parent_[static_cast<std::size_t>(p)];
      id = p;
    }
    return id;
  }

  // The groups, each sorted by member id, ordered by their first member, as one flat
  // array (a graph of 10^5 nodes is mostly groups of one: no allocation per group).
  // A group's root is its smallest member (join keeps the smaller root), so ordering by
  // root is ordering by first member.
  struct group_list {
    std::vector<int> members;
    std::vector<int> begins;  // group i is members[begins[i], begins[i + 1])
    std::size_t size() const { return begins.size() - 1; }
    std::span<const int> operator[](std::size_t i) const {
      return std::span<const int>(members.data() + begins[i], static_cast<std::size_t>(begins[i + 1] - begins[i]));
    }
  };
  group_list groups() {
    const std::size_t n = parent_.size();
    std::vector<int> start(n + 1, 0);  // by root: where its members begin
    for (int id = 0; id < static_cast<int>(n); ++id) ++start[static_cast<std::size_t>(root(id)) + 1];
    group_list out;
    for (std::size_t r = 0; r < n; ++r) {
      if (start[r + 1] > 0) out.begins.push_back(start[r]);
      start[r + 1] += start[r];
    }
    out.begins.push_back(static_cast<int>(n));
    out.members.resize(n);
    for (int id = 0; id < static_cast<int>(n); ++id) out.members[static_cast<std::size_t>(start[static_cast<std::size_t>(root(id))]++)] = id;
    return out;
  }

  // The chain of reasons that put `from` and `to` into one group ("; "-separated).
  std::string explain(int from, int to) const {
    std::map<int, std::vector<std::size_t>> adjacent;
    for (std::size_t e = 0; e < edges_.size(); ++e) {
      adjacent[edges_[e].a].push_back(e);
      adjacent[edges_[e].b].push_back(e);
    }
    std::map<int, std::size_t> via;  // node -> edge it was reached through
    std::deque<int> queue{from};
    std::set<int> seen{from};
    while (!queue.empty() && !seen.count(to)) {
      int at = queue.front();
      queue.pop_front();
      for (std::size_t e : adjacent[at]) {
        int next = edges_[e].a == at ? edges_[e].b : edges_[e].a;
        if (seen.insert(next).second) {
          via[next] = e;
          queue.push_back(next);
        }
      }
    }
    std::vector<std::string> chain;
    for (int at = to; at != from && via.count(at);) {
      const colocation_edge& e = edges_[via[at]];
      chain.push_back(e.reason);
      at = e.a == at ? e.b : e.a;
    }
    std::string out;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it)
      out += str_cat(out.empty() ? "" : "; ", *it);
    return out;
  }

 private:
  void join(int a, int b, std::string reason) {
    int ra = root(a), rb = root(b);
    if (ra == rb) return;
    parent_[static_cast<std::size_t>(std::max(ra, rb))] = std::min(ra, rb);
    edges_.push_back({a, b, std::move(reason)});
  }

  std::vector<int> parent_;
  std::vector<colocation_edge> edges_;
  status status_;
};

std::string list_devices(const std::vector<device_name>& devices) {
  std::string out;
  std::size_t shown = 0;
  for (const auto& d : devices) {
    if (shown++ == 8) {
      out += str_cat(", ... (", devices.size(), " in all)");
      break;
    }
    out += str_cat(out.empty() ? "" : ", ", to_string(d));
  }
  return out;
}

std::string list_members(const graph::graph& g, std::span<const int> members) {
  std::string out;
  std::size_t shown = 0;
  for (int id : members) {
    if (shown++ == 8) {
      out += str_cat(", ... (", members.size(), " nodes)");
      break;
    }
    out += str_cat(out.empty() ? "" : ", ", "'", g.get(id).name(), "'");
  }
  return out;
}

class placer {
 public:
  placer(const graph::graph& g, std::vector<device_name> devices,
         const kernel_predicate& has_kernel, device_name default_device, bool soft)
      : g_(g),
        devices_(std::move(devices)),
        has_kernel_(has_kernel),
        default_(std::move(default_device)),
        soft_(soft),
        coloc_(g) {}

  result<placement> run() {
    TROUPE_RETURN_IF_ERROR(coloc_.error());
    placement out;
    out.index.resize(static_cast<std::size_t>(g_.num_nodes()));
    const auto groups = coloc_.groups();
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const std::span<const int> members = groups[i];
      auto chosen = place_group(members);
      if (!chosen.ok()) return chosen.error();
      const std::string name = to_string(*chosen);
      for (int id : members) out.assign(id, name);
    }
    return out;
  }

 private:
  // The member's own request, parsed.
  result<device_name> request_of(int id) const {
    const graph::node& n = g_.get(id);
    auto parsed = parse_device_name(n.def.device());
    if (!parsed.ok())
      return parsed.error().with_context(str_cat("node ", node_label(n), " requests a device"));
    return parsed;
  }

  std::string group_note(std::span<const int> members) const {
    if (members.size() == 1) return "";
    return str_cat(" (merged over its colocation group ", list_members(g_, members), ")");
  }

  // Rule 2: the members' requests merged; conflicts name both nodes and why they are
  // colocated.
  result<device_name> merged_request(std::span<const int> members) {
    device_name merged;
    merge_mode mode = soft_ ? merge_mode::soft : merge_mode::strict;
    std::vector<int> requesting;
    for (int id : members) {
      auto request = request_of(id);
      if (!request.ok()) return request.error();
      if (request->empty()) continue;
      auto next = merge(merged, *request, mode);
      if (!next.ok()) {
        for (int earlier : requesting) {
          auto earlier_request = request_of(earlier);
          auto pair = merge(*earlier_request, *request, mode);
          if (pair.ok()) continue;
          const graph::node& a = g_.get(earlier);
          const graph::node& b = g_.get(id);
          return invalid_argument_error(
              "cannot place nodes ", node_label(a), " and ", node_label(b), " on one device: '",
              a.name(), "' requests '", a.def.device(), "' and '", b.name(), "' requests '",
              b.def.device(), "' (", pair.error().message(),
              "), but they must be colocated: ", coloc_.explain(earlier, id));
        }
        return next.error().with_context(str_cat("node ", node_label(g_.get(id))));
      }
      merged = *next;
      requesting.push_back(id);
    }
    return merged;
  }

  bool kernel(int id, const std::string& type) {
    auto& known = kernel_cache_[type];  // by node id: -1 not asked yet, else the answer
    if (known.empty()) known.assign(static_cast<std::size_t>(g_.num_nodes()), -1);
    signed char& k = known[static_cast<std::size_t>(id)];
    if (k < 0) k = has_kernel_(g_.get(id), type) ? 1 : 0;
    return k == 1;
  }

  // The first member without a kernel for `type`, or -1.
  int missing_kernel(std::span<const int> members, const std::string& type) {
    for (int id : members) {
      if (!kernel(id, type)) return id;
    }
    return -1;
  }

  std::vector<device_name> candidates(std::span<const int> members, const device_name& spec) {
    std::vector<device_name> out;
    for (const auto& d : devices_) {
      if (matches(spec, d) && missing_kernel(members, *d.type) < 0) out.push_back(d);
    }
    return out;
  }

  // Which member lacks a kernel for each device type among `devices`, for errors.
  std::string kernel_gaps(std::span<const int> members,
                          const std::vector<device_name>& devices) {
    std::set<std::string> types;
    for (const auto& d : devices) types.insert(*d.type);
    std::string out;
    for (const auto& type : types) {
      int id = missing_kernel(members, type);
      if (id >= 0)
        out +=
            str_cat(out.empty() ? "" : "; ", node_label(g_.get(id)), " has no ", type, " kernel");
    }
    return out;
  }

  // Rule 4.
  device_name choose(const std::vector<device_name>& found, const device_name& request) const {
    // The first match's task, and on it TensorFlow's order of device types: a GPU
    // before a CPU, else the order of `devices`.
    auto priority = [](const device_name& d) { return *d.type == "GPU" ? 2 : *d.type == "CPU" ? 1 : 0; };
    auto best_on_task_of = [&](const device_name& first, const device_name& preferred) {
      const device_name* best = &first;
      for (const auto& d : found) {
        if (matches(preferred, d) && matches(task_of(first), d) && priority(d) > priority(*best)) best = &d;
      }
      return *best;
    };
    for (const device_name& preferred :
         {fill_missing(request, default_), fill_missing(request, task_of(default_))}) {
      for (const auto& d : found) {
        if (matches(preferred, d)) return best_on_task_of(d, preferred);
      }
    }
    return best_on_task_of(found.front(), device_name{});
  }

  result<device_name> place_group(std::span<const int> members) {
    auto request = merged_request(members);
    if (!request.ok()) return request.error();
    const graph::node& first = g_.get(members.front());
    auto found = candidates(members, *request);
    if (!found.empty()) return choose(found, *request);

    std::vector<device_name> matching;
    for (const auto& d : devices_) {
      if (matches(*request, d)) matching.push_back(d);
    }
    if (request->empty()) {
      return invalid_argument_error("no device of the cluster can run node ", node_label(first),
                                    group_note(members), ": ", kernel_gaps(members, devices_));
    }
    if (!soft_) {
      if (matching.empty()) {
        return invalid_argument_error(
            "node ", node_label(first), " requests device '", to_string(*request), "'",
            group_note(members),
            ", but no device of the cluster matches it; devices are: ", list_devices(devices_),
            " (allow_soft_placement would place it on another device)");
      }
      return invalid_argument_error(
          "node ", node_label(first), " requests device '", to_string(*request), "'",
          group_note(members),
          ", but no matching device can run it: ", kernel_gaps(members, matching),
          " (allow_soft_placement would place it on another device)");
    }
    // Soft placement: same task on another device type, then anywhere.
    device_name relaxed = *request;
    relaxed.type.reset();
    relaxed.id.reset();
    found = candidates(members, relaxed);
    if (!found.empty()) return choose(found, relaxed);
    found = candidates(members, device_name{});
    if (!found.empty()) return choose(found, device_name{});
    return invalid_argument_error("no device of the cluster can run node ", node_label(first),
                                  group_note(members), " (requested '", to_string(*request),
                                  "', soft placement allowed): ", kernel_gaps(members, devices_));
  }

  const graph::graph& g_;
  std::vector<device_name> devices_;
  const kernel_predicate& has_kernel_;
  device_name default_;
  bool soft_;
  colocation_graph coloc_;
  std::map<std::string, std::vector<signed char>, std::less<>> kernel_cache_;  // by device type
};

}  // namespace

result<placement> place(const graph::graph& g, const std::vector<std::string>& devices,
                        const kernel_predicate& has_kernel, const placer_options& options) {
  if (devices.empty()) return invalid_argument_error("placement needs at least one device");
  if (!has_kernel)
    return invalid_argument_error("placement needs a kernel predicate (has_kernel is empty)");
  std::vector<device_name> parsed;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    auto d = parse_full_device_name(devices[i], str_cat("placement device ", i));
    if (!d.ok()) return d.error();
    if (!seen.insert(to_string(*d)).second) {
      return invalid_argument_error("placement device ", i, " '", devices[i], "' is listed twice");
    }
    parsed.push_back(*std::move(d));
  }
  auto default_device = parse_device_name(options.default_device);
  if (!default_device.ok()) return default_device.error().with_context("placer default device");
  placer p(g, std::move(parsed), has_kernel, *std::move(default_device),
           options.allow_soft_placement);
  return p.run();
}

result<placement> place(const graph::graph& g, const cluster_spec& cluster,
                        const kernel_predicate& has_kernel, const placer_options& options) {
  return place(g, cluster.device_names(), has_kernel, options);
}

std::vector<std::vector<int>> colocation_groups(const graph::graph& g) {
  const auto groups = colocation_graph(g).groups();
  std::vector<std::vector<int>> out;
  for (std::size_t i = 0; i < groups.size(); ++i) out.emplace_back(groups[i].begin(), groups[i].end());
  return out;
}

}  // namespace troupe::placement
