#include "kernels/kernel.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <typeinfo>

namespace troupe::kernels {

tensor& kernel_context::forward_input_or_allocate_output(int input_index, int output_index,
                                                         tensor_shape shape) {
  const tensor& in = input(input_index);
  if (in.ref_count_is_one() && in.type() == output_type(output_index) &&
      in.num_elements() == shape.num_elements()) {
    // Safe: the executor holds the only reference, and it is handing it to us.
    auto& out = outputs_[static_cast<std::size_t>(output_index)];
    out = in.reshaped(std::move(shape));
    return out;
  }
  return allocate_output(output_index, std::move(shape));
}

double elementwise_ns(std::span<const tensor> inputs, double ns_per_element) {
  int rank = 0;
  for (const tensor& t : inputs) rank = std::max(rank, t.rank());
  double elements = 1;
  for (int d = 1; d <= rank; ++d) {
    std::int64_t size = 0;
    for (const tensor& t : inputs) {
      if (t.rank() >= d) size = std::max(size, t.dim(t.rank() - d));
    }
    elements *= static_cast<double>(size);
  }
  return elements * ns_per_element;
}

std::string exception_type_name(const std::exception& e) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name != nullptr ? std::string(name.get()) : std::string(typeid(e).name());
}

void async_op_kernel::compute(kernel_context& ctx) {
  ctx.fail(internal_error("asynchronous kernel '", name(), "' was called synchronously"));
}

}  // namespace troupe::kernels
