#include "graph/op_registry.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace troupe::graph {

void register_builtin_ops(op_registry& registry);  // generated from the CMake file list

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "a, b, c" at top-level commas.
std::vector<std::string_view> split_list(std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[' || s[i] == '{' || s[i] == '(') ++depth;
    if (s[i] == ']' || s[i] == '}' || s[i] == ')') --depth;
    if (s[i] == ',' && depth == 0) {
      parts.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  auto last = trim(s.substr(start));
  if (!last.empty()) parts.push_back(last);
  return parts;
}

std::string unquote(std::string_view s) {
  s = trim(s);
  if (s.size() >= 2 && (s.front() == '\'' || s.front() == '"') && s.back() == s.front()) {
    return std::string(s.substr(1, s.size() - 2));
  }
  return std::string(s);
}

// Parses a default-value literal for an attribute of kind `type`.
result<tf::AttrValue> parse_default(std::string_view type, std::string_view text) {
  text = trim(text);
  tf::AttrValue v;
  auto parse_int = [](std::string_view t) -> result<std::int64_t> {
    try {
      std::size_t used = 0;
      std::string s(trim(t));
      long long x = std::stoll(s, &used);
      if (used != s.size()) throw std::invalid_argument(s);
      return static_cast<std::int64_t>(x);
    } catch (const std::exception&) {
      return invalid_argument_error("bad integer '", t, "'");
    }
  };
  auto parse_float = [](std::string_view t) -> result<float> {
    try {
      return std::stof(std::string(trim(t)));
    } catch (const std::exception&) {
      return invalid_argument_error("bad float '", t, "'");
    }
  };
  if (type == "int") {
    auto x = parse_int(text);
    if (!x.ok()) return x.error();
    v.set_i(*x);
  } else if (type == "float") {
    auto x = parse_float(text);
    if (!x.ok()) return x.error();
    v.set_f(*x);
  } else if (type == "bool") {
    if (text != "true" && text != "false") return invalid_argument_error("bad bool '", text, "'");
    v.set_b(text == "true");
  } else if (type == "string") {
    v.set_s(unquote(text));
  } else if (type == "type") {
    auto t = parse_dtype(text);
    if (!t.ok()) return t.error();
    v.set_type(static_cast<tf::DataType>(*t));
  } else if (type == "shape") {
    if (text == "?") {
      v.mutable_shape()->set_unknown_rank(true);
    } else {
      if (text.size() < 2 || text.front() != '[') return invalid_argument_error("bad shape '", text, "'");
      for (auto d : split_list(text.substr(1, text.size() - 2))) {
        auto x = parse_int(d);
        if (!x.ok()) return x.error();
        v.mutable_shape()->add_dim()->set_size(*x);
      }
    }
  } else if (type.starts_with("list(")) {
    if (text.size() < 2 || text.front() != '[' || text.back() != ']') {
      return invalid_argument_error("bad list default '", text, "'");
    }
    auto* list = v.mutable_list();
    for (auto item : split_list(text.substr(1, text.size() - 2))) {
      if (type == "list(int)") {
        auto x = parse_int(item);
        if (!x.ok()) return x.error();
        list->add_i(*x);
      } else if (type == "list(float)") {
        auto x = parse_float(item);
        if (!x.ok()) return x.error();
        list->add_f(*x);
      } else if (type == "list(string)") {
        list->add_s(unquote(item));
      } else if (type == "list(type)") {
        auto t = parse_dtype(item);
        if (!t.ok()) return t.error();
        list->add_type(static_cast<tf::DataType>(*t));
      } else {
        return invalid_argument_error("defaults of kind ", type, " must be empty lists");
      }
    }
  } else {
    return invalid_argument_error("attributes of kind ", type, " cannot have a default");
  }
  return v;
}

bool is_known_attr_kind(std::string_view kind) {
  static const char* kinds[] = {"type", "int", "float", "bool", "string", "shape", "tensor",
                                "func", "list(int)", "list(type)", "list(float)",
                                "list(string)", "list(shape)", "list(bool)", "list(tensor)"};
  return std::any_of(std::begin(kinds), std::end(kinds), [&](const char* k) { return kind == k; });
}

result<attr_def> parse_attr_spec(std::string_view spec) {
  auto colon = spec.find(':');
  if (colon == std::string_view::npos) return invalid_argument_error("attr spec '", spec, "' has no ':'");
  attr_def def;
  def.name = std::string(trim(spec.substr(0, colon)));
  std::string_view rest = trim(spec.substr(colon + 1));
  std::string_view default_text;
  // '=' inside braces is not a default separator, but none of our kinds contain one.
  auto eq = rest.find('=');
  if (eq != std::string_view::npos && !(eq > 0 && rest[eq - 1] == '>')) {
    default_text = trim(rest.substr(eq + 1));
    rest = trim(rest.substr(0, eq));
  } else if (eq != std::string_view::npos) {
    // ">=" : look for a second '='.
    auto eq2 = rest.find('=', eq + 1);
    if (eq2 != std::string_view::npos) {
      default_text = trim(rest.substr(eq2 + 1));
      rest = trim(rest.substr(0, eq2));
    }
  }
  if (!rest.empty() && rest.front() == '{') {
    if (rest.back() != '}') return invalid_argument_error("attr spec '", spec, "': unbalanced '{'");
    auto items = split_list(rest.substr(1, rest.size() - 2));
    if (!items.empty() && (items[0].front() == '\'' || items[0].front() == '"')) {
      def.type = "string";
      for (auto item : items) def.allowed_strings.push_back(unquote(item));
    } else {
      def.type = "type";
      for (auto item : items) {
        auto t = parse_dtype(item);
        if (!t.ok()) return t.error().with_context(str_cat("attr spec '", spec, "'"));
        def.allowed_types.push_back(*t);
      }
    }
  } else {
    auto ge = rest.find(">=");
    if (ge != std::string_view::npos) {
      try {
        def.minimum = std::stoll(std::string(trim(rest.substr(ge + 2))));
      } catch (const std::exception&) {
        return invalid_argument_error("attr spec '", spec, "': bad minimum");
      }
      rest = trim(rest.substr(0, ge));
    }
    def.type = std::string(rest);
    if (def.type == "list(type)" || def.type == "type") {
      // allowed set may follow as "list({float, int32})": not used by built-in ops.
    }
    if (!is_known_attr_kind(def.type)) {
      return invalid_argument_error("attr spec '", spec, "': unknown kind '", def.type, "'");
    }
  }
  if (!default_text.empty()) {
    auto v = parse_default(def.type, default_text);
    if (!v.ok()) return v.error().with_context(str_cat("attr spec '", spec, "'"));
    def.default_value = std::move(*v);
  }
  return def;
}

result<arg_def> parse_arg_spec(std::string_view spec) {
  auto colon = spec.find(':');
  if (colon == std::string_view::npos) return invalid_argument_error("arg spec '", spec, "' has no ':'");
  arg_def def;
  def.name = std::string(trim(spec.substr(0, colon)));
  std::string_view rest = trim(spec.substr(colon + 1));
  auto star = rest.find('*');
  if (star != std::string_view::npos) {
    def.number_attr = std::string(trim(rest.substr(0, star)));
    rest = trim(rest.substr(star + 1));
  }
  auto fixed = parse_dtype(rest);
  if (fixed.ok() || rest == "resource") {
    def.type = fixed.ok() ? *fixed : dtype::resource;
  } else {
    def.type_attr = std::string(rest);  // resolved against the attrs in op_registry::add
  }
  return def;
}

}  // namespace

const attr_def* op_def::find_attr(std::string_view attr) const {
  for (const auto& a : attrs) {
    if (a.name == attr) return &a;
  }
  return nullptr;
}

op_schema::op_schema(std::string name) { def_.name = std::move(name); }

op_schema& op_schema::input(std::string_view spec) {
  auto a = parse_arg_spec(spec);
  if (a.ok()) def_.inputs.push_back(std::move(*a));
  else if (status_.ok()) status_ = a.error();
  return *this;
}

op_schema& op_schema::output(std::string_view spec) {
  auto a = parse_arg_spec(spec);
  if (a.ok()) def_.outputs.push_back(std::move(*a));
  else if (status_.ok()) status_ = a.error();
  return *this;
}

op_schema& op_schema::attr(std::string_view spec) {
  auto a = parse_attr_spec(spec);
  if (a.ok()) def_.attrs.push_back(std::move(*a));
  else if (status_.ok()) status_ = a.error();
  return *this;
}

op_schema& op_schema::stateful() {
  def_.is_stateful = true;
  return *this;
}

op_schema& op_schema::shape_fn(shape_function fn) {
  def_.shape = std::move(fn);
  return *this;
}

op_schema& op_schema::gradient(gradient_function fn) {
  def_.gradient = std::move(fn);
  return *this;
}

op_schema& op_schema::no_gradient() {
  def_.not_differentiable = true;
  return *this;
}

status op_registry::add(op_schema schema) {
  if (!schema.status_.ok()) return schema.status_.with_context(str_cat("op ", schema.def_.name));
  op_def& def = schema.def_;
  // An arg's type name is either a "type" attr or a "list(type)" attr.
  for (auto* args : {&def.inputs, &def.outputs}) {
    for (auto& arg : *args) {
      if (!arg.number_attr.empty()) {
        const attr_def* n = def.find_attr(arg.number_attr);
        if (n == nullptr || n->type != "int") {
          return invalid_argument_error("op ", def.name, ": arg '", arg.name, "' counts by '",
                                        arg.number_attr, "', which is not an int attr");
        }
      }
      if (arg.type_attr.empty()) continue;
      const attr_def* a = def.find_attr(arg.type_attr);
      if (a == nullptr) {
        return invalid_argument_error("op ", def.name, ": arg '", arg.name, "' has type '",
                                      arg.type_attr, "', neither a dtype nor an attr");
      }
      if (a->type == "list(type)") {
        arg.type_list_attr = std::move(arg.type_attr);
        arg.type_attr.clear();
      } else if (a->type != "type") {
        return invalid_argument_error("op ", def.name, ": arg '", arg.name, "' typed by attr '",
                                      a->name, "' of kind ", a->type);
      }
    }
  }
  if (ops_.count(def.name) > 0) return already_exists_error("op ", def.name, " is already registered");
  std::string name = def.name;
  ops_.emplace(std::move(name), std::make_unique<op_def>(std::move(def)));
  return status();
}

const op_def* op_registry::find(std::string_view name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

namespace {
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t prev = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cur = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (same ? 0 : 1)});
      prev = cur;
    }
  }
  return row[b.size()];
}
}  // namespace

