// Tensor links over mutual TLS (cluster/transport.h, link_tls) with certificates made as
// `troupe cert init` makes them: a run over TLS, and every refusal issue 16 names (no
// certificate, another CA's, another task's, plain TCP to a TLS port and the reverse, bad
// files at start), each reported at both ends.
#include "tests/temp_dir.h"
#include "cluster/certificates.h"
#include "cluster/cluster_file.h"
#include "cluster/transport.h"
#include "tests/cluster/link_server.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace troupe::cluster {
namespace {

using namespace std::chrono_literals;
using server = troupe::cluster::testing::link_server;
using troupe::testing::temp_dir;

const std::string k_ps = "/job:ps/replica:0/task:0";
const std::string k_worker = "/job:worker/replica:0/task:0";

const char* k_cluster = R"(job { name: "ps" tasks { key: 0 value: "localhost:2222" } }
job { name: "worker" tasks { key: 0 value: "localhost:2223" } tasks { key: 1 value: "localhost:2224" } })";

// A CA and every task's certificate in `dir`.
void make_certificates(const std::string& dir) {
  auto cluster = cluster_file::parse(k_cluster, dir + ".pbtxt");
  REQUIRE(cluster.ok());
  REQUIRE(make_test_certificates(*cluster, dir).ok());
}

link_tls tls_of(const std::string& dir, const std::string& file_stem) {
  return {dir + "/ca.pem", dir + "/" + file_stem + ".pem", dir + "/" + file_stem + ".key"};
}

link_options options_for(const std::string& task, std::optional<link_tls> tls) {
  link_options o;
  o.local_task = task;
  o.cluster_id = "tls-cluster";
  o.heartbeat = 50ms;
  o.peer_timeout = 500ms;
  o.connect_timeout = 2000ms;
  o.tls = std::move(tls);
  return o;
}


