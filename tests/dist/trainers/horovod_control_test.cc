// HorovodTrainer's control communicator (the host-side calls beside a GPU communicator), in
// one process: which communicator it takes, and the checks when it is built. (Training with
// a fake GPU communicator under mpirun: horovod_trainer_mpitest.cc.)
#include <gtest/gtest.h>

#include "dist/trainers/horovod_trainer.h"
#include "tests/dist/comm/fake_gpu_communicator.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

TEST(HorovodTrainer, TheControlCommunicatorIsTheGivenOneOrACpuCommunicatorItself) {
  {  // A CPU communicator serves both.
    HorovodOptions o;
    o.communicator = std::make_shared<StubCommunicator>(0, 1, std::vector<Device>{Device::cpu()});
    HorovodTrainer t(o);
    EXPECT_EQ(&t.control_communicator(), o.communicator.get());
  }
  {  // A GPU communicator of one process: nothing goes outside the graph.
    HorovodOptions o;
    o.communicator = std::make_shared<StubCommunicator>(0, 1, std::vector<Device>{Device::cuda(0)});
    HorovodTrainer t(o);
    EXPECT_EQ(&t.control_communicator(), o.communicator.get());
    EXPECT_EQ(t.allreduce_sum({1.5, 2}, "sums"), (std::vector<double>{1.5, 2}));
  }
  {  // The given one.
    HorovodOptions o;
    o.communicator = std::make_shared<StubCommunicator>(1, 2, std::vector<Device>{Device::cuda(0)});
    o.control_communicator = std::make_shared<StubCommunicator>(1, 2, std::vector<Device>{Device::cpu()});
    HorovodTrainer t(o);
    EXPECT_EQ(&t.control_communicator(), o.control_communicator.get());
    EXPECT_EQ(&t.communicator(), o.communicator.get());
    EXPECT_FALSE(t.is_chief());
  }
}

TEST(HorovodTrainer, AControlCommunicatorOnAGpuOrOfOtherRanksIsAClearError) {
  expect_error(
      [] {
        HorovodOptions o;
        o.communicator = std::make_shared<StubCommunicator>(0, 2, std::vector<Device>{Device::cuda(0)});
        o.control_communicator = std::make_shared<StubCommunicator>(0, 2, std::vector<Device>{Device::cuda(0)});
        HorovodTrainer t(o);
      },
      {"HorovodTrainer: the control communicator stub(rank 0 of 2) must have one CPU participant per process",
       "it has cuda:0"});
  expect_error(
      [] {
        HorovodOptions o;
        o.communicator = std::make_shared<StubCommunicator>(0, 2, std::vector<Device>{Device::cuda(0)});
        o.control_communicator = std::make_shared<StubCommunicator>(0, 3, std::vector<Device>{Device::cpu()});
        HorovodTrainer t(o);
      },
      {"HorovodTrainer: the control communicator stub(rank 0 of 3) is rank 0 of 3 but the communicator "
       "stub(rank 0 of 2) is rank 0 of 2"});
}

}  // namespace
}  // namespace spire::testing
