// Command-line helpers shared by the benchmark programs in bench/ (resnet_step,
// image_pipeline): whole-number flags checked against a range, with the
// user's mistake reported as a spire::Error naming the program and flag.
#pragma once

#include <cstdlib>
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

}  // namespace spire::bench
