// Tensor links between two processes (cluster/transport.h) against raw loopback TCP,
// measured in the same run (issue 16's targets: >= 60% of raw TCP for 1, 16 and 64 MB
// tensors; a small message beside a 64 MB stream waits <= 10 ms; a sender's memory with
// 100 x 64 MB sends to a slow receiver bounded by the window).
//
//   build/bench/bench_transport [--megabytes=1024] [--rounds=3] [--slow_sends=100]
//
// A child process receives (forked first, before any thread): a plain socket that reads
// each message into one buffer of its size, and a link listener that drops data tensors,
// answers "ping" with "pong" and "end" with "ended", and takes 20 ms over each "slow"
// tensor. The parent sends `--megabytes` per size each way: raw (write(2) of one buffer
// again and again, then a one-byte answer) and through a link (send() of one tensor again
// and again, then "end" and its answer), through a link that takes no shared memory (every
// byte through the socket), also over mutual TLS (certificates made as
// `troupe cert init` makes them). Each round measures everything once, side by
// side; figures are medians. Prints one JSON object.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/certificates.h"
#include "cluster/cluster_file.h"
#include "cluster/transport.h"

namespace troupe::bench {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using cluster::link_listener;
using cluster::link_options;
using cluster::tensor_link;

const std::string k_receiver = "/job:ps/replica:0/task:0";
const std::string k_sender = "/job:worker/replica:0/task:0";

double seconds_since(clock_type::time_point start) { return std::chrono::duration<double>(clock_type::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Certificates as `troupe cert init` makes them, for the links over mutual TLS.
std::string g_certificates;

link_options options_for(const std::string& task, bool tls = false) {
  link_options o;
  o.local_task = task;
  o.cluster_id = "bench";
  if (tls) {
    const std::string stem = task == k_receiver ? "ps-0" : "worker-0";
    o.tls = cluster::link_tls{g_certificates + "/ca.pem", g_certificates + "/" + stem + ".pem",
                              g_certificates + "/" + stem + ".key"};
  }
  return o;
}

bool read_all(int fd, void* to, std::size_t bytes) {
  auto* p = static_cast<char*>(to);
  while (bytes > 0) {
    const ssize_t n = ::read(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

bool write_all(int fd, const void* from, std::size_t bytes) {
  const auto* p = static_cast<const char*>(from);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

// The raw receiver: per connection, (size, count) then count messages of size read into
// one buffer, then a byte back.
void raw_server(int listen_fd) {
  for (;;) {
    const int fd = ::accept(listen_fd, nullptr, nullptr);
    if (fd < 0) return;
    std::uint64_t size = 0, count = 0;
    if (read_all(fd, &size, 8) && read_all(fd, &count, 8)) {
      std::vector<char> buffer(size, 1);
      bool ok = true;
      for (std::uint64_t i = 0; ok && i < count; ++i) ok = read_all(fd, buffer.data(), size);
      const char done = 1;
      if (ok) write_all(fd, &done, 1);
    }
    ::close(fd);
  }
}

[[noreturn]] void receiver(int port_pipe) {
  const int raw = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(raw, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(raw, 8) != 0) ::_exit(2);
  socklen_t length = sizeof a;
  ::getsockname(raw, reinterpret_cast<sockaddr*>(&a), &length);
  const int raw_port = ntohs(a.sin_port);
  std::mutex mutex;
  std::vector<std::unique_ptr<tensor_link>> links;
  auto serve = [&](std::unique_ptr<tensor_link> l) {
    tensor_link* link = l.get();
    link->start({[link](std::string key, tensor value) {
                   if (key == "ping") link->send("pong", std::move(value), nullptr);
                   if (key == "end") link->send("ended", std::move(value), nullptr);
                   if (key.rfind("slow", 0) == 0) std::this_thread::sleep_for(20ms);
                 },
                 [](const status&) {}});
    std::lock_guard<std::mutex> lock(mutex);
    links.push_back(std::move(l));
  };
  auto listener = link_listener::listen("127.0.0.1", 0, options_for(k_receiver), serve);
  auto tls_listener = link_listener::listen("127.0.0.1", 0, options_for(k_receiver, true), serve);
  if (!listener.ok() || !tls_listener.ok()) ::_exit(3);
  const int ports[3] = {raw_port, (*listener)->port(), (*tls_listener)->port()};
  if (::write(port_pipe, ports, sizeof ports) != sizeof ports) ::_exit(4);
  raw_server(raw);
  ::_exit(0);
}

// One end's received tensors by key, with waits.
struct replies {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> keys;
  tensor_link::handlers handlers() {
    return {[this](std::string key, tensor) {
              std::lock_guard<std::mutex> lock(mutex);
              keys.push_back(std::move(key));
              changed.notify_all();
            },
            [](const status& s) { std::cerr << "bench_transport: link failed: " << s << "\n"; }};
  }
  bool wait(std::size_t n) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, 120s, [&] { return keys.size() >= n; });
  }
};

double raw_seconds(int port, std::uint64_t size, std::uint64_t count) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  std::vector<char> buffer(size, 7);
  const auto start = clock_type::now();
  write_all(fd, &size, 8);
  write_all(fd, &count, 8);
  for (std::uint64_t i = 0; i < count; ++i) write_all(fd, buffer.data(), size);
  char done = 0;
  const bool ok = read_all(fd, &done, 1);
  const double s = seconds_since(start);
  ::close(fd);
  return ok ? s : -1;
}

double link_seconds(tensor_link& link, replies& back, std::uint64_t size, std::uint64_t count) {
  tensor value(dtype::uint8, {static_cast<std::int64_t>(size)});
  std::memset(value.raw_data(), 7, size);
  const std::size_t before = back.keys.size();
  const auto start = clock_type::now();
  for (std::uint64_t i = 0; i < count; ++i) link.send("data", value, nullptr);
  link.send("end", tensor(dtype::uint8, {1}), nullptr);
  if (!back.wait(before + 1)) return -1;
  return seconds_since(start);
}

std::int64_t rss_kb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

int run(std::int64_t megabytes, int rounds, int slow_sends) {
  // Certificates first (the receiver is forked before any thread starts).
  g_certificates = (std::filesystem::temp_directory_path() / ("troupe_bench_transport_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(g_certificates);
  {
    auto cluster = cluster::cluster_file::parse(
        "job { name: \"ps\" tasks { key: 0 value: \"localhost:1\" } }\n"
        "job { name: \"worker\" tasks { key: 0 value: \"localhost:2\" } }",
        g_certificates + ".pbtxt");
    if (!cluster.ok() || !cluster::make_test_certificates(*cluster, g_certificates).ok()) {
      std::cerr << "bench_transport: cannot make certificates in " << g_certificates << "\n";
      return 1;
    }
  }
  struct remover {
    ~remover() { std::filesystem::remove_all(g_certificates); }
  } remove_certificates;
  int pipe_ends[2];
  if (::pipe(pipe_ends) != 0) return 1;
  const pid_t child = ::fork();
  if (child == 0) receiver(pipe_ends[1]);
  int ports[3] = {};
  if (::read(pipe_ends[0], ports, sizeof ports) != sizeof ports) {
    std::cerr << "bench_transport: the receiving process did not start\n";
    return 1;
  }
  struct reaper {
    pid_t child;
    ~reaper() {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
  } reap{child};

  replies back, control_back;
  auto data = tensor_link::connect("127.0.0.1", ports[1], k_receiver, options_for(k_sender));
  auto control = tensor_link::connect("127.0.0.1", ports[1], k_receiver, options_for(k_sender));
  if (!data.ok() || !control.ok()) {
    std::cerr << "bench_transport: " << (data.ok() ? control.error() : data.error()) << "\n";
    return 1;
  }
  (*data)->start(back.handlers());
  (*control)->start(control_back.handlers());
  replies tls_back;
  auto tls = tensor_link::connect("127.0.0.1", ports[2], k_receiver, options_for(k_sender, true));
  if (!tls.ok()) {
    std::cerr << "bench_transport: " << tls.error() << "\n";
    return 1;
  }
  (*tls)->start(tls_back.handlers());
  // A plain link that takes no shared memory: every byte through the socket.
  replies socket_back;
  link_options socket_only = options_for(k_sender);
  socket_only.shared_memory_bytes = 0;
  auto socket = tensor_link::connect("127.0.0.1", ports[1], k_receiver, socket_only);
  if (!socket.ok()) {
    std::cerr << "bench_transport: " << socket.error() << "\n";
    return 1;
  }
  (*socket)->start(socket_back.handlers());

  const std::vector<std::uint64_t> sizes{1, 16, 64};
  std::string json = "{";
  for (std::uint64_t mb : sizes) {
    const std::uint64_t size = mb << 20;
    const std::uint64_t count = std::max<std::uint64_t>(4, static_cast<std::uint64_t>(megabytes) / mb);
    std::vector<double> raw, link, socket_link, tls_link;
    for (int r = 0; r < rounds; ++r) {
      raw.push_back(raw_seconds(ports[0], size, count));
      link.push_back(link_seconds(**data, back, size, count));
      socket_link.push_back(link_seconds(**socket, socket_back, size, count));
      tls_link.push_back(link_seconds(**tls, tls_back, size, count));
    }
    const double total_mb = static_cast<double>(count * mb);
    const auto m = static_cast<unsigned long long>(mb);
    char figures[768];
    std::snprintf(figures, sizeof figures,
                  "\"raw_%llu_mb_gb_s\": %.2f, \"link_%llu_mb_gb_s\": %.2f, \"link_over_raw_%llu_mb\": %.2f, "
                  "\"socket_link_%llu_mb_gb_s\": %.2f, \"socket_link_over_raw_%llu_mb\": %.2f, "
                  "\"tls_link_%llu_mb_gb_s\": %.2f, \"tls_link_over_raw_%llu_mb\": %.2f, ",
                  m, total_mb / 1024 / median(raw), m, total_mb / 1024 / median(link), m, median(raw) / median(link), m,
                  total_mb / 1024 / median(socket_link), m, median(raw) / median(socket_link), m,
                  total_mb / 1024 / median(tls_link), m, median(raw) / median(tls_link));
    json += figures;
    std::fprintf(stderr, "%llu MB x %llu: raw %s s, link %s s (per round)\n", static_cast<unsigned long long>(mb),
                 static_cast<unsigned long long>(count), [&] {
                   std::string s;
                   for (double x : raw) s += std::to_string(x).substr(0, 5) + " ";
                   return s;
                 }().c_str(),
                 [&] {
                   std::string s;
                   for (double x : link) s += std::to_string(x).substr(0, 5) + " ";
                   return s;
                 }().c_str());
  }

  // A small message on its own link while 64 MB tensors stream on another.
  {
    std::atomic<bool> streaming{true};
    tensor big(dtype::uint8, {64 << 20});
    std::memset(big.raw_data(), 7, big.byte_size());
    std::thread stream([&] {
      while (streaming) {
        std::promise<void> written;
        (*data)->send("data", big, [&](const status&) { written.set_value(); });
        written.get_future().wait();
      }
    });
    std::this_thread::sleep_for(200ms);
    std::vector<double> waits;
    for (int i = 0; i < 200; ++i) {
      const auto start = clock_type::now();
      (*control)->send("ping", tensor::scalar<std::int64_t>(i), nullptr);
      if (!control_back.wait(static_cast<std::size_t>(i + 1))) break;
      waits.push_back(seconds_since(start) * 1e3);
      std::this_thread::sleep_for(2ms);
    }
    streaming = false;
    stream.join();
    std::sort(waits.begin(), waits.end());
    char figures[200];
    std::snprintf(figures, sizeof figures, "\"ping_beside_64_mb_p50_ms\": %.3f, \"ping_beside_64_mb_max_ms\": %.3f, ",
                  waits.empty() ? -1.0 : waits[waits.size() / 2], waits.empty() ? -1.0 : waits.back());
    json += figures;
  }

  // `slow_sends` (100) x 64 MB to a slow receiver (20 ms a tensor), each a fresh tensor,
  // the producer waiting for each send's `done` as a _Send kernel does: the memory the
  // sender holds.
  {
    const std::int64_t before = rss_kb();
    std::int64_t most_out = 0, most_rss = before;
    const auto start = clock_type::now();
    for (int i = 0; i < slow_sends; ++i) {
      tensor fresh(dtype::uint8, {64 << 20});
      std::memset(fresh.raw_data(), static_cast<int>(i), fresh.byte_size());
      std::promise<void> written;
      (*data)->send("slow", std::move(fresh), [&](const status&) { written.set_value(); });
      written.get_future().wait();
      most_out = std::max(most_out, (*data)->unacknowledged_bytes() + (*data)->queued_bytes());
      most_rss = std::max(most_rss, rss_kb());
    }
    const std::size_t ended = back.keys.size();
    (*data)->send("end", tensor(dtype::uint8, {1}), nullptr);
    back.wait(ended + 1);
    char figures[300];
    std::snprintf(figures, sizeof figures,
                  "\"slow_sends\": %d, \"slow_sends_s\": %.2f, \"slow_most_unacknowledged_mb\": %.0f, \"window_mb\": %.0f, "
                  "\"slow_most_rss_growth_mb\": %.0f",
                  slow_sends, seconds_since(start), static_cast<double>(most_out) / (1 << 20),
                  static_cast<double>(options_for(k_sender).window_bytes) / (1 << 20),
                  static_cast<double>(most_rss - before) / 1024);
    json += figures;
  }
  std::printf("%s, \"megabytes\": %lld, \"rounds\": %d}\n", json.c_str(), static_cast<long long>(megabytes), rounds);
  return 0;
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) {
  long long megabytes = 1024;
  int rounds = 3;
  int slow_sends = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--megabytes=", 0) == 0) {
      megabytes = std::atoll(arg.c_str() + 12);
    } else if (arg.rfind("--rounds=", 0) == 0) {
      rounds = std::atoi(arg.c_str() + 9);
    } else if (arg.rfind("--slow_sends=", 0) == 0) {
      slow_sends = std::atoi(arg.c_str() + 13);
    } else {
      std::fprintf(stderr, "usage: bench_transport [--megabytes=1024] [--rounds=3] [--slow_sends=100]  (unknown '%s')\n", arg.c_str());
      return 2;
    }
  }
  if (megabytes < 1 || rounds < 1 || slow_sends < 1) {
    std::fprintf(stderr, "bench_transport: --megabytes, --rounds and --slow_sends must be at least 1\n");
    return 2;
  }
  return troupe::bench::run(megabytes, rounds, slow_sends);
}
