// MpiCommunicator on 2, 3 and 4 ranks (ctest runs this program under
// mpirun; see tests/CMakeLists.txt), with Spire's ring over MPI
// point-to-point and with MPI's own collectives: every collective with inputs whose
// sums are exact, compared bit for bit with the expected values on every
// rank, for empty, one-element, odd and large tensors; ranks that disagree
// fail on every rank naming the rank; a stalled rank ends every rank's wait
// with an error within its timeout (in a job of its own: MPI cannot withdraw
// the abandoned collective); agreement on lists; the graph op across
// ranks. (main() and the --spire-failure=MODE driver for rank_failures.py:
// rank_failure_modes_mpitest.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "core/ops.h"
#include "core/session.h"
#include "dist/ops/collective_ops.h"
#include "dist/comm/messenger.h"
#include "dist/mpi/mpi_algorithms.h"
#include "dist/mpi/mpi_communicator.h"
#include "dist/mpi/mpi_link_model.h"
#include "dist/mpi/mpi_runtime.h"
#include "dist/mpi/mpi_waits.h"
#include "kernels/functors.h"
#include "tests/dist/mpi/mpi_test_util.h"

namespace spire::dist {
namespace {

int rank() { return MpiRuntime::get().rank(); }
int nranks() { return MpiRuntime::get().size(); }

using testing::call;
using testing::input;

template <typename F>
Tensor make(DType dt, int64_t n, F value) {
  Tensor t(dt, Shape{n});
  visit_dtype(dt, "fill", [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>)
      for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = value(i, zero);
  });
  return t;
}

void expect_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.num_elements(), want.num_elements()) << what;
  if (want.nbytes() == 0) return;  // (empty tensors may have no buffer)
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0) << what << " (rank " << rank() << ")";
}

// Spire's ring with small segments (several per chunk: the pipelined path),
// with the default 256 KiB, and MPI's own collectives.
// (Segments within a host, and across hosts or where the shared-memory
// transport is left out, e.g. between the test hosts; 0: the default.)
struct Backend {
  const char* name;
  MpiAlgorithm algorithm;
  int64_t segment_bytes, wire_segment_bytes;
};
const Backend kBackends[] = {{"ring/4KiB", MpiAlgorithm::kRing, 4096, 4096},
                             {"ring/256KiB", MpiAlgorithm::kRing, 256 << 10, 0},
                             {"recursive-doubling", MpiAlgorithm::kRecursiveDoubling, 256 << 10, 0},
                             {"recursive-doubling/4KiB,12KiB", MpiAlgorithm::kRecursiveDoubling, 4096, 12288},
                             {"halving-doubling", MpiAlgorithm::kHalvingDoubling, 256 << 10, 0},
                             {"halving-doubling/4KiB,12KiB", MpiAlgorithm::kHalvingDoubling, 4096, 12288},
                             {"auto", MpiAlgorithm::kAuto, 256 << 10, 0},
                             {"mpi", MpiAlgorithm::kMpi, 256 << 10, 0}};

TEST(MpiCommunicator, EveryCollectiveIsExactOnEveryRank) {
 for (const Backend& be : kBackends) {
  SCOPED_TRACE(be.name);
  MpiCommunicator comm(Device::cpu(), 60, be.algorithm, be.segment_bytes, be.wire_segment_bytes);
  const int n = nranks(), r = rank();
  ASSERT_EQ(comm.size(), n);
  ASSERT_EQ(comm.rank(), r);
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{(1 << 18) + 3}}) {
      const std::string what = str_cat(dtype_name(dt), " x ", count);
      const int64_t tri = int64_t{n} * (n + 1) / 2;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
        std::vector<Participant> parts{{0, input(dt, count, r), Tensor(dt, Shape{count})}};
        comm.allreduce(call("allreduce"), parts, op);
        Tensor want = make(dt, count, [&](int64_t i, auto zero) {
          using T = decltype(zero);
          const T base = static_cast<T>(i % 13 + 1);
          switch (op) {
            case ReduceOp::kSum: return static_cast<T>(tri * (i % 13 + 1));
            case ReduceOp::kMean: return static_cast<T>(static_cast<T>(tri * (i % 13 + 1)) / static_cast<T>(n));
            case ReduceOp::kMax: return static_cast<T>(n * base);
            case ReduceOp::kMin: return base;
          }
          return base;
        });
        expect_bits(parts[0].output, want, what + " allreduce " + reduce_op_name(op));
        // Out of place, the input is read where it lies and left as it was.
        expect_bits(parts[0].input, input(dt, count, r), what + " allreduce's input " + reduce_op_name(op));
      }
      // In place.
      std::vector<Participant> inplace{{0, input(dt, count, r), Tensor()}};
      inplace[0].output = inplace[0].input;
      comm.allreduce(call("allreduce_in_place"), inplace, ReduceOp::kSum);
      expect_bits(inplace[0].output, make(dt, count, [&](int64_t i, auto zero) {
                    return static_cast<decltype(zero)>(tri * (i % 13 + 1));
                  }), what + " in place");
      // Broadcast from the last rank.
      std::vector<Participant> b{{0, input(dt, count, r), Tensor(dt, Shape{count})}};
      comm.broadcast(call("broadcast"), b, n - 1);
      expect_bits(b[0].output, input(dt, count, n - 1), what + " broadcast");
      // Allgather: block q is rank q's input.
      std::vector<Participant> g{{0, input(dt, count, r), Tensor(dt, Shape{count * n})}};
      comm.allgather(call("allgather"), g);
      Tensor gw(dt, Shape{count * n});
      for (int q = 0; q < n; ++q) {
        Tensor in = input(dt, count, q);
        if (in.nbytes())
          std::memcpy(static_cast<char*>(gw.raw_data()) + q * in.nbytes(), in.raw_data(), in.nbytes());
      }
      expect_bits(g[0].output, gw, what + " allgather");
      // Reduce-scatter of count * n elements: rank r gets block r of the sum.
      std::vector<Participant> rs{{0, input(dt, count * n, r), Tensor(dt, Shape{count})}};
      comm.reduce_scatter(call("reduce_scatter"), rs, ReduceOp::kSum);
      expect_bits(rs[0].output, make(dt, count, [&](int64_t i, auto zero) {
                    return static_cast<decltype(zero)>(tri * ((r * count + i) % 13 + 1));
                  }), what + " reduce_scatter");
    }
  }
  std::vector<Participant> none;
  comm.barrier(call("barrier"), none);
 }
}

