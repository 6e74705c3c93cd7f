#include "kernels/kernel_runner.h"

#include <condition_variable>
#include <mutex>

namespace troupe::kernels {

compute_pool& default_compute_pool() {
  static compute_pool* pool = new compute_pool(default_num_threads());
  return *pool;
}

result<checked_node> check_node(tf::NodeDef node, const std::vector<tensor>& inputs,
                                const graph::op_registry& ops) {
  if (node.name().empty()) node.set_name(node.op());
  auto op = ops.lookup(node.op());
  if (!op.ok()) return op.error().with_context(str_cat("node '", node.name(), "'"));
  TROUPE_RETURN_IF_ERROR(graph::add_defaults_and_validate_attrs(**op, &node));
  checked_node checked;
  TROUPE_RETURN_IF_ERROR(graph::input_output_types(**op, node, &checked.input_types, &checked.output_types));
  if (checked.input_types.size() != inputs.size()) {
    return invalid_argument_error("node '", node.name(), "' (", node.op(), ") takes ",
                                  checked.input_types.size(), " inputs but was given ", inputs.size());
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (checked.input_types[i] != inputs[i].type()) {
      return invalid_argument_error("node '", node.name(), "' (", node.op(), ") input ", i,
                                    " must be ", dtype_name(checked.input_types[i]), " but is ",
                                    dtype_name(inputs[i].type()));
    }
  }
  checked.op = *op;
  checked.node = std::move(node);
  return checked;
}

result<std::vector<tensor>> compute_once(op_kernel& kernel, const checked_node& node,
                                         const std::vector<tensor>& inputs, compute_pool* pool) {
  cancellation_manager cancellation;
  step_info step;
  step.pool = pool != nullptr ? pool : &default_compute_pool();
  step.cancellation = &cancellation;
  std::vector<tensor> outputs(node.output_types.size());
  kernel_context ctx(inputs, outputs, node.output_types, step);
  if (kernel.is_async()) {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    auto finish = [&] {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      cv.notify_all();
    };
    status thrown = catch_exceptions([&] { static_cast<async_op_kernel&>(kernel).compute_async(ctx, finish); });
    if (!thrown.ok()) {
      ctx.fail(std::move(thrown));
      finish();
    }
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return done; });
  } else {
    status thrown = catch_exceptions([&] { kernel.compute(ctx); });
    if (!thrown.ok()) ctx.fail(std::move(thrown));
  }
  const std::string& name = node.node.name();
  if (!ctx.ok()) return ctx.get_status().with_context(str_cat("node '", name, "' (", node.node.op(), ")"));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].initialized()) {
      return internal_error("kernel for node '", name, "' (", node.node.op(), ") did not set output ", i);
    }
  }
  return outputs;
}

result<std::vector<tensor>> run_kernel(tf::NodeDef node, const std::vector<tensor>& inputs,
                                       compute_pool* pool, const graph::op_registry& ops,
                                       const kernel_registry& kernels) {
  auto checked = check_node(std::move(node), inputs, ops);
  if (!checked.ok()) return checked.error();
  auto kernel = kernels.create("CPU", checked->node, *checked->op, checked->input_types, checked->output_types);
  if (!kernel.ok()) return kernel.error();
  return compute_once(**kernel, *checked, inputs, pool);
}

}  // namespace troupe::kernels
