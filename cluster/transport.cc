#include "cluster/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cluster/certificates.h"
#include "cluster/wire_bytes.h"
#include "core/shared_memory.h"
#include "core/switches.h"

namespace troupe::cluster {
namespace {

static_assert(std::endian::native == std::endian::little, "the wire is little-endian");

using clock_type = std::chrono::steady_clock;

constexpr std::uint32_t k_magic = 0x4c505254;  // "TRPL"
constexpr std::uint64_t k_max_small_body = 1 << 20;  // any frame but a chunk
constexpr std::size_t k_max_rank = 64;

enum class frame_kind : std::uint8_t {
  hello = 1,
  refuse = 2,
  tensor_begin = 3,
  chunk = 4,
  ack = 5,
  heartbeat = 6,
  goodbye = 7,
  shared_ready = 8,  // this end mapped the ring the peer offered in its hello
  shared_chunk = 9,  // the next bytes of the tensor begun, in the sender's ring
  shared_block = 10,   // the whole tensor begun, in a block of the sender's shared memory
  shared_release = 11, // blocks of this end's shared memory the peer no longer reads
  shared_refused = 12, // blocks of this end's shared memory the peer could not map: send them by copy
};
constexpr std::uint8_t k_last_frame_kind = 12;

struct frame_header {
  std::uint32_t magic = k_magic;
  std::uint8_t kind = 0;
  std::uint8_t reserved[3] = {};
  std::uint64_t length = 0;  // of the body
};
static_assert(sizeof(frame_header) == 16);

// Waits until `fd` is ready for `events` or `deadline` passes (time_point::max(): no
// deadline): 1 ready, 0 timed out, -1 error.
int wait_for(int fd, short events, clock_type::time_point deadline) {
  for (;;) {
    int timeout = -1;
    if (deadline != clock_type::time_point::max()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
      if (left.count() <= 0) return 0;
      timeout = static_cast<int>(std::min<std::int64_t>(left.count() + 1, 3600 * 1000));
    }
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, timeout);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) continue;  // the loop's check says whether the deadline passed
    return 1;
  }
}

// OpenSSL writes to its socket with write(2), which raises SIGPIPE when the peer has gone:
// while one lives, SIGPIPE is blocked on this thread, and one raised meanwhile is taken
// back before the thread's mask is restored (the failed write reports the error).
// A link's own threads block SIGPIPE for good (block_sigpipe_for_this_thread) and need no
// guard.
thread_local bool t_sigpipe_blocked = false;

void block_sigpipe_for_this_thread() {
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
  t_sigpipe_blocked = true;
}

