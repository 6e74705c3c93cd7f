// Op schemas: queues, spelled as TensorFlow's raw ops (the V2, resource-handle forms),
// and conditional accumulators (synchronous replication's gradient aggregation).
//
//   FIFOQueueV2, RandomShuffleQueueV2, PaddingFIFOQueueV2   -> handle (a resource)
//   QueueEnqueueV2       handle, components...      one element
//   QueueEnqueueManyV2   handle, components...      n elements, stacked on dimension 0
//   QueueDequeueV2       handle -> components...    one element
//   QueueDequeueManyV2   handle, n -> components... exactly n elements, stacked
//   QueueDequeueUpToV2   handle, n -> components... at most n once the queue is closed
//   QueueCloseV2         handle                     (cancel_pending_enqueues)
//   QueueSizeV2          handle -> size (int32)
//   QueueSaveStateV2     handle -> components..., random_state (int64)   (troupe's)
//   QueueRestoreStateV2  handle, components..., random_state              (troupe's)
//
// The last two save and restore a queue's contents for checkpoints (actors/queue.h,
// queue_save_state): every element stacked per component, in the queue's order, and a
// RandomShuffleQueue's generator state (int64 [11]; [0] for other kinds), so that a
// restored queue makes the same dequeues. They need fully defined component shapes.
//
// An element is a tuple of tensors, one per entry of the queue's `component_types`;
// `shapes`, when given (one per component), fixes each component's shape (a
// PaddingFIFOQueueV2 requires them and lets dimensions be unknown, -1: DequeueMany pads
// them to the largest element of the batch). `capacity` < 0 means unbounded.
//
// Every op here is stateful and has no gradient. Kernels are actors (actors/): a blocked
// enqueue or dequeue is a pending response, never a blocked thread.
//
// Accumulators (actors/accumulator.h has their contract):
//   ConditionalAccumulator, ResourceConditionalAccumulator, SparseConditionalAccumulator
//                                     -> handle (a resource: troupe has no Ref(string))
//   (Resource)AccumulatorApplyGradient   handle, local_step int64, gradient
//   (Resource)AccumulatorTakeGradient    handle, num_required int32 -> average
//   (Resource)AccumulatorNumAccumulated  handle -> num_accumulated int32
//   (Resource)AccumulatorSetGlobalStep   handle, new_global_step int64
//   SparseAccumulatorApplyGradient       handle, local_step, gradient_indices int64,
//                                        gradient_values, gradient_shape int64
//   SparseAccumulatorTakeGradient        handle, num_required -> indices, values, shape
//
// Shapes: when a handle comes straight from a queue op, dequeue outputs take the queue's
// `shapes` (with a leading dimension n for DequeueMany when n is a constant, unknown for
// DequeueUpTo), and enqueue checks component count, dtypes and shapes against the queue;
// otherwise outputs have unknown shape and the queue actor checks at run time.
#include <string>

#include "graph/attr.h"
#include "graph/op_registry.h"

