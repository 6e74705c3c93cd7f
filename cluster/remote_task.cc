#include "cluster/remote_task.h"

#include <caf/openssl/all.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "actors/device_actor.h"
#include "actors/messages.h"
#include "actors/spawn.h"
#include "cluster/certificates.h"
#include "cluster/wire_bytes.h"
#include "core/address.h"
#include "actors/rendezvous.h"
#include "graph/graph.h"
#include "kernels/kernel.h"

namespace troupe::cluster {
namespace {

using actors::abort_step_atom;
using actors::forget_atom;
using actors::incarnation_atom;
using actors::prepare_atom;
using actors::run_atom;
using actors::link_fault_atom;
using actors::stats_atom;
using actors::straggle_atom;
using actors::to_caf_error;
using actors::to_status;
using actors::unprepare_atom;

using built_atom = caf::atom_constant<caf::atom("rbuilt")>;

// What crosses must be of fixed-size element types (tensor links carry raw bytes).
status check_crossable(const std::vector<tensor>& values, std::string_view what, const std::string& task) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype_size(values[i].type()) == 0) {
      return invalid_argument_error(what, " ", i, " is a ", dtype_name(values[i].type()), " tensor, which cannot cross to or from task ", task,
                                    " (only fixed-size element types cross processes)");
    }
  }
  return status();
}

std::string endpoint_name(const graph::graph& g, const graph::endpoint& e) {
  return str_cat(g.get(e.node).name(), ":", e.index);
}

// The tasks other than `own` that a partition's Sends go to.
std::set<std::string> send_destinations(const actors::executable_spec& spec, const std::string& own) {
  std::set<std::string> out;
  for (int id : spec.nodes) {
    const auto& def = spec.graph->get(id).def;
    if (def.op().find("Send") == std::string::npos) continue;
    auto it = def.attr().find("recv_device");
    if (it == def.attr().end()) continue;
    const std::string& device = it->second.s();
    std::string task = device.substr(0, device.find("/device:"));
    if (task != own) out.insert(std::move(task));
  }
  return out;
}

// "task=host:port" -> its parts; false when malformed.
bool parse_link_entry(const std::string& entry, std::string* task, std::string* host, int* port) {
  const auto eq = entry.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  *task = entry.substr(0, eq);
  return parse_host_port(entry.substr(eq + 1), host, port).ok();
}

// A partition as it crosses (the remote device's side).
result<wire_spec> to_wire_spec(const actors::executable_spec& spec, const std::string& device) {
  if (spec.graph == nullptr) return invalid_argument_error("a partition for ", device, " has no graph");
  wire_spec w;
  if (!spec.graph->to_graph_def().SerializeToString(&w.graph_def)) {
    return internal_error("the partition for ", device, " cannot be serialized");
  }
  for (int id : spec.nodes) w.nodes.push_back(spec.graph->get(id).name());
  for (const auto& e : spec.feeds) w.feeds.push_back(endpoint_name(*spec.graph, e));
  for (const auto& e : spec.fetches) w.fetches.push_back(endpoint_name(*spec.graph, e));
  w.device = device;
  w.client = spec.client;
  return w;
}

// And back (the service's side, on the compute pool). Errors name the device.
result<actors::executable_spec> from_wire_spec(const wire_spec& w) {
  auto where = [&](const status& s) { return s.with_context(str_cat("the partition for ", w.device)); };
  tf::GraphDef def;
  if (!def.ParseFromString(w.graph_def)) return invalid_argument_error("the partition for ", w.device, " is not a GraphDef");
  auto g = graph::graph::from_graph_def(std::move(def));
  if (!g.ok()) return where(g.error());
  auto shared = std::make_shared<const graph::graph>(std::move(*g));
  actors::executable_spec spec;
  spec.graph = shared;
  for (const std::string& name : w.nodes) {
    const auto* n = shared->find(name);
    if (n == nullptr) return invalid_argument_error("the partition for ", w.device, " has no node '", name, "'");
    spec.nodes.push_back(n->id);
  }
  for (const std::string& f : w.feeds) {
    auto e = shared->resolve(f);
    if (!e.ok()) return where(e.error());
    spec.feeds.push_back(*e);
  }
  for (const std::string& f : w.fetches) {
    auto e = shared->resolve(f);
    if (!e.ok()) return where(e.error());
    spec.fetches.push_back(*e);
  }
  spec.client = w.client;
  return spec;
}

// --- transfers between processes ----------------------------------------------------------

// A transfer's key on a tensor link: the step and the rendezvous key's fields, joined by a
// character no device or tensor name holds.
constexpr char k_separator = '\x1f';

std::string transfer_wire_key(std::int64_t step_id, const placement::rendezvous_key& k) {
  return str_cat(step_id, k_separator, k.send_device, k_separator, k.send_device_incarnation, k_separator, k.recv_device,
                 k_separator, k.recv_device_incarnation, k_separator, k.tensor_name);
}

bool parse_transfer_wire_key(std::string_view text, std::int64_t* step_id, placement::rendezvous_key* k) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t end = text.find(k_separator, begin);
    parts.emplace_back(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  if (parts.size() != 6) return false;
  try {
    std::size_t used = 0;
    *step_id = std::stoll(parts[0], &used);
    if (used != parts[0].size()) return false;
    k->send_device = parts[1];
    k->send_device_incarnation = std::stoull(parts[2], &used);
    if (used != parts[2].size()) return false;
    k->recv_device_incarnation = std::stoull(parts[4], &used);
    if (used != parts[4].size()) return false;
  } catch (const std::exception&) {
    return false;
  }
  k->recv_device = parts[3];
  k->tensor_name = parts[5];
  return true;
}

// --- steps over the tensor links ----------------------------------------------------------
//
// A step's run and its answer travel over the client's tensor link to the task, not over
// CAF's middleman: no hand-off to a multiplexer thread at either end, and a link's idle
// sender writes small frames itself (doc/cluster.md, "Steps over the links"). Each is one
// tensor under a control key, which begins with a character no transfer key begins with
// (a transfer key begins with its step id):
//   R<id>  a run: header [partition handle, step id, feeds]
//   K<id>  its answer: header [fetches]
//   E<id><separator><message>  its failure: header [code]
// The tensor (uint8) holds the header and, when they come to at most k_packed_bytes, the
// values (feeds, fetches) packed after it: a frame, a write and a wake-up of the reader
// for the whole message. Larger values go ahead of it, each a tensor of its own:
//   F<id><separator><index>  a feed;   A<id><separator><index>  a fetch
// (they arrive ahead of their last frame, but for one sent from shared memory that the
// receiver could not map: sent again by copy, it may come after; the message waits).
constexpr char k_control_mark = '\x02';
enum class control_kind : char { feed = 'F', run = 'R', fetch = 'A', answer = 'K', failure = 'E' };
constexpr std::size_t k_packed_bytes = std::size_t{48} << 10;

bool is_control_key(std::string_view key) { return !key.empty() && key.front() == k_control_mark; }

std::string control_key(control_kind kind, std::uint64_t id, std::string_view text = {}) {
  std::string key = str_cat(k_control_mark, static_cast<char>(kind), id);
  if (!text.empty()) {
    key += k_separator;
    key.append(text);
  }
  return key;
}

// A run or an answer, whole: its last frame's kind, id, header and text, and its values.
struct control_message {
  control_kind kind = control_kind::run;
  std::uint64_t id = 0;
  std::vector<std::int64_t> header;
  std::vector<tensor> values;
  std::string text;
};

// The values a run (its feeds) or an answer (its fetches) announces; a failure has none.
std::int64_t announced_values(const control_message& m) {
  return m.kind == control_kind::run ? m.header[2] : m.kind == control_kind::answer ? m.header[0] : 0;
}

// The last frame's tensor: the header, then the values when `packed` (dtype, rank, dims,
// byte count and bytes each), else none.
tensor pack_control(const control_message& m, bool packed) {
  body_writer w;
  w.put(static_cast<std::uint32_t>(m.header.size()));
  for (std::int64_t h : m.header) w.put(h);
  w.put(static_cast<std::uint32_t>(packed ? m.values.size() : 0));
  for (std::size_t i = 0; packed && i < m.values.size(); ++i) {
    const tensor& t = m.values[i];
    w.put(static_cast<std::int32_t>(t.type()));
    w.put(static_cast<std::uint32_t>(t.shape().rank()));
    for (std::int64_t d : t.shape().dims()) w.put(d);
    w.put(static_cast<std::uint64_t>(t.byte_size()));
    w.bytes.append(static_cast<const char*>(t.raw_data()), t.byte_size());
  }
  tensor body(dtype::uint8, tensor_shape({static_cast<std::int64_t>(w.bytes.size())}));
  std::memcpy(body.raw_data(), w.bytes.data(), w.bytes.size());
  return body;
}

