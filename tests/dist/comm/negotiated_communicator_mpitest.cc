// NegotiatedCommunicator under mpirun on 2, 3 and 4 ranks (runs in spire_mpi_tests), around
// a fake GPU communicator that checks nothing, as NCCL across processes: calls that agree
// reach it with their results; a collective that differs on one rank, which the fake alone
// pairs silently with the others', fails on EVERY rank naming both collectives; a shape that
// differs is named too; agree() goes to the controller.
#include <gtest/gtest.h>

#include "dist/comm/negotiated_communicator.h"
#include "dist/mpi/mpi_communicator.h"
#include "tests/dist/comm/fake_gpu_communicator.h"

namespace spire::dist {
namespace {

int rank() { return MpiRuntime::get().rank(); }
int nranks() { return MpiRuntime::get().size(); }

struct Communicators {
  std::shared_ptr<testing::FakeGpuCommunicator> gpu;
  std::shared_ptr<testing::RecordingCommunicator> controller;
  std::shared_ptr<NegotiatedCommunicator> comm;
};

// Every rank makes its communicators here, in the same order.
Communicators make_setup() {
  Communicators s;
  s.gpu = std::make_shared<testing::FakeGpuCommunicator>(std::make_shared<MpiCommunicator>(Device::cpu(), 20),
                                                         /*graph_calls_only=*/false);
  s.controller = std::make_shared<testing::RecordingCommunicator>(std::make_shared<MpiCommunicator>(Device::cpu(), 20));
  s.comm = std::make_shared<NegotiatedCommunicator>(s.gpu, s.controller);
  return s;
}

// allreduce (sum) of `identity` over f32[n] holding this rank's index + 1, through `comm`.
Tensor allreduce(Communicator& comm, const std::string& identity, int64_t n) {
  Tensor t(DType::F32, Shape{n});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(rank() + 1);
  std::vector<Participant> parts{{0, t, t}};
  CollectiveCall call;
  call.name = identity;
  call.identity = identity;
  comm.allreduce(call, parts, ReduceOp::kSum);
  return t;
}

TEST(NegotiatedCommunicator, CallsThatAgreeReachTheDataCommunicatorEachNegotiatedFirst) {
  Communicators s = make_setup();
  const int n = nranks();
  EXPECT_EQ(s.comm->rank(), rank());
  EXPECT_EQ(s.comm->num_ranks(), n);
  for (const char* id : {"bucket0", "bucket1"}) {
    Tensor r = allreduce(*s.comm, id, 5);
    for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(r.data<float>()[i], static_cast<float>(n * (n + 1) / 2));
  }
  const auto data = s.gpu->calls(), control = s.controller->calls();
  ASSERT_EQ(data.size(), 2u);
  ASSERT_EQ(control.size(), 2u);
  EXPECT_EQ(data[1].name, "bucket1");
  EXPECT_EQ(control[0].kind, "allgather");
  EXPECT_EQ(control[1].name, "negotiate bucket1");
  // agree() goes to the controller (which compares host lists), not to the data communicator.
  s.comm->agree("the ranks' lists", {"a", "b"});
  EXPECT_EQ(s.controller->calls().back().kind, "agree");
  EXPECT_EQ(s.gpu->calls().size(), 2u);
}

TEST(NegotiatedCommunicator, ACollectiveThatDiffersOnOneRankFailsEveryRankNamingBothCollectives) {
  Communicators s = make_setup();
  const int n = nranks();
  const std::string mine = rank() == n - 1 ? "bn/mean" : "AllReduce/bucket0";
  // Without the negotiation the fake, as NCCL, pairs the two collectives of one size silently.
  allreduce(*s.gpu, mine, 4);
  try {
    allreduce(*s.comm, mine, 4);
    ADD_FAILURE() << "no error on rank " << rank();
  } catch (const CollectiveMismatch& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(str_cat("ranks disagree: rank ", n - 1,
                               " called allreduce 'bn/mean' where rank 0 called allreduce 'AllReduce/bucket0'")),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(str_cat("allreduce '", mine, "' on negotiated(")), std::string::npos) << msg;
  }
  // The data communicator never saw the mismatched call.
  EXPECT_EQ(s.gpu->calls().size(), 1u);
}

TEST(NegotiatedCommunicator, AShapeThatDiffersOnOneRankFailsEveryRankNamingBothShapes) {
  Communicators s = make_setup();
  const int n = nranks();
  Tensor t(DType::F32, rank() == n - 1 ? Shape{3, 2} : Shape{2, 3});
  std::vector<Participant> parts{{0, t, t}};
  CollectiveCall call;
  call.name = "w";
  try {
    s.comm->broadcast(call, parts, 0);
    ADD_FAILURE() << "no error on rank " << rank();
  } catch (const CollectiveMismatch& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(str_cat("rank ", n - 1, " passed f32[3, 2] where rank 0 passed f32[2, 3]")),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("broadcast 'w' on negotiated("), std::string::npos) << msg;
  }
  EXPECT_TRUE(s.gpu->calls().empty()) << "the negotiation stops the call before the data communicator";
}

TEST(NegotiatedCommunicator, ALongIdentityIsShortenedWithAHashSoLongIdentitiesStillDiffer) {
  Communicators s = make_setup();
  const int n = nranks();
  const std::string common(600, 'x');
  const std::string id = common + (rank() == n - 1 ? "/last" : "/first");
  try {
    allreduce(*s.comm, id, 2);
    ADD_FAILURE() << "no error on rank " << rank();
  } catch (const CollectiveMismatch& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(str_cat("ranks disagree: rank ", n - 1, " called allreduce 'xxx")), std::string::npos) << msg;
    EXPECT_NE(msg.find("...#"), std::string::npos) << msg;
  }
  // The same long identity everywhere agrees.
  Tensor r = allreduce(*s.comm, common, 2);
  EXPECT_EQ(r.data<float>()[0], static_cast<float>(n * (n + 1) / 2));
}

}  // namespace
}  // namespace spire::dist
