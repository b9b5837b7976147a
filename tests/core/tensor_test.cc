// Tensor, Shape, DType and allocator tests.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

TEST(Tensor, AllocationIsAlignedAndRefCounted) {
  Tensor t(DType::F32, {3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kCpuAlignment, 0u);
  EXPECT_EQ(t.num_elements(), 15);
  EXPECT_EQ(t.nbytes(), 60u);
  Tensor u = t;
  EXPECT_TRUE(u.shares_buffer_with(t));
  EXPECT_EQ(t.buffer_use_count(), 2);
  Tensor c = t.clone();
  EXPECT_FALSE(c.shares_buffer_with(t));
  Tensor v = t.reshaped({15});
  EXPECT_TRUE(v.shares_buffer_with(t));
  expect_error([&] { t.reshaped({4, 4}); }, {"cannot view", "f32[3, 5]", "[4, 4]"});
}

TEST(Tensor, TypedAccessChecksDtype) {
  Tensor t = Tensor::from_vector<int32_t>({2}, {1, 2});
  expect_error([&] { t.data<float>(); }, {"i32[2]", "f32"});
  expect_error([&] { t.item<int>(); }, {"2 elements"});
}

TEST(Tensor, ItemAndVectors) {
  EXPECT_EQ(Tensor::scalar<double>(2.5).item<double>(), 2.5);
  expect_error([] { Tensor::from_vector<float>({2}, {1, 2}).item<float>(); }, {"2 elements"});
  expect_error([] { Tensor::from_vector<float>({3}, {1, 2}); }, {"2 values", "[3]"});
  EXPECT_EQ(Tensor::from_vector<int64_t>({2}, {4, 5}).to_vector<int64_t>(), (std::vector<int64_t>{4, 5}));
  expect_error([] { Tensor(DType::F32, {-1, 2}); }, {"partial shape"});
}

TEST(Tensor, PoisonAndStrings) {
  Tensor t(DType::F64, {2});
  t.poison();
  EXPECT_TRUE(std::isnan(t.data<double>()[0]));
  Tensor s = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(s.to_string(), "f32[2, 2] {1, 2, 3, 4}");
  EXPECT_EQ(s.to_string(2), "f32[2, 2] {1, 2, ...}");
}

TEST(Shape, SizesThatOverflowAreErrors) {
  EXPECT_EQ(Shape({1 << 20, 1 << 20}).num_elements(), int64_t{1} << 40);
  EXPECT_EQ(Shape({-1, 5}).num_elements(), -1);
  EXPECT_EQ(Shape({0, INT64_MAX}).num_elements(), 0);
  expect_error([] { Shape({int64_t{1} << 32, int64_t{1} << 32}).num_elements(); },
               {"shape [4294967296, 4294967296] has more elements than fit in a 64-bit integer"});
  EXPECT_EQ(Shape({3, 5}).num_bytes(8), 120u);
  expect_error([] { Shape({int64_t{1} << 62}).num_bytes(4); }, {"needs more bytes than fit"});
  expect_error([] { Shape({-1}).num_bytes(4); }, {"not fully defined"});
  // A tensor of such a shape is an error, not a small buffer.
  expect_error([] { Tensor t(DType::F64, Shape{int64_t{1} << 60, 2}); }, {"more bytes than fit"});
}

// A dimension is >= 0, or -1 for unknown (TensorFlow's TensorShape rule):
// anything else is refused where the shape is made, naming it, never
// printed as if it were unknown.
TEST(Shape, NegativeDimensionsOtherThanUnknownAreErrors) {
  expect_error([] { Shape({-5}); }, {"invalid shape [-5]: dimension 0 is -5", ">= 0, or -1 for unknown"});
  expect_error([] { Shape(std::vector<int64_t>{2, -2}); }, {"invalid shape [2, -2]: dimension 1 is -2"});
  Shape s({2, 3});
  expect_error([&] { s.set_dim(1, -7); }, {"dimension 1 is -7"});
  expect_error([] { ops::placeholder(DType::F32, {4, -3}, "p"); }, {"invalid shape [4, -3]"});
  EXPECT_EQ(Shape({-1, 0, 3}).to_string(), "[?, 0, 3]");
  // mutable_dims() is unchecked: what it makes prints as it is.
  Shape m({1});
  m.mutable_dims()[0] = -5;
  EXPECT_EQ(m.to_string(), "[-5]");
}

TEST(Shape, BroadcastRules) {
  Shape out;
  EXPECT_TRUE(broadcast_shapes({2, 1, 3}, {4, 1}, &out));
  EXPECT_EQ(out, Shape({2, 4, 3}));
  EXPECT_TRUE(broadcast_shapes({-1, 3}, {1, 3}, &out));
  EXPECT_EQ(out, Shape({-1, 3}));
  EXPECT_TRUE(broadcast_shapes({0, 3}, {1, 3}, &out));
  EXPECT_EQ(out, Shape({0, 3}));
  EXPECT_FALSE(broadcast_shapes({2, 3}, {3, 3}, &out));
  EXPECT_EQ(Shape({2, -1}).to_string(), "[2, ?]");
  EXPECT_EQ(Shape({}).num_elements(), 1);
  EXPECT_EQ(Shape({2, -1}).num_elements(), -1);
  EXPECT_TRUE(Shape({-1, 2}).is_compatible_with({7, 2}));
  EXPECT_FALSE(Shape({-1, 2}).is_compatible_with({7, 3}));
  EXPECT_EQ(normalize_axis(-1, 3, "t"), 2);
  expect_error([] { normalize_axis(3, 3, "myop"); }, {"myop", "axis 3", "rank 3"});
}

TEST(DType, NamesAndSizes) {
  for (DType d : {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool, DType::F16, DType::BF16})
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::Bool), 1u);
  expect_error([] { dtype_from_name("f8"); }, {"unknown dtype name 'f8'"});
}