// Segments: within a host where shared memory carries them, the wire's
// otherwise; the ring takes the wire's when any of its links crosses
// hosts; both ends of every link agree.
TEST(MpiCommunicator, SegmentsFollowTheHostsAndTheTransport) {
  const int64_t S = 256 << 10, W = 63 << 10;
  const std::vector<int> two_hosts{0, 0, 2, 2, 2};
  SegmentPlan p0 = plan_segments(two_hosts, true, 0, S, W), p3 = plan_segments(two_hosts, true, 3, S, W);
  EXPECT_EQ(p0.to_peer, (std::vector<int64_t>{S, S, W, W, W}));
  EXPECT_EQ(p3.to_peer, (std::vector<int64_t>{W, W, S, S, S}));
  EXPECT_EQ(p0.ring, W);
  EXPECT_EQ(p3.ring, W);
  for (int a = 0; a < 5; ++a)
    for (int b = 0; b < 5; ++b)
      EXPECT_EQ(plan_segments(two_hosts, true, a, S, W).to_peer[static_cast<size_t>(b)],
                plan_segments(two_hosts, true, b, S, W).to_peer[static_cast<size_t>(a)])
          << a << " <-> " << b;
  const std::vector<int> one_host{0, 0, 0};
  EXPECT_EQ(plan_segments(one_host, true, 1, S, W).to_peer, (std::vector<int64_t>{S, S, S}));
  EXPECT_EQ(plan_segments(one_host, true, 1, S, W).ring, S);
  // No shared-memory transport (--mca btl tcp,self): the wire everywhere.
  EXPECT_EQ(plan_segments(one_host, false, 1, S, W).to_peer, (std::vector<int64_t>{W, W, W}));
  EXPECT_EQ(plan_segments(one_host, false, 1, S, W).ring, W);
  EXPECT_THROW(plan_segments(one_host, true, 3, S, W), Error);
  EXPECT_THROW(plan_segments(one_host, true, 0, S, 0), Error);

  // This job's communicator: its runtime's hosts and transport, and a
  // wire segment that travels under TCP's eager limit by default.
  MpiRuntime& rt = MpiRuntime::get();
  MpiCommunicator comm(Device::cpu(), 60, MpiAlgorithm::kRing, S);
  const int64_t wire = rt.tcp_eager_limit() > 0 ? rt.tcp_eager_limit() - 1024 : (64 << 10) - 1024;
  for (int r = 0; r < nranks(); ++r)
    EXPECT_EQ(comm.segment_bytes_to(r),
              rt.shared_memory_transport() && rt.host_of(r) == rt.host_of(rank()) ? S : wire)
        << "rank " << r;
  EXPECT_THROW(comm.segment_bytes_to(nranks()), Error);
  EXPECT_THROW(MpiCommunicator(Device::cpu(), 60, MpiAlgorithm::kRing, S, -1), Error);
}

