// What the tests of real clusters share: a cluster file of loopback tasks at free ports,
// written in a fresh directory of the test's own, plain or with TLS credentials made as
// `troupe cert init` makes them.
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cluster/certificates.h"
#include "cluster/cluster_file.h"
#include "cluster/task_processes.h"

namespace troupe::testing {

struct loopback_cluster {
  std::string dir;             // the test's directory: remove it when done
  cluster::cluster_file file;  // DIR/cluster.pbtxt, or with TLS DIR/certs/cluster.pbtxt
};

// Jobs by name and task count ({{"ps", 1}, {"worker", 2}}), every task at 127.0.0.1 on
// a free port; DIR is "<temp>/<name>-<pid>", emptied first.
inline loopback_cluster make_loopback_cluster(const std::string& name,
                                              const std::vector<std::pair<std::string, int>>& jobs,
                                              bool tls = false) {
  const std::string dir = (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string text;
  for (const auto& [job, tasks] : jobs) {
    text += "job { name: \"" + job + "\"";
    for (int t = 0; t < tasks; ++t) {
      text += " tasks { key: " + std::to_string(t) + " value: \"127.0.0.1:" +
              std::to_string(cluster::free_loopback_port()) + "\" }";
    }
    text += " }\n";
  }
  const std::string path = dir + "/cluster.pbtxt";
  std::ofstream(path) << text;
  auto file = cluster::cluster_file::load(path);
  REQUIRE(file.ok());
  if (!tls) return {dir, std::move(*file)};
  auto made = cluster::make_test_certificates(*file, dir + "/certs");
  REQUIRE(made.ok());
  auto with_tls = cluster::cluster_file::load(made->cluster_file);
  REQUIRE(with_tls.ok());
  return {dir, std::move(*with_tls)};
}

}  // namespace troupe::testing
