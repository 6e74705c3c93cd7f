// scenarios/trace: the JSON is well-formed (checked by a strict parser below), strings are
// escaped (quotes, backslashes, control characters, invalid UTF-8), tasks and devices
// become named processes and threads, overlapping spans of a device get rows of their own,
// flow events come in s/f pairs bound to the spans around them, recording from many
// threads loses nothing, and events past the limit are dropped and counted.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>
#include <variant>
#include <vector>

#include "core/file.h"
#include "scenarios/trace.h"

namespace troupe::scenarios {
namespace {

// --- A strict JSON parser (RFC 8259), enough to check what the recorder writes ----------

struct json;
using json_object = std::map<std::string, json>;
using json_array = std::vector<json>;
struct json {
  std::variant<std::nullptr_t, bool, double, std::string, json_array, json_object> value;
  const json_object& object() const { return std::get<json_object>(value); }
  const json_array& array() const { return std::get<json_array>(value); }
  const std::string& string() const { return std::get<std::string>(value); }
  double number() const { return std::get<double>(value); }
  bool has(const std::string& key) const { return object().count(key) > 0; }
  const json& operator[](const std::string& key) const { return object().at(key); }
};

class json_parser {
 public:
  explicit json_parser(std::string_view text) : text_(text) {}

  // The value, or an error with the offset where the text stops being JSON.
  std::variant<json, std::string> parse() {
    json v;
    if (!value(&v)) return error_;
    space();
    if (pos_ != text_.size()) return fail("trailing characters");
    return v;
  }

 private:
  std::string fail(const std::string& what) {
    if (error_.empty()) error_ = what + " at offset " + std::to_string(pos_);
    return error_;
  }
  bool bad(const std::string& what) {
    fail(what);
    return false;
  }
  void space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  bool value(json* out) {
    space();
    if (pos_ >= text_.size()) return bad("unexpected end");
    char c = text_[pos_];
    if (c == '{') return object(out);
    if (c == '[') return array(out);
    if (c == '"') {
      std::string s;
      if (!string(&s)) return false;
      out->value = std::move(s);
      return true;
    }
    if (literal("true")) return out->value = true, true;
    if (literal("false")) return out->value = false, true;
    if (literal("null")) return out->value = nullptr, true;
    return number(out);
  }
  bool number(json* out) {
    std::size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      return bad("bad value");
    }
    if (text_[pos_] == '0') ++pos_;
    else while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        return bad("bad fraction");
      }
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        return bad("bad exponent");
      }
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    }
    out->value = std::strtod(std::string(text_.substr(start, pos_ - start)).c_str(), nullptr);
    return true;
  }
  static void append_utf8(std::string* s, unsigned code) {
    if (code < 0x80) {
      s->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (code >> 6)));
      s->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xE0 | (code >> 12)));
      s->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }
  bool string(std::string* out) {
    ++pos_;  // '"'
    while (true) {
      if (pos_ >= text_.size()) return bad("unterminated string");
      auto c = static_cast<unsigned char>(text_[pos_++]);
      if (c == '"') return true;
      if (c < 0x20) return bad("raw control character in string");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        continue;
      }
      if (pos_ >= text_.size()) return bad("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          if (pos_ + 4 > text_.size()) return bad("short \\u escape");
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            char h = text_[pos_++];
            if (!std::isxdigit(static_cast<unsigned char>(h))) return bad("bad \\u escape");
            code = code * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(h))
                                                         ? h - '0'
                                                         : (std::tolower(h) - 'a' + 10));
          }
          append_utf8(out, code);
          break;
        }
        default: return bad("bad escape");
      }
    }
  }
  bool array(json* out) {
    ++pos_;
    json_array items;
    space();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      out->value = std::move(items);
      return true;
    }
    while (true) {
      json item;
      if (!value(&item)) return false;
      items.push_back(std::move(item));
      space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        out->value = std::move(items);
        return true;
      }
      return bad("expected ',' or ']'");
    }
  }
  bool object(json* out) {
    ++pos_;
    json_object members;
    space();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      out->value = std::move(members);
      return true;
    }
    while (true) {
      space();
      if (pos_ >= text_.size() || text_[pos_] != '"') return bad("expected a key");
      std::string key;
      if (!string(&key)) return false;
      space();
      if (pos_ >= text_.size() || text_[pos_] != ':') return bad("expected ':'");
      ++pos_;
      json v;
      if (!value(&v)) return false;
      if (!members.emplace(key, std::move(v)).second) return bad("duplicate key " + key);
      space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        out->value = std::move(members);
        return true;
      }
      return bad("expected ',' or '}'");
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::string error_;
};

