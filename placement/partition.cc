#include "placement/partition.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>
#include <utility>
#include <vector>

#include "graph/attr.h"
#include "graph/prune.h"

namespace troupe::placement {

std::string rendezvous_key::to_string() const {
  char incarnation[17];
  std::snprintf(incarnation, sizeof incarnation, "%016" PRIx64, send_device_incarnation);
  return str_cat(send_device, ";", incarnation, ";", recv_device, ";", tensor_name, ";0:0");
}

const partition* partitioned_graph::find(std::string_view device) const {
  for (const auto& p : partitions) {
    if (p.device == device) return &p;
  }
  return nullptr;
}

namespace {

// "name:index", the form of rendezvous keys and bound tensors.
std::string tensor_id(std::string_view node, int index) { return str_cat(node, ":", index); }

// The form of a NodeDef input: "name" for output 0, "name:index" otherwise.
std::string input_ref(std::string_view node, int index) {
  return index == 0 ? std::string(node) : tensor_id(node, index);
}

// A short readable form of a device for generated names: "worker_task1_CPU_0"
// (the replica only when it is not 0).
std::string device_slug(const device_name& d) {
  std::string out = *d.job;
  if (*d.replica != 0) out += str_cat("_replica", *d.replica);
  return str_cat(out, "_task", *d.task, "_", *d.type, "_", *d.id);
}

class partitioner {
 public:
  partitioner(const graph::graph& g, const placement& placed, const step_spec& step,
              const partition_options& options)
      : g_(g), placed_(placed), step_(step), options_(options) {}

  result<partitioned_graph> run() {
    TROUPE_RETURN_IF_ERROR(check_step());
    for (int id = 0; id < g_.num_nodes(); ++id) used_names_.insert(g_.get(id).name());
    std::vector<int> needed = graph::prune(g_, step_.feeds, step_.fetches, step_.targets);
    needed_.assign(static_cast<std::size_t>(g_.num_nodes()), false);
    for (int id : needed) needed_[static_cast<std::size_t>(id)] = true;
    waited_on_.assign(static_cast<std::size_t>(g_.num_nodes()), false);
    for (int id : needed) {
      const graph::node& n = g_.get(id);
      for (const graph::endpoint& e : n.inputs) waited_on_[static_cast<std::size_t>(e.node)] = true;
      for (int c : n.control_inputs) waited_on_[static_cast<std::size_t>(c)] = true;
    }

    for (std::size_t i = 0; i < step_.feeds.size(); ++i) {
      const graph::endpoint& e = step_.feeds[i];
      auto name = fed_tensor(e);
      if (!name.ok()) return name.error();
      auto dev = device_of(e.node);
      if (!dev.ok()) return dev.error();
      part(*dev).feeds.push_back({static_cast<int>(i), *name});
    }
    for (int id : needed) TROUPE_RETURN_IF_ERROR(add_node(g_.get(id)));
    for (std::size_t i = 0; i < step_.fetches.size(); ++i) {
      const graph::endpoint& e = step_.fetches[i];
      auto it = fed_.find(e);
      std::string name = it != fed_.end() ? tensor_id(it->second.first, it->second.second)
                                          : tensor_id(g_.get(e.node).name(), e.index);
      auto dev = device_of(e.node);
      if (!dev.ok()) return dev.error();
      part(*dev).fetches.push_back({static_cast<int>(i), std::move(name)});
    }
    for (std::size_t i = 0; i < step_.targets.size(); ++i) {
      int t = step_.targets[i];
      auto dev = device_of(t);
      if (!dev.ok()) return dev.error();
      part(*dev).targets.push_back({static_cast<int>(i), g_.get(t).name()});
    }

    partitioned_graph out;
    for (auto& [device, p] : parts_) {
      p.device = device;
      out.partitions.push_back(std::move(p));
    }
    out.transfers = std::move(transfers_);
    for (std::size_t i = 0; i < out.transfers.size(); ++i) {
      for (auto& p : out.partitions) {
        if (p.device == out.transfers[i].key.send_device) p.sends.push_back(static_cast<int>(i));
        if (p.device == out.transfers[i].key.recv_device) p.recvs.push_back(static_cast<int>(i));
      }
    }
    return out;
  }

