// The resource a stateful CPU kernel keeps on its device, found by its node's
// (container, shared_name) attrs as TensorFlow's ResourceMgr keys them, so that other ops
// (a checkpoint's save and restore ops) reach the same object by the same names: an
// IdxReader's cursor, a random op's generator.
//
//   state_ = node_resource<my_state>(c, /*require_shared_name=*/false, "reader",
//                                    [] { return std::make_shared<my_state>(); });
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "graph/attr.h"
#include "kernels/kernel.h"

namespace troupe::kernels {

// The R under the node's (container, shared_name) on c's device, made by `make` when
// absent (whoever asks first). Missing attrs are "": an empty shared_name means the
// node's own name, unless `require_shared_name` (ops that name another node's resource).
// Outside a device (a kernel run on its own) a fresh make() of its own, or an error with
// require_shared_name. Null with c failed; `what` names R in errors ("reader").
template <class R>
std::shared_ptr<R> node_resource(kernel_construction& c, bool require_shared_name, std::string_view what,
                                 const std::function<std::shared_ptr<R>()>& make) {
  std::string container, name;
  if (graph::has_attr(c.node(), "container") && !c.get_attr("container", &container)) return nullptr;
  if (graph::has_attr(c.node(), "shared_name") && !c.get_attr("shared_name", &name)) return nullptr;
  if (name.empty()) {
    if (require_shared_name) {
      c.fail(invalid_argument_error(c.node().op(), " '", c.node().name(), "': shared_name must name the ", what));
      return nullptr;
    }
    name = c.node().name();
  }
  if (c.device() == nullptr) {
    if (!require_shared_name) return make();
    c.fail(failed_precondition_error(c.node().op(), " '", c.node().name(), "' finds its ", what,
                                     " in a device's resources: run it in a session"));
    return nullptr;
  }
  auto found = c.device()->resources().lookup_or_create(
      container, name, [&] { return result<std::shared_ptr<resource>>(std::shared_ptr<resource>(make())); });
  if (!found.ok()) {
    c.fail(found.error());
    return nullptr;
  }
  auto typed = std::dynamic_pointer_cast<R>(*found);
  if (typed == nullptr) {
    c.fail(invalid_argument_error(c.node().op(), " '", c.node().name(), "': resource '", name, "' in container '",
                                  container, "' on ", c.device()->name(), " is a ", (*found)->kind(), ", not a ",
                                  what, "; give this node another shared_name"));
  }
  return typed;
}

}  // namespace troupe::kernels
