// The rank-failure driver of spire_mpi_tests and its main(): with
// --spire-failure=MODE the binary runs one failure of a whole job for
// tests/dist/mpi/rank_failures.py instead of the gtests (a job that must
// end, non-zero or not, as a real one would).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/mpi/mpi_communicator.h"
#include "dist/mpi/mpi_runtime.h"
#include "tests/dist/mpi/mpi_test_util.h"

namespace spire {
int run_trainer_failure();                   // horovod_trainer_mpitest.cc
int run_trainer_slow();                      // horovod_trainer_mpitest.cc
int run_ps_failure(const std::string& mode);  // distributed_trainers_mpitest.cc
}

namespace {

// A rank failure for tests/dist/mpi/rank_failures.py (not a gtest: the job
// must end, non-zero, as a real one would). Every rank runs one good
// allreduce; then rank 1 fails by `mode` ("raise": announces its error and
// exits 1, as a trainer does; "kill": SIGKILL; "stop": SIGSTOP; "exit":
// leaves main early) while the others call the next allreduce (no time
// limit: the runtime's heartbeats and exit notices end it), print their
// error and announce it, as a trainer does. "slow": rank 1 only sleeps
// SPIRE_TEST_SLEEP_SECONDS (alive) and the job ends well. "pause": every
// rank allreduces for that long while the harness stops and continues the
// whole job (a suspended job); it ends well. "raise-early":
// rank 1 raises before it makes its communicator, while the others make
// theirs (which is collective).
// How long the "slow" modes' rank sleeps: SPIRE_TEST_SLEEP_SECONDS (default
// 8 s; rank_failures.py sets it).
double sleep_seconds() {
  const char* v = std::getenv("SPIRE_TEST_SLEEP_SECONDS");
  return v && *v ? std::atof(v) : 8.0;
}

int run_failure(const std::string& mode) {
  using namespace spire;
  if (mode == "trainer") return run_trainer_failure();
  if (mode == "trainer-slow") return run_trainer_slow();
  if (mode.rfind("ps-", 0) == 0) return run_ps_failure(mode);
  using namespace spire::dist;
  using spire::testing::call;
  using spire::testing::input;
  MpiRuntime& rt = MpiRuntime::get();
  if (mode == "raise-early") {
    if (rt.rank() == 1) {
      rt.announce_failure("the model raised: boom", 2.0);
      return 1;
    }
    try {
      MpiCommunicator comm(Device::cpu(), 3.0);
      std::fprintf(stderr, "rank %d: no error\n", rt.rank());
      return 0;
    } catch (const Error& e) {
      std::fprintf(stderr, "rank %d: spire::Error: %s\n", rt.rank(), e.what());
      rt.announce_failure(e.what(), 2.0);
      return 1;
    }
  }
  auto report = [&rt](const Error& e) {
    std::fprintf(stderr, "rank %d: spire::Error: %s\n", rt.rank(), e.what());
    rt.announce_failure(e.what(), 2.0);
    return 1;
  };
  MpiCommunicator comm(Device::cpu(), /*timeout_seconds=*/0);
  std::vector<Participant> p{{0, input(DType::F32, 1000, rt.rank()), Tensor(DType::F32, Shape{1000})}};
  if (mode == "pause") {
    // Allreduces for SPIRE_TEST_SLEEP_SECONDS while rank_failures.py stops
    // and continues the whole job: no rank may take another for dead.
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Participant> done{{0, Tensor(DType::I64, Shape{1}), Tensor(DType::I64, Shape{1})}};
    try {
      for (int64_t step = 0;; ++step) {
        comm.allreduce(call(str_cat("step ", step)), p, ReduceOp::kSum);
        done[0].input.data<int64_t>()[0] =
            std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(sleep_seconds());
        comm.allreduce(call(str_cat("done ", step)), done, ReduceOp::kMax);
        if (done[0].output.data<int64_t>()[0]) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (const Error& e) {
      return report(e);
    }
    std::fprintf(stderr, "rank %d: no error\n", rt.rank());
    return 0;
  }
  // Rank 1 may be done with the first allreduce (and fail) while another
  // rank still waits for its last segment: that rank then hears the failure
  // there, and reports it the same way.
  try {
    comm.allreduce(call("good"), p, ReduceOp::kSum);
  } catch (const Error& e) {
    return report(e);
  }
  std::fprintf(stderr, "rank %d: first allreduce done\n", rt.rank());
  if (rt.rank() == 1) {
    if (mode == "raise") {
      rt.announce_failure("the model raised: boom", 2.0);
      return 1;
    }
    if (mode == "kill") ::raise(SIGKILL);
    if (mode == "stop") ::raise(SIGSTOP);
    if (mode == "exit") return 0;
    if (mode == "slow") std::this_thread::sleep_for(std::chrono::duration<double>(sleep_seconds()));
  }
  try {
    comm.allreduce(call("next"), p, ReduceOp::kSum);
    const float want = static_cast<float>(rt.size() * (rt.size() + 1) / 2);  // input(): rank + 1 at [0]
    SPIRE_CHECK(p[0].output.data<float>()[0] == want, "rank ", rt.rank(), ": the allreduce summed ",
                p[0].output.data<float>()[0], ", not ", want);
    std::fprintf(stderr, "rank %d: no error\n", rt.rank());
    return 0;
  } catch (const Error& e) {
    return report(e);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string flag = "--spire-failure=";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind(flag, 0) == 0) return run_failure(std::string(argv[i]).substr(flag.size()));
  ::testing::InitGoogleTest(&argc, argv);
  spire::dist::MpiRuntime::get();  // MPI_Init_thread before any test
  return RUN_ALL_TESTS();
}
