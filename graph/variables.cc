#include "graph/variables.h"

#include "graph/attr.h"
#include "graph/ops.h"

namespace troupe::graph {

namespace {

// The handle node was named prefix + name, or prefix + name + "_k" when that was taken
// (scope::add); the variable's other nodes go under the same relative name.
std::string relative_name(const std::string& full, const std::string& name) {
  if (full.size() >= name.size() && full.compare(full.size() - name.size(), name.size(), name) == 0) {
    return name;
  }
  auto pos = full.rfind(name + "_");
  return pos == std::string::npos ? name : full.substr(pos);
}

// The VarHandleOp, its shared_name its own full name.
output make_handle(const scope& s, const std::string& name, const tensor_shape& shape, dtype type,
                   std::map<std::string, tf::AttrValue> attrs = {}) {
  const scope named = s.with_name(name);
  attrs["dtype"] = attr_value(type);
  attrs["shape"] = attr_value(partial_shape(shape));
  attrs["shared_name"] = attr_value(named.next_name("VarHandleOp"));
  operation handle = named.add("VarHandleOp", {}, std::move(attrs));
  return handle.out();
}

// Completes a variable whose handle exists: sets shared_name, adds Assign and Read.
variable finish(const scope& s, const std::string& relative, const output& handle,
                const tensor_shape& shape, dtype type, const output& initial_value) {
  variable v;
  if (!handle.valid() || !initial_value.valid()) return v;
  if (initial_value.type != type) {
    s.record(invalid_argument_error("variable '", handle.node, "' has dtype ", dtype_name(type),
                                    " but its initial value '", initial_value.name(),
                                    "' has dtype ", dtype_name(initial_value.type)));
    return v;
  }
  const scope vs = s.sub(relative);
  v.handle = handle;
  v.initializer = vs.with_name("Assign").add("AssignVariableOp", {handle, initial_value});
  v.value = vs.sub("Read").add("ReadVariableOp", {handle}, {{"dtype", attr_value(type)}}).out();
  v.type = type;
  v.shape = shape;
  v.name = handle.node;
  if (!v.valid()) return variable{};
  return v;
}

}  // namespace

void variable_collection::add(const variable& v, bool is_trainable) {
  global.push_back(v);
  if (is_trainable) trainable.push_back(v);
}

std::int64_t variable_seed(std::int64_t seed, const std::string& full_name) {
  // FNV-1a of the name, mixed with the seed by splitmix64's finalizer.
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : full_name) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  std::uint64_t z = h + 0x9e3779b97f4a7c15ULL * (static_cast<std::uint64_t>(seed) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<std::int64_t>(z & 0x7fffffffffffffffULL);
}

variable make_variable(const scope& s, const std::string& name, const tensor_shape& shape,
                       dtype type, const output& initial_value) {
  if (!s.ok() || !initial_value.valid()) return variable{};
  output handle = make_handle(s, name, shape, type);
  return finish(s, relative_name(handle.node, name), handle, shape, type, initial_value);
}

variable make_variable(const scope& s, const std::string& name, const tensor_shape& shape,
                       dtype type, const init::initializer& init, std::int64_t seed,
                       const std::map<std::string, tf::AttrValue>& handle_attrs) {
  if (!s.ok()) return variable{};
  if (!init) {
    s.record(invalid_argument_error("make_variable '", name, "': the initializer is empty"));
    return variable{};
  }
  output handle = make_handle(s, name, shape, type, handle_attrs);
  if (!handle.valid()) return variable{};
  const std::string relative = relative_name(handle.node, name);
  output initial_value = init(s.sub(relative).sub("Initializer"), shape, type,
                              variable_seed(seed, handle.node));
  return finish(s, relative, handle, shape, type, initial_value);
}

operation global_variables_initializer(const scope& s, const std::vector<variable>& vars) {
  std::vector<operation> deps;
  for (const variable& v : vars) deps.push_back(v.initializer);
  return ops::no_op(s.with_name("init").with_control_dependencies(deps));
}

operation global_variables_initializer(const scope& s, const variable_collection& vars) {
  return global_variables_initializer(s, vars.global);
}

}  // namespace troupe::graph
