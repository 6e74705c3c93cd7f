#include "scenarios/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/env.h"
#include "core/status.h"

namespace troupe::scenarios {

namespace {

constexpr double k_loss_weight = 0.1;  // of each new loss in the moving average
constexpr int k_min_bar_cells = 10;

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// Four significant digits, at most: 0.5123, 12.35, 1234.
std::string loss_text(double loss) {
  if (!std::isfinite(loss)) return fixed(loss, 0);
  double magnitude = std::abs(loss);
  int decimals = magnitude >= 1000 ? 0 : magnitude >= 100 ? 1 : magnitude >= 10 ? 2 : 4;
  return fixed(loss, decimals);
}

std::string rate_text(double rate) { return fixed(rate, rate >= 100 ? 0 : 1); }

}  // namespace

progress_style resolve_progress_style(progress_style style, int fd) {
  if (style != progress_style::automatic) return style;
  return ::isatty(fd) ? progress_style::bar : progress_style::plain;
}

progress_reporter::progress_reporter(std::ostream& out, progress_options options)
    : out_(out), options_(std::move(options)), loss_(std::numeric_limits<double>::quiet_NaN()) {
  options_.style = resolve_progress_style(options_.style);
  options_.every = std::max<std::int64_t>(options_.every, 1);
  start_ = now();
  last_draw_time_ = start_;
}

progress_reporter::~progress_reporter() { finish(); }

double progress_reporter::now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(env::now().time_since_epoch()).count();
}

std::string progress_reporter::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto total = static_cast<std::int64_t>(std::llround(seconds));
  std::int64_t hours = total / 3600, minutes = (total / 60) % 60, secs = total % 60;
  char text[64];
  if (hours > 0) {
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(hours),
                  static_cast<long long>(minutes), static_cast<long long>(secs));
  } else {
    std::snprintf(text, sizeof text, "%lld:%02lld", static_cast<long long>(minutes),
                  static_cast<long long>(secs));
  }
  return text;
}

std::string progress_reporter::status_text(double rate) const {
  std::string text;
  std::int64_t total = options_.total_steps;
  if (total > 0) {
    auto percent = static_cast<int>(100.0 * static_cast<double>(std::min(step_, total)) /
                                    static_cast<double>(total));
    text = str_cat(step_, "/", total, " (", percent, "%)");
  } else {
    text = str_cat(step_);
  }
  if (have_loss_) text += str_cat("  loss ", loss_text(loss_));
  if (rate > 0) {
    text += str_cat("  ", rate_text(rate), " steps/s");
    if (total > 0) {
      double left = static_cast<double>(std::max<std::int64_t>(total - step_, 0)) / rate;
      text += str_cat("  ETA ", format_duration(left));
    }
  }
  return text;
}

void progress_reporter::update(std::int64_t step, double loss) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  std::int64_t previous = step_;
  step_ = std::max(step_, step);
  if (options_.show_loss) {
    loss_ = have_loss_ ? (1 - k_loss_weight) * loss_ + k_loss_weight * loss : loss;
    have_loss_ = true;
  }
  switch (options_.style) {
    case progress_style::bar: {
      double t = now();
      bool last = options_.total_steps > 0 && step_ >= options_.total_steps;
      if (t - last_draw_time_ >= options_.min_redraw_seconds || bar_length_ == 0 || last) {
        draw_bar(t);
      }
      break;
    }
    case progress_style::plain:
      if (step_ / options_.every > previous / options_.every) {
        double t = now();
        if (t > last_draw_time_) {
          rate_ = static_cast<double>(step_ - last_draw_step_) / (t - last_draw_time_);
        }
        last_draw_time_ = t;
        last_draw_step_ = step_;
        out_ << "step " << status_text(rate_) << "\n" << std::flush;
      }
      break;
    case progress_style::off:
    case progress_style::automatic:
      break;
  }
}

void progress_reporter::draw_bar(double t) {
  if (t - last_draw_time_ > 0 && step_ > last_draw_step_) {
    rate_ = static_cast<double>(step_ - last_draw_step_) / (t - last_draw_time_);
    last_draw_time_ = t;
    last_draw_step_ = step_;
  }
  std::string text = status_text(rate_);
  // The text keeps the widest width it had, so the bar does not jitter as digits change.
  text_width_ = std::max(text_width_, text.size());
  text.resize(text_width_, ' ');
  std::string line;
  std::int64_t total = options_.total_steps;
  int cells = options_.width - static_cast<int>(text.size()) - 4;  // "[" "] " and a spare column
  if (total > 0 && cells >= k_min_bar_cells) {
    double fraction = std::min(1.0, static_cast<double>(step_) / static_cast<double>(total));
    auto done = static_cast<int>(fraction * cells);
    line += '[';
    line.append(static_cast<std::size_t>(done), '=');
    if (done < cells) {
      line += '>';
      line.append(static_cast<std::size_t>(cells - done - 1), ' ');
    }
    line += "] ";
  } else {
    line += "step ";
  }
  line += text;
  // Pad with spaces over what is left of a longer previous line.
  std::size_t length = line.size();
  if (length < bar_length_) line += std::string(bar_length_ - length, ' ');
  out_ << '\r' << line << std::flush;
  bar_length_ = std::max<std::size_t>(length, 1);
}

void progress_reporter::clear_bar() {
  if (bar_length_ == 0) return;
  out_ << '\r' << std::string(bar_length_, ' ') << '\r';
  bar_length_ = 0;
}

void progress_reporter::message(std::string_view line) {
  std::lock_guard<std::mutex> lock(mutex_);
  bool redraw = options_.style == progress_style::bar && bar_length_ > 0 && !finished_;
  clear_bar();
  out_ << line << "\n";
  if (redraw) draw_bar(now());
  out_ << std::flush;
}

void progress_reporter::finish(std::int64_t final_step) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  step_ = std::max(step_, final_step);
  double t = now();
  if (options_.style == progress_style::bar && bar_length_ > 0) {
    draw_bar(t);  // the final state stays on screen
    out_ << "\n";
    bar_length_ = 0;
  }
  double elapsed = t - start_;
  std::string summary = str_cat("done: ", step_, " steps in ", format_duration(elapsed));
  if (elapsed > 0 && step_ > 0) {
    summary += str_cat(" (", rate_text(static_cast<double>(step_) / elapsed), " steps/s)");
  }
  if (have_loss_) summary += str_cat(", loss ", loss_text(loss_));
  out_ << summary << "\n" << std::flush;
}

double progress_reporter::smoothed_loss() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return loss_;
}

std::int64_t progress_reporter::step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return step_;
}

}  // namespace troupe::scenarios
