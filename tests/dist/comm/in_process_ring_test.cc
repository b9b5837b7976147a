// Spire's in-process ring, used directly: every collective on 1 to 8 CPU
// devices, sizes 0, 1, N-1, N+1 and 10^6+3, f32/f64/i32/i64, inputs whose
// sums are exact in floating point compared bit for bit, every reduction,
// one thread per participant and group calls, small segments (many
// pipelined units), bit-identical results on every participant and from
// run to run for inexact inputs, participants that disagree, cancellation
// and timeouts. Also run under ThreadSanitizer in CI.
#include <cstring>
#include <thread>

#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using dist::CollectiveCall;
using dist::InProcessRing;
using dist::Participant;
using dist::ReduceOp;
using dist::RingOptions;

std::vector<Device> cpu_devices(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(Device::cpu(i));
  return d;
}

// Input element e of participant p: small integers (|x| <= 1000), so any
// sum of up to 8 of them is exact in f32 and every integer type.
double exact_value(int p, int64_t e) { return static_cast<double>(((e * 37 + p * 101 + 7) % 2001) - 1000); }

Tensor exact_input(DType dt, int p, int64_t count, const Device& d) {
  Tensor t(dt, Shape{count});
  visit_dtype(dt, "exact_input", [&](auto zero) {
    using T = decltype(zero);
    for (int64_t e = 0; e < count; ++e) t.data<T>()[e] = static_cast<T>(exact_value(p, e));
  });
  return t.to(d);
}

// The expected reduction of element e over n participants, as the ring
// computes it (an exact sum, one division for mean).
Tensor expected_reduce(DType dt, ReduceOp op, int n, int64_t count) {
  Tensor t(dt, Shape{count});
  visit_dtype(dt, "expected", [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>) {
      for (int64_t e = 0; e < count; ++e) {
        double acc = exact_value(0, e);
        for (int p = 1; p < n; ++p) {
          double v = exact_value(p, e);
          if (op == ReduceOp::kSum || op == ReduceOp::kMean) acc += v;
          if (op == ReduceOp::kMax) acc = std::max(acc, v);
          if (op == ReduceOp::kMin) acc = std::min(acc, v);
        }
        T r = static_cast<T>(acc);
        if (op == ReduceOp::kMean && n > 1) r = static_cast<T>(r / static_cast<T>(n));
        t.data<T>()[e] = r;
      }
    }
  });
  return t;
}

::testing::AssertionResult same_bytes(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  if (x.dtype() != y.dtype() || x.shape() != y.shape())
    return ::testing::AssertionFailure() << x.type_string() << " vs " << y.type_string();
  if (x.nbytes() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0) {
    for (int64_t i = 0; i < x.num_elements(); ++i)
      if (x.element_as_double(i) != y.element_as_double(i))
        return ::testing::AssertionFailure() << "element " << i << ": " << x.element_as_double(i)
                                             << " vs " << y.element_as_double(i);
    return ::testing::AssertionFailure() << "bytes differ";
  }
  return ::testing::AssertionSuccess();
}

RunContext bounded(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  RunContext r;
  r.id = 1;
  r.timeout = timeout;
  return r;
}

enum class Mode { kThreads, kGroup };

