// Certificates of a cluster's tasks for mutual TLS (doc/cluster.md): making a CA and one
// certificate per task for a test cluster (`troupe cert init`), and checking a task's
// credentials before a server starts (CAF's OpenSSL module reads them only per
// connection, and a bad file then aborts a server or hangs a client: see
// ../shared/notes/caf-0.17.md).
//
// A task's certificate names the task in its subject's common name
// ("/job:ps/replica:0/task:0"), is signed by the cluster's CA, and is for both server and
// client authentication; keys are EC P-256, written unencrypted with mode 0600.
//
//   auto made = make_test_certificates(*cluster, "certs");   // certs/cluster.pbtxt names them
//   TROUPE_RETURN_IF_ERROR(check_task_credentials(*cluster->tls(), address));
#pragma once

#include <string>
#include <vector>

#include "cluster/cluster_file.h"
#include "core/status.h"

namespace troupe::cluster {

struct made_certificates {
  std::string cluster_file;        // DIR/cluster.pbtxt: the cluster with its tls section
  std::vector<std::string> files;  // every file written, the CA's first
};

// Makes DIR (when absent) and writes DIR/ca.pem and ca.key, DIR/<job>-<index>.pem and .key
// for every task of `cluster`, and DIR/cluster.pbtxt: the cluster's jobs with a tls section
// naming them (paths relative to DIR). Certificates are valid from an hour ago for
// `days` days. Refuses (ALREADY_EXISTS) to overwrite a CA already in DIR.
result<made_certificates> make_test_certificates(const cluster_file& cluster, const std::string& dir, int days = 365);

// Checks `task`'s credentials in `tls`: every file readable and PEM (the CA's certificate,
// the task's certificate and key), the key the certificate's, the certificate signed by
// the CA and valid now, and naming the task. Errors name the file and what is wrong.
status check_task_credentials(const cluster_tls& tls, const task_address& task);

// The task a certificate names (its subject's common name).
result<std::string> certificate_task_name(const std::string& certificate_path);

}  // namespace troupe::cluster
