// transport: the bulk path for tensors between two processes of a real cluster.
//
// One TCP connection per pair of tasks carries tensors as raw bytes: the sender writes a
// tensor's memory straight to the socket (no copy in user space), the receiver reads
// straight into the memory of the tensor it hands on (one copy, the kernel's). Its reader
// and writer are threads of the link's own, never CAF's: a link never blocks an actor.
// The control plane (cluster/remote_task.h) sends its steps' runs and answers over a
// client's links as tensors under keys of their own; the rest of it (hellos, prepares,
// aborts) goes over CAF's middleman, on a connection of its own, so that an abort never
// waits behind bulk transfers.
//
//   auto listener = link_listener::listen("127.0.0.1", 0, options, [&](std::unique_ptr<tensor_link> l) {...});
//   auto link = tensor_link::connect("127.0.0.1", listener->port(), "/job:ps/replica:0/task:0", options);
//   (*link)->start({.tensor = [](std::string key, tensor t) {...}, .failure = [](const status& s) {...}});
//   (*link)->send("step 7;w:0", value, [](const status& s) {...});
//
// The wire (doc/cluster.md): frames of a 16-byte header (magic "TRPL", kind, body length)
// and a body. A link opens with a hello each way (wire version, the sender's task, the
// cluster's identity, the task it means to reach); a mismatch is refused with a refuse
// frame whose reason both ends report. A tensor is a tensor_begin frame (key, dtype,
// shape, bytes, the sender's monotonic clock when it began writing it) and chunk frames
// of at most `chunk_bytes`; acknowledgements and heartbeats may come between chunks.
// Between processes of one machine large chunks go through a ring of shared memory the
// sender offers, and a tensor already in the sender's shared memory (a server's large
// buffers: share_large_buffers_with_links) goes as the block's name alone: the receiver
// maps it read-only and the sender holds it until the receiver releases it.
// Credits: a sender starts no tensor while the bytes it sent and the receiver has not
// acknowledged (after handing the tensor on) reach `window_bytes`; sends beyond wait in
// order, each `done` runs when its bytes are written, so a producer that waits for
// `done` holds at most a window of the link's memory.
// Failure: heartbeats every `heartbeat` while idle; silence for `peer_timeout`, a closed
// or reset connection, or a frame that makes no sense fail the link with UNAVAILABLE
// naming the peer task: the failure handler runs once, and every send not yet written
// gets the same status.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace troupe::cluster {

// Mutual TLS on a link: this task's certificate and key, and the cluster's CA (paths; the
// files `troupe cert init` makes). Each end presents its certificate, trusts only the CA,
// and checks that the peer's certificate names (subject common name) the task its hello
// claims, and on connect the task it meant to reach.
struct link_tls {
  std::string ca_certificate;
  std::string certificate;
  std::string key;
};

// 8 MB, or TROUPE_LINK_SHARED_MEMORY_MB megabytes when set (0 turns shared memory off).
std::int64_t default_shared_memory_bytes();

// Puts this process's buffers of 64 KB and more in shared memory (share_large_buffers,
// core/buffer.h), so that its links to processes on this machine send such tensors without
// copying them (doc/cluster.md, "Sends without copies"). A server calls it at start, before
// it allocates. Does nothing and says false when shared memory is off (above, or
// TROUPE_LINK_ZERO_COPY=0) or the system has no memfd.
bool share_large_buffers_with_links();

struct link_options {
  std::string local_task;  // this end's task ("/job:worker/replica:0/task:1"), sent in the hello
  std::string cluster_id;  // the cluster's identity (a fingerprint of its file): both ends must agree
  std::int64_t window_bytes = std::int64_t{64} << 20;
  std::int64_t chunk_bytes = std::int64_t{4} << 20;
  std::chrono::milliseconds heartbeat{100};
  std::chrono::milliseconds peer_timeout{1000};
  std::chrono::milliseconds connect_timeout{3000};
  std::optional<link_tls> tls;  // none: plain TCP
  // A peer on the same machine takes the bytes of large chunks through a ring of shared
  // memory of this size that this end offers (plain TCP only; 0: everything through the
  // socket). Doc: doc/cluster.md, "Shared memory".
  std::int64_t shared_memory_bytes = default_shared_memory_bytes();
  // Whether this end maps the blocks of shared memory the peer sends tensors in (false:
  // it asks the peer to send them again by copy, as when a mapping fails, and the peer
  // copies from then on). Doc: doc/cluster.md, "Sends without copies".
  bool map_peer_blocks = true;
};

// The version of the wire format: both ends of a link must speak the same.
// 3: transfer keys carry the receiver's incarnation; 4: tensors sent in place from shared memory.
inline constexpr std::uint32_t k_wire_version = 4;

