// The tensor links between processes (cluster/transport.h) as conversations: tensors both
// ways, hellos refused, a silent or absent listener, a peer killed or frozen (separate
// processes), a slow receiver holding its sender to the window, closes.
#include "cluster/transport.h"
#include "cluster/task_processes.h"
#include "tests/cluster/link_server.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe::cluster {
namespace {

using namespace std::chrono_literals;
using server = troupe::cluster::testing::link_server;
using namespace troupe::cluster::testing;

TEST_CASE("tensors of every fixed-size type and shape cross a link whole and in order, both ways", "[cluster][transport]") {
  link_options ps_options = options_for(k_ps);
  ps_options.chunk_bytes = 1 << 20;  // the 9 MB tensor goes in 9 chunks
  inbox at_ps, at_worker;  // outlives the links
  server ps(ps_options);
  auto worker = tensor_link::connect("127.0.0.1", ps.listener->port(), k_ps, options_for(k_worker));
  REQUIRE(worker.ok());
  tensor_link* ps_link = ps.wait_link();
  REQUIRE(ps_link != nullptr);
  CHECK(ps_link->peer() == k_worker);
  CHECK((*worker)->peer() == k_ps);
  ps_link->start(at_ps.handlers());
  (*worker)->start(at_worker.handlers());

  const std::vector<tensor> values{counting(dtype::float32, {3, 4}, 1),       counting(dtype::int64, {}, 2),
                                   counting(dtype::float64, {0, 5}, 3),       counting(dtype::uint8, {9, 1 << 20}, 4),
                                   counting(dtype::bool_, {17}, 5),           counting(dtype::int8, {2, 3, 4, 5}, 6),
                                   counting(dtype::complex64, {3}, 7),        counting(dtype::float16, {1, 1, 1}, 8)};
  std::atomic<int> written{0};
  for (std::size_t i = 0; i < values.size(); ++i) {
    (*worker)->send(str_cat("w", i), values[i], [&](const status& s) {
      CHECK(s.ok());
      ++written;
    });
    ps_link->send(str_cat("p", i), values[values.size() - 1 - i], [](const status& s) { CHECK(s.ok()); });
  }
  REQUIRE(at_ps.wait_tensors(values.size()));
  REQUIRE(at_worker.wait_tensors(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO("tensor " << i);
    CHECK(at_ps.tensors[i].first == str_cat("w", i));
    CHECK(at_ps.tensors[i].second.equals(values[i]));
    CHECK(at_worker.tensors[i].first == str_cat("p", i));
    CHECK(at_worker.tensors[i].second.equals(values[values.size() - 1 - i]));
  }
  for (int i = 0; i < 100 && written < static_cast<int>(values.size()); ++i) std::this_thread::sleep_for(10ms);
  CHECK(written == static_cast<int>(values.size()));
  // Everything acknowledged in the end.
  for (int i = 0; i < 100 && (*worker)->unacknowledged_bytes() != 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK((*worker)->unacknowledged_bytes() == 0);
  CHECK((*worker)->queued_bytes() == 0);
  // A string tensor cannot cross: refused at once, naming the type.
  status refused;
  (*worker)->send("s", tensor(dtype::string, {2}), [&](const status& s) { refused = s; });
  CHECK(refused.error_code() == code::invalid_argument);
  CHECK(refused.message().find("string") != std::string::npos);
  // Closing one end: the other hears of it, with the task's name.
  worker->reset();
  REQUIRE(at_ps.wait_failure());
  CHECK(at_ps.failures[0].error_code() == code::unavailable);
  CHECK(at_ps.failures[0].message().find(k_worker) != std::string::npos);
  status after;
  ps_link->send("late", values[0], [&](const status& s) { after = s; });
  CHECK(after.error_code() == code::unavailable);
  CHECK(at_worker.failures.empty());  // a closing end hears nothing of its own close
}

// Sends a small, a 200 KB and a 9 MB tensor from `from` to `at` and checks they arrive.
void check_tensors_cross(tensor_link& from, inbox& at) {
  const std::vector<tensor> values{counting(dtype::float32, {3, 4}, 1), counting(dtype::uint8, {200 << 10}, 2),
                                   counting(dtype::uint8, {9 << 20}, 3)};
  for (std::size_t i = 0; i < values.size(); ++i) from.send(str_cat("t", i), values[i], [](const status& s) { CHECK(s.ok()); });
  REQUIRE(at.wait_tensors(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO("tensor " << i);
    CHECK(at.tensors[i].first == str_cat("t", i));
    CHECK(at.tensors[i].second.equals(values[i]));
  }
}

// A link from a worker to `ps` at 127.0.0.1: whether both ends say it goes over a local
// socket is `local`, and tensors cross it both ways. The inboxes outlive `ps`'s links.
void check_link_to(server& ps, inbox& at_ps, inbox& at_worker, bool local) {
  auto worker = tensor_link::connect("127.0.0.1", ps.port(), k_ps, options_for(k_worker));
  REQUIRE(worker.ok());
  tensor_link* ps_link = ps.wait_link();
  REQUIRE(ps_link != nullptr);
  CHECK((*worker)->over_local_socket() == local);
  CHECK(ps_link->over_local_socket() == local);
  ps_link->start(at_ps.handlers());
  (*worker)->start(at_worker.handlers());
  check_tensors_cross(**worker, at_ps);
  check_tensors_cross(*ps_link, at_worker);
}

TEST_CASE("a link to a loopback address goes over a local socket; one whose name is taken goes over TCP",
          "[cluster][transport]") {
  SECTION("local socket") {
    inbox at_ps, at_worker;
    server ps(options_for(k_ps));
    check_link_to(ps, at_ps, at_worker, true);
    // A refusal over it names it.
    link_options other = options_for(k_worker);
    other.cluster_id = "another-cluster";
    auto refused = tensor_link::connect("127.0.0.1", ps.port(), k_ps, other);
    CHECK_FALSE(refused.ok());
    CHECK(ps.wait_refusal().find("the local socket of port " + std::to_string(ps.port())) != std::string::npos);
  }
  SECTION("name taken") {
    // Another socket holds the listener's local name (and does not listen): the listener
    // serves over TCP alone, and a connecting end that finds nobody there uses TCP.
    const int port = free_loopback_port();
    const int squatter = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un u{};
    u.sun_family = AF_UNIX;
    const std::string name = "troupe-link/127.0.0.1:" + std::to_string(port);
    std::memcpy(u.sun_path + 1, name.data(), name.size());
    REQUIRE(::bind(squatter, reinterpret_cast<sockaddr*>(&u),
                   static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())) == 0);
    {
      inbox at_ps, at_worker;
      server ps(options_for(k_ps), port);
      check_link_to(ps, at_ps, at_worker, false);
    }
    ::close(squatter);
  }
}

TEST_CASE("hellos from another cluster, for another task or not troupe's are refused, and both ends say why",
          "[cluster][transport]") {
  server ps(options_for(k_ps));
  const int port = ps.listener->port();
  SECTION("another cluster") {
    link_options other = options_for(k_worker);
    other.cluster_id = "other-cluster";
    auto link = tensor_link::connect("127.0.0.1", port, k_ps, other);
    REQUIRE_FALSE(link.ok());
    CHECK(link.error().error_code() == code::unavailable);
    CHECK(link.error().message().find("other-cluster") != std::string::npos);
    CHECK(link.error().message().find("test-cluster") != std::string::npos);
    REQUIRE_FALSE(ps.wait_refusal().empty());
    CHECK(ps.wait_refusal().find("other-cluster") != std::string::npos);
  }
  SECTION("a task that is not there") {
    const std::string other_ps = "/job:ps/replica:0/task:1";
    auto link = tensor_link::connect("127.0.0.1", port, other_ps, options_for(k_worker));
    REQUIRE_FALSE(link.ok());
    CHECK(link.error().message().find("meant to reach task " + other_ps) != std::string::npos);
    REQUIRE_FALSE(ps.wait_refusal().empty());
  }
  SECTION("another wire version (another troupe)") {
    // A hello as the wire format says (doc/cluster.md), but of version 99.
    std::string body;
    auto put_u32 = [&](std::uint32_t v) { body.append(reinterpret_cast<const char*>(&v), 4); };
    auto put_string = [&](const std::string& text) {
      put_u32(static_cast<std::uint32_t>(text.size()));
      body += text;
    };
    put_u32(99);
    put_string(k_worker);
    put_string("test-cluster");
    put_string(k_ps);
    std::string frame;
    const std::uint32_t magic = 0x4c505254;
    const std::uint64_t length = body.size();
    frame.append(reinterpret_cast<const char*>(&magic), 4);
    frame += std::string("\x01\0\0\0", 4);
    frame.append(reinterpret_cast<const char*>(&length), 8);
    frame += body;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::write(fd, frame.data(), frame.size()) == static_cast<ssize_t>(frame.size()));
    REQUIRE_FALSE(ps.wait_refusal().empty());
    CHECK(ps.wait_refusal().find("wire version 99") != std::string::npos);
    // The peer is told why: a refuse frame (kind 2) naming the version.
    char answer[512] = {};
    const ssize_t got = ::read(fd, answer, sizeof answer);
    REQUIRE(got > 16);
    CHECK(answer[4] == 2);
    CHECK(std::string(answer + 16, static_cast<std::size_t>(got - 16)).find("wire version 99") != std::string::npos);
    ::close(fd);
  }
  SECTION("not a troupe link") {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    const char request[] = "GET / HTTP/1.0\r\n\r\n";
    REQUIRE(::write(fd, request, sizeof request - 1) == static_cast<ssize_t>(sizeof request - 1));
    REQUIRE_FALSE(ps.wait_refusal().empty());
    CHECK(ps.wait_refusal().find("not a troupe link frame") != std::string::npos);
    ::close(fd);
  }
  // The listener still serves a good peer afterwards.
  auto good = tensor_link::connect("127.0.0.1", port, k_ps, options_for(k_worker));
  CHECK(good.ok());
}

// Waits until `link` says its large chunks go through shared memory (the peer's
// shared_ready comes after the hellos).

TEST_CASE("peers on one machine move large chunks through shared memory, and through the socket when the ring is full",
          "[cluster][transport]") {
  link_options worker_options = options_for(k_worker);
  // A small ring (4 chunks of 64 KB plus the header): 3 MB tensors wrap it many times.
  worker_options.shared_memory_bytes = 4096 + 4 * (64 << 10);
  inbox at_ps, at_worker;  // outlives the links
  troupe::cluster::testing::linked_pair pair(options_for(k_ps), k_ps, worker_options);
  auto* worker = &pair.worker;
  tensor_link* ps_link = pair.ps_link;
  // The receiver takes its time with some tensors, so the small ring fills and chunks go
  // over the socket between ones that go through the ring.
  auto handlers = at_ps.handlers();
  auto keep = handlers.tensor;
  handlers.tensor = [keep](std::string key, tensor value) {
    if (key.back() == '0') std::this_thread::sleep_for(20ms);
    keep(std::move(key), std::move(value));
  };
  ps_link->start(handlers);
  (*worker)->start(at_worker.handlers());
  REQUIRE(wait_sharing(**worker));
  REQUIRE(wait_sharing(*ps_link));

  std::vector<tensor> sent;
  for (int i = 0; i < 24; ++i) {
    // 3 MB, 100 KB (one chunk), odd sizes that do not divide the ring, and small ones.
    const std::int64_t n = i % 4 == 0 ? 3 << 20 : i % 4 == 1 ? 100 << 10 : i % 4 == 2 ? 777777 : 40;
    sent.push_back(counting(dtype::uint8, {n}, i));
    (*worker)->send(str_cat("w", i), sent.back(), [](const status& s) { CHECK(s.ok()); });
  }
  // The other way, through the default ring (8 MB).
  const tensor big = counting(dtype::float32, {5, 1 << 20}, 99);
  for (int i = 0; i < 4; ++i) ps_link->send(str_cat("p", i), big, [](const status& s) { CHECK(s.ok()); });
  REQUIRE(at_ps.wait_tensors(sent.size()));
  REQUIRE(at_worker.wait_tensors(4));
  for (std::size_t i = 0; i < sent.size(); ++i) {
    INFO("tensor " << i);
    CHECK(at_ps.tensors[i].first == str_cat("w", i));
    CHECK(at_ps.tensors[i].second.equals(sent[i]));
  }
  for (const auto& [key, value] : at_worker.tensors) CHECK(value.equals(big));
  CHECK(at_ps.failures.empty());
  CHECK(at_worker.failures.empty());
}

TEST_CASE("tensors that come whole through the ring are handed on in place; kept ones hold their region until they go",
          "[cluster][transport]") {
  link_options worker_options = options_for(k_worker);
  worker_options.shared_memory_bytes = 4096 + (8 << 20);  // the worker's ring, which the ps reads
  inbox at_ps, at_worker;  // outlives the links
  troupe::cluster::testing::linked_pair pair(options_for(k_ps), k_ps, worker_options);
  auto* worker = &pair.worker;
  tensor_link* ps_link = pair.ps_link;
  ps_link->start(at_ps.handlers());
  (*worker)->start(at_worker.handlers());
  REQUIRE(wait_sharing(**worker));
  // 1 MB tensors (and an odd-sized one, 333,333 bytes), each in one chunk, while the ps
  // keeps every one: the first ones fill the 8 MB ring in place, the rest wait for none
  // and come through the socket. Every tensor kept keeps its bytes.
  std::vector<tensor> sent;
  for (int i = 0; i < 20; ++i) {
    sent.push_back(counting(dtype::uint8, {i == 3 ? 333333 : 1 << 20}, i));
    (*worker)->send(str_cat("w", i), sent.back(), [](const status& s) { CHECK(s.ok()); });
  }
  REQUIRE(at_ps.wait_tensors(sent.size()));
  const std::int64_t first = ps_link->received_in_place();
  CHECK(first >= 4);
  CHECK(first < 20);
  // More while the first ones are still held: whatever lands in the ring must not touch
  // their bytes.
  for (int i = 20; i < 24; ++i) {
    sent.push_back(counting(dtype::uint8, {1 << 20}, i));
    (*worker)->send(str_cat("w", i), sent.back(), [](const status& s) { CHECK(s.ok()); });
  }
  REQUIRE(at_ps.wait_tensors(sent.size()));
  {
    std::lock_guard<std::mutex> lock(at_ps.mutex);
    for (std::size_t i = 0; i < sent.size(); ++i) {
      INFO("tensor " << i);
      CHECK(at_ps.tensors[i].first == str_cat("w", i));
      CHECK(at_ps.tensors[i].second.equals(sent[i]));
      CHECK(reinterpret_cast<std::uintptr_t>(at_ps.tensors[i].second.raw_data()) % 64 == 0);
    }
    at_ps.tensors.clear();  // the ring's regions are the worker's again
  }
  const std::int64_t before = ps_link->received_in_place();
  for (int i = 0; i < 6; ++i) {
    const tensor t = counting(dtype::float32, {1 << 18}, 100 + i);
    (*worker)->send(str_cat("again", i), t, [](const status& s) { CHECK(s.ok()); });
    REQUIRE(at_ps.wait_tensors(1));
    std::lock_guard<std::mutex> lock(at_ps.mutex);
    CHECK(at_ps.tensors.back().second.equals(t));
    at_ps.tensors.clear();
  }
  CHECK(ps_link->received_in_place() == before + 6);
  CHECK(at_ps.failures.empty());
}

// A link's receiver times each tensor's transit when the peer shares its clock (it
// mapped the peer's ring), and not otherwise.
struct transits {
  std::mutex mutex;
  std::vector<std::pair<std::uint64_t, std::chrono::nanoseconds>> seen;  // bytes, transit
  std::vector<std::string> keys;  // each tensor's
  void install(tensor_link::handlers& h) {
    h.timed = [this](const std::string& key, std::uint64_t bytes, std::chrono::steady_clock::time_point sent,
                     std::chrono::steady_clock::time_point arrived) {
      std::lock_guard<std::mutex> lock(mutex);
      seen.emplace_back(bytes, arrived - sent);
      keys.push_back(key);
    };
  }
};

TEST_CASE("a receiver on the sender's machine times each tensor from its first write to its last byte",
          "[cluster][transport]") {
  inbox at_ps, at_worker;  // outlives the links
  troupe::cluster::testing::linked_pair pair(options_for(k_ps), k_ps, options_for(k_worker));
  transits timed;
  auto handlers = at_ps.handlers();
  timed.install(handlers);
  // The ps holds each tensor 2 ms before the next is read: a tensor that waited behind it
  // in the socket or the ring took longer than the first, whose transit the hold never
  // touches.
  auto keep = handlers.tensor;
  handlers.tensor = [keep](std::string key, tensor value) {
    std::this_thread::sleep_for(2ms);
    keep(std::move(key), std::move(value));
  };
  pair.ps_link->start(handlers);
  pair.worker->start(at_worker.handlers());
  REQUIRE(wait_sharing(*pair.worker));
  // A small tensor (socket), one through the ring in place, one in several shared chunks,
  // all made before the first is sent: the writer writes them one after another at once.
  const std::vector<std::int64_t> sizes = {40, 1 << 20, 6 << 20};
  std::vector<tensor> values;
  for (std::int64_t n : sizes) values.push_back(counting(dtype::uint8, {n}, 1));
  const auto before = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    pair.worker->send(str_cat("w", i), values[i], [](const status& s) { CHECK(s.ok()); });
  }
  REQUIRE(at_ps.wait_tensors(sizes.size()));
  const auto elapsed = std::chrono::steady_clock::now() - before;
  std::lock_guard<std::mutex> lock(timed.mutex);
  REQUIRE(timed.seen.size() == sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("tensor " << i);
    CHECK(timed.seen[i].first == static_cast<std::uint64_t>(sizes[i]));
    CHECK(timed.keys[i] == str_cat("w", i));  // with the tensor's key
    CHECK(timed.seen[i].second > 0ns);
    CHECK(timed.seen[i].second < elapsed);
  }
  // The last waited for the 2 ms holds of those before it (less the writing of the
  // first two, a 1 MB copy: well under a millisecond).
  CHECK(timed.seen[2].second >= 3ms);
}

TEST_CASE("a link whose end takes no shared memory moves every byte through the socket", "[cluster][transport]") {
  link_options ps_options = options_for(k_ps);
  ps_options.shared_memory_bytes = 0;  // offers no ring and maps none
  inbox at_ps, at_worker;  // outlives the links
  troupe::cluster::testing::linked_pair pair(ps_options, k_ps, options_for(k_worker));
  auto* worker = &pair.worker;
  tensor_link* ps_link = pair.ps_link;
  transits timed;  // neither end shares the other's clock as far as it knows
  auto ps_handlers = at_ps.handlers(), worker_handlers = at_worker.handlers();
  timed.install(ps_handlers);
  timed.install(worker_handlers);
  ps_link->start(ps_handlers);
  (*worker)->start(worker_handlers);
  const tensor value = counting(dtype::int32, {3, 1 << 18}, 5);
  (*worker)->send("w", value, [](const status& s) { CHECK(s.ok()); });
  ps_link->send("p", value, [](const status& s) { CHECK(s.ok()); });
  REQUIRE(at_ps.wait_tensors(1));
  REQUIRE(at_worker.wait_tensors(1));
  CHECK(at_ps.tensors[0].second.equals(value));
  CHECK(at_worker.tensors[0].second.equals(value));
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE((*worker)->shares_memory());
  CHECK_FALSE(ps_link->shares_memory());
  std::lock_guard<std::mutex> lock(timed.mutex);
  CHECK(timed.seen.empty());
}

TEST_CASE("a shared-memory chunk from a peer that offered no ring, or outside it, fails the link naming the peer",
          "[cluster][transport]") {
  server ps(options_for(k_ps));
  // A hello offering no ring, a tensor of 1 MB, and a shared_chunk (kind 9) the listener
  // cannot have.
  std::string chunk;
  put_raw(chunk, std::uint64_t{0});
  put_raw(chunk, std::uint64_t{1 << 20});
  const status failed = failure_of_frame(ps, 9, chunk);
  CHECK(failed.error_code() == code::unavailable);
  CHECK(failed.message().find("damaged shared-memory chunk") != std::string::npos);
  CHECK(failed.message().find(k_worker) != std::string::npos);
}

TEST_CASE("no listener, a silent listener and a port in use are clear errors in time", "[cluster][transport]") {
  // A port that was free a moment ago: nothing listens.
  int free_port = 0;
  {
    server probe(options_for(k_ps));
    free_port = probe.listener->port();
  }
  auto start = std::chrono::steady_clock::now();
  auto none = tensor_link::connect("127.0.0.1", free_port, k_ps, options_for(k_worker));
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().error_code() == code::unavailable);
  CHECK(none.error().message().find("127.0.0.1:" + std::to_string(free_port)) != std::string::npos);
  CHECK(none.error().message().find(k_ps) != std::string::npos);
  // A socket that listens but never answers (the kernel completes the connection).
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(silent, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(silent, 4) == 0);
  socklen_t length = sizeof a;
  ::getsockname(silent, reinterpret_cast<sockaddr*>(&a), &length);
  start = std::chrono::steady_clock::now();
  auto hung = tensor_link::connect("127.0.0.1", ntohs(a.sin_port), k_ps, options_for(k_worker));
  const auto waited = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(hung.ok());
  CHECK(hung.error().error_code() == code::deadline_exceeded);
  CHECK(hung.error().message().find("did not answer within 1000 ms") != std::string::npos);
  CHECK(waited < 3s);
  ::close(silent);
  // A port in use.
  server first(options_for(k_ps));
  auto second = link_listener::listen("127.0.0.1", first.listener->port(), options_for(k_ps), [](auto) {});
  REQUIRE_FALSE(second.ok());
  CHECK(second.error().error_code() == code::unavailable);
  CHECK(second.error().message().find(std::to_string(first.listener->port())) != std::string::npos);
  CHECK(second.error().message().find("in use") != std::string::npos);
  // A bad address.
  auto bad = tensor_link::connect("no such host.invalid", 1, k_ps, options_for(k_worker));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().error_code() == code::invalid_argument);
}

