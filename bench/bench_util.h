// Helpers shared by the benchmark programs in bench/ (resnet_step, gpt_step,
// image_pipeline): whole-number flags checked against a range, with the
// user's mistake reported as a spire::Error naming the program and flag; the
// process's CPU time and its memory figures from /proc/self/status.
#pragma once

#include <ctime>
#include <cstdlib>
#include <fstream>
#include <string>

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

}  // namespace spire::bench
