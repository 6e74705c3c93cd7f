#include "cluster/certificates.h"

#include <sys/stat.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>

#include "core/file.h"

namespace troupe::cluster {

std::string openssl_error(std::string_view fallback) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return std::string(fallback);
  char text[256];
  ERR_error_string_n(e, text, sizeof text);
  return text;
}

namespace {

template <class T, void (*Free)(T*)>
struct freer {
  void operator()(T* p) const { Free(p); }
};
using key_ptr = std::unique_ptr<EVP_PKEY, freer<EVP_PKEY, EVP_PKEY_free>>;
using cert_ptr = std::unique_ptr<X509, freer<X509, X509_free>>;
using bio_ptr = std::unique_ptr<BIO, freer<BIO, BIO_free_all>>;
using store_ptr = std::unique_ptr<X509_STORE, freer<X509_STORE, X509_STORE_free>>;
using store_ctx_ptr = std::unique_ptr<X509_STORE_CTX, freer<X509_STORE_CTX, X509_STORE_CTX_free>>;

result<std::string> pem_of(const std::function<int(BIO*)>& write) {
  bio_ptr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || write(bio.get()) != 1) return internal_error("writing PEM: ", openssl_error());
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

// Writes a private key to `path`, readable by its owner only: the file is made mode 0600
// before any of the key is in it.
status write_private(const std::string& path, const std::string& contents) {
  auto file = file_system::real().create(path);
  if (!file.ok()) return file.error();
  if (::chmod(path.c_str(), 0600) != 0) {
    return permission_denied_error("cannot make '", path, "' private (chmod 0600): ", std::strerror(errno));
  }
  TROUPE_RETURN_IF_ERROR((*file)->append(contents));
  return (*file)->close();
}

key_ptr new_key() { return key_ptr(EVP_EC_gen("P-256")); }

status add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return internal_error("making the certificate extension ", value, ": ", openssl_error());
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (added != 1) return internal_error("adding the certificate extension ", value, ": ", openssl_error());
  return status();
}