// And back: the header and the packed values into `m`. False: damaged.
bool unpack_control(const tensor& body, control_message* m) {
  if (body.type() != dtype::uint8 || body.shape().rank() != 1) return false;
  body_reader r{std::string_view(static_cast<const char*>(body.raw_data()), body.byte_size())};
  const auto fields = r.get<std::uint32_t>();
  if (!r.ok || fields > 8) return false;
  m->header.resize(fields);
  for (std::int64_t& h : m->header) h = r.get<std::int64_t>();
  const auto count = r.get<std::uint32_t>();
  for (std::uint32_t i = 0; r.ok && i < count; ++i) {
    const auto t = static_cast<dtype>(r.get<std::int32_t>());
    const auto rank = r.get<std::uint32_t>();
    if (!r.ok || rank > 64) return false;
    std::vector<std::int64_t> dims(rank);
    for (std::int64_t& d : dims) d = r.get<std::int64_t>();
    const auto bytes = r.get<std::uint64_t>();
    if (!r.ok || bytes > r.bytes.size()) return false;
    const std::size_t element = dtype_size(t);
    auto shape = tensor_shape::make(std::move(dims));
    if (element == 0 || !shape.ok() || shape->num_elements() < 0 ||
        static_cast<std::uint64_t>(shape->num_elements()) > bytes / element ||
        static_cast<std::uint64_t>(shape->num_elements()) * element != bytes) {
      return false;
    }
    tensor value;
    try {
      value = tensor(t, *shape);
    } catch (const std::bad_alloc&) {
      return false;
    }
    if (bytes > 0) std::memcpy(value.raw_data(), r.bytes.data(), bytes);
    r.bytes.remove_prefix(bytes);
    m->values.push_back(std::move(value));
  }
  return r.ok && r.bytes.empty();
}

// Sends `message` over `link`: its values (ahead, or packed into its last frame), then its
// last frame. `done` hears of each frame (a failure: the link's).
void send_control(tensor_link& link, control_message message, const std::function<void(const status&)>& done) {
  std::size_t bytes = 0;
  for (const tensor& t : message.values) bytes += t.byte_size();
  const bool packed = bytes <= k_packed_bytes;
  if (!packed) {
    const control_kind part = message.kind == control_kind::run ? control_kind::feed : control_kind::fetch;
    for (std::size_t i = 0; i < message.values.size(); ++i) {
      link.send(control_key(part, message.id, std::to_string(i)), std::move(message.values[i]), done);
    }
  }
  link.send(control_key(message.kind, message.id, message.text), pack_control(message, packed), done);
}

// Gathers the frames of the runs or answers under way on one link (its reader thread
// only) into whole messages. A value may come after its last frame (a block of shared
// memory the reader could not map is sent again, by copy, after what followed it): the
// message waits for it.
class control_reader {
 public:
  // The frame under `key`: nothing yet (a value kept, or a last frame that waits for its
  // values), or the message it completes. Errors: a damaged frame (`id` says which
  // message, 0 when unknown); that message is forgotten.
  result<std::optional<control_message>> read(std::string_view key, tensor value, std::uint64_t* id) {
    *id = 0;
    if (key.size() < 3) return invalid_argument_error("a control frame with a damaged key");
    const auto kind = static_cast<control_kind>(key[1]);
    const std::string_view rest = key.substr(2);
    const std::size_t end = std::min(rest.find(k_separator), rest.size());
    const std::string_view text = end < rest.size() ? rest.substr(end + 1) : std::string_view();
    std::uint64_t number = 0;
    if (!parse_number(rest.substr(0, end), &number) || number == 0) {
      return invalid_argument_error("a control frame with a damaged key");
    }
    *id = number;
    auto fail = [&](status why) {
      if (auto it = open_.find(number); it != open_.end()) {
        parts_ -= it->second.parts.size();
        open_.erase(it);
      }
      return why;
    };
    if (kind == control_kind::feed || kind == control_kind::fetch) {
      std::uint64_t index = 0;
      if (!parse_number(text, &index) || index >= k_max_values) return fail(invalid_argument_error("a damaged control frame (kind '", key[1], "')"));
      if (!open_.count(number) && open_.size() >= k_max_open) {
        return resource_exhausted_error("more than ", k_max_open, " steps under way on one link");
      }
      if (parts_ >= k_max_values) return fail(resource_exhausted_error("more than ", k_max_values, " values under way on one link"));
      open_message& open = open_[number];
      if (!open.parts.emplace(static_cast<std::size_t>(index), std::move(value)).second) {
        return fail(invalid_argument_error("a control frame that repeats value ", index));
      }
      ++parts_;
      return complete(number);
    }
    control_message m;
    m.kind = kind;
    m.id = number;
    m.text = std::string(text);
    const std::size_t want = kind == control_kind::run ? 3 : kind == control_kind::answer || kind == control_kind::failure ? 1 : 0;
    if (want == 0 || !unpack_control(value, &m) || m.header.size() != want) {
      return fail(invalid_argument_error("a damaged control frame (kind '", key[1], "')"));
    }
    const std::int64_t count = announced_values(m);
    auto it = open_.find(number);
    const std::size_t ahead = it == open_.end() ? 0 : it->second.parts.size();
    if (count < 0 || count > static_cast<std::int64_t>(k_max_values) || (!m.values.empty() && ahead > 0) ||
        (!m.values.empty() && count != static_cast<std::int64_t>(m.values.size())) ||
        static_cast<std::int64_t>(ahead) > count || (it != open_.end() && it->second.last)) {
      return fail(invalid_argument_error("a control frame that announces ", count, " values after ",
                                         std::max(ahead, m.values.size())));
    }
    if (!m.values.empty() || count == 0) return std::optional<control_message>(std::move(m));
    if (it == open_.end() && open_.size() >= k_max_open) {
      return resource_exhausted_error("more than ", k_max_open, " steps under way on one link");
    }
    open_[number].last = std::move(m);
    return complete(number);
  }

 private:
  struct open_message {
    std::map<std::size_t, tensor> parts;  // by index
    std::optional<control_message> last;  // once it came
  };
  static bool parse_number(std::string_view text, std::uint64_t* out) {
    const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
    return !text.empty() && error == std::errc() && stop == text.data() + text.size();
  }
  // The message `id`, when its last frame and all its values are here.
  std::optional<control_message> complete(std::uint64_t id) {
    auto it = open_.find(id);
    if (it == open_.end() || !it->second.last) return std::nullopt;
    control_message& m = *it->second.last;
    const std::int64_t count = announced_values(m);
    auto& parts = it->second.parts;
    if (static_cast<std::int64_t>(parts.size()) != count || parts.rbegin()->first + 1 != parts.size()) return std::nullopt;
    for (auto& [index, value] : parts) m.values.push_back(std::move(value));
    control_message whole = std::move(m);
    parts_ -= parts.size();
    open_.erase(it);
    return whole;
  }
  static constexpr std::size_t k_max_open = 1 << 14;    // messages under way
  static constexpr std::size_t k_max_values = 1 << 16;  // values under way, and in one message
  std::unordered_map<std::uint64_t, open_message> open_;
  std::size_t parts_ = 0;
};

// A failure as its frame carries it.
control_message failure_message(std::uint64_t id, const status& why) {
  control_message m;
  m.kind = control_kind::failure;
  m.id = id;
  m.header = {static_cast<std::int64_t>(why.error_code())};
  m.text = why.message().substr(0, 1 << 16);
  return m;
}

// And back; a code that is none gives UNKNOWN.
status failure_status(const control_message& m) {
  const auto c = static_cast<code>(m.header.empty() ? 0 : m.header[0]);
  return status(c <= code::ok || c > code::unauthenticated ? code::unknown : c, m.text);
}

// The link a hub keeps, for the answers to the steps it carried: null once the hub lets
// the link go (it is nulled before the link ends, under `mutex`; a send never waits for
// the socket, so an answer holds it briefly).
struct link_route {
  std::mutex mutex;
  tensor_link* link = nullptr;
};

// Where a run that came over a link is answered: back over that link, from the thread
// that ended the step (or the service's, for a run refused there). A link gone takes
// nothing (its client has failed the run already).
class link_answer {
 public:
  link_answer(std::shared_ptr<link_route> route, std::uint64_t id) : route_(std::move(route)), id_(id) {}
  void deliver(std::vector<tensor> fetches) const {
    control_message m;
    m.kind = control_kind::answer;
    m.id = id_;
    m.header = {static_cast<std::int64_t>(fetches.size())};
    m.values = std::move(fetches);
    send(std::move(m));
  }
  void fail(const status& why) const { send(failure_message(id_, why)); }

 private:
  void send(control_message m) const {
    std::lock_guard<std::mutex> lock(route_->mutex);
    if (route_->link != nullptr && route_->link->failure().ok()) {
      send_control(*route_->link, std::move(m), [](const status&) {});
    }
  }
  std::shared_ptr<link_route> route_;
  std::uint64_t id_;
};

// A run that came over a link, to the service (in-process only), with its reply.
using link_run_atom = caf::atom_constant<caf::atom("rlinkrun")>;

}  // namespace
}  // namespace troupe::cluster

namespace troupe::cluster {

// A task service's prepared partitions, by the service's handle: the device's actor, name
// and handle, and the client that prepared it. Shared with the task's transfer hub, which
// starts the runs its links carry on them itself (under the lock).
struct served_partitions {
  struct partition {
    caf::actor device;
    std::string device_name;
    std::uint64_t device_handle = 0;
    caf::actor_addr client;
    std::shared_ptr<const std::string> label;  // "device /job:..." (whom a run's reply names)
  };
  std::mutex mutex;
  std::map<std::uint64_t, partition> by_handle;

  // A copy of partition `handle`, or none.
  std::optional<partition> find(std::uint64_t handle) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = by_handle.find(handle);
    if (it == by_handle.end()) return std::nullopt;
    return it->second;
  }
};

