// Memory accounts (core/memory.h): limits, parents, the error an allocation beyond them
// raises, sizes from the environment's notation, and exceptions out of parallel_for.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/phantom.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace troupe {
namespace {

TEST_CASE("memory sizes parse as bytes, binary units or a share of physical memory", "[memory]") {
  CHECK(*parse_memory_size("1000", "X") == 1000);
  CHECK(*parse_memory_size("8G", "X") == (std::int64_t{8} << 30));
  CHECK(*parse_memory_size("512M", "X") == (std::int64_t{512} << 20));
  CHECK(*parse_memory_size("1.5KB", "X") == 1536);
  CHECK(*parse_memory_size("2t", "X") == (std::int64_t{2} << 40));
  const auto half = parse_memory_size("50%", "X");
  REQUIRE(half.ok());
  CHECK(*half == Approx(static_cast<double>(default_memory_limit()) / 0.8 / 2).epsilon(1e-6));
  for (const char* bad : {"", "abc", "-5", "0", "12Q", "150%", "1e30", "8GiBs"}) {
    INFO(bad);
    auto r = parse_memory_size(bad, "TROUPE_MEMORY_LIMIT");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::invalid_argument);
    CHECK(r.error().message().find("TROUPE_MEMORY_LIMIT='") != std::string::npos);
  }
}

TEST_CASE("phantom tensors have a shape and no memory; small ones read as zeros", "[memory]") {
  auto device = memory_account::create("device d", 1 << 20, &memory_account::process());
  account_scope scope(device.get());
  const tensor big = phantom_tensor(dtype::float32, {1 << 20, 1 << 20});  // 4 TiB
  CHECK(is_phantom(big));
  CHECK_FALSE(big.on_host());
  CHECK(big.byte_size() == (std::size_t{1} << 42));
  CHECK(device->in_use() == 0);
  const tensor copy = big.deep_copy();
  CHECK(is_phantom(copy));
  CHECK(copy.shape() == big.shape());
  const tensor loss = phantom_tensor(dtype::float32, {});
  CHECK(is_phantom(loss));
  REQUIRE(loss.on_host());
  CHECK(loss.scalar_value<float>() == 0.0f);
  const tensor row = phantom_tensor(dtype::int64, {k_readable_phantom_bytes / 8});
  CHECK(row.on_host());
  CHECK(row.flat<std::int64_t>()[k_readable_phantom_bytes / 8 - 1] == 0);
  CHECK_FALSE(phantom_tensor(dtype::int64, {k_readable_phantom_bytes / 8 + 1}).on_host());
  CHECK_FALSE(phantom_tensor(dtype::string, {}).on_host());  // no bytes stand for a string
  CHECK(device->in_use() == 0);
  const tensor real = tensor::zeros(dtype::float32, {4});
  CHECK_FALSE(is_phantom(real));
  CHECK_FALSE(is_phantom(tensor()));
  std::vector<tensor> some = {real, loss};
  CHECK(any_phantom(some));
  CHECK_FALSE(any_phantom(std::span<const tensor>(some.data(), 1)));
}

TEST_CASE("an allocation beyond its account's limit throws, naming the shape, the bytes and the account",
          "[memory]") {
  auto device = memory_account::create("device d", 1 << 20, &memory_account::process());
  const std::int64_t process_before = memory_account::process().in_use();
  {
    account_scope scope(device.get());
    tensor small(dtype::float32, {1024});
    CHECK(device->in_use() == 4096);
    CHECK(memory_account::process().in_use() - process_before == 4096);
    try {
      tensor big(dtype::float32, {1000, 1000});
      FAIL("no exception");
    } catch (const allocation_error& e) {
      const std::string what = e.what();
      CHECK(what.find("float [1000,1000]") != std::string::npos);
      CHECK(what.find("4000000 bytes") != std::string::npos);
      CHECK(what.find("device d") != std::string::npos);
      CHECK(e.to_status().error_code() == code::resource_exhausted);
    }
    CHECK(device->in_use() == 4096);  // the refused allocation counts nothing
  }
  CHECK(device->in_use() == 0);
  CHECK(device->peak() == 4096);
  CHECK(memory_account::process().in_use() == process_before);
}

TEST_CASE("buffers stay charged to the account that allocated them wherever they are freed", "[memory]") {
  auto device = memory_account::create("device d", 1 << 20, &memory_account::process());
  tensor kept;
  {
    account_scope scope(device.get());
    kept = tensor(dtype::int64, {16});
  }
  CHECK(device->in_use() == 128);
  device = account_ref();  // the device goes; its buffer keeps the account alive
  kept = tensor();
}

TEST_CASE("a parent's limit binds its children", "[memory]") {
  auto parent = memory_account::create("parent", 1000, nullptr);
  auto a = memory_account::create("a", 800, parent.get());
  auto b = memory_account::create("b", 800, parent.get());
  a->charge(600);
  try {
    b->charge(600);
    FAIL("no exception");
  } catch (const allocation_error& e) {
    CHECK(std::string(e.what()).find("over the memory limit of parent") != std::string::npos);
  }
  CHECK(b->in_use() == 0);
  b->charge(400);
  CHECK(parent->in_use() == 1000);
  a->release(600);
  b->release(400);
  CHECK(parent->in_use() == 0);
}

TEST_CASE("a shape whose size overflows is refused before anything is allocated", "[memory]") {
  const std::int64_t before = memory_account::process().in_use();
  try {
    tensor t(dtype::float64, {std::int64_t{1} << 40, std::int64_t{1} << 40});
    FAIL("no exception");
  } catch (const allocation_error& e) {
    CHECK(std::string(e.what()).find("double [1099511627776,1099511627776]") != std::string::npos);
  }
  CHECK(memory_account::process().in_use() == before);
  tensor empty(dtype::float32, {0, std::int64_t{1} << 62});  // no elements: no bytes
  CHECK(empty.byte_size() == 0);
}

TEST_CASE("an exception in a parallel_for block reaches the caller, never a pool thread", "[memory]") {
  compute_pool pool(3);
  std::atomic<int> blocks{0};
  try {
    pool.parallel_for(1000, 1e6, [&](std::int64_t begin, std::int64_t end) {
      ++blocks;
      if (begin == 0) throw std::runtime_error("block 0 failed");
    });
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "block 0 failed");
  }
  // The pool still works.
  std::atomic<std::int64_t> sum{0};
  pool.parallel_for(1000, 1e6, [&](std::int64_t begin, std::int64_t end) { sum += end - begin; });
  CHECK(sum == 1000);
}

}  // namespace
}  // namespace troupe
