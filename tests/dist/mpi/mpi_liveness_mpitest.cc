// MpiLiveness (dist/mpi/mpi_runtime.h): the liveness settings from the
// environment. The heartbeats, stall warnings and exit notices themselves
// are tested by killing, stopping, slowing and ending ranks of whole jobs:
// tests/dist/mpi/rank_failures.py.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "dist/mpi/mpi_runtime.h"

namespace spire::dist {
namespace {

// Sets the three variables for the scope of one check, then unsets them.
struct LivenessEnv {
  LivenessEnv(const char* beat, const char* dead, const char* stall) {
    set("SPIRE_MPI_HEARTBEAT_SECONDS", beat);
    set("SPIRE_MPI_DEAD_AFTER_SECONDS", dead);
    set("SPIRE_STALL_CHECK_SECONDS", stall);
  }
  ~LivenessEnv() {
    ::unsetenv("SPIRE_MPI_HEARTBEAT_SECONDS");
    ::unsetenv("SPIRE_MPI_DEAD_AFTER_SECONDS");
    ::unsetenv("SPIRE_STALL_CHECK_SECONDS");
  }
  static void set(const char* name, const char* v) {
    if (v) ::setenv(name, v, 1);
    else ::unsetenv(name);
  }
};

void expect_error(const char* beat, const char* dead, const char* stall, const std::string& want) {
  LivenessEnv env(beat, dead, stall);
  try {
    MpiLiveness::from_env();
    ADD_FAILURE() << "no error for " << (beat ? beat : "-") << " " << (dead ? dead : "-") << " "
                  << (stall ? stall : "-");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

TEST(MpiLiveness, SettingsComeFromTheEnvironmentAndBadOnesAreNamed) {
  {
    LivenessEnv env(nullptr, nullptr, "");
    const MpiLiveness l = MpiLiveness::from_env();
    EXPECT_EQ(l.heartbeat_seconds, 0.5);
    EXPECT_EQ(l.dead_after_seconds, 10);
    EXPECT_EQ(l.stall_check_seconds, 60);
  }
  {
    LivenessEnv env("0.25", "3", "0");
    const MpiLiveness l = MpiLiveness::from_env();
    EXPECT_EQ(l.heartbeat_seconds, 0.25);
    EXPECT_EQ(l.dead_after_seconds, 3);
    EXPECT_EQ(l.stall_check_seconds, 0);
  }
  {
    LivenessEnv env(nullptr, "0", nullptr);  // never declared dead
    EXPECT_EQ(MpiLiveness::from_env().dead_after_seconds, 0);
  }
  expect_error("fast", nullptr, nullptr, "SPIRE_MPI_HEARTBEAT_SECONDS='fast' is not a number of seconds");
  expect_error("0", nullptr, nullptr, "SPIRE_MPI_HEARTBEAT_SECONDS must be > 0");
  expect_error(nullptr, "-1", nullptr, "SPIRE_MPI_DEAD_AFTER_SECONDS='-1'");
  expect_error(nullptr, "5s", nullptr, "SPIRE_MPI_DEAD_AFTER_SECONDS='5s'");
  expect_error("1", "3", nullptr, "must be 0 (never) or at least 4 heartbeats");
  expect_error(nullptr, nullptr, "inf", "SPIRE_STALL_CHECK_SECONDS='inf'");
}

}  // namespace
}  // namespace spire::dist