namespace troupe::graph {

namespace {

bool is_queue_op(const std::string& op) {
  return op == "FIFOQueueV2" || op == "RandomShuffleQueueV2" || op == "PaddingFIFOQueueV2";
}

// The `shapes` attribute of a queue node (list(shape); empty when not given).
std::vector<partial_shape> queue_shapes(const tf::NodeDef& queue) {
  std::vector<partial_shape> shapes;
  if (has_attr(queue, "shapes") && !get_attr(queue, "shapes", &shapes).ok()) shapes.clear();
  return shapes;
}

// What the graph knows about the queue behind input 0.
struct queue_info {
  const tf::NodeDef* node = nullptr;  // nullptr: unknown
  std::vector<dtype> types;
  std::vector<partial_shape> shapes;  // empty: not constrained
};

status queue_of(const shape_context& ctx, queue_info* out) {
  *out = queue_info{};
  const tf::NodeDef* producer = ctx.input_node(0);
  if (producer == nullptr || !is_queue_op(producer->op())) return status();
  out->node = producer;
  TROUPE_RETURN_IF_ERROR(get_attr(*producer, "component_types", &out->types));
  out->shapes = queue_shapes(*producer);
  return status();
}

status handle_is_scalar(const shape_context& ctx) {
  const partial_shape& s = ctx.input(0);
  if (s.known_rank() && s.rank() != 0) {
    return ctx.error("the queue handle must be a scalar but has shape ", s.to_string());
  }
  return status();
}

std::string type_list(const std::vector<dtype>& types) {
  std::string out;
  for (dtype t : types) out += str_cat(out.empty() ? "" : ", ", dtype_name(t));
  return "[" + out + "]";
}

// The queue op itself: `shapes` is empty or one per component (PaddingFIFOQueueV2: one
// per component); RandomShuffleQueueV2's min_after_dequeue is in [0, capacity).
status queue_shape(shape_context& ctx) {
  std::vector<dtype> types;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("component_types", &types));
  std::vector<partial_shape> shapes = queue_shapes(ctx.node());
  const bool padding = ctx.node().op() == "PaddingFIFOQueueV2";
  if (padding ? shapes.size() != types.size() : !shapes.empty() && shapes.size() != types.size()) {
    return ctx.error("has ", types.size(), " component type(s) but ", shapes.size(),
                     " shape(s); give one shape per component",
                     padding ? "" : " or none");
  }
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (!shapes[i].known_rank()) {
      return ctx.error("shape ", i, " has unknown rank; queue shapes need a rank (dimensions ",
                       padding ? "may be -1)" : "known)");
    }
    if (!padding && !shapes[i].fully_defined()) {
      return ctx.error("shape ", i, " ", shapes[i].to_string(),
                       " is not fully defined; only PaddingFIFOQueueV2 allows unknown dimensions");
    }
  }
  if (ctx.node().op() == "RandomShuffleQueueV2") {
    std::int64_t capacity = -1, min_after_dequeue = 0;
    TROUPE_RETURN_IF_ERROR(ctx.get_attr("capacity", &capacity));
    TROUPE_RETURN_IF_ERROR(ctx.get_attr("min_after_dequeue", &min_after_dequeue));
    if (min_after_dequeue < 0) {
      return ctx.error("min_after_dequeue ", min_after_dequeue, " must be >= 0");
    }
    if (capacity >= 0 && min_after_dequeue >= capacity) {
      return ctx.error("min_after_dequeue ", min_after_dequeue, " must be < capacity ", capacity);
    }
  }
  ctx.set_output(0, partial_shape::scalar());
  return status();
}

// QueueEnqueueV2 (many = false) and QueueEnqueueManyV2 (many = true).
shape_function enqueue_shape(bool many) {
  return [many](shape_context& ctx) -> status {
    TROUPE_RETURN_IF_ERROR(handle_is_scalar(ctx));
    const int n = ctx.num_inputs() - 1;
    std::int64_t batch = -1;
    for (int i = 0; i < n; ++i) {
      if (!many) continue;
      const partial_shape& s = ctx.input(i + 1);
      if (!s.known_rank()) continue;
      if (s.rank() == 0) return ctx.error("component ", i, " is a scalar; EnqueueMany needs rank >= 1");
      if (s.dim(0) >= 0 && batch >= 0 && s.dim(0) != batch) {
        return ctx.error("components disagree on the number of elements: component ", i, " has ",
                         s.dim(0), ", an earlier one ", batch);
      }
      if (s.dim(0) >= 0) batch = s.dim(0);
    }
    queue_info queue;
    TROUPE_RETURN_IF_ERROR(queue_of(ctx, &queue));
    if (queue.node == nullptr) return status();
    std::vector<dtype> given;
    for (int i = 0; i < n; ++i) given.push_back(ctx.input_type(i + 1));
    if (given != queue.types) {
      return ctx.error("enqueues components of types ", type_list(given), " into queue '",
                       queue.node->name(), "' of component types ", type_list(queue.types));
    }
    for (std::size_t i = 0; i < queue.shapes.size(); ++i) {
      partial_shape s = ctx.input(static_cast<int>(i) + 1);
      if (many && s.known_rank() && s.rank() >= 1) {
        s = partial_shape(std::vector<std::int64_t>(s.dims().begin() + 1, s.dims().end()));
      }
      if (!queue.shapes[i].merge(s).ok()) {
        return ctx.error("component ", i, " has shape ", ctx.input(static_cast<int>(i) + 1).to_string(),
                         many ? " (elements along dimension 0)" : "", " but queue '",
                         queue.node->name(), "' holds ", queue.shapes[i].to_string());
      }
    }
    return status();
  };
}