namespace {

// The reply of a run that came over a link: its fetches, checked, back over the link, on
// the thread that ends the step.
actors::reply<std::vector<tensor>> answer_over_link(std::shared_ptr<const link_answer> answer, const std::string& task,
                                                    std::shared_ptr<const std::string> device) {
  return actors::reply<std::vector<tensor>>(
      [answer = std::move(answer), task](result<std::vector<tensor>> r) {
        if (!r.ok()) return answer->fail(r.error());
        if (status s = check_crossable(*r, "fetch", task); !s.ok()) return answer->fail(s);
        // (Packing the answer may throw: no memory for its frame.)
        status sent = kernels::catch_exceptions([&] { answer->deliver(std::move(*r)); });
        if (!sent.ok()) answer->fail(sent.with_context(str_cat("answering a step of task ", task)));
      },
      std::move(device));
}

}  // namespace

struct transfer_hub::impl {
  actors::cluster* cluster = nullptr;
  std::string task;  // the hosted task the links reach (link_options::local_task)
  std::unique_ptr<link_listener> listener;
  mutable std::mutex mutex;
  // The links (owned here alone: a link never ends on its own thread), each with its route.
  struct kept_link {
    std::unique_ptr<tensor_link> link;
    std::shared_ptr<link_route> route;
    // Ends the link: its route first (no answer goes to it from then on), then its threads.
    void end() {
      if (route != nullptr) {
        std::lock_guard<std::mutex> lock(route->mutex);
        route->link = nullptr;
      }
      link.reset();
    }
  };
  std::vector<kept_link> links;
  caf::actor service;  // under `mutex`: where the runs the links carry go (serve_runs)
  std::shared_ptr<served_partitions> partitions;  // under `mutex`: the service's
  std::atomic<std::int64_t> delivered{0}, refused{0}, stale{0};
  std::set<std::uint64_t> stale_lives;  // under `mutex`: the incarnations said so far

  // A frame of a run from a client (steps over the links), on the link's reader thread:
  // a whole run starts on its device from this thread (actors::start_run), or goes to the
  // service, which answers over `link`, when the device must decide (see start_run).
  void control(const std::string& from, const std::shared_ptr<link_route>& link, control_reader& reader,
               std::string_view key, tensor value) {
    std::uint64_t id = 0;
    auto read = reader.read(key, std::move(value), &id);
    if (read.ok() && !read->has_value()) return;  // a feed, kept
    if (read.ok() && (*read)->kind != control_kind::run) {
      read = invalid_argument_error("a control frame of kind '", static_cast<char>((*read)->kind), "' for a task");
    }
    if (!read.ok()) {
      ++refused;
      std::cerr << "troupe: task " << from << " sent " << task << " " << read.error().message() << "; dropped\n";
      if (id != 0) link_answer(link, id).fail(read.error().with_context(str_cat("task ", task)));
      return;
    }
    control_message& run = **read;
    caf::actor to;
    std::shared_ptr<served_partitions> served;
    {
      std::lock_guard<std::mutex> lock(mutex);
      to = service;
      served = partitions;
    }
    auto answer = std::make_shared<const link_answer>(link, run.id);
    if (!to) return answer->fail(unavailable_error("task ", task, " serves no steps yet"));
    std::optional<served_partitions::partition> part;
    if (served != nullptr) part = served->find(static_cast<std::uint64_t>(run.header[0]));
    // One reply, whoever answers (unanswered, it names the device, or the service).
    auto reply = answer_over_link(answer, task,
                                  part ? part->label : std::make_shared<const std::string>(str_cat("task ", task, "'s service")));
    actors::runtime_device* dev = part ? cluster->find_device(part->device_name) : nullptr;
    if (dev != nullptr && dev->self() == part->device &&
        actors::start_run(*dev, part->device_handle, run.header[1], run.values, reply, to.address())) {
      return;
    }
    caf::anon_send(to, link_run_atom::value, std::move(reply), static_cast<std::uint64_t>(run.header[0]), run.header[1],
                   std::move(run.values));
  }

  // A tensor from another process: into the rendezvous of the device it is for, on this
  // (the link's reader) thread.
  void arrived(const std::string& from, std::string key, tensor value) {
    std::int64_t step_id = 0;
    placement::rendezvous_key k;
    if (!parse_transfer_wire_key(key, &step_id, &k)) {
      ++refused;
      std::cerr << "troupe: task " << from << " sent a tensor under a damaged transfer key; dropped\n";
      return;
    }
    actors::runtime_device* dev = cluster->find_device(k.recv_device);
    caf::actor device = dev == nullptr ? caf::actor() : dev->self();
    if (!device) {
      ++refused;
      std::cerr << "troupe: task " << from << " sent tensor " << k.tensor_name << " for device " << k.recv_device
                << ", which this process does not host; dropped\n";
      return;
    }
    // Meant for another life of the task (a step prepared before it restarted): never
    // this one's. Said once per earlier life. The step is aborted here too: this life never
    // runs it, and should a step of its own ever carry a wrong key, it fails at once
    // rather than waiting for the tensor until its deadline.
    const std::uint64_t mine = dev->incarnation();
    if (k.recv_device_incarnation != mine) {
      ++stale;
      caf::anon_send(device, abort_step_atom::value, step_id,
                     to_caf_error(unavailable_error("task ", task, " took a tensor (", k.tensor_name, ") of step ", step_id,
                                                    " meant for another life of it (incarnation ",
                                                    k.recv_device_incarnation, ", not ", mine, ")")));
      bool first = false;
      {
        std::lock_guard<std::mutex> lock(mutex);
        first = stale_lives.insert(k.recv_device_incarnation).second;
      }
      if (first) {
        std::cerr << "troupe: task " << task << " (incarnation " << std::hex << mine << ") dropped tensor "
                  << k.tensor_name << " of step " << std::dec << step_id << " from " << from
                  << ": it was meant for incarnation " << std::hex << k.recv_device_incarnation << std::dec
                  << " (an earlier life of the task); later ones are dropped silently\n";
      }
      return;
    }
    ++delivered;  // counted first: the Recv it completes may end the step before it returns
    actors::deliver_transfer(*dev, step_id, std::make_shared<const actors::transfer_key>(std::move(k)), std::move(value));
  }
};

transfer_hub::transfer_hub(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}
transfer_hub::~transfer_hub() {
  impl_->listener.reset();  // no link is accepted any more
  std::vector<impl::kept_link> links;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    links.swap(impl_->links);
    impl_->service = caf::actor();
    impl_->partitions = nullptr;
  }
  for (auto& k : links) k.end();  // each joins its threads
}
void transfer_hub::serve_runs(caf::actor service, std::shared_ptr<served_partitions> partitions) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->service = std::move(service);
  impl_->partitions = std::move(partitions);
}
int transfer_hub::port() const { return impl_->listener->port(); }
std::size_t transfer_hub::links() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->links.size();
}
std::int64_t transfer_hub::delivered() const { return impl_->delivered; }
std::int64_t transfer_hub::refused() const { return impl_->refused; }
std::int64_t transfer_hub::stale() const { return impl_->stale; }

result<std::unique_ptr<transfer_hub>> transfer_hub::start(actors::cluster& c, const std::string& host,
                                                          link_options options) {
  auto hub = std::make_unique<impl>();
  hub->cluster = &c;
  hub->task = options.local_task;
  impl* h = hub.get();
  auto listener = link_listener::listen(host, 0, std::move(options), [h](std::unique_ptr<tensor_link> accepted) {
    impl::kept_link kept{std::move(accepted), std::make_shared<link_route>()};
    kept.route->link = kept.link.get();
    tensor_link* link = kept.link.get();
    const std::string from = link->peer();
    tensor_link::handlers on;
    on.tensor = [h, from, route = kept.route, reader = std::make_shared<control_reader>()](std::string key,
                                                                                            tensor value) {
      if (is_control_key(key)) return h->control(from, route, *reader, key, std::move(value));
      h->arrived(from, std::move(key), std::move(value));
    };
    on.failure = [](const status&) {};  // its client fails the steps it sent; others, their aborts
    if (actors::step_tracer* tracer = h->cluster->tracer()) {
      on.timed = [tracer, from, to = h->task](const std::string& wire_key, std::uint64_t bytes, auto sent,
                                               auto arrived) {
        if (is_control_key(wire_key)) return;
        std::int64_t step_id = 0;
        placement::rendezvous_key k;
        const bool read = parse_transfer_wire_key(wire_key, &step_id, &k);
        tracer->link_transit(from, to, static_cast<std::int64_t>(bytes), sent, arrived, read ? k.to_string() : "",
                             read ? step_id : 0);
      };
    }
    link->start(std::move(on));
    // Links that have failed or closed go as a new one comes (on the listener's thread:
    // a link cannot join its own threads), so a long-lived server keeps only live ones.
    std::vector<impl::kept_link> gone;
    {
      std::lock_guard<std::mutex> lock(h->mutex);
      auto dead = std::stable_partition(h->links.begin(), h->links.end(),
                                        [](const auto& k) { return k.link->failure().ok(); });
      for (auto it = dead; it != h->links.end(); ++it) gone.push_back(std::move(*it));
      h->links.erase(dead, h->links.end());
      h->links.push_back(std::move(kept));
    }
    for (auto& k : gone) k.end();
  });
  if (!listener.ok()) return listener.error();
  hub->listener = std::move(*listener);
  return std::unique_ptr<transfer_hub>(new transfer_hub(std::move(hub)));
}

namespace {

// --- the task service -------------------------------------------------------------------

// A partition built on the pool, back to the service (in-process only).
struct built_partition {
  caf::response_promise promise;
  caf::actor device;
  std::string device_name;
  std::uint64_t token = 0;  // the service's
  caf::actor_addr client;
  result<actors::executable_spec> spec = internal_error("not built");
};

}  // namespace
}  // namespace troupe::cluster

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<troupe::cluster::built_partition>)