json parse_json(const std::string& text) {
  auto parsed = json_parser(text).parse();
  if (auto* error = std::get_if<std::string>(&parsed)) FAIL("not JSON: " << *error << "\n" << text);
  return std::get<json>(std::move(parsed));
}

// --- Helpers -------------------------------------------------------------------------

using namespace std::chrono_literals;
const trace_clock::time_point t0 = trace_clock::now();

const std::string k_ps = "/job:ps/replica:0/task:0";
const std::string k_worker = "/job:worker/replica:0/task:0";

std::vector<const json*> events_with(const json& trace, const std::string& ph) {
  std::vector<const json*> out;
  for (const json& e : trace["traceEvents"].array()) {
    if (e["ph"].string() == ph) out.push_back(&e);
  }
  return out;
}

// The name given to (pid, tid) by thread_name metadata, and to pid by process_name.
std::string thread_name(const json& trace, double pid, double tid) {
  for (const json* e : events_with(trace, "M")) {
    if ((*e)["name"].string() == "thread_name" && (*e)["pid"].number() == pid &&
        (*e)["tid"].number() == tid) {
      return (*e)["args"]["name"].string();
    }
  }
  return "";
}
std::string process_name(const json& trace, double pid) {
  for (const json* e : events_with(trace, "M")) {
    if ((*e)["name"].string() == "process_name" && (*e)["pid"].number() == pid) {
      return (*e)["args"]["name"].string();
    }
  }
  return "";
}

}  // namespace

