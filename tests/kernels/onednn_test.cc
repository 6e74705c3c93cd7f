// kernels/cpu/onednn.h: same_bytes on plain and blocked layouts, and prepared_reorder
// against element-by-element expectations.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cpu/onednn.h"

namespace troupe::kernels::onednn {
namespace {

using tag = dnnl::memory::format_tag;
constexpr auto f32 = dnnl::memory::data_type::f32;

dnnl::memory::desc desc(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, tag t) {
  return dnnl::memory::desc({n, c, h, w}, f32, t);
}

TEST_CASE("same_bytes compares where layouts put every element") {
  CHECK(same_bytes(desc(2, 5, 3, 4, tag::nhwc), desc(2, 5, 3, 4, tag::nhwc)));
  CHECK_FALSE(same_bytes(desc(2, 5, 3, 4, tag::nhwc), desc(2, 5, 3, 4, tag::nchw)));
  // nChw16c with exactly 16 channels is NHWC byte for byte; with 32 it is not, and with 8
  // its padding makes it larger.
  CHECK(same_bytes(desc(2, 16, 3, 4, tag::nhwc), desc(2, 16, 3, 4, tag::nChw16c)));
  CHECK_FALSE(same_bytes(desc(2, 32, 3, 4, tag::nhwc), desc(2, 32, 3, 4, tag::nChw16c)));
  CHECK_FALSE(same_bytes(desc(2, 8, 3, 4, tag::nhwc), desc(2, 8, 3, 4, tag::nChw16c)));
  // One channel: NHWC and NCHW agree.
  CHECK(same_bytes(desc(2, 1, 3, 4, tag::nhwc), desc(2, 1, 3, 4, tag::nchw)));
  CHECK_FALSE(same_bytes(desc(2, 4, 3, 4, tag::nhwc), desc(2, 4, 3, 5, tag::nhwc)));
}

TEST_CASE("prepared_reorder moves every element to its place") {
  const std::int64_t n = 2, c = 20, h = 3, w = 5;
  std::vector<float> nhwc(static_cast<std::size_t>(n * h * w * c));
  for (std::size_t i = 0; i < nhwc.size(); ++i) nhwc[i] = static_cast<float>(i);

  prepared_reorder to_nchw(desc(n, c, h, w, tag::nhwc), desc(n, c, h, w, tag::nchw));
  REQUIRE_FALSE(to_nchw.empty());
  std::vector<float> nchw(nhwc.size());
  to_nchw.run(nhwc.data(), nchw.data());
  for (std::int64_t b = 0; b < n; ++b) {
    for (std::int64_t y = 0; y < h; ++y) {
      for (std::int64_t x = 0; x < w; ++x) {
        for (std::int64_t ch = 0; ch < c; ++ch) {
          INFO(b << " " << y << " " << x << " " << ch);
          REQUIRE(nchw[static_cast<std::size_t>(((b * c + ch) * h + y) * w + x)] ==
                  nhwc[static_cast<std::size_t>(((b * h + y) * w + x) * c + ch)]);
        }
      }
    }
  }

  // Through a padded blocked layout and back.
  const dnnl::memory::desc blocked = desc(n, c, h, w, tag::nChw16c);
  prepared_reorder in(desc(n, c, h, w, tag::nhwc), blocked), out(blocked, desc(n, c, h, w, tag::nhwc));
  std::vector<float> buffer(blocked.get_size() / sizeof(float)), back(nhwc.size(), -1.0f);
  in.run(nhwc.data(), buffer.data());
  out.run(buffer.data(), back.data());
  CHECK(back == nhwc);

  CHECK(prepared_reorder(desc(n, 16, h, w, tag::nhwc), desc(n, 16, h, w, tag::nChw16c)).empty());
}

}  // namespace
}  // namespace troupe::kernels::onednn
