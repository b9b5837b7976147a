// The CUDA runtime under the executor (skipped with a message where no GPU
// is visible): the caching allocator's reuse and the return of in-use bytes
// to the baseline after 10,000 runs, out-of-memory errors, transfers through
// pinned memory (odd sizes, several staging chunks), variables living on the
// GPU with copy-on-write updates, constants uploaded once per session, and
// copies between two GPUs when there are two.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/device_backend.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (find_device_backend(DeviceType::CUDA) == nullptr)
      GTEST_SKIP() << "this build has no CUDA backend (SPIRE_CUDA=OFF)";
    if (device_count(DeviceType::CUDA) == 0) GTEST_SKIP() << "no CUDA device is visible";
  }
  Allocator* alloc() { return get_allocator(Device::cuda(0)); }
  // Tests of the cache itself skip when SPIRE_CUDA_NO_CACHING turns it off
  // (bench/gpu_check.sh does so for compute-sanitizer). GTEST_SKIP must be in
  // the test body: in a helper it returns from the helper only.
  static bool caching_off() {
    const char* e = std::getenv("SPIRE_CUDA_NO_CACHING");
    return e != nullptr && *e != '\0' && std::string(e) != "0";
  }
};

#define SPIRE_REQUIRE_CACHING() \
  if (caching_off()) GTEST_SKIP() << "SPIRE_CUDA_NO_CACHING is set: the allocator does not cache"

TEST_F(Gpu, AllocatorReusesBlocksAndReturnsToTheBaselineAfter10000Runs) {
  SPIRE_REQUIRE_CACHING();
  Graph g;
  DefaultGraphGuard guard(g);
  DeviceScope gpu(g, Device::cuda(0));
  Output x = ops::placeholder(DType::F32, {257, 33}, "x");
  Output y = ops::sum(ops::mul(ops::exp(x), ops::add(x, x)), {1});
  std::mt19937_64 rng(1);
  Tensor in = random_tensor(DType::F32, {257, 33}, rng);
  Session s(g);
  s.run({y}, {{x, in}});  // warm: plan, constants, cached blocks
  synchronize_device(Device::cuda(0));
  MemoryStats base = alloc()->memory_stats();
  for (int i = 0; i < 10000; ++i) s.run({}, {{x, in}}, {y.node});
  synchronize_device(Device::cuda(0));
  MemoryStats after = alloc()->memory_stats();
  EXPECT_EQ(after.in_use, base.in_use) << "bytes leaked over 10,000 runs";
  EXPECT_EQ(after.num_device_allocs, base.num_device_allocs)
      << "the runs asked the device for new memory instead of reusing cached blocks";
  EXPECT_GT(after.num_allocs, base.num_allocs + 10000);
}

TEST_F(Gpu, OutOfMemoryIsAClearError) {
  expect_error([&] { Tensor t(DType::F32, {int64_t{1} << 40}, Device::cuda(0)); },
               {"out of memory on cuda:0", "tried to allocate", "MiB free of"});
  // The allocator still works afterwards.
  Tensor ok(DType::F32, {1024}, Device::cuda(0));
  EXPECT_EQ(ok.device(), Device::cuda(0));
}

TEST_F(Gpu, EmptyCacheReturnsFreeSegments) {
  SPIRE_REQUIRE_CACHING();
  { Tensor t(DType::F32, {64 << 20}, Device::cuda(0)); }
  synchronize_device(Device::cuda(0));
  EXPECT_GT(alloc()->memory_stats().cached, 0u);
  alloc()->empty_cache();
  MemoryStats s = alloc()->memory_stats();
  EXPECT_EQ(s.reserved, s.in_use);
}

TEST_F(Gpu, TransfersThroughPinnedChunksKeepEveryByte) {
  std::mt19937_64 rng(3);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1} << 20, (int64_t{3} << 20) + 5}) {
    Tensor h = random_tensor(DType::F64, {n}, rng);  // up to 24 MiB: several 4 MiB chunks
    Tensor d = h.to(Device::cuda(0));
    EXPECT_EQ(d.device(), Device::cuda(0));
    Tensor back = d.clone().to(Device::cpu());
    ASSERT_EQ(back.num_elements(), n);
    EXPECT_EQ(std::memcmp(back.raw_data(), h.raw_data(), h.nbytes()), 0) << "n = " << n;
  }
}

TEST_F(Gpu, VariablesLiveOnTheGpuAndUpdatesCopyOnWrite) {
  Graph g;
  DefaultGraphGuard guard(g);
  DeviceScope gpu(g, Device::cuda(0));
  Output v = ops::variable({3}, DType::F32, "v");
  Output init = ops::assign(v, ops::constant(Tensor::from_vector<float>({3}, {1, 2, 3})));
  Output add = ops::assign_add(v, ops::constant(Tensor::from_vector<float>({1}, {10})));
  Output sub = ops::assign_sub(v, ops::constant(Tensor::from_vector<float>({3}, {1, 1, 1})));
  EXPECT_EQ(add.node->device(), Device::cuda(0));
  Session s(g);
  s.run({}, {}, {init.node});
  Tensor before = s.run({v})[0];
  s.run({}, {}, {add.node});
  expect_tensor(before, {3}, {1, 2, 3});  // a fetched value never changes
  expect_tensor(s.run({v})[0], {3}, {11, 12, 13});
  s.run({}, {}, {sub.node});
  expect_tensor(s.run({v})[0], {3}, {10, 11, 12});
  EXPECT_EQ(s.variable_value(v.node).device(), Device::cuda(0));
}

TEST_F(Gpu, ConstantsAreUploadedOncePerSession) {
  Graph g;
  DefaultGraphGuard guard(g);
  DeviceScope gpu(g, Device::cuda(0));
  std::mt19937_64 rng(5);
  Tensor big = random_tensor(DType::F32, {1 << 20}, rng);
  Output c = ops::constant(big);
  Output y = ops::neg(c);
  Session s(g);
  Tensor first = s.run({y})[0];
  synchronize_device(Device::cuda(0));
  MemoryStats base = alloc()->memory_stats();
  for (int i = 0; i < 20; ++i) s.run({}, {}, {y.node});
  synchronize_device(Device::cuda(0));
  EXPECT_EQ(alloc()->memory_stats().in_use, base.in_use);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(first.data<float>()[i], -big.data<float>()[i]);
}

TEST_F(Gpu, CopiesBetweenTwoGpus) {
  if (device_count(DeviceType::CUDA) < 2) GTEST_SKIP() << "needs two CUDA devices";
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {1000}, "x");
  Output a, b;
  {
    DeviceScope d0(g, Device::cuda(0));
    a = ops::mul(x, x);
  }
  {
    DeviceScope d1(g, Device::cuda(1));
    b = ops::add(a, a);
  }
  EXPECT_EQ(b.node->input(0).node->op_type(), "Copy");
  std::mt19937_64 rng(9);
  Tensor in = random_tensor(DType::F32, {1000}, rng);
  Tensor out = Session(g).run({b}, {{x, in}})[0];
  for (int64_t i = 0; i < 1000; ++i) {
    float v = in.data<float>()[i];
    EXPECT_FLOAT_EQ(out.data<float>()[i], 2 * v * v);
  }
}

}  // namespace
}  // namespace spire::testing
