// One process of a real cluster (cluster/real_cluster.h): the cluster's identity, step-id
// ranges of separate processes, and what process_cluster and task_server refuse. Running
// servers is tested as processes: tests/tools/real_cluster_test.sh and
// tests/cluster/remote_task_test.cc.
#include "cluster/real_cluster.h"

#include "actors/session.h"
#include "cluster/certificates.h"
#include "cluster/remote_task.h"
#include "cluster/task_processes.h"
#include "cluster/transport.h"
#include "core/file.h"
#include "graph/ops.h"
#include "tests/cluster/cluster_fixture.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
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
  // Over TLS a client needs client credentials, and a task its own, readable at start.
  auto refused = process_cluster(tls, {}, "/job:client/replica:0/task:0");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().error_code() == code::failed_precondition);
  CHECK(refused.error().message().find("no client credentials") != std::string::npos);
  auto unreadable = task_server::start(tls, "ps", 0, {});
  REQUIRE_FALSE(unreadable.ok());
  CHECK(unreadable.error().message().find("/tmp/ca.pem") != std::string::npos);
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

TEST_CASE("a transfer hub hands tensors to the devices it hosts, refuses others and other lives', keeps only live links",
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
  const std::string ps = "/job:ps/replica:0/task:0/device:CPU:0";
  // The PS's life: what the keys of tensors for it must name.
  const std::uint64_t life = (*c)->directory()->incarnation(ps);
  REQUIRE(life == actors::task_incarnation(0, "/job:ps/replica:0/task:0", 0));
  auto key = [&](std::int64_t step, const std::string& device, std::uint64_t incarnation) {
    return str_cat(step, sep, "/job:worker/replica:0/task:0/device:CPU:0", sep, 5, sep, device, sep, incarnation, sep, "a:0");
  };
  for (int i = 0; i < 3; ++i) {
    // Steps 7, 8, 9 for the good keys; a tensor of another life aborts its step here (this
    // life never runs it), so those go under other steps.
    const std::string good = key(7 + i, ps, life);
    const std::string elsewhere = key(7 + i, "/job:ps/replica:0/task:1/device:CPU:0", life);
    const std::string earlier_life = key(100 + i, ps, life + 1);
    const std::string unknown_life = key(200 + i, ps, 0);
    auto link = tensor_link::connect("127.0.0.1", (*hub)->port(), hub_options.local_task, client);
    REQUIRE(link.ok());
    (*link)->start({[](std::string, tensor) {}, [](const status&) {}});
    (*link)->send(earlier_life, tensor::scalar(4.0f), nullptr);
    (*link)->send(good, tensor::scalar(1.0f), nullptr);
    (*link)->send(elsewhere, tensor::scalar(2.0f), nullptr);
    (*link)->send("not a transfer key", tensor::scalar(3.0f), nullptr);
    (*link)->send(unknown_life, tensor::scalar(5.0f), nullptr);
    REQUIRE(eventually([&] {
      return (*hub)->delivered() == i + 1 && (*hub)->refused() == 2 * (i + 1) && (*hub)->stale() == 2 * (i + 1);
    }));
  }  // each link closed (its goodbye reaches the hub within microseconds)
  // Only the good ones wait in the PS's rendezvous (one each for steps 7, 8, 9).
  auto stats = (*c)->stats(ps);
  REQUIRE(stats.ok());
  CHECK(stats->rendezvous_entries == 3);
  {
    // The reader puts tensors into the rendezvous itself: a second one for step 7's
    // transfer is refused there, and the step aborts on the device (its first tensor
    // dropped, later ones for it too).
    auto again = tensor_link::connect("127.0.0.1", (*hub)->port(), hub_options.local_task, client);
    REQUIRE(again.ok());
    (*again)->start({[](std::string, tensor) {}, [](const status&) {}});
    (*again)->send(key(7, ps, life), tensor::scalar(6.0f), nullptr);
    CHECK(eventually([&] {
      auto now = (*c)->stats(ps);
      return now.ok() && now->rendezvous_entries == 2;
    }));
    (*again)->send(key(7, ps, life), tensor::scalar(7.0f), nullptr);
    REQUIRE(eventually([&] { return (*hub)->delivered() == 5; }));
    auto after = (*c)->stats(ps);
    REQUIRE(after.ok());
    CHECK(after->rendezvous_entries == 2);
    CHECK(after->rendezvous_bytes == 2 * static_cast<std::int64_t>(sizeof(float)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A new link drops the three closed ones.
  auto last = tensor_link::connect("127.0.0.1", (*hub)->port(), hub_options.local_task, client);
  REQUIRE(last.ok());
  CHECK(eventually([&] { return (*hub)->links() == 1; }));
}

// A PS and a worker with TLS certificates from `troupe cert init` (in `dir`), at free ports.
testing::loopback_cluster make_tls_cluster(const std::string& name) {
  return testing::make_loopback_cluster(name, {{"ps", 1}, {"worker", 1}}, /*tls=*/true);
}

// y = 2a + x on the worker from a on the PS, and back = -y on the PS: tensors both ways.
result<std::vector<tensor>> run_across(const std::shared_ptr<actors::cluster>& c) {
  auto root = graph::scope::new_root();
  auto on_ps = root.with_device("/job:ps/task:0"), on_worker = root.with_device("/job:worker/task:0");
  auto a = ops::constant(on_ps.with_name("a"), tensor::from_vector<float>({1, 2, 3}, {3}));
  auto x = ops::placeholder(on_worker.with_name("x"), dtype::float32);
  auto y = ops::add(on_worker.with_name("y"),
                    ops::mul(on_worker.with_name("twice"), a, ops::constant(on_worker.with_name("two"), tensor::scalar(2.0f))), x);
  ops::neg(on_ps.with_name("back"), y);
  auto g = root.to_graph();
  if (!g.ok()) return g.error();
  actors::session_options o;
  o.cluster = c;
  auto s = actors::session::create(std::move(*g), o);
  if (!s.ok()) return s.error();
  return (*s)->run({{"x", tensor::from_vector<float>({10, 20, 30}, {3})}}, {"y", "back"});
}

TEST_CASE("a restarted task never takes a tensor sent for its earlier life", "[cluster][real]") {
  auto t = testing::make_loopback_cluster("troupe-incarnations", {{"ps", 1}, {"worker", 1}});
  auto ps = task_server::start(t.file, "ps", 0, {});
  REQUIRE(ps.ok());
  auto worker = task_server::start(t.file, "worker", 0, {});
  REQUIRE(worker.ok());
  const std::string ps_device = "/job:ps/replica:0/task:0/device:CPU:0";
  const std::uint64_t first_life = (*ps)->cluster().directory()->incarnation(ps_device);
  auto client = process_cluster(t.file, {}, "test client");
  REQUIRE(client.ok());
  REQUIRE(run_across(*client).ok());
  // The worker's tensor for the PS (y) now reaches its link 2 s after its _Send; the PS
  // process is replaced meanwhile (once the step has surely sent it), at the same address.
  REQUIRE((*client)->set_link_fault("/job:worker/task:0", "/job:ps/task:0", {std::chrono::milliseconds(2000), 0, 1}).ok());
  auto doomed = std::async(std::launch::async, [&] { return run_across(*client); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ps->reset();
  auto next = task_server::start(t.file, "ps", 0, {});
  REQUIRE(next.ok());
  CHECK((*next)->cluster().directory()->incarnation(ps_device) != first_life);
  // A new client runs the step on the new PS at once (its partitions tell the worker the
  // new PS's tensor port, where the delayed tensor of the dead step then goes too; the
  // dead step ends only once that tensor is out).
  auto again = process_cluster(t.file, {}, "second client");
  REQUIRE(again.ok());
  auto out = run_across(*again);
  REQUIRE(out.ok());
  CHECK(out->at(1).flat<float>()[0] == -12.0f);
  const auto died = doomed.get();
  REQUIRE_FALSE(died.ok());
  CHECK(died.error().error_code() == code::unavailable);
  // The dead step's tensor reached the new PS and was dropped there, not kept.
  CHECK(eventually([&] { return (*next)->hub().stale() >= 1; }));
  auto stats = (*next)->cluster().stats(ps_device);
  REQUIRE(stats.ok());
  CHECK(stats->rendezvous_entries == 0);
  std::filesystem::remove_all(t.dir);
}

TEST_CASE("a TLS cluster: steps across its servers, each end proving who it is; strangers refused", "[cluster][real][tls]") {
  auto t = make_tls_cluster("troupe-tls-cluster");
  auto ps = task_server::start(t.file, "ps", 0, {});
  REQUIRE(ps.ok());
  auto worker = task_server::start(t.file, "worker", 0, {});
  REQUIRE(worker.ok());

  SECTION("a client with the cluster's client credentials runs steps (tensors both ways between the servers)") {
    auto client = process_cluster(t.file, {}, "test client");
    REQUIRE(client.ok());
    for (int i = 0; i < 3; ++i) {
      auto out = run_across(*client);
      REQUIRE(out.ok());
      CHECK(out->at(0).flat<float>()[2] == 36.0f);
      CHECK(out->at(1).flat<float>()[0] == -12.0f);
    }
  }
  SECTION("a plain client at a TLS port is refused") {
    const cluster_file plain = parse(str_cat("job { name: \"ps\" tasks { key: 0 value: \"127.0.0.1:", t.file.tasks()[0].port,
                                             "\" } }\njob { name: \"worker\" tasks { key: 0 value: \"127.0.0.1:",
                                             t.file.tasks()[1].port, "\" } }\n"));
    auto client = process_cluster(plain, {}, "plain client");
    REQUIRE(client.ok());
    const auto started = std::chrono::steady_clock::now();
    auto out = run_across(*client);
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().error_code() == code::unavailable);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));
  }
  SECTION("a client whose certificate another CA signed is refused") {
    auto other = make_tls_cluster("troupe-tls-other");
    // The cluster's CA and tasks, but the other CA's client certificate and key.
    auto text = read_file(t.file.path());
    REQUIRE(text.ok());
    const std::string dir = std::filesystem::path(t.file.path()).parent_path().string();
    std::string mixed = *text;
    const std::string from = "client { certificate: \"client.pem\" key: \"client.key\" }";
    REQUIRE(mixed.find(from) != std::string::npos);
    mixed.replace(mixed.find(from), from.size(),
                  str_cat("client { certificate: \"", other.dir, "/certs/client.pem\" key: \"", other.dir, "/certs/client.key\" }"));
    mixed.replace(mixed.find("ca_certificate: \"ca.pem\""), std::string("ca_certificate: \"ca.pem\"").size(),
                  str_cat("ca_certificate: \"", dir, "/ca.pem\""));
    // It would not even start with a client certificate its CA did not sign: check_client_credentials.
    auto refused_at_start = process_cluster(parse(mixed), {}, "stranger");
    REQUIRE_FALSE(refused_at_start.ok());
    CHECK(refused_at_start.error().message().find("does not verify against the cluster's CA") != std::string::npos);
    std::filesystem::remove_all(other.dir);
  }
  SECTION("a peer whose certificate names another than it claims is refused by the service, and so is a hello for "
          "another task") {
    // Through the control plane directly: a client claiming to be "client" with the
    // worker's certificate (a valid chain, the wrong name).
    actors::cluster_options o;
    o.spec = t.file.spec();
    o.hosted_tasks = std::vector<std::string>{};
    auto tls = std::make_shared<control_tls>();
    tls->cluster = std::make_shared<const cluster_tls>(*t.file.tls());
    tls->identity = k_client_identity;
    tls->mine = *t.file.tls()->of("worker", 0);
    o.configure_system = [tls](caf::actor_system_config& config) {
      add_remote_task_support(config);
      add_control_tls(config, *tls);
    };
    o.remote_device = [](caf::actor_system&, const std::string&) -> result<actors::stand_in> { return actors::stand_in(); };
    auto c = actors::cluster::create(o);
    REQUIRE(c.ok());
    connect_options hello;
    hello.task = "/job:ps/replica:0/task:0";
    hello.cluster_id = cluster_id_of(t.file);
    hello.client = "impostor";
    hello.tls = tls;
    const auto& ps_address = t.file.tasks()[0];
    auto impostor = connect_task_service((*c)->system(), "127.0.0.1", ps_address.port, hello);
    REQUIRE_FALSE(impostor.ok());
    CHECK(impostor.error().error_code() == code::unauthenticated);
    CHECK(impostor.error().message().find("names '/job:worker/replica:0/task:0'") != std::string::npos);
    // The worker's own name with its own certificate passes; expecting the PS at the
    // worker's address does not (the worker cannot prove it is the PS).
    auto as_worker = std::make_shared<control_tls>(*tls);
    as_worker->identity = "/job:worker/replica:0/task:0";
    hello.tls = as_worker;
    CHECK(connect_task_service((*c)->system(), "127.0.0.1", ps_address.port, hello).ok());
    auto wrong_task = connect_task_service((*c)->system(), "127.0.0.1", t.file.tasks()[1].port, hello);
    REQUIRE_FALSE(wrong_task.ok());
    CHECK(wrong_task.error().message().find("expected task /job:ps/replica:0/task:0 here") != std::string::npos);
  }
  ps->reset();
  worker->reset();
  std::filesystem::remove_all(t.dir);
}

}  // namespace
}  // namespace troupe::cluster