TEST_CASE("json_quote escapes what JSON requires and replaces invalid UTF-8", "[trace]") {
  CHECK(json_quote("plain") == "\"plain\"");
  CHECK(json_quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(json_quote("\n\t\r\b\f") == "\"\\n\\t\\r\\b\\f\"");
  CHECK(json_quote(std::string("\x01\x1f", 2)) == "\"\\u0001\\u001f\"");
  CHECK(json_quote(std::string("nul\0x", 5)) == "\"nul\\u0000x\"");
  CHECK(json_quote("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  CHECK(json_quote("bad \xff byte") == "\"bad \\ufffd byte\"");
  CHECK(json_quote("cut \xe2\x82") == "\"cut \\ufffd\\ufffd\"");
  CHECK(json_quote("overlong \xc0\xaf") == "\"overlong \\ufffd\\ufffd\"");
  CHECK(json_quote("surrogate \xed\xa0\x80") == "\"surrogate \\ufffd\\ufffd\\ufffd\"");
  // Whatever goes in comes back out of a JSON parser (valid UTF-8 unchanged).
  std::string tricky = "node \"x\"/\\y\n\x7f caf\xc3\xa9";
  CHECK(parse_json(json_quote(tricky)).string() == tricky);
}

TEST_CASE("An empty trace is valid JSON", "[trace]") {
  trace_recorder trace;
  json j = parse_json(trace.to_json());
  CHECK(j["traceEvents"].array().empty());
  CHECK(j["otherData"]["dropped_events"].number() == 0);
}

TEST_CASE("Spans become complete events on named processes and threads", "[trace]") {
  trace_recorder trace;
  trace.record_span({.task = k_worker, .device = "CPU:0", .name = "dense/MatMul", .op = "MatMul",
                     .start = t0 + 10us, .end = t0 + 35us, .step_id = 3});
  trace.record_span({.task = k_worker, .device = "CPU:0", .name = "dense/Relu", .op = "Relu",
                     .start = t0 + 40us, .end = t0 + 41500ns, .step_id = 3});
  trace.record_span({.task = k_ps, .device = "CPU:0", .name = "weird \"name\"\n\x01", .op = "Op\\",
                     .start = t0, .end = t0 + 2us});
  CHECK(trace.num_events() == 3);
  json j = parse_json(trace.to_json());
  CHECK(j["displayTimeUnit"].string() == "ms");
  auto spans = events_with(j, "X");
  REQUIRE(spans.size() == 3);
  // Sorted by start; times in microseconds since the earliest event.
  const json& ps = *spans[0];
  CHECK(ps["name"].string() == "weird \"name\"\n\x01");
  CHECK(ps["cat"].string() == "Op\\");
  CHECK(ps["ts"].number() == 0);
  CHECK(ps["dur"].number() == 2);
  CHECK_FALSE(ps["args"].has("step_id"));
  const json& matmul = *spans[1];
  CHECK(matmul["name"].string() == "dense/MatMul");
  CHECK(matmul["cat"].string() == "MatMul");
  CHECK(matmul["ts"].number() == 10);
  CHECK(matmul["dur"].number() == 25);
  CHECK(matmul["args"]["op"].string() == "MatMul");
  CHECK(matmul["args"]["step_id"].number() == 3);
  CHECK((*spans[2])["dur"].number() == Approx(1.5));
  // pid = task, tid = device, both named.
  CHECK(process_name(j, matmul["pid"].number()) == k_worker);
  CHECK(process_name(j, ps["pid"].number()) == k_ps);
  CHECK(matmul["pid"].number() != ps["pid"].number());
  CHECK(thread_name(j, matmul["pid"].number(), matmul["tid"].number()) == "CPU:0");
  CHECK((*spans[2])["tid"].number() == matmul["tid"].number());  // no overlap: one row
}

TEST_CASE("Marks: a fault is an instant on its task's events row, a recovery a span", "[trace]") {
  trace_recorder trace;
  trace.record_span({.task = k_ps, .device = "CPU:0", .name = "a/Read", .op = "ReadVariableOp",
                     .start = t0, .end = t0 + 5us});
  trace.record_mark({k_ps, "kill", "fault", t0 + 10us, t0 + 10us, "at step 300"});
  trace.record_mark({k_ps, "recovery", "recovery", t0 + 12us, t0 + 40us, "killed; restored step 200"});
  trace.record_mark({"", "checkpoint", "checkpoint", t0 + 50us, t0 + 50us, ""});
  CHECK(trace.num_events() == 4);
  json j = parse_json(trace.to_json());
  auto instants = events_with(j, "i");
  REQUIRE(instants.size() == 2);
  const json& kill = *instants[0];
  CHECK(kill["name"].string() == "kill");
  CHECK(kill["cat"].string() == "fault");
  CHECK(kill["s"].string() == "p");
  CHECK(kill["ts"].number() == 10);
  CHECK(kill["args"]["detail"].string() == "at step 300");
  CHECK(process_name(j, kill["pid"].number()) == k_ps);
  CHECK(thread_name(j, kill["pid"].number(), kill["tid"].number()) == "events");
  CHECK(process_name(j, (*instants[1])["pid"].number()) == "run");
  auto spans = events_with(j, "X");
  REQUIRE(spans.size() == 2);
  const json& recovery = (*spans[0])["name"].string() == "recovery" ? *spans[0] : *spans[1];
  CHECK(recovery["cat"].string() == "recovery");
  CHECK(recovery["ts"].number() == 12);
  CHECK(recovery["dur"].number() == 28);
  CHECK(recovery["pid"].number() == kill["pid"].number());
}

TEST_CASE("Overlapping spans of one device get rows of their own", "[trace]") {
  trace_recorder trace;
  // a [0, 10] and b [5, 15] overlap; c [12, 20] fits in a's row after it.
  trace.record_span({.task = k_worker, .device = "CPU:0", .name = "a", .op = "A", .start = t0, .end = t0 + 10us});
  trace.record_span({.task = k_worker, .device = "CPU:0", .name = "b", .op = "B", .start = t0 + 5us, .end = t0 + 15us});
  trace.record_span({.task = k_worker, .device = "CPU:0", .name = "c", .op = "C", .start = t0 + 12us, .end = t0 + 20us});
  trace.record_span({.task = k_worker, .device = "GPU:0", .name = "g", .op = "G", .start = t0 + 5us, .end = t0 + 6us});
  json j = parse_json(trace.to_json());
  std::map<std::string, const json*> by_name;
  for (const json* e : events_with(j, "X")) by_name[(*e)["name"].string()] = e;
  double pid = (*by_name["a"])["pid"].number();
  double row_a = (*by_name["a"])["tid"].number();
  double row_b = (*by_name["b"])["tid"].number();
  CHECK(row_a != row_b);
  CHECK((*by_name["c"])["tid"].number() == row_a);
  CHECK(thread_name(j, pid, row_a) == "CPU:0");
  CHECK(thread_name(j, pid, row_b) == "CPU:0 #2");
  double row_g = (*by_name["g"])["tid"].number();
  CHECK(thread_name(j, pid, row_g) == "GPU:0");
  // No two spans of one row overlap.
  std::map<std::pair<double, double>, std::vector<std::pair<double, double>>> rows;
  for (const json* e : events_with(j, "X")) {
    rows[{(*e)["pid"].number(), (*e)["tid"].number()}].emplace_back(
        (*e)["ts"].number(), (*e)["ts"].number() + (*e)["dur"].number());
  }
  for (auto& [row, spans] : rows) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) CHECK(spans[i - 1].second <= spans[i].first);
  }
}