 private:
  status check_endpoint(const graph::endpoint& e, std::string_view what, std::size_t i) const {
    if (e.node < 0 || e.node >= g_.num_nodes()) {
      return invalid_argument_error(what, " ", i, " names node id ", e.node,
                                    ", but the graph has nodes 0..", g_.num_nodes() - 1);
    }
    const graph::node& n = g_.get(e.node);
    if (e.index < 0 || e.index >= n.num_outputs()) {
      return invalid_argument_error(what, " ", i, " '", tensor_id(n.name(), e.index), "': node ",
                                    "'", n.name(), "' (", n.op_name(), ") has ", n.num_outputs(),
                                    " outputs");
    }
    return status();
  }

  status check_step() const {
    if (static_cast<int>(placed_.size()) != g_.num_nodes()) {
      return invalid_argument_error("the placement covers ", placed_.size(),
                                    " nodes but the graph has ", g_.num_nodes());
    }
    std::set<graph::endpoint> fed;
    for (std::size_t i = 0; i < step_.feeds.size(); ++i) {
      TROUPE_RETURN_IF_ERROR(check_endpoint(step_.feeds[i], "feed", i));
      if (!fed.insert(step_.feeds[i]).second) {
        const graph::node& n = g_.get(step_.feeds[i].node);
        return invalid_argument_error("tensor '", tensor_id(n.name(), step_.feeds[i].index),
                                      "' is fed twice (feed ", i, ")");
      }
    }
    for (std::size_t i = 0; i < step_.fetches.size(); ++i) {
      TROUPE_RETURN_IF_ERROR(check_endpoint(step_.fetches[i], "fetch", i));
    }
    for (std::size_t i = 0; i < step_.targets.size(); ++i) {
      int t = step_.targets[i];
      if (t < 0 || t >= g_.num_nodes()) {
        return invalid_argument_error("target ", i, " names node id ", t,
                                      ", but the graph has nodes 0..", g_.num_nodes() - 1);
      }
    }
    return status();
  }

  result<device_name> device_of(int id) {
    const std::string& text = placed_.device_of(id);
    auto it = parsed_devices_.find(text);
    if (it != parsed_devices_.end()) return it->second;
    auto d = parse_full_device_name(
        text, str_cat("the device placed for node '", g_.get(id).name(), "'"));
    if (!d.ok()) return d.error();
    parsed_devices_.emplace(text, *d);
    return d;
  }

  partition& part(const device_name& d) { return parts_[to_string(d)]; }

  std::string unique_name(const std::string& wanted) {
    std::string name = wanted;
    for (int suffix = 1; used_names_.count(name) > 0; ++suffix) name = str_cat(wanted, "_", suffix);
    used_names_.insert(name);
    return name;
  }

  tf::NodeDef* add_to(const device_name& d) {
    tf::GraphDef& def = part(d).graph_def;
    if (def.node_size() == 0) *def.mutable_versions() = g_.versions();
    tf::NodeDef* nd = def.add_node();
    nd->set_device(to_string(d));
    return nd;
  }