// A certificate for `key` named `common_name`, signed by (issuer, issuer_key), or
// self-signed when issuer is null (the CA).
result<cert_ptr> new_certificate(EVP_PKEY* key, const std::string& common_name, X509* issuer, EVP_PKEY* issuer_key,
                                 int days) {
  cert_ptr cert(X509_new());
  if (cert == nullptr) return internal_error("X509_new: ", openssl_error());
  unsigned char serial[8];
  if (RAND_bytes(serial, sizeof serial) != 1) return internal_error("RAND_bytes: ", openssl_error());
  serial[0] &= 0x7f;  // positive
  std::uint64_t number = 0;
  for (unsigned char b : serial) number = (number << 8) | b;
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), number);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_time_adj_ex(X509_getm_notAfter(cert.get()), days, 0, nullptr);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("troupe"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                             -1, 0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  const bool ca = issuer == nullptr;
  TROUPE_RETURN_IF_ERROR(add_extension(cert.get(), signer, NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE"));
  TROUPE_RETURN_IF_ERROR(add_extension(cert.get(), signer, NID_key_usage,
                                       ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature,keyAgreement"));
  if (!ca) TROUPE_RETURN_IF_ERROR(add_extension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth"));
  TROUPE_RETURN_IF_ERROR(add_extension(cert.get(), signer, NID_subject_key_identifier, "hash"));
  if (!ca) TROUPE_RETURN_IF_ERROR(add_extension(cert.get(), signer, NID_authority_key_identifier, "keyid:always"));
  if (X509_sign(cert.get(), issuer != nullptr ? issuer_key : key, EVP_sha256()) == 0) {
    return internal_error("signing the certificate of ", common_name, ": ", openssl_error());
  }
  return cert;
}

cert_ptr parse_certificate(std::string_view pem) {
  bio_ptr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return cert_ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

result<cert_ptr> read_certificate(const std::string& path, std::string_view what) {
  auto text = read_file(path);
  if (!text.ok()) return failed_precondition_error(what, " '", path, "' cannot be read: ", text.error().message());
  cert_ptr cert = parse_certificate(*text);
  if (cert == nullptr) {
    return failed_precondition_error(what, " '", path, "' is not a PEM certificate (", openssl_error(), ")");
  }
  return cert;
}

// Why `cert` does not verify against `ca` now (empty: it does).
result<std::string> chain_problem(X509* ca, X509* cert) {
  store_ptr store(X509_STORE_new());
  store_ctx_ptr ctx(X509_STORE_CTX_new());
  if (store == nullptr || ctx == nullptr || X509_STORE_add_cert(store.get(), ca) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert, nullptr) != 1) {
    return internal_error("setting up certificate verification: ", openssl_error());
  }
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_SERVER);
  if (X509_verify_cert(ctx.get()) == 1) return std::string();
  const int error = X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  return std::string(X509_verify_cert_error_string(error));
}

result<key_ptr> read_key(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return failed_precondition_error("key '", path, "' cannot be read: ", text.error().message());
  bio_ptr bio(BIO_new_mem_buf(text->data(), static_cast<int>(text->size())));
  // An encrypted key would ask for a passphrase: the callback refuses.
  key_ptr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, [](char*, int, int, void*) { return 0; }, nullptr));
  if (key == nullptr) {
    return failed_precondition_error("key '", path, "' is not an unencrypted PEM private key (", openssl_error(), ")");
  }
  return key;
}

std::string common_name_of(X509* cert) {
  char cn[256] = {};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn) < 0) return "";
  return cn;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

result<made_certificates> make_test_certificates(const cluster_file& cluster, const std::string& dir, int days) {
  if (days < 1) return invalid_argument_error("certificates must be valid for at least 1 day, not ", days);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return permission_denied_error("cannot make directory '", dir, "': ", ec.message());
  const std::string ca_path = dir + "/ca.pem", ca_key_path = dir + "/ca.key";
  if (std::filesystem::exists(ca_path) || std::filesystem::exists(ca_key_path)) {
    return already_exists_error("'", dir, "' already holds a CA (ca.pem or ca.key): remove it or choose another directory");
  }
  made_certificates out;
  key_ptr ca_key = new_key();
  if (ca_key == nullptr) return internal_error("making the CA's key: ", openssl_error());
  auto ca = new_certificate(ca_key.get(), "troupe cluster CA", nullptr, nullptr, days);
  if (!ca.ok()) return ca.error();
  auto write_pair = [&](X509* cert, EVP_PKEY* key, const std::string& cert_path, const std::string& key_path) -> status {
    auto cert_pem = pem_of([&](BIO* b) { return PEM_write_bio_X509(b, cert); });
    auto key_pem = pem_of([&](BIO* b) { return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); });
    if (!cert_pem.ok()) return cert_pem.error();
    if (!key_pem.ok()) return key_pem.error();
    TROUPE_RETURN_IF_ERROR(write_file(cert_path, *cert_pem));
    TROUPE_RETURN_IF_ERROR(write_private(key_path, *key_pem));
    out.files.push_back(cert_path);
    out.files.push_back(key_path);
    return status();
  };
  TROUPE_RETURN_IF_ERROR(write_pair(ca->get(), ca_key.get(), ca_path, ca_key_path));
  std::string tls = "tls {\n  ca_certificate: \"ca.pem\"\n";
  for (const task_address& task : cluster.tasks()) {
    key_ptr key = new_key();
    if (key == nullptr) return internal_error("making the key of ", task.task_name(), ": ", openssl_error());
    auto cert = new_certificate(key.get(), task.task_name(), ca->get(), ca_key.get(), days);
    if (!cert.ok()) return cert.error();
    const std::string stem = str_cat(task.job, "-", task.index);
    TROUPE_RETURN_IF_ERROR(write_pair(cert->get(), key.get(), str_cat(dir, "/", stem, ".pem"), str_cat(dir, "/", stem, ".key")));
    tls += str_cat("  task { job: ", quoted(task.job), " index: ", task.index, " certificate: ", quoted(stem + ".pem"),
                   " key: ", quoted(stem + ".key"), " }\n");
  }
  {
    key_ptr key = new_key();
    if (key == nullptr) return internal_error("making the client's key: ", openssl_error());
    auto cert = new_certificate(key.get(), k_client_identity, ca->get(), ca_key.get(), days);
    if (!cert.ok()) return cert.error();
    TROUPE_RETURN_IF_ERROR(write_pair(cert->get(), key.get(), dir + "/client.pem", dir + "/client.key"));
    tls += "  client { certificate: \"client.pem\" key: \"client.key\" }\n";
  }
  tls += "}\n";
  std::string text = str_cat("# Made by troupe cert init from ", cluster.path(), ".\n");
  for (const std::string& job : cluster.spec().job_names()) {
    text += str_cat("job {\n  name: ", quoted(job), "\n");
    for (const task_address& task : cluster.tasks()) {
      if (task.job == job) {
        const bool v6 = task.host.find(':') != std::string::npos;
        text += str_cat("  tasks { key: ", task.index, " value: ",
                        quoted(str_cat(v6 ? "[" : "", task.host, v6 ? "]" : "", ":", task.port)), " }\n");
      }
    }
    text += "}\n";
  }
  text += tls;
  out.cluster_file = dir + "/cluster.pbtxt";
  TROUPE_RETURN_IF_ERROR(write_file(out.cluster_file, text));
  out.files.push_back(out.cluster_file);
  return out;
}

