// core: status, dtype, shape, tensor, buffer pool, Philox, compute pool, .npy.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <limits>
#include <sstream>
#include <set>
#include <thread>

#include "core/crc32c.h"
#include "core/file.h"
#include "core/npy.h"
#include "core/random.h"
#include "core/retry.h"
#include "core/switches.h"
#include "core/tensor.h"
#include "core/tensor_eigen.h"
#include "core/cpu_time.h"
#include "core/thread_pool.h"

using namespace troupe;

TEST_CASE("status carries a code and a message; ok is cheap", "[core]") {
  status ok;
  CHECK(ok.ok());
  CHECK(ok.to_string() == "OK");
  status s = invalid_argument_error("node '", "x", "' has ", 3, " inputs");
  CHECK_FALSE(s.ok());
  CHECK(s.error_code() == code::invalid_argument);
  CHECK(s.to_string() == "INVALID_ARGUMENT: node 'x' has 3 inputs");
  CHECK(s.with_context("loading g.pb").message() == "loading g.pb: node 'x' has 3 inputs");
  status copy = s;
  CHECK(copy == s);
}

TEST_CASE("run_retried makes a request again while its failure may pass, pausing longer each time", "[core]") {
  const retry_policy quick{env::clock::time_point::max(), std::chrono::milliseconds(1), std::chrono::milliseconds(4)};
  int calls = 0;
  auto flaky = [&]() -> result<int> {
    if (++calls < 4) return unavailable_error("dropped");
    return calls;
  };
  const auto started = env::now();
  auto r = run_retried(flaky, is_retryable, quick);
  REQUIRE(r.ok());
  CHECK(*r == 4);
  CHECK(env::now() - started >= std::chrono::milliseconds(1 + 2 + 4));  // the pauses before tries 2, 3, 4

  // A failure the caller does not allow ends it with that failure.
  calls = 0;
  status s = run_retried([&] { ++calls; return invalid_argument_error("bad"); }, is_retryable, quick);
  CHECK(s.error_code() == code::invalid_argument);
  CHECK(calls == 1);

  // The caller may count: three tries at most.
  calls = 0;
  int tries = 1;
  s = run_retried([&] { ++calls; return aborted_error("again"); }, [&](const status&) { return tries++ < 3; }, quick);
  CHECK(s.error_code() == code::aborted);
  CHECK(calls == 3);

  // Past the deadline, the last failure.
  calls = 0;
  retry_policy until = quick;
  until.deadline = env::now() + std::chrono::milliseconds(20);
  s = run_retried([&] { ++calls; return unavailable_error("down"); }, is_retryable, until);
  CHECK(s.error_code() == code::unavailable);
  CHECK(calls >= 2);  // at least one pause (a loaded machine may oversleep it past the deadline)
  CHECK(calls <= 12);  // 1 + 2 + 4 + 4 + 4 + 4 ms of pauses after 6 tries: past 20 ms after the 8th
}

TEST_CASE("an environment switch: its fallback unset or empty, off only for 0", "[core]") {
  const char* name = "TROUPE_TEST_SWITCH";
  ::unsetenv(name);
  CHECK(env_switch(name, true));
  CHECK_FALSE(env_switch(name, false));
  ::setenv(name, "", 1);
  CHECK(env_switch(name, true));
  CHECK_FALSE(env_switch(name, false));
  ::setenv(name, "0", 1);
  CHECK_FALSE(env_switch(name, true));
  ::setenv(name, "1", 1);
  CHECK(env_switch(name, false));
  ::setenv(name, "00", 1);  // not "0": on
  CHECK(env_switch(name, false));
  ::unsetenv(name);
}

TEST_CASE("str_cat writes every argument as a stream would", "[core]") {
  const std::string text = "text";
  const char* null_text = nullptr;
  const std::string_view view = "view";
  std::ostringstream reference;
  reference << "a" << text << view << 'c' << static_cast<signed char>('s') << true << false << -42
            << 0 << std::numeric_limits<int64_t>::min() << std::numeric_limits<uint64_t>::max()
            << static_cast<short>(-7) << 1.5 << 0.1f << 1e300;
  CHECK(str_cat("a", text, view, 'c', static_cast<signed char>('s'), true, false, -42, 0,
                std::numeric_limits<int64_t>::min(), std::numeric_limits<uint64_t>::max(),
                static_cast<short>(-7), 1.5, 0.1f, 1e300) == reference.str());
  CHECK(str_cat("x", null_text, "y") == "xy");
  CHECK(str_cat("0x", std::hex, 255, std::dec, " ", 255) == "0xff 255");
  CHECK(str_cat() == "");
}

