#include "kernels/kernel_runner.h"

#include <condition_variable>
#include <mutex>

namespace troupe::kernels {

compute_pool& default_compute_pool() {
  static compute_pool* pool = new compute_pool(default_num_threads());
  return *pool;
}

result<std::vector<tensor>> run_kernel(tf::NodeDef node, const std::vector<tensor>& inputs,
                                       compute_pool* pool, const graph::op_registry& ops,
                                       const kernel_registry& kernels) {
  if (node.name().empty()) node.set_name(node.op());
  auto op = ops.lookup(node.op());
  if (!op.ok()) return op.error().with_context(str_cat("node '", node.name(), "'"));
  TROUPE_RETURN_IF_ERROR(graph::add_defaults_and_validate_attrs(**op, &node));
  std::vector<dtype> input_types, output_types;
  TROUPE_RETURN_IF_ERROR(graph::input_output_types(**op, node, &input_types, &output_types));
  if (input_types.size() != inputs.size()) {
    return invalid_argument_error("node '", node.name(), "' (", node.op(), ") takes ",
                                  input_types.size(), " inputs but was given ", inputs.size());
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (input_types[i] != inputs[i].type()) {
      return invalid_argument_error("node '", node.name(), "' (", node.op(), ") input ", i,
                                    " must be ", dtype_name(input_types[i]), " but is ",
                                    dtype_name(inputs[i].type()));
    }
  }
  auto kernel = kernels.create("CPU", node, **op, input_types, output_types);
  if (!kernel.ok()) return kernel.error();
  cancellation_manager cancellation;
  step_info step;
  step.pool = pool != nullptr ? pool : &default_compute_pool();
  step.cancellation = &cancellation;
  std::vector<tensor> outputs(output_types.size());
  kernel_context ctx(inputs, outputs, output_types, step);
  if ((*kernel)->is_async()) {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    auto finish = [&] {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      cv.notify_all();
    };
    status thrown = catch_exceptions([&] { static_cast<async_op_kernel&>(**kernel).compute_async(ctx, finish); });
    if (!thrown.ok()) {
      ctx.fail(std::move(thrown));
      finish();
    }
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return done; });
  } else {
    status thrown = catch_exceptions([&] { (*kernel)->compute(ctx); });
    if (!thrown.ok()) ctx.fail(std::move(thrown));
  }
  if (!ctx.ok()) return ctx.get_status().with_context(str_cat("node '", node.name(), "' (", node.op(), ")"));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].initialized()) {
      return internal_error("kernel for node '", node.name(), "' (", node.op(),
                            ") did not set output ", i);
    }
  }
  return outputs;
}

}  // namespace troupe::kernels
