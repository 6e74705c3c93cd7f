// The control plane across processes (cluster/remote_task.h) as conversations: a task's
// process (forked) publishes its service; this process says hello, prepares partitions
// and runs steps through a remote device speaking the device protocol, and sees the
// task's death fail what waits on it; steps over the task's tensor link. Also the wire
// types through CAF's serializers.
#include "cluster/remote_task.h"

#include "cluster/real_cluster.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <tuple>
#include <future>
#include <map>
#include <thread>

#include "actors/device_actor.h"
#include "actors/messages.h"
#include "actors/session.h"
#include "actors/spawn.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "cluster/task_processes.h"
#include "tests/actors/session_fixture.h"

namespace troupe::cluster {
namespace {


using namespace std::chrono_literals;

const std::string k_task = "/job:ps/replica:0/task:0";
const std::string k_device = "/job:ps/replica:0/task:0/device:CPU:0";
const std::string k_cluster_id = "remote-test";


// Where each task of a test cluster publishes its service.
using port_map = std::map<std::string, int>;
using testing::negate_spec;
using testing::ops_negated;
using testing::parked_spec;
using testing::spec_of;

std::string task_of(const std::string& device) { return device.substr(0, device.find("/device:")); }

link_options link_for(const std::string& task) {
  link_options o;
  o.local_task = task;
  o.cluster_id = k_cluster_id;
  return o;
}

remote_device_options remote_for(const std::string& device, const port_map& ports, const std::string& client) {
  remote_device_options o;
  o.device = device;
  o.host = "127.0.0.1";
  o.port = ports.at(task_of(device));
  o.hello = {task_of(device), k_cluster_id, client, 3000ms};
  o.link = link_for(client);
  return o;
}

// A cluster of the tasks in `ports` in which this process hosts `hosted` (none: a client)
// and reaches the others through remote devices.
result<std::shared_ptr<actors::cluster>> cluster_hosting(const port_map& ports, std::vector<std::string> hosted,
                                                        const std::string& me) {
  std::map<std::string, int> counts;
  for (const auto& [task, port] : ports) ++counts[task.substr(5, task.find('/', 1) - 5)];
  actors::cluster_options o;
  auto spec = placement::cluster_spec::from_task_counts(counts);
  if (!spec.ok()) return spec.error();
  o.spec = *spec;
  o.hosted_tasks = std::move(hosted);
  o.first_step_id = first_step_id_of_incarnation(new_incarnation());  // as process_cluster does
  o.configure_system = add_remote_task_support;
  o.remote_device = [ports, me](caf::actor_system& system, const std::string& device) -> result<actors::stand_in> {
    return spawn_stand_in(system, remote_for(device, ports, me));
  };
  return actors::cluster::create(std::move(o));
}

// A task's process: hosts `task` of the cluster in `ports`, its transfer hub and its
// service published at its port; says so on `ready_pipe`; then waits to be killed.
pid_t start_task_process(const std::string& task, const port_map& ports, int ready_pipe) {
  const pid_t child = ::fork();
  if (child != 0) return child;
  auto c = cluster_hosting(ports, {task}, task);
  if (!c.ok()) ::_exit(3);
  auto hub = transfer_hub::start(**c, "127.0.0.1", link_for(task));
  if (!hub.ok()) ::_exit(4);
  caf::actor service = spawn_task_service((*c)->system(), {(*c).get(), task, k_cluster_id, hub->get()});
  auto port = (*c)->system().middleman().publish(service, static_cast<std::uint16_t>(ports.at(task)), "127.0.0.1", true);
  if (!port) ::_exit(5);
  const int ready = 1;
  if (::write(ready_pipe, &ready, sizeof ready) != sizeof ready) ::_exit(6);
  for (;;) ::pause();
}

struct task_process {
  pid_t pid = -1;
  int port = 0;
  task_process(const std::string& task, const port_map& ports) : port(ports.at(task)) {
    int ends[2];
    REQUIRE(::pipe(ends) == 0);
    pid = start_task_process(task, ports, ends[1]);
    REQUIRE(pid > 0);
    int ready = 0;
    REQUIRE(::read(ends[0], &ready, sizeof ready) == sizeof ready);
    ::close(ends[0]);
    ::close(ends[1]);
  }
  explicit task_process() : task_process(k_task, {{k_task, cluster::free_loopback_port()}}) {}
  ~task_process() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

// This process's actor system, as a client of tasks; the actors it spawns for a test are
// told to exit before it goes (an actor system waits for its actors).
struct client_system {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::vector<caf::actor> spawned;
  client_system() {
    add_remote_task_support(config);
    config.set("scheduler.policy", caf::atom("sharing"));
    config.set("logger.verbosity", caf::atom("quiet"));
    system = std::make_unique<caf::actor_system>(config);
  }
  ~client_system() {
    for (const caf::actor& a : spawned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  caf::actor remote_device(const std::string& device, int port) {
    return remote_device(remote_for(device, {{task_of(device), port}}, "/job:worker/replica:0/task:0"));
  }
  caf::actor remote_device(remote_device_options o) {
    spawned.push_back(spawn_remote_device(*system, std::move(o)));
    return spawned.back();
  }
};

connect_options hello(const std::string& cluster_id = k_cluster_id, const std::string& task = k_task) {
  return {task, cluster_id, "/job:worker/replica:0/task:0", 3000ms};
}

template <typename T>
result<T> ask(caf::scoped_actor& self, const caf::actor& dest, caf::message m, std::chrono::milliseconds within = 10s) {
  result<T> out = internal_error("no answer");
  self->request(dest, within, std::move(m))
      .receive([&](T& value) { out = std::move(value); }, [&](caf::error& e) { out = actors::to_status(e); });
  return out;
}

// A step's last frame on a link, as doc/cluster.md ("Steps over the links") lays it out:
// header fields, then packed values (none here).
tensor control_body(const std::vector<std::int64_t>& header) {
  std::string out;
  auto put = [&out](const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(static_cast<std::uint32_t>(header.size()));
  for (std::int64_t h : header) put(h);
  put(std::uint32_t{0});
  tensor body(dtype::uint8, {static_cast<std::int64_t>(out.size())});
  std::memcpy(body.raw_data(), out.data(), out.size());
  return body;
}

TEST_CASE("steps over a task's tensor link: damaged frames and unknown partitions are answered with their failure",
          "[cluster][remote]") {
  task_process task;
  client_system c;
  auto connection = connect_task_service(*c.system, "127.0.0.1", task.port, hello());
  REQUIRE(connection.ok());
  REQUIRE(connection->link_port > 0);
  auto link = tensor_link::connect("127.0.0.1", connection->link_port, k_task, link_for("/job:worker/replica:0/task:0"));
  REQUIRE(link.ok());
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::pair<std::string, tensor>> answers;
  (*link)->start({[&](std::string key, tensor value) {
                    std::lock_guard<std::mutex> lock(mutex);
                    answers.emplace_back(std::move(key), std::move(value));
                    arrived.notify_all();
                  },
                  [](const status&) {}});
  auto answer_to = [&](std::string key, tensor value) {
    const std::size_t before = answers.size();
    (*link)->send(std::move(key), std::move(value), [](const status&) {});
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(arrived.wait_for(lock, 10s, [&] { return answers.size() > before; }));
    return answers.back();
  };
  auto code_of = [](const tensor& body) {  // a failure's header: one field, its code
    REQUIRE(body.type() == dtype::uint8);
    REQUIRE(body.byte_size() == 4 + 8 + 4);
    std::int64_t c = 0;
    std::memcpy(&c, static_cast<const char*>(body.raw_data()) + 4, sizeof c);
    return static_cast<code>(c);
  };
  // A run's last frame that is not its bytes: refused, and the failure names why.
  auto [key, body] = answer_to("\x02R7", tensor::scalar(1.0f));
  CHECK(key.rfind("\x02" "E7\x1f", 0) == 0);
  CHECK(key.find("damaged control frame") != std::string::npos);
  CHECK(code_of(body) == code::invalid_argument);
  // A run that announces a feed waits for it (a value may come after its last frame)...
  (*link)->send("\x02R8", control_body({99, 1, 1}), [](const status&) {});
  std::tie(key, body) = answer_to(std::string("\x02" "F8\x1f" "0"), tensor::scalar(1.0f));
  CHECK(key.rfind("\x02" "E8\x1f", 0) == 0);  // ...and runs once it came (no partition 99 here)
  CHECK(key.find("has no partition 99") != std::string::npos);
  // A value whose index is out of bounds, and a header that announces fewer values than came.
  std::tie(key, body) = answer_to(std::string("\x02" "F10\x1f" "99999999"), tensor::scalar(1.0f));
  CHECK(key.rfind("\x02" "E10\x1f", 0) == 0);
  (*link)->send(std::string("\x02" "F11\x1f" "0"), tensor::scalar(1.0f), [](const status&) {});
  (*link)->send(std::string("\x02" "F11\x1f" "1"), tensor::scalar(2.0f), [](const status&) {});
  std::tie(key, body) = answer_to("\x02R11", control_body({99, 1, 1}));
  CHECK(key.rfind("\x02" "E11\x1f", 0) == 0);
  CHECK(key.find("announces 1 values after 2") != std::string::npos);
  // A well-formed run of a partition never prepared: the service's NOT_FOUND, across.
  std::tie(key, body) = answer_to("\x02R9", control_body({99, 1, 0}));
  CHECK(key.rfind("\x02" "E9\x1f", 0) == 0);
  CHECK(key.find("has no partition 99") != std::string::npos);
  CHECK(code_of(body) == code::not_found);
  // The task still serves: a remote device's steps run.
  caf::actor device = c.remote_device(k_device, task.port);
  caf::scoped_actor self{*c.system};
  auto handle = ask<std::uint64_t>(self, device, caf::make_message(actors::prepare_atom::value, std::uint64_t{1}, negate_spec()));
  REQUIRE(handle.ok());
  auto fetched = ask<std::vector<tensor>>(
      self, device, caf::make_message(actors::run_atom::value, *handle, std::int64_t{1}, std::vector<tensor>{tensor::scalar(2.0f)}));
  REQUIRE(fetched.ok());
  CHECK((*fetched)[0].scalar_value<float>() == -2.0f);
}

// (That they are announced, the REAL trace test of scenarios/real_mode_test shows: spans
// cross from the servers.)
TEST_CASE("a server's observations cross CAF's serializers field by field", "[cluster][remote]") {
  client_system c;
  observed_event span;
  span.kind = observed_event::span;
  span.at_ns = 5;
  span.end_ns = 9;
  span.step = 42;
  span.task = k_task;
  span.device = "CPU:0";
  span.name = "mm";
  span.op = "MatMul";
  observed_event aggregated;
  aggregated.kind = observed_event::aggregated;
  aggregated.step = 7;
  aggregated.name = "acc";
  aggregated.sources = {"/job:worker/task:0", "/job:worker/task:1"};
  const caf::message out = caf::make_message(std::vector<observed_event>{span, aggregated});
  std::vector<char> bytes;
  caf::binary_serializer sink(*c.system, bytes);
  REQUIRE_FALSE(sink(const_cast<caf::message&>(out)));
  caf::binary_deserializer source(*c.system, bytes);
  caf::message in;
  REQUIRE_FALSE(source(in));
  REQUIRE(in.match_elements<std::vector<observed_event>>());
  const auto& events = in.get_as<std::vector<observed_event>>(0);
  REQUIRE(events.size() == 2);
  CHECK(events[0].kind == observed_event::span);
  CHECK(events[0].end_ns == 9);
  CHECK(events[0].op == "MatMul");
  CHECK(events[1].sources == aggregated.sources);
}

TEST_CASE("a remote device prepares and runs partitions on another process's device", "[cluster][remote]") {
  task_process task;
  client_system c;
  caf::actor device = c.remote_device(k_device, task.port);
  caf::scoped_actor self{*c.system};

  auto handle = ask<std::uint64_t>(self, device, caf::make_message(actors::prepare_atom::value, std::uint64_t{1}, negate_spec()));
  INFO((handle.ok() ? std::string() : handle.error().message()));
  REQUIRE(handle.ok());
  for (int step = 1; step <= 3; ++step) {
    tensor x(dtype::float32, {2, 2});
    for (std::size_t i = 0; i < 4; ++i) x.flat<float>()[i] = static_cast<float>(step * 10 + static_cast<int>(i));
    auto fetched = ask<std::vector<tensor>>(
        self, device, caf::make_message(actors::run_atom::value, *handle, std::int64_t{step}, std::vector<tensor>{x}));
    REQUIRE(fetched.ok());
    REQUIRE(fetched->size() == 1);
    for (std::size_t i = 0; i < 4; ++i) CHECK((*fetched)[0].flat<float>()[i] == -x.flat<float>()[i]);
  }
  // Feeds and fetches too large to pack with the step go ahead of it, each a tensor of its
  // own; several steps at once, each answered with its own.
  std::vector<std::future<result<std::vector<tensor>>>> big;
  for (int step = 4; step <= 7; ++step) {
    big.push_back(std::async(std::launch::async, [&c, device, step, h = *handle]() -> result<std::vector<tensor>> {
      caf::scoped_actor asker{*c.system};
      tensor x(dtype::float32, {3, 40000});
      const auto in = x.flat<float>();
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(step * 1000 + static_cast<int>(i % 977));
      auto out = ask<std::vector<tensor>>(asker, device,
                                          caf::make_message(actors::run_atom::value, h, std::int64_t{step}, std::vector<tensor>{x}));
      if (!out.ok()) return out;
      if (out->size() != 1 || !(*out)[0].equals(ops_negated(x))) return internal_error("step ", step, " fetched something else");
      return out;
    }));
  }
  for (auto& f : big) {
    auto out = f.get();
    INFO((out.ok() ? std::string() : out.error().message()));
    CHECK(out.ok());
  }
  auto stats = ask<actors::device_stats>(self, device, caf::make_message(actors::stats_atom::value));
  REQUIRE(stats.ok());
  CHECK(stats->partitions == 1);
  // A feed of the wrong dtype: the device's own error, across.
  auto wrong = ask<std::vector<tensor>>(
      self, device,
      caf::make_message(actors::run_atom::value, *handle, std::int64_t{9}, std::vector<tensor>{tensor::scalar(std::int32_t{1})}));
  REQUIRE_FALSE(wrong.ok());
  INFO(wrong.error().message());
  CHECK(wrong.error().error_code() == code::invalid_argument);
  // Unprepared: the partition is gone there.
  self->send(device, actors::unprepare_atom::value, *handle);
  std::this_thread::sleep_for(200ms);
  auto gone = ask<std::vector<tensor>>(
      self, device, caf::make_message(actors::run_atom::value, *handle, std::int64_t{10}, std::vector<tensor>{}));
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.error().error_code() == code::not_found);
  // A device the task does not have.
  caf::actor missing = c.remote_device(k_task + "/device:CPU:7", task.port);
  auto nowhere = ask<std::uint64_t>(self, missing, caf::make_message(actors::prepare_atom::value, std::uint64_t{2}, negate_spec()));
  REQUIRE_FALSE(nowhere.ok());
  CHECK(nowhere.error().error_code() == code::not_found);
  CHECK(nowhere.error().message().find("CPU:7") != std::string::npos);
}

TEST_CASE("the task's process killed or frozen mid-step: the step fails with UNAVAILABLE naming the task",
          "[cluster][remote]") {
  // SIGKILL closes the connection at once; SIGSTOP leaves it open and silent, found by
  // CAF's heartbeats (200 ms) and connection timeout (1 s: add_remote_task_support).
  for (const int signal : {SIGKILL, SIGSTOP}) {
    INFO("signal " << signal);
    auto task = std::make_unique<task_process>();
    client_system c;
    caf::actor device = c.remote_device(k_device, task->port);
    caf::scoped_actor self{*c.system};
    self->monitor(device);
    auto handle = ask<std::uint64_t>(self, device,
                                     caf::make_message(actors::prepare_atom::value, std::uint64_t{1}, parked_spec()));
    REQUIRE(handle.ok());
    // The step, asked from a thread of its own; it waits in its dequeue there.
    auto step = std::async(std::launch::async, [&] {
      caf::scoped_actor asker{*c.system};
      return ask<std::vector<tensor>>(
          asker, device, caf::make_message(actors::run_atom::value, *handle, std::int64_t{1}, std::vector<tensor>{}), 30s);
    });
    std::this_thread::sleep_for(300ms);
    REQUIRE(step.wait_for(0s) == std::future_status::timeout);
    const auto start = std::chrono::steady_clock::now();
    ::kill(task->pid, signal);
    REQUIRE(step.wait_for(10s) == std::future_status::ready);
    const auto waited = std::chrono::steady_clock::now() - start;
    auto outcome = step.get();
    bool device_down = false;
    self->receive([&](caf::down_msg& down) { device_down = down.source == device.address(); },
                  caf::after(std::chrono::seconds(5)) >> [] {});
    REQUIRE_FALSE(outcome.ok());
    CHECK(outcome.error().error_code() == code::unavailable);
    CHECK(outcome.error().message().find(k_task) != std::string::npos);
    CHECK(device_down);
    CHECK(waited < (signal == SIGKILL ? 1s : 3s));
    task.reset();  // SIGKILL (a stopped process too)
  }
}

// y = 2a + x on the worker (a on the PS), back = -y on the PS.
graph::graph split_graph() {
  auto root = graph::scope::new_root();
  auto on_ps = root.with_device("/job:ps/task:0");
  auto on_worker = root.with_device("/job:worker/task:0");
  auto a = ops::constant(on_ps.with_name("a"), tensor::from_vector<float>({1, 2, 3}, {3}));
  auto x = ops::placeholder(on_worker.with_name("x"), dtype::float32);
  auto y = ops::add(on_worker.with_name("y"), ops::mul(on_worker.with_name("twice"), a, ops::constant(on_worker.with_name("two"), tensor::scalar(2.0f))), x);
  ops::neg(on_ps.with_name("back"), y);  // and back to the PS
  auto g = root.to_graph();
  REQUIRE(g.ok());
  return std::move(*g);
}

const std::string k_ps_task = "/job:ps/replica:0/task:0";
const std::string k_worker_task = "/job:worker/replica:0/task:0";

// Runs `steps` steps of split_graph() from a client process's cluster; the number of
// steps whose values were right (every failure is reported).
int run_split_steps(const std::shared_ptr<actors::cluster>& client, int steps, int seed) {
  actors::session_options o;
  o.cluster = client;
  o.default_device = k_worker_task;
  auto s = actors::session::create(split_graph(), o);
  if (!s.ok()) return 0;
  int right = 0;
  for (int step = 0; step < steps; ++step) {
    tensor fed(dtype::float32, {3});
    for (int i = 0; i < 3; ++i) fed.flat<float>()[static_cast<std::size_t>(i)] = static_cast<float>(seed + 10 * step + i);
    auto out = (*s)->run({{"x", fed}}, {"y", "back"});
    if (!out.ok()) {
      UNSCOPED_INFO("step " << step << ": " << out.error().message());
      continue;
    }
    bool ok = true;
    for (int i = 0; i < 3; ++i) {
      const float expected = 2.0f * static_cast<float>(i + 1) + static_cast<float>(seed + 10 * step + i);
      ok = ok && (*out)[0].flat<float>()[static_cast<std::size_t>(i)] == expected &&
           (*out)[1].flat<float>()[static_cast<std::size_t>(i)] == -expected;
    }
    right += ok ? 1 : 0;
  }
  return right;
}

TEST_CASE("a _Send to another process's device waits until its bytes are on the link; a peer that reads nothing "
          "holds its step back",
          "[cluster][remote]") {
  // Through the stand-in, or (once the stand-in's link is open) from the kernel's thread
  // through its sink.
  const bool through_sink = GENERATE(false, true);
  INFO((through_sink ? "through the stand-in's sink" : "through the stand-in"));
  // The PS's end of the link: accepted, but read only when the test says (start()).
  std::mutex mutex;
  std::unique_ptr<tensor_link> accepted;
  std::atomic<std::int64_t> received{0};
  auto listener = link_listener::listen("127.0.0.1", 0, link_for(k_ps_task), [&](std::unique_ptr<tensor_link> l) {
    std::lock_guard<std::mutex> lock(mutex);
    accepted = std::move(l);
  });
  REQUIRE(listener.ok());
  link_directory::of_process().set(k_cluster_id, k_ps_task, "127.0.0.1", (*listener)->port());
  // This process hosts the worker; the PS's device is a stand-in that only sends tensors
  // (as a server's are), with a patient link.
  actors::cluster_options o;
  auto spec = placement::cluster_spec::from_task_counts({{"ps", 1}, {"worker", 1}});
  REQUIRE(spec.ok());
  o.spec = *spec;
  o.hosted_tasks = {k_worker_task};
  o.configure_system = add_remote_task_support;
  o.remote_device = [through_sink](caf::actor_system& system, const std::string& device) -> result<actors::stand_in> {
    auto r = remote_for(device, {{k_ps_task, 1}}, k_worker_task);
    r.outlive_task = true;
    r.link.peer_timeout = 30s;
    if (through_sink) return spawn_stand_in(system, std::move(r));
    return actors::stand_in(spawn_remote_device(system, std::move(r)));  // without its sink: the stand-in carries every tensor
  };
  auto c = actors::cluster::create(std::move(o));
  REQUIRE(c.ok());
  // x (fed, 32 MB: more than loopback's socket buffers hold) sent to the PS.
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32);
  root.with_name("send").add("_Send", {x},
                             {{"T", graph::attr_value(dtype::float32)},
                              {"tensor_name", graph::attr_value(std::string("x:0"))},
                              {"send_device", graph::attr_value(k_worker_task + "/device:CPU:0")},
                              {"send_device_incarnation", graph::attr_value(std::int64_t{0})},
                              {"recv_device", graph::attr_value(k_device)},
                              {"client_terminated", graph::attr_value(false)}});
  caf::actor worker = (*c)->device_actor(k_worker_task + "/device:CPU:0");
  REQUIRE(worker);
  actors::unpinned_use use((*c)->system());
  caf::scoped_actor self{(*c)->system()};
  auto handle = ask<std::uint64_t>(self, worker, caf::make_message(actors::prepare_atom::value, std::uint64_t{1},
                                                                   spec_of(root, {"x:0"}, {})));
  REQUIRE(handle.ok());
  tensor big(dtype::float32, {8 << 20});
  std::fill_n(big.flat<float>().data(), big.num_elements(), 1.5f);
  std::shared_ptr<actors::remote_sink> sink = (*c)->directory()->sink(k_device);
  CHECK((sink != nullptr) == through_sink);
  std::int64_t small_sent = 0;  // elements of the step that opened the link
  if (through_sink) {
    // A first step opens the link (through the stand-in: none was open); its one float
    // fits in the socket's buffers, so it ends though nobody reads yet.
    auto first = ask<std::vector<tensor>>(self, worker,
                                          caf::make_message(actors::run_atom::value, *handle, std::int64_t{6},
                                                            std::vector<tensor>{tensor::scalar<float>(2.5f)}),
                                          30s);
    INFO((first.ok() ? std::string() : first.error().message()));
    REQUIRE(first.ok());
    CHECK(sink->sent() == 0);
    small_sent = 1;
  }
  auto step = std::async(std::launch::async, [&] {
    caf::scoped_actor asker{(*c)->system()};
    return ask<std::vector<tensor>>(asker, worker,
                                    caf::make_message(actors::run_atom::value, *handle, std::int64_t{7},
                                                      std::vector<tensor>{big}),
                                    60s);
  });
  // The stand-in connects (the PS's end is accepted) but nobody reads there: the bytes
  // cannot all go out, so the step does not end.
  for (int i = 0; i < 2000; ++i) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (accepted != nullptr) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  CHECK(step.wait_for(500ms) == std::future_status::timeout);
  {
    std::lock_guard<std::mutex> lock(mutex);
    REQUIRE(accepted != nullptr);
    accepted->start({[&](std::string, tensor t) { received += t.num_elements(); }, [](const status&) {}});
  }
  // Once the PS reads, the _Send (and with it the step) finishes.
  REQUIRE(step.wait_for(30s) == std::future_status::ready);
  auto done = step.get();
  INFO((done.ok() ? std::string() : done.error().message()));
  CHECK(done.ok());
  for (int i = 0; i < 1000 && received.load() < big.num_elements() + small_sent; ++i) std::this_thread::sleep_for(10ms);
  CHECK(received.load() == big.num_elements() + small_sent);
  if (through_sink) CHECK(sink->sent() == 1);  // the big tensor went from the kernel's thread
  std::lock_guard<std::mutex> lock(mutex);
  accepted.reset();
}

TEST_CASE("a session runs steps across three processes: tensors between tasks over links, fetches back here",
          "[cluster][remote]") {
  const port_map ports{{k_ps_task, cluster::free_loopback_port()}, {k_worker_task, cluster::free_loopback_port()}};
  task_process ps_process(k_ps_task, ports), worker_process(k_worker_task, ports);
  // This process hosts no task: a client of the two.
  auto client = cluster_hosting(ports, {}, "/job:client/replica:0/task:0");
  REQUIRE(client.ok());
  CHECK_FALSE((*client)->hosts(k_ps_task));
  CHECK(run_split_steps(*client, 3, 0) == 3);
}

TEST_CASE("two clients run steps on the same tasks at once: their step ids never meet", "[cluster][remote]") {
  const port_map ports{{k_ps_task, cluster::free_loopback_port()}, {k_worker_task, cluster::free_loopback_port()}};
  task_process ps_process(k_ps_task, ports), worker_process(k_worker_task, ports);
  auto first = cluster_hosting(ports, {}, "/job:client/replica:0/task:0");
  auto second = cluster_hosting(ports, {}, "/job:client/replica:0/task:1");
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  auto other = std::async(std::launch::async, [&] { return run_split_steps(*second, 30, 1000); });
  CHECK(run_split_steps(*first, 30, 0) == 30);
  CHECK(other.get() == 30);
}

TEST_CASE("hellos to the wrong cluster, task or address are refused in time", "[cluster][remote]") {
  task_process task;
  client_system c;
  auto other = connect_task_service(*c.system, "127.0.0.1", task.port, hello("another-cluster"));
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().error_code() == code::unavailable);
  CHECK(other.error().message().find("another-cluster") != std::string::npos);
  CHECK(other.error().message().find(k_cluster_id) != std::string::npos);
  auto wrong_task = connect_task_service(*c.system, "127.0.0.1", task.port, hello(k_cluster_id, "/job:ps/replica:0/task:1"));
  REQUIRE_FALSE(wrong_task.ok());
  CHECK(wrong_task.error().message().find("but this is task " + k_task) != std::string::npos);
  // Nothing listens at a port just freed.
  const auto start = std::chrono::steady_clock::now();
  auto nothing = connect_task_service(*c.system, "127.0.0.1", 1, hello());
  REQUIRE_FALSE(nothing.ok());
  CHECK(nothing.error().error_code() == code::unavailable);
  CHECK(std::chrono::steady_clock::now() - start < 4s);
}

}  // namespace
}  // namespace troupe::cluster
