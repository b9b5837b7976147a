// The gradient-bucketing helper the trainers share (dist/trainers/
// gradient_buckets.h): Horovod's fusion buckets (threshold, dtype breaks,
// unknown shapes, threshold 0), least-loaded bins (first bin on ties),
// pack/unpack and apply_packed round trips.
#include <gtest/gtest.h>

#include "core/ops.h"
#include "dist/trainers/gradient_buckets.h"
#include "tests/layers/layer_test_util.h"

namespace spire::testing {
namespace {

TEST(GradientBuckets, FusionBucketsFillUpToTheThresholdInOrder) {
  GraphEnv env;
  // f32 tensors of 16, 8, 24 and 4 bytes, then an f64 of 8 bytes.
  std::vector<Output> xs = {ops::placeholder(DType::F32, {4}, "a"), ops::placeholder(DType::F32, {2}, "b"),
                            ops::placeholder(DType::F32, {2, 3}, "c"), ops::placeholder(DType::F32, {1}, "d"),
                            ops::placeholder(DType::F64, {1}, "e")};
  const std::vector<size_t> forward = {0, 1, 2, 3, 4};
  EXPECT_EQ(fusion_buckets(xs, forward, 24), (Buckets{{0, 1}, {2}, {3}, {4}}));
  EXPECT_EQ(fusion_buckets(xs, forward, 1 << 20), (Buckets{{0, 1, 2, 3}, {4}}));  // the dtype breaks a bucket
  EXPECT_EQ(fusion_buckets(xs, {4, 3, 2, 1, 0}, 28), (Buckets{{4}, {3, 2}, {1, 0}}));  // visited in `order`
  EXPECT_EQ(fusion_buckets(xs, forward, 0), (Buckets{{0}, {1}, {2}, {3}, {4}}));
  // A tensor larger than the threshold gets a bucket of its own.
  EXPECT_EQ(fusion_buckets(xs, forward, 8), (Buckets{{0}, {1}, {2}, {3}, {4}}));
  // The first bucket has a cap of its own (PyTorch DDP's small first bucket).
  EXPECT_EQ(fusion_buckets(xs, forward, 1 << 20, 16), (Buckets{{0}, {1, 2, 3}, {4}}));
  EXPECT_EQ(fusion_buckets(xs, forward, 24, 1 << 20), (Buckets{{0, 1}, {2}, {3}, {4}}));  // never above the threshold
  EXPECT_EQ(fusion_buckets(xs, forward, 24, 0), (Buckets{{0}, {1}, {2}, {3}, {4}}));
  EXPECT_EQ(fusion_buckets(xs, forward, 28, 0), (Buckets{{0}, {1}, {2, 3}, {4}}));  // then 28 each
  expect_error([&] { fusion_buckets(xs, forward, -1); }, {"fusion_buckets", ">= 0"});
  // A tensor of unknown shape is never packed with another.
  std::vector<Output> ys = {xs[0], ops::placeholder(DType::F32, {-1}, "u"), xs[1], xs[3]};
  EXPECT_EQ(fusion_buckets(ys, {0, 1, 2, 3}, 1 << 20), (Buckets{{0}, {1}, {2, 3}}));
}

TEST(GradientBuckets, LeastLoadedBinsTakeTheFirstLeastLoaded) {
  LeastLoadedBins bins(3);
  EXPECT_EQ(bins.size(), 3u);
  EXPECT_EQ(bins.add(10), 0u);
  EXPECT_EQ(bins.add(4), 1u);
  EXPECT_EQ(bins.add(4), 2u);
  EXPECT_EQ(bins.add(1), 1u);  // 1 and 2 tie at 4: the first
  EXPECT_EQ(bins.add(7), 2u);
  EXPECT_EQ(bins.load(0), 10);
  EXPECT_EQ(bins.load(1), 5);
  EXPECT_EQ(bins.load(2), 11);
  expect_error([] { LeastLoadedBins none(0); }, {"no bins"});
}

TEST(GradientBuckets, PackAndUnpackRoundTrip) {
  GraphEnv env;
  Output a = ops::placeholder(DType::F64, {2, 2}, "a"), b = ops::placeholder(DType::F64, {3}, "b");
  Output flat = pack_flat({a, b});
  EXPECT_EQ(flat.shape(), Shape({7}));
  std::vector<Output> back = unpack_flat(flat, {a.shape(), b.shape()});
  ASSERT_EQ(back.size(), 2u);
  // apply_packed: one call for the bucket (here doubling), unpacked like the inputs.
  int calls = 0;
  std::vector<Output> doubled = apply_packed({a, b}, [&](const Output& x) {
    ++calls;
    return ops::mul(x, ops::scalar_like(2.0, x));
  });
  EXPECT_EQ(calls, 1);
  std::vector<Output> single = apply_packed({b}, [](const Output& x) { return ops::identity(x); });
  ASSERT_EQ(single.size(), 1u);
  EXPECT_EQ(single[0].node->op_type(), "Identity");  // one tensor is not packed
  FeedDict feeds = {{a, f64({2, 2}, {1, 2, 3, 4})}, {b, f64({3}, {5, 6, 7})}};
  std::vector<Tensor> got = run({flat, back[0], back[1], doubled[0], doubled[1]}, feeds);
  expect_tensor(got[0], {7}, {1, 2, 3, 4, 5, 6, 7}, 0);
  expect_tensor(got[1], {2, 2}, {1, 2, 3, 4}, 0);
  expect_tensor(got[2], {3}, {5, 6, 7}, 0);
  expect_tensor(got[3], {2, 2}, {2, 4, 6, 8}, 0);
  expect_tensor(got[4], {3}, {10, 12, 14}, 0);
}

}  // namespace
}  // namespace spire::testing