enum class dequeue_kind { one, many, up_to };

shape_function dequeue_shape(dequeue_kind kind) {
  return [kind](shape_context& ctx) -> status {
    TROUPE_RETURN_IF_ERROR(handle_is_scalar(ctx));
    std::vector<dtype> types;
    TROUPE_RETURN_IF_ERROR(ctx.get_attr("component_types", &types));
    std::int64_t n = -1;
    if (kind != dequeue_kind::one) {
      TROUPE_RETURN_IF_ERROR(ctx.require_rank(1, 0));
      if (const tensor* value = ctx.input_value(1)) {
        n = value->scalar_value<std::int32_t>();
        if (n < 0) return ctx.error("n is ", n, " but must be >= 0");
      }
    }
    queue_info queue;
    TROUPE_RETURN_IF_ERROR(queue_of(ctx, &queue));
    if (queue.node != nullptr && queue.types != types) {
      return ctx.error("dequeues component types ", type_list(types), " from queue '",
                       queue.node->name(), "' of component types ", type_list(queue.types));
    }
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      if (queue.node == nullptr || queue.shapes.empty()) {
        ctx.set_output(i, partial_shape::unknown());
        continue;
      }
      const partial_shape& element = queue.shapes[static_cast<std::size_t>(i)];
      if (kind == dequeue_kind::one) {
        ctx.set_output(i, element);
        continue;
      }
      std::vector<std::int64_t> dims{kind == dequeue_kind::many ? n : -1};
      dims.insert(dims.end(), element.dims().begin(), element.dims().end());
      ctx.set_output(i, partial_shape(std::move(dims)));
    }
    return status();
  };
}

status queue_handle_only_shape(shape_context& ctx) { return handle_is_scalar(ctx); }

status queue_size_shape(shape_context& ctx) {
  TROUPE_RETURN_IF_ERROR(handle_is_scalar(ctx));
  ctx.set_output(0, partial_shape::scalar());
  return status();
}

op_schema queue_op(std::string name) {
  op_schema schema(std::move(name));
  schema.output("handle: resource")
      .attr("component_types: list(type) >= 1")
      .attr("shapes: list(shape) >= 0 = []")
      .attr("capacity: int = -1")
      .attr("container: string = ''")
      .attr("shared_name: string = ''")
      .stateful()
      .no_gradient()
      .shape_fn(queue_shape);
  return schema;
}

// An op whose input 0 is the handle of a queue or an accumulator (stateful, no gradient).
op_schema handle_user(std::string name) {
  op_schema schema(std::move(name));
  schema.input("handle: resource").stateful().no_gradient();
  return schema;
}

// The `shape` attribute of the accumulator op behind input 0; unknown when the handle
// comes from elsewhere.
partial_shape accumulator_shape_of(const shape_context& ctx) {
  const tf::NodeDef* producer = ctx.input_node(0);
  partial_shape shape;
  if (producer == nullptr || producer->op().find("ConditionalAccumulator") == std::string::npos) return shape;
  if (!get_attr(*producer, "shape", &shape).ok()) return partial_shape();
  return shape;
}

// Every accumulator op's scalar inputs (after the handle) and the handle itself.
shape_function accumulator_user_shape(std::vector<int> scalars) {
  return [scalars](shape_context& ctx) -> status {
    const partial_shape& h = ctx.input(0);
    if (h.known_rank() && h.rank() != 0) return ctx.error("the accumulator handle must be a scalar but has shape ", h.to_string());
    for (int i : scalars) TROUPE_RETURN_IF_ERROR(ctx.require_rank(i, 0));
    return status();
  };
}

