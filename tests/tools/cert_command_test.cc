// Cluster files (cluster/cluster_file.h) and `troupe cert`: a good file and every refusal,
// each naming the file and the line; TLS credentials made by `troupe cert init` check out,
// and a key of another task, a certificate of another CA, a certificate naming another
// task, a missing or unreadable file are refused, naming the file.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "cluster/certificates.h"
#include "cluster/cluster_file.h"
#include "core/file.h"
#include "tests/temp_dir.h"
#include "tests/tools/command_run.h"
#include "tools/commands.h"

using namespace troupe;
using troupe::testing::temp_dir;

namespace {

const char* k_three_tasks = R"(
job { name: "worker" tasks { key: 1 value: "localhost:2224" } tasks { key: 0 value: "localhost:2223" } }
job { name: "ps" tasks { key: 0 value: "127.0.0.1:2222" } }
)";

std::string refusal(const std::string& text) {
  auto c = cluster::cluster_file::parse(text, "c.pbtxt");
  if (c.ok()) return "(accepted)";
  CHECK(c.error().error_code() == code::invalid_argument);
  return c.error().message();
}

troupe::testing::command_run cert(const std::vector<std::string>& args) {
  return troupe::testing::run_command(tools::cert_command, args);
}

}  // namespace

TEST_CASE("a cluster file gives every task's address, ordered by job and index", "[cluster]") {
  auto c = cluster::cluster_file::parse(k_three_tasks, "/etc/troupe/c.pbtxt");
  REQUIRE(c.ok());
  REQUIRE(c->tasks().size() == 3);
  CHECK(c->tasks()[0].task_name() == "/job:ps/replica:0/task:0");
  CHECK(c->tasks()[0].host == "127.0.0.1");
  CHECK(c->tasks()[0].port == 2222);
  CHECK(c->tasks()[2].task_name() == "/job:worker/replica:0/task:1");
  CHECK(c->address("worker", 0)->port == 2223);
  auto missing = c->address("worker", 2);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message(), Catch::Contains("/job:worker/replica:0/task:2") &&
                                            Catch::Contains("/job:ps/replica:0/task:0, /job:worker"));
  CHECK(c->spec().task_names().size() == 3);
  CHECK_FALSE(c->tls().has_value());
  // IPv6 in brackets.
  auto v6 = cluster::cluster_file::parse(R"(job { name: "ps" tasks { key: 0 value: "[::1]:2222" } })", "c.pbtxt");
  REQUIRE(v6.ok());
  CHECK(v6->tasks()[0].host == "::1");
}

TEST_CASE("a bad cluster file is refused, naming the file, the line and what is wrong", "[cluster]") {
  CHECK_THAT(refusal("job { name: \"ps\" taks { key: 0 value: \"h:1\" } }"),
             Catch::StartsWith("c.pbtxt:1:") && Catch::Contains("did you mean 'tasks'"));
  CHECK_THAT(refusal(""), Catch::Contains("no job"));
  CHECK_THAT(refusal("job { name: \"ps\" tasks { key: 0 value: \"h:1\" } }\njob { name: \"ps\" tasks { key: 0 value: \"h:2\" } }"),
             Catch::StartsWith("c.pbtxt:2:") && Catch::Contains("job 'ps' is listed twice"));
  CHECK_THAT(refusal("job { name: \"ps\" tasks { key: 1 value: \"h:1\" } }"),
             Catch::Contains("has 1 tasks but no task 0"));
  CHECK_THAT(refusal("job { name: \"ps\" }"), Catch::Contains("job 'ps' has no task"));
  CHECK_THAT(refusal("job { name: \"ps\" tasks { key: 0 value: \"localhost\" } }"),
             Catch::Contains("/job:ps/replica:0/task:0") && Catch::Contains("is not host:port"));
  CHECK_THAT(refusal("job { name: \"ps\" tasks { key: 0 value: \"h:70000\" } }"), Catch::Contains("not a number in 1-65535"));
  CHECK_THAT(refusal("job { name: \"ps\" tasks { key: 0 value: \"h:0\" } }"), Catch::Contains("not a number in 1-65535"));
  CHECK_THAT(refusal("job { name: \"ps\" tasks { key: 0 value: \"h:1\" } tasks { key: 1 value: \"h:1\" } }"),
             Catch::Contains("/job:ps/replica:0/task:0 and /job:ps/replica:0/task:1 are both at h:1"));
  CHECK_THAT(refusal("job { name: \"9ps\" tasks { key: 0 value: \"h:1\" } }"), Catch::Contains("9ps"));
  const std::string jobs = "job { name: \"ps\" tasks { key: 0 value: \"h:1\" } tasks { key: 1 value: \"h:2\" } }\n";
  CHECK_THAT(refusal(jobs + "tls { task { job: \"ps\" index: 0 certificate: \"a\" key: \"b\" } }"),
             Catch::Contains("tls names no ca_certificate"));
  CHECK_THAT(refusal(jobs + "tls { ca_certificate: \"ca.pem\"\n task { job: \"ps\" index: 0 certificate: \"a\" key: \"b\" } }"),
             Catch::Contains("/job:ps/replica:0/task:1 has no certificate and key"));
  CHECK_THAT(refusal(jobs + "tls { ca_certificate: \"ca.pem\"\n task { job: \"ps\" index: 3 certificate: \"a\" key: \"b\" } }"),
             Catch::StartsWith("c.pbtxt:3:") && Catch::Contains("no task /job:ps/replica:0/task:3"));
  CHECK_THAT(refusal(jobs + "tls { ca_certificate: \"ca.pem\"\n task { job: \"ps\" index: 0 certificate: \"a\" } }"),
             Catch::Contains("needs both a certificate and a key"));
  CHECK_THAT(refusal(jobs + "tls { ca_certificate: \"ca.pem\"\n task { job: \"ps\" index: 0 certificate: \"a\" key: \"b\" }\n"
                            " task { job: \"ps\" index: 0 certificate: \"a\" key: \"b\" } }"),
             Catch::StartsWith("c.pbtxt:4:") && Catch::Contains("given twice"));
}

