// Resources: stateful objects (variables, queues, readers) that a graph refers to by
// handle, and the `resource` dtype tensors that carry those handles between nodes.
//
// A resource handle names the object (device, container, name) and, in one process,
// points at it: `target` is a shared reference to the object (for an actor-backed
// resource, a small wrapper holding the actor). Handles are produced by ops such as
// VarHandleOp and FIFOQueueV2 and consumed by the ops that use the state; the placer
// runs consumers on the resource's device, so a handle never has to be resolved
// elsewhere.
//
//   tensor h = tensor::from_resource({"/job:ps/...", "", "w", std::make_shared<my_var>()});
//   const resource_handle& r = h.resource_value();
//   auto* v = r.get<my_var>();     // null when the target is another kind of resource
//
// Thread safety: a handle is immutable once in a tensor; the target guards itself.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace troupe {

class resource {
 public:
  virtual ~resource() = default;
  // "variable", "queue", ...: used in error messages.
  virtual std::string_view kind() const = 0;
};

struct resource_handle {
  std::string device;
  std::string container;
  std::string name;
  std::shared_ptr<resource> target;

  template <class T>
  T* get() const {
    return dynamic_cast<T*>(target.get());
  }
  // "variable 'w' on /job:ps/replica:0/task:0/device:CPU:0"
  std::string debug_string() const;
};

}  // namespace troupe