TEST_CASE("Flows are s/f pairs with one id, on the rows of the Send and Recv spans", "[trace]") {
  trace_recorder trace;
  trace.record_span({.task = k_ps, .device = "CPU:0", .name = "send_w", .op = "_Send",
                     .start = t0, .end = t0 + 5us, .step_id = 1});
  trace.record_span({.task = k_ps, .device = "CPU:0", .name = "busy", .op = "MatMul",
                     .start = t0 + 1us, .end = t0 + 9us, .step_id = 1});  // second row
  trace.record_span({.task = k_worker, .device = "CPU:0", .name = "recv_w", .op = "_Recv",
                     .start = t0 + 7us, .end = t0 + 8us, .step_id = 1});
  trace.record_flow({.name = "w:0 -> worker", .from = {k_ps, "CPU:0", t0 + 5us},
                     .to = {k_worker, "CPU:0", t0 + 7us}, .step_id = 1});
  trace.record_flow({.name = "w:0 -> worker", .from = {k_ps, "CPU:0", t0 + 8us},  // in "busy"
                     .to = {k_worker, "CPU:1", t0 + 8us}, .step_id = 2});        // no span there
  json j = parse_json(trace.to_json());
  auto starts = events_with(j, "s");
  auto finishes = events_with(j, "f");
  REQUIRE(starts.size() == 2);
  REQUIRE(finishes.size() == 2);
  std::map<std::string, const json*> spans;
  for (const json* e : events_with(j, "X")) spans[(*e)["name"].string()] = e;
  std::set<double> ids;
  for (std::size_t i = 0; i < 2; ++i) {
    const json& s = *starts[i];
    const json& f = *finishes[i];
    CHECK(s["id"].number() == f["id"].number());  // paired
    ids.insert(s["id"].number());
    CHECK(s["name"].string() == f["name"].string());
    CHECK(s["cat"].string() == f["cat"].string());
    CHECK(f["bp"].string() == "e");  // bound to the enclosing (Recv) span
    CHECK(s["ts"].number() <= f["ts"].number());
  }
  CHECK(ids.size() == 2);  // distinct ids
  const json& send = *spans["send_w"];
  const json& busy = *spans["busy"];
  const json& recv = *spans["recv_w"];
  CHECK((*starts[0])["pid"].number() == send["pid"].number());
  CHECK((*starts[0])["tid"].number() == send["tid"].number());
  CHECK((*starts[0])["ts"].number() == 5);
  CHECK((*finishes[0])["pid"].number() == recv["pid"].number());
  CHECK((*finishes[0])["tid"].number() == recv["tid"].number());
  CHECK((*finishes[0])["ts"].number() == 7);
  CHECK((*finishes[0])["args"]["step_id"].number() == 1);
  CHECK((*starts[1])["tid"].number() == busy["tid"].number());
  CHECK(busy["tid"].number() != send["tid"].number());
  // A device seen only in a flow still gets a named row.
  CHECK(thread_name(j, (*finishes[1])["pid"].number(), (*finishes[1])["tid"].number()) == "CPU:1");
}

TEST_CASE("Recording from many threads loses nothing; past the limit events are counted", "[trace]") {
  trace_recorder trace;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::string device = "CPU:" + std::to_string(t);
      for (int i = 0; i < 500; ++i) {
        auto start = t0 + std::chrono::microseconds(i * 10);
        trace.record_span({.task = k_worker, .device = device, .name = std::to_string(i),
                           .op = "Op", .start = start, .end = start + 5us, .step_id = i});
        trace.record_flow({.name = "e", .from = {k_worker, device, start + 1us},
                           .to = {k_ps, "CPU:0", start + 2us}});
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(trace.num_events() == 4000);
  CHECK(trace.dropped() == 0);
  json j = parse_json(trace.to_json());
  CHECK(events_with(j, "X").size() == 2000);
  CHECK(events_with(j, "s").size() == 2000);
  CHECK(events_with(j, "f").size() == 2000);

  trace_recorder small(3);
  for (int i = 0; i < 5; ++i) {
    small.record_span({.task = k_worker, .device = "CPU:0", .name = "n", .op = "Op",
                       .start = t0 + std::chrono::microseconds(i * 10), .end = t0 + std::chrono::microseconds(i * 10 + 1)});
  }
  CHECK(small.num_events() == 3);
  CHECK(small.dropped() == 2);
  CHECK(parse_json(small.to_json())["otherData"]["dropped_events"].number() == 2);
}

TEST_CASE("write() saves the JSON and names the path on failure", "[trace]") {
  trace_recorder trace;
  trace.record_span({.task = k_worker, .device = "CPU:0", .name = "n", .op = "Op", .start = t0, .end = t0 + 1us});
  std::string path = (std::filesystem::temp_directory_path() /
                      ("troupe_trace_test_" + std::to_string(::getpid()) + ".json")).string();
  REQUIRE(trace.write(path).ok());
  auto text = read_file(path);
  REQUIRE(text.ok());
  CHECK(*text == trace.to_json());
  std::filesystem::remove(path);
  status s = trace.write("/no/such/dir/trace.json");
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("/no/such/dir/trace.json") != std::string::npos);
}

}  // namespace troupe::scenarios
