// ProgressBar (tensorpack's callbacks/prog_bar.py, a tqdm bar per epoch):
// shows step/steps, it/s, elapsed time and ETA, plus the latest values of
// chosen scalar tensors fetched with the training steps. On a terminal the
// line is redrawn in place with '\r'; otherwise (a log file, a pipe) plain
// lines are printed every 10% of the epoch, with no control characters.
// Not chief-only (as tensorpack); part of default_callbacks().
#pragma once

#include <chrono>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "train/callback.h"

namespace spire {

class ProgressBar : public Callback {
 public:
  /// `names`: scalar tensors to show (looked up in the main training tower
  /// first, e.g. "cost"), shown by their last name component.
  explicit ProgressBar(std::vector<std::string> names = {});
  /// Writes to `out` instead of stdout; `is_tty` chooses the redrawn line
  /// (default: isatty(stdout) when writing to stdout, else false).
  void set_output(std::ostream* out, std::optional<bool> is_tty = std::nullopt);

 protected:
  void _before_train() override;
  void _before_epoch() override;
  void _after_epoch() override;
  SessionRunArgs _before_run(SessionRunContext&) override;
  void _after_run(SessionRunContext&, const SessionRunValues& values) override;
  void _trigger_step() override;
  void _after_train() override;

 private:
  std::string render() const;
  void draw(bool final_draw);
  std::ostream& out() const;
  bool tty() const;

  std::vector<std::string> names_, tags_;
  std::vector<Output> fetches_;
  std::vector<double> values_;
  bool have_values_ = false;
  std::ostream* out_ = nullptr;
  std::optional<bool> is_tty_;
  int64_t total_ = 0, count_ = 0, last_updated_ = -2;
  int last_decile_ = 0;
  bool line_open_ = false;
  size_t last_len_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace spire
