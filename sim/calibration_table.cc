#include "sim/calibration_table.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>

#include "core/file.h"
#include "graph/text_proto.h"

namespace troupe::sim {

namespace {

// The first number field of `m` (its own, not its messages') that is no number in
// [0, k_largest_figure], as "name (is value)"; empty when there is none.
std::string figure_out_of_range(const google::protobuf::Message& m) {
  using field = google::protobuf::FieldDescriptor;
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const field* f = d->field(i);
    if (f->is_repeated()) continue;
    double x = 0;
    switch (f->cpp_type()) {
      case field::CPPTYPE_DOUBLE: x = r->GetDouble(m, f); break;
      case field::CPPTYPE_INT32: x = r->GetInt32(m, f); break;
      case field::CPPTYPE_INT64: x = static_cast<double>(r->GetInt64(m, f)); break;
      default: continue;
    }
    if (!(x >= 0 && x <= k_largest_figure)) return str_cat(f->name(), " (is ", x, ")");
  }
  return "";
}

// Writes each -0 among the doubles of `m` and of its messages as 0: JSON's "-0" reads as
// a zero that protobuf's JSON writer leaves out, so the table would not come back the same.
void zeros_unsigned(google::protobuf::Message& m) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int k = 0; k < r->FieldSize(m, f); ++k) zeros_unsigned(*r->MutableRepeatedMessage(&m, f, k));
      } else if (r->HasField(m, f)) {
        zeros_unsigned(*r->MutableMessage(&m, f));
      }
    } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE && !f->is_repeated() &&
               r->GetDouble(m, f) == 0) {
      r->SetDouble(&m, f, 0.0);
    }
  }
}

}  // namespace

status check_calibration(const Calibration& table, const std::string& path) {
  const auto refuse = [&](const std::string& where, const std::string& field) {
    return invalid_argument_error("calibration ", path, ": ", where, field,
                                  " must be a number in [0, 10^12]: a figure no measurement gives");
  };
  for (int i = 0; i < table.kernels_size(); ++i) {
    const KernelCost& c = table.kernels(i);
    if (c.op().empty() || c.count() <= 0) {
      return invalid_argument_error("calibration ", path, ": kernels[", i, "] needs an op and a count > 0");
    }
    if (auto bad = figure_out_of_range(c); !bad.empty()) return refuse(str_cat("kernels[", i, "] (", c.op(), "): "), bad);
  }
  if (auto bad = figure_out_of_range(table); !bad.empty()) return refuse("", bad);
  if (auto bad = figure_out_of_range(table.loopback()); !bad.empty()) return refuse("loopback.", bad);
  return status();
}

status save_calibration(const Calibration& table, const std::string& path) {
  auto json = graph::to_json(table, "the calibration");
  if (!json.ok()) return json.error();
  return write_file(path, *json).with_context(str_cat("writing the calibration ", path));
}

result<Calibration> parse_calibration(const std::string& json, const std::string& path) {
  Calibration table;
  auto s = google::protobuf::util::JsonStringToMessage(json, &table);
  if (!s.ok()) return invalid_argument_error("calibration ", path, " is not a troupe calibration: ", s.ToString());
  zeros_unsigned(table);
  TROUPE_RETURN_IF_ERROR(check_calibration(table, path));
  return table;
}

result<Calibration> load_calibration(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return text.error().with_context(str_cat("reading the calibration ", path));
  return parse_calibration(*text, path);
}

const KernelCost* find_cost(const Calibration& table, const std::string& op, const std::string& device_type,
                            const std::vector<std::string>& inputs, const std::vector<std::string>& attrs) {
  for (const KernelCost& c : table.kernels()) {
    if (c.op() == op && c.device_type() == device_type &&
        std::equal(c.inputs().begin(), c.inputs().end(), inputs.begin(), inputs.end()) &&
        std::equal(c.attrs().begin(), c.attrs().end(), attrs.begin(), attrs.end())) {
      return &c;
    }
  }
  return nullptr;
}

}  // namespace troupe::sim