result<const op_def*> op_registry::lookup(std::string_view name) const {
  if (const op_def* op = find(name)) return op;
  std::string best;
  std::size_t best_distance = 3;
  for (const auto& [candidate, def] : ops_) {
    std::size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return not_found_error("unknown op '", name, "'",
                         best.empty() ? std::string() : str_cat(" (did you mean '", best, "'?)"));
}

std::vector<std::string> op_registry::op_names() const {
  std::vector<std::string> names;
  for (const auto& [name, def] : ops_) names.push_back(name);
  return names;
}

void add_builtin_op(op_registry& registry, op_schema schema) {
  status s = registry.add(std::move(schema));
  if (!s.ok()) {
    std::fprintf(stderr, "troupe: malformed built-in op schema: %s\n", s.to_string().c_str());
    std::abort();
  }
}

op_registry& op_registry::builtin() {
  static op_registry* registry = [] {
    auto* r = new op_registry();
    register_builtin_ops(*r);
    return r;
  }();
  return *registry;
}

namespace {

bool attr_kind_matches(const attr_def& def, const tf::AttrValue& v) {
  using k = tf::AttrValue;
  if (def.type == "type") return v.value_case() == k::kType;
  if (def.type == "int") return v.value_case() == k::kI;
  if (def.type == "float") return v.value_case() == k::kF || v.value_case() == k::kI;
  if (def.type == "bool") return v.value_case() == k::kB;
  if (def.type == "string") return v.value_case() == k::kS;
  if (def.type == "shape") return v.value_case() == k::kShape;
  if (def.type == "tensor") return v.value_case() == k::kTensor;
  if (def.type == "func") return v.value_case() == k::kFunc;
  if (v.value_case() != k::kList) return false;
  const auto& l = v.list();
  // An empty list is a valid list of any kind.
  int sizes = l.s_size() + l.i_size() + l.f_size() + l.b_size() + l.type_size() +
              l.shape_size() + l.tensor_size() + l.func_size();
  if (sizes == 0) return true;
  if (def.type == "list(int)") return l.i_size() == sizes;
  if (def.type == "list(float)") return l.f_size() + l.i_size() == sizes;
  if (def.type == "list(string)") return l.s_size() == sizes;
  if (def.type == "list(type)") return l.type_size() == sizes;
  if (def.type == "list(shape)") return l.shape_size() == sizes;
  if (def.type == "list(bool)") return l.b_size() == sizes;
  if (def.type == "list(tensor)") return l.tensor_size() == sizes;
  return false;
}

std::int64_t list_length(const tf::AttrValue& v) {
  const auto& l = v.list();
  return l.s_size() + l.i_size() + l.f_size() + l.b_size() + l.type_size() + l.shape_size() +
         l.tensor_size() + l.func_size();
}

std::string dtype_set(const std::vector<dtype>& types) {
  std::string out;
  for (auto t : types) out += str_cat(out.empty() ? "" : ", ", dtype_name(t));
  return out;
}

}  // namespace

status add_defaults_and_validate_attrs(const op_def& op, tf::NodeDef* node) {
  auto& attrs = *node->mutable_attr();
  auto where = [&] { return str_cat("node '", node->name(), "' (", op.name, ")"); };
  for (const auto& def : op.attrs) {
    auto it = attrs.find(def.name);
    if (it == attrs.end()) {
      if (!def.default_value) {
        return invalid_argument_error(where(), " is missing required attribute '", def.name,
                                      "' of kind ", def.type);
      }
      it = attrs.insert({def.name, *def.default_value}).first;
    }
    tf::AttrValue& v = it->second;
    if (!attr_kind_matches(def, v)) {
      return invalid_argument_error(where(), ": attribute '", def.name, "' is ",
                                    attr_value_kind(v), " but must be ", def.type);
    }
    // Floats may be written as integers in hand-written text graphs.
    if (def.type == "float" && v.value_case() == tf::AttrValue::kI) v.set_f(static_cast<float>(v.i()));
    if (def.type == "type" && !def.allowed_types.empty() &&
        std::find(def.allowed_types.begin(), def.allowed_types.end(),
                  static_cast<dtype>(v.type())) == def.allowed_types.end()) {
      return invalid_argument_error(where(), ": attribute '", def.name, "' is ",
                                    dtype_name(static_cast<dtype>(v.type())),
                                    ", not one of the allowed types {",
                                    dtype_set(def.allowed_types), "}");
    }
    if (def.type == "string" && !def.allowed_strings.empty() &&
        std::find(def.allowed_strings.begin(), def.allowed_strings.end(), v.s()) ==
            def.allowed_strings.end()) {
      std::string allowed;
      for (const auto& s : def.allowed_strings) allowed += str_cat(allowed.empty() ? "" : ", ", "'", s, "'");
      return invalid_argument_error(where(), ": attribute '", def.name, "' is '", v.s(),
                                    "', not one of {", allowed, "}");
    }
    if (def.minimum) {
      std::int64_t value = def.type == "int" ? v.i() : list_length(v);
      if (value < *def.minimum) {
        return invalid_argument_error(where(), ": attribute '", def.name, "' is ", value,
                                      " but must be >= ", *def.minimum);
      }
    }
  }
  return status();
}

status input_output_types(const op_def& op, const tf::NodeDef& node, std::vector<dtype>* inputs,
                          std::vector<dtype>* outputs) {
  auto expand = [&](const std::vector<arg_def>& args, std::vector<dtype>* out) -> status {
    out->clear();
    for (const auto& arg : args) {
      if (!arg.type_list_attr.empty()) {
        std::vector<dtype> types;
        TROUPE_RETURN_IF_ERROR(get_attr(node, arg.type_list_attr, &types));
        out->insert(out->end(), types.begin(), types.end());
        continue;
      }
      dtype t = arg.type;
      if (!arg.type_attr.empty()) TROUPE_RETURN_IF_ERROR(get_attr(node, arg.type_attr, &t));
      std::int64_t count = 1;
      if (!arg.number_attr.empty()) TROUPE_RETURN_IF_ERROR(get_attr(node, arg.number_attr, &count));
      for (std::int64_t i = 0; i < count; ++i) out->push_back(t);
    }
    return status();
  };
  TROUPE_RETURN_IF_ERROR(expand(op.inputs, inputs));
  return expand(op.outputs, outputs);
}

shape_context::shape_context(const tf::NodeDef& node, const op_def& op,
                             std::vector<partial_shape> inputs,
                             std::vector<const tensor*> input_values,
                             std::vector<dtype> input_types, int num_outputs)
    : node_(node),
      op_(op),
      inputs_(std::move(inputs)),
      input_values_(std::move(input_values)),
      input_types_(std::move(input_types)),
      outputs_(static_cast<std::size_t>(num_outputs)) {}

status shape_context::require_rank(int i, int rank) const {
  const auto& s = input(i);
  if (s.known_rank() && s.rank() != rank) {
    return error("input ", i, " must have rank ", rank, " but has shape ", s.to_string());
  }
  return status();
}

status shape_context::require_rank_at_least(int i, int rank) const {
  const auto& s = input(i);
  if (s.known_rank() && s.rank() < rank) {
    return error("input ", i, " must have rank >= ", rank, " but has shape ", s.to_string());
  }
  return status();
}

result<partial_shape> broadcast_shapes(const partial_shape& a, const partial_shape& b) {
  if (!a.known_rank() || !b.known_rank()) return partial_shape::unknown();
  int rank = std::max(a.rank(), b.rank());
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    int ia = a.rank() - rank + i;
    int ib = b.rank() - rank + i;
    std::int64_t da = ia >= 0 ? a.dim(ia) : 1;
    std::int64_t db = ib >= 0 ? b.dim(ib) : 1;
    std::int64_t d;
    if (da == 1) d = db;
    else if (db == 1) d = da;
    else if (da < 0) d = db < 0 ? -1 : db;
    else if (db < 0) d = da;
    else if (da == db) d = da;
    else {
      return invalid_argument_error("shapes ", a.to_string(), " and ", b.to_string(),
                                    " are not broadcast-compatible (dimension ", i, ": ", da,
                                    " vs ", db, ")");
    }
    dims[static_cast<std::size_t>(i)] = d;
  }
  return partial_shape(std::move(dims));
}

status unchanged_shape(shape_context& ctx) {
  ctx.set_output(0, ctx.input(0));
  return status();
}

status broadcast_binary_shape(shape_context& ctx) {
  auto s = broadcast_shapes(ctx.input(0), ctx.input(1));
  if (!s.ok()) return ctx.error(s.error().message());
  ctx.set_output(0, std::move(*s));
  return status();
}

status same_shape_binary(shape_context& ctx) {
  auto merged = ctx.input(0).merge(ctx.input(1));
  if (!merged.ok()) {
    return ctx.error("both inputs must have the same shape, but have ", ctx.input(0).to_string(),
                     " and ", ctx.input(1).to_string());
  }
  ctx.set_output(0, std::move(*merged));
  return status();
}

status scalar_shape(shape_context& ctx) {
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, partial_shape::scalar());
  return status();
}

status no_outputs_shape(shape_context& ctx) { return status(); }

}  // namespace troupe::graph
