// A link listener for tests of cluster/transport.h: keeps every link it accepts and every
// refusal it reports, with waits.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/transport.h"

namespace troupe::cluster::testing {

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
