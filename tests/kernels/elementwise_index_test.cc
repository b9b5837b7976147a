// Host test of the CUDA elementwise kernels' index math
// (kernels/broadcast_index.h): the strided broadcast offsets, run on the
// host over every output element, must reproduce the CPU kernels' results
// (Add, Select, BroadcastTo run through a Session) for a range of shapes
// (odd sizes, scalars, broadcasting on either side, ranks above 8 that
// coalesce); plus the flat-path choice and the split of a flat launch into
// 16-byte vectors and a scalar tail. CI has no GPU, so this is the executed
// check of that math.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/broadcast_index.h"
#include "kernels/functors.h"
#include "spire.h"
#include "tests/support/op_test_util.h"

namespace spire {
namespace {

using kernels::BroadcastIndex;

Shape broadcast_of(const Shape& a, const Shape& b) {
  Shape out;
  EXPECT_TRUE(broadcast_shapes(a, b, &out)) << a << " vs " << b;
  return out;
}

// Distinct values: a[i] = i + 1 (< 1e4) and b[j] = (j + 1) * 1e4, so a sum
// identifies both elements.
Tensor iota(const Shape& s, double scale) {
  Tensor t(DType::F64, s);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<double>()[i] = static_cast<double>(i + 1) * scale;
  return t;
}

template <typename I, int N>
BroadcastIndex<N, I> index_for(const Shape& out, const std::array<Shape, N>& ins) {
  BroadcastIndex<N, I> bi;
  EXPECT_TRUE((kernels::make_broadcast_index<N, I>(out, ins, &bi))) << out;
  return bi;
}

template <typename I>
void check_add(const Shape& sa, const Shape& sb) {
  SCOPED_TRACE("Add " + sa.to_string() + " + " + sb.to_string());
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, sa, "x");
  Output y = ops::placeholder(DType::F64, sb, "y");
  Tensor a = iota(sa, 1), b = iota(sb, 1e4);
  Tensor cpu = testing::run1(ops::add(x, y), {{x, a}, {y, b}});
  const Shape out = broadcast_of(sa, sb);
  ASSERT_EQ(cpu.shape(), out);
  auto bi = index_for<I, 2>(out, {sa, sb});
  const double* pa = a.data<double>();
  const double* pb = b.data<double>();
  const double* pc = cpu.data<double>();
  const functors::Add add;
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    I off[2];
    kernels::broadcast_offsets(bi, static_cast<I>(i), off);
    ASSERT_LT(static_cast<int64_t>(off[0]), a.num_elements()) << "element " << i;
    ASSERT_LT(static_cast<int64_t>(off[1]), b.num_elements()) << "element " << i;
    ASSERT_EQ(add(pa[off[0]], pb[off[1]]), pc[i]) << "element " << i;
  }
}

template <typename I>
void check_select(const Shape& sc, const Shape& sx, const Shape& sy) {
  SCOPED_TRACE("Select " + sc.to_string() + ", " + sx.to_string() + ", " + sy.to_string());
  Graph g;
  DefaultGraphGuard guard(g);
  Output c = ops::placeholder(DType::Bool, sc, "c");
  Output x = ops::placeholder(DType::F64, sx, "x");
  Output y = ops::placeholder(DType::F64, sy, "y");
  Tensor tc(DType::Bool, sc);
  for (int64_t i = 0; i < tc.num_elements(); ++i) tc.data<bool>()[i] = (i * 7 + 3) % 5 < 3;
  Tensor tx = iota(sx, 1), ty = iota(sy, -1);
  Tensor cpu = testing::run1(ops::where(c, x, y), {{c, tc}, {x, tx}, {y, ty}});
  const Shape out = broadcast_of(broadcast_of(sc, sx), sy);
  ASSERT_EQ(cpu.shape(), out);
  auto bi = index_for<I, 3>(out, {sc, sx, sy});
  const functors::Select sel;
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    I off[3];
    kernels::broadcast_offsets(bi, static_cast<I>(i), off);
    ASSERT_EQ(sel(tc.data<bool>()[off[0]], tx.data<double>()[off[1]], ty.data<double>()[off[2]]),
              cpu.data<double>()[i])
        << "element " << i;
  }
}

template <typename I>
void check_broadcast_to(const Shape& sx, const Shape& target) {
  SCOPED_TRACE("BroadcastTo " + sx.to_string() + " -> " + target.to_string());
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, sx, "x");
  Tensor tx = iota(sx, 1);
  Tensor cpu = testing::run1(ops::broadcast_to(x, target), {{x, tx}});
  ASSERT_EQ(cpu.shape(), target);
  auto bi = index_for<I, 1>(target, {sx});
  for (int64_t i = 0; i < target.num_elements(); ++i) {
    I off[1];
    kernels::broadcast_offsets(bi, static_cast<I>(i), off);
    ASSERT_EQ(tx.data<double>()[off[0]], cpu.data<double>()[i]) << "element " << i;
  }
}