TEST(MpiCommunicator, TheFoldPairsRanksInsideHosts) {
  // One host: ranks 2i+1 fold into 2i, the rest take part in order.
  FoldPlan one = plan_fold({0, 0, 0, 0, 0, 0});
  EXPECT_EQ(one.ranks, (std::vector<int>{0, 2, 4, 5}));
  EXPECT_EQ(one.partner, (std::vector<int>{1, 0, 3, 2, -1, -1}));
  EXPECT_EQ(plan_fold({7, 7, 7}).ranks, (std::vector<int>{0, 2}));
  // A power of two: no fold.
  EXPECT_EQ(plan_fold({0, 0, 2, 2}).ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(plan_fold({0, 0, 2, 2}).partner, (std::vector<int>(4, -1)));
  EXPECT_EQ(plan_fold({0}).ranks, (std::vector<int>{0}));
  // 2 hosts x 3 ranks, placed host by host: a pair inside each host; the ranks left host by host.
  FoldPlan blocks = plan_fold({0, 0, 0, 3, 3, 3});
  EXPECT_EQ(blocks.partner, (std::vector<int>{1, 0, -1, 4, 3, -1}));
  EXPECT_EQ(blocks.ranks, (std::vector<int>{0, 2, 3, 5}));
  // Placed round-robin: the pairs are still inside the hosts, and distance 1 too (0-4, 1-5).
  FoldPlan rr = plan_fold({0, 1, 0, 1, 0, 1});
  EXPECT_EQ(rr.partner, (std::vector<int>{2, 3, 0, 1, -1, -1}));
  EXPECT_EQ(rr.ranks, (std::vector<int>{0, 4, 1, 5}));
  // 4 + 2 ranks: both pairs from the larger host (2 + 2 take part), not one from each (3 + 1).
  FoldPlan big_small = plan_fold({0, 0, 0, 0, 4, 4});
  EXPECT_EQ(big_small.partner, (std::vector<int>{1, 0, 3, 2, -1, -1}));
  EXPECT_EQ(big_small.ranks, (std::vector<int>{0, 2, 4, 5}));
  // One rank per host: pairs across hosts, in order; a host's ids need not be its lowest rank.
  FoldPlan alone = plan_fold({5, 9, 1});
  EXPECT_EQ(alone.partner, (std::vector<int>{1, 0, -1}));
  EXPECT_EQ(alone.ranks, (std::vector<int>{0, 2}));
  // Inside a host first, then the ranks left across: host 0 = {0, 2, 4}.
  FoldPlan mixed = plan_fold({0, 1, 0, 3, 0, 5, 6});
  EXPECT_EQ(mixed.partner, (std::vector<int>{2, 4, 0, 5, 1, 3, -1}));
  EXPECT_EQ(mixed.ranks, (std::vector<int>{0, 1, 3, 6}));
  // Every rank is in one pair or takes part (the lower rank of a pair, or an unpaired one), for every n up
  // to 40 on hosts placed in blocks (per >= 1) and round-robin (per < 0: -per hosts).
  for (int n = 1; n <= 40; ++n)
    for (int per : {1, 2, 3, 5, 8, -2, -3}) {
      std::vector<int> hosts;
      for (int r = 0; r < n; ++r) hosts.push_back(per > 0 ? r / per : 100 - r % -per);
      const FoldPlan plan = plan_fold(hosts);
      int p = 1;
      while (p * 2 <= n) p *= 2;
      ASSERT_EQ(static_cast<int>(plan.ranks.size()), p) << n << " ranks, " << per << " per host";
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int r : plan.ranks) {
        ASSERT_TRUE(r >= 0 && r < n) << r;
        EXPECT_EQ(seen[static_cast<size_t>(r)]++, 0) << "rank " << r << " listed twice";
        const int q = plan.partner[static_cast<size_t>(r)];
        EXPECT_TRUE(q < 0 || q > r) << "rank " << r << " folds into " << q << " yet takes part";
      }
      int folded = 0;
      for (int r = 0; r < n; ++r) {
        const int q = plan.partner[static_cast<size_t>(r)];
        if (q < 0) {
          EXPECT_EQ(seen[static_cast<size_t>(r)], 1) << "rank " << r << " neither folds nor takes part";
          continue;
        }
        ASSERT_EQ(plan.partner[static_cast<size_t>(q)], r);
        if (q < r) ++folded;
        // Inside a host wherever the hosts have pairs enough (the sum of their counts / 2).
        std::map<int, int> count;
        for (int x : hosts) ++count[x];
        int inside = 0;
        for (const auto& [host, c] : count) inside += c / 2;
        if (inside >= n - p) EXPECT_EQ(hosts[r], hosts[q]) << n << " " << per;
      }
      EXPECT_EQ(folded, n - p);
    }
  EXPECT_THROW(plan_fold({}), Error);
}

TEST(MpiCommunicator, TheRingIsBitIdenticalOnEveryRankAndRun) {
 for (MpiAlgorithm algorithm :
      {MpiAlgorithm::kRing, MpiAlgorithm::kRecursiveDoubling, MpiAlgorithm::kHalvingDoubling}) {
  SCOPED_TRACE(mpi_algorithm_name(algorithm));
  // Inputs with rounding (not exact sums): every rank ends with the same
  // bits, and a second run repeats them.
  MpiCommunicator comm(Device::cpu(), 60, algorithm, 4096);
  const int64_t count = 100003;
  Tensor in(DType::F32, Shape{count});
  for (int64_t i = 0; i < count; ++i) in.data<float>()[i] = 1.0f / static_cast<float>(i + 3 + 7 * rank());
  std::vector<Participant> a{{0, in, Tensor(DType::F32, Shape{count})}};
  std::vector<Participant> b{{0, in, Tensor(DType::F32, Shape{count})}};
  comm.allreduce(call("a"), a, ReduceOp::kSum);
  comm.allreduce(call("b"), b, ReduceOp::kSum);
  expect_bits(b[0].output, a[0].output, "second run");
  // Rank 0's result, broadcast, equals every rank's.
  std::vector<Participant> c{{0, a[0].output, Tensor(DType::F32, Shape{count})}};
  comm.broadcast(call("c"), c, 0);
  expect_bits(c[0].output, a[0].output, "rank 0's result");
 }
}