status accumulator_op_shape(shape_context& ctx) {
  std::string reduction = "MEAN";
  if (ctx.node().attr().count("reduction_type") > 0) TROUPE_RETURN_IF_ERROR(ctx.get_attr("reduction_type", &reduction));
  if (reduction != "MEAN" && reduction != "SUM") return ctx.error("reduction_type '", reduction, "' must be MEAN or SUM");
  ctx.set_output(0, partial_shape::scalar());
  return status();
}

op_schema accumulator_op(std::string name) {
  op_schema schema(std::move(name));
  schema.output("handle: resource")
      .attr("dtype: {float, double, int32, int64}")
      .attr("shape: shape")
      .attr("container: string = ''")
      .attr("shared_name: string = ''")
      .attr("reduction_type: string = 'MEAN'")
      .stateful()
      .no_gradient()
      .shape_fn(accumulator_op_shape);
  return schema;
}

void register_accumulator_ops(op_registry& registry) {
  add_builtin_op(registry, accumulator_op("ConditionalAccumulator"));
  add_builtin_op(registry, accumulator_op("ResourceConditionalAccumulator"));
  add_builtin_op(registry, accumulator_op("SparseConditionalAccumulator"));
  for (std::string prefix : {"", "Resource"}) {
    add_builtin_op(registry, handle_user(prefix + "AccumulatorApplyGradient")
                                 .input("local_step: int64")
                                 .input("gradient: dtype")
                                 .attr("dtype: {float, double, int32, int64}")
                                 .shape_fn(accumulator_user_shape({1})));
    add_builtin_op(registry, handle_user(prefix + "AccumulatorTakeGradient")
                                 .input("num_required: int32")
                                 .output("average: dtype")
                                 .attr("dtype: {float, double, int32, int64}")
                                 .shape_fn([](shape_context& ctx) -> status {
                                   TROUPE_RETURN_IF_ERROR(accumulator_user_shape({1})(ctx));
                                   ctx.set_output(0, accumulator_shape_of(ctx));
                                   return status();
                                 }));
    add_builtin_op(registry, handle_user(prefix + "AccumulatorNumAccumulated")
                                 .output("num_accumulated: int32")
                                 .shape_fn([](shape_context& ctx) -> status {
                                   TROUPE_RETURN_IF_ERROR(accumulator_user_shape({})(ctx));
                                   ctx.set_output(0, partial_shape::scalar());
                                   return status();
                                 }));
    add_builtin_op(registry, handle_user(prefix + "AccumulatorSetGlobalStep")
                                 .input("new_global_step: int64")
                                 .shape_fn(accumulator_user_shape({1})));
  }
  add_builtin_op(registry, handle_user("SparseAccumulatorApplyGradient")
                               .input("local_step: int64")
                               .input("gradient_indices: int64")
                               .input("gradient_values: dtype")
                               .input("gradient_shape: int64")
                               .attr("dtype: {float, double, int32, int64}")
                               .attr("has_known_shape: bool")
                               .shape_fn([](shape_context& ctx) -> status {
                                 TROUPE_RETURN_IF_ERROR(accumulator_user_shape({1})(ctx));
                                 return ctx.require_rank(2, 1);
                               }));
  add_builtin_op(registry, handle_user("SparseAccumulatorTakeGradient")
                               .input("num_required: int32")
                               .output("indices: int64")
                               .output("values: dtype")
                               .output("shape: int64")
                               .attr("dtype: {float, double, int32, int64}")
                               .shape_fn([](shape_context& ctx) -> status {
                                 TROUPE_RETURN_IF_ERROR(accumulator_user_shape({1})(ctx));
                                 const partial_shape acc = accumulator_shape_of(ctx);
                                 ctx.set_output(0, partial_shape({-1}));
                                 if (acc.known_rank() && acc.rank() >= 1) {
                                   std::vector<std::int64_t> dims = acc.dims();
                                   dims[0] = -1;
                                   ctx.set_output(1, partial_shape(std::move(dims)));
                                   ctx.set_output(2, partial_shape({acc.rank()}));
                                 } else {
                                   ctx.set_output(1, partial_shape::unknown());
                                   ctx.set_output(2, partial_shape({-1}));
                                 }
                                 return status();
                               }));
}

}  // namespace