class tensor_link {
 public:
  struct handlers {
    // A tensor received under its key, on the link's reader thread (keep it short: the
    // next frames wait; the tensor is acknowledged when it returns).
    std::function<void(std::string key, tensor value)> tensor;
    // The link failed or the peer closed it; once, on a thread of the link.
    std::function<void(const status&)> failure;
    // Optional: a tensor's transit, from when the peer began writing it (the tensor_begin
    // frame's stamp of the peer's monotonic clock) to its last byte here, just before
    // `tensor` runs; only when the peer shares this machine's clock (it lent this end its
    // ring of shared memory), on the link's reader thread, with the tensor's key.
    std::function<void(const std::string& key, std::uint64_t bytes, std::chrono::steady_clock::time_point sent,
                       std::chrono::steady_clock::time_point arrived)>
        timed = nullptr;
  };

  // Connects to host:port, where task `peer` must answer, within options.connect_timeout.
  // Errors: UNAVAILABLE (nothing listens there, unreachable, refused by the peer: the
  // reason given), DEADLINE_EXCEEDED (no answer in time), INVALID_ARGUMENT (bad address).
  static result<std::unique_ptr<tensor_link>> connect(const std::string& host, int port, const std::string& peer,
                                                      link_options options);
  // Closes the link (the peer hears of it): sends not yet written get CANCELLED; no handler
  // runs once it returns.
  ~tensor_link();
  tensor_link(const tensor_link&) = delete;
  tensor_link& operator=(const tensor_link&) = delete;

  // Starts reading (and the heartbeats); once, before the first send.
  void start(handlers h);
  const std::string& peer() const;
  // Sends `value` to the peer under `key`; `done` runs once: OK when its bytes are
  // written, else the link's failure (or CANCELLED when closed). Over plain TCP, a tensor
  // that goes in place or of at most 64 KB is written by the calling thread itself when
  // nothing waits before it (no hand-off to the link's writer: a thread's wake-up saved
  // per tensor); the socket is never waited for (what it does not take at once is left to
  // the writer), so `done` may run before send returns, on the caller's thread. The
  // others are queued for the writer, and `done` runs on it. TROUPE_LINK_INLINE=0 queues
  // them all.
  void send(std::string key, tensor value, std::function<void(const status&)> done);
  // Bytes sent and not yet acknowledged by the peer; bytes queued and not yet sent.
  std::int64_t unacknowledged_bytes() const;
  std::int64_t queued_bytes() const;
  // OK while the link is up, else why it failed.
  status failure() const;
  // Whether this end's large chunks go through shared memory (the peer, on this machine,
  // mapped the ring this end offered; it says so shortly after the link starts).
  bool shares_memory() const;
  // Tensors received here that the handler got over the peer's ring itself (whole in one
  // shared chunk, aligned) or over a block of the peer's shared memory: no copy on this
  // end. Their region of the ring is the peer's again only once they are gone.
  std::int64_t received_in_place() const;
  // Tensors sent from this process's shared memory (share_large_buffers_with_links)
  // without a copy, and those of them the peer still reads (this end holds them until it
  // says it is done).
  std::int64_t sent_in_place() const;
  std::int64_t held_for_peer() const;
  // Tensors written by the threads that sent them (see send).
  std::int64_t sent_inline() const;
  // Whether the link runs over a local (Unix) socket rather than TCP: both ends on one
  // machine, reached at a loopback address (doc/cluster.md, "Local sockets").
  bool over_local_socket() const;

  struct impl;  // internal

 private:
  explicit tensor_link(std::unique_ptr<impl> impl);
  friend class link_listener;
  std::unique_ptr<impl> impl_;
};

// A listening socket that turns each peer completing the hello into a link (not yet
// started). Peers refused (another cluster or wire version, a hello naming another task,
// not a troupe link at all) are told why, and `refused` hears of each (default: a line on
// stderr).
class link_listener {
 public:
  // Port 0: any free port (port() says which). Errors: INVALID_ARGUMENT (bad address),
  // UNAVAILABLE (the port is in use, naming it).
  static result<std::unique_ptr<link_listener>> listen(const std::string& host, int port, link_options options,
                                                       std::function<void(std::unique_ptr<tensor_link>)> accepted,
                                                       std::function<void(const status&)> refused = nullptr);
  ~link_listener();  // stops accepting; links already accepted stay
  link_listener(const link_listener&) = delete;
  link_listener& operator=(const link_listener&) = delete;
  int port() const;

  struct impl;  // internal

 private:
  explicit link_listener(std::unique_ptr<impl> impl);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::cluster
