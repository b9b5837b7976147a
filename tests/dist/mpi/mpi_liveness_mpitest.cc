// MpiLiveness (dist/mpi/mpi_runtime.h): the liveness settings from the
// environment. The heartbeats, stall warnings and exit notices themselves
// are tested by killing, stopping, slowing and ending ranks of whole jobs:
// tests/dist/mpi/rank_failures.py.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "dist/mpi/mpi_runtime.h"

namespace spire::dist {
namespace {

// An environment of the three variables (null: unset), read without
// touching the process's (OpenMPI's threads run meanwhile).
struct LivenessEnv {
  LivenessEnv(const char* beat, const char* dead, const char* stall)
      : vars{{"SPIRE_MPI_HEARTBEAT_SECONDS", beat},
             {"SPIRE_MPI_DEAD_AFTER_SECONDS", dead},
             {"SPIRE_STALL_CHECK_SECONDS", stall}} {}
  MpiLiveness read() const {
    return MpiLiveness::from_env([this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second;
    });
  }
  std::map<std::string, const char*> vars;
};

void expect_error(const char* beat, const char* dead, const char* stall, const std::string& want) {
  try {
    LivenessEnv(beat, dead, stall).read();
    ADD_FAILURE() << "no error for " << (beat ? beat : "-") << " " << (dead ? dead : "-") << " "
                  << (stall ? stall : "-");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

TEST(MpiLiveness, SettingsComeFromTheEnvironmentAndBadOnesAreNamed) {
  {
    const MpiLiveness l = LivenessEnv(nullptr, nullptr, "").read();
    EXPECT_EQ(l.heartbeat_seconds, 0.5);
    EXPECT_EQ(l.dead_after_seconds, 10);
    EXPECT_EQ(l.stall_check_seconds, 60);
  }
  {
    const MpiLiveness l = LivenessEnv("0.25", "3", "0").read();
    EXPECT_EQ(l.heartbeat_seconds, 0.25);
    EXPECT_EQ(l.dead_after_seconds, 3);
    EXPECT_EQ(l.stall_check_seconds, 0);
  }
  EXPECT_EQ(LivenessEnv(nullptr, "0", nullptr).read().dead_after_seconds, 0);  // (judges no rank)
  expect_error("fast", nullptr, nullptr, "SPIRE_MPI_HEARTBEAT_SECONDS='fast' is not a number of seconds");
  expect_error("0", nullptr, nullptr, "SPIRE_MPI_HEARTBEAT_SECONDS must be > 0");
  expect_error(nullptr, "-1", nullptr, "SPIRE_MPI_DEAD_AFTER_SECONDS='-1'");
  expect_error(nullptr, "5s", nullptr, "SPIRE_MPI_DEAD_AFTER_SECONDS='5s'");
  expect_error("1", "3", nullptr, "must be 0 (never) or at least 4 heartbeats");
  expect_error(nullptr, nullptr, "inf", "SPIRE_STALL_CHECK_SECONDS='inf'");
}

}  // namespace
}  // namespace spire::dist
