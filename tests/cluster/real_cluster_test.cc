// One process of a real cluster (cluster/real_cluster.h): the cluster's identity, step-id
// ranges of separate processes, and what process_cluster and task_server refuse. Running
// servers is tested as processes: tests/tools/real_cluster_test.sh and
// tests/cluster/remote_task_test.cc.
#include "cluster/real_cluster.h"

#include "cluster/remote_task.h"
#include "cluster/transport.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <thread>

namespace troupe::cluster {
namespace {

cluster_file parse(const std::string& text) {
  auto file = cluster_file::parse(text, "/tmp/cluster.pbtxt");
  REQUIRE(file.ok());
  return std::move(*file);
}

const char* k_two = R"(job { name: "ps" tasks { key: 0 value: "localhost:2222" } }
job { name: "worker" tasks { key: 0 value: "localhost:2223" } })";

TEST_CASE("a cluster's identity is its tasks and addresses", "[cluster][real]") {
  const std::string id = cluster_id_of(parse(k_two));
  CHECK(id.size() == 8);
  CHECK(cluster_id_of(parse(k_two)) == id);
  CHECK(cluster_id_of(parse(R"(job { name: "worker" tasks { key: 0 value: "localhost:2223" } }
job { name: "ps" tasks { key: 0 value: "localhost:2222" } })")) == id);  // the order of jobs does not matter
  CHECK(cluster_id_of(parse(R"(job { name: "ps" tasks { key: 0 value: "localhost:2224" } }
job { name: "worker" tasks { key: 0 value: "localhost:2223" } })")) != id);
}

TEST_CASE("processes of one cluster hand out disjoint step ids", "[cluster][real]") {
  std::set<std::uint32_t> incarnations;
  for (int i = 0; i < 20; ++i) {
    const std::uint32_t incarnation = new_incarnation();
    CHECK(incarnation > 0);
    CHECK(incarnation < (1u << 23));
    incarnations.insert(incarnation);
  }
  CHECK(incarnations.size() >= 19);  // random: a repeat among 20 of 8 million is rare
  CHECK(first_step_id_of_incarnation(1) == (std::int64_t{1} << 40));
  CHECK(first_step_id_of_incarnation((1u << 23) - 1) > 0);
  auto a = process_cluster(parse(k_two), {}, "/job:client/replica:0/task:0");
  auto b = process_cluster(parse(k_two), {}, "/job:client/replica:0/task:1");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::int64_t first_a = (*a)->next_step_id(), first_b = (*b)->next_step_id();
  CHECK(first_a >= (std::int64_t{1} << 40));
  CHECK(first_b >= (std::int64_t{1} << 40));
  CHECK((first_a >> 40) != (first_b >> 40));
  CHECK((*a)->next_step_id() == first_a + 1);
  CHECK_FALSE((*a)->hosts("/job:ps/task:0"));
}

TEST_CASE("what a process of a real cluster refuses", "[cluster][real]") {
  const cluster_file tls = parse(std::string(k_two) + R"(
tls { ca_certificate: "ca.pem"
      task { job: "ps" index: 0 certificate: "ps.pem" key: "ps.key" }
      task { job: "worker" index: 0 certificate: "w.pem" key: "w.key" } })");
  auto refused = process_cluster(tls, {}, "/job:client/replica:0/task:0");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().error_code() == code::failed_precondition);
  CHECK(refused.error().message().find("TLS") != std::string::npos);
  auto not_there = process_cluster(parse(k_two), {"/job:ps/task:5"}, "/job:ps/replica:0/task:5");
  REQUIRE_FALSE(not_there.ok());
  CHECK(not_there.error().message().find("/job:ps/task:5") != std::string::npos);
  auto far = task_server::start(parse(R"(job { name: "ps" tasks { key: 0 value: "10.1.2.3:2222" } })"), "ps", 0, {});
  REQUIRE_FALSE(far.ok());
  CHECK(far.error().message().find("--listen-all") != std::string::npos);
  auto missing = task_server::start(parse(k_two), "ps", 4, {});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().error_code() == code::not_found);
}

// Waits up to 10 s for `done`.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 1000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

TEST_CASE("a transfer hub hands tensors to the devices it hosts, refuses others, keeps only live links",
          "[cluster][real]") {
  actors::cluster_options o;
  auto spec = placement::cluster_spec::from_task_counts({{"ps", 1}});
  REQUIRE(spec.ok());
  o.spec = *spec;
  auto c = actors::cluster::create(o);
  REQUIRE(c.ok());
  link_options hub_options;
  hub_options.local_task = "/job:ps/replica:0/task:0";
  hub_options.cluster_id = "hub-test";
  auto hub = transfer_hub::start(**c, "127.0.0.1", hub_options);
  REQUIRE(hub.ok());
  link_options client;
  client.local_task = "/job:worker/replica:0/task:0";
  client.cluster_id = "hub-test";
  const char sep = '\x1f';
  const std::string good = str_cat(7, sep, "/job:worker/replica:0/task:0/device:CPU:0", sep, 0, sep,
                                   "/job:ps/replica:0/task:0/device:CPU:0", sep, "a:0");
  const std::string elsewhere = str_cat(7, sep, "/job:worker/replica:0/task:0/device:CPU:0", sep, 0, sep,
                                        "/job:ps/replica:0/task:1/device:CPU:0", sep, "a:0");
  for (int i = 0; i < 3; ++i) {
    auto link = tensor_link::connect("127.0.0.1", (*hub)->port(), hub_options.local_task, client);
    REQUIRE(link.ok());
    (*link)->start({[](std::string, tensor) {}, [](const status&) {}});
    (*link)->send(good, tensor::scalar(1.0f), nullptr);
    (*link)->send(elsewhere, tensor::scalar(2.0f), nullptr);
    (*link)->send("not a transfer key", tensor::scalar(3.0f), nullptr);
    REQUIRE(eventually([&] { return (*hub)->delivered() == i + 1 && (*hub)->refused() == 2 * (i + 1); }));
  }  // each link closed (its goodbye reaches the hub within microseconds)
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A new link drops the three closed ones.
  auto last = tensor_link::connect("127.0.0.1", (*hub)->port(), hub_options.local_task, client);
  REQUIRE(last.ok());
  CHECK(eventually([&] { return (*hub)->links() == 1; }));
}

}  // namespace
}  // namespace troupe::cluster
