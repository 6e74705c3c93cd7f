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
#include <string_view>
#include <vector>

#include "cluster/cluster_file.h"
#include "core/status.h"

namespace troupe::cluster {

struct made_certificates {
  std::string cluster_file;        // DIR/cluster.pbtxt: the cluster with its tls section
  std::vector<std::string> files;  // every file written, the CA's first
};

// Makes DIR (when absent) and writes DIR/ca.pem and ca.key, DIR/<job>-<index>.pem and .key
// for every task of `cluster`, DIR/client.pem and client.key (naming "client", for the
// processes that host no task), and DIR/cluster.pbtxt: the cluster's jobs with a tls section
// naming them (paths relative to DIR). Certificates are valid from an hour ago for
// `days` days. Refuses (ALREADY_EXISTS) to overwrite a CA already in DIR.
result<made_certificates> make_test_certificates(const cluster_file& cluster, const std::string& dir, int days = 365);

// Checks `task`'s credentials in `tls`: every file readable and PEM (the CA's certificate,
// the task's certificate and key), the key the certificate's, the certificate signed by
// the CA and valid now, and naming the task. Errors name the file and what is wrong.
status check_task_credentials(const cluster_tls& tls, const task_address& task);
// The same for the client's credentials (naming k_client_identity); FAILED_PRECONDITION
// when the tls section has none.
status check_client_credentials(const cluster_tls& tls);
// The same for any credentials that must name `name`.
status check_credentials(const cluster_tls& tls, const task_credentials& mine, const std::string& name);

// OpenSSL's last error as text, or `fallback` when it has none; clears its error queue
// (for every user of OpenSSL in cluster/).
std::string openssl_error(std::string_view fallback = "unknown OpenSSL error");

// The task a certificate names (its subject's common name).
result<std::string> certificate_task_name(const std::string& certificate_path);

// Proof of a peer's task identity at the application level (CAF 0.17's TLS checks only
// the chain): the verifier sends a fresh challenge, the peer answers with its certificate
// (PEM) and its signature over the challenge with its key (ECDSA, SHA-256), the verifier
// checks both against the cluster's CA and the task the peer claims to be.
//
//   const std::string challenge = make_challenge();                          // verifier
//   auto proof = prove_identity(*tls->of("ps", 0), challenge);               // peer
//   TROUPE_RETURN_IF_ERROR(check_identity(*tls, claimed, challenge, *proof)); // verifier
struct identity_proof {
  std::string certificate_pem;
  std::string signature;  // DER ECDSA signature over the challenge
};
// 32 random bytes.
std::string make_challenge();
result<identity_proof> prove_identity(const task_credentials& mine, std::string_view challenge);
// UNAUTHENTICATED naming `claimed` and why: a certificate the CA did not sign or that names
// another task, or a signature its key did not make over this challenge.
status check_identity(const cluster_tls& tls, const task_address& claimed, std::string_view challenge,
                      const identity_proof& proof);
// The same for a peer claiming any name (a task's, or k_client_identity).
status check_identity(const cluster_tls& tls, const std::string& claimed, std::string_view challenge,
                      const identity_proof& proof);

}  // namespace troupe::cluster