// Runs `fn(call, parts)` for every participant: one thread each, or one
// group call with all of them.
template <typename Fn>
void run_participants(InProcessRing& ring, Mode mode, std::vector<Participant>& parts, uint64_t key,
                      const RunContext& run, Fn fn) {
  CollectiveCall call;
  call.key = {&ring, 0, key};
  call.name = "test";
  call.run = &run;
  if (mode == Mode::kGroup) {
    fn(call, parts);
    return;
  }
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(parts.size());
  for (size_t i = 0; i < parts.size(); ++i)
    threads.emplace_back([&, i] {
      std::vector<Participant> one{parts[i]};
      try {
        fn(call, one);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      parts[i] = one[0];
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

std::vector<int64_t> sizes_for(int n, bool large) {
  std::vector<int64_t> s{0, 1, n - 1, n + 1, 3 * n + 2, 1000};
  if (large) s.push_back(1000003);
  return s;
}

TEST(InProcessRing, AllReduceIsExactAndIdenticalOnEveryParticipant) {
  uint64_t key = 0;
  for (int n = 1; n <= 8; ++n) {
    for (size_t seg : {size_t{16}, size_t{256} << 10}) {
      InProcessRing ring(cpu_devices(n), RingOptions{seg});
      for (Mode mode : {Mode::kThreads, Mode::kGroup}) {
        const bool large = seg > 16 && (n == 2 || n == 3 || n == 8) && mode == Mode::kThreads;
        for (int64_t count : sizes_for(n, large)) {
          for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64}) {
            for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
              if (count > 1000 && (dt == DType::I32 || op == ReduceOp::kMax)) continue;  // keep it short
              SCOPED_TRACE(str_cat("n=", n, " count=", count, " ", dtype_name(dt), " ",
                                   dist::reduce_op_name(op), " seg=", seg,
                                   mode == Mode::kGroup ? " group" : " threads"));
              std::vector<Participant> parts;
              for (int p = 0; p < n; ++p)
                parts.push_back({p, exact_input(dt, p, count, Device::cpu(p)),
                                 Tensor(dt, Shape{count}, Device::cpu(p))});
              RunContext run = bounded();
              run_participants(ring, mode, parts, ++key, run,
                               [&](const CollectiveCall& c, std::vector<Participant>& ps) {
                                 ring.allreduce(c, ps, op);
                               });
              Tensor want = expected_reduce(dt, op, n, count);
              for (int p = 0; p < n; ++p) {
                EXPECT_EQ(parts[p].output.device(), Device::cpu(p));
                ASSERT_TRUE(same_bytes(parts[p].output, want)) << "participant " << p;
              }
            }
          }
        }
      }
      EXPECT_EQ(ring.open_instances(), 0u);
    }
  }
}

TEST(InProcessRing, InexactInputsGiveBitIdenticalResultsEverywhereAndEveryTime) {
  // Random floats: sums depend on the order, so this shows each element is
  // reduced once (in a fixed order) and then copied.
  for (int n : {3, 5, 8}) {
    InProcessRing ring(cpu_devices(n), RingOptions{64});
    std::mt19937_64 rng(n);
    const int64_t count = 997;
    std::vector<Tensor> ins;
    for (int p = 0; p < n; ++p) ins.push_back(random_tensor(DType::F32, {count}, rng, -1, 1).to(Device::cpu(p)));
    Tensor first;
    for (int rep = 0; rep < 40; ++rep) {
      std::vector<Participant> parts;
      for (int p = 0; p < n; ++p) parts.push_back({p, ins[p], Tensor(DType::F32, {count}, Device::cpu(p))});
      RunContext run = bounded();
      run_participants(ring, rep % 4 == 3 ? Mode::kGroup : Mode::kThreads, parts, rep + 1, run,
                       [&](const CollectiveCall& c, std::vector<Participant>& ps) {
                         ring.allreduce(c, ps, ReduceOp::kSum);
                       });
      if (!first.defined()) first = parts[0].output.to(Device::cpu());
      for (int p = 0; p < n; ++p) ASSERT_TRUE(same_bytes(parts[p].output, first)) << "rep " << rep << " participant " << p;
    }
  }
}

TEST(InProcessRing, InPlaceAllReduce) {
  const int n = 4;
  InProcessRing ring(cpu_devices(n), RingOptions{32});
  for (int64_t count : {int64_t{0}, int64_t{5}, int64_t{1001}}) {
    std::vector<Participant> parts;
    for (int p = 0; p < n; ++p) {
      Tensor t = exact_input(DType::F64, p, count, Device::cpu(p));
      parts.push_back({p, t, t});
    }
    RunContext run = bounded();
    run_participants(ring, Mode::kThreads, parts, 7 + count, run,
                     [&](const CollectiveCall& c, std::vector<Participant>& ps) { ring.allreduce(c, ps, ReduceOp::kSum); });
    for (int p = 0; p < n; ++p)
      EXPECT_TRUE(same_bytes(parts[p].input, expected_reduce(DType::F64, ReduceOp::kSum, n, count)));
  }
}

TEST(InProcessRing, BroadcastAllGatherReduceScatter) {
  uint64_t key = 100;
  for (int n = 1; n <= 8; ++n) {
    InProcessRing ring(cpu_devices(n), RingOptions{32});
    for (Mode mode : {Mode::kThreads, Mode::kGroup}) {
      for (int64_t m : sizes_for(n, false)) {
        for (DType dt : {DType::F32, DType::I64}) {
          SCOPED_TRACE(str_cat("n=", n, " m=", m, " ", dtype_name(dt), mode == Mode::kGroup ? " group" : ""));
          // Broadcast from every root.
          for (int root = 0; root < n; ++root) {
            std::vector<Participant> parts;
            for (int p = 0; p < n; ++p)
              parts.push_back({p, exact_input(dt, p, m, Device::cpu(p)), Tensor(dt, {m}, Device::cpu(p))});
            RunContext run = bounded();
            run_participants(ring, mode, parts, ++key, run,
                             [&](const CollectiveCall& c, std::vector<Participant>& ps) { ring.broadcast(c, ps, root); });
            Tensor want = exact_input(dt, root, m, Device::cpu());
            for (int p = 0; p < n; ++p) ASSERT_TRUE(same_bytes(parts[p].output, want)) << "root " << root;
          }
          // AllGather: participant p's m elements land in block p.
          {
            std::vector<Participant> parts;
            for (int p = 0; p < n; ++p)
              parts.push_back({p, exact_input(dt, p, m, Device::cpu(p)), Tensor(dt, {n * m}, Device::cpu(p))});
            RunContext run = bounded();
            run_participants(ring, mode, parts, ++key, run,
                             [&](const CollectiveCall& c, std::vector<Participant>& ps) { ring.allgather(c, ps); });
            Tensor want(dt, {n * m});
            for (int p = 0; p < n; ++p) {
              Tensor block = exact_input(dt, p, m, Device::cpu());
              if (m) std::memcpy(static_cast<char*>(want.raw_data()) + p * block.nbytes(), block.raw_data(), block.nbytes());
            }
            for (int p = 0; p < n; ++p) ASSERT_TRUE(same_bytes(parts[p].output, want));
          }
          // ReduceScatter: participant p gets block p of the sum.
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin}) {
            std::vector<Participant> parts;
            for (int p = 0; p < n; ++p)
              parts.push_back({p, exact_input(dt, p, n * m, Device::cpu(p)), Tensor(dt, {m}, Device::cpu(p))});
            RunContext run = bounded();
            run_participants(ring, mode, parts, ++key, run,
                             [&](const CollectiveCall& c, std::vector<Participant>& ps) { ring.reduce_scatter(c, ps, op); });
            Tensor full = expected_reduce(dt, op, n, n * m);
            for (int p = 0; p < n; ++p) {
              Tensor want(dt, {m});
              if (m) std::memcpy(want.raw_data(), static_cast<char*>(full.raw_data()) + p * want.nbytes(), want.nbytes());
              ASSERT_TRUE(same_bytes(parts[p].output, want)) << dist::reduce_op_name(op) << " participant " << p;
            }
          }
        }
      }
    }
    EXPECT_EQ(ring.open_instances(), 0u);
  }
}

