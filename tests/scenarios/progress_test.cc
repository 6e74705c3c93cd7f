// scenarios/progress: plain lines every N steps with rate and ETA, a '\r' bar redrawn in
// place with messages on their own lines, off prints only the summary; steps out of order
// and from many threads. A fake clock makes every line exact.
#include <catch2/catch.hpp>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "scenarios/progress.h"

namespace troupe::scenarios {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("format_duration writes [h:]m:ss", "[progress]") {
  CHECK(progress_reporter::format_duration(0) == "0:00");
  CHECK(progress_reporter::format_duration(7.4) == "0:07");
  CHECK(progress_reporter::format_duration(754) == "12:34");
  CHECK(progress_reporter::format_duration(3723) == "1:02:03");
  CHECK(progress_reporter::format_duration(-1) == "?");
}

TEST_CASE("Plain progress prints a line every N steps, then a summary", "[progress]") {
  double now = 0;
  std::ostringstream out;
  {
    progress_reporter progress(out, {.style = progress_style::plain,
                                     .total_steps = 1000,
                                     .every = 250,
                                     .clock = [&] { return now; }});
    for (int step = 1; step <= 1000; ++step) {
      now = step / 128.0;  // 128 steps/s, exactly
      progress.update(step, 0.5);
    }
    CHECK(progress.step() == 1000);
    CHECK(progress.smoothed_loss() == Approx(0.5));
    progress.message("eval at step 1000: accuracy 0.8421");
    progress.finish();
    progress.finish();  // once only
  }
  CHECK(lines_of(out.str()) == std::vector<std::string>{
                                   "step 250/1000 (25%)  loss 0.5000  128 steps/s  ETA 0:06",
                                   "step 500/1000 (50%)  loss 0.5000  128 steps/s  ETA 0:04",
                                   "step 750/1000 (75%)  loss 0.5000  128 steps/s  ETA 0:02",
                                   "step 1000/1000 (100%)  loss 0.5000  128 steps/s  ETA 0:00",
                                   "eval at step 1000: accuracy 0.8421",
                                   "done: 1000 steps in 0:08 (128 steps/s), loss 0.5000",
                               });
  CHECK(out.str().find('\r') == std::string::npos);
}

TEST_CASE("The summary counts the step the run ended at, reported or not", "[progress]") {
  // A SYNC run whose last update's answer was lost: no worker reported step 200.
  double now = 0;
  std::ostringstream out;
  progress_reporter progress(out, {.style = progress_style::off, .total_steps = 200, .clock = [&] { return now; }});
  progress.update(199, 0.5);
  now = 2;
  progress.finish(200);
  CHECK(out.str() == "done: 200 steps in 0:02 (100 steps/s), loss 0.5000\n");
}

TEST_CASE("The loss shown is a moving average; steps may come out of order", "[progress]") {
  double now = 0;
  std::ostringstream out;
  progress_reporter progress(out, {.style = progress_style::off, .clock = [&] { return now; }});
  progress.update(2, 1.0);
  progress.update(1, 2.0);  // late report from another worker
  CHECK(progress.step() == 2);
  CHECK(progress.smoothed_loss() == Approx(0.9 * 1.0 + 0.1 * 2.0));
  now = 4;
  progress.finish();
  CHECK(out.str() == "done: 2 steps in 0:04 (0.5 steps/s), loss 1.1000\n");
}

TEST_CASE("The bar redraws one line with \\r; messages get their own line", "[progress]") {
  double now = 0;
  std::ostringstream out;
  progress_reporter progress(out, {.style = progress_style::bar,
                                   .total_steps = 200,
                                   .width = 70,
                                   .min_redraw_seconds = 0.25,
                                   .clock = [&] { return now; }});
  CHECK(progress.style() == progress_style::bar);
  for (int step = 1; step <= 100; ++step) {
    now = step / 128.0;
    progress.update(step, 2.0);
  }
  progress.message("eval at step 100: accuracy 0.5");
  for (int step = 101; step <= 200; ++step) {
    now = step / 128.0;
    progress.update(step, 2.0);
  }
  progress.finish();
  std::string text = out.str();
  // Draws: the first update, every 0.25 s (32 steps) after it, after the message, at the
  // last step and at finish; each begins with '\r'.
  std::vector<std::string> draws;
  for (std::size_t at = text.find('\r'); at != std::string::npos; at = text.find('\r', at + 1)) {
    std::size_t end = text.find_first_of("\r\n", at + 1);
    draws.push_back(text.substr(at + 1, end - at - 1));
  }
  REQUIRE(draws.size() >= 5);
  CHECK(draws[0].rfind("[>", 0) == 0);
  CHECK(draws[0].find("] 1/200 (0%)  loss 2.0000  128 steps/s  ETA 0:02") != std::string::npos);
  CHECK(draws[1].find("] 33/200 (16%)  loss 2.0000  128 steps/s  ETA 0:01") != std::string::npos);
  CHECK(draws[1].size() == 69);  // width - 1: never wraps
  CHECK(draws[1].rfind("[==>", 0) == 0);
  std::vector<std::string> lines = lines_of(text);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].find("eval at step 100: accuracy 0.5") != std::string::npos);
  CHECK(lines[0].substr(lines[0].rfind('\r') + 1) == "eval at step 100: accuracy 0.5");
  std::string final_bar = lines[1].substr(lines[1].rfind('\r') + 1);
  CHECK(final_bar.rfind("[=========", 0) == 0);
  CHECK(final_bar.find("] 200/200 (100%)  loss 2.0000  128 steps/s  ETA 0:00") != std::string::npos);
  CHECK(final_bar.find('>') == std::string::npos);
  CHECK(lines[2] == "done: 200 steps in 0:02 (128 steps/s), loss 2.0000");
}

