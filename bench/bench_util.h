// Helpers shared by the benchmark programs in bench/ (resnet_step, gpt_step,
// image_pipeline): whole-number flags checked against a range, with the
// user's mistake reported as a spire::Error naming the program and flag; the
// process's CPU time and its memory figures from /proc/self/status.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace spire::bench {

/// Parses `v`, the value of `flag`, as a whole decimal number in [lo, hi];
/// `program` (when not empty) prefixes the error.
inline long parse_int_flag(const std::string& program, const std::string& flag,
                           const std::string& v, long lo, long hi) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > hi)
    throw_error(program, program.empty() ? "" : ": ", flag, " needs an integer in [", lo, ", ", hi, "], got '", v, "'");
  return x;
}

/// Seconds of CPU time of the whole process (all its threads) so far.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// A "Vm...:   123 kB" field of /proc/self/status (VmRSS, VmHWM) in MiB, -1 where it
/// cannot be read.
inline double proc_status_mib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(f, line))
    if (line.compare(0, key.size(), key) == 0) return std::strtod(line.c_str() + key.size(), nullptr) / 1024.0;
  return -1;
}

/// What time_windows measured: seconds per step of each window, sorted ascending, and the
/// process's CPU seconds per step over all windows.
struct WindowTimes {
  std::vector<double> per_step;
  double cpu_per_step = 0;
  /// The upper median window (the benchmarks' figure).
  double median() const { return per_step[per_step.size() / 2]; }
  double best() const { return per_step.front(); }
};

/// Times `windows` (>= 1) windows of `steps` calls of step(); end_window() runs at the end of
/// each window before the clock is read (e.g. waiting for a GPU), and on_window(w, seconds per
/// step) after it.
template <typename Step, typename EndWindow, typename OnWindow>
WindowTimes time_windows(int windows, int steps, Step&& step, EndWindow&& end_window, OnWindow&& on_window) {
  WindowTimes t;
  const double cpu0 = process_cpu_seconds();
  for (int w = 0; w < windows; ++w) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    end_window();
    t.per_step.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps);
    on_window(w, t.per_step.back());
  }
  t.cpu_per_step = (process_cpu_seconds() - cpu0) / (windows * steps);
  std::sort(t.per_step.begin(), t.per_step.end());
  return t;
}

}  // namespace spire::bench
