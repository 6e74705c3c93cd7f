// Sends without copies (cluster/transport.h, doc/cluster.md "Sends without copies"): this
// process puts its large buffers in shared memory, as a server does, so tensors sent to a
// peer on this machine go as blocks of it that the peer maps read-only; the sender holds
// each until the peer is done with it, and past the link's end while the peer's process
// lives. (A test binary of its own: the rest of the transport tests keep their buffers on
// the heap and test the copying paths.)
#include "cluster/transport.h"
#include "tests/cluster/link_server.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <algorithm>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "core/buffer.h"
#include "kernels/kernel.h"

namespace troupe::cluster {
namespace {

using namespace std::chrono_literals;
using namespace troupe::cluster::testing;

// Whether `holds` comes true within `limit`.
bool eventually(const std::function<bool()>& holds, std::chrono::milliseconds limit = 5s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!holds()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST_CASE("large buffers come from shared memory once a process shares them", "[cluster][transport]") {
  const tensor before = counting(dtype::float32, {1 << 16}, 1);  // 256 KB, maybe on the heap
  REQUIRE(share_large_buffers_with_links());
  const tensor big = counting(dtype::float32, {1 << 16}, 2);
  const tensor small = counting(dtype::float32, {1000}, 3);  // 4 KB: below 64 KB
  shared_block where;
  REQUIRE(find_shared_block(big.raw_data(), big.byte_size(), &where));
  CHECK(where.fd >= 0);
  CHECK(where.offset % 4096 == 64);  // page-aligned blocks, the data after a 64-byte header
  CHECK(where.segment_bytes >= where.offset + big.byte_size());
  // The segment starts with the token that whoever maps it checks.
  std::uint64_t token[2] = {0, 0};
  REQUIRE(::pread(where.fd, token, sizeof token, 0) == sizeof token);
  CHECK(token[0] == where.token[0]);
  CHECK(token[1] == where.token[1]);
  CHECK_FALSE(find_shared_block(small.raw_data(), small.byte_size(), &where));
  // Bytes that run past the segment are not a block of it.
  REQUIRE(find_shared_block(big.raw_data(), big.byte_size(), &where));
  CHECK_FALSE(find_shared_block(big.raw_data(), where.segment_bytes, &where));
  (void)before;
}

TEST_CASE("a tensor in shared memory crosses a link uncopied and read-only; its sender holds it until the peer lets go",
          "[cluster][transport]") {
  REQUIRE(share_large_buffers_with_links());
  inbox at_ps, at_worker;  // outlive the links
  linked_pair pair(options_for(k_ps), k_ps, options_for(k_worker));
  pair.ps_link->start(at_ps.handlers());
  pair.worker->start(at_worker.handlers());
  REQUIRE(wait_sharing(*pair.worker));
  REQUIRE(wait_sharing(*pair.ps_link));

  // A gradient-sized tensor, a small one (copied: below 64 KB) and one adopted from memory
  // that is not the process's shared memory (copied, through the ring).
  const tensor gradient = counting(dtype::float32, {512, 512}, 7);
  const tensor small = counting(dtype::int32, {100}, 8);
  std::vector<char> elsewhere(1 << 20, 5);
  struct lent final : external_memory {
    void release(void*, std::size_t) noexcept override {}
    bool host_accessible() const override { return true; }
  } owner;
  const tensor foreign(dtype::uint8, {1 << 20}, buffer::adopt(elsewhere.data(), elsewhere.size(), &owner));
  pair.worker->send("g", gradient, [](const status& s) { CHECK(s.ok()); });
  pair.worker->send("s", small, [](const status& s) { CHECK(s.ok()); });
  pair.worker->send("f", foreign, [](const status& s) { CHECK(s.ok()); });
  REQUIRE(at_ps.wait_tensors(3));
  CHECK(pair.worker->sent_in_place() == 1);
  {
    std::lock_guard<std::mutex> lock(at_ps.mutex);
    CHECK(at_ps.tensors[0].second.equals(gradient));
    CHECK(at_ps.tensors[1].second.equals(small));
    CHECK(at_ps.tensors[2].second.equals(foreign));
    // Over the worker's memory, mapped here read-only: nothing writes it in place.
    CHECK(at_ps.tensors[0].second.raw_data() != gradient.raw_data());
    CHECK_FALSE(at_ps.tensors[0].second.ref_count_is_one());
  }
  // The worker holds the gradient's block while the ps reads it: it is not its own to
  // write (a variable's update would copy it first).
  CHECK(pair.worker->held_for_peer() == 1);
  CHECK_FALSE(gradient.ref_count_is_one());
  {
    // An element-wise kernel handed the only reference to it still writes elsewhere.
    std::lock_guard<std::mutex> lock(at_ps.mutex);
    const tensor only = std::move(at_ps.tensors[0].second);
    at_ps.tensors.clear();
    std::vector<tensor> outputs(1);
    const dtype types[] = {dtype::float32};
    kernels::kernel_context ctx({&only, 1}, outputs, types, kernels::step_info{});
    CHECK(ctx.forward_input_or_allocate_output(0, 0, only.shape()).raw_data() != only.raw_data());
  }
  CHECK(eventually([&] { return pair.worker->held_for_peer() == 0 && gradient.ref_count_is_one(); }));

  // Many, both ways, kept and let go in turns: every one arrives whole.
  std::vector<tensor> sent;
  for (int i = 0; i < 40; ++i) {
    sent.push_back(counting(dtype::float32, {(i % 3 + 1) << 16}, 100 + i));
    pair.worker->send(str_cat("w", i), sent.back(), [](const status& s) { CHECK(s.ok()); });
    pair.ps_link->send(str_cat("p", i), sent.back(), [](const status& s) { CHECK(s.ok()); });
  }
  REQUIRE(at_ps.wait_tensors(40));
  REQUIRE(at_worker.wait_tensors(40));
  for (int i = 0; i < 40; ++i) {
    INFO("tensor " << i);
    CHECK(at_ps.tensors[static_cast<std::size_t>(i)].second.equals(sent[static_cast<std::size_t>(i)]));
    CHECK(at_worker.tensors[static_cast<std::size_t>(i)].second.equals(sent[static_cast<std::size_t>(i)]));
  }
  CHECK(pair.worker->sent_in_place() == 41);
  CHECK(pair.ps_link->sent_in_place() == 40);
  CHECK(pair.ps_link->received_in_place() >= 41);
  at_ps.tensors.clear();
  at_worker.tensors.clear();
  CHECK(eventually([&] {
    return pair.worker->held_for_peer() == 0 && pair.ps_link->held_for_peer() == 0 &&
           std::all_of(sent.begin(), sent.end(), [](const tensor& t) { return t.ref_count_is_one(); });
  }));
  CHECK(at_ps.failures.empty());
  CHECK(at_worker.failures.empty());
}

TEST_CASE("a link that ends while its peer still reads a block keeps the block", "[cluster][transport]") {
  REQUIRE(share_large_buffers_with_links());
  const tensor value = counting(dtype::float32, {1 << 18}, 9);
  {
    inbox at_ps, at_worker;
    linked_pair pair(options_for(k_ps), k_ps, options_for(k_worker));
    pair.ps_link->start(at_ps.handlers());
    pair.worker->start(at_worker.handlers());
    REQUIRE(wait_sharing(*pair.worker));
    pair.worker->send("v", value, [](const status& s) { CHECK(s.ok()); });
    REQUIRE(at_ps.wait_tensors(1));
    REQUIRE(pair.worker->sent_in_place() == 1);
    pair.worker.reset();  // the worker's end goes while the ps holds the block
    // This process (the ps) lives on: the block stays the ps's to read, whatever the worker
    // allocates meanwhile.
    std::vector<tensor> churn;
    for (int i = 0; i < 8; ++i) churn.push_back(counting(dtype::float32, {1 << 18}, 50 + i));
    CHECK_FALSE(value.ref_count_is_one());
    std::lock_guard<std::mutex> lock(at_ps.mutex);
    CHECK(at_ps.tensors[0].second.equals(value));
  }
  CHECK_FALSE(value.ref_count_is_one());  // a process that still lives may still read it
}

// A peer in a process of its own that keeps every tensor it receives.
pid_t start_keeping_peer(int port_pipe) {
  return start_peer_process(port_pipe, [](tensor_link& link) {
    static std::vector<tensor> kept;
    static std::mutex mutex;
    link.start({[](std::string, tensor t) {
                  std::lock_guard<std::mutex> lock(mutex);
                  kept.push_back(std::move(t));
                },
                [](const status&) {}});
  });
}

TEST_CASE("blocks a peer process held when its link ended are the sender's again once that process is gone",
          "[cluster][transport]") {
  REQUIRE(share_large_buffers_with_links());
  int pipe_ends[2];
  REQUIRE(::pipe(pipe_ends) == 0);
  const pid_t child = start_keeping_peer(pipe_ends[0]);
  REQUIRE(child > 0);
  const tensor value = counting(dtype::float32, {1 << 18}, 11);
  {
    link_server ps(options_for(k_ps));
    const int port = ps.port();
    REQUIRE(::write(pipe_ends[1], &port, sizeof port) == sizeof port);
    tensor_link* link = ps.wait_link();
    REQUIRE(link != nullptr);
    inbox at_ps;
    link->start(at_ps.handlers());
    REQUIRE(wait_sharing(*link));
    link->send("v", value, [](const status& s) { CHECK(s.ok()); });
    CHECK(eventually([&] { return link->sent_in_place() == 1 && link->unacknowledged_bytes() == 0; }));
    CHECK(link->held_for_peer() == 1);
  }  // the link ends; the peer keeps the tensor
  std::this_thread::sleep_for(300ms);
  CHECK_FALSE(value.ref_count_is_one());
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK(eventually([&] { return value.ref_count_is_one(); }));
  ::close(pipe_ends[0]);
  ::close(pipe_ends[1]);
}

TEST_CASE("a receiver that cannot map the sender's blocks gets them again by copy, and the sender copies from then on",
          "[cluster][transport]") {
  REQUIRE(share_large_buffers_with_links());
  link_options ps_options = options_for(k_ps);
  ps_options.map_peer_blocks = false;  // as when the mapping fails (no address space left)
  inbox at_ps, at_worker;
  linked_pair pair(ps_options, k_ps, options_for(k_worker));
  pair.ps_link->start(at_ps.handlers());
  pair.worker->start(at_worker.handlers());
  REQUIRE(wait_sharing(*pair.worker));
  std::vector<tensor> sent;
  for (int i = 0; i < 5; ++i) {
    sent.push_back(counting(dtype::float32, {1 << 18}, 30 + i));
    pair.worker->send(str_cat("w", i), sent.back(), [](const status& s) { CHECK(s.ok()); });
  }
  REQUIRE(at_ps.wait_tensors(5));
  {
    std::lock_guard<std::mutex> lock(at_ps.mutex);
    std::map<std::string, const tensor*> by_key;
    for (const auto& [key, value] : at_ps.tensors) by_key[key] = &value;
    CHECK(by_key.size() == 5);  // each once, whichever way it came
    for (int i = 0; i < 5; ++i) {
      INFO("tensor " << i);
      REQUIRE(by_key.count(str_cat("w", i)) == 1);
      CHECK(by_key[str_cat("w", i)]->equals(sent[static_cast<std::size_t>(i)]));
    }
  }
  CHECK(pair.worker->sent_in_place() >= 1);  // the first went as a block and came back refused
  CHECK(pair.worker->sent_in_place() < 5);
  const std::int64_t in_place = pair.worker->sent_in_place();
  pair.worker->send("later", counting(dtype::float32, {1 << 18}, 40), [](const status& s) { CHECK(s.ok()); });
  REQUIRE(at_ps.wait_tensors(6));
  CHECK(pair.worker->sent_in_place() == in_place);
  CHECK(pair.worker->held_for_peer() == 0);
  CHECK(pair.worker->unacknowledged_bytes() >= 0);
  CHECK(eventually([&] { return pair.worker->unacknowledged_bytes() == 0; }));
  CHECK(at_ps.failures.empty());
  CHECK(at_worker.failures.empty());
}

TEST_CASE("a process forked from one that shares keeps its buffers off the shared segments", "[cluster][transport]") {
  REQUIRE(share_large_buffers_with_links());
  const pid_t child = ::fork();
  if (child == 0) {
    // The segments are mapped here too, shared with the parent: nothing of the child's
    // may land in them.
    const tensor big = counting(dtype::float32, {1 << 18}, 1);
    shared_block where;
    ::_exit(find_shared_block(big.raw_data(), big.byte_size(), &where) || share_large_buffers_with_links() ? 1 : 0);
  }
  REQUIRE(child > 0);
  int status_code = -1;
  REQUIRE(::waitpid(child, &status_code, 0) == child);
  CHECK(WIFEXITED(status_code));
  CHECK(WEXITSTATUS(status_code) == 0);
  // The parent's go on coming from them.
  const tensor big = counting(dtype::float32, {1 << 18}, 2);
  shared_block where;
  CHECK(find_shared_block(big.raw_data(), big.byte_size(), &where));
}

// Run with TROUPE_ALLOCATOR_CACHE_MB=1 (CTest cluster/zero_copy_test_small_cache).
TEST_CASE("over the cache's limit a freed block of shared memory stays cached without its pages", "[.][small_cache]") {
  REQUIRE(share_large_buffers_with_links());
  std::vector<const void*> freed;
  {
    std::vector<tensor> many;
    for (int i = 0; i < 4; ++i) many.push_back(counting(dtype::uint8, {1 << 20}, 60 + i));  // 4 MB: over 1 MB
    for (const tensor& t : many) freed.push_back(t.raw_data());
  }
  CHECK(get_allocator_stats().bytes_cached <= (std::int64_t{1} << 20));  // one kept whole, three bare
  // The same blocks come back (none was freed), those without pages zero-filled.
  std::vector<tensor> again;
  int zeroed = 0;
  for (int i = 0; i < 4; ++i) {
    again.emplace_back(dtype::uint8, tensor_shape{1 << 20});
    CHECK(std::find(freed.begin(), freed.end(), again.back().raw_data()) != freed.end());
    const auto* bytes = static_cast<const unsigned char*>(again.back().raw_data());
    if (std::all_of(bytes + 4096, bytes + (1 << 20) - 4096, [](unsigned char b) { return b == 0; })) ++zeroed;
  }
  CHECK(zeroed >= 3);
}

TEST_CASE("a shared-memory block from a peer whose memory this end cannot map fails the link naming the peer",
          "[cluster][transport]") {
  link_server ps(options_for(k_ps));
  // A hello offering no ring, a tensor of 1 MB, and a shared_block (kind 10) naming memory
  // the listener has no way to reach.
  std::string block;
  put_raw(block, std::int32_t{3});          // a descriptor
  put_raw(block, std::uint64_t{1});         // the token
  put_raw(block, std::uint64_t{2});
  put_raw(block, std::uint64_t{1} << 30);   // the segment's size
  put_raw(block, std::uint64_t{4096});      // the offset
  put_raw(block, std::uint64_t{1} << 20);   // the length
  put_raw(block, std::uint64_t{1});         // the hold
  const status failed = failure_of_frame(ps, 10, block);
  CHECK(failed.error_code() == code::unavailable);
  CHECK(failed.message().find("damaged shared-memory block") != std::string::npos);
  CHECK(failed.message().find(k_worker) != std::string::npos);
}

}  // namespace
}  // namespace troupe::cluster