  // The fed tensor's name in its producer's partition, adding a stand-in when the step
  // does not otherwise run the producer.
  result<std::string> fed_tensor(const graph::endpoint& e) {
    const graph::node& n = g_.get(e.node);
    auto d = device_of(e.node);
    if (!d.ok()) return d.error();
    std::pair<std::string, int> name;
    if (needed_[static_cast<std::size_t>(e.node)]) {
      name = {n.name(), e.index};
    } else if (n.op_name() == "Placeholder") {
      tf::NodeDef* nd = add_to(*d);
      std::string device = nd->device();
      *nd = n.def;
      nd->clear_input();
      nd->set_device(device);
      name = {n.name(), 0};
    } else {
      tf::NodeDef* nd = add_to(*d);
      nd->set_name(unique_name(str_cat(n.name(), "/_feed_", e.index)));
      nd->set_op("Placeholder");
      (*nd->mutable_attr())["dtype"] =
          graph::attr_value(n.output_types[static_cast<std::size_t>(e.index)]);
      (*nd->mutable_attr())["shape"] =
          graph::attr_value(n.output_shapes[static_cast<std::size_t>(e.index)]);
      name = {nd->name(), 0};
    }
    fed_[e] = name;
    return tensor_id(name.first, name.second);
  }

  void set_transfer_attrs(tf::NodeDef* nd, const rendezvous_key& key) {
    auto& attrs = *nd->mutable_attr();
    attrs["tensor_name"] = graph::attr_value(key.tensor_name);
    attrs["send_device"] = graph::attr_value(key.send_device);
    attrs["send_device_incarnation"] =
        graph::attr_value(static_cast<std::int64_t>(key.send_device_incarnation));
    attrs["recv_device"] = graph::attr_value(key.recv_device);
    attrs["recv_device_incarnation"] = graph::attr_value(static_cast<std::int64_t>(key.recv_device_incarnation));
    attrs["client_terminated"] = graph::attr_value(false);
  }

  // Adds one _Send/_Recv pair carrying `input` (a NodeDef input in the source partition)
  // and returns the _Recv's name.
  std::string add_transfer(const device_name& from, const device_name& to, const std::string& input,
                           std::string tensor_name, dtype type, const partial_shape& shape,
                           const std::string& send_name, const std::string& recv_name,
                           bool control) {
    auto incarnation_of = [&](const std::string& device) -> std::uint64_t {
      auto it = options_.incarnations.find(device);
      return it == options_.incarnations.end() ? 0 : it->second;
    };
    rendezvous_key key;
    key.send_device = to_string(from);
    key.send_device_incarnation = incarnation_of(key.send_device);
    key.recv_device = to_string(to);
    key.recv_device_incarnation = incarnation_of(key.recv_device);
    key.tensor_name = std::move(tensor_name);

    tf::NodeDef* send = add_to(from);
    send->set_name(send_name);
    send->set_op("_Send");
    send->add_input(input);
    (*send->mutable_attr())["T"] = graph::attr_value(type);
    set_transfer_attrs(send, key);

    tf::NodeDef* recv = add_to(to);
    recv->set_name(recv_name);
    recv->set_op("_Recv");
    (*recv->mutable_attr())["tensor_type"] = graph::attr_value(type);
    set_transfer_attrs(recv, key);
    if (shape.known_rank()) (*recv->mutable_attr())["_shape"] = graph::attr_value(shape);

    transfers_.push_back(transfer{std::move(key), send_name, recv_name, type, control});
    return recv_name;
  }

  // How a node on the producer's device refers to tensor `e` (its stand-in when fed).
  std::string local_input(const graph::endpoint& e) const {
    auto fed = fed_.find(e);
    if (fed != fed_.end()) return input_ref(fed->second.first, fed->second.second);
    return input_ref(g_.get(e.node).name(), e.index);
  }

  // The name, in `to`'s partition, under which tensor `e` arrives (one _Recv per tensor
  // and destination).
  std::string receive(const graph::endpoint& e, const device_name& from, const device_name& to) {
    auto key = std::make_pair(e, to_string(to));
    auto it = data_recvs_.find(key);
    if (it != data_recvs_.end()) return it->second;
    const graph::node& n = g_.get(e.node);
    std::string input = local_input(e);
    std::string slug = device_slug(to);
    std::string recv =
        add_transfer(from, to, input, tensor_id(n.name(), e.index),
                     n.output_types[static_cast<std::size_t>(e.index)],
                     n.output_shapes[static_cast<std::size_t>(e.index)],
                     unique_name(str_cat(n.name(), "/_send_", e.index, "_to_", slug)),
                     unique_name(str_cat(n.name(), "/_recv_", e.index, "_at_", slug)), false);
    data_recvs_.emplace(key, recv);
    return recv;
  }