TEST(MpiCommunicator, RanksThatDisagreeFailOnEveryRankNamingTheRank) {
  MpiCommunicator comm;
  const int r = rank();
  // Rank 1 passes 5 elements, the others 4.
  std::vector<Participant> p{{0, input(DType::F32, r == 1 ? 5 : 4, r), Tensor(DType::F32, Shape{r == 1 ? 5 : 4})}};
  try {
    comm.allreduce(call("grads/fc0"), p, ReduceOp::kSum);
    ADD_FAILURE() << "no error on rank " << r;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("allreduce 'grads/fc0'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ranks disagree: rank 1 passed 5 elements where rank 0 passed 4"),
              std::string::npos) << msg;
  }
  // A different dtype, and a different collective: the same, and the communicator still works.
  std::vector<Participant> q{{0, input(r == nranks() - 1 ? DType::F64 : DType::F32, 3, r),
                              Tensor(r == nranks() - 1 ? DType::F64 : DType::F32, Shape{3})}};
  try {
    comm.allreduce(call("x"), q, ReduceOp::kSum);
    ADD_FAILURE() << "no error on rank " << r;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(str_cat("rank ", nranks() - 1, " passed f64 where rank 0 passed f32")),
              std::string::npos) << e.what();
  }
  std::vector<Participant> ok{{0, input(DType::I64, 3, r), Tensor(DType::I64, Shape{3})}};
  comm.allreduce(call("ok"), ok, ReduceOp::kMax);
  EXPECT_EQ(ok[0].output.data<int64_t>()[2], 3 * nranks());
}

TEST(MpiCommunicator, MpiErrorsOnSpiresCommunicatorsAreSpireErrorsNamingTheRank) {
  // MPI's default handler (MPI_ERRORS_ARE_FATAL) would abort the whole job here; Spire's
  // communicators (a communicator's own, the runtime's control and MPI_COMM_WORLD, which
  // Spire initialized) return the error, and check_mpi names the call and the rank.
  MpiRuntime::get();
  const MPI_Comm comm = dist::mpi_detail::duplicate_world(10, "test");
  int value = rank();
  const int bad_rank = nranks() + 3;
  for (MPI_Comm c : {comm, MPI_COMM_WORLD}) {
    try {
      dist::mpi_detail::check_mpi(MPI_Send(&value, 1, MPI_INT, bad_rank, 0, c), "MPI_Send");
      ADD_FAILURE() << "no error on rank " << rank();
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(str_cat("MPI: MPI_Send failed on rank ", rank(), ": ")), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank"), msg.rfind("rank")) << "MPI's own text follows: " << msg;
    }
  }
  // The communicator still works after the error.
  int sum = 0;
  dist::mpi_detail::check_mpi(MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, comm), "MPI_Allreduce");
  EXPECT_EQ(sum, nranks() * (nranks() - 1) / 2);
  MPI_Comm freed = comm;
  MPI_Comm_free(&freed);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

TEST(MpiMessenger, AMessageOfMoreThan2GiBArrivesWhole) {
  // MPI's counts are ints: a message of 2^31 bytes or more travels as one element of a
  // derived type (ByteType) and is sized on arrival with MPI_Get_elements_x.
  if (kSanitized) GTEST_SKIP() << "2 GiB buffers on each of two ranks under a sanitizer's shadow memory";
  if (nranks() != 2) GTEST_SKIP() << "one pair of ranks is enough (2 GiB a message)";
  std::shared_ptr<Messenger> m = make_mpi_messenger(120);
  const size_t n = (size_t{1} << 31) + 4099;
  // Every byte differs from its neighbours and from the bytes 1 GiB (a block) away.
  auto byte_at = [](size_t i) { return static_cast<char>(i + (i >> 8) + (i >> 30) * 77); };
  if (rank() == 0) {
    std::vector<char> big(n);
    for (size_t i = 0; i < n; ++i) big[i] = byte_at(i);
    m->send(1, 5, std::move(big));
    m->send(1, 5, std::vector<char>{1, 2, 3});  // a small one after it, in order
  } else if (rank() == 1) {
    std::optional<Message> got = m->receive(0, 5, 120);
    ASSERT_TRUE(got.has_value());
    ASSERT_EQ(got->data.size(), n);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += got->data[i] != byte_at(i);
    EXPECT_EQ(wrong, 0u);
    got.reset();
    std::optional<Message> small = m->receive(0, 5, 60);
    ASSERT_TRUE(small.has_value());
    EXPECT_EQ(small->data, (std::vector<char>{1, 2, 3}));
  }
  testing::gather_from_ranks(0);  // (every rank waits for the transfer to end)
}