TEST_CASE("troupe cert init makes credentials that check; wrong ones are refused naming the file", "[cluster][tls]") {
  temp_dir dir;
  std::filesystem::create_directories(dir.path);
  const std::string cluster_path = dir.path + "/cluster.pbtxt";
  REQUIRE(write_file(cluster_path, k_three_tasks).ok());
  auto made = cert({"init", dir.path + "/certs", "--cluster", cluster_path, "--days", "30"});
  INFO(made.err);
  REQUIRE(made.code == 0);
  CHECK_THAT(made.out, Catch::Contains("for 3 tasks") && Catch::Contains("certs/cluster.pbtxt"));
  CHECK((std::filesystem::status(dir.path + "/certs/ps-0.key").permissions() & std::filesystem::perms::group_read) ==
        std::filesystem::perms::none);
  auto with_tls = cluster::cluster_file::load(dir.path + "/certs/cluster.pbtxt");
  REQUIRE(with_tls.ok());
  REQUIRE(with_tls->tls().has_value());
  CHECK(with_tls->tls()->ca_certificate == dir.path + "/certs/ca.pem");
  for (const auto& task : with_tls->tasks()) {
    INFO(task.task_name());
    CHECK(cluster::check_task_credentials(*with_tls->tls(), task).ok());
    CHECK(*cluster::certificate_task_name(with_tls->tls()->of(task.job, task.index)->certificate) == task.task_name());
  }
  auto checked = cert({"check", "--cluster", dir.path + "/certs/cluster.pbtxt"});
  CHECK(checked.code == 0);
  CHECK_THAT(checked.out, Catch::Contains("/job:worker/replica:0/task:1: ok"));
  // A second init into the same directory would replace the CA: refused.
  auto again = cert({"init", dir.path + "/certs", "--cluster", cluster_path});
  CHECK(again.code == 1);
  CHECK_THAT(again.err, Catch::Contains("already holds a CA"));

  // Another cluster's CA, for certificates that do not belong.
  auto other = cert({"init", dir.path + "/other", "--cluster", cluster_path});
  REQUIRE(other.code == 0);
  const std::string certs = dir.path + "/certs/";
  auto rewrite = [&](const std::string& from, const std::string& to) {
    auto text = read_file(certs + "cluster.pbtxt");
    REQUIRE(text.ok());
    std::string t = *text;
    const std::size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    REQUIRE(write_file(certs + "bad.pbtxt", t).ok());
    auto c = cluster::cluster_file::load(certs + "bad.pbtxt");
    REQUIRE(c.ok());
    return cluster::check_task_credentials(*c->tls(), *c->address("ps", 0));
  };
  status s = rewrite("key: \"ps-0.key\"", "key: \"worker-0.key\"");
  CHECK(s.error_code() == code::failed_precondition);
  CHECK_THAT(s.message(), Catch::Contains("worker-0.key' is not the key of certificate") && Catch::Contains("ps-0.pem"));
  s = rewrite("certificate: \"ps-0.pem\" key: \"ps-0.key\"", "certificate: \"../other/ps-0.pem\" key: \"../other/ps-0.key\"");
  CHECK_THAT(s.message(), Catch::Contains("other/ps-0.pem' does not verify against the cluster's CA"));
  s = rewrite("certificate: \"ps-0.pem\" key: \"ps-0.key\"", "certificate: \"worker-1.pem\" key: \"worker-1.key\"");
  CHECK_THAT(s.message(), Catch::Contains("names '/job:worker/replica:0/task:1', not /job:ps/replica:0/task:0"));
  s = rewrite("certificate: \"ps-0.pem\"", "certificate: \"missing.pem\"");
  CHECK_THAT(s.message(), Catch::Contains("missing.pem' cannot be read"));
  s = rewrite("certificate: \"ps-0.pem\"", "certificate: \"cluster.pbtxt\"");
  CHECK_THAT(s.message(), Catch::Contains("cluster.pbtxt' is not a PEM certificate"));
  s = rewrite("key: \"ps-0.key\"", "key: \"ps-0.pem\"");
  CHECK_THAT(s.message(), Catch::Contains("ps-0.pem' is not an unencrypted PEM private key"));
  s = rewrite("ca_certificate: \"ca.pem\"", "ca_certificate: \"../other/ca.pem\"");
  CHECK_THAT(s.message(), Catch::Contains("does not verify against the cluster's CA") && Catch::Contains("other/ca.pem"));
  auto check_bad = cert({"check", "--cluster", certs + "bad.pbtxt"});
  CHECK(check_bad.code == 1);
  CHECK_THAT(check_bad.err, Catch::Contains("3 tasks with bad credentials"));

  auto usage = cert({"init", dir.path + "/x"});
  CHECK(usage.code == 2);
  CHECK_THAT(usage.err, Catch::Contains("--cluster CLUSTER.pbtxt is required"));
  auto bad_days = cert({"init", dir.path + "/x", "--cluster", cluster_path, "--days", "0"});
  CHECK(bad_days.code == 2);
}

