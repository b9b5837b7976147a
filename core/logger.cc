#include "core/logger.h"

#include <cstdio>
#include <ctime>
#include <mutex>
#include <set>

namespace spire::logger {

void write(Level level, const std::string& message) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%m%d %H:%M:%S", &tm);
  const char* tag = level == Level::kWarn ? "WRN " : level == Level::kError ? "ERR " : "";
  std::string line = std::string("[") + stamp + " @spire] " + tag + message + "\n";
  std::fputs(line.c_str(), stderr);
}

void write_once(Level level, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (!seen.insert(message).second) return;
  }
  write(level, message);
}

}  // namespace spire::logger