TEST(MpiCommunicator, CollectivesOfTheSameSizeButDifferentIdentityOrShapeFailEverywhere) {
  MpiCommunicator comm;
  const int r = rank(), last = nranks() - 1;
  // The last rank issues a different collective of the same kind, dtype and size: without the
  // identity in the signature the two would pair and add unrelated tensors.
  std::vector<Participant> p{{0, input(DType::F32, 6, r), Tensor(DType::F32, Shape{6})}};
  try {
    comm.allreduce(call(r == last ? "bn/sync_moments" : "grad_bucket_0"), p, ReduceOp::kSum);
    ADD_FAILURE() << "no error on rank " << r;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(str_cat("ranks disagree: rank ", last, " called allreduce 'bn/sync_moments' "
                               "where rank 0 called allreduce 'grad_bucket_0'")),
              std::string::npos) << msg;
  }
  // The identity, not the name, when one is given.
  CollectiveCall named = call(str_cat("node_on_rank_", r));
  named.identity = "instance_7";
  comm.allreduce(named, p, ReduceOp::kSum);
  // Same identity and count, another shape.
  std::vector<Participant> q{{0, input(DType::F32, 6, r).reshaped(r == last ? Shape{3, 2} : Shape{2, 3}),
                              Tensor(DType::F32, Shape{6})}};
  try {
    comm.allreduce(call("w"), q, ReduceOp::kSum);
    ADD_FAILURE() << "no error on rank " << r;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(str_cat("rank ", last, " passed f32[3, 2] where rank 0 passed f32[2, 3]")),
              std::string::npos) << e.what();
  }
  std::vector<Participant> ok{{0, input(DType::I64, 3, r), Tensor(DType::I64, Shape{3})}};
  comm.allreduce(call("ok"), ok, ReduceOp::kMax);
  EXPECT_EQ(ok[0].output.data<int64_t>()[2], 3 * nranks());
}

TEST(MpiCommunicator, AStalledRankEndsEveryRanksWaitWithinTheTimeout) {
  // Rank 0 waits 1 s, the others 4 s; rank 0 never joins the second
  // collective, so every rank ends with an error, none hangs.
  MpiCommunicator comm(Device::cpu(), rank() == 0 ? 1.0 : 4.0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Participant> p{{0, input(DType::F32, 8, rank()), Tensor(DType::F32, Shape{8})}};
  if (rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // stalls
  bool failed = false;
  try {
    comm.allreduce(call("stalled"), p, ReduceOp::kSum);
    comm.allreduce(call("after"), p, ReduceOp::kSum);
  } catch (const Error& e) {
    failed = true;
    // Rank 0 names the ranks that did not come; they hear the same verdict.
    const std::string who = nranks() == 2 ? "rank 1 did not arrive" : "ranks 1, 2";
    EXPECT_NE(std::string(e.what()).find(who), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(str_cat("rank ", rank(), " of ")), std::string::npos) << e.what();
  }
  EXPECT_TRUE(failed) << "rank " << rank();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  // The broken communicator says so at once.
  try {
    comm.allreduce(call("later"), p, ReduceOp::kSum);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unusable"), std::string::npos) << e.what();
  }
}

TEST(MpiCommunicator, RanksAgreeOnListsOrFailEverywhereNamingTheFirstDifference) {
  MpiCommunicator comm;
  const std::vector<std::string> list{"AllReduce/bucket0: f32[120]", "AllReduce/bucket1: f32[7]"};
  comm.agree("the step's collectives", list);  // the same everywhere: passes
  comm.agree("nothing", {});
  // The last rank has one more item; then a different second item.
  std::vector<std::string> longer = list;
  if (rank() == nranks() - 1) longer.push_back("AllReduce/extra: f64[3]");
  try {
    comm.agree("the step's collectives", longer);
    ADD_FAILURE() << "no error on rank " << rank();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(str_cat("the step's collectives on mpi-auto(rank ", rank())), std::string::npos) << msg;
    EXPECT_NE(msg.find(str_cat("rank ", nranks() - 1, " has 3 items where rank 0 has 2; the first difference is "
                               "item 2: rank ", nranks() - 1, " has 'AllReduce/extra: f64[3]' where rank 0 has nothing")),
              std::string::npos) << msg;
  }
  std::vector<std::string> other = list;
  if (rank() == 1) other[1] = "AllReduce/bucket1: f64[7]";
  try {
    comm.agree("the step's collectives", other);
    ADD_FAILURE() << "no error on rank " << rank();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("item 1: rank 1 has 'AllReduce/bucket1: f64[7]' where rank 0 has "
                                         "'AllReduce/bucket1: f32[7]'"),
              std::string::npos) << e.what();
  }
  // A mismatch leaves the communicator usable.
  std::vector<Participant> ok{{0, input(DType::I32, 3, rank()), Tensor(DType::I32, Shape{3})}};
  comm.allreduce(call("ok"), ok, ReduceOp::kSum);
  EXPECT_EQ(ok[0].output.data<int32_t>()[2], 3 * nranks() * (nranks() + 1) / 2);
}