tensor counting(std::int64_t n, int seed) {
  tensor t(dtype::uint8, {n});
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (std::int64_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>((i * 13 + seed) & 0xff);
  return t;
}

TEST_CASE("a link over mutual TLS carries tensors both ways", "[cluster][transport][tls]") {
  temp_dir dir;
  make_certificates(dir.path);
  server ps(options_for(k_ps, tls_of(dir.path, "ps-0")));
  auto worker = tensor_link::connect("127.0.0.1", ps.listener->port(), k_ps,
                                     options_for(k_worker, tls_of(dir.path, "worker-0")));
  REQUIRE(worker.ok());
  tensor_link* ps_link = ps.wait_link();
  REQUIRE(ps_link != nullptr);
  CHECK(ps_link->peer() == k_worker);
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<tensor> at_ps, at_worker;
  auto collect = [&](std::vector<tensor>& into) {
    return tensor_link::handlers{[&, into_ptr = &into](std::string, tensor t) {
                                   std::lock_guard<std::mutex> lock(mutex);
                                   into_ptr->push_back(std::move(t));
                                   changed.notify_all();
                                 },
                                 [](const status&) {}};
  };
  ps_link->start(collect(at_ps));
  (*worker)->start(collect(at_worker));
  const tensor big = counting(9 << 20, 1), small = counting(5, 2);
  (*worker)->send("big", big, nullptr);
  (*worker)->send("small", small, nullptr);
  ps_link->send("back", big, nullptr);
  std::unique_lock<std::mutex> lock(mutex);
  REQUIRE(changed.wait_for(lock, 20s, [&] { return at_ps.size() == 2 && at_worker.size() == 1; }));
  CHECK(at_ps[0].equals(big));
  CHECK(at_ps[1].equals(small));
  CHECK(at_worker[0].equals(big));
}

TEST_CASE("TLS refuses peers without the cluster's certificate for their task, at both ends",
          "[cluster][transport][tls]") {
  temp_dir dir, other;
  make_certificates(dir.path);
  make_certificates(other.path);
  server ps(options_for(k_ps, tls_of(dir.path, "ps-0")));
  const int port = ps.listener->port();
  SECTION("no certificate: plain TCP to a TLS port") {
    auto link = tensor_link::connect("127.0.0.1", port, k_ps, options_for(k_worker, std::nullopt));
    REQUIRE_FALSE(link.ok());
    CHECK(link.error().error_code() == code::unavailable);
    CHECK(ps.wait_refusal().find("TLS handshake") != std::string::npos);
  }
  SECTION("a certificate of another CA") {
    auto link = tensor_link::connect("127.0.0.1", port, k_ps, options_for(k_worker, tls_of(other.path, "worker-0")));
    REQUIRE_FALSE(link.ok());
    CHECK(link.error().message().find("TLS handshake") != std::string::npos);
    CHECK(ps.wait_refusal().find("TLS handshake") != std::string::npos);
  }
  SECTION("another task's certificate") {
    auto link = tensor_link::connect("127.0.0.1", port, k_ps, options_for(k_worker, tls_of(dir.path, "worker-1")));
    REQUIRE_FALSE(link.ok());
    const std::string refusal = ps.wait_refusal();
    CHECK(refusal.find("presented a certificate naming '/job:worker/replica:0/task:1'") != std::string::npos);
    CHECK(link.error().message().find("/job:worker/replica:0/task:1") != std::string::npos);
  }
  SECTION("a server with another task's certificate") {
    server impostor(options_for(k_ps, tls_of(dir.path, "worker-1")));
    auto link = tensor_link::connect("127.0.0.1", impostor.listener->port(), k_ps,
                                     options_for(k_worker, tls_of(dir.path, "worker-0")));
    REQUIRE_FALSE(link.ok());
    CHECK(link.error().message().find("names '/job:worker/replica:0/task:1', not " + k_ps) != std::string::npos);
  }
  SECTION("TLS to a plain port") {
    server plain(options_for(k_ps, std::nullopt));
    auto link = tensor_link::connect("127.0.0.1", plain.listener->port(), k_ps,
                                     options_for(k_worker, tls_of(dir.path, "worker-0")));
    REQUIRE_FALSE(link.ok());
    CHECK(link.error().message().find("TLS handshake") != std::string::npos);
    CHECK(plain.wait_refusal().find("not a troupe link frame") != std::string::npos);
  }
  // The listener still serves a good peer afterwards.
  auto good = tensor_link::connect("127.0.0.1", port, k_ps, options_for(k_worker, tls_of(dir.path, "worker-0")));
  CHECK(good.ok());
}

TEST_CASE("bad TLS files are errors naming the file before anything listens or connects", "[cluster][transport][tls]") {
  temp_dir dir;
  make_certificates(dir.path);
  link_tls missing_key = tls_of(dir.path, "ps-0");
  missing_key.key = dir.path + "/nope.key";
  auto l = link_listener::listen("127.0.0.1", 0, options_for(k_ps, missing_key), [](auto) {});
  REQUIRE_FALSE(l.ok());
  CHECK(l.error().error_code() == code::invalid_argument);
  CHECK(l.error().message().find("nope.key") != std::string::npos);
  link_tls wrong_key = tls_of(dir.path, "worker-0");
  wrong_key.key = dir.path + "/ps-0.key";
  auto c = tensor_link::connect("127.0.0.1", 1, k_ps, options_for(k_worker, wrong_key));
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().message().find("is not the key of the certificate") != std::string::npos);
  link_tls no_ca = tls_of(dir.path, "worker-0");
  no_ca.ca_certificate = dir.path + "/missing-ca.pem";
  auto n = tensor_link::connect("127.0.0.1", 1, k_ps, options_for(k_worker, no_ca));
  REQUIRE_FALSE(n.ok());
  CHECK(n.error().message().find("missing-ca.pem") != std::string::npos);
}

}  // namespace
}  // namespace troupe::cluster
