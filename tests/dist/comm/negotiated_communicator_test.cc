// NegotiatedCommunicator's construction checks, in one process (its calls across processes:
// negotiated_communicator_mpitest.cc): one participant per process on both communicators,
// the same rank and rank count, a controller that takes host tensors.
#include <gtest/gtest.h>

#include "dist/comm/negotiated_communicator.h"
#include "tests/dist/comm/fake_gpu_communicator.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using dist::NegotiatedCommunicator;

std::shared_ptr<StubCommunicator> stub(int rank, int n, std::vector<Device> devices) {
  return std::make_shared<StubCommunicator>(rank, n, std::move(devices));
}

TEST(NegotiatedCommunicator, TakesTheDataCommunicatorsIdentityAndChecksBothWhenBuilt) {
  NegotiatedCommunicator ok(stub(1, 3, {Device::cuda(0)}), stub(1, 3, {Device::cpu()}));
  EXPECT_EQ(ok.rank(), 1);
  EXPECT_EQ(ok.num_ranks(), 3);
  EXPECT_EQ(ok.devices(), std::vector<Device>{Device::cuda(0)});
  EXPECT_EQ(ok.name(), "negotiated(stub(rank 1 of 3), controller stub(rank 1 of 3))");
  expect_error([] { NegotiatedCommunicator(stub(1, 3, {Device::cuda(0)}), stub(2, 3, {Device::cpu()})); },
               {"NegotiatedCommunicator: stub(rank 1 of 3) is rank 1 of 3 but the controller stub(rank 2 of 3) is "
                "rank 2 of 3"});
  expect_error([] { NegotiatedCommunicator(stub(0, 2, {Device::cuda(0), Device::cuda(1)}), stub(0, 2, {Device::cpu()})); },
               {"must have one participant per process; they have 2 and 1"});
  expect_error([] { NegotiatedCommunicator(stub(0, 2, {Device::cuda(0)}), stub(0, 2, {Device::cuda(1)})); },
               {"the controller stub(rank 0 of 2) must take host tensors (it is on cuda:1)"});
  expect_error([] { NegotiatedCommunicator(nullptr, stub(0, 2, {Device::cpu()})); }, {"must not be null"});
}

}  // namespace
}  // namespace spire::testing