  // The _Recv, in `to`'s partition, that completes after nodes `srcs` (sorted, all on
  // `from`) ran: one transfer for them all, named after the first or, for several, after
  // `dst`, the node that waits for them.
  std::string receive_control(const std::vector<int>& srcs, const std::string& dst, const device_name& from,
                              const device_name& to) {
    auto key = std::make_pair(srcs, to_string(to));
    auto it = control_recvs_.find(key);
    if (it != control_recvs_.end()) return it->second;
    const std::string name = srcs.size() == 1 ? g_.get(srcs[0]).name() : str_cat(dst, "/_control_from_", device_slug(from));
    std::string slug = device_slug(to);
    tf::NodeDef* dummy = add_to(from);
    dummy->set_name(unique_name(str_cat(name, "/_control_to_", slug)));
    dummy->set_op("Const");
    for (int src : srcs) dummy->add_input(str_cat("^", g_.get(src).name()));
    (*dummy->mutable_attr())["dtype"] = graph::attr_value(dtype::float32);
    (*dummy->mutable_attr())["value"] =
        graph::attr_value(tensor::zeros(dtype::float32, tensor_shape({0})));
    std::string dummy_name = dummy->name();
    std::string recv =
        add_transfer(from, to, dummy_name, tensor_id(dummy_name, 0), dtype::float32,
                     partial_shape{0}, unique_name(str_cat(name, "/_control_send_to_", slug)),
                     unique_name(str_cat(name, "/_control_recv_at_", slug)), true);
    control_recvs_.emplace(std::move(key), recv);
    return recv;
  }

  // A small constant (a Const without inputs, not fed) that a node of another device
  // reads: copied into that device's partition (once), where it costs nothing per step,
  // instead of sent every step. Null when `e` is not one, or `to` may lack its kernel
  // (only onto the CPU or a device of the producer's type).
  std::optional<std::string> copied_constant(const graph::endpoint& e, const device_name& from,
                                             const device_name& to) {
    const graph::node& n = g_.get(e.node);
    if (n.op_name() != "Const" || !n.inputs.empty() || !n.control_inputs.empty() || fed_.count(e) != 0) {
      return std::nullopt;
    }
    if (to.type != std::optional<std::string>("CPU") && to.type != from.type) return std::nullopt;
    const partial_shape& shape = n.output_shapes[static_cast<std::size_t>(e.index)];
    if (!shape.fully_defined() || shape.num_elements() > k_copied_constant_elements) return std::nullopt;
    auto key = std::make_pair(e.node, to_string(to));
    auto it = copied_constants_.find(key);
    if (it != copied_constants_.end()) return it->second;
    tf::NodeDef* copy = add_to(to);
    const std::string device = copy->device();
    *copy = n.def;
    copy->set_device(device);
    copy->set_name(unique_name(str_cat(n.name(), "/_copy_at_", device_slug(to))));
    std::string name = input_ref(copy->name(), e.index);
    copied_constants_.emplace(std::move(key), name);
    return name;
  }

  // Whether `n`'s control edge from `src` (on device `from`, `n` on `to`) only lets `n`
  // write in place after a reader (graph::k_in_place_after_attr) that is in another
  // process, where it works on its own copy: such an edge is not needed.
  bool only_in_place(const graph::node& n, int src, const std::string& from, const std::string& to) const {
    const auto in_place_after = n.def.attr().find(graph::k_in_place_after_attr);
    if (in_place_after == n.def.attr().end() || !options_.same_process || options_.same_process(from, to)) return false;
    const auto& readers = in_place_after->second.list().s();
    return std::find(readers.begin(), readers.end(), g_.get(src).name()) != readers.end();
  }

