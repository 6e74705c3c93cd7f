// trace_recorder: a timeline of a run, written in Chrome's Trace Event Format (JSON),
// which ui.perfetto.dev and chrome://tracing open.
//
// The runtime records two kinds of event (and the runner a third, marks: trace_mark):
//   - a span: one kernel execution, from start to end, on a device of a task. It becomes
//     a complete event ("ph": "X") named after the node, with the op type as category;
//   - a flow: a tensor sent from one device to another. It becomes an arrow, a pair of
//     flow events ("ph": "s" then "f", same id) from inside the Send's span to inside the
//     Recv's span.
// In the file each task is a process (pid, named after the task) and each device a thread
// (tid, named after the device) of that process. Kernels of one device that overlap in
// time (they run in parallel on its compute pool) are spread over extra rows named
// "CPU:0 #2", "CPU:0 #3", ..., because a viewer nests the spans of one row and cannot
// show overlapping ones there. Times are written in microseconds since the earliest event.
//
// Contract for callers:
//  1. task and device are names ("/job:worker/replica:0/task:1", "CPU:0"); the recorder
//     numbers them. Names are any UTF-8 (they are escaped; invalid bytes become U+FFFD).
//  2. A span's end is not before its start.
//  3. A flow's `from` time lies within the Send's span and its `to` time within the Recv's
//     span, on the devices given (e.g. the Send's end and the Recv's start); an end with
//     no span around it is drawn from or to the device's first row.
//  4. Recording costs a mutex and a copy of the strings: record only when a trace was
//     asked for. After max_events events further ones are dropped and counted; the file
//     says how many (otherData.dropped_events).
//
// Thread safety: every method may be called from any thread, concurrently.
//
//   scenarios::trace_recorder trace;
//   auto t0 = scenarios::trace_clock::now();  ...run the kernel...
//   trace.record_span({.task = "/job:worker/replica:0/task:0", .device = "CPU:0",
//                      .name = "dense/MatMul", .op = "MatMul", .start = t0,
//                      .end = scenarios::trace_clock::now(), .step_id = 7});
//   trace.record_flow({.name = "edge_5_dense/MatMul", .from = {ps, "CPU:0", send_end},
//                      .to = {worker, "CPU:0", recv_start}, .step_id = 7});
//   status s = trace.write("/tmp/run.trace.json");
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace troupe::scenarios {

using trace_clock = std::chrono::steady_clock;

struct trace_span {
  std::string task;    // a process row
  std::string device;  // a thread row within the task
  std::string name;    // the node's name
  std::string op;      // the node's op type
  trace_clock::time_point start;
  trace_clock::time_point end;
  std::int64_t step_id = -1;  // -1: not part of a step (not written)
};

struct trace_point {
  std::string task;
  std::string device;
  trace_clock::time_point at;
};

struct trace_flow {
  std::string name;  // e.g. the edge or rendezvous key; both arrow ends carry it
  trace_point from;  // inside the Send's span
  trace_point to;    // inside the Recv's span
  std::int64_t step_id = -1;
};

// A moment of the run that is no kernel: a fault injected, a task recovered, a checkpoint
// committed. It is drawn on the task's process (a process named "run" when `task` is
// empty), in a row named "events": as an instant event ("ph": "i") when it has no end,
// as a span from `at` to `end` otherwise (a recovery).
struct trace_mark {
  std::string task;
  std::string name;      // "kill", "recovery", "checkpoint"
  std::string category;  // "fault", "recovery", "checkpoint"
  trace_clock::time_point at;
  trace_clock::time_point end;  // == at: an instant
  std::string detail;    // args.detail
};

class trace_recorder {
 public:
  static constexpr std::size_t k_default_max_events = std::size_t{1} << 22;

  explicit trace_recorder(std::size_t max_events = k_default_max_events);
  trace_recorder(const trace_recorder&) = delete;
  trace_recorder& operator=(const trace_recorder&) = delete;

  void record_span(trace_span span);
  void record_flow(trace_flow flow);
  void record_mark(trace_mark mark);

  std::size_t num_events() const;  // spans and flows recorded
  std::size_t dropped() const;     // spans and flows dropped after max_events

  // The whole trace as one JSON object: {"traceEvents": [...], ...}.
  std::string to_json() const;
  // Writes to_json() to `path`; errors name the path.
  status write(const std::string& path) const;

 private:
  struct device_key {
    int pid;
    std::string device;
    friend auto operator<=>(const device_key&, const device_key&) = default;
  };
  struct span_record {
    int device;  // index into devices_
    std::string name;
    std::string op;
    std::int64_t start_ns;
    std::int64_t end_ns;
    std::int64_t step_id;
  };
  struct flow_end {
    int device;
    std::int64_t at_ns;
  };
  struct flow_record {
    std::string name;
    flow_end from;
    flow_end to;
    std::int64_t step_id;
  };

  // REQUIRES: mutex_ held.
  int pid_of(const std::string& task);
  int device_of(const std::string& task, const std::string& device);
  bool full();

  std::size_t max_events_;
  mutable std::mutex mutex_;
  // Guarded by mutex_.
  std::map<std::string, int, std::less<>> pids_;          // task -> pid (from 1)
  std::map<device_key, int> device_index_;                 // -> index into devices_
  std::vector<std::pair<int, std::string>> devices_;      // (pid, device name)
  std::vector<span_record> spans_;
  std::vector<flow_record> flows_;
  struct mark_record {
    int device;  // the task's "events" row
    std::string name, category, detail;
    std::int64_t at_ns, end_ns;
  };
  std::vector<mark_record> marks_;
  std::size_t dropped_ = 0;
};

// `text` as a JSON string literal, quotes included: '"', '\' and control characters
// escaped, invalid UTF-8 replaced by U+FFFD.
std::string json_quote(std::string_view text);

}  // namespace troupe::scenarios
