// NcclCommunicator made by its process constructor (as make_process_communicator("nccl")
// makes it on each rank), here one rank of one on cuda:0, so that one GPU runs the polled
// path: a call returns once its work is done on the GPU, with the results; a peer's failure
// announced during a wait abandons it, aborts the communicator, and later calls fail at once
// naming why; destruction finalizes (bounded). Skipped with a message without a CUDA build
// with NCCL or without a visible GPU; bench/gpu_check.sh runs it (label gpu).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>

#include "core/device_backend.h"
#include "tests/support/op_test_util.h"
#if defined(SPIRE_WITH_NCCL)
#include "dist/nccl/nccl_communicator.h"
#endif

namespace spire::testing {
namespace {

class GpuNcclProcess : public ::testing::Test {
 protected:
  void SetUp() override {
#if !defined(SPIRE_WITH_NCCL)
    GTEST_SKIP() << "this build has no NCCL (SPIRE_CUDA with NCCL installed)";
#else
    if (find_device_backend(DeviceType::CUDA) == nullptr)
      GTEST_SKIP() << "this build has no CUDA backend (SPIRE_CUDA=OFF)";
    if (device_count(DeviceType::CUDA) == 0) GTEST_SKIP() << "no CUDA device is visible";
#endif
  }
};

#if defined(SPIRE_WITH_NCCL)
// allreduce (sum, one rank: a copy) of `host` on cuda:0 through `comm`; the result on the CPU.
Tensor allreduce(dist::NcclCommunicator& comm, const Tensor& host) {
  Tensor in = host.to(Device::cuda(0));
  Tensor out(host.dtype(), host.shape(), Device::cuda(0));
  std::vector<dist::Participant> parts{{0, in, out}};
  dist::CollectiveCall call;
  call.name = "grads";
  comm.allreduce(call, parts, dist::ReduceOp::kSum);
  return out.to(Device::cpu());
}
#endif

TEST_F(GpuNcclProcess, CallsCompleteAPeersFailureAbortsAndLaterCallsFailAtOnce) {
#if defined(SPIRE_WITH_NCCL)
  std::atomic<int> polled{0};
  std::atomic<bool> peer_failed{false};
  dist::NcclProcessOptions o;
  o.timeout_seconds = 30;
  o.peer_failure = [&] {
    ++polled;
    return peer_failed ? std::string("rank 1 failed: boom") : std::string();
  };
  dist::NcclCommunicator comm(Device::cuda(0), 0, 1, dist::nccl_unique_id(), o);
  Tensor host(DType::F32, Shape{int64_t{1} << 22});
  for (int64_t i = 0; i < host.num_elements(); ++i) host.data<float>()[i] = static_cast<float>(i % 1001);
  for (int rep = 0; rep < 3; ++rep) {
    Tensor r = allreduce(comm, host);
    ASSERT_EQ(std::memcmp(r.raw_data(), host.raw_data(), host.nbytes()), 0) << "call " << rep;
  }
  EXPECT_GE(polled.load(), 3) << "every wait polls the peers";
  EXPECT_EQ(comm.broken(), "");
  peer_failed = true;
  expect_error([&] { allreduce(comm, host); },
               {"allreduce 'grads' on nccl(cuda:0) to complete on every rank: abandoned: rank 1 failed: boom"});
  EXPECT_NE(comm.broken().find("abandoned: rank 1 failed: boom"), std::string::npos) << comm.broken();
  const int before = polled;
  expect_error([&] { allreduce(comm, host); }, {"the communicator is unusable", "rank 1 failed: boom"});
  EXPECT_EQ(polled.load(), before) << "a broken communicator fails at once";
#endif
}

}  // namespace
}  // namespace spire::testing