TEST_CASE("CRC-32C matches the standard check values, in one piece or many", "[core]") {
  CHECK(crc32c_extend(0, "123456789", 9) == 0xe3069283u);  // the catalogue's check value
  CHECK(crc32c_extend(0, "", 0) == 0u);
  std::string zeros(32, '\0');
  CHECK(crc32c_extend(0, zeros.data(), zeros.size()) == 0x8a9136aau);  // RFC 3720 B.4
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>(i * 7 + 3);
  const std::uint32_t whole = crc32c_extend(0, text.data(), text.size());
  for (std::size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    CHECK(crc32c_extend(crc32c_extend(0, text.data(), cut), text.data() + cut, text.size() - cut) == whole);
  }
}

TEST_CASE("CRC-32C of large buffers (three streams) and of pieces combined", "[core]") {
  // Large enough for the three-stream path several times over, and an odd length; pieces
  // under 48 KB take the one-stream path, so the two paths check each other.
  std::string data(1000003, '\0');
  std::uint32_t x = 12345;
  for (char& c : data) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  std::uint32_t stepwise = 0;
  for (std::size_t at = 0; at < data.size(); at += 40000) {
    stepwise = crc32c_extend(stepwise, data.data() + at, std::min<std::size_t>(40000, data.size() - at));
  }
  const std::uint32_t whole = crc32c_extend(0, data.data(), data.size());
  CHECK(whole == stepwise);
  std::string zeros(3 * 16384 * 4 + 5, '\0');
  std::uint32_t zeros_stepwise = 0;
  for (std::size_t at = 0; at < zeros.size(); at += 1000) {
    zeros_stepwise = crc32c_extend(zeros_stepwise, zeros.data() + at, std::min<std::size_t>(1000, zeros.size() - at));
  }
  CHECK(crc32c_extend(0, zeros.data(), zeros.size()) == zeros_stepwise);
  // Combined: any cut, empty pieces included.
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{500000}, data.size() - 3,
                          data.size()}) {
    const std::uint32_t first = crc32c_extend(0, data.data(), cut);
    const std::uint32_t second = crc32c_extend(0, data.data() + cut, data.size() - cut);
    CHECK(crc32c_combine(first, second, data.size() - cut) == whole);
  }
  CHECK(crc32c_combine(crc32c_extend(0, "1234", 4), crc32c_extend(0, "56789", 5), 5) == 0xe3069283u);
  CHECK(crc32c_combine(0xe3069283u, crc32c_extend(0, "", 0), 0) == 0xe3069283u);
  // A changed byte changes the combination.
  const std::uint32_t first = crc32c_extend(0, data.data(), 500000);
  CHECK(crc32c_combine(first ^ 1u, crc32c_extend(0, data.data() + 500000, data.size() - 500000),
                       data.size() - 500000) != whole);
}

TEST_CASE("result holds a value or an error", "[core]") {
  result<int> good = 5;
  REQUIRE(good.ok());
  CHECK(*good == 5);
  result<int> bad = not_found_error("missing");
  CHECK_FALSE(bad.ok());
  CHECK(bad.error().error_code() == code::not_found);
  result<int> from_ok = status();  // a programmer error turned into an internal error
  CHECK(from_ok.error().error_code() == code::internal);
}

TEST_CASE("dtype numbering and names follow TensorFlow", "[core]") {
  CHECK(static_cast<int>(dtype::float32) == 1);
  CHECK(static_cast<int>(dtype::int64) == 9);
  CHECK(static_cast<int>(dtype::bool_) == 10);
  CHECK(static_cast<int>(dtype::resource) == 20);
  CHECK(dtype_name(dtype::float32) == "float");
  CHECK(dtype_enum_name(dtype::int32) == "DT_INT32");
  CHECK(*parse_dtype("DT_DOUBLE") == dtype::float64);
  CHECK(*parse_dtype("float32") == dtype::float32);
  CHECK_FALSE(parse_dtype("floot").ok());
  CHECK(dtype_size(dtype::int16) == 2);
  int visited = 0;
  CHECK(visit_dtype(dtype::uint8, [&]<class T>() { visited = sizeof(T); }));
  CHECK(visited == 1);
  CHECK_FALSE(visit_dtype(dtype::string, [&]<class T>() {}));
}