  status add_node(const graph::node& n) {
    auto d = device_of(n.id);
    if (!d.ok()) return d.error();
    const std::string to = to_string(*d);
    tf::NodeDef def = n.def;
    def.clear_input();
    def.set_device(to);
    for (const graph::endpoint& e : n.inputs) {
      auto from = device_of(e.node);
      if (!from.ok()) return from.error();
      if (*from == *d) {
        def.add_input(local_input(e));
      } else if (auto copy = copied_constant(e, *from, *d)) {
        def.add_input(*copy);
      } else {
        def.add_input(receive(e, *from, *d));
      }
    }
    // Control inputs from another device: one transfer per device for all of this node's
    // (TensorFlow's tf.group does the same per device), unless each already has its own.
    // None into a NoOp that nothing in the step waits for (a target such as the `train` of
    // tf.group(updates)): the step ends only once every partition has, so such an edge
    // would only hold this partition's end back by a transfer (on the step's critical
    // path: the last update, then the transfer, then this partition's answer).
    const bool unwaited_no_op = n.op_name() == "NoOp" && !waited_on_[static_cast<std::size_t>(n.id)];
    std::map<std::string, std::pair<device_name, std::vector<int>>> remote;
    for (int c : n.control_inputs) {
      auto from = device_of(c);
      if (!from.ok()) return from.error();
      if (*from == *d) {
        def.add_input(str_cat("^", g_.get(c).name()));
        continue;
      }
      if (unwaited_no_op) {
        std::vector<std::string>& also = part(*from).also_run;
        if (std::find(also.begin(), also.end(), g_.get(c).name()) == also.end()) also.push_back(g_.get(c).name());
        continue;
      }
      std::string from_name = to_string(*from);
      if (only_in_place(n, c, from_name, to)) continue;
      auto& group = remote[std::move(from_name)];
      group.first = *from;
      group.second.push_back(c);
    }
    for (auto& [device, group] : remote) {
      auto& [from, srcs] = group;
      std::sort(srcs.begin(), srcs.end());
      srcs.erase(std::unique(srcs.begin(), srcs.end()), srcs.end());
      const bool each_sent = std::all_of(srcs.begin(), srcs.end(), [&](int c) {
        return control_recvs_.count(std::make_pair(std::vector<int>{c}, to)) != 0;
      });
      if (srcs.size() == 1 || each_sent) {
        for (int c : srcs) def.add_input(str_cat("^", receive_control({c}, n.name(), from, *d)));
      } else {
        def.add_input(str_cat("^", receive_control(srcs, n.name(), from, *d)));
      }
    }
    *add_to(*d) = std::move(def);
    return status();
  }

  const graph::graph& g_;
  const placement& placed_;
  const step_spec& step_;
  const partition_options& options_;
  std::vector<bool> needed_;
  std::vector<bool> waited_on_;  // needed nodes that some needed node has as an input
  std::unordered_set<std::string> used_names_;
  std::map<std::string, device_name> parsed_devices_;
  std::map<std::string, partition> parts_;
  std::vector<transfer> transfers_;
  std::map<graph::endpoint, std::pair<std::string, int>> fed_;  // fed tensor -> its node, output
  std::map<std::pair<graph::endpoint, std::string>, std::string> data_recvs_;
  std::map<std::pair<std::vector<int>, std::string>, std::string> control_recvs_;  // (sources, to) -> its _Recv
  std::map<std::pair<int, std::string>, std::string> copied_constants_;          // (Const, to) -> its copy
  static constexpr std::int64_t k_copied_constant_elements = 1024;
};

}  // namespace

result<partitioned_graph> partition_graph(const graph::graph& g, const placement& placed,
                                          const step_spec& step, const partition_options& options) {
  return partitioner(g, placed, step, options).run();
}

}  // namespace troupe::placement
