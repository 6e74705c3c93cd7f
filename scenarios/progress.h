// progress_reporter: what a training run shows while it runs: the global step, the
// training loss, steps per second and the time left, then a one-line summary.
//
// Styles (the scenario's report.progress):
//   bar    one line redrawn in place with '\r', at most every min_redraw_seconds:
//            [=========>            ] 1200/3000 (40%)  loss 0.5123  812 steps/s  ETA 0:02
//   plain  a line each time the step passes a multiple of `every`, for logs and CI:
//            step 1200/3000 (40%)  loss 0.5123  812 steps/s  ETA 0:02
//   off    nothing until the summary
//   automatic: bar when standard output is a terminal, plain otherwise.
// finish() ends the line and prints the summary:
//            done: 3000 steps in 0:04 (731 steps/s), loss 0.4101
//
// The loss shown is an exponential moving average (weight 0.1 per update) of the losses
// reported, which in asynchronous training come from several workers; steps/s is measured
// over the time since the previous line. ETA is (total - step) / steps/s.
//
// Thread safety: every method may be called from any thread (workers report their own
// steps); output is serialized by a mutex. Steps may arrive out of order: the reporter
// shows the largest seen. The clock is a seam: tests pass their own.
//
//   scenarios::progress_reporter progress(std::cout, {.total_steps = 3000});
//   for (...) progress.update(step, loss);
//   progress.message("eval at step 1000: accuracy 0.842");   // its own line
//   progress.finish();
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>

namespace troupe::scenarios {

enum class progress_style { automatic, bar, plain, off };

// `style`, with automatic resolved: bar when file descriptor `fd` is a terminal.
progress_style resolve_progress_style(progress_style style, int fd = 1);

struct progress_options {
  progress_style style = progress_style::automatic;  // resolved against standard output
  std::int64_t total_steps = 0;                      // 0: unknown (no fraction, no ETA)
  std::int64_t every = 100;                          // plain: a line per this many steps
  int width = 80;                                    // bar: columns of the whole line
  double min_redraw_seconds = 0.1;                   // bar: redraw at most this often
  std::function<double()> clock = {};                // seconds; empty: steady clock
  bool show_loss = true;                             // false: no loss (a shape-only simulation's)
};

class progress_reporter {
 public:
  // Starts the clock. REQUIRES: `out` outlives the reporter.
  progress_reporter(std::ostream& out, progress_options options);
  ~progress_reporter();  // finish(), if not done yet
  progress_reporter(const progress_reporter&) = delete;
  progress_reporter& operator=(const progress_reporter&) = delete;

  progress_style style() const { return options_.style; }

  // Global step `step` has finished with training loss `loss`.
  void update(std::int64_t step, double loss);
  // Prints `line` on a line of its own; a bar is redrawn below it.
  void message(std::string_view line);
  // Ends the bar and prints the summary (once; later calls do nothing). `final_step`: the
  // global step the run ended at, when known (a step no update reported still counts).
  void finish(std::int64_t final_step = 0);

  // The moving average of the losses (NaN before the first update).
  double smoothed_loss() const;
  // The largest step reported so far (0 before the first).
  std::int64_t step() const;

  // "0:07", "12:34", "1:02:03": a duration in seconds as [h:]m:ss.
  static std::string format_duration(double seconds);

 private:
  double now() const;
  std::string status_text(double rate) const;  // "1200/3000  40%  loss ...", no bar
  void draw_bar(double now);                   // REQUIRES: mutex_ held
  void clear_bar();                            // REQUIRES: mutex_ held

  std::ostream& out_;
  progress_options options_;
  double start_;

  mutable std::mutex mutex_;
  // Guarded by mutex_.
  std::int64_t step_ = 0;
  double loss_;
  bool have_loss_ = false;
  double last_draw_time_;         // when the last bar or line was drawn
  std::int64_t last_draw_step_ = 0;
  double rate_ = 0;               // steps/s over the last drawn interval
  std::size_t bar_length_ = 0;    // characters of the bar now on screen, 0: none
  std::size_t text_width_ = 0;    // the widest status text the bar has shown
  bool finished_ = false;
};

}  // namespace troupe::scenarios