status check_task_credentials(const cluster_tls& tls, const task_address& task) {
  const task_credentials* mine = tls.of(task.job, task.index);
  if (mine == nullptr) return failed_precondition_error("the cluster's tls section has no credentials for ", task.task_name());
  return check_credentials(tls, *mine, task.task_name());
}

status check_client_credentials(const cluster_tls& tls) {
  if (!tls.client) {
    return failed_precondition_error("the cluster's tls section has no client credentials (client { certificate key }: ",
                                     "troupe cert init makes them)");
  }
  return check_credentials(tls, *tls.client, k_client_identity);
}

status check_credentials(const cluster_tls& tls, const task_credentials& mine_ref, const std::string& name) {
  const task_credentials* mine = &mine_ref;
  auto ca = read_certificate(tls.ca_certificate, "CA certificate");
  if (!ca.ok()) return ca.error();
  auto cert = read_certificate(mine->certificate, "certificate");
  if (!cert.ok()) return cert.error();
  auto key = read_key(mine->key);
  if (!key.ok()) return key.error();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return failed_precondition_error("key '", mine->key, "' is not the key of certificate '", mine->certificate, "'");
  }
  auto problem = chain_problem(ca->get(), cert->get());
  if (!problem.ok()) return problem.error();
  if (!problem->empty()) {
    return failed_precondition_error("certificate '", mine->certificate, "' does not verify against the cluster's CA '",
                                     tls.ca_certificate, "': ", *problem);
  }
  const std::string named = common_name_of(cert->get());
  if (named != name) {
    return failed_precondition_error("certificate '", mine->certificate, "' names '", named, "', not ", name);
  }
  return status();
}

result<std::string> certificate_task_name(const std::string& certificate_path) {
  auto cert = read_certificate(certificate_path, "certificate");
  if (!cert.ok()) return cert.error();
  return common_name_of(cert->get());
}

std::string make_challenge() {
  std::string out(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) != 1) {
    // No randomness is no security: never go on with a predictable challenge.
    std::abort();
  }
  return out;
}

result<identity_proof> prove_identity(const task_credentials& mine, std::string_view challenge) {
  auto key = read_key(mine.key);
  if (!key.ok()) return key.error();
  auto pem = read_file(mine.certificate);
  if (!pem.ok()) return failed_precondition_error("certificate '", mine.certificate, "' cannot be read: ", pem.error().message());
  std::unique_ptr<EVP_MD_CTX, freer<EVP_MD_CTX, EVP_MD_CTX_free>> ctx(EVP_MD_CTX_new());
  std::size_t size = 0;
  if (ctx == nullptr || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key->get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &size, reinterpret_cast<const unsigned char*>(challenge.data()), challenge.size()) != 1) {
    return internal_error("signing with key '", mine.key, "': ", openssl_error());
  }
  identity_proof proof;
  proof.certificate_pem = std::move(*pem);
  proof.signature.resize(size);
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(proof.signature.data()), &size,
                     reinterpret_cast<const unsigned char*>(challenge.data()), challenge.size()) != 1) {
    return internal_error("signing with key '", mine.key, "': ", openssl_error());
  }
  proof.signature.resize(size);
  return proof;
}

status check_identity(const cluster_tls& tls, const task_address& claimed, std::string_view challenge,
                      const identity_proof& proof) {
  return check_identity(tls, claimed.task_name(), challenge, proof);
}

status check_identity(const cluster_tls& tls, const std::string& claimed, std::string_view challenge,
                      const identity_proof& proof) {
  auto refused = [&](const auto&... why) {
    return unauthenticated_error("a peer claiming to be ", claimed, " is refused: ", why...);
  };
  auto ca = read_certificate(tls.ca_certificate, "CA certificate");
  if (!ca.ok()) return ca.error();
  cert_ptr cert = parse_certificate(proof.certificate_pem);
  if (cert == nullptr) {
    ERR_clear_error();
    return refused("its certificate is not PEM");
  }
  auto problem = chain_problem(ca->get(), cert.get());
  if (!problem.ok()) return problem.error();
  if (!problem->empty()) return refused("its certificate does not verify against the cluster's CA (", *problem, ")");
  const std::string named = common_name_of(cert.get());
  if (named != claimed) return refused("its certificate names '", named, "'");
  EVP_PKEY* key = X509_get0_pubkey(cert.get());
  std::unique_ptr<EVP_MD_CTX, freer<EVP_MD_CTX, EVP_MD_CTX_free>> ctx(EVP_MD_CTX_new());
  if (key == nullptr || ctx == nullptr || EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) != 1) {
    return internal_error("verifying a signature: ", openssl_error());
  }
  const int verified = EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(proof.signature.data()),
                                        proof.signature.size(), reinterpret_cast<const unsigned char*>(challenge.data()),
                                        challenge.size());
  ERR_clear_error();
  if (verified != 1) return refused("its signature over the challenge was not made by its certificate's key");
  return status();
}

}  // namespace troupe::cluster
