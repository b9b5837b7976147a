// Collectives and lanes on GPUs (skipped with a message where no GPU is
// visible; bench/gpu_check.sh runs them): AllReduce, Broadcast, AllGather
// and ReduceScatter over every visible GPU with Spire's ring and with NCCL,
// exact sums compared bit for bit with the CPU devices' results, sequential
// mode equal to the lanes, a CPU lane and a GPU lane exchanging values
// (cross-lane events), and repeated runs returning to the allocator's
// baseline. Never run in CI (no GPU there).
#include <gtest/gtest.h>

#include <cstring>

#include "core/device_backend.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

class GpuCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    if (find_device_backend(DeviceType::CUDA) == nullptr)
      GTEST_SKIP() << "this build has no CUDA backend (SPIRE_CUDA=OFF)";
    n_ = device_count(DeviceType::CUDA);
    if (n_ == 0) GTEST_SKIP() << "no CUDA device is visible";
  }
  int n_ = 0;
};

// Runs `op` over per-device inputs on `type` devices; returns the outputs on the CPU.
std::vector<Tensor> run_on(DeviceType type, int n, const std::string& communicator, bool sequential,
                           int64_t count, const std::function<std::vector<Output>(const std::vector<Output>&, const dist::CollectiveOptions&)>& op) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Output> xs;
  FeedDict feeds;
  for (int k = 0; k < n; ++k) {
    DeviceScope d(g, Device{type, k});
    xs.push_back(ops::placeholder(DType::F32, {count}, "x" + std::to_string(k)));
    Tensor v(DType::F32, {count});
    for (int64_t e = 0; e < count; ++e) v.data<float>()[e] = static_cast<float>((e * 13 + k * 5) % 401 - 200);
    feeds.push_back({xs.back(), v});
  }
  dist::CollectiveOptions o;
  o.communicator = communicator;
  std::vector<Output> outs = op(xs, o);
  SessionOptions so;
  so.num_cpu_devices = type == DeviceType::CPU ? n : 1;
  so.sequential = sequential;
  Session s(g, so);
  return s.run(outs, feeds);
}

void expect_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].shape(), b[i].shape()) << what;
    EXPECT_EQ(std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()), 0) << what << " output " << i;
  }
}

TEST_F(GpuCollectives, EveryCollectiveMatchesTheCpuDevicesBitForBit) {
  using Builder = std::function<std::vector<Output>(const std::vector<Output>&, const dist::CollectiveOptions&)>;
  const std::vector<std::pair<std::string, Builder>> ops{
      {"allreduce", [](auto& x, auto& o) { return dist::all_reduce(x, dist::ReduceOp::kSum, o); }},
      {"allreduce_max", [](auto& x, auto& o) { return dist::all_reduce(x, dist::ReduceOp::kMax, o); }},
      {"broadcast", [](auto& x, auto& o) { return dist::broadcast(x, static_cast<int>(x.size()) - 1, o); }},
      {"allgather", [](auto& x, auto& o) { return dist::all_gather(x, o); }},
      {"reduce_scatter", [](auto& x, auto& o) { return dist::reduce_scatter(x, dist::ReduceOp::kSum, o); }}};
  std::vector<std::string> comms{"ring"};
#if defined(SPIRE_WITH_NCCL)
  comms.push_back("nccl");
#endif
  for (int64_t count : {int64_t{0}, int64_t{n_}, int64_t{n_} * 1001, int64_t{n_} * 1000003}) {
    for (const auto& [name, op] : ops) {
      auto want = run_on(DeviceType::CPU, n_, "", false, count, op);
      for (const auto& comm : comms)
        for (bool seq : {false, true})
          expect_same(run_on(DeviceType::CUDA, n_, comm, seq, count, op), want,
                      str_cat(name, " count ", count, " on ", n_, " GPUs with ", comm, seq ? " sequential" : ""));
    }
  }
}

TEST_F(GpuCollectives, ACpuLaneAndAGpuLaneExchangeValues) {
  // cpu -> cuda:0 -> cpu -> cuda:0: every edge crosses lanes (events on the GPU side).
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {1000}, "x");
  Output a, b, c;
  {
    DeviceScope d(g, Device::cuda(0));
    a = ops::exp(x * 0.01);
  }
  b = ops::tanh(a) + 1.0;  // on the CPU
  {
    DeviceScope d(g, Device::cuda(0));
    c = ops::sum(b * a);
  }
  Tensor in(DType::F32, {1000});
  for (int i = 0; i < 1000; ++i) in.data<float>()[i] = static_cast<float>(i % 37);
  Session s(g);
  Tensor first = s.run({c}, {{x, in}})[0];
  Allocator* alloc = get_allocator(Device::cuda(0));
  const size_t baseline = alloc->memory_stats().in_use;
  for (int rep = 0; rep < 500; ++rep) {
    Tensor r = s.run({c}, {{x, in}})[0];
    ASSERT_EQ(std::memcmp(r.raw_data(), first.raw_data(), r.nbytes()), 0) << "run " << rep;
  }
  synchronize_device(Device::cuda(0));
  EXPECT_EQ(alloc->memory_stats().in_use, baseline);
}

}  // namespace
}  // namespace spire::testing