class sigpipe_guard {
 public:
  sigpipe_guard() : active_(!t_sigpipe_blocked) {
    if (!active_) return;
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old_);
  }
  ~sigpipe_guard() {
    if (!active_) return;
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1 && sigismember(&old_, SIGPIPE) == 0) {
      sigset_t pipe_only;
      sigemptyset(&pipe_only);
      sigaddset(&pipe_only, SIGPIPE);
      const timespec now{0, 0};
      while (sigtimedwait(&pipe_only, nullptr, &now) == -1 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

 private:
  bool active_;
  sigset_t old_;
};

// One end of a TCP connection, plain or TLS. The socket is non-blocking and every wait is
// a poll, so that a reader and a writer thread can share it: OpenSSL calls on the one SSL
// object are made one at a time (ssl_mutex), and none of them waits.
struct connection {
  int fd = -1;
  SSL* ssl = nullptr;  // null: plain TCP
  std::mutex ssl_mutex;
  // What was read ahead of the frame being read (read_exactly: one read takes the frames
  // that wait, not one read per header and body), read_begin..read_end of read_ahead.
  static constexpr std::size_t k_read_ahead_bytes = 64 << 10;
  bool local = false;  // a Unix socket (local sockets), not TCP
  std::unique_ptr<char[]> read_ahead;
  std::size_t read_begin = 0, read_end = 0;

  ~connection() {
    if (ssl != nullptr) SSL_free(ssl);
    if (fd >= 0) ::close(fd);
  }

  enum class outcome { progress, closed, failed, want_read, want_write };

  // One attempt to move bytes; *why says what failed.
  outcome read_some(void* to, std::size_t n, std::size_t* got, std::string* why) {
    if (ssl == nullptr) {
      for (;;) {
        const ssize_t r = ::recv(fd, to, n, 0);
        if (r > 0) return *got = static_cast<std::size_t>(r), outcome::progress;
        if (r == 0) return outcome::closed;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return outcome::want_read;
        *why = std::strerror(errno);
        return outcome::failed;
      }
    }
    std::lock_guard<std::mutex> lock(ssl_mutex);
    const sigpipe_guard no_sigpipe;
    ERR_clear_error();
    errno = 0;
    if (SSL_read_ex(ssl, to, n, got) == 1) return outcome::progress;
    return tls_outcome(SSL_get_error(ssl, 0), why);
  }

  outcome write_some(const void* from, std::size_t n, std::size_t* put, std::string* why) {
    if (ssl == nullptr) {
      for (;;) {
        const ssize_t r = ::send(fd, from, n, MSG_NOSIGNAL);
        if (r >= 0) return *put = static_cast<std::size_t>(r), outcome::progress;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return outcome::want_write;
        *why = std::strerror(errno);
        return outcome::failed;
      }
    }
    std::lock_guard<std::mutex> lock(ssl_mutex);
    const sigpipe_guard no_sigpipe;
    ERR_clear_error();
    errno = 0;
    if (SSL_write_ex(ssl, from, n, put) == 1) return outcome::progress;
    return tls_outcome(SSL_get_error(ssl, 0), why);
  }

  // SSL_get_error's answer (under ssl_mutex) as an outcome.
  outcome tls_outcome(int error, std::string* why) {
    switch (error) {
      case SSL_ERROR_WANT_READ:
        return outcome::want_read;
      case SSL_ERROR_WANT_WRITE:
        return outcome::want_write;
      case SSL_ERROR_ZERO_RETURN:
        return outcome::closed;
      case SSL_ERROR_SYSCALL:
        if (errno == 0) return outcome::closed;  // the peer went without a TLS goodbye
        *why = std::strerror(errno);
        return outcome::failed;
      default:
        *why = openssl_error("TLS error");
        return outcome::failed;
    }
  }
};

// Whether senders may write their tensors themselves (tensor_link::send):
// TROUPE_LINK_INLINE=0 leaves every write to the links' writers.
bool inline_writes_enabled() {
  static const bool enabled = env_switch("TROUPE_LINK_INLINE", true);
  return enabled;
}

// While a thread writes a tensor inline (tensor_link::send, plain TCP only), the bytes a
// full socket would not take now go here, in order, for the link's writer to write: the
// caller never waits on the socket.
struct write_spill {
  std::string bytes;
  void add(const iovec* pieces, int count) {
    for (int i = 0; i < count; ++i) bytes.append(static_cast<const char*>(pieces[i].iov_base), pieces[i].iov_len);
  }
};
thread_local write_spill* t_spill = nullptr;

// Spills this thread's writes into `spill` while it lives.
class spill_scope {
 public:
  explicit spill_scope(write_spill& spill) : before_(std::exchange(t_spill, &spill)) {}
  ~spill_scope() { t_spill = before_; }
  spill_scope(const spill_scope&) = delete;
  spill_scope& operator=(const spill_scope&) = delete;

 private:
  write_spill* before_;
};

// Writes every byte of the pieces; an error naming `peer` when the connection fails.
status write_all(connection& c, iovec* pieces, int count, const std::string& peer) {
  std::string why;
  if (t_spill != nullptr && !t_spill->bytes.empty()) {  // after bytes already spilled
    t_spill->add(pieces, count);
    return status();
  }
  while (count > 0) {
    if (pieces->iov_len == 0) {
      ++pieces;
      --count;
      continue;
    }
    std::size_t put = 0;
    connection::outcome o;
    if (c.ssl == nullptr && count > 1) {
      // Plain TCP gathers the pieces in one call.
      msghdr m{};
      m.msg_iov = pieces;
      m.msg_iovlen = static_cast<std::size_t>(count);
      const ssize_t n = ::sendmsg(c.fd, &m, MSG_NOSIGNAL);
      if (n >= 0) {
        put = static_cast<std::size_t>(n);
        o = connection::outcome::progress;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        o = connection::outcome::want_write;
      } else {
        why = std::strerror(errno);
        o = connection::outcome::failed;
      }
    } else {
      o = c.write_some(pieces->iov_base, pieces->iov_len, &put, &why);
    }
    switch (o) {
      case connection::outcome::progress:
        while (count > 0 && put >= pieces->iov_len) {
          put -= pieces->iov_len;
          ++pieces;
          --count;
        }
        if (count > 0) {
          pieces->iov_base = static_cast<char*>(pieces->iov_base) + put;
          pieces->iov_len -= put;
        }
        break;
      case connection::outcome::want_write:
      case connection::outcome::want_read: {
        if (t_spill != nullptr) {
          t_spill->add(pieces, count);
          return status();
        }
        // No deadline: a peer that stops reading is found by the reader's timeout, which
        // shuts the socket down and so ends this wait.
        const short events = o == connection::outcome::want_write ? POLLOUT : POLLIN;
        if (wait_for(c.fd, events, clock_type::time_point::max()) < 0) {
          return unavailable_error("writing to task ", peer, " failed: ", std::strerror(errno));
        }
        break;
      }
      case connection::outcome::closed:
        return unavailable_error("task ", peer, " closed the connection");
      case connection::outcome::failed:
        return unavailable_error("writing to task ", peer, " failed: ", why);
    }
  }
  return status();
}

// A frame as bytes, header and body, for write_frame's `before`.
std::string encoded_frame(frame_kind kind, std::string_view body) {
  frame_header h;
  h.kind = static_cast<std::uint8_t>(kind);
  h.length = body.size();
  std::string bytes(reinterpret_cast<const char*>(&h), sizeof h);
  bytes += body;
  return bytes;
}

// Writes `before` (frames already encoded, may be empty) and then a frame of `kind` with
// `body`, in one call where it can: a reader woken by the first bytes finds them all.
status write_frame(connection& c, frame_kind kind, std::string_view body, const std::string& peer,
                   std::string_view before = {}) {
  frame_header h;
  h.kind = static_cast<std::uint8_t>(kind);
  h.length = body.size();
  if (c.ssl != nullptr && body.size() <= 4096) {
    // One TLS record for a small frame.
    std::string whole = std::string(before) + encoded_frame(kind, body);
    iovec piece{whole.data(), whole.size()};
    return write_all(c, &piece, 1, peer);
  }
  if (c.ssl != nullptr && !before.empty()) {
    iovec piece{const_cast<char*>(before.data()), before.size()};
    TROUPE_RETURN_IF_ERROR(write_all(c, &piece, 1, peer));
    before = {};
  }
  iovec pieces[3] = {{const_cast<char*>(before.data()), before.size()},
                     {&h, sizeof h},
                     {const_cast<char*>(body.data()), body.size()}};
  return write_all(c, pieces, 3, peer);
}

// Reads exactly `bytes`, each wait for data at most `timeout`. Errors name `peer`. What
// is there beyond them (up to k_read_ahead_bytes) is read too and kept for the next call;
// a read of that much or more goes straight to `to`.
status read_exactly(connection& c, void* to, std::size_t bytes, std::chrono::milliseconds timeout,
                    const std::string& peer) {
  auto* p = static_cast<char*>(to);
  std::string why;
  while (bytes > 0) {
    if (c.read_end > c.read_begin) {
      const std::size_t n = std::min(bytes, c.read_end - c.read_begin);
      std::memcpy(p, c.read_ahead.get() + c.read_begin, n);
      c.read_begin += n;
      p += n;
      bytes -= n;
      continue;
    }
    const bool ahead = bytes < connection::k_read_ahead_bytes;
    if (ahead && c.read_ahead == nullptr) c.read_ahead = std::make_unique<char[]>(connection::k_read_ahead_bytes);
    std::size_t got = 0;
    const auto o = ahead ? c.read_some(c.read_ahead.get(), connection::k_read_ahead_bytes, &got, &why)
                         : c.read_some(p, bytes, &got, &why);
    switch (o) {
      case connection::outcome::progress:
        if (ahead) {
          c.read_begin = 0;
          c.read_end = got;
        } else {
          p += got;
          bytes -= got;
        }
        break;
      case connection::outcome::want_read:
      case connection::outcome::want_write: {
        const int ready = wait_for(c.fd, o == connection::outcome::want_read ? POLLIN : POLLOUT, clock_type::now() + timeout);
        if (ready == 0) {
          return unavailable_error("task ", peer, " sent nothing for ", timeout.count(),
                                   " ms (frozen, or the network is cut)");
        }
        if (ready < 0) return unavailable_error("the connection to task ", peer, " failed: ", std::strerror(errno));
        break;
      }
      case connection::outcome::closed:
        return unavailable_error("task ", peer, " closed the connection");
      case connection::outcome::failed:
        return unavailable_error("the connection to task ", peer, " failed: ", why);
    }
  }
  return status();
}

struct frame {
  frame_kind kind{};
  std::uint64_t length = 0;
};

result<frame> read_header(connection& c, std::chrono::milliseconds timeout, const std::string& peer) {
  frame_header h;
  TROUPE_RETURN_IF_ERROR(read_exactly(c, &h, sizeof h, timeout, peer));
  if (h.magic != k_magic || h.kind < 1 || h.kind > k_last_frame_kind) {
    return unavailable_error("task ", peer, " sent something that is not a troupe link frame");
  }
  const auto kind = static_cast<frame_kind>(h.kind);
  if (kind != frame_kind::chunk && h.length > k_max_small_body) {
    return unavailable_error("task ", peer, " sent a frame of ", h.length, " bytes where at most ", k_max_small_body,
                             " are expected");
  }
  return frame{kind, h.length};
}

result<std::string> read_body(connection& c, const frame& f, std::chrono::milliseconds timeout, const std::string& peer) {
  std::string body(static_cast<std::size_t>(f.length), '\0');
  TROUPE_RETURN_IF_ERROR(read_exactly(c, body.data(), body.size(), timeout, peer));
  return body;
}

// --- TLS --------------------------------------------------------------------------------

using context_ptr = std::shared_ptr<SSL_CTX>;

// The TLS context of one end: TLS 1.3, this task's certificate and key, the cluster's CA
// as the only one trusted, the peer's certificate required. Errors name the file.
result<context_ptr> make_tls_context(const link_tls& tls) {
  context_ptr context(SSL_CTX_new(TLS_method()), SSL_CTX_free);
  if (context == nullptr) return internal_error("cannot make a TLS context: ", openssl_error("no memory?"));
  SSL_CTX_set_min_proto_version(context.get(), TLS1_3_VERSION);
  SSL_CTX_set_mode(context.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_read_ahead(context.get(), 1);  // records read in bulk, not header then body
  SSL_CTX_set_default_read_buffer_len(context.get(), 1 << 20);
  SSL_CTX_set_ciphersuites(context.get(), "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
  if (SSL_CTX_load_verify_locations(context.get(), tls.ca_certificate.c_str(), nullptr) != 1) {
    return invalid_argument_error("cannot read the CA certificate '", tls.ca_certificate, "': ", openssl_error("?"));
  }
  if (SSL_CTX_use_certificate_chain_file(context.get(), tls.certificate.c_str()) != 1) {
    return invalid_argument_error("cannot read the certificate '", tls.certificate, "': ", openssl_error("?"));
  }
  if (SSL_CTX_use_PrivateKey_file(context.get(), tls.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      return invalid_argument_error("the key '", tls.key, "' is not the key of the certificate '", tls.certificate, "'");
    }
    return invalid_argument_error("cannot read the key '", tls.key, "': ", openssl_error("?"));
  }
  if (SSL_CTX_check_private_key(context.get()) != 1) {
    return invalid_argument_error("the key '", tls.key, "' is not the key of the certificate '", tls.certificate, "'");
  }
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return context;
}

// The TLS handshake of `c` (client or server side) by `deadline`.
status tls_handshake(connection& c, SSL_CTX* context, bool client, clock_type::time_point deadline,
                     const std::string& who) {
  c.ssl = SSL_new(context);
  if (c.ssl == nullptr || SSL_set_fd(c.ssl, c.fd) != 1) {
    return internal_error("cannot start TLS with ", who, ": ", openssl_error("?"));
  }
  for (;;) {
    int error = 0;
    {
      std::lock_guard<std::mutex> lock(c.ssl_mutex);
      const sigpipe_guard no_sigpipe;
      ERR_clear_error();
      errno = 0;
      const int r = client ? SSL_connect(c.ssl) : SSL_accept(c.ssl);
      if (r == 1) return status();
      error = SSL_get_error(c.ssl, r);
    }
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      const int ready = wait_for(c.fd, error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline);
      if (ready == 0) return deadline_exceeded_error("the TLS handshake with ", who, " did not finish in time");
      if (ready < 0) return unavailable_error("the TLS handshake with ", who, " failed: ", std::strerror(errno));
      continue;
    }
    const std::string why = error == SSL_ERROR_SYSCALL && errno == 0 ? std::string("the peer closed the connection")
                                                                      : openssl_error("TLS error");
    return unavailable_error("the TLS handshake with ", who, " failed: ", why);
  }
}

// The task the peer's certificate names (its subject's common name); empty without TLS.
std::string certificate_task(connection& c) {
  if (c.ssl == nullptr) return {};
  std::lock_guard<std::mutex> lock(c.ssl_mutex);
  X509* peer = SSL_get1_peer_certificate(c.ssl);
  if (peer == nullptr) return {};
  char name[256] = {};
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, name, sizeof name);
  X509_free(peer);
  return n > 0 ? std::string(name, static_cast<std::size_t>(n)) : std::string();
}

void set_socket_options(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// --- local sockets ------------------------------------------------------------------------
//
// A plain listener on a loopback address (or on every address) also listens on an abstract
// Unix socket named after that address and port, and a plain link to a loopback address
// tries it first: the same bytes and protocol (hello, frames, shared memory) without the
// kernel's TCP/IP path, which costs each frame and its wake-up of the reader about 1.6
// times the CPU here (doc/cluster.md, "Local sockets"). Abstract names live in the network
// namespace, as loopback addresses do; a name already taken (another listener on the same
// address and port in another address family) leaves that listener TCP only. TLS links
// stay on TCP. TROUPE_LINK_LOCAL=0 turns it off.
bool local_sockets_enabled() {
  static const bool enabled = env_switch("TROUPE_LINK_LOCAL", true);
  return enabled;
}

// The numeric loopback address `a` names ("127.0.0.1", "::1"), or empty when it is not one.
std::string loopback_name(const sockaddr* a) {
  char host[NI_MAXHOST] = "";
  if (a->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a);
    if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) return {};
  } else if (a->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
    if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return {};
  } else {
    return {};
  }
  if (::getnameinfo(a, a->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6), host, sizeof host,
                    nullptr, 0, NI_NUMERICHOST) != 0) {
    return {};
  }
  return host;
}

// The abstract Unix address of the listener at loopback `host`:`port`.
sockaddr_un local_address(const std::string& host, int port, socklen_t* length) {
  sockaddr_un u{};
  u.sun_family = AF_UNIX;
  const std::string name = str_cat("troupe-link/", host, ":", port);
  const std::size_t n = std::min(name.size(), sizeof u.sun_path - 1);
  std::memcpy(u.sun_path + 1, name.data(), n);  // sun_path[0] == 0: abstract
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return u;
}