TEST(Allocator, UnknownDeviceIsAClearError) {
#ifndef SPIRE_WITH_CUDA
  expect_error([] { Tensor(DType::F32, {2}, Device::cuda(0)); }, {"no allocator", "cuda:0", "SPIRE_CUDA"});
#else
  GTEST_SKIP() << "CUDA build: the CUDA allocator is registered";
#endif
}

}  // namespace
}  // namespace spire::testing

namespace spire::testing {
namespace {

TEST(Allocator, LargeBlocksAreReusedAndReleased) {
  cpu_empty_cache();
  EXPECT_EQ(cpu_cached_bytes(), 0u);
  void* first;
  {
    Tensor big(DType::F32, {1 << 20});  // 4 MiB
    first = big.raw_data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % kCpuAlignment, 0u);
  }
  EXPECT_EQ(cpu_cached_bytes(), size_t{4} << 20);
  Tensor again(DType::F32, {1 << 20});
  EXPECT_EQ(again.raw_data(), first);  // same block handed out again
  EXPECT_EQ(cpu_cached_bytes(), 0u);
  Tensor small(DType::F32, {16});       // small blocks bypass the cache
  cpu_empty_cache();
  EXPECT_EQ(cpu_cached_bytes(), 0u);
}

// The cache keeps what a working set larger than 1 GiB frees (the limit
// follows the peak in use), so the next step takes it back without faults.
// 600 blocks of 2 MiB are 1.2 GiB of address space; their pages are never
// touched, so this costs no memory. SPIRE_CPU_CACHE_MIB would fix the limit.
TEST(Allocator, CacheLimitFollowsThePeakInUse) {
  if (std::getenv("SPIRE_CPU_CACHE_MIB") != nullptr) GTEST_SKIP() << "SPIRE_CPU_CACHE_MIB is set";
  cpu_empty_cache();
  const size_t block = size_t{2} << 20;
  std::vector<void*> blocks;
  for (int i = 0; i < 600; ++i) blocks.push_back(allocate_host(block));
  for (void* p : blocks) deallocate_host(p, block);
  EXPECT_EQ(cpu_cached_bytes(), 600 * block);
  void* again = allocate_host(block);
  EXPECT_EQ(again, blocks.back());
  deallocate_host(again, block);
  cpu_empty_cache();
  EXPECT_EQ(cpu_cached_bytes(), 0u);
}

// The kernel's THP setting ("always [madvise] never" -> "madvise"), or "".
std::string transparent_huge_pages_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line)) return "";
  const size_t a = line.find('['), b = line.find(']');
  return a == std::string::npos || b == std::string::npos ? "" : line.substr(a + 1, b - a - 1);
}

// The THPeligible field of the mapping in /proc/self/smaps that holds
// `p` (-1: not found). A mapping's header line starts "lo-hi perms ...";
// its fields follow, each "Name: value".
int thp_eligible(const void* p) {
  std::ifstream f("/proc/self/smaps");
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(f, line)) {
    const std::string first = line.substr(0, line.find(' '));
    if (!first.empty() && first.back() != ':') {
      unsigned long lo = 0, hi = 0;
      inside = std::sscanf(first.c_str(), "%lx-%lx", &lo, &hi) == 2 && at >= lo && at < hi;
    } else if (inside && first == "THPeligible:") {
      return std::atoi(line.c_str() + first.size());
    }
  }
  return -1;
}

TEST(Allocator, LargeBlocksAreAdvisedForHugePages) {
  // Blocks from 2 MiB are 2 MiB-aligned and advised (MADV_HUGEPAGE), so
  // the kernel's default "madvise" policy backs them with huge pages.
  void* big = allocate_host(size_t{8} << 20);
  void* small = allocate_host(size_t{1} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % (size_t{2} << 20), 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % kCpuAlignment, 0u);
  const std::string mode = transparent_huge_pages_mode();
  const char* env = std::getenv("SPIRE_CPU_HUGE_PAGES");
  const bool off = env != nullptr && std::string(env) == "0";
  const int eligible = thp_eligible(big);
  if (mode == "madvise" && !off && eligible != -1)
    EXPECT_EQ(eligible, 1) << "an 8 MiB block was not advised for huge pages";
  deallocate_host(big, size_t{8} << 20);
  deallocate_host(small, size_t{1} << 20);
  cpu_empty_cache();
  if (mode != "madvise" || off)
    GTEST_SKIP() << "alignment checked; the advice is observable only under THP mode 'madvise' (here '" << mode
                 << "') without SPIRE_CPU_HUGE_PAGES=0";
  if (eligible == -1)
    GTEST_SKIP() << "alignment checked; this kernel's /proc/self/smaps has no THPeligible field to check the advice";
}

}  // namespace
}  // namespace spire::testing