namespace troupe::cluster {
namespace {

struct service_state {
  task_service_options options;  // (its hub: null; the service may outlive it)
  std::uint16_t link_port = 0;   // the task's transfer hub's, which the hello tells (0: none)
  std::uint64_t next_handle = 1;
  std::uint64_t next_token = 1;
  std::shared_ptr<served_partitions> partitions;  // by the service's handle, shared with its hub
  std::map<std::pair<caf::actor_addr, std::uint64_t>, std::uint64_t> tokens;  // (client, its token) -> ours
  std::set<caf::actor_addr> clients;  // monitored
  // Over TLS: the challenge each asker was given (by its actor: one process may greet
  // several times at once), and the nodes that proved who they are.
  std::map<caf::actor_addr, std::string> challenges;
  std::set<caf::node_id> verified;

  caf::actor device_actor(const std::string& name) const { return options.cluster->device_actor(name); }
};

using service_actor = caf::stateful_actor<service_state>;

// Whether the current message may be served: always without TLS; over TLS only from a
// node that passed the hello.
bool from_verified(service_actor* self) {
  if (self->state.options.tls == nullptr) return true;
  const auto& sender = self->current_sender();
  return sender != nullptr && self->state.verified.count(sender->node()) > 0;
}

// A hello's agreement: the control version, the cluster and the task.
status check_hello(const task_service_options& o, std::uint32_t version, const std::string& cluster_id,
                   const std::string& client, const std::string& task) {
  if (version != k_control_version) {
    return unavailable_error("task ", o.task, " speaks control version ", k_control_version, ", ", client, " ", version,
                             " (another troupe version)");
  }
  if (cluster_id != o.cluster_id) {
    return unavailable_error("task ", o.task, " belongs to cluster '", o.cluster_id, "', not '", cluster_id, "' (", client,
                             ")");
  }
  if (task != o.task) return unavailable_error(client, " expected task ", task, " here, but this is task ", o.task);
  return status();
}

// The task's current life, which its hello tells (the keys of transfers to it carry it).
std::uint64_t incarnation_of(const task_service_options& o) {
  auto devices = o.cluster->devices_of(o.task);
  return devices.ok() && !devices->empty() ? o.cluster->directory()->incarnation(devices->front()) : 0;
}

caf::error unverified(service_actor* self) {
  return to_caf_error(unauthenticated_error("task ", self->state.options.task,
                                            " serves only peers that proved their identity in a hello"));
}

void watch_client(service_actor* self, const caf::actor_addr& client) {
  if (client && self->state.clients.insert(client).second) self->monitor(client);
}

caf::behavior task_service(service_actor* self, task_service_options options, std::uint16_t link_port,
                           std::shared_ptr<served_partitions> partitions) {
  self->state.options = std::move(options);
  self->state.link_port = link_port;
  self->state.partitions = std::move(partitions);
  // A client that goes leaves no partitions behind.
  self->set_down_handler([self](caf::down_msg& down) {
    auto& st = self->state;
    st.clients.erase(down.source);
    std::lock_guard<std::mutex> lock(st.partitions->mutex);
    auto& partitions = st.partitions->by_handle;
    for (auto it = partitions.begin(); it != partitions.end();) {
      if (it->second.client == down.source) {
        self->send(it->second.device, unprepare_atom::value, it->second.device_handle);
        it = partitions.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = st.tokens.begin(); it != st.tokens.end();) {
      it = it->first.first == down.source ? st.tokens.erase(it) : std::next(it);
    }
  });
  return {
      [self](remote_challenge_atom) -> caf::result<std::string> {
        const auto& sender = self->current_sender();
        if (sender == nullptr) return to_caf_error(unauthenticated_error("an anonymous peer asked for a challenge"));
        std::string challenge = make_challenge();
        auto& challenges = self->state.challenges;
        if (challenges.size() >= 4096) challenges.clear();  // askers that never said hello
        challenges[caf::actor_cast<caf::actor_addr>(sender)] = challenge;
        return challenge;
      },
      // Over TLS: the client's proof of `identity` over the challenge it was given, and
      // one for this task to prove itself over.
      [self](remote_hello_atom, std::uint32_t version, const std::string& cluster_id, const std::string& client,
             const std::string& task, const std::string& identity, const std::string& certificate_pem,
             const std::string& signature,
             const std::string& their_challenge)
          -> caf::result<std::string, std::uint16_t, std::uint64_t, std::string, std::string> {
        auto& st = self->state;
        const auto& o = st.options;
        auto refuse = [&](const status& why) {
          std::fprintf(stderr, "troupe: task %s refused %s: %s\n", o.task.c_str(), client.c_str(), why.message().c_str());
          return to_caf_error(why);
        };
        if (o.tls == nullptr) return refuse(unavailable_error("task ", o.task, " does not speak TLS (a plain cluster)"));
        if (status s = check_hello(o, version, cluster_id, client, task); !s.ok()) return refuse(s);
        const auto& sender = self->current_sender();
        auto asked = sender == nullptr ? st.challenges.end() : st.challenges.find(caf::actor_cast<caf::actor_addr>(sender));
        if (asked == st.challenges.end()) return refuse(unauthenticated_error(client, " sent a hello without a challenge"));
        const std::string challenge = std::move(asked->second);
        st.challenges.erase(asked);
        bool known = identity == k_client_identity;
        for (const auto& [address, credentials] : o.tls->cluster->tasks) known = known || address.task_name() == identity;
        if (!known) return refuse(unauthenticated_error(client, " claims to be '", identity, "', no task of the cluster"));
        if (status s = check_identity(*o.tls->cluster, identity, challenge, {certificate_pem, signature}); !s.ok()) {
          return refuse(s);
        }
        auto mine = prove_identity(o.tls->mine, their_challenge);
        if (!mine.ok()) return refuse(mine.error());
        st.verified.insert(sender->node());
        return caf::result<std::string, std::uint16_t, std::uint64_t, std::string, std::string>(
            o.task, st.link_port, incarnation_of(o), mine->certificate_pem, mine->signature);
      },
      [self](remote_hello_atom, std::uint32_t version, const std::string& cluster_id, const std::string& client,
             const std::string& task) -> caf::result<std::string, std::uint16_t, std::uint64_t> {
        const auto& o = self->state.options;
        if (o.tls != nullptr) {
          return to_caf_error(unauthenticated_error("task ", o.task, " wants a proof of identity (a TLS cluster)"));
        }
        if (status s = check_hello(o, version, cluster_id, client, task); !s.ok()) return to_caf_error(s);
        return caf::result<std::string, std::uint16_t, std::uint64_t>(o.task, self->state.link_port,
                                                                     incarnation_of(o));
      },
      [self](prepare_atom, std::uint64_t client_token, const wire_spec& w) -> caf::result<std::uint64_t> {
        if (!from_verified(self)) return unverified(self);
        auto& st = self->state;
        caf::actor device = st.device_actor(w.device);
        if (!device) {
          return to_caf_error(not_found_error("task ", st.options.task, " has no device ", w.device));
        }
        const caf::actor_addr client = caf::actor_cast<caf::actor_addr>(self->current_sender());
        watch_client(self, client);
        // Where the tasks this partition sends to take tensors: for this server's stand-ins.
        for (const std::string& entry : w.links) {
          std::string task, host;
          int port = 0;
          if (parse_link_entry(entry, &task, &host, &port)) {
            link_directory::of_process().set(st.options.cluster_id, task, host, port);
          }
        }
        const std::uint64_t token = st.next_token++;
        st.tokens[{client, client_token}] = token;
        auto built = std::make_shared<built_partition>();
        built->promise = self->make_response_promise();
        built->device = device;
        built->device_name = w.device;
        built->token = token;
        built->client = client;
        // A GraphDef is parsed on the compute pool, never on a scheduler thread.
        st.options.cluster->pool().schedule([me = caf::actor(self), built, w] {
          built->spec = from_wire_spec(w);
          caf::anon_send(me, built_atom::value, built);
        });
        return caf::delegated<std::uint64_t>();
      },
      [self](built_atom, const std::shared_ptr<built_partition>& built) {
        if (!built->spec.ok()) {
          built->promise.deliver(to_caf_error(built->spec.error()));
          return;
        }
        self->request(built->device, caf::infinite, prepare_atom::value, built->token, std::move(*built->spec))
            .then(
                [self, built](std::uint64_t device_handle) {
                  auto& st = self->state;
                  const std::uint64_t handle = st.next_handle++;
                  {
                    std::lock_guard<std::mutex> lock(st.partitions->mutex);
                    st.partitions->by_handle[handle] = {
                        built->device, built->device_name, device_handle, built->client,
                        std::make_shared<const std::string>(str_cat("device ", built->device_name))};
                  }
                  built->promise.deliver(handle);
                },
                [built](caf::error& e) { built->promise.deliver(std::move(e)); });
      },
      [self](unprepare_atom, std::uint64_t handle) {
        if (!from_verified(self)) return;
        auto& st = self->state;
        std::lock_guard<std::mutex> lock(st.partitions->mutex);
        auto it = st.partitions->by_handle.find(handle);
        if (it == st.partitions->by_handle.end()) return;
        self->send(it->second.device, unprepare_atom::value, it->second.device_handle);
        st.partitions->by_handle.erase(it);
      },
      [self](forget_atom, std::uint64_t client_token) {
        if (!from_verified(self)) return;
        auto& st = self->state;
        const caf::actor_addr client = caf::actor_cast<caf::actor_addr>(self->current_sender());
        auto it = st.tokens.find({client, client_token});
        if (it == st.tokens.end()) return;
        for (const caf::actor& device : st.options.cluster->task_actors(st.options.task)) {
          self->send(device, forget_atom::value, it->second);
        }
        st.tokens.erase(it);
      },
      // A step that came over a tensor link (from its hub: the link's TLS, when the
      // cluster has it, proved the client), answered over it.
      [self](link_run_atom, actors::reply<std::vector<tensor>>& answer, std::uint64_t handle,
             std::int64_t step_id, std::vector<tensor>& feeds) {
        auto& st = self->state;
        std::optional<served_partitions::partition> part = st.partitions->find(handle);
        if (!part) return answer(not_found_error("task ", st.options.task, " has no partition ", handle));
        // Answered by the thread that ends the step (the device's run with a reply): no
        // hand-off to this thread on the way back.
        self->send(part->device, run_atom::value, part->device_handle, step_id, std::move(feeds), std::move(answer));
      },
      [self](abort_step_atom, std::int64_t step_id, const caf::error& reason) {
        if (!from_verified(self)) return;
        auto& st = self->state;
        for (const caf::actor& device : st.options.cluster->task_actors(st.options.task)) {
          self->send(device, abort_step_atom::value, step_id, reason);
        }
      },
      // An injected fault for one of the task's devices, handed to it.
      [self](straggle_atom a, const std::string& device, std::int64_t micros) -> caf::result<bool> {
        if (!from_verified(self)) return unverified(self);
        caf::actor actor = self->state.device_actor(device);
        if (!actor) return to_caf_error(not_found_error("task ", self->state.options.task, " has no device ", device));
        self->delegate(actor, a, micros);
        return caf::delegated<bool>();
      },
      [self](link_fault_atom a, const std::string& device, const std::string& to_task, std::int64_t delay_us, double drop,
             std::uint64_t seed) -> caf::result<bool> {
        if (!from_verified(self)) return unverified(self);
        caf::actor actor = self->state.device_actor(device);
        if (!actor) return to_caf_error(not_found_error("task ", self->state.options.task, " has no device ", device));
        self->delegate(actor, a, to_task, delay_us, drop, seed);
        return caf::delegated<bool>();
      },
      [self](observe_atom) -> caf::result<std::vector<observed_event>> {
        if (!from_verified(self)) return unverified(self);
        const auto& log = self->state.options.observations;
        return log == nullptr ? std::vector<observed_event>() : log->take();
      },
      [self](stats_atom, const std::string& device) -> caf::result<wire_stats> {
        if (!from_verified(self)) return unverified(self);
        caf::actor actor = self->state.device_actor(device);
        if (!actor) return to_caf_error(not_found_error("task ", self->state.options.task, " has no device ", device));
        auto promise = self->make_response_promise<wire_stats>();
        self->request(actor, std::chrono::seconds(10), stats_atom::value)
            .then(
                [promise](const actors::device_stats& s) mutable {
                  promise.deliver(wire_stats{s.partitions, s.preparing, s.running_steps, s.rendezvous_entries,
                                             s.rendezvous_bytes, s.memory_in_use});
                },
                [promise](caf::error& e) mutable { promise.deliver(std::move(e)); });
        return caf::delegated<wire_stats>();
      },
  };
}

// --- the remote device ------------------------------------------------------------------

// One thread of a remote device's own for what must not run on a scheduler thread:
// connecting (which waits for the network) and converting partitions. Its work posts its
// continuation back to the actor.
class background {
 public:
  background() : thread_([this] {
    pthread_setname_np(pthread_self(), "remote.bg");
    loop();
  }) {}
  ~background() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void post(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(work));
    }
    wake_.notify_all();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      auto work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

using resume_atom = caf::atom_constant<caf::atom("rresume")>;
using link_lost_atom = caf::atom_constant<caf::atom("rlinklost")>;
// A step's answer or failure, from the link's reader (steps over the links).
using run_answer_atom = caf::atom_constant<caf::atom("ranswer")>;
using run_failed_atom = caf::atom_constant<caf::atom("rfailed")>;

// What a request needs of the task: a tensor link to its hub (a tensor), its service
// (prepare, stats, faults), or both (a step: it goes over the link).
enum class reach { link, service, both };

}  // namespace
}  // namespace troupe::cluster

// A continuation for the actor that posted work to its background thread (in-process).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<std::function<void()>>)

namespace troupe::cluster {
namespace {

// Why a _Send's tensor of `step` did not get onto the link to `device`.
status sending_failed(const actors::transfer_key& key, std::int64_t step, const std::string& device, const status& s) {
  return unavailable_error("sending ", key.printed(), " of step ", step, " to ", device, " failed: ", s.message());
}

// A stand-in's sink (actors::remote_sink): a _Send's tensor written on the stand-in's
// present link from the kernel's thread. The stand-in sets the link when it opens one and
// takes it away (under the route's lock) before it lets it go, so a send here never
// meets a link that is gone; one that broke is left to the stand-in.
class link_sink final : public actors::remote_sink {
 public:
  explicit link_sink(std::string device) : device_(std::move(device)) {}
  void set_link(tensor_link* link) {
    std::lock_guard<std::mutex> lock(route_.mutex);
    route_.link = link;
  }
  bool try_send(std::int64_t step, const actors::transfer_key_ptr& key, const tensor& value,
                const actors::status_reply& written) override {
    if (dtype_size(value.type()) == 0) return false;  // the stand-in refuses it, saying why
    // The link may call `done` inside send (an inline write): the answer then waits until
    // the route's lock is let go, since it may run the step's next _Send, which comes here.
    struct outcome {
      std::mutex mutex;
      bool returned = false;
      std::optional<status> early;
    };
    auto out = std::make_shared<outcome>();
    auto tell = [written, key, step, device = device_](const status& s) {
      if (s.ok()) return written(actors::done_t{});
      written(sending_failed(*key, step, device, s));
    };
    {
      std::lock_guard<std::mutex> lock(route_.mutex);
      if (route_.link == nullptr || !route_.link->failure().ok()) return false;
      route_.link->send(transfer_wire_key(step, key->key()), value, [out, tell](const status& s) {
        {
          std::lock_guard<std::mutex> lock(out->mutex);
          if (!out->returned) {
            out->early = s;
            return;
          }
        }
        tell(s);
      });
    }
    std::optional<status> early;
    {
      std::lock_guard<std::mutex> lock(out->mutex);
      out->returned = true;
      early = std::move(out->early);
    }
    if (early) tell(*early);
    if (!early || early->ok()) ++sent_;
    return true;
  }
  std::int64_t sent() const override { return sent_.load(std::memory_order_relaxed); }