// A connected socket to the local listener of loopback address `a` and `port`, or -1
// (none: not a loopback address, local sockets off, no such listener, its backlog full).
int connect_local(const sockaddr* a, int port) {
  if (!local_sockets_enabled()) return -1;
  const std::string host = loopback_name(a);
  if (host.empty()) return -1;
  socklen_t length = 0;
  const sockaddr_un u = local_address(host, port, &length);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&u), length) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The addresses of host:port (numeric or by name).
result<addrinfo*> resolve(const std::string& host, int port, bool passive) {
  if (port < 0 || port > 65535) return invalid_argument_error("port ", port, " is outside 0-65535");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (e != 0) return invalid_argument_error("cannot resolve '", host, "': ", ::gai_strerror(e));
  return found;
}

// --- shared memory between the ends of a link on one machine ----------------------------
//
// Each end of a plain TCP link may offer, in its hello, a ring of shared memory for the
// tensor bytes it sends: a memfd of `shared_memory_bytes`, named by the offering process's
// pid and descriptor and a random token written at the ring's start. A peer on the same
// machine (and in the same pid namespace) opens /proc/<pid>/fd/<fd>, finds the token, and
// answers with a shared_ready frame; from then on the sender copies each large chunk into
// the ring and sends a shared_chunk frame (position, length) instead of the bytes: one
// copy in user space on each side instead of a trip through the kernel's TCP stack. The
// receiver copies the chunk out and then publishes how far it has consumed in the ring's
// header; a sender that finds no room sends the chunk over the socket as before, so it
// never waits on the ring. A peer elsewhere cannot open the ring (or finds another
// token) and never answers, and the link carries everything over TCP. A memfd has no
// name, so a killed process leaves nothing behind.

constexpr std::size_t k_ring_header = 4096;  // token (2 x u64), capacity (u64), consumed (u64)
constexpr std::size_t k_min_shared_chunk = 64 << 10;  // below: the socket is as cheap
// The largest tensor a sender's thread writes itself (tensor_link::send), when it does not
// go in place: a copy this small costs less than waking the writer.
constexpr std::size_t k_max_inline_bytes = 64 << 10;

// A ring: a region of shared memory whose first page holds the token (2 x u64), the
// capacity (u64) and how far the receiver has consumed (u64); the rest is the ring.
struct shared_ring {
  std::unique_ptr<shared_region> region;

  std::uint64_t capacity() const { return region->bytes() - k_ring_header; }
  char* data() const { return region->base() + k_ring_header; }
  // How far the receiver has consumed (monotonic), in the header both ends map.
  std::atomic_ref<std::uint64_t> consumed() const {
    return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(region->base() + 24));
  }

  // This end's ring of `bytes` (header included); null when the system has none to give.
  static std::unique_ptr<shared_ring> create(std::int64_t bytes) {
    if (bytes < static_cast<std::int64_t>(k_ring_header + 4 * k_min_shared_chunk)) return nullptr;
    auto r = std::make_unique<shared_ring>();
    r->region = shared_region::create("troupe-link", static_cast<std::size_t>(bytes));
    if (r->region == nullptr) return nullptr;
    const std::uint64_t capacity = r->capacity();
    std::memcpy(r->region->base() + 16, &capacity, sizeof capacity);
    return r;
  }

  // The ring the peer offered, mapped here; null when this process cannot reach it (another
  // machine or pid namespace, no permission) or it holds another token.
  static std::unique_ptr<shared_ring> open_offered(std::uint32_t pid, std::int32_t fd, const std::uint64_t token[2],
                                                   std::uint64_t bytes) {
    if (bytes < k_ring_header + 4 * k_min_shared_chunk) return nullptr;
    auto r = std::make_unique<shared_ring>();
    r->region = shared_region::open(pid, fd, token, bytes, /*writable=*/true);  // the receiver publishes `consumed`
    if (r->region == nullptr) return nullptr;
    std::uint64_t capacity = 0;
    std::memcpy(&capacity, r->region->base() + 16, sizeof capacity);
    return capacity == r->capacity() ? std::move(r) : nullptr;
  }
};

// Lends the ring this end mapped (the peer's) to the tensors read from it in place: a
// tensor that came whole in one shared chunk is handed on over the ring's bytes instead of
// copied out, and its region is consumed (the peer may write there again) only when the
// last reference to it goes. The consumed mark in the ring's header is the start of the
// oldest region still lent, else how far this end has read. A tensor kept for long keeps
// its region and everything after it from the peer, which then sends through the socket
// (correct, slower) until it goes. Deletes itself once the link is gone (detach) and no
// tensor holds its memory; the mapping lives as long.
class ring_lender final : public external_memory {
 public:
  explicit ring_lender(std::unique_ptr<shared_ring> ring) : ring_(std::move(ring)) {}
  ring_lender(const ring_lender&) = delete;
  ring_lender& operator=(const ring_lender&) = delete;

  const shared_ring& ring() const { return *ring_; }

  // A tensor over the ring's [position, position + bytes) (offset position % capacity).
  tensor lend(std::uint64_t position, std::uint64_t bytes, dtype type, tensor_shape shape) {
    char* at = ring_->data() + position % ring_->capacity();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      lent_[position] = at;
      read_ = position + bytes;
      publish();
    }
    return tensor(type, std::move(shape), buffer::adopt(at, bytes, this));
  }
  // Copied out through `end`.
  void read_through(std::uint64_t end) {
    std::lock_guard<std::mutex> lock(mutex_);
    read_ = end;
    publish();
  }
  void detach() {
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      detached_ = true;
      last = lent_.empty();
    }
    if (last) delete this;
  }
  void release(void* data, std::size_t) noexcept override {
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = lent_.begin(); it != lent_.end(); ++it) {
        if (it->second == data) {
          lent_.erase(it);
          break;
        }
      }
      publish();
      last = detached_ && lent_.empty();
    }
    if (last) delete this;
  }
  bool host_accessible() const override { return true; }

 private:
  void publish() {
    ring_->consumed().store(lent_.empty() ? read_ : lent_.begin()->first, std::memory_order_release);
  }
  std::unique_ptr<shared_ring> ring_;
  std::mutex mutex_;
  std::map<std::uint64_t, char*> lent_;  // by position: where each lent region starts
  std::uint64_t read_ = 0;
  bool detached_ = false;
};

// --- sends without copies: blocks of the sender's shared memory ----------------------------
//
// A server's large buffers live in shared memory (share_large_buffers_with_links). Once
// the peer has mapped this end's ring (so it reaches this process's memfds), a tensor whose
// bytes lie whole in such a block goes as a shared_block frame (the segment's descriptor,
// token and size, the bytes' offset, a hold number) instead of being copied: the peer maps
// the segment read-only (once per segment) and hands the tensor on over it, and this end
// holds the tensor (so nothing here writes into it: buffers held twice are never written
// in place) until the peer's shared_release names its hold. When the link ends with holds
// left, the peer may still read them: they are kept until its process is gone (quarantine).

// Where a lent block's release goes: the link's writer while the link lives.
struct release_channel {
  std::mutex mutex;
  std::function<void(std::uint64_t)> post;  // empty once the link is gone
};

// The memory of one tensor received over the peer's shared memory: read-only here; its
// release tells the peer (through the link, while it lives) that the hold is over.
class lent_block final : public external_memory {
 public:
  lent_block(std::uint64_t hold, std::shared_ptr<shared_region> segment, std::shared_ptr<release_channel> channel)
      : hold_(hold), segment_(std::move(segment)), channel_(std::move(channel)) {}
  void release(void*, std::size_t) noexcept override {
    {
      std::lock_guard<std::mutex> lock(channel_->mutex);
      if (channel_->post) channel_->post(hold_);
    }
    delete this;
  }
  bool host_accessible() const override { return true; }
  bool writable() const override { return false; }

 private:
  std::uint64_t hold_;
  std::shared_ptr<shared_region> segment_;  // the peer's, mapped read-only, as long as a tensor is over it
  std::shared_ptr<release_channel> channel_;
};

// The body of a shared_release or shared_refused frame: the holds, u64 each.
std::string holds_body(const std::vector<std::uint64_t>& holds) {
  body_writer w;
  for (std::uint64_t hold : holds) w.put(hold);
  return w.bytes;
}

// Tensors that peers may still read, kept until their processes end (a pidfd each, polled
// by one thread that lives as long as the process once there is any).
void quarantine(int pidfd, std::vector<tensor> held) {
  struct entry {
    int pidfd;
    std::vector<tensor> held;
  };
  struct state {
    std::mutex mutex;
    std::vector<entry> entries;
    bool watching = false;
  };
  static state* q = new state();  // never destroyed: its thread may outlive static teardown
  std::lock_guard<std::mutex> lock(q->mutex);
  q->entries.push_back({pidfd, std::move(held)});
  if (q->watching) return;
  q->watching = true;
  std::thread([] {
    pthread_setname_np(pthread_self(), "link.quarantine");
    for (;;) {
      std::vector<pollfd> fds;
      {
        std::lock_guard<std::mutex> lock(q->mutex);
        for (const entry& e : q->entries) fds.push_back({e.pidfd, POLLIN, 0});
      }
      if (fds.empty() || ::poll(fds.data(), fds.size(), 1000) <= 0) {
        if (fds.empty()) std::this_thread::sleep_for(std::chrono::seconds(1));
        continue;
      }
      std::vector<entry> gone;
      {
        std::lock_guard<std::mutex> lock(q->mutex);
        for (const pollfd& p : fds) {
          if (p.revents == 0) continue;
          auto it = std::find_if(q->entries.begin(), q->entries.end(), [&](const entry& e) { return e.pidfd == p.fd; });
          if (it == q->entries.end()) continue;
          gone.push_back(std::move(*it));
          q->entries.erase(it);
        }
      }
      for (entry& e : gone) ::close(e.pidfd);
    }
  }).detach();
}

