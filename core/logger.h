// Spire's logging (tensorpack's logger), used by every layer: timestamped
// lines on stderr (one fputs per line, which stdio locks). It sits in core/
// so that layers, communicators and trainers all log the same way.
#pragma once

#include <string>

#include "core/error.h"

namespace spire::logger {

enum class Level { kInfo, kWarn, kError };

/// Writes one line "[MMDD HH:MM:SS @spire] <level>message".
void write(Level level, const std::string& message);

/// write() once per distinct message for the life of the process
/// (tensorpack's log_once): for warnings a loop would repeat.
void write_once(Level level, const std::string& message);

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

template <typename... Args>
void warn_once(Args&&... args) {
  write_once(Level::kWarn, str_cat(std::forward<Args>(args)...));
}

}  // namespace spire::logger
