#include "scenarios/trace.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>

#include "core/file.h"

namespace troupe::scenarios {

namespace {

std::int64_t nanoseconds(trace_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Nanoseconds as microseconds with three decimals, exactly: 1234567 -> "1234.567".
std::string microseconds(std::int64_t ns) {
  char text[48];
  const char* sign = ns < 0 ? "-" : "";
  std::uint64_t magnitude = ns < 0 ? 0 - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
  std::snprintf(text, sizeof text, "%s%" PRIu64 ".%03" PRIu64, sign, magnitude / 1000, magnitude % 1000);
  return text;
}

// The length of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid
// (overlong forms, surrogates and code points above U+10FFFF are invalid).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  std::size_t length;
  unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    length = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    length = 3;
    if (c == 0xE0) low = 0xA0;
    if (c == 0xED) high = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    length = 4;
    if (c == 0xF0) low = 0x90;
    if (c == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (std::size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

}  // namespace

std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  std::size_t i = 0;
  while (i < text.size()) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      std::size_t length = utf8_sequence_length(text, i);
      if (length == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(text.substr(i, length));
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
          out += escaped;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

trace_recorder::trace_recorder(std::size_t max_events) : max_events_(max_events) {}

int trace_recorder::pid_of(const std::string& task) {
  auto it = pids_.find(task);
  if (it != pids_.end()) return it->second;
  int pid = static_cast<int>(pids_.size()) + 1;
  pids_.emplace(task, pid);
  return pid;
}

int trace_recorder::device_of(const std::string& task, const std::string& device) {
  int pid = pid_of(task);
  device_key key{pid, device};
  auto it = device_index_.find(key);
  if (it != device_index_.end()) return it->second;
  int index = static_cast<int>(devices_.size());
  devices_.emplace_back(pid, device);
  device_index_.emplace(std::move(key), index);
  return index;
}

bool trace_recorder::full() {
  if (spans_.size() + flows_.size() + marks_.size() < max_events_) return false;
  ++dropped_;
  return true;
}

void trace_recorder::record_span(trace_span span) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (full()) return;
  int device = device_of(span.task, span.device);
  std::int64_t start = nanoseconds(span.start);
  spans_.push_back(span_record{device, std::move(span.name), std::move(span.op), start,
                               std::max(start, nanoseconds(span.end)), span.step_id});
}

void trace_recorder::record_flow(trace_flow flow) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (full()) return;
  flow_end from{device_of(flow.from.task, flow.from.device), nanoseconds(flow.from.at)};
  flow_end to{device_of(flow.to.task, flow.to.device), nanoseconds(flow.to.at)};
  flows_.push_back(flow_record{std::move(flow.name), from, to, flow.step_id});
}

void trace_recorder::record_mark(trace_mark mark) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (full()) return;
  int device = device_of(mark.task.empty() ? std::string("run") : mark.task, "events");
  std::int64_t at = nanoseconds(mark.at);
  marks_.push_back(mark_record{device, std::move(mark.name), std::move(mark.category), std::move(mark.detail), at,
                               std::max(at, nanoseconds(mark.end))});
}

std::size_t trace_recorder::num_events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spans_.size() + flows_.size() + marks_.size();
}

std::size_t trace_recorder::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

std::string trace_recorder::to_json() const {
  std::lock_guard<std::mutex> lock(mutex_);

  // Rows: each device's spans, by start, go to its first row that is free by then.
  std::vector<std::vector<std::size_t>> by_device(devices_.size());
  for (std::size_t i = 0; i < spans_.size(); ++i) {
    by_device[static_cast<std::size_t>(spans_[i].device)].push_back(i);
  }
  std::vector<int> row_of_span(spans_.size(), 0);
  // rows[d][r]: the spans in row r of device d, by start (and so by end).
  std::vector<std::vector<std::vector<std::size_t>>> rows(devices_.size());
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    auto& spans = by_device[d];
    std::stable_sort(spans.begin(), spans.end(), [&](std::size_t a, std::size_t b) {
      return spans_[a].start_ns < spans_[b].start_ns;
    });
    std::vector<std::int64_t> row_end;
    for (std::size_t s : spans) {
      std::size_t r = 0;
      while (r < row_end.size() && row_end[r] > spans_[s].start_ns) ++r;
      if (r == row_end.size()) {
        row_end.push_back(0);
        rows[d].emplace_back();
      }
      row_end[r] = spans_[s].end_ns;
      rows[d][r].push_back(s);
      row_of_span[s] = static_cast<int>(r);
    }
    if (rows[d].empty()) rows[d].emplace_back();  // a device with flows only
  }
  // Thread ids: consecutive within each process, a device's rows side by side.
  std::vector<int> first_tid(devices_.size());
  std::map<int, int> next_tid;
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    int& next = next_tid.try_emplace(devices_[d].first, 1).first->second;
    first_tid[d] = next;
    next += static_cast<int>(rows[d].size());
  }
  // The row of device d whose span contains time t, or its first row.
  auto row_at = [&](int device, std::int64_t t) {
    const auto& device_rows = rows[static_cast<std::size_t>(device)];
    for (std::size_t r = 0; r < device_rows.size(); ++r) {
      const auto& row = device_rows[r];
      auto after = std::upper_bound(row.begin(), row.end(), t, [&](std::int64_t time, std::size_t s) {
        return time < spans_[s].start_ns;
      });
      if (after != row.begin() && spans_[*(after - 1)].end_ns >= t) return static_cast<int>(r);
    }
    return 0;
  };

  std::int64_t base = std::numeric_limits<std::int64_t>::max();
  for (const auto& s : spans_) base = std::min(base, s.start_ns);
  for (const auto& f : flows_) base = std::min({base, f.from.at_ns, f.to.at_ns});
  for (const auto& m : marks_) base = std::min(base, m.at_ns);
  if (base == std::numeric_limits<std::int64_t>::max()) base = 0;

  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto event = [&](const std::string& body) {
    if (!first) out += ',';
    first = false;
    out += "\n{";
    out += body;
    out += '}';
  };
  for (const auto& [task, pid] : pids_) {
    event(str_cat("\"name\":\"process_name\",\"ph\":\"M\",\"pid\":", pid,
                  ",\"tid\":0,\"args\":{\"name\":", json_quote(task), "}"));
    event(str_cat("\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":", pid,
                  ",\"tid\":0,\"args\":{\"sort_index\":", pid, "}"));
  }
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    for (std::size_t r = 0; r < rows[d].size(); ++r) {
      int tid = first_tid[d] + static_cast<int>(r);
      std::string name = r == 0 ? devices_[d].second : str_cat(devices_[d].second, " #", r + 1);
      event(str_cat("\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", devices_[d].first,
                    ",\"tid\":", tid, ",\"args\":{\"name\":", json_quote(name), "}"));
      event(str_cat("\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":", devices_[d].first,
                    ",\"tid\":", tid, ",\"args\":{\"sort_index\":", tid, "}"));
    }
  }
  std::vector<std::size_t> order(spans_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return spans_[a].start_ns < spans_[b].start_ns;
  });
  for (std::size_t i : order) {
    const span_record& s = spans_[i];
    auto d = static_cast<std::size_t>(s.device);
    std::string args = str_cat("\"op\":", json_quote(s.op));
    if (s.step_id >= 0) args += str_cat(",\"step_id\":", s.step_id);
    event(str_cat("\"name\":", json_quote(s.name), ",\"cat\":", json_quote(s.op),
                  ",\"ph\":\"X\",\"pid\":", devices_[d].first, ",\"tid\":", first_tid[d] + row_of_span[i],
                  ",\"ts\":", microseconds(s.start_ns - base),
                  ",\"dur\":", microseconds(s.end_ns - s.start_ns), ",\"args\":{", args, "}"));
  }
  std::uint64_t id = 0;
  for (const flow_record& f : flows_) {
    ++id;
    std::string name = json_quote(f.name);
    std::string args = f.step_id >= 0 ? str_cat(",\"args\":{\"step_id\":", f.step_id, "}") : "";
    auto from = static_cast<std::size_t>(f.from.device);
    auto to = static_cast<std::size_t>(f.to.device);
    event(str_cat("\"name\":", name, ",\"cat\":\"send_recv\",\"ph\":\"s\",\"id\":", id,
                  ",\"pid\":", devices_[from].first,
                  ",\"tid\":", first_tid[from] + row_at(f.from.device, f.from.at_ns),
                  ",\"ts\":", microseconds(f.from.at_ns - base), args));
    event(str_cat("\"name\":", name, ",\"cat\":\"send_recv\",\"ph\":\"f\",\"bp\":\"e\",\"id\":", id,
                  ",\"pid\":", devices_[to].first,
                  ",\"tid\":", first_tid[to] + row_at(f.to.device, f.to.at_ns),
                  ",\"ts\":", microseconds(f.to.at_ns - base), args));
  }
  for (const mark_record& m : marks_) {
    auto d = static_cast<std::size_t>(m.device);
    std::string common = str_cat("\"name\":", json_quote(m.name), ",\"cat\":", json_quote(m.category),
                                 ",\"pid\":", devices_[d].first, ",\"tid\":", first_tid[d],
                                 ",\"ts\":", microseconds(m.at_ns - base), ",\"args\":{\"detail\":", json_quote(m.detail), "}");
    if (m.end_ns > m.at_ns) {
      event(str_cat(common, ",\"ph\":\"X\",\"dur\":", microseconds(m.end_ns - m.at_ns)));
    } else {
      event(str_cat(common, ",\"ph\":\"i\",\"s\":\"p\""));
    }
  }
  out += str_cat("\n],\"otherData\":{\"producer\":\"troupe\",\"dropped_events\":", dropped_, "}}\n");
  return out;
}

status trace_recorder::write(const std::string& path) const {
  return write_file(path, to_json()).with_context("writing trace");
}

}  // namespace troupe::scenarios