// A child process that connects to `port` as a worker, sends one tensor and waits to be
// killed or stopped.
pid_t start_peer_process(int port_pipe) {
  return testing::start_peer_process(port_pipe, [](tensor_link& link) {
    link.start({[](std::string, tensor) {}, [](const status&) {}});
    link.send("hello", counting(dtype::float32, {4}, 1), [](const status&) {});
  });
}

TEST_CASE("a peer process killed or frozen fails the link within a second, naming its task", "[cluster][transport]") {
  for (const int signal : {SIGKILL, SIGSTOP}) {
    INFO("signal " << signal);
    int pipe_ends[2];
    REQUIRE(::pipe(pipe_ends) == 0);
    const pid_t child = start_peer_process(pipe_ends[0]);
    REQUIRE(child > 0);
    inbox at_ps;  // outlives the links
    server ps(options_for(k_ps));
    const int port = ps.listener->port();
    REQUIRE(::write(pipe_ends[1], &port, sizeof port) == sizeof port);
    tensor_link* link = ps.wait_link();
    REQUIRE(link != nullptr);
    link->start(at_ps.handlers());
    REQUIRE(at_ps.wait_tensors(1));
    // Sends still queued when the peer goes hear of it too.
    std::promise<status> queued;
    link->send("x", counting(dtype::float32, {1 << 20}, 2), [](const status&) {});
    const auto start = std::chrono::steady_clock::now();
    ::kill(child, signal);
    REQUIRE(at_ps.wait_failure(5s));
    const auto waited = std::chrono::steady_clock::now() - start;
    CHECK(waited < 1s);
    CHECK(at_ps.failures[0].error_code() == code::unavailable);
    CHECK(at_ps.failures[0].message().find(k_worker) != std::string::npos);
    link->send("y", counting(dtype::float32, {4}, 3), [&](const status& s) { queued.set_value(s); });
    auto answer = queued.get_future();
    REQUIRE(answer.wait_for(5s) == std::future_status::ready);
    CHECK(answer.get().error_code() == code::unavailable);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    ::close(pipe_ends[0]);
    ::close(pipe_ends[1]);
  }
}

