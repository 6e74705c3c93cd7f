#include "kernels/kernel.h"

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

void async_op_kernel::compute(kernel_context& ctx) {
  ctx.fail(internal_error("asynchronous kernel '", name(), "' was called synchronously"));
}

}  // namespace troupe::kernels