TEST_CASE("shapes: known and partial", "[core]") {
  tensor_shape s{2, 3, 4};
  CHECK(s.num_elements() == 24);
  CHECK(s.to_string() == "[2,3,4]");
  CHECK(tensor_shape{}.num_elements() == 1);
  CHECK_FALSE(tensor_shape::make({2, -1}).ok());
  CHECK_FALSE(tensor_shape::make({1LL << 40, 1LL << 40}).ok());
  partial_shape p{-1, 3};
  CHECK(p.to_string() == "[?,3]");
  CHECK(p.is_compatible_with(tensor_shape{7, 3}));
  CHECK_FALSE(p.is_compatible_with(tensor_shape{7, 4}));
  CHECK_FALSE(p.is_compatible_with(tensor_shape{3}));
  CHECK(partial_shape::unknown().is_compatible_with(tensor_shape{1, 2, 3}));
  CHECK(*p.merge(partial_shape{5, -1}) == partial_shape{5, 3});
  CHECK_FALSE(p.merge(partial_shape{5, 4}).ok());
}

TEST_CASE("tensors share buffers on copy and are 64-byte aligned", "[core]") {
  tensor a(dtype::float32, {3, 4});
  CHECK(reinterpret_cast<std::uintptr_t>(a.raw_data()) % 64 == 0);
  CHECK(a.ref_count_is_one());
  tensor b = a;
  CHECK(b.shares_buffer_with(a));
  CHECK_FALSE(a.ref_count_is_one());
  b = tensor();
  CHECK(a.ref_count_is_one());
  auto m = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(matrix_view<float>(m)(1, 2) == 6);
  CHECK(flat_array<float>(m).sum() == 21);
  tensor r = m.reshaped({3, 2});
  CHECK(r.shares_buffer_with(m));
  CHECK(r.shape() == tensor_shape{3, 2});
  tensor c = m.deep_copy();
  CHECK_FALSE(c.shares_buffer_with(m));
  CHECK(c.equals(m));
  c.data<float>()[0] = 9;
  CHECK_FALSE(c.equals(m));
  CHECK(m.debug_string() == "float [2,3] {1, 2, 3, 4, 5, 6}");
  tensor empty(dtype::int32, {0, 5});
  CHECK(empty.num_elements() == 0);
  CHECK(empty.initialized());
}

TEST_CASE("the buffer pool reuses freed blocks", "[core]") {
  auto before = get_allocator_stats();
  for (int i = 0; i < 100; ++i) {
    tensor t(dtype::float32, {1000 + i % 3});
    t.data<float>()[0] = 1;
  }
  auto after = get_allocator_stats();
  CHECK(after.allocations - before.allocations == 100);
  CHECK(after.cache_hits - before.cache_hits >= 97);
}

TEST_CASE("philox4x32-10 matches the Random123 known answer", "[core]") {
  philox zero(0, 0);
  auto block = zero.next();
  CHECK(block[0] == 0x6627e8d5u);
  CHECK(block[1] == 0xe169c58du);
  CHECK(block[2] == 0xbc57ac4cu);
  CHECK(block[3] == 0x9b00dbd8u);
  philox a(7, 9), b(7, 9);
  b.skip(3);
  for (int i = 0; i < 3; ++i) a.next();
  CHECK(a.next() == b.next());
  float f = uint32_to_float(0xffffffffu);
  CHECK(f < 1.0f);
  CHECK(uint32_to_float(0) == 0.0f);
}

TEST_CASE("compute_pool parallel_for covers the range exactly once, even nested; spinning for work or not", "[core]") {
  // Without spinning its idle threads sleep at once instead of looking for work a while
  // (servers that share their cores: `troupe server --no-spin`); every wake-up then goes
  // through the sleep.
  const bool spin = GENERATE(true, false);
  compute_pool pool(2, "test", spin);
  std::vector<std::atomic<int>> hits(100000);
  pool.parallel_for(100000, 1000.0, [&](std::int64_t begin, std::int64_t end) {
    for (auto i = begin; i < end; ++i) hits[static_cast<std::size_t>(i)]++;
  });
  for (auto& h : hits) REQUIRE(h.load() == 1);
  std::atomic<std::int64_t> total{0};
  std::atomic<int> outer_done{0};
  for (int t = 0; t < 4; ++t) {
    pool.schedule([&] {
      pool.parallel_for(64, 1e6, [&](std::int64_t b, std::int64_t e) {
        pool.parallel_for(64, 1e6, [&](std::int64_t b2, std::int64_t e2) { total += (e - b) * (e2 - b2); });
      });
      outer_done++;
    });
  }
  while (outer_done.load() < 4) std::this_thread::yield();
  CHECK(total.load() == 4 * 64 * 64);
  // Work that finds the pool idle each time, a millisecond apart.
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i) {
    pool.schedule([&] { ran++; });
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  while (ran.load() < 50) std::this_thread::yield();
  CHECK(ran.load() == 50);
  int calls = 0;
  pool.parallel_for(10, 1.0, [&](std::int64_t b, std::int64_t e) { calls++; });
  CHECK(calls == 1);  // too little work to split
}