TEST_CASE("a slow receiver holds its sender to the window; all arrives once it reads on", "[cluster][transport]") {
  inbox at_ps;  // outlives the links
  server ps(options_for(k_ps));
  link_options worker_options = options_for(k_worker);
  worker_options.window_bytes = 3 << 20;
  auto worker = tensor_link::connect("127.0.0.1", ps.listener->port(), k_ps, worker_options);
  REQUIRE(worker.ok());
  tensor_link* ps_link = ps.wait_link();
  REQUIRE(ps_link != nullptr);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto handlers = at_ps.handlers();
  auto keep = handlers.tensor;
  handlers.tensor = [&, keep](std::string key, tensor value) {
    released.wait();  // the receiver takes its time with the first tensor
    keep(std::move(key), std::move(value));
  };
  ps_link->start(handlers);
  (*worker)->start({[](std::string, tensor) {}, [](const status&) {}});
  std::atomic<int> written{0};
  for (int i = 0; i < 10; ++i) {
    (*worker)->send(std::to_string(i), counting(dtype::uint8, {1 << 20}, i), [&](const status& s) {
      CHECK(s.ok());
      ++written;
    });
  }
  std::this_thread::sleep_for(500ms);
  // Nothing is acknowledged: at most a window is out, the rest waits in the queue (the
  // heartbeats keep the link up meanwhile).
  CHECK((*worker)->unacknowledged_bytes() <= worker_options.window_bytes);
  CHECK(written <= 3);
  CHECK((*worker)->queued_bytes() >= 7 << 20);
  CHECK((*worker)->failure().ok());
  release.set_value();
  REQUIRE(at_ps.wait_tensors(10));
  for (int i = 0; i < 10; ++i) CHECK(at_ps.tensors[static_cast<std::size_t>(i)].first == std::to_string(i));
  for (int i = 0; i < 200 && written < 10; ++i) std::this_thread::sleep_for(10ms);
  CHECK(written == 10);
  CHECK(at_ps.failures.empty());
}

