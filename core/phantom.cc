#include "core/phantom.h"

#include <algorithm>

namespace troupe {
namespace {

// Owns no memory: phantoms of up to k_readable_phantom_bytes share one block of zeros
// (which nothing writes: no kernel runs on a phantom), larger ones point nowhere.
class phantom_memory final : public external_memory {
 public:
  explicit phantom_memory(bool readable) : readable_(readable) {}
  void release(void*, std::size_t) noexcept override {}
  bool host_accessible() const override { return readable_; }

 private:
  bool readable_;
};

phantom_memory g_readable(true), g_unreadable(false);
alignas(buffer::k_alignment) unsigned char g_zeros[k_readable_phantom_bytes] = {};

}  // namespace

bool phantom_stands_for(dtype type) {
  return type != dtype::string && type != dtype::resource && type != dtype::variant;
}

tensor phantom_tensor(dtype type, tensor_shape shape) {
  const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(shape.num_elements(), 0)) * dtype_size(type);
  if (phantom_stands_for(type) && bytes <= k_readable_phantom_bytes) {
    return tensor(type, std::move(shape), buffer::adopt(g_zeros, bytes, &g_readable));
  }
  return tensor(type, std::move(shape), buffer::adopt(nullptr, bytes, &g_unreadable));
}

bool is_phantom(const tensor& t) {
  const external_memory* owner = t.memory_owner();
  return owner == &g_readable || owner == &g_unreadable;
}

bool any_phantom(std::span<const tensor> tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const tensor& t) { return is_phantom(t); });
}

}  // namespace troupe