void register_data_flow_ops(op_registry& registry) {
  register_accumulator_ops(registry);
  add_builtin_op(registry, queue_op("FIFOQueueV2"));
  add_builtin_op(registry, queue_op("PaddingFIFOQueueV2"));
  add_builtin_op(registry, queue_op("RandomShuffleQueueV2")
                               .attr("min_after_dequeue: int = 0")
                               .attr("seed: int = 0")
                               .attr("seed2: int = 0"));

  for (const char* op : {"QueueEnqueueV2", "QueueEnqueueManyV2"}) {
    add_builtin_op(registry, handle_user(op)
                                 .input("components: Tcomponents")
                                 .attr("Tcomponents: list(type) >= 1")
                                 .attr("timeout_ms: int = -1")
                                 .shape_fn(enqueue_shape(std::string(op) == "QueueEnqueueManyV2")));
  }
  add_builtin_op(registry, handle_user("QueueDequeueV2")
                               .output("components: component_types")
                               .attr("component_types: list(type) >= 1")
                               .attr("timeout_ms: int = -1")
                               .shape_fn(dequeue_shape(dequeue_kind::one)));
  add_builtin_op(registry, handle_user("QueueDequeueManyV2")
                               .input("n: int32")
                               .output("components: component_types")
                               .attr("component_types: list(type) >= 1")
                               .attr("timeout_ms: int = -1")
                               .shape_fn(dequeue_shape(dequeue_kind::many)));
  add_builtin_op(registry, handle_user("QueueDequeueUpToV2")
                               .input("n: int32")
                               .output("components: component_types")
                               .attr("component_types: list(type) >= 1")
                               .attr("timeout_ms: int = -1")
                               .shape_fn(dequeue_shape(dequeue_kind::up_to)));
  add_builtin_op(registry, handle_user("QueueCloseV2")
                               .attr("cancel_pending_enqueues: bool = false")
                               .shape_fn(queue_handle_only_shape));
  add_builtin_op(registry, handle_user("QueueSizeV2")
                               .output("size: int32")
                               .shape_fn(queue_size_shape));
  add_builtin_op(registry, handle_user("QueueSaveStateV2")
                               .output("components: component_types")
                               .output("random_state: int64")
                               .attr("component_types: list(type) >= 1")
                               .shape_fn([](shape_context& ctx) -> status {
                                 TROUPE_RETURN_IF_ERROR(handle_is_scalar(ctx));
                                 queue_info queue;
                                 TROUPE_RETURN_IF_ERROR(queue_of(ctx, &queue));
                                 const int n = ctx.num_outputs() - 1;
                                 for (int i = 0; i < n; ++i) {
                                   if (queue.node == nullptr || queue.shapes.empty()) {
                                     ctx.set_output(i, partial_shape::unknown());
                                     continue;
                                   }
                                   std::vector<std::int64_t> dims{-1};
                                   const auto& element = queue.shapes[static_cast<std::size_t>(i)].dims();
                                   dims.insert(dims.end(), element.begin(), element.end());
                                   ctx.set_output(i, partial_shape(std::move(dims)));
                                 }
                                 ctx.set_output(n, partial_shape({-1}));
                                 return status();
                               }));
  add_builtin_op(registry, handle_user("QueueRestoreStateV2")
                               .input("components: component_types")
                               .input("random_state: int64")
                               .attr("component_types: list(type) >= 1")
                               .shape_fn([](shape_context& ctx) -> status {
                                 TROUPE_RETURN_IF_ERROR(handle_is_scalar(ctx));
                                 return ctx.require_rank(ctx.num_inputs() - 1, 1);
                               }));
}

}  // namespace troupe::graph