const std::vector<std::pair<Shape, Shape>>& binary_shapes() {
  static const std::vector<std::pair<Shape, Shape>> shapes = {
      {{5, 1, 7}, {3, 1}},
      {{3, 1}, {5, 1, 7}},
      {{2, 3}, {3}},
      {{4, 1}, {1, 5}},
      {{}, {2, 3, 1}},
      {{2, 3, 1}, {}},
      {{3, 1, 2}, {1, 4, 2}},
      {{7}, {7}},
      {{1}, {1, 1, 1}},
      {{2, 1, 3, 1, 5}, {3, 4, 1}},
      {{1, 6, 1}, {6, 1}},
      {{13, 1}, {1, 11}},
      {{2, 3, 4, 5}, {1, 3, 1, 5}},
      // Rank 10 output that coalesces to rank 2.
      {{2, 1, 2, 1, 2, 1, 2, 1, 2, 3}, {3}},
      // Rank 9 with broadcasts on both sides; the size-1 output dims drop out.
      {{2, 1, 3, 1, 2, 1, 3, 1, 2}, {1, 5, 1, 1, 1, 4, 1, 1, 1}},
  };
  return shapes;
}

TEST(BroadcastIndex, AddMatchesCpuKernel32) {
  for (const auto& [a, b] : binary_shapes()) check_add<uint32_t>(a, b);
}

TEST(BroadcastIndex, AddMatchesCpuKernel64) {
  for (const auto& [a, b] : binary_shapes()) check_add<uint64_t>(a, b);
}

TEST(BroadcastIndex, SelectMatchesCpuKernel) {
  const std::vector<std::array<Shape, 3>> shapes = {
      {Shape{5, 1, 7}, Shape{3, 1}, Shape{7}},
      {Shape{2, 3}, Shape{}, Shape{2, 1}},
      {Shape{1}, Shape{4, 1, 3}, Shape{1, 5, 1}},
      {Shape{3, 4}, Shape{3, 4}, Shape{4}},
      {Shape{6, 1, 1}, Shape{1, 2, 1}, Shape{1, 1, 5}},
  };
  for (const auto& s : shapes) {
    check_select<uint32_t>(s[0], s[1], s[2]);
    check_select<uint64_t>(s[0], s[1], s[2]);
  }
}

TEST(BroadcastIndex, BroadcastToMatchesCpuKernel) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 1}, {5, 3, 7}}, {{}, {4, 3}},       {{7}, {2, 7}},
      {{1, 5}, {3, 5}},    {{2, 1, 4}, {2, 3, 4}}, {{1, 1, 1}, {2, 1, 3}},
  };
  for (const auto& [x, t] : shapes) {
    check_broadcast_to<uint32_t>(x, t);
    check_broadcast_to<uint64_t>(x, t);
  }
}

TEST(BroadcastIndex, CoalescesDimensions) {
  BroadcastIndex<2, uint32_t> bi;
  // [5,3,7] + [3,7]: the second input is contiguous over the last two dims.
  ASSERT_TRUE((kernels::make_broadcast_index<2, uint32_t>(Shape{5, 3, 7}, {Shape{5, 3, 7}, Shape{3, 7}}, &bi)));
  EXPECT_EQ(bi.rank, 2);
  EXPECT_EQ(bi.dims[0], 5u);
  EXPECT_EQ(bi.dims[1], 21u);
  EXPECT_EQ(bi.strides[0][0], 21u);
  EXPECT_EQ(bi.strides[0][1], 1u);
  EXPECT_EQ(bi.strides[1][0], 0u);
  EXPECT_EQ(bi.strides[1][1], 1u);
  // [5,1,7] with [3,1]: nothing merges.
  ASSERT_TRUE((kernels::make_broadcast_index<2, uint32_t>(Shape{5, 3, 7}, {Shape{5, 1, 7}, Shape{3, 1}}, &bi)));
  EXPECT_EQ(bi.rank, 3);
  // Same shapes: one dimension.
  ASSERT_TRUE((kernels::make_broadcast_index<2, uint32_t>(Shape{4, 5, 6}, {Shape{4, 5, 6}, Shape{4, 5, 6}}, &bi)));
  EXPECT_EQ(bi.rank, 1);
  EXPECT_EQ(bi.dims[0], 120u);
  // A one-element output: rank 0, offsets 0.
  ASSERT_TRUE((kernels::make_broadcast_index<2, uint32_t>(Shape{1, 1}, {Shape{1}, Shape{}}, &bi)));
  EXPECT_EQ(bi.rank, 0);
  uint32_t off[2] = {7, 7};
  kernels::broadcast_offsets(bi, 0u, off);
  EXPECT_EQ(off[0], 0u);
  EXPECT_EQ(off[1], 0u);
}