TEST_CASE("closing a link whose writer waits on a receiver that reads no more returns at once", "[cluster][transport]") {
  inbox at_ps;  // outlives the links
  server ps(options_for(k_ps));
  auto worker = tensor_link::connect("127.0.0.1", ps.listener->port(), k_ps, options_for(k_worker));
  REQUIRE(worker.ok());
  tensor_link* ps_link = ps.wait_link();
  REQUIRE(ps_link != nullptr);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto handlers = at_ps.handlers();
  handlers.tensor = [released](std::string, tensor) { released.wait(); };
  ps_link->start(handlers);
  (*worker)->start({[](std::string, tensor) {}, [](const status&) {}});
  std::promise<status> big_written, queued_after;
  (*worker)->send("small", counting(dtype::float32, {4}, 1), [](const status&) {});
  // 64 MB: more than the socket buffers hold, so the writer waits inside it.
  (*worker)->send("big", counting(dtype::uint8, {64 << 20}, 2), [&](const status& s) { big_written.set_value(s); });
  (*worker)->send("after", counting(dtype::float32, {4}, 3), [&](const status& s) { queued_after.set_value(s); });
  std::this_thread::sleep_for(300ms);
  const auto start = std::chrono::steady_clock::now();
  worker->reset();
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  CHECK_FALSE(big_written.get_future().get().ok());
  CHECK(queued_after.get_future().get().error_code() == code::cancelled);
  release.set_value();
  REQUIRE(at_ps.wait_failure());
  CHECK(at_ps.failures[0].error_code() == code::unavailable);
}

}  // namespace
}  // namespace troupe::cluster