TEST_CASE("cpu_meter counts the CPU time of the pool's helpers on its blocks", "[core]") {
  compute_pool pool(2);
  // Blocks of ~2 ms of busy work each; every block's own CPU time, whoever ran it.
  std::atomic<std::int64_t> blocks_ns{0};
  std::atomic<int> by_helpers{0};
  const auto caller = std::this_thread::get_id();
  auto spin = [&](std::int64_t b, std::int64_t e) {
    const double t0 = thread_cpu_ns();
    for (auto i = b; i < e; ++i) {
      while (thread_cpu_ns() - t0 < 2e6 * static_cast<double>(i - b + 1)) {
      }
    }
    blocks_ns += static_cast<std::int64_t>(thread_cpu_ns() - t0);
    if (std::this_thread::get_id() != caller) by_helpers++;
  };
  double metered = 0;
  for (int attempt = 0; attempt < 20 && by_helpers.load() == 0; ++attempt) {
    blocks_ns = 0;
    cpu_meter m;
    pool.parallel_for(8, 2e6, spin);
    metered = m.elapsed_ns();
  }
  REQUIRE(by_helpers.load() > 0);  // a helper ran blocks (not only the caller)
  // Everything the blocks took, on both threads, and not much else.
  CHECK(metered >= 0.98 * static_cast<double>(blocks_ns.load()));
  CHECK(metered <= static_cast<double>(blocks_ns.load()) + 5e6);
  // Without a meter open, nothing is measured; meters nest and each sees its own.
  CHECK(cpu_meter::helper_sink() == nullptr);
  {
    cpu_meter outer;
    double* outer_sink = cpu_meter::helper_sink();
    {
      cpu_meter inner;
      CHECK(cpu_meter::helper_sink() != outer_sink);
    }
    CHECK(cpu_meter::helper_sink() == outer_sink);
  }
  CHECK(cpu_meter::helper_sink() == nullptr);
}

TEST_CASE(".npy round trip for every dtype, and clear errors", "[core]") {
  auto check = [](const tensor& t) {
    auto back = parse_npy(serialize_npy(t), "memory");
    REQUIRE(back.ok());
    CHECK(back->equals(t));
  };
  check(tensor::from_vector<float>({1.5f, -2, 3, 4, 5, 6}, {2, 3}));
  check(tensor::from_vector<double>({1, 2}, {2}));
  check(tensor::from_vector<std::int64_t>({-1, 1LL << 40}, {2, 1}));
  check(tensor::from_vector<std::int32_t>({7}, {}));
  check(tensor::from_vector<std::uint8_t>({1, 2, 255}, {3}));
  check(tensor::from_vector<bool>({true, false}, {2}));
  check(tensor::from_vector<std::int8_t>({-3}, {1, 1, 1}));
  check(tensor(dtype::float32, {0, 3}));

  CHECK(parse_npy("hello", "x.npy").error().message().find("x.npy: not a .npy file") == 0);
  std::string good = serialize_npy(tensor::from_vector<float>({1, 2}, {2}));
  auto truncated = parse_npy(good.substr(0, good.size() - 1), "t.npy");
  CHECK(truncated.error().message().find("needs 8") != std::string::npos);
  std::string complex = good;
  complex.replace(complex.find("<f4"), 3, "<c8");
  CHECK(parse_npy(complex, "c.npy").error().error_code() == code::unimplemented);
  CHECK(read_npy("/nonexistent/x.npy").error().error_code() == code::not_found);
}

TEST_CASE("numpy-written header forms parse (version 1, shape spellings)", "[core]") {
  // A header exactly as numpy 1.x writes it for np.arange(3, dtype='<i8').
  std::string header = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size());
  bytes += '\0';
  bytes += header;
  for (std::int64_t v : {0, 1, 2}) bytes.append(reinterpret_cast<const char*>(&v), 8);
  auto t = parse_npy(bytes, "arange.npy");
  REQUIRE(t.ok());
  CHECK(t->shape() == tensor_shape{3});
  CHECK(t->data<std::int64_t>()[2] == 2);
}
