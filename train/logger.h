// Minimal logging for the trainer stack (tensorpack's logger): timestamped
// lines on stderr (stateless: one fputs per line, which stdio locks).
#pragma once

#include <string>

#include "core/error.h"

namespace spire::logger {

enum class Level { kInfo, kWarn, kError };

/// Writes one line "[MMDD HH:MM:SS @spire] <level>message".
void write(Level level, const std::string& message);

template <typename... Args>
void info(Args&&... args) {
  write(Level::kInfo, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
void warn(Args&&... args) {
  write(Level::kWarn, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
void error(Args&&... args) {
  write(Level::kError, str_cat(std::forward<Args>(args)...));
}

}  // namespace spire::logger