namespace troupe::cluster {
namespace {

// What a sender's `done`s said, counted from the threads that call them.
struct dones {
  std::atomic<int> ok{0}, failed{0}, cancelled{0};
  std::function<void(const status&)> count() {
    return [this](const status& s) {
      if (s.ok()) {
        ++ok;
      } else if (s.error_code() == code::cancelled) {
        ++cancelled;
      } else {
        ++failed;
      }
    };
  }
  int all() const { return ok + failed + cancelled; }
  bool wait_all(int n) const {
    for (int i = 0; i < 500 && all() < n; ++i) std::this_thread::sleep_for(10ms);
    return all() == n;
  }
};

// A receiver whose handler stops reading at the tensor "stall" until released; every
// byte through the socket.
struct stalled_pair {
  inbox at_ps, at_worker;  // outlive the links
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::unique_ptr<troupe::cluster::testing::linked_pair> pair;

  stalled_pair() {
    link_options ps_options = options_for(k_ps);
    ps_options.shared_memory_bytes = 0;
    pair = std::make_unique<troupe::cluster::testing::linked_pair>(ps_options, k_ps, options_for(k_worker));
    auto handlers = at_ps.handlers();
    auto keep = handlers.tensor;
    handlers.tensor = [this, keep](std::string key, tensor value) {
      if (key == "stall") released.wait();
      keep(std::move(key), std::move(value));
    };
    pair->ps_link->start(handlers);
    pair->worker->start(at_worker.handlers());
  }
  ~stalled_pair() {
    try {
      release.set_value();
    } catch (const std::future_error&) {
    }
  }
};

// 32 KB tensors: far more than the socket's buffers hold (about 57 MB), within the window.
constexpr int k_filling = 1800;

TEST_CASE("an idle link's sender writes small tensors itself; what a full socket does not take, the writer finishes, in order",
          "[cluster][transport]") {
  stalled_pair p;
  auto& worker = p.pair->worker;
  dones d;
  // Idle: a small tensor goes out on this thread (one sent while a heartbeat is being
  // written goes to the writer).
  for (int i = 0; i < 20; ++i) {
    worker->send("small", counting(dtype::float32, {4}, i), d.count());
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(p.at_ps.wait_tensors(20));
  CHECK(d.wait_all(20));
  CHECK(worker->sent_inline() >= 10);
  // The receiver reads no more: the socket's buffers fill, a send leaves the rest of its
  // frame to the writer, whose wait on the socket holds back its `done` and every send
  // after it.
  worker->send("stall", counting(dtype::uint8, {16}, 0), d.count());
  for (int i = 0; i < k_filling; ++i) worker->send(std::to_string(i), counting(dtype::uint8, {32 << 10}, i), d.count());
  std::this_thread::sleep_for(300ms);
  CHECK(d.all() < 21 + k_filling);
  CHECK(worker->sent_inline() > 21);
  CHECK(worker->failure().ok());
  p.release.set_value();
  REQUIRE(p.at_ps.wait_tensors(21 + k_filling));
  for (int i = 0; i < k_filling; ++i) {
    const auto& [key, value] = p.at_ps.tensors[static_cast<std::size_t>(21 + i)];
    CHECK(key == std::to_string(i));
    CHECK(value.equals(counting(dtype::uint8, {32 << 10}, i)));
  }
  CHECK(d.wait_all(21 + k_filling));
  CHECK(d.ok == 21 + k_filling);
  CHECK(p.at_ps.failures.empty());
}

TEST_CASE("closing a link while the socket holds back a sender's frame answers every send once", "[cluster][transport]") {
  stalled_pair p;
  dones d;
  p.pair->worker->send("stall", counting(dtype::uint8, {16}, 0), d.count());
  for (int i = 0; i < k_filling; ++i) {
    p.pair->worker->send(std::to_string(i), counting(dtype::uint8, {32 << 10}, i), d.count());
  }
  std::this_thread::sleep_for(300ms);
  REQUIRE(d.all() < 1 + k_filling);
  const auto start = std::chrono::steady_clock::now();
  p.pair->worker.reset();
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  CHECK(d.wait_all(1 + k_filling));
  CHECK(d.cancelled + d.failed > 0);
  p.release.set_value();
  REQUIRE(p.at_ps.wait_failure());
  CHECK(p.at_ps.failures[0].error_code() == code::unavailable);
}

}  // namespace
}  // namespace troupe::cluster
