// Op schemas: input pipelines that read examples from files (the reader ops of the
// TensorFlow paper's Figure 1).
//
// IdxReader reads an images IDX file and its labels IDX file (MNIST, Fashion-MNIST; gzip
// or plain, see core/idx.h) and emits one batch of examples per run. It is stateful: one
// node keeps one cursor, shared by all the steps that run it, so concurrent steps get
// disjoint batches and together see every example of an epoch exactly once. The cursor
// is a resource of the device under (container, shared_name; an empty shared_name means
// the node's name), which IdxReaderSaveState and IdxReaderRestoreState reach by the same
// names: a checkpoint saves it, and a restored reader continues with the same batches.
#include "graph/op_registry.h"

namespace troupe::graph {

namespace {

// images: [k, rows, cols], labels: [k]. k is batch_size except for the last batch of the
// final epoch, so it is known only when the reader runs forever (num_epochs = 0).
status idx_reader_shape(shape_context& ctx) {
  std::int64_t batch_size = 0, num_epochs = 0;
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("batch_size", &batch_size));
  TROUPE_RETURN_IF_ERROR(ctx.get_attr("num_epochs", &num_epochs));
  std::int64_t k = num_epochs == 0 ? batch_size : -1;
  ctx.set_output(0, partial_shape({k, -1, -1}));
  ctx.set_output(1, partial_shape({k}));
  return status();
}

}  // namespace

void register_io_ops(op_registry& registry) {
  // Batches of (image, label) pairs from two IDX files of uint8 holding n images of
  // rows x cols and n labels. Epochs follow each other without a gap: a batch may end one
  // epoch and begin the next. With shuffle, epoch e visits the examples in a permutation
  // drawn from Philox with key `seed` and stream e (seed 0 is a seed like any other, so a
  // reader is always reproducible); without, in file order. After num_epochs epochs
  // (0 = forever) the next run fails with OUT_OF_RANGE, as TensorFlow's readers do.
  add_builtin_op(registry, op_schema("IdxReader")
                               .output("images: uint8")
                               .output("labels: uint8")
                               .attr("images: string")
                               .attr("labels: string")
                               .attr("batch_size: int >= 1")
                               .attr("num_epochs: int >= 0 = 0")
                               .attr("shuffle: bool = true")
                               .attr("seed: int = 0")
                               .attr("container: string = ''")
                               .attr("shared_name: string = ''")
                               .stateful()
                               .shape_fn(idx_reader_shape)
                               .no_gradient());
  // The cursor of the IdxReader that (container, shared_name) name on this device:
  // int64 [epoch, position], position counting the examples of the epoch already read
  // (the reader's order within an epoch depends only on its seed and the epoch, so these
  // two numbers make the same batches again). A reader not yet run is at [0, 0].
  add_builtin_op(registry, op_schema("IdxReaderSaveState")
                               .output("state: int64")
                               .attr("container: string = ''")
                               .attr("shared_name: string")
                               .stateful()
                               .shape_fn([](shape_context& ctx) -> status {
                                 ctx.set_output(0, partial_shape({2}));
                                 return status();
                               })
                               .no_gradient());
  // Sets that cursor (from IdxReaderSaveState's output): the reader's next batch starts
  // at example `position` of epoch `epoch`'s order. A position past the reader's files
  // fails the reader's next run with INVALID_ARGUMENT.
  add_builtin_op(registry, op_schema("IdxReaderRestoreState")
                               .input("state: int64")
                               .attr("container: string = ''")
                               .attr("shared_name: string")
                               .stateful()
                               .shape_fn([](shape_context& ctx) -> status { return ctx.require_rank(0, 1); })
                               .no_gradient());
}

}  // namespace troupe::graph