TEST(MpiCommunicator, HalfPrecisionAllreduceIsExactOnSmallIntegers) {
  // (r % 2 + 1) * (i % 7 + 1): every partial sum is an integer of at most
  // 1.5 n * 7, below 256 (exact in f16 and bf16) up to 24 ranks.
  const int n = nranks(), r = rank();
  const int64_t count = 1001;
  for (DType dt : {DType::F16, DType::BF16}) {
    const bool bf = dt == DType::BF16;
    auto bits = [&](float f) { return bf ? functors::float_to_bf16_bits(f) : functors::float_to_half_bits(f); };
    for (MpiAlgorithm a : {MpiAlgorithm::kRing, MpiAlgorithm::kRecursiveDoubling, MpiAlgorithm::kHalvingDoubling,
                           MpiAlgorithm::kAuto}) {
      SCOPED_TRACE(str_cat(dtype_name(dt), " ", mpi_algorithm_name(a)));
      MpiCommunicator comm(Device::cpu(), 60, a, 256);
      Tensor in(dt, Shape{count}), out(dt, Shape{count});
      auto* p = static_cast<uint16_t*>(in.raw_data());
      for (int64_t i = 0; i < count; ++i) p[i] = bits(static_cast<float>((r % 2 + 1) * (i % 7 + 1)));
      std::vector<Participant> parts{{0, in, out}};
      comm.allreduce(call("half"), parts, ReduceOp::kSum);
      const auto* q = static_cast<const uint16_t*>(out.raw_data());
      const int64_t weight = n + n / 2;  // the sum over ranks of r % 2 + 1
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(q[i], bits(static_cast<float>(weight * (i % 7 + 1)))) << "element " << i;
    }
    // MPI's own collectives cannot reduce 16-bit floats: a clear error.
    MpiCommunicator mpi(Device::cpu(), 60, MpiAlgorithm::kMpi);
    std::vector<Participant> parts{{0, Tensor(dt, Shape{4}), Tensor(dt, Shape{4})}};
    std::memset(parts[0].input.raw_data(), 0, 8);
    try {
      mpi.allreduce(call("half"), parts, ReduceOp::kSum);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot reduce"), std::string::npos) << e.what();
    }
  }
}