TEST(BroadcastIndex, RejectsTooManyDimensionsAfterCoalescing) {
  // Ten alternating broadcast dimensions cannot merge.
  const Shape a{2, 1, 2, 1, 2, 1, 2, 1, 2, 1};
  const Shape b{1, 2, 1, 2, 1, 2, 1, 2, 1, 2};
  const Shape out{2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
  BroadcastIndex<2, uint64_t> bi;
  EXPECT_FALSE((kernels::make_broadcast_index<2, uint64_t>(out, {a, b}, &bi)));
  // Eight of them fit.
  BroadcastIndex<2, uint64_t> bi8;
  EXPECT_TRUE((kernels::make_broadcast_index<2, uint64_t>(Shape{2, 2, 2, 2, 2, 2, 2, 2},
                                                          {Shape{2, 1, 2, 1, 2, 1, 2, 1},
                                                           Shape{1, 2, 1, 2, 1, 2, 1, 2}},
                                                          &bi8)));
  EXPECT_EQ(bi8.rank, 8);
}

TEST(BroadcastIndex, RankEightMatchesCpuKernel) {
  check_add<uint32_t>(Shape{2, 1, 2, 1, 2, 1, 2, 1}, Shape{1, 2, 1, 3, 1, 2, 1, 3});
}

TEST(FlatPath, ReadKinds) {
  using kernels::FlatRead;
  EXPECT_EQ(kernels::flat_read(6, 6), FlatRead::kFull);
  EXPECT_EQ(kernels::flat_read(1, 6), FlatRead::kScalar);
  EXPECT_EQ(kernels::flat_read(1, 1), FlatRead::kFull);
  EXPECT_EQ(kernels::flat_read(3, 6), FlatRead::kStrided);
  // [1, 6] seen as [6] reads element i as element i: the element count decides.
  EXPECT_EQ(kernels::flat_read(Shape({1, 6}).num_elements(), Shape({6}).num_elements()),
            FlatRead::kFull);
}

TEST(FlatPath, VectorWidth) {
  EXPECT_EQ(kernels::vector_width(sizeof(float)), 4);
  EXPECT_EQ(kernels::vector_width(sizeof(double)), 2);
  EXPECT_EQ(kernels::vector_width(sizeof(int64_t)), 2);
  EXPECT_EQ(kernels::vector_width(sizeof(bool)), 16);
}

TEST(FlatPath, Alignment) {
  alignas(16) static unsigned char buf[64];
  EXPECT_TRUE(kernels::vector_aligned(buf, 4, 4));
  EXPECT_FALSE(kernels::vector_aligned(buf + 4, 4, 4));
  EXPECT_FALSE(kernels::vector_aligned(buf + 8, 4, 4));
  EXPECT_TRUE(kernels::vector_aligned(buf + 16, 4, 4));
  EXPECT_TRUE(kernels::vector_aligned(buf + 16, 8, 2));
  EXPECT_FALSE(kernels::vector_aligned(buf + 8, 8, 2));
  EXPECT_FALSE(kernels::vector_aligned(buf + 1, 1, 16));
  // A bool output of an f32 comparison: 4 bools per vector, 4-byte aligned.
  EXPECT_TRUE(kernels::vector_aligned(buf + 4, 1, 4));
  EXPECT_FALSE(kernels::vector_aligned(buf + 2, 1, 4));
}

// Simulates the flat kernel's two grid-stride loops (vectors, then the
// scalar tail) for a small grid and checks every element is written once.
void check_flat_coverage(int64_t n, int width, bool aligned, int64_t threads_total) {
  SCOPED_TRACE("n " + std::to_string(n) + " width " + std::to_string(width) +
               (aligned ? " aligned" : " unaligned"));
  const int64_t nvec = kernels::vector_body_count(n, width, aligned);
  if (!aligned) EXPECT_EQ(nvec, 0);
  if (aligned) EXPECT_EQ(nvec, n / width);
  EXPECT_LE(nvec * width, n);
  if (aligned) EXPECT_LT(n - nvec * width, width);  // the tail is shorter than a vector
  std::vector<int> hits(static_cast<size_t>(n), 0);
  for (int64_t start = 0; start < threads_total; ++start) {
    for (int64_t v = start; v < nvec; v += threads_total)
      for (int j = 0; j < width; ++j) ++hits[static_cast<size_t>(v * width + j)];
    for (int64_t i = nvec * width + start; i < n; i += threads_total) ++hits[static_cast<size_t>(i)];
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "element " << i;
}

TEST(FlatPath, VectorBodyAndTailCoverEveryElementOnce) {
  for (int width : {2, 4, 16})
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{15}, int64_t{16},
                      int64_t{17}, int64_t{1000}, int64_t{1000003}})
      for (bool aligned : {true, false})
        for (int64_t threads : {int64_t{1}, int64_t{5}, int64_t{256 * 3}})
          if (n < 5000 || threads > 1) check_flat_coverage(n, width, aligned, threads);
  EXPECT_EQ(kernels::vector_body_count(1000003, 4, true), 250000);
  EXPECT_EQ(kernels::vector_body_count(7, 4, true), 1);
  EXPECT_EQ(kernels::vector_body_count(1, 16, true), 0);
  EXPECT_EQ(kernels::vector_body_count(1000003, 4, false), 0);
  EXPECT_EQ(kernels::vector_body_count(0, 2, true), 0);
}

}  // namespace
}  // namespace spire
