// Op schemas: _Send and _Recv, the two ends of a tensor crossing between devices, with
// TensorFlow's names and attributes. The partitioner (placement/partition.h) inserts
// them; users never write them. Both are stateful (they talk to the rendezvous, so they
// must never be merged or folded) and have no gradient.
//
// Attributes: tensor_name (the tensor's "node:index" in the original graph),
// send_device, send_device_incarnation, recv_device, client_terminated (true when one
// end is the client, not a device), and troupe's recv_device_incarnation (0 when absent,
// as in TensorFlow's GraphDefs). _Send's input type is T; _Recv's output type is
// tensor_type. A _Recv's output shape is unknown unless the node carries the optional
// `_shape` attribute (written by the partitioner when the rank is known).
#include "graph/attr.h"
#include "graph/op_registry.h"

namespace troupe::graph {

namespace {

status recv_shape(shape_context& ctx) {
  partial_shape shape = partial_shape::unknown();
  if (has_attr(ctx.node(), "_shape")) TROUPE_RETURN_IF_ERROR(ctx.get_attr("_shape", &shape));
  ctx.set_output(0, std::move(shape));
  return status();
}

op_schema transfer_attrs(op_schema schema) {
  schema.attr("tensor_name: string")
      .attr("send_device: string")
      .attr("send_device_incarnation: int")
      .attr("recv_device: string")
      .attr("recv_device_incarnation: int = 0")
      .attr("client_terminated: bool = false")
      .stateful()
      .no_gradient();
  return schema;
}

}  // namespace

void register_sendrecv_ops(op_registry& registry) {
  add_builtin_op(
      registry,
      transfer_attrs(
          op_schema("_Send").input("tensor: T").attr("T: type").shape_fn(no_outputs_shape)));
  add_builtin_op(registry, transfer_attrs(op_schema("_Recv")
                                              .output("tensor: tensor_type")
                                              .attr("tensor_type: type")
                                              .shape_fn(recv_shape)));
}

}  // namespace troupe::graph