std::string hello_body(const link_options& o, const std::string& to, const shared_ring* offer) {
  body_writer w;
  w.put(k_wire_version);
  w.put_string(o.local_task);
  w.put_string(o.cluster_id);
  w.put_string(to);
  // What follows is optional (a peer that knows nothing of it reads no further): the
  // window this end sends with (the peer acknowledges in pieces of a quarter of it) and
  // its shared-memory offer (pid 0: none).
  w.put(static_cast<std::uint64_t>(std::max<std::int64_t>(0, o.window_bytes)));
  w.put(static_cast<std::uint32_t>(offer != nullptr ? ::getpid() : 0));
  w.put(static_cast<std::int32_t>(offer != nullptr ? offer->region->fd() : -1));
  w.put(offer != nullptr ? offer->region->token()[0] : 0);
  w.put(offer != nullptr ? offer->region->token()[1] : 0);
  w.put(static_cast<std::uint64_t>(offer != nullptr ? offer->region->bytes() : 0));
  return w.bytes;
}

struct hello {
  std::uint32_t version = 0;
  std::string from, cluster_id, to;
  std::uint64_t window = 0;  // the peer's send window (0: not said)
  // The ring the peer offers, if any.
  std::uint32_t ring_pid = 0;
  std::int32_t ring_fd = -1;
  std::uint64_t ring_token[2] = {0, 0};
  std::uint64_t ring_bytes = 0;
};

result<hello> parse_hello(const std::string& body, const std::string& where) {
  body_reader r{body};
  hello h;
  h.version = r.get<std::uint32_t>();
  h.from = r.get_string();
  h.cluster_id = r.get_string();
  h.to = r.get_string();
  if (!r.ok) return unavailable_error(where, " sent a damaged hello");
  if (!r.bytes.empty()) {
    h.window = r.get<std::uint64_t>();
    h.ring_pid = r.get<std::uint32_t>();
    h.ring_fd = r.get<std::int32_t>();
    h.ring_token[0] = r.get<std::uint64_t>();
    h.ring_token[1] = r.get<std::uint64_t>();
    h.ring_bytes = r.get<std::uint64_t>();
    if (!r.ok) return unavailable_error(where, " sent a damaged hello");
  }
  return h;
}

// This end's offer for a link of `o` (none over TLS or when turned off).
std::unique_ptr<shared_ring> ring_to_offer(const link_options& o) {
  if (o.tls || o.shared_memory_bytes <= 0) return nullptr;
  return shared_ring::create(o.shared_memory_bytes);
}

// The peer's ring when it offered one this end can map (and this end takes rings).
std::unique_ptr<shared_ring> map_offered_ring(const hello& h, const link_options& o) {
  if (o.tls || o.shared_memory_bytes <= 0 || h.ring_bytes == 0) return nullptr;
  return shared_ring::open_offered(h.ring_pid, h.ring_fd, h.ring_token, h.ring_bytes);
}

// Why a hello cannot be accepted by `o`'s end, or empty.
std::string mismatch(const hello& h, const link_options& o, const std::string& expected_from) {
  if (h.version != k_wire_version) {
    return str_cat("task ", h.from, " speaks wire version ", std::to_string(h.version), ", this troupe ",
                   std::to_string(k_wire_version), " (another troupe version)");
  }
  if (h.cluster_id != o.cluster_id) {
    return str_cat("task ", h.from, " belongs to cluster '", h.cluster_id, "', not '", o.cluster_id, "'");
  }
  if (h.to != o.local_task) return str_cat("task ", h.from, " meant to reach task ", h.to, ", but this is ", o.local_task);
  if (!expected_from.empty() && h.from != expected_from) {
    return str_cat("task ", expected_from, " was expected but ", h.from, " answered");
  }
  return {};
}

struct outgoing {
  std::string key;
  tensor value;
  std::function<void(const status&)> done;
  // Where its bytes lie whole in this process's shared memory (a block that may go in
  // place, see write_in_place), looked up once when it is sent.
  std::optional<shared_block> block;
};

// The shared-memory block that holds all of `t`'s bytes, if one does and may go in place.
std::optional<shared_block> block_of(const tensor& t) {
  shared_block where;
  if (t.byte_size() < k_min_shared_chunk || !find_shared_block(t.raw_data(), t.byte_size(), &where) ||
      where.offset % buffer::k_alignment != 0) {
    return std::nullopt;
  }
  return where;
}

}  // namespace

std::int64_t default_shared_memory_bytes() {
  static const std::int64_t bytes = [] {
    const char* mb = std::getenv("TROUPE_LINK_SHARED_MEMORY_MB");
    if (mb == nullptr || *mb == '\0') return std::int64_t{8} << 20;
    char* end = nullptr;
    const long long n = std::strtoll(mb, &end, 10);
    if (*end != '\0' || n < 0 || n > (1 << 20)) {
      std::cerr << "troupe: TROUPE_LINK_SHARED_MEMORY_MB='" << mb << "' is not a number of megabytes; using 8\n";
      return std::int64_t{8} << 20;
    }
    return static_cast<std::int64_t>(n) << 20;
  }();
  return bytes;
}

bool share_large_buffers_with_links() {
  if (default_shared_memory_bytes() <= 0 || !env_switch("TROUPE_LINK_ZERO_COPY", true)) return false;
  return share_large_buffers(k_min_shared_chunk);
}

// --- the link ---------------------------------------------------------------------------

struct tensor_link::impl {
  std::unique_ptr<connection> conn;
  link_options options;
  std::string peer;
  handlers on;

  mutable std::mutex mutex;
  std::condition_variable wake;  // the writer's
  std::deque<outgoing> queue;
  std::int64_t queued = 0;
  std::int64_t unacknowledged = 0;
  std::uint64_t acks_to_send = 0;  // bytes received and handed on, not yet acknowledged
  // Acknowledgements go out once this many bytes are owed (a quarter of the peer's window:
  // it never waits on them), or with the next frame or heartbeat; 0: at once.
  std::uint64_t ack_every = 0;
  bool closing = false;
  // A thread is writing to the socket: the writer (frames, a tensor), or a sender writing
  // its tensor inline (send); no other thread writes meanwhile.
  bool writing = false;
  // What an inline send could not write without waiting (write_spill), and its `done`:
  // the writer writes it before anything else.
  std::string unsent;
  std::function<void(const status&)> unsent_done;
  bool writing_inline = false;  // the thread writing is a sender (it never waits)
  std::atomic<std::int64_t> sent_inline{0};  // tensors written by their senders' threads
  status failed;  // first failure
  bool failure_told = false;

  std::thread reader, writer;
  std::atomic<bool> stopping{false};

  // Shared memory (see shared_ring): ours, offered in the hello, with the writer's
  // position in it; the peer's, when this end mapped it.
  std::unique_ptr<shared_ring> out_ring;
  // The peer's ring, when this end mapped it, with the tensors lent from it (the lender
  // owns the mapping and deletes itself: see detach).
  ring_lender* lender = nullptr;
  std::atomic<std::int64_t> in_place{0};  // tensors lent from the peer's ring or its blocks
  // Sends without copies (see lent_block): the peer's process (its pid from its ring
  // offer, a pidfd of it while this end holds blocks for it), this end's holds by number,
  // the peer's segments mapped here (the reader's), releases owed to the peer.
  std::uint32_t peer_pid = 0;
  int peer_pidfd = -1;
  std::unordered_map<std::uint64_t, outgoing> held;  // key and tensor, no `done`
  std::uint64_t next_hold = 1;
  bool blocks_refused = false;  // the peer could not map a block: this end copies from then on
  bool refused_to_map = false;  // this end could not map one of the peer's (said once)
  std::atomic<std::int64_t> sent_in_place{0};
  std::map<std::array<std::uint64_t, 3>, std::shared_ptr<shared_region>> peer_segments;  // mapped read-only
  std::shared_ptr<release_channel> releases = std::make_shared<release_channel>();
  std::vector<std::uint64_t> releases_to_send;
  std::vector<std::uint64_t> refusals_to_send;  // blocks of the peer's this end could not map
  ~impl() {
    if (lender != nullptr) lender->detach();
    {
      std::lock_guard<std::mutex> lock(releases->mutex);
      releases->post = nullptr;
    }
    std::vector<tensor> still_held;
    for (auto& [hold, item] : held) still_held.push_back(std::move(item.value));
    if (!still_held.empty() && peer_pidfd >= 0) {
      quarantine(peer_pidfd, std::move(still_held));
    } else if (peer_pidfd >= 0) {
      ::close(peer_pidfd);
    }
  }
  std::uint64_t ring_written = 0;  // the writer's
  std::atomic<bool> peer_maps_ring{false};  // the peer answered our offer with shared_ready

