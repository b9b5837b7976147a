// run_command: runs a shell command for tests that check Spire against an
// outside client (python packages), capturing its standard output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace spire::testing {

/// Runs `cmd` through the shell; returns its exit status (-1 when it could
/// not run or did not exit normally) and puts its stdout in *out.
inline int run_command(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace spire::testing