TEST(MpiCommunicator, AutoChoosesByTheMeasuredLinkModel) {
  // The model alone: latency-bound sizes go to recursive doubling.
  MpiLinkModel m;
  m.alpha = 2e-6, m.beta = 1e-10, m.gamma = 2e-10;  // 2 us, 10 GB/s, 5 GB/s
  EXPECT_EQ(m.choose(4, 64), MpiAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(m.choose(4, 64 << 20), MpiAlgorithm::kRing);
  EXPECT_EQ(m.choose(3, 64 << 20), MpiAlgorithm::kRing);
  // Two ranks: the same bandwidth term; the ring reduces half as much, recursive doubling sends one message.
  EXPECT_EQ(m.choose(2, 64), MpiAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(m.choose(2, 1 << 20), MpiAlgorithm::kRing);
  EXPECT_DOUBLE_EQ(m.ring_allreduce_seconds(4, 4000), 6 * (2e-6 + 1000 * 1e-10));
  EXPECT_DOUBLE_EQ(m.halving_doubling_seconds(4, 4000), 4 * 2e-6 + 1.5 * 4000 * 1e-10 + 0.75 * 4000 * 2e-10);
  // Slow, latency-heavy links (TCP): halving-doubling's fewer steps win at mid sizes on 4 ranks.
  MpiLinkModel tcp;
  tcp.alpha = 60e-6, tcp.beta = 4.5e-10, tcp.gamma = 2.5e-11;
  EXPECT_EQ(tcp.choose(4, 1 << 20), MpiAlgorithm::kHalvingDoubling);
  EXPECT_EQ(tcp.choose(4, 64), MpiAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(tcp.choose(4, int64_t{1} << 30), MpiAlgorithm::kRing);
  EXPECT_DOUBLE_EQ(m.recursive_doubling_seconds(4, 4000), 2 * (2e-6 + 4000 * 1e-10) + 2 * 4000 * 2e-10);
  EXPECT_DOUBLE_EQ(m.recursive_doubling_seconds(3, 4000), 3 * (2e-6 + 4000 * 1e-10) + 2 * 4000 * 2e-10);
  // Hosts joined by a slow wire (1 Gbit/s), fast links inside them: on 2
  // hosts x 2 ranks halving-doubling's largest exchanges stay inside a host
  // (m bytes leave each host; the ring sends 1.5 m through its link), so it
  // wins at 16 MiB, where with one link everywhere the ring wins.
  MpiLinkModel wire;
  wire.alpha = 50e-6, wire.beta = 8e-9, wire.gamma = 1e-10;
  const int64_t big = 16 << 20;
  const double mb = static_cast<double>(big);
  EXPECT_EQ(wire.choose(4, big), MpiAlgorithm::kRing);
  wire.host_of = {0, 0, 2, 2};
  EXPECT_EQ(wire.choose(4, big), MpiAlgorithm::kRing) << "no link inside the hosts measured: the wire's everywhere";
  wire.host_alpha = 2e-6, wire.host_beta = 1e-10;
  EXPECT_EQ(wire.choose(4, big), MpiAlgorithm::kHalvingDoubling);
  // The ring: each step one message leaves each host (1 -> 2, 3 -> 0), the slowest.
  EXPECT_DOUBLE_EQ(wire.ring_allreduce_seconds(4, big), 6 * (50e-6 + mb / 4 * 8e-9));
  // Halving-doubling: distance 1 inside the hosts, distance 2 across with two messages through each host's link.
  EXPECT_DOUBLE_EQ(wire.halving_doubling_seconds(4, big),
                   (2e-6 + mb / 2 * 1e-10) + mb / 2 * 1e-10 + (50e-6 + mb / 4 * 8e-9 * 2) + mb / 4 * 1e-10 +
                       (50e-6 + mb / 4 * 8e-9 * 2) + (2e-6 + mb / 2 * 1e-10));
  EXPECT_DOUBLE_EQ(wire.recursive_doubling_seconds(4, big),
                   (2e-6 + mb * 1e-10) + (50e-6 + mb * 8e-9 * 2) + 2 * mb * 1e-10);
  // 3 ranks on 2 hosts: rank 1 folds into rank 0 inside host 0 (there and back), then 0 and 2 exchange across.
  wire.host_of = {0, 0, 2};
  EXPECT_DOUBLE_EQ(wire.recursive_doubling_seconds(3, big),
                   2 * (2e-6 + mb * 1e-10) + mb * 1e-10 + (50e-6 + mb * 8e-9) + mb * 1e-10);
  // The fold across hosts (rank 1 alone on host 1), then 0 and 2 across too; halving-doubling's halves.
  wire.host_of = {0, 1, 2};
  EXPECT_DOUBLE_EQ(wire.recursive_doubling_seconds(3, big),
                   2 * (50e-6 + mb * 8e-9) + mb * 1e-10 + (50e-6 + mb * 8e-9) + mb * 1e-10);
  wire.host_of = {0, 0, 2};
  EXPECT_DOUBLE_EQ(wire.halving_doubling_seconds(3, big), 2 * (2e-6 + mb * 1e-10) + mb * 1e-10 +
                                                              (50e-6 + mb / 2 * 8e-9) + mb / 2 * 1e-10 +
                                                              (50e-6 + mb / 2 * 8e-9));
  // 7 ranks, host 0 with ranks 0, 2, 4, the others alone: 2 folds into 0 inside host 0, then the ranks
  // left fold across in host order (4 into 1, 5 into 3), one message through each host's link; then
  // 0, 1, 3, 6 exchange, one message across each way per step.
  wire.host_of = {0, 1, 0, 3, 0, 5, 6};
  EXPECT_DOUBLE_EQ(wire.recursive_doubling_seconds(7, big),
                   2 * (50e-6 + mb * 8e-9) + mb * 1e-10 + 2 * ((50e-6 + mb * 8e-9) + mb * 1e-10));
  // 2 hosts x 3 ranks: 1 folds into 0 and 4 into 3 inside the hosts; 0-2 and 3-5 exchange inside, then
  // 0-3 and 2-5 across, two messages through each host's link.
  wire.host_of = {0, 0, 0, 3, 3, 3};
  EXPECT_DOUBLE_EQ(wire.recursive_doubling_seconds(6, big), 2 * (2e-6 + mb * 1e-10) + mb * 1e-10 +
                                                              (2e-6 + mb * 1e-10) + mb * 1e-10 +
                                                              (50e-6 + mb * 8e-9 * 2) + mb * 1e-10);
  // (The messages reaching a host share its link too, but in these algorithms they are as many as those
  // leaving it: exchanges go both ways, a ring's crossings into a host match those out of it, and a fold
  // across hosts takes at most one rank of a host.)
  // Ranks placed round-robin (0 and 2 on one host): every ring message leaves its host, two through each link.
  wire.host_of = {0, 1, 0, 1};
  EXPECT_DOUBLE_EQ(wire.ring_allreduce_seconds(4, big), 6 * (50e-6 + mb / 4 * 8e-9 * 2));
  wire.host_of = {0, 0, 2};
  EXPECT_THROW(wire.choose(4, 64), Error);
  // Measured at the first allreduce, the same on every rank; the choice follows it.
  MpiCommunicator comm(Device::cpu(), 60, MpiAlgorithm::kAuto);
  EXPECT_FALSE(comm.link_model().measured);
  std::vector<Participant> small{{0, input(DType::F32, 4, rank()), Tensor(DType::F32, Shape{4})}};
  comm.allreduce(call("small"), small, ReduceOp::kSum);
  const MpiLinkModel got = comm.link_model();
  ASSERT_TRUE(got.measured);
  EXPECT_GT(got.alpha, 0);
  EXPECT_GT(got.beta, 0);
  EXPECT_GT(got.gamma, 0);
  EXPECT_EQ(comm.last_allreduce_algorithm(), got.choose(nranks(), 16));
  std::vector<Participant> large{{0, input(DType::F32, 1 << 22, rank()), Tensor(DType::F32, Shape{1 << 22})}};
  comm.allreduce(call("large"), large, ReduceOp::kSum);
  EXPECT_EQ(comm.last_allreduce_algorithm(), got.choose(nranks(), int64_t{4} << 22));
  Tensor mine(DType::F64, Shape{3}), all(DType::F64, Shape{3 * nranks()});
  mine.data<double>()[0] = got.alpha, mine.data<double>()[1] = got.beta, mine.data<double>()[2] = got.host_beta;
  std::vector<Participant> g{{0, mine, all}};
  comm.allgather(call("models"), g);
  for (int r = 1; r < nranks(); ++r) {
    EXPECT_EQ(all.data<double>()[3 * r], got.alpha) << "rank " << r;
    EXPECT_EQ(all.data<double>()[3 * r + 1], got.beta) << "rank " << r;
    EXPECT_EQ(all.data<double>()[3 * r + 2], got.host_beta) << "rank " << r;
  }
  // Across hosts (scripts/test_hosts.sh) the model knows them, and the link
  // inside rank 0's host where it has a second rank; on one host, one link.
  const std::vector<int>& hosts = MpiRuntime::get().hosts();
  const bool several = std::any_of(hosts.begin(), hosts.end(), [&](int h) { return h != hosts[0]; });
  // (scripts/test_hosts.sh says how many hosts its runs span: a run that saw one would test nothing here.)
  if (const char* want = std::getenv("SPIRE_TEST_EXPECT_HOSTS")) {
    const std::set<int> distinct(hosts.begin(), hosts.end());
    EXPECT_EQ(static_cast<int>(distinct.size()), std::atoi(want)) << "hosts seen by MpiRuntime";
  }
  const bool mate = std::count(hosts.begin(), hosts.end(), hosts[0]) > 1;
  if (several) {
    EXPECT_EQ(got.host_of, hosts);
    EXPECT_EQ(got.host_beta > 0, mate);
    EXPECT_EQ(got.host_alpha > 0, mate);
    EXPECT_NE(hosts[static_cast<size_t>(got.link_peer)], hosts[0]);
    EXPECT_GE(got.alpha, got.link_alpha);
  } else {
    EXPECT_TRUE(got.host_of.empty());
    EXPECT_EQ(got.host_beta, 0);
    EXPECT_EQ(got.link_peer, nranks() - 1);
    // One link: a step's latency is the larger of the ping-pong's and a collective step's.
    EXPECT_NEAR(got.alpha, std::max(got.link_alpha, got.step_alpha), 1e-12 * got.alpha);
  }
}

TEST(MpiCommunicator, TheEnvironmentChoosesTheAlgorithm) {
  ::unsetenv("SPIRE_MPI_ALGORITHM");
  EXPECT_EQ(make_mpi_communicator()->algorithm(), MpiAlgorithm::kAuto);
  ::setenv("SPIRE_MPI_ALGORITHM", "recursive-doubling", 1);
  EXPECT_EQ(make_mpi_communicator()->algorithm(), MpiAlgorithm::kRecursiveDoubling);
  ::setenv("SPIRE_MPI_ALGORITHM", "ring", 1);
  EXPECT_EQ(make_mpi_communicator()->algorithm(), MpiAlgorithm::kRing);
  ::setenv("SPIRE_MPI_ALGORITHM", "halving-doubling", 1);
  EXPECT_EQ(make_mpi_communicator()->algorithm(), MpiAlgorithm::kHalvingDoubling);
  ::setenv("SPIRE_MPI_ALGORITHM", "mpi", 1);
  auto comm = make_mpi_communicator();
  EXPECT_EQ(comm->algorithm(), MpiAlgorithm::kMpi);
  EXPECT_NE(comm->name().find("mpi("), std::string::npos) << comm->name();
  ::setenv("SPIRE_MPI_ALGORITHM", "fastest", 1);
  try {
    make_mpi_communicator();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SPIRE_MPI_ALGORITHM='fastest'"), std::string::npos) << e.what();
  }
  ::unsetenv("SPIRE_MPI_ALGORITHM");
  // A trainer's backend by name (the same names; "" reads the variable).
  auto algo = [](const std::string& b) {
    auto c = std::dynamic_pointer_cast<MpiCommunicator>(make_process_communicator(b, Device::cpu()));
    return c ? c->algorithm() : MpiAlgorithm::kMpi;
  };
  EXPECT_EQ(algo(""), MpiAlgorithm::kAuto);
  EXPECT_EQ(algo("ring"), MpiAlgorithm::kRing);
  EXPECT_EQ(algo("rd"), MpiAlgorithm::kRecursiveDoubling);
  ::setenv("SPIRE_MPI_ALGORITHM", "recursive-doubling", 1);
  EXPECT_EQ(algo(""), MpiAlgorithm::kRecursiveDoubling);
  ::unsetenv("SPIRE_MPI_ALGORITHM");
  try {
    make_process_communicator("gloo", Device::cpu());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backend 'gloo'"), std::string::npos) << e.what();
  }
  // NCCL needs a GPU (and an NCCL build): a clear error here either way.
  try {
    make_process_communicator("nccl", Device::cpu());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backend 'nccl'"), std::string::npos) << e.what();
  }
}

TEST(MpiCommunicator, GraphAllReduceAcrossRanks) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {6}, "x");
  CollectiveOptions o;
  o.communicator = "world";
  o.group_size = nranks();
  Output y = all_reduce({x}, ReduceOp::kSum, o)[0];
  Session s(g);
  s.set_resource<Communicator>("world", std::make_shared<MpiCommunicator>());
  const int64_t tri = int64_t{nranks()} * (nranks() + 1) / 2;
  for (int rep = 0; rep < 5; ++rep) {
    Tensor out = s.run({y}, {{x, input(DType::F64, 6, rank())}})[0];
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out.data<double>()[i], static_cast<double>(tri * (i % 13 + 1)));
  }
}

}  // namespace
}  // namespace spire::dist