  // Records the first failure, wakes both threads and tells the handler (unless closing).
  void fail(const status& why) {
    bool tell = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (failed.ok()) failed = why;
      tell = !failure_told && !stopping;
      failure_told = true;
    }
    ::shutdown(conn->fd, SHUT_RDWR);
    wake.notify_all();
    if (tell && on.failure) on.failure(why);
  }

  void read_loop();
  void write_loop();
  // Under `mutex`: whether the writer has something to do (what it waits for).
  bool writer_has_work() const {
    return !failed.ok() || closing || !unsent.empty() || acks_to_send >= std::max<std::uint64_t>(1, ack_every) ||
           !releases_to_send.empty() || !refusals_to_send.empty() ||
           (!queue.empty() && (unacknowledged == 0 || unacknowledged < options.window_bytes));
  }
  // Under `mutex`: whether the peer maps this end's blocks (its tensors may go in place).
  bool peer_takes_blocks() const { return peer_maps_ring && peer_pidfd >= 0 && !blocks_refused; }
  // Under `mutex`: `item`, counted as sent but not written, goes first in the queue again.
  void requeue_first(outgoing item) {
    const auto bytes = static_cast<std::int64_t>(item.value.byte_size());
    unacknowledged -= bytes;
    queued += bytes;
    queue.push_front(std::move(item));
  }
  // Whether `t` may be written by its sender's thread now (with `in_place`: it lies in a
  // shared block); under `mutex`.
  bool may_write_inline(const tensor& t, bool in_place) const;
  bool may_write_frames_inline() const;
  void write_inline(outgoing item);
  // After an inline write (writing set, t_spill cleared): hands what the socket did not
  // take to the writer with `done`, and wakes it if anything waits.
  void end_inline(write_spill spill, std::function<void(const status&)>* done, const status& s);
  // A tensor lent by the peer was let go here (lent_block): the release goes out at once,
  // written on this thread when the socket is free (so that the peer's next write of that
  // memory, a variable's update, need not copy it first).
  void post_release(std::uint64_t hold);
  // With `declined` (an inline send): a tensor that does not go in place and is larger
  // than k_max_inline_bytes is not written (*declined set), for the writer to copy.
  status write_tensor(outgoing& item, bool* declined = nullptr);
  status write_chunk(const char* bytes, std::size_t n, std::string_view before);
  std::optional<status> write_in_place(const outgoing& item, std::string_view begin);
  std::vector<outgoing> take_holds(std::string_view body);
  result<bool> read_shared_block(std::string_view body, std::uint64_t total, dtype type, const tensor_shape& shape,
                                 tensor* into);
  status write_pending_small_frames(clock_type::time_point* last_write);
};

void tensor_link::impl::read_loop() {
  tensor current;
  std::string current_key;
  dtype current_type = dtype::invalid;
  tensor_shape current_shape;
  std::uint64_t filled = 0, total = 0;
  clock_type::time_point sent_at;  // the peer's clock when it began writing the tensor
  bool in_tensor = false;
  // The tensor being read gets its own memory (false: the link failed for want of it).
  auto allocate = [&] {
    if (current.initialized()) return true;
    try {
      current = tensor(current_type, current_shape);
      return true;
    } catch (const std::bad_alloc&) {
      fail(resource_exhausted_error("no memory for a tensor of ", total, " bytes from task ", peer));
      return false;
    }
  };
  for (;;) {
    auto f = read_header(*conn, options.peer_timeout, peer);
    if (!f.ok()) return fail(f.error());
    switch (f->kind) {
      case frame_kind::heartbeat:
        if (f->length != 0) return fail(unavailable_error("task ", peer, " sent a damaged heartbeat"));
        break;
      case frame_kind::goodbye:
        return fail(unavailable_error("task ", peer, " closed the link"));
      case frame_kind::ack: {
        auto body = read_body(*conn, *f, options.peer_timeout, peer);
        if (!body.ok()) return fail(body.error());
        body_reader r{*body};
        const auto bytes = r.get<std::uint64_t>();
        if (!r.ok) return fail(unavailable_error("task ", peer, " sent a damaged acknowledgement"));
        {
          std::lock_guard<std::mutex> lock(mutex);
          unacknowledged -= static_cast<std::int64_t>(bytes);
          // The writer only when the window held it up (a wake-up for nothing otherwise).
          if (writing || !writer_has_work()) break;
        }
        wake.notify_all();
        break;
      }
      case frame_kind::tensor_begin: {
        if (in_tensor) return fail(unavailable_error("task ", peer, " began a tensor inside another"));
        auto body = read_body(*conn, *f, options.peer_timeout, peer);
        if (!body.ok()) return fail(body.error());
        body_reader r{*body};
        current_key = r.get_string();
        const auto type = static_cast<dtype>(r.get<std::int32_t>());
        const auto rank = r.get<std::uint32_t>();
        std::vector<std::int64_t> dims;
        for (std::uint32_t d = 0; r.ok && d < rank && d < k_max_rank; ++d) dims.push_back(r.get<std::int64_t>());
        total = r.get<std::uint64_t>();
        sent_at = clock_type::time_point(clock_type::duration(r.get<std::int64_t>()));
        if (!r.ok || rank > k_max_rank || dtype_size(type) == 0) {
          return fail(unavailable_error("task ", peer, " sent a damaged tensor header"));
        }
        auto shape = tensor_shape::make(std::move(dims));
        if (!shape.ok() ||
            static_cast<std::uint64_t>(shape->num_elements()) * dtype_size(type) != total) {
          return fail(unavailable_error("task ", peer, " sent a tensor header whose shape and size disagree"));
        }
        // Its memory comes with its first bytes: the ring's own when they come whole
        // through it, else a new tensor's.
        current_type = type;
        current_shape = std::move(*shape);
        current = tensor();
        if (total == 0 && !allocate()) return;
        filled = 0;
        in_tensor = true;
        break;
      }
      case frame_kind::chunk:
        if (!in_tensor || filled + f->length > total) {
          return fail(unavailable_error("task ", peer, " sent tensor bytes that belong to no tensor"));
        }
        if (!allocate()) return;
        if (auto s = read_exactly(*conn, static_cast<char*>(current.raw_data()) + filled, f->length, options.peer_timeout, peer);
            !s.ok()) {
          return fail(s);
        }
        filled += f->length;
        break;
      case frame_kind::shared_ready:
        if (f->length != 0 || out_ring == nullptr) {
          return fail(unavailable_error("task ", peer, " mapped shared memory this end never offered"));
        }
        peer_maps_ring = true;
        break;
      case frame_kind::shared_chunk: {
        auto body = read_body(*conn, *f, options.peer_timeout, peer);
        if (!body.ok()) return fail(body.error());
        body_reader r{*body};
        const auto position = r.get<std::uint64_t>();
        const auto length = r.get<std::uint64_t>();
        const shared_ring* in_ring = lender != nullptr ? &lender->ring() : nullptr;
        const std::uint64_t consumed = in_ring != nullptr ? in_ring->consumed().load(std::memory_order_acquire) : 0;
        if (!r.ok || in_ring == nullptr || length > in_ring->capacity() ||
            position % in_ring->capacity() + length > in_ring->capacity() || position < consumed ||
            position + length - consumed > in_ring->capacity()) {
          return fail(unavailable_error("task ", peer, " sent a damaged shared-memory chunk"));
        }
        if (!in_tensor || filled + length > total) {
          return fail(unavailable_error("task ", peer, " sent tensor bytes that belong to no tensor"));
        }
        const char* at = in_ring->data() + position % in_ring->capacity();
        if (filled == 0 && length == total && reinterpret_cast<std::uintptr_t>(at) % buffer::k_alignment == 0) {
          current = lender->lend(position, length, current_type, current_shape);  // in place: no copy
          in_place.fetch_add(1, std::memory_order_relaxed);
        } else {
          if (!allocate()) return;
          std::memcpy(static_cast<char*>(current.raw_data()) + filled, at, length);
          lender->read_through(position + length);
        }
        filled += length;
        break;
      }
      case frame_kind::shared_block: {
        auto body = read_body(*conn, *f, options.peer_timeout, peer);
        if (!body.ok()) return fail(body.error());
        if (!in_tensor || filled != 0) {
          return fail(unavailable_error("task ", peer, " sent tensor bytes that belong to no tensor"));
        }
        auto taken = read_shared_block(*body, total, current_type, current_shape, &current);
        if (!taken.ok()) return fail(taken.error());
        if (!*taken) {  // the peer sends it again, by copy
          in_tensor = false;
          current = tensor();
          continue;
        }
        in_place.fetch_add(1, std::memory_order_relaxed);
        filled = total;
        break;
      }
      case frame_kind::shared_refused: {
        auto body = read_body(*conn, *f, options.peer_timeout, peer);
        if (!body.ok()) return fail(body.error());
        std::vector<outgoing> again = take_holds(*body);
        if (again.empty()) return fail(unavailable_error("task ", peer, " sent a damaged refusal of shared memory"));
        {
          // Never acknowledged: sent again, first, by copy (their senders heard already).
          std::lock_guard<std::mutex> lock(mutex);
          blocks_refused = true;
          for (auto it = again.rbegin(); it != again.rend(); ++it) requeue_first(std::move(*it));
        }
        wake.notify_all();
        break;
      }
      case frame_kind::shared_release: {
        auto body = read_body(*conn, *f, options.peer_timeout, peer);
        if (!body.ok()) return fail(body.error());
        // Their memory goes here, outside the lock.
        if (take_holds(*body).empty()) return fail(unavailable_error("task ", peer, " sent a damaged release of shared memory"));
        break;
      }
      default:
        return fail(unavailable_error("task ", peer, " sent a frame out of place (", static_cast<int>(f->kind), ")"));
    }
    if (in_tensor && filled == total) {
      in_tensor = false;
      // The peer's clock is this machine's when it lent its ring (the same kernel's
      // monotonic clock); a peer elsewhere stamps its own.
      if (on.timed && lender != nullptr) on.timed(current_key, total, sent_at, clock_type::now());
      if (on.tensor) on.tensor(std::move(current_key), std::move(current));
      current = tensor();
      bool due = false;
      {
        std::lock_guard<std::mutex> lock(mutex);
        acks_to_send += total;
        due = acks_to_send >= std::max<std::uint64_t>(1, ack_every);
      }
      if (due) wake.notify_all();
    }
  }
}

// The holds a shared_release or shared_refused frame's body names, taken out of `held`;
// none when the body is damaged (no holds, a partial one, or one this end does not hold).
std::vector<outgoing> tensor_link::impl::take_holds(std::string_view body) {
  body_reader r{body};
  std::vector<outgoing> taken;
  std::lock_guard<std::mutex> lock(mutex);
  while (r.ok && !r.bytes.empty()) {
    auto it = held.find(r.get<std::uint64_t>());
    if (!r.ok || it == held.end()) return {};
    taken.push_back(std::move(it->second));
    held.erase(it);
  }
  return taken;
}

