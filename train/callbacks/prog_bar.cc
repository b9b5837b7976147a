// ProgressBar (see prog_bar.h).
#include "train/callbacks/prog_bar.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>

#include "train/callbacks/misc.h"
#include "train/trainer.h"

namespace spire {

namespace {

// "MM:SS", or "H:MM:SS" from an hour on (tqdm's format_interval).
std::string format_interval(double secs) {
  if (!(secs >= 0)) return "?";
  int64_t t = static_cast<int64_t>(secs + 0.5);
  int64_t h = t / 3600, m = (t % 3600) / 60, s = t % 60;
  char buf[32];
  if (h > 0)
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(h),
                  static_cast<long long>(m), static_cast<long long>(s));
  else
    std::snprintf(buf, sizeof(buf), "%02lld:%02lld", static_cast<long long>(m), static_cast<long long>(s));
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(std::vector<std::string> names) : names_(std::move(names)) {
  chief_only_ = false;
  for (const auto& n : names_) {
    std::string op = op_name_of(n);
    auto pos = op.rfind('/');
    tags_.push_back(pos == std::string::npos ? op : op.substr(pos + 1));
  }
}

void ProgressBar::set_output(std::ostream* out, std::optional<bool> is_tty) {
  out_ = out;
  is_tty_ = is_tty;
}

std::ostream& ProgressBar::out() const { return out_ ? *out_ : std::cout; }

bool ProgressBar::tty() const {
  if (is_tty_) return *is_tty_;
  return out_ == nullptr && isatty(fileno(stdout));
}

void ProgressBar::_before_train() {
  total_ = trainer().steps_per_epoch();
  last_updated_ = trainer().local_step();
  fetches_.clear();
  for (const auto& n : names_) {
    Output t = get_tensor_maybe_in_tower(trainer(), n);
    SPIRE_CHECK(t.shape().rank() == 0, "ProgressBar can only print scalars, not '", t.name(),
                "' of shape ", t.shape().to_string());
    fetches_.push_back(t);
  }
}

void ProgressBar::_before_epoch() {
  count_ = 0;
  last_decile_ = 0;
  have_values_ = false;
  values_.clear();
  line_open_ = false;
  last_len_ = 0;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

SessionRunArgs ProgressBar::_before_run(SessionRunContext&) {
  // Fetch only with the first hooked run of a step (the training run).
  if (fetches_.empty() || trainer().local_step() == last_updated_) return {};
  last_updated_ = trainer().local_step();
  return {fetches_, {}, {}};
}

void ProgressBar::_after_run(SessionRunContext&, const SessionRunValues& values) {
  if (values.results.size() != fetches_.size() || fetches_.empty()) return;
  values_.clear();
  for (const auto& t : values.results) values_.push_back(t.item<double>());
  have_values_ = true;
}

std::string ProgressBar::render() const {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = elapsed > 0 ? static_cast<double>(count_) / elapsed : 0;
  double remaining = rate > 0 ? static_cast<double>(total_ - count_) / rate : -1;
  int pct = total_ > 0 ? static_cast<int>(100 * count_ / total_) : 0;
  const int width = 20;
  int filled = total_ > 0 ? static_cast<int>(width * count_ / total_) : 0;
  std::ostringstream os;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%3d%%|", pct);
  os << buf << std::string(static_cast<size_t>(filled), '#')
     << std::string(static_cast<size_t>(width - filled), ' ') << "|" << count_ << "/" << total_
     << "[" << format_interval(elapsed) << "<" << format_interval(remaining) << ",";
  if (rate >= 1 || rate == 0)
    std::snprintf(buf, sizeof(buf), "%.2fit/s", rate);
  else
    std::snprintf(buf, sizeof(buf), "%.2fs/it", 1.0 / rate);
  os << buf << "]";
  if (have_values_) {
    for (size_t i = 0; i < tags_.size() && i < values_.size(); ++i) {
      std::snprintf(buf, sizeof(buf), "%.3g", values_[i]);
      os << (i == 0 ? " " : ", ") << tags_[i] << "=" << buf;
    }
  }
  return os.str();
}

void ProgressBar::draw(bool final_draw) {
  std::string line = render();
  std::ostream& o = out();
  if (tty()) {
    std::string padded = line;
    if (padded.size() < last_len_) padded += std::string(last_len_ - padded.size(), ' ');
    last_len_ = line.size();
    o << '\r' << padded;
    line_open_ = true;
    if (final_draw) {
      o << '\n';
      line_open_ = false;
    }
  } else {
    o << line << '\n';
  }
  o.flush();
  last_draw_ = std::chrono::steady_clock::now();
}

void ProgressBar::_trigger_step() {
  ++count_;
  if (tty()) {
    auto now = std::chrono::steady_clock::now();
    if (count_ == total_ || std::chrono::duration<double>(now - last_draw_).count() >= 0.1)
      draw(count_ == total_);
  } else {
    int decile = total_ > 0 ? static_cast<int>(10 * count_ / total_) : 0;
    if (decile > last_decile_) {
      last_decile_ = decile;
      draw(false);
    }
  }
}

void ProgressBar::_after_epoch() {
  if (line_open_) {
    out() << '\n';
    out().flush();
    line_open_ = false;
  }
}

void ProgressBar::_after_train() { _after_epoch(); }

}  // namespace spire