TEST_CASE("a task proves its identity by signing a challenge; an impostor is refused, naming why", "[cluster][tls]") {
  temp_dir dir;
  std::filesystem::create_directories(dir.path);
  REQUIRE(write_file(dir.path + "/cluster.pbtxt", k_three_tasks).ok());
  REQUIRE(cert({"init", dir.path + "/certs", "--cluster", dir.path + "/cluster.pbtxt"}).code == 0);
  REQUIRE(cert({"init", dir.path + "/other", "--cluster", dir.path + "/cluster.pbtxt"}).code == 0);
  auto c = cluster::cluster_file::load(dir.path + "/certs/cluster.pbtxt");
  auto other = cluster::cluster_file::load(dir.path + "/other/cluster.pbtxt");
  REQUIRE((c.ok() && other.ok()));
  const cluster::cluster_tls& tls = *c->tls();
  const cluster::task_address ps = *c->address("ps", 0), worker = *c->address("worker", 0);
  const std::string challenge = cluster::make_challenge();
  CHECK(challenge.size() == 32);
  CHECK(challenge != cluster::make_challenge());

  auto proof = cluster::prove_identity(*tls.of("ps", 0), challenge);
  REQUIRE(proof.ok());
  CHECK(cluster::check_identity(tls, ps, challenge, *proof).ok());

  auto refusal = [&](const cluster::task_address& claimed, const std::string& with_challenge,
                     const cluster::identity_proof& p) {
    const status s = cluster::check_identity(tls, claimed, with_challenge, p);
    CHECK(s.error_code() == code::unauthenticated);
    CHECK_THAT(s.message(), Catch::Contains("claiming to be " + claimed.task_name()));
    return s.message();
  };
  // ps-0's proof presented as worker-0's.
  CHECK_THAT(refusal(worker, challenge, *proof), Catch::Contains("names '/job:ps/replica:0/task:0'"));
  // A replayed proof: another challenge.
  CHECK_THAT(refusal(ps, cluster::make_challenge(), *proof), Catch::Contains("not made by its certificate's key"));
  // ps-0's certificate with worker-0's signature.
  auto worker_proof = cluster::prove_identity(*tls.of("worker", 0), challenge);
  REQUIRE(worker_proof.ok());
  cluster::identity_proof mixed{proof->certificate_pem, worker_proof->signature};
  CHECK_THAT(refusal(ps, challenge, mixed), Catch::Contains("not made by its certificate's key"));
  // Credentials of another cluster's CA.
  auto foreign = cluster::prove_identity(*other->tls()->of("ps", 0), challenge);
  REQUIRE(foreign.ok());
  CHECK_THAT(refusal(ps, challenge, *foreign), Catch::Contains("does not verify against the cluster's CA"));
  // Garbage.
  CHECK_THAT(refusal(ps, challenge, {"not a certificate", proof->signature}), Catch::Contains("not PEM"));
  cluster::identity_proof truncated = *proof;
  truncated.signature.resize(truncated.signature.size() / 2);
  CHECK_THAT(refusal(ps, challenge, truncated), Catch::Contains("not made by its certificate's key"));
}