// A tensor over the peer's shared memory (the body of a shared_block frame for the tensor
// begun: `total` bytes of `type` and `shape`), mapping the segment when it is new here.
// False when this end cannot map it: the peer is asked to send it again by copy.
result<bool> tensor_link::impl::read_shared_block(std::string_view body, std::uint64_t total, dtype type,
                                                  const tensor_shape& shape, tensor* into) {
  body_reader r{body};
  const auto fd = r.get<std::int32_t>();
  std::uint64_t token[2];
  token[0] = r.get<std::uint64_t>();
  token[1] = r.get<std::uint64_t>();
  const auto segment_bytes = r.get<std::uint64_t>();
  const auto offset = r.get<std::uint64_t>();
  const auto length = r.get<std::uint64_t>();
  const auto hold = r.get<std::uint64_t>();
  if (!r.ok || !r.bytes.empty() || length != total || offset > segment_bytes || length > segment_bytes - offset ||
      offset % buffer::k_alignment != 0 || lender == nullptr) {
    return unavailable_error("task ", peer, " sent a damaged shared-memory block");
  }
  const std::array<std::uint64_t, 3> id{static_cast<std::uint64_t>(fd), token[0], token[1]};
  auto& segment = peer_segments[id];
  if (segment == nullptr && options.map_peer_blocks) segment = shared_region::open(peer_pid, fd, token, segment_bytes, false);
  if (segment == nullptr) {
    peer_segments.erase(id);
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      refusals_to_send.push_back(hold);
      first = !refused_to_map;
      refused_to_map = true;
    }
    wake.notify_all();
    if (first && options.map_peer_blocks) {
      std::cerr << "troupe: cannot map the shared memory of task " << peer << " (descriptor " << fd << " of process "
                << peer_pid << ", " << segment_bytes << " bytes: " << std::strerror(errno)
                << "); it sends by copy from now on\n";
    }
    return false;
  }
  *into = tensor(type, shape, buffer::adopt(segment->base() + offset, length, new lent_block(hold, segment, releases)));
  return true;
}

// `item` as a shared_block frame (after `begin`, its tensor_begin frame) when its bytes lie
// whole in a block of this process's shared memory and the peer can map it; nothing when
// it must be copied.
std::optional<status> tensor_link::impl::write_in_place(const outgoing& item, std::string_view begin) {
  const tensor& t = item.value;
  if (!item.block) return std::nullopt;
  const shared_block& where = *item.block;
  std::uint64_t hold = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!peer_takes_blocks()) return std::nullopt;
    hold = next_hold++;
    held.emplace(hold, outgoing{item.key, t, nullptr, std::nullopt});  // until the peer releases it (or its process ends)
  }
  body_writer w;
  w.put(static_cast<std::int32_t>(where.fd));
  w.put(where.token[0]);
  w.put(where.token[1]);
  w.put(where.segment_bytes);
  w.put(where.offset);
  w.put(static_cast<std::uint64_t>(t.byte_size()));
  w.put(hold);
  status written = write_frame(*conn, frame_kind::shared_block, w.bytes, peer, begin);
  if (written.ok()) {
    sent_in_place.fetch_add(1, std::memory_order_relaxed);
  } else {
    std::lock_guard<std::mutex> lock(mutex);
    held.erase(hold);  // not all of the frame went out: the peer cannot have taken it
  }
  return written;
}

status tensor_link::impl::write_pending_small_frames(clock_type::time_point* last_write) {
  std::uint64_t acks = 0;
  std::vector<std::uint64_t> released, refused;
  // Acknowledgements go when a quarter of the peer's window is due, or with a heartbeat:
  // one after each tensor cost a frame here and a wake-up of the peer's writer there.
  const bool heartbeat_due = clock_type::now() - *last_write >= options.heartbeat;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (heartbeat_due || acks_to_send >= std::max<std::uint64_t>(1, ack_every)) {
      acks = acks_to_send;
      acks_to_send = 0;
    }
    released.swap(releases_to_send);
    refused.swap(refusals_to_send);
  }
  for (auto [kind, holds] : {std::pair{frame_kind::shared_release, &released}, std::pair{frame_kind::shared_refused, &refused}}) {
    if (holds->empty()) continue;
    TROUPE_RETURN_IF_ERROR(write_frame(*conn, kind, holds_body(*holds), peer));
    *last_write = clock_type::now();
  }
  if (acks > 0) {
    body_writer w;
    w.put(acks);
    TROUPE_RETURN_IF_ERROR(write_frame(*conn, frame_kind::ack, w.bytes, peer));
    *last_write = clock_type::now();
  }
  if (clock_type::now() - *last_write >= options.heartbeat) {
    TROUPE_RETURN_IF_ERROR(write_frame(*conn, frame_kind::heartbeat, {}, peer));
    *last_write = clock_type::now();
  }
  return status();
}

status tensor_link::impl::write_tensor(outgoing& item, bool* declined) {
  const tensor& t = item.value;
  body_writer w;
  w.put_string(item.key);
  w.put(static_cast<std::int32_t>(t.type()));
  w.put(static_cast<std::uint32_t>(t.shape().rank()));
  for (std::int64_t d : t.shape().dims()) w.put(d);
  w.put(static_cast<std::uint64_t>(t.byte_size()));
  w.put(static_cast<std::int64_t>(clock_type::now().time_since_epoch().count()));  // for the peer's transit
  // The header goes with the first chunk (or alone for an empty tensor).
  std::string begin = encoded_frame(frame_kind::tensor_begin, w.bytes);
  if (t.byte_size() == 0) {
    iovec piece{begin.data(), begin.size()};
    return write_all(*conn, &piece, 1, peer);
  }
  if (auto sent = write_in_place(item, begin)) return *sent;
  if (declined != nullptr && t.byte_size() > k_max_inline_bytes) {
    *declined = true;  // nothing written: the peer began refusing blocks meanwhile
    return status();
  }
  auto last_write = clock_type::now();
  const char* data = static_cast<const char*>(t.raw_data());
  std::size_t chunk = static_cast<std::size_t>(std::max<std::int64_t>(4096, options.chunk_bytes));
  // Through the ring, a tensor of up to half of it in one chunk, which the peer takes in
  // place (ring_lender); a larger one in chunks of an eighth of it, which the peer copies
  // out one while this end copies the next in.
  if (peer_maps_ring) {
    chunk = t.byte_size() <= out_ring->capacity() / 2
                ? t.byte_size()
                : std::min<std::size_t>(chunk, std::max<std::size_t>(k_min_shared_chunk, out_ring->capacity() / 8));
  }
  for (std::size_t at = 0; at < t.byte_size(); at += chunk) {
    TROUPE_RETURN_IF_ERROR(write_chunk(data + at, std::min(chunk, t.byte_size() - at), begin));
    begin.clear();
    last_write = clock_type::now();
    // Acknowledgements of what this end received go out between chunks.
    TROUPE_RETURN_IF_ERROR(write_pending_small_frames(&last_write));
  }
  return status();
}

// One chunk of the tensor begun (after the frames `before`): into the ring when the peer
// maps it and it has room, else over the socket.
status tensor_link::impl::write_chunk(const char* bytes, std::size_t n, std::string_view before) {
  if (peer_maps_ring && n >= k_min_shared_chunk && n <= out_ring->capacity()) {
    const std::uint64_t capacity = out_ring->capacity();
    const std::uint64_t consumed = std::min(out_ring->consumed().load(std::memory_order_acquire), ring_written);
    // Where the peer can take it in place: aligned as a tensor's own memory is.
    std::uint64_t position = (ring_written + buffer::k_alignment - 1) / buffer::k_alignment * buffer::k_alignment;
    if (position % capacity + n > capacity) position += capacity - position % capacity;  // from the ring's start
    if (position + n - consumed <= capacity) {
      std::memcpy(out_ring->data() + position % capacity, bytes, n);
      ring_written = position + n;
      body_writer w;
      w.put(position);
      w.put(static_cast<std::uint64_t>(n));
      return write_frame(*conn, frame_kind::shared_chunk, w.bytes, peer, before);
    }
  }
  return write_frame(*conn, frame_kind::chunk, std::string_view(bytes, n), peer, before);
}

void tensor_link::impl::write_loop() {
  auto last_write = clock_type::now();
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    wake.wait_for(lock, options.heartbeat, [&] {
      return !writing && writer_has_work();  // a sender writing inline wakes this thread when done
    });
    if (!failed.ok()) break;
    if (writing) continue;  // woken by the heartbeat's time while a sender writes inline
    if (closing) {
      // Best effort: a peer that reads nothing more does not hold the close up. The
      // blocks of the peer's let go meanwhile go with it (else the peer would keep them
      // until this process ends).
      // What an inline send left unwritten goes first (it ends a frame begun).
      std::string last = std::move(unsent);
      unsent.clear();
      const std::size_t spilled = last.size();
      if (!releases_to_send.empty()) last += encoded_frame(frame_kind::shared_release, holds_body(releases_to_send));
      releases_to_send.clear();
      last += encoded_frame(frame_kind::goodbye, {});
      std::size_t put = 0;
      std::string why;
      (void)conn->write_some(last.data(), last.size(), &put, &why);
      if (spilled > 0 && put >= spilled && unsent_done) {
        auto done = std::move(unsent_done);
        unsent_done = nullptr;
        lock.unlock();
        done(status());
        lock.lock();
      }
      break;
    }
    // What an inline send left unwritten goes first, alone: it ends a frame begun.
    std::string rest = std::move(unsent);
    unsent.clear();
    auto rest_done = std::move(unsent_done);
    unsent_done = nullptr;
    const bool may_send =
        rest.empty() && !queue.empty() && (unacknowledged == 0 || unacknowledged < options.window_bytes);
    std::optional<outgoing> item;
    if (may_send) {
      item = std::move(queue.front());
      queue.pop_front();
      queued -= static_cast<std::int64_t>(item->value.byte_size());
      unacknowledged += static_cast<std::int64_t>(item->value.byte_size());
    }
    writing = true;
    lock.unlock();
    status s;
    if (!rest.empty()) {
      iovec piece{rest.data(), rest.size()};
      s = write_all(*conn, &piece, 1, peer);
      last_write = clock_type::now();
    } else {
      s = write_pending_small_frames(&last_write);
      if (s.ok() && item) {
        s = write_tensor(*item);
        last_write = clock_type::now();
      }
    }
    {
      std::lock_guard<std::mutex> written(mutex);
      writing = false;
    }
    if (rest_done) rest_done(s);
    if (item) {
      auto done = std::move(item->done);
      item.reset();  // the tensor's memory goes before its sender hears
      if (done) done(s);
    }
    if (!s.ok()) {
      fail(s);
      lock.lock();
      break;
    }
    lock.lock();
  }
  // Sends never written get the link's failure, or CANCELLED when it was closed.
  const status why = closing || failed.ok() ? cancelled_error("the link to task ", peer, " was closed") : failed;
  std::deque<outgoing> left;
  left.swap(queue);
  queued = 0;
  auto spilled_done = std::move(unsent_done);
  unsent_done = nullptr;
  unsent.clear();
  lock.unlock();
  if (spilled_done) spilled_done(why);
  for (outgoing& o : left) {
    if (o.done) o.done(why);
  }
}

