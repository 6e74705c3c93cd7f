// Helpers for tests of cluster/transport.h: a link listener that keeps every link it
// accepts and every refusal it reports, with waits; what one end received; tensors whose
// bytes count.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cluster/transport.h"

namespace troupe::cluster::testing {

inline const std::string k_ps = "/job:ps/replica:0/task:0";
inline const std::string k_worker = "/job:worker/replica:0/task:0";

// Link options for `task` in the tests' cluster, with short heartbeats and timeouts.
inline link_options options_for(const std::string& task) {
  link_options o;
  o.local_task = task;
  o.cluster_id = "test-cluster";
  o.heartbeat = std::chrono::milliseconds(50);
  o.peer_timeout = std::chrono::milliseconds(500);
  o.connect_timeout = std::chrono::milliseconds(1000);
  return o;
}

// A tensor of `shape` whose bytes count from `seed`.
inline tensor counting(dtype type, tensor_shape shape, int seed) {
  tensor t(type, std::move(shape));
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (std::size_t i = 0; i < t.byte_size(); ++i) bytes[i] = static_cast<unsigned char>((i * 31 + seed) & 0xff);
  if (type == dtype::bool_) {
    for (std::size_t i = 0; i < t.byte_size(); ++i) bytes[i] &= 1;
  }
  return t;
}

// What one end received, and its failure, with waits.
struct inbox {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<std::string, tensor>> tensors;
  std::vector<status> failures;

  tensor_link::handlers handlers() {
    return {[this](std::string key, tensor value) {
              std::lock_guard<std::mutex> lock(mutex);
              tensors.emplace_back(std::move(key), std::move(value));
              changed.notify_all();
            },
            [this](const status& s) {
              std::lock_guard<std::mutex> lock(mutex);
              failures.push_back(s);
              changed.notify_all();
            }};
  }
  bool wait_tensors(std::size_t n, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, limit, [&] { return tensors.size() >= n; });
  }
  bool wait_failure(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, limit, [&] { return !failures.empty(); });
  }
};

// Whether `link` shares memory with its peer within 2 s.
inline bool wait_sharing(const tensor_link& link) {
  for (int i = 0; i < 200 && !link.shares_memory(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return link.shares_memory();
}

struct link_server {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::unique_ptr<tensor_link>> links;
  std::vector<status> refusals;
  std::unique_ptr<link_listener> listener;

  explicit link_server(link_options o, int port = 0) {
    auto l = link_listener::listen(
        "127.0.0.1", port, std::move(o),
        [this](std::unique_ptr<tensor_link> accepted) {
          std::lock_guard<std::mutex> lock(mutex);
          links.push_back(std::move(accepted));
          changed.notify_all();
        },
        [this](const status& s) {
          std::lock_guard<std::mutex> lock(mutex);
          refusals.push_back(s);
          changed.notify_all();
        });
    REQUIRE(l.ok());
    listener = std::move(*l);
  }
  int port() const { return listener->port(); }
  // The first link accepted (null after 10 s without one).
  tensor_link* wait_link() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait_for(lock, std::chrono::seconds(10), [&] { return !links.empty(); });
    return links.empty() ? nullptr : links[0].get();
  }
  // The first refusal's message (empty after 10 s without one).
  std::string wait_refusal() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait_for(lock, std::chrono::seconds(10), [&] { return !refusals.empty(); });
    return refusals.empty() ? std::string() : refusals[0].message();
  }
};

// Appends `value`'s bytes (little-endian, as the wire) to `body`.
template <class T>
void put_raw(std::string& body, T value) {
  body.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// How `ps` fails the link of a peer that speaks the wire format by hand (doc/cluster.md),
// for frames no link sends: it connects on loopback, says a hello from k_worker to k_ps
// that offers no ring, begins a uint8 tensor of 1 MB and writes a frame of `kind` with
// `body`. Nothing may reach `ps`'s handler.
inline status failure_of_frame(link_server& ps, std::uint8_t kind, const std::string& body) {
  auto frame = [](std::uint8_t k, const std::string& b) {
    std::string f;
    put_raw(f, std::uint32_t{0x4c505254});  // "TRPL"
    f += static_cast<char>(k);
    f += std::string("\0\0\0", 3);
    put_raw(f, static_cast<std::uint64_t>(b.size()));
    return f + b;
  };
  auto put_string = [](std::string& b, const std::string& text) {
    put_raw(b, static_cast<std::uint32_t>(text.size()));
    b += text;
  };
  std::string hello, begin;
  put_raw(hello, k_wire_version);
  put_string(hello, k_worker);
  put_string(hello, "test-cluster");
  put_string(hello, k_ps);
  put_string(begin, "t");
  put_raw(begin, std::int32_t{4});  // uint8
  put_raw(begin, std::uint32_t{1});
  put_raw(begin, std::int64_t{1 << 20});
  put_raw(begin, std::uint64_t{1 << 20});
  put_raw(begin, std::int64_t{0});  // the sender's clock
  const std::string all = frame(1, hello) + frame(3, begin) + frame(kind, body);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(ps.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::write(fd, all.data(), all.size()) == static_cast<ssize_t>(all.size()));
  tensor_link* link = ps.wait_link();
  REQUIRE(link != nullptr);
  inbox at_ps;
  link->start(at_ps.handlers());
  REQUIRE(at_ps.wait_failure());
  CHECK(at_ps.tensors.empty());
  ::close(fd);
  return at_ps.failures[0];
}

// A child process that reads a port from `port_pipe`, connects there as k_worker, does
// `with` its link (starts it, sends) and waits to be killed or stopped. Fork it before
// this process starts threads of its own where you can.
inline pid_t start_peer_process(int port_pipe, const std::function<void(tensor_link&)>& with) {
  const pid_t child = ::fork();
  if (child != 0) return child;
  int port = 0;
  if (::read(port_pipe, &port, sizeof port) != sizeof port) ::_exit(2);
  auto link = tensor_link::connect("127.0.0.1", port, k_ps, options_for(k_worker));
  if (!link.ok()) ::_exit(3);
  with(**link);
  for (;;) ::pause();
}

// A server for task `ps` and a link to it from `worker` (both not yet started).
struct linked_pair {
  link_server ps;
  std::unique_ptr<tensor_link> worker;
  tensor_link* ps_link = nullptr;

  linked_pair(link_options ps_options, const std::string& ps_task, link_options worker_options)
      : ps(std::move(ps_options)) {
    auto w = tensor_link::connect("127.0.0.1", ps.port(), ps_task, std::move(worker_options));
    REQUIRE(w.ok());
    worker = std::move(*w);
    ps_link = ps.wait_link();
    REQUIRE(ps_link != nullptr);
  }
};

}  // namespace troupe::cluster::testing