TEST(InProcessRing, ManyRepetitionsWithTinySegments) {
  // Thousands of pipelined units per call, repeated: catches rare interleavings
  // (the anti-dependency between a participant's allgather writes and its
  // successor's reduce-scatter reads in particular).
  const int n = 4;
  InProcessRing ring(cpu_devices(n), RingOptions{16});
  const int64_t count = 4099;
  Tensor want = expected_reduce(DType::F32, ReduceOp::kSum, n, count);
  for (int rep = 0; rep < 100; ++rep) {
    std::vector<Participant> parts;
    for (int p = 0; p < n; ++p) {
      Tensor t = exact_input(DType::F32, p, count, Device::cpu(p));
      parts.push_back({p, t, rep % 2 ? t : Tensor(DType::F32, {count}, Device::cpu(p))});
    }
    RunContext run = bounded();
    run_participants(ring, Mode::kThreads, parts, 5000 + rep, run,
                     [&](const CollectiveCall& c, std::vector<Participant>& ps) { ring.allreduce(c, ps, ReduceOp::kSum); });
    for (int p = 0; p < n; ++p) ASSERT_TRUE(same_bytes(parts[p].output, want)) << "rep " << rep;
  }
}

TEST(InProcessRing, ParticipantsThatDisagreeAllFailWithTheFirstDifference) {
  const int n = 3;
  InProcessRing ring(cpu_devices(n));
  std::vector<Participant> parts;
  for (int p = 0; p < n; ++p)
    parts.push_back({p, exact_input(p == 2 ? DType::F64 : DType::F32, p, 10, Device::cpu(p)),
                     Tensor(p == 2 ? DType::F64 : DType::F32, {10}, Device::cpu(p))});
  RunContext run = bounded();
  std::vector<std::string> messages(n);
  CollectiveCall call;
  call.key = {&ring, 0, 1};
  call.name = "grads";
  call.run = &run;
  std::vector<std::thread> threads;
  for (int p = 0; p < n; ++p)
    threads.emplace_back([&, p] {
      std::vector<Participant> one{parts[p]};
      try {
        ring.allreduce(call, one, ReduceOp::kSum);
      } catch (const Error& e) {
        messages[p] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int p = 0; p < n; ++p) {
    EXPECT_NE(messages[p].find("allreduce 'grads' on ring(cpu,cpu:1,cpu:2): the participants disagree"),
              std::string::npos) << messages[p];
    EXPECT_NE(messages[p].find("f64"), std::string::npos) << messages[p];
  }
  // Other kinds of disagreement are named too (one call each, in a group call of 2).
  InProcessRing two(cpu_devices(2));
  std::vector<Participant> bad{{0, exact_input(DType::F32, 0, 4, Device::cpu(0)), Tensor(DType::F32, {4}, Device::cpu(0))},
                               {1, exact_input(DType::F32, 1, 5, Device::cpu(1)), Tensor(DType::F32, {5}, Device::cpu(1))}};
  call.key = {&two, 0, 2};
  expect_error([&] { two.allreduce(call, bad, ReduceOp::kSum); }, {"participants 0 and 1 of one call pass f32 x 4 and f32[5]"});
  std::vector<Participant> wrong_out{{0, exact_input(DType::F32, 0, 4, Device::cpu(0)), Tensor(DType::F32, {3}, Device::cpu(0))}};
  call.key = {&two, 0, 3};
  expect_error([&] { two.allreduce(call, wrong_out, ReduceOp::kSum); }, {"output of 3 elements for an input of 4"});
  CollectiveCall call4 = call;
  call4.key = {&two, 0, 4};
  std::vector<Participant> wrong_device{{0, exact_input(DType::F32, 0, 4, Device::cpu(1)), Tensor(DType::F32, {4}, Device::cpu(0))}};
  expect_error([&] { two.allreduce(call4, wrong_device, ReduceOp::kSum); }, {"participant 0 (cpu) passed a tensor on cpu:1"});
  // The failed instances stay open for their participant 1, which then fails at once.
  EXPECT_EQ(two.open_instances(), 2u);
  std::vector<Participant> late{{1, exact_input(DType::F32, 1, 4, Device::cpu(1)), Tensor(DType::F32, {4}, Device::cpu(1))}};
  expect_error([&] { two.allreduce(call, late, ReduceOp::kSum); }, {"output of 3 elements for an input of 4"});
  expect_error([&] { two.allreduce(call4, late, ReduceOp::kSum); }, {"passed a tensor on cpu:1"});
  EXPECT_EQ(two.open_instances(), 0u);
  // A participant index that does not exist fails its own call only.
  std::vector<Participant> nobody{{5, Tensor(), Tensor()}};
  expect_error([&] { two.allreduce(call, nobody, ReduceOp::kSum); }, {"participant 5 does not exist (2 local participants)"});
  // Bool tensors cannot be reduced.
  call.key = {&two, 0, 9};
  std::vector<Participant> bools{{0, Tensor::from_vector<bool>({2}, {true, false}), Tensor(DType::Bool, {2})}};
  expect_error([&] { two.allreduce(call, bools, ReduceOp::kSum); }, {"bool tensors, which cannot be reduced"});
}

TEST(InProcessRing, WaitsEndByTimeoutOrCancellationNeverHang) {
  InProcessRing ring(cpu_devices(3));
  // Participant 1 and 2 never come: participant 0 times out, naming who it waited for.
  RunContext run = bounded(std::chrono::milliseconds(200));
  CollectiveCall call;
  call.key = {&ring, 0, 1};
  call.name = "grads";
  call.run = &run;
  std::vector<Participant> p0{{0, exact_input(DType::F32, 0, 100, Device::cpu(0)), Tensor(DType::F32, {100}, Device::cpu(0))}};
  expect_error([&] { ring.allreduce(call, p0, ReduceOp::kSum); },
               {"timed out after 0.2 s", "allreduce 'grads'", "participant 0 (cpu) waiting for participant 2 (cpu:2) to arrive"});
  // Cancellation from another thread ends the wait with Cancelled.
  CancellationToken token;
  RunContext cancellable = bounded(std::chrono::seconds(600));
  cancellable.cancellation = &token;
  call.key = {&ring, 0, 2};
  call.run = &cancellable;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    token.cancel();
  });
  bool cancelled = false;
  try {
    ring.allreduce(call, p0, ReduceOp::kSum);
  } catch (const Cancelled&) {
    cancelled = true;
  }
  canceller.join();
  EXPECT_TRUE(cancelled);
  EXPECT_EQ(ring.open_instances(), 2u) << "failed instances wait for their late participants";
}

TEST(InProcessRing, ConstructorChecks) {
  expect_error([] { InProcessRing r({}); }, {"no devices"});
  expect_error([] { InProcessRing r({Device::cpu(0), Device::cpu(0)}); }, {"cpu appears twice"});
  expect_error([] { InProcessRing r({Device::cpu(0), Device::cuda(0)}); }, {"different types"});
  EXPECT_EQ(InProcessRing(cpu_devices(2)).name(), "ring(cpu,cpu:1)");
  EXPECT_EQ(InProcessRing(cpu_devices(3)).size(), 3);
}

}  // namespace
}  // namespace spire::testing