tensor_link::tensor_link(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}

tensor_link::~tensor_link() {
  if (!impl_) return;
  impl_->stopping = true;
  bool busy = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->closing = true;
    busy = impl_->writing && !impl_->writing_inline;  // a sender writing inline never waits
  }
  // A writer inside a tensor may wait on a peer that reads no more: cut the connection
  // (the peer sees it closed); an idle one says goodbye and ends.
  if (busy) ::shutdown(impl_->conn->fd, SHUT_RDWR);
  impl_->wake.notify_all();
  if (impl_->writer.joinable()) impl_->writer.join();
  ::shutdown(impl_->conn->fd, SHUT_RDWR);
  if (impl_->reader.joinable()) impl_->reader.join();
  // A link never started still owes its queued sends an answer (and a spilled one).
  std::deque<outgoing> left;
  left.swap(impl_->queue);
  if (auto spilled = std::move(impl_->unsent_done)) spilled(cancelled_error("the link to task ", impl_->peer, " was closed"));
  for (outgoing& o : left) {
    if (o.done) o.done(cancelled_error("the link to task ", impl_->peer, " was closed"));
  }
}

void tensor_link::start(handlers h) {
  impl_->on = std::move(h);
  impl_->reader = std::thread([i = impl_.get()] {
    pthread_setname_np(pthread_self(), "link.read");
    block_sigpipe_for_this_thread();
    i->read_loop();
  });
  impl_->writer = std::thread([i = impl_.get()] {
    pthread_setname_np(pthread_self(), "link.write");
    block_sigpipe_for_this_thread();
    i->write_loop();
  });
}

const std::string& tensor_link::peer() const { return impl_->peer; }

void tensor_link::send(std::string key, tensor value, std::function<void(const status&)> done) {
  status refused;
  if (dtype_size(value.type()) == 0) {
    refused = invalid_argument_error("a ", dtype_name(value.type()), " tensor cannot be sent to task ", impl_->peer,
                                     " (only fixed-size element types cross processes)");
  }
  // Looked up before the lock (the arena has a lock of its own).
  std::optional<shared_block> block = block_of(value);
  std::optional<outgoing> now;  // written on this thread
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (refused.ok() && !impl_->failed.ok()) refused = impl_->failed;
    if (refused.ok() && impl_->closing) refused = cancelled_error("the link to task ", impl_->peer, " was closed");
    if (refused.ok() && impl_->may_write_inline(value, block.has_value())) {
      impl_->writing = impl_->writing_inline = true;
      impl_->unacknowledged += static_cast<std::int64_t>(value.byte_size());
      now.emplace(outgoing{std::move(key), std::move(value), std::move(done), block});
    } else if (refused.ok()) {
      impl_->queued += static_cast<std::int64_t>(value.byte_size());
      impl_->queue.push_back({std::move(key), std::move(value), std::move(done), block});
    }
  }
  if (!refused.ok()) {
    if (done) done(refused);
    return;
  }
  if (now) return impl_->write_inline(std::move(*now));
  impl_->wake.notify_all();
}

// Inline: a tensor that goes in place (its frame alone) or one of at most
// k_max_inline_bytes, on plain TCP, when nothing waits before it and the window has room;
// else the writer's. (Waking the writer for each tensor cost a hand-off between threads
// per tensor, two cores' wake-up each.)
bool tensor_link::impl::may_write_inline(const tensor& t, bool in_place) const {
  if (!may_write_frames_inline() || !queue.empty()) return false;
  if (unacknowledged > 0 && unacknowledged >= options.window_bytes) return false;
  if (in_place && peer_takes_blocks()) return true;
  return t.byte_size() <= k_max_inline_bytes;
}

bool tensor_link::impl::may_write_frames_inline() const {
  return inline_writes_enabled() && conn->ssl == nullptr && !writing && unsent.empty() && failed.ok() && !closing;
}

// Writes `item` on this thread, the socket not waited for: what it does not take now is
// left to the writer (unsent), which calls `done` once it is out. A block the peer began
// refusing meanwhile goes back to the front of the queue, for the writer to copy.
void tensor_link::impl::write_inline(outgoing item) {
  write_spill spill;
  bool declined = false;
  status s;
  {
    spill_scope spilling(spill);
    s = write_tensor(item, &declined);
  }
  if (declined) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      requeue_first(std::move(item));
      writing = writing_inline = false;
    }
    wake.notify_all();
    return;
  }
  sent_inline.fetch_add(1, std::memory_order_relaxed);
  auto done = std::move(item.done);
  item.value = tensor();  // the tensor's memory goes before its sender hears
  end_inline(std::move(spill), &done, s);
  if (done) done(s);
  if (!s.ok()) fail(s);
}

void tensor_link::impl::end_inline(write_spill spill, std::function<void(const status&)>* done, const status& s) {
  bool wake_writer = false;
  status ended;  // the link failed first: the spilled bytes never go
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!s.ok() && failed.ok()) failed = s;  // before another thread may write
    writing = writing_inline = false;
    if (s.ok() && !spill.bytes.empty()) {
      if (!failed.ok()) {
        ended = failed;
      } else {
        // Also when closing: the writer's goodbye comes after these bytes, which end a
        // frame begun.
        unsent = std::move(spill.bytes);
        if (done != nullptr) {
          unsent_done = std::move(*done);
          *done = nullptr;
        }
      }
    }
    wake_writer = writer_has_work();
  }
  if (wake_writer) wake.notify_all();
  if (!ended.ok() && done != nullptr && *done) {
    auto d = std::move(*done);
    *done = nullptr;
    d(ended);
  }
}

void tensor_link::impl::post_release(std::uint64_t hold) {
  std::vector<std::uint64_t> holds;
  {
    std::lock_guard<std::mutex> lock(mutex);
    releases_to_send.push_back(hold);
    if (may_write_frames_inline()) {
      writing = writing_inline = true;
      holds.swap(releases_to_send);
    }
  }
  if (holds.empty()) {
    wake.notify_all();
    return;
  }
  write_spill spill;
  status s;
  {
    spill_scope spilling(spill);
    s = write_frame(*conn, frame_kind::shared_release, holds_body(holds), peer);
  }
  // Failed: not fail() here (a tensor's release may come from anywhere, and fail() tells
  // the handler); end_inline records it, and the reader, woken by the shutdown, tells.
  if (!s.ok()) ::shutdown(conn->fd, SHUT_RDWR);
  end_inline(std::move(spill), nullptr, s);
}

std::int64_t tensor_link::unacknowledged_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->unacknowledged;
}

std::int64_t tensor_link::queued_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->queued;
}

bool tensor_link::shares_memory() const { return impl_->peer_maps_ring; }

std::int64_t tensor_link::received_in_place() const { return impl_->in_place.load(std::memory_order_relaxed); }

std::int64_t tensor_link::sent_in_place() const { return impl_->sent_in_place.load(std::memory_order_relaxed); }
std::int64_t tensor_link::sent_inline() const { return impl_->sent_inline.load(std::memory_order_relaxed); }
bool tensor_link::over_local_socket() const { return impl_->conn->local; }

std::int64_t tensor_link::held_for_peer() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return static_cast<std::int64_t>(impl_->held.size());
}

status tensor_link::failure() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->failed;
}

namespace {

// The link of connection `c` once both hellos are through (either end): acknowledgements
// paced by the peer's window, the peer's ring mapped (and shared_ready sent) when it
// offered one this end can map, this end's own offer kept for its sends.
result<std::unique_ptr<tensor_link::impl>> link_after_hellos(std::unique_ptr<connection> c, link_options options,
                                                             std::string peer, const hello& h,
                                                             std::unique_ptr<shared_ring> offer,
                                                             const std::string& who) {
  auto link = std::make_unique<tensor_link::impl>();
  link->ack_every = h.window / 4;
  if (auto in_ring = map_offered_ring(h, options)) {
    link->lender = new ring_lender(std::move(in_ring));
    link->peer_pid = h.ring_pid;
    // This end lends the peer blocks only while it can tell when the peer's process ends.
    link->peer_pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(h.ring_pid), 0));
    TROUPE_RETURN_IF_ERROR(write_frame(*c, frame_kind::shared_ready, {}, who));
  }
  // A release goes out at once: the peer's next write of that memory (a variable's update)
  // copies it first while this end holds it.
  link->releases->post = [l = link.get()](std::uint64_t hold) { l->post_release(hold); };
  link->out_ring = std::move(offer);
  link->conn = std::move(c);
  link->options = std::move(options);
  link->peer = std::move(peer);
  return link;
}

}  // namespace