TEST_CASE("Without a total the bar shows the step only; off prints the summary only", "[progress]") {
  double now = 0;
  std::ostringstream bar_out;
  {
    progress_reporter progress(bar_out, {.style = progress_style::bar, .clock = [&] { return now; }});
    now = 1;
    progress.update(10, 0.25);
  }
  CHECK(bar_out.str() ==
        "\rstep 10  loss 0.2500  10.0 steps/s\rstep 10  loss 0.2500  10.0 steps/s\n"
        "done: 10 steps in 0:01 (10.0 steps/s), loss 0.2500\n");

  std::ostringstream off_out;
  progress_reporter off(off_out, {.style = progress_style::off, .total_steps = 10, .clock = [&] { return now; }});
  for (int step = 1; step <= 10; ++step) off.update(step, 1.0);
  CHECK(off_out.str().empty());
  off.finish();
  CHECK(lines_of(off_out.str()).size() == 1);
}

TEST_CASE("automatic is a bar on a terminal and plain lines elsewhere", "[progress]") {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  CHECK(resolve_progress_style(progress_style::automatic, ::fileno(file)) == progress_style::plain);
  CHECK(resolve_progress_style(progress_style::bar, ::fileno(file)) == progress_style::bar);
  CHECK(resolve_progress_style(progress_style::off, ::fileno(file)) == progress_style::off);
  std::fclose(file);
}

TEST_CASE("Many threads may report at once", "[progress]") {
  std::ostringstream out;
  progress_reporter progress(out, {.style = progress_style::plain, .total_steps = 4000, .every = 500});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) progress.update(t * 1000 + i + 1, 1.0);
    });
  }
  for (auto& thread : threads) thread.join();
  progress.finish();
  CHECK(progress.step() == 4000);
  for (const auto& line : lines_of(out.str())) {
    CHECK((line.rfind("step ", 0) == 0 || line.rfind("done: 4000 steps", 0) == 0));
  }
}

}  // namespace troupe::scenarios
