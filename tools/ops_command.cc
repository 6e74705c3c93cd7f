// troupe ops: the ops this build knows, one line each: name, the device types with kernels
// for it, and whether it has a gradient. Tools (tests/tf_compat/generate.py, the coverage
// page doc/graphdef.md) read it; a person greps it.
#include "actors/runtime_kernels.h"
#include "graph/op_registry.h"
#include "kernels/kernel_registry.h"
#include "tools/commands.h"

namespace troupe::tools {

int ops_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (!args.empty()) {
    err << "usage: troupe ops\n"
           "Lists every op: NAME  DEVICES (kernels; '-' none)  GRADIENT (yes, none: declared "
           "not differentiable, missing)\n";
    return 2;
  }
  actors::ensure_runtime_kernels();
  const auto& ops = graph::op_registry::builtin();
  const auto& kernels = kernels::kernel_registry::builtin();
  for (const std::string& name : ops.op_names()) {
    const graph::op_def* def = ops.find(name);
    std::string devices;
    for (const std::string& d : kernels.device_types(name)) devices += (devices.empty() ? "" : ",") + d;
    const char* gradient = def->gradient ? "yes" : def->not_differentiable ? "none" : "missing";
    out << name << ' ' << (devices.empty() ? "-" : devices) << ' ' << gradient << '\n';
  }
  return 0;
}

}  // namespace troupe::tools