result<std::unique_ptr<tensor_link>> tensor_link::connect(const std::string& host, int port, const std::string& peer,
                                                          link_options options) {
  const std::string where = str_cat(host, ":", port);
  context_ptr context;
  if (options.tls) {
    auto made = make_tls_context(*options.tls);
    if (!made.ok()) return made.error();
    context = std::move(*made);
  }
  auto found = resolve(host, port, false);
  if (!found.ok()) return found.error();
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(*found, ::freeaddrinfo);
  const auto deadline = clock_type::now() + options.connect_timeout;
  const std::string answerer = str_cat(peer, " at ", where);
  auto too_late = [&] {
    return deadline_exceeded_error("task ", peer, " at ", where, " did not answer within ", options.connect_timeout.count(),
                                   " ms");
  };
  status last = unavailable_error("no address for ", where);
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    auto c = std::make_unique<connection>();
    if (context == nullptr) c->fd = connect_local(a->ai_addr, port);
    c->local = c->fd >= 0;
    if (c->fd < 0) {
      c->fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (c->fd < 0) {
        last = unavailable_error("cannot make a socket for ", where, ": ", std::strerror(errno));
        continue;
      }
      if (::connect(c->fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
        last = unavailable_error("cannot reach task ", peer, " at ", where, ": ", std::strerror(errno));
        continue;
      }
      const int ready = wait_for(c->fd, POLLOUT, deadline);
      int error = 0;
      socklen_t length = sizeof error;
      if (ready == 0) return too_late();
      if (ready < 0 || ::getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
        last = unavailable_error("cannot reach task ", peer, " at ", where, ": ", std::strerror(error != 0 ? error : errno),
                                 error == ECONNREFUSED ? " (nothing listens there)" : "");
        continue;
      }
      set_socket_options(c->fd);
    }
    if (context != nullptr) {
      if (status s = tls_handshake(*c, context.get(), true, deadline, answerer); !s.ok()) {
        return s.error_code() == code::deadline_exceeded ? too_late() : s;
      }
    }
    auto offer = ring_to_offer(options);
    TROUPE_RETURN_IF_ERROR(write_frame(*c, frame_kind::hello, hello_body(options, peer, offer.get()), answerer));
    const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()),
                               std::chrono::milliseconds(1));
    auto f = read_header(*c, left, answerer);
    if (!f.ok()) return f.error().message().find("sent nothing") != std::string::npos ? too_late() : f.error();
    auto body = read_body(*c, *f, left, answerer);
    if (!body.ok()) return body.error();
    if (f->kind == frame_kind::refuse) {
      return unavailable_error("task ", peer, " at ", where, " refused this link: ", *body);
    }
    if (f->kind != frame_kind::hello) return unavailable_error(where, " did not answer with a troupe hello");
    auto h = parse_hello(*body, where);
    if (!h.ok()) return h.error();
    std::string why = mismatch(*h, options, peer);
    if (why.empty() && context != nullptr && certificate_task(*c) != peer) {
      why = str_cat("the certificate of the task answering at ", where, " names '", certificate_task(*c), "', not ", peer);
    }
    if (!why.empty()) {
      (void)write_frame(*c, frame_kind::refuse, why, answerer);
      return unavailable_error("refused the link to ", where, ": ", why);
    }
    auto link = link_after_hellos(std::move(c), std::move(options), peer, *h, std::move(offer), answerer);
    if (!link.ok()) return link.error();
    return std::unique_ptr<tensor_link>(new tensor_link(std::move(*link)));
  }
  return last;
}

// --- the listener -----------------------------------------------------------------------

struct link_listener::impl {
  int fd = -1;
  int local_fd = -1;  // the abstract Unix socket beside it (local sockets), or -1
  int port = 0;
  link_options options;
  context_ptr context;  // null: plain TCP
  std::function<void(std::unique_ptr<tensor_link>)> accepted;
  std::function<void(const status&)> refused;
  std::atomic<bool> stopping{false};
  std::thread thread;

  ~impl() {
    if (fd >= 0) ::close(fd);
    if (local_fd >= 0) ::close(local_fd);
  }

  void accept_loop() {
    while (!stopping) {
      pollfd p[2] = {{fd, POLLIN, 0}, {local_fd, POLLIN, 0}};
      const int n = ::poll(p, local_fd >= 0 ? 2 : 1, 100);
      if (n <= 0 || stopping) continue;
      for (const pollfd& ready : p) {
        if (ready.fd < 0 || (ready.revents & POLLIN) == 0) continue;
        sockaddr_storage from{};
        socklen_t length = sizeof from;
        const int peer_fd = ::accept4(ready.fd, reinterpret_cast<sockaddr*>(&from), &length, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (peer_fd < 0) continue;
        auto c = std::make_unique<connection>();
        c->fd = peer_fd;
        c->local = ready.fd == local_fd;
        greet(std::move(c), from);
      }
    }
  }

  // Listens on the abstract Unix socket of the loopback address `a` (or of 127.0.0.1 or
  // ::1 when `a` is every address) beside the TCP port; without one when the name is
  // taken or local sockets are off.
  void listen_locally(const sockaddr* a) {
    if (context != nullptr || !local_sockets_enabled()) return;
    std::string host = loopback_name(a);
    if (host.empty() && a->sa_family == AF_INET &&
        reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr == htonl(INADDR_ANY)) {
      host = "127.0.0.1";
    } else if (host.empty() && a->sa_family == AF_INET6 &&
               IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr)) {
      host = "::1";
    }
    if (host.empty()) return;
    socklen_t length = 0;
    const sockaddr_un u = local_address(host, port, &length);
    local_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (local_fd >= 0 && ::bind(local_fd, reinterpret_cast<const sockaddr*>(&u), length) == 0 &&
        ::listen(local_fd, 64) == 0) {
      return;
    }
    if (local_fd >= 0) ::close(local_fd);
    local_fd = -1;
  }

  // The TLS handshake and hello of an accepted connection, within connect_timeout.
  void greet(std::unique_ptr<connection> c, const sockaddr_storage& from) {
    std::string who = str_cat("a peer on this machine (the local socket of port ", port, ")");
    if (!c->local) {
      char host[NI_MAXHOST] = "?", service[NI_MAXSERV] = "?";
      ::getnameinfo(reinterpret_cast<const sockaddr*>(&from), sizeof from, host, sizeof host, service, sizeof service,
                    NI_NUMERICHOST | NI_NUMERICSERV);
      who = str_cat("a peer at ", host, ":", service);
      set_socket_options(c->fd);
    }
    auto refuse = [&](const status& why, bool tell_peer) {
      if (tell_peer) (void)write_frame(*c, frame_kind::refuse, why.message(), who);
      c.reset();
      if (refused) {
        refused(why);
      } else {
        std::cerr << "troupe: refused a link on port " << port << ": " << why.message() << "\n";
      }
    };
    const auto deadline = clock_type::now() + options.connect_timeout;
    if (context != nullptr) {
      if (status s = tls_handshake(*c, context.get(), false, deadline, who); !s.ok()) return refuse(s, false);
    }
    auto f = read_header(*c, options.connect_timeout, who);
    if (!f.ok()) return refuse(f.error(), false);
    if (f->kind != frame_kind::hello) return refuse(unavailable_error(who, " did not open with a hello"), false);
    auto body = read_body(*c, *f, options.connect_timeout, who);
    if (!body.ok()) return refuse(body.error(), false);
    auto h = parse_hello(*body, who);
    if (!h.ok()) return refuse(h.error(), false);
    std::string why = mismatch(*h, options, "");
    if (why.empty() && context != nullptr && certificate_task(*c) != h->from) {
      why = str_cat("task ", h->from, " presented a certificate naming '", certificate_task(*c), "'");
    }
    if (!why.empty()) return refuse(unavailable_error(why, " (", who, ")"), true);
    auto offer = ring_to_offer(options);
    if (status s = write_frame(*c, frame_kind::hello, hello_body(options, h->from, offer.get()), who); !s.ok()) {
      return refuse(s, false);
    }
    auto link = link_after_hellos(std::move(c), options, h->from, *h, std::move(offer), who);
    if (!link.ok()) return refuse(link.error(), false);
    accepted(std::unique_ptr<tensor_link>(new tensor_link(std::move(*link))));
  }
};

link_listener::link_listener(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}

link_listener::~link_listener() {
  impl_->stopping = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

int link_listener::port() const { return impl_->port; }

result<std::unique_ptr<link_listener>> link_listener::listen(const std::string& host, int port, link_options options,
                                                             std::function<void(std::unique_ptr<tensor_link>)> accepted,
                                                             std::function<void(const status&)> refused) {
  auto found = resolve(host, port, true);
  if (!found.ok()) return found.error();
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(*found, ::freeaddrinfo);
  auto l = std::make_unique<impl>();
  if (options.tls) {
    auto made = make_tls_context(*options.tls);
    if (!made.ok()) return made.error();
    l->context = std::move(*made);
  }
  l->options = std::move(options);
  l->accepted = std::move(accepted);
  l->refused = std::move(refused);
  const addrinfo* a = addresses.get();
  l->fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
  if (l->fd < 0) return unavailable_error("cannot make a socket for ", host, ":", port, ": ", std::strerror(errno));
  int one = 1;
  ::setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(l->fd, a->ai_addr, a->ai_addrlen) != 0) {
    const int error = errno;
    return unavailable_error("cannot listen on ", host, ":", port, ": ", std::strerror(error),
                             error == EADDRINUSE ? " (another process holds the port)" : "");
  }
  if (::listen(l->fd, 64) != 0) return unavailable_error("cannot listen on ", host, ":", port, ": ", std::strerror(errno));
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(l->fd, reinterpret_cast<sockaddr*>(&bound), &length);
  l->port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  l->listen_locally(a->ai_addr);
  l->thread = std::thread([i = l.get()] {
    pthread_setname_np(pthread_self(), "link.accept");
    block_sigpipe_for_this_thread();
    i->accept_loop();
  });
  return std::unique_ptr<link_listener>(new link_listener(std::move(l)));
}

}  // namespace troupe::cluster