 private:
  const std::string device_;
  link_route route_;
  std::atomic<std::int64_t> sent_{0};
};

struct remote_state {
  ~remote_state() {
    if (sink != nullptr) sink->set_link(nullptr);  // before the link goes
  }
  remote_device_options options;
  caf::actor service;                 // once connected
  std::shared_ptr<tensor_link> link;  // to the task's transfer hub, once connected
  std::shared_ptr<link_sink> sink;    // the _Sends' way onto `link` (set with it)
  bool connecting = false;
  bool takes_links = true;  // whether the task's hello named a transfer hub
  std::uint64_t incarnation = 0;  // the task's life, once its hello said
  // What waits for the connection: run on success, failed with its error otherwise.
  struct waiter {
    reach need;
    std::function<void()> ready;
    std::function<void(const status&)> failed;
  };
  std::vector<waiter> waiting;
  // Requests pending on the service, failed at once when it goes.
  std::map<std::uint64_t, caf::response_promise> pending;
  std::uint64_t next_pending = 1;
  // Those of them that are steps sent over the present link, failed when it breaks.
  std::set<std::uint64_t> over_link;
  std::unique_ptr<background> work;  // made on first use; joined when the actor ends

  // Why the steps sent over the link fail when it broke with `failure`.
  caf::error link_broke(const status& failure) const {
    return to_caf_error(unavailable_error("the tensor link to task ", options.hello.task, " broke: ", failure.message()));
  }
  // Answers the steps sent over the present link with `why` (its answers will not come).
  void fail_over_link(const caf::error& why) {
    for (std::uint64_t id : std::set<std::uint64_t>(std::move(over_link))) answer(id, why);
    over_link.clear();
  }
  // Answers every request pending on the service with `why`.
  void fail_all(const caf::error& why) {
    for (auto& [id, promise] : pending) promise.deliver(why);
    pending.clear();
    over_link.clear();
  }
  // The background thread, made on first use.
  background& worker() {
    if (work == nullptr) work = std::make_unique<background>();
    return *work;
  }

  std::uint64_t park(caf::response_promise p) {
    pending.emplace(next_pending, std::move(p));
    return next_pending++;
  }
  // Delivers and forgets pending request `id` (nothing when it was failed already).
  template <typename T>
  void answer(std::uint64_t id, T&& value) {
    over_link.erase(id);
    auto it = pending.find(id);
    if (it == pending.end()) return;
    it->second.deliver(std::forward<T>(value));
    pending.erase(it);
  }
};

using remote_actor = caf::stateful_actor<remote_state>;

// Runs `work` on the actor's background thread; the function it returns runs back in the
// actor (it may use the actor's state; `work` must not).
void off_thread(remote_actor* self, std::function<std::function<void()>()> work) {
  self->state.worker().post([me = caf::actor_cast<caf::actor>(self), work = std::move(work)] {
    caf::anon_send(me, resume_atom::value, std::make_shared<std::function<void()>>(work()));
  });
}

// A remote request's error as the device protocol gives it: a timeout names the task.
caf::error remote_error(const remote_device_options& o, const caf::error& e, std::string_view what) {
  if (e == caf::sec::request_timeout) {
    return to_caf_error(
        deadline_exceeded_error("task ", o.hello.task, " did not answer ", what, " for ", o.device, " in time"));
  }
  return e;
}

// A frame of a step's answer over the link, on its reader thread: a whole answer or a
// failure goes to the stand-in `me`. The task's service sends nothing else here.
void answer_frame(const caf::actor& me, const std::string& task, control_reader& reader, std::string_view key,
                  tensor value) {
  std::uint64_t id = 0;
  auto read = is_control_key(key) ? reader.read(key, std::move(value), &id)
                                  : invalid_argument_error("a tensor on a link that carries only answers");
  if (read.ok() && !read->has_value()) return;  // a fetch, kept
  if (read.ok() && (*read)->kind == control_kind::answer) {
    return caf::anon_send(me, run_answer_atom::value, id, std::move((*read)->values));
  }
  if (read.ok() && (*read)->kind == control_kind::failure) {
    return caf::anon_send(me, run_failed_atom::value, id, to_caf_error(failure_status(**read)));
  }
  const status why = read.ok() ? internal_error("a control frame of kind '", static_cast<char>((*read)->kind), "'")
                               : read.error();
  std::cerr << "troupe: task " << task << " sent " << why.message() << "; dropped\n";
  if (id != 0) {
    caf::anon_send(me, run_failed_atom::value, id,
                   to_caf_error(internal_error("task ", task, " answered a step with ", why.message())));
  }
}

void drop_link(remote_actor* self);

// Runs `ready` once connected to the device's task (its service and a tensor link to its
// hub), connecting on the background thread first when not; `failed` gets why a
// connection could not be made (the next request tries again).
void with_connection(remote_actor* self, reach need, std::function<void()> ready,
                     std::function<void(const status&)> failed) {
  auto& st = self->state;
  // Requests (prepare, run, stats, faults) need the task's service; a tensor needs only a
  // link to its hub.
  const bool linked = st.link != nullptr || (st.service && !st.takes_links);
  const bool ready_now = need == reach::link      ? linked
                         : need == reach::service ? static_cast<bool>(st.service)
                                                  : st.service && linked;
  if (ready_now) return ready();
  st.waiting.push_back({need, std::move(ready), std::move(failed)});
  if (st.connecting) return;
  st.connecting = true;
  bool service_needed = !st.options.outlive_task;
  for (const auto& w : st.waiting) service_needed = service_needed || w.need != reach::link;
  off_thread(self, [self, o = st.options, system = &self->home_system(), service_needed,
                    me = caf::actor_cast<caf::actor>(self)]() -> std::function<void()> {
    status outcome;
    caf::actor service;
    int link_port = 0;
    std::uint64_t incarnation = 0;
    std::string link_host = o.host;
    // A server's stand-in sending a tensor: the task's tensor port as its clients told
    // this server (servers do not reach each other's services); else a hello tells it.
    auto known = service_needed ? std::nullopt : link_directory::of_process().find(o.hello.cluster_id, o.hello.task);
    if (known) {
      link_host = known->first;
      link_port = known->second;
    } else {
      auto connection = connect_task_service(*system, o.host, o.port, o.hello);
      if (connection.ok()) {
        service = connection->service;
        link_port = connection->link_port;
        incarnation = connection->incarnation;
        if (link_port > 0) link_directory::of_process().set(o.hello.cluster_id, o.hello.task, o.host, link_port);
      } else {
        outcome = connection.error();
      }
    }
    std::shared_ptr<tensor_link> link;
    if (outcome.ok() && link_port > 0) {
      auto made = tensor_link::connect(link_host, link_port, o.hello.task, o.link);
      if (made.ok()) {
        // Over this link go tensors and steps, and come the steps' answers; when it
        // breaks the stand-in drops it (its steps fail; a send after that fails its step)
        // and its next use opens a new one.
        tensor_link* raw = made->get();
        (*made)->start({[me, task = o.hello.task, reader = std::make_shared<control_reader>()](std::string key,
                                                                                          tensor value) {
                          answer_frame(me, task, *reader, key, std::move(value));
                        },
                        [me, raw](const status&) {
                          caf::anon_send(me, link_lost_atom::value, reinterpret_cast<std::uintptr_t>(raw));
                        }});
        link = std::move(*made);
      } else {
        outcome = made.error();
      }
    }
    return [self, outcome, service, link, link_port, incarnation]() mutable {
      auto& st = self->state;
      st.connecting = false;
      auto waiting = std::move(st.waiting);
      st.waiting.clear();
      // A link that failed as it opened (its link_lost came before it was kept, and was
      // ignored): not kept; what waited fails, and the next use connects again.
      if (outcome.ok() && link != nullptr && !link->failure().ok()) {
        outcome = unavailable_error("the tensor link to task ", st.options.hello.task,
                                    " failed as it opened: ", link->failure().message());
        st.worker().post([gone = std::move(link)] {});
      }
      if (outcome.ok()) {
        // A link held still (a stand-in that reconnects its service) goes as drop_link
        // lets one go: out of the sink first, ended on the background thread; steps sent
        // over it hear no answer from it any more.
        if (st.link != nullptr && st.link != link) {
          const caf::error why = to_caf_error(unavailable_error(
              "the tensor link to task ", st.options.hello.task, " was replaced by a new connection"));
          st.fail_over_link(why);
          drop_link(self);
        }
        st.link = link;
        if (st.sink != nullptr) st.sink->set_link(link.get());
        st.takes_links = link_port > 0;
        if (service) {
          st.service = service;
          st.incarnation = incarnation;
          self->monitor(service);
        }
      } else {
        // What waited fails with it; the line is for a server's log, whose steps' owners
        // are elsewhere.
        std::fprintf(stderr, "troupe: %s could not reach %s (next use tries again): %s\n",
                     st.options.link.local_task.c_str(), st.options.device.c_str(), outcome.message().c_str());
      }
      for (auto& w : waiting) {
        if (!outcome.ok()) {
          w.failed(outcome);
        } else {
          with_connection(self, w.need, std::move(w.ready), std::move(w.failed));  // served, or connects again
        }
      }
    };
  });
}

// Drops the stand-in's link (its threads joined on the background thread, not on a
// scheduler thread).
void drop_link(remote_actor* self) {
  auto& st = self->state;
  if (st.link == nullptr) return;
  if (st.sink != nullptr) st.sink->set_link(nullptr);
  st.worker().post([gone = std::move(st.link)] {});
  st.link.reset();
}

// A _Send's tensor for this device: over the link to its task's transfer hub. `written`
// (when the _Send waits) hears when its bytes are on the link, or why not. What cannot be
// sent fails the step at both ends: at the sending device (through `written`, or an abort
// to the sender: its step's owner learns it and aborts the step everywhere, also where
// the tensor was awaited) and, when connected, at the task.
void forward_tensor(remote_actor* self, std::int64_t step_id, const actors::transfer_key_ptr& key, tensor value,
                    actors::status_reply written) {
  auto shared = std::make_shared<tensor>(std::move(value));
  const auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  auto refuse = [self, step_id, key, sender, written](const status& s) {
    const status why = unavailable_error("device ", self->state.options.device, " of task ",
                                         self->state.options.hello.task, " cannot take ", key->printed(), " of step ",
                                         step_id, ": ", s.message());
    if (written) written(why);
    else if (sender) self->send(sender, abort_step_atom::value, step_id, to_caf_error(why));
    if (self->state.service) self->send(self->state.service, abort_step_atom::value, step_id, to_caf_error(why));
  };
  with_connection(
      self, reach::link,
      [self, step_id, key, shared, refuse, sender, written] {
        auto& st = self->state;
        if (st.link == nullptr) return refuse(unimplemented_error("task ", st.options.hello.task, " takes no tensor links"));
        if (dtype_size(shared->type()) == 0) {
          return refuse(invalid_argument_error("tensor ", key->printed(), " is a ", dtype_name(shared->type()),
                                               " tensor, which cannot cross processes"));
        }
        // A link that breaks before the bytes are out fails the step at the sender.
        st.link->send(transfer_wire_key(step_id, key->key()), std::move(*shared),
                      [sender, step_id, key, written, device = st.options.device](const status& s) {
                        if (s.ok()) {
                          if (written) written(actors::done_t{});
                          return;
                        }
                        const status why = sending_failed(*key, step_id, device, s);
                        if (written) written(why);
                        else if (sender) caf::anon_send(sender, abort_step_atom::value, step_id, to_caf_error(why));
                      });
      },
      refuse);
}

// Sends `message` (an injected fault for the device) to its task's service and answers
// with its answer.
template <typename FailPending>
caf::result<bool> forward_fault(remote_actor* self, FailPending fail_pending, const char* what, caf::message message) {
  const std::uint64_t id = self->state.park(self->make_response_promise());
  with_connection(
      self, reach::service,
      [self, id, what, message] {
        self->request(self->state.service, self->state.options.request_timeout, message)
            .then([self, id](bool ok) { self->state.answer(id, ok); },
                  [self, id, what](caf::error& e) { self->state.answer(id, remote_error(self->state.options, e, what)); });
      },
      fail_pending(id));
  return caf::delegated<bool>();
}

caf::behavior remote_device(remote_actor* self, remote_device_options options, std::shared_ptr<link_sink> sink) {
  self->state.options = std::move(options);
  self->state.sink = std::move(sink);
  self->set_down_handler([self](caf::down_msg& down) {
    auto& st = self->state;
    if (!st.service || down.source != st.service.address()) return;
    const auto& o = st.options;
    const caf::error why = to_caf_error(unavailable_error("task ", o.hello.task, " (device ", o.device,
                                                          ") is gone: ", to_status(down.reason).message()));
    st.fail_all(why);
    if (!o.outlive_task) return self->quit(why);
    st.service = caf::actor();
    drop_link(self);
  });
  // Told to exit (its task was killed or restarted here): what waits on it is answered
  // with the reason first, as a device actor answers its running steps when it ends.
  self->set_exit_handler([self](caf::exit_msg& exit) {
    auto& st = self->state;
    st.fail_all(exit.reason ? exit.reason
                            : to_caf_error(unavailable_error("device ", st.options.device, " was stopped")));
    self->quit(exit.reason);
  });
  // Requests failed by a connection that could not be made.
  auto fail_pending = [self](std::uint64_t id) {
    return [self, id](const status& s) { self->state.answer(id, to_caf_error(s)); };
  };
  return {
      [self](resume_atom, const std::shared_ptr<std::function<void()>>& then) { (*then)(); },
      // The link broke (its reader or writer failed): the steps sent over it fail, and
      // the next use opens a new one.
      [self](link_lost_atom, std::uintptr_t which) {
        auto& st = self->state;
        if (reinterpret_cast<std::uintptr_t>(st.link.get()) != which) return;
        st.fail_over_link(st.link_broke(st.link->failure()));
        drop_link(self);
      },
      [self](run_answer_atom, std::uint64_t id, std::vector<tensor>& fetches) { self->state.answer(id, std::move(fetches)); },
      [self](run_failed_atom, std::uint64_t id, const caf::error& why) { self->state.answer(id, why); },
      [self, fail_pending](prepare_atom, std::uint64_t token,
                           const actors::executable_spec& spec) -> caf::result<std::uint64_t> {
        const std::uint64_t id = self->state.park(self->make_response_promise());
        // The partition's GraphDef is made on the background thread.
        // So are the link ports of the tasks it sends to, which the task's server is told
        // (its stand-ins never reach the other tasks' services): from this process's
        // earlier hellos, or from a hello now.
        off_thread(self, [self, id, token, spec, fail_pending, o = self->state.options, system = &self->home_system()] {
          auto w = std::make_shared<result<wire_spec>>(to_wire_spec(spec, o.device));
          for (const std::string& task : w->ok() ? send_destinations(spec, o.hello.task) : std::set<std::string>()) {
            auto& links = link_directory::of_process();
            auto known = links.find(o.hello.cluster_id, task);
            auto address = o.addresses.find(task);
            if (!known && address != o.addresses.end()) {
              connect_options hello = o.hello;
              hello.task = task;
              auto connection = connect_task_service(*system, address->second.first, address->second.second, hello);
              if (connection.ok() && connection->link_port > 0) {
                links.set(o.hello.cluster_id, task, address->second.first, connection->link_port);
                known = links.find(o.hello.cluster_id, task);
              }
            }
            // (Unknown: the Sends to it fail their step, which says why.)
            if (known) (*w)->links.push_back(str_cat(task, "=", known->first, ":", known->second));
          }
          return std::function<void()>([self, id, token, w, fail_pending] {
            if (!w->ok()) return self->state.answer(id, to_caf_error(w->error()));
            with_connection(
                self, reach::service,
                [self, id, token, w] {
                  const auto& o = self->state.options;
                  self->request(self->state.service, o.request_timeout, prepare_atom::value, token, std::move(**w))
                      .then([self, id](std::uint64_t handle) { self->state.answer(id, handle); },
                            [self, id](caf::error& e) {
                              self->state.answer(id, remote_error(self->state.options, e, "a prepare"));
                            });
                },
                fail_pending(id));
          });
        });
        return caf::delegated<std::uint64_t>();
      },
      [self](unprepare_atom a, std::uint64_t handle) {
        if (self->state.service) self->send(self->state.service, a, handle);
      },
      [self](forget_atom a, std::uint64_t token) {
        if (self->state.service) self->send(self->state.service, a, token);
      },
      [self, fail_pending](run_atom, std::uint64_t handle, std::int64_t step_id,
                           std::vector<tensor>& feeds) -> caf::result<std::vector<tensor>> {
        const auto& o = self->state.options;
        if (status s = check_crossable(feeds, "feed", o.hello.task); !s.ok()) return to_caf_error(s);
        const std::uint64_t id = self->state.park(self->make_response_promise());
        auto shared = std::make_shared<std::vector<tensor>>(std::move(feeds));
        with_connection(
            self, reach::both,
            [self, id, handle, step_id, shared] {
              // Over the link (steps over the links); no timer (see remote_task.h): the
              // step's deadline ends it. A frame the link cannot take fails the step.
              auto& st = self->state;
              if (st.link == nullptr) {
                return st.answer(id, to_caf_error(unimplemented_error("task ", st.options.hello.task,
                                                                      " takes no tensor links, which carry its steps")));
              }
              if (status broken = st.link->failure(); !broken.ok()) return st.answer(id, st.link_broke(broken));  // its link_lost is on its way
              st.over_link.insert(id);
              control_message run;
              run.kind = control_kind::run;
              run.id = id;
              run.header = {static_cast<std::int64_t>(handle), step_id, static_cast<std::int64_t>(shared->size())};
              run.values = std::move(*shared);
              send_control(*st.link, std::move(run),
                           [me = caf::actor_cast<caf::actor>(self), id, task = st.options.hello.task](const status& s) {
                             if (s.ok()) return;
                             caf::anon_send(me, run_failed_atom::value, id,
                                            to_caf_error(unavailable_error("a step for task ", task,
                                                                           " could not be sent: ", s.message())));
                           });
            },
            fail_pending(id));
        return caf::delegated<std::vector<tensor>>();
      },
      [self](abort_step_atom a, std::int64_t step_id, const caf::error& reason) {
        if (self->state.service) self->send(self->state.service, a, step_id, reason);
      },
      // A _Send's tensor for this device (forward_tensor); with `written`, the _Send waits
      // for it.
      [self](actors::rv_send_atom, std::int64_t step_id, const actors::transfer_key_ptr& key, tensor& value) {
        forward_tensor(self, step_id, key, std::move(value), actors::status_reply());
      },
      [self](actors::rv_send_atom, std::int64_t step_id, const actors::transfer_key_ptr& key, tensor& value,
             actors::status_reply& written) { forward_tensor(self, step_id, key, std::move(value), std::move(written)); },
      // An injected fault (straggle, link faults) for the device, told to its task.
      [self, fail_pending](straggle_atom a, std::int64_t micros) -> caf::result<bool> {
        return forward_fault(self, fail_pending, "a straggle", caf::make_message(a, self->state.options.device, micros));
      },
      [self, fail_pending](link_fault_atom a, const std::string& to_task, std::int64_t delay_us, double drop,
                           std::uint64_t seed) -> caf::result<bool> {
        return forward_fault(self, fail_pending, "a link fault",
                             caf::make_message(a, self->state.options.device, to_task, delay_us, drop, seed));
      },
      [self, fail_pending](observe_atom a) -> caf::result<std::vector<observed_event>> {
        const std::uint64_t id = self->state.park(self->make_response_promise());
        with_connection(
            self, reach::service,
            [self, id, a] {
              self->request(self->state.service, self->state.options.request_timeout, a)
                  .then([self, id](std::vector<observed_event>& events) { self->state.answer(id, std::move(events)); },
                        [self, id](caf::error& e) {
                          self->state.answer(id, remote_error(self->state.options, e, "observations"));
                        });
            },
            fail_pending(id));
        return caf::delegated<std::vector<observed_event>>();
      },
      // The task's life, from its hello (made now when not yet).
      [self, fail_pending](incarnation_atom) -> caf::result<std::uint64_t> {
        const std::uint64_t id = self->state.park(self->make_response_promise());
        with_connection(
            self, reach::service, [self, id] { self->state.answer(id, self->state.incarnation); },
            fail_pending(id));
        return caf::delegated<std::uint64_t>();
      },
      [self, fail_pending](stats_atom) -> caf::result<actors::device_stats> {
        const std::uint64_t id = self->state.park(self->make_response_promise());
        with_connection(
            self, reach::service,
            [self, id] {
              const auto& o = self->state.options;
              self->request(self->state.service, o.request_timeout, stats_atom::value, o.device)
                  .then(
                      [self, id](const wire_stats& s) {
                        self->state.answer(id, actors::device_stats{s.partitions, s.preparing, s.running_steps,
                                                                    s.rendezvous_entries, s.rendezvous_bytes,
                                                                    s.memory_in_use});
                      },
                      [self, id](caf::error& e) { self->state.answer(id, remote_error(self->state.options, e, "stats")); });
            },
            fail_pending(id));
        return caf::delegated<actors::device_stats>();
      },
  };
}

}  // namespace

link_directory& link_directory::of_process() {
  static link_directory directory;
  return directory;
}

void link_directory::set(const std::string& cluster_id, const std::string& task, const std::string& host, int port) {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_[{cluster_id, task}] = {host, port};
}

std::optional<std::pair<std::string, int>> link_directory::find(const std::string& cluster_id,
                                                                 const std::string& task) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find({cluster_id, task});
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void add_control_tls(caf::actor_system_config& config, const control_tls& tls) {
  config.load<caf::openssl::manager>();
  config.set("openssl.certificate", tls.mine.certificate);
  config.set("openssl.key", tls.mine.key);
  config.set("openssl.cafile", tls.cluster->ca_certificate);
}

void add_remote_task_support(caf::actor_system_config& config) {
  config.load<caf::io::middleman>();
  config.add_message_type<wire_spec>("troupe::wire_spec");
  config.add_message_type<wire_stats>("troupe::wire_stats");
  config.add_message_type<observed_event>("troupe::observed_event");
  config.add_message_type<std::vector<observed_event>>("std::vector<troupe::observed_event>");
  // A frozen peer is found by silence (CAF's heartbeats are off by default).
  config.set("middleman.heartbeat-interval", caf::timespan(std::chrono::milliseconds(200)));
  config.set("middleman.connection-timeout", caf::timespan(std::chrono::milliseconds(1000)));
}

// --- observations ---------------------------------------------------------------------

namespace {
std::int64_t ns_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

void observation_log::add(observed_event e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(e));
}

std::vector<observed_event> observation_log::take(std::int64_t* dropped) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (dropped != nullptr) *dropped = dropped_;
  dropped_ = 0;
  return std::exchange(events_, {});
}

void observation_log::node_span(const std::string& task, const std::string& device, const std::string& node,
                                const std::string& op, std::int64_t step_id, clock::time_point start,
                                clock::time_point end, const node_detail&) {
  observed_event e;
  e.kind = observed_event::span;
  e.at_ns = ns_of(start);
  e.end_ns = ns_of(end);
  e.step = step_id;
  e.task = task;
  e.device = device;
  e.name = node;
  e.op = op;
  add(std::move(e));
}

void observation_log::transfer_sent(const std::string& key, std::int64_t step_id, const std::string& task,
                                    const std::string& device, clock::time_point at) {
  add({observed_event::sent, ns_of(at), 0, step_id, 0, false, task, device, key, {}, {}});
}

void observation_log::transfer_received(const std::string& key, std::int64_t step_id, const std::string& task,
                                        const std::string& device, clock::time_point at) {
  add({observed_event::received, ns_of(at), 0, step_id, 0, false, task, device, key, {}, {}});
}

void observation_log::gradient(const std::string& accumulator, const std::string& source, std::int64_t local_step,
                               std::int64_t global_step, bool kept) {
  add({observed_event::gradient, ns_of(clock::now()), 0, local_step, global_step, kept, {}, {}, accumulator, {}, {source}});
}

void observation_log::aggregated(const std::string& accumulator, std::int64_t step,
                                 const std::vector<std::string>& sources) {
  add({observed_event::aggregated, ns_of(clock::now()), 0, step, 0, false, {}, {}, accumulator, {}, sources});
}

void observation_log::link_transit(const std::string& from, const std::string& to, std::int64_t bytes,
                                   clock::time_point sent, clock::time_point arrived, const std::string& key,
                                   std::int64_t step_id) {
  add({observed_event::transit, ns_of(sent), ns_of(arrived), step_id, 0, false, to, {}, from, {}, {}, bytes, key});
}

result<std::vector<observed_event>> take_observations(actors::cluster& c, const std::string& task,
                                                      std::chrono::milliseconds timeout) {
  const auto devices = c.task_actors(task);
  if (devices.empty()) return not_found_error("no device of task ", task, " in this cluster");
  actors::unpinned_use use(c.system());  // outlives the scoped actor
  caf::scoped_actor self{c.system()};
  result<std::vector<observed_event>> out = internal_error("no answer");
  self->request(devices.front(), timeout, observe_atom::value)
      .receive([&](std::vector<observed_event>& events) { out = std::move(events); },
               [&](caf::error& e) {
                 if (e == caf::sec::request_timeout) {
                   out = deadline_exceeded_error("task ", task, " did not hand over its observations within ",
                                                 timeout.count(), " ms");
                 } else {
                   out = to_status(e);
                 }
               });
  return out;
}

caf::actor spawn_task_service(caf::actor_system& system, task_service_options options) {
  transfer_hub* hub = options.hub;
  options.hub = nullptr;
  const auto port = static_cast<std::uint16_t>(hub != nullptr ? hub->port() : 0);
  auto partitions = std::make_shared<served_partitions>();
  caf::actor service = system.spawn(task_service, std::move(options), port, partitions);
  if (hub != nullptr) hub->serve_runs(service, std::move(partitions));
  return service;
}

actors::stand_in spawn_stand_in(caf::actor_system& system, remote_device_options options) {
  auto sink = std::make_shared<link_sink>(options.device);
  caf::actor actor = system.spawn(remote_device, std::move(options), sink);
  return {std::move(actor), std::move(sink)};
}

caf::actor spawn_remote_device(caf::actor_system& system, remote_device_options options) {
  return spawn_stand_in(system, std::move(options)).actor;
}

result<task_connection> connect_task_service(caf::actor_system& system, const std::string& host, int port,
                                             const connect_options& options) {
  const std::string where = str_cat(host, ":", port);
  caf::scoped_actor self{system};
  // remote_actor has no timeout: ask the middleman's actor to connect, with one.
  // A connection to a process that has just started is sometimes dropped by CAF's
  // connection timeout during the handshake (a restarted task, seen ~1 in 3 times):
  // that one is tried again while the timeout lasts.
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  caf::actor found;
  status outcome;
  for (bool again = true; again;) {
    again = false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    outcome = deadline_exceeded_error("task ", options.task, " at ", where, " did not answer within ",
                                      options.timeout.count(), " ms");
    if (left.count() <= 0) break;
    // Over TLS through the OpenSSL module's actor (its connections verify the peer's chain).
    const caf::io::middleman_actor connector =
        options.tls != nullptr ? system.openssl_manager().actor_handle() : system.middleman().actor_handle();
    self->request(connector, left, caf::connect_atom::value, host, static_cast<std::uint16_t>(port))
        .receive(
            [&](const caf::node_id&, caf::strong_actor_ptr& actor, const std::set<std::string>&) {
              found = caf::actor_cast<caf::actor>(actor);
              outcome = found ? status() : unavailable_error("nothing is published at ", where, " (no task service)");
            },
            [&](caf::error& e) {
              if (e == caf::sec::request_timeout) return;
              outcome = unavailable_error("cannot reach task ", options.task, " at ", where, ": ", system.render(e));
              again = e == caf::sec::connection_timeout;
            });
    if (again) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!outcome.ok()) return outcome;
  task_connection connection;
  outcome = deadline_exceeded_error("task ", options.task, " at ", where, " did not answer the hello within ",
                                    options.timeout.count(), " ms");
  auto refused = [&](caf::error& e) {
    if (e == caf::sec::request_timeout) return;
    const status s = to_status(e);
    outcome = s.error_code() == code::unauthenticated
                  ? unauthenticated_error("task ", options.task, " at ", where, " refused: ", s.message())
                  : unavailable_error("task ", options.task, " at ", where, " refused: ", s.message());
  };
  if (options.tls != nullptr) {
    // The challenge to prove this process's identity over, then the hello with the proof
    // and a challenge for the task's.
    std::string challenge;
    self->request(found, options.timeout, remote_challenge_atom::value)
        .receive(
            [&](std::string& c) {
              challenge = std::move(c);
              outcome = status();
            },
            refused);
    if (!outcome.ok()) return outcome;
    auto proof = prove_identity(options.tls->mine, challenge);
    if (!proof.ok()) return proof.error();
    const std::string mine = make_challenge();
    outcome = deadline_exceeded_error("task ", options.task, " at ", where, " did not answer the hello within ",
                                      options.timeout.count(), " ms");
    identity_proof theirs;
    self->request(found, options.timeout, remote_hello_atom::value, k_control_version, options.cluster_id, options.client,
                  options.task, options.tls->identity, proof->certificate_pem, proof->signature, mine)
        .receive(
            [&](std::string&, std::uint16_t link_port, std::uint64_t incarnation, std::string& certificate_pem,
                std::string& signature) {
              connection.link_port = link_port;
              connection.incarnation = incarnation;
              theirs = {std::move(certificate_pem), std::move(signature)};
              outcome = status();
            },
            refused);
    if (!outcome.ok()) return outcome;
    // The task proves it is the task expected at this address.
    if (status s = check_identity(*options.tls->cluster, options.task, mine, theirs); !s.ok()) {
      return unauthenticated_error("the service at ", where, " failed to prove it is ", options.task, ": ", s.message());
    }
    connection.service = found;
    return connection;
  }
  self->request(found, options.timeout, remote_hello_atom::value, k_control_version, options.cluster_id, options.client,
                options.task)
      .receive(
          [&](std::string&, std::uint16_t link_port, std::uint64_t incarnation) {
            connection.link_port = link_port;
            connection.incarnation = incarnation;
            outcome = status();
          },
               [&](caf::error& e) {
                 if (e == caf::sec::request_timeout) return;
                 const status s = to_status(e);
                 outcome = unavailable_error("task ", options.task, " at ", where, " refused: ", s.message());
               });
  if (!outcome.ok()) return outcome;
  connection.service = found;
  return connection;
}

}  // namespace troupe::cluster
