// Epilogue fusion (core/fusion.h, SessionOptions::fuse_epilogues): a Conv2D, MatMul or
// MaxPoolGrad whose only readers are elementwise nodes runs as FusedConv2D / FusedMatMul /
// FusedMaxPoolGrad, the elementwise group applied to each block of the product as it is
// finished (a GEMM block, a share of images). Fused plans give the unfused
// graph's results bit for bit (bias + activation, residual adds, random expressions with row,
// column, scalar and full inputs, results that broadcast beyond the product, the fixed
// rule's convolution algorithms, one and two threads, f32 and f64; with the algorithm search,
// equal to rounding), and a product that something
// else reads, a fetched product or a switched-off pass keeps its own step.
#include <cmath>
#include <random>

#include "tests/support/fusion_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

SessionOptions epilogues(bool on, int threads = 1, bool measure = false) {
  SessionOptions o;
  o.fuse_epilogues = on;
  o.num_threads = threads;
  o.measure_conv_algorithms = measure;
  return o;
}

// Runs `y` fused and unfused; expects equal bits and `op` among the fused run's steps
// (`expect_fused`) or not. Returns the fused result.
Tensor expect_same_bits(Graph& g, const Output& y, const FeedDict& feeds, const std::string& op,
                        bool expect_fused, int threads = 1) {
  Session off(g, epilogues(false, threads)), on(g, epilogues(true, threads));
  Tensor want = off.run({y}, feeds)[0];
  StepStats st;
  Tensor got = on.run({y}, feeds, {}, &st)[0];
  EXPECT_TRUE(bit_equal(want, got)) << op << ", " << threads << " threads:\n" << g.to_text();
  EXPECT_EQ(op_types(st).count(op), expect_fused ? 1u : 0u) << g.to_text();
  return got;
}

// The epilogues both tests use on a product p of shape [.., C] (C = last dim): a bias and an
// activation, a residual add and a ReLU, a bias alone, and a random expression.
enum class Tail { kBiasRelu, kResidualRelu, kBias, kRandom };

Output tail(Tail t, const Output& p, DType dt, int64_t channels, const Shape& full, std::mt19937_64& rng,
            FeedDict* feeds) {
  Output bias = ops::placeholder(dt, {channels}, "bias");
  feeds->emplace_back(bias, random_tensor(dt, {channels}, rng, -1, 1));
  switch (t) {
    case Tail::kBiasRelu: return ops::relu(ops::add(p, bias), "out");
    case Tail::kBias: return ops::add(p, bias, "out");
    case Tail::kResidualRelu: {
      Output r = ops::placeholder(dt, full, "residual");
      feeds->emplace_back(r, random_tensor(dt, full, rng, -1, 1));
      return ops::relu(ops::add(r, p), "out");
    }
    default: {
      Output s = ops::placeholder(dt, {}, "scalar");
      feeds->emplace_back(s, random_tensor(dt, {}, rng, -1, 1));
      Output e = random_expression(rng, {p, bias, s, p}, 3);
      return ops::add(ops::tanh(p), e, "out");  // reads the product whatever e picked
    }
  }
}

struct ConvCase {
  int64_t n, h, w, c, o, k, stride;
  const char* padding;
};

SPIRE_FORWARD_TEST(FusedConv2D, EpiloguesEqualTheUnfusedGraphBitForBit) {
  std::mt19937_64 rng(20261128);
  // Direct-kernel shapes (stride 1, whole vectors of filters; the last one with rows so wide
  // that each image is several bands, split over two threads), im2col shapes (stride 2, 5
  // filters), a 1x1, and a batch of one.
  const ConvCase cases[] = {{3, 9, 9, 8, 16, 3, 1, "SAME"},  {5, 11, 7, 3, 5, 3, 2, "VALID"},
                            {4, 6, 6, 8, 8, 1, 1, "VALID"},  {1, 12, 12, 4, 24, 3, 1, "SAME"},
                            {2, 12, 300, 16, 8, 3, 1, "SAME"}};
  int trial = 0;
  for (DType dt : {DType::F32, DType::F64})
    for (const ConvCase& cc : cases)
      for (Tail t : {Tail::kBiasRelu, Tail::kResidualRelu, Tail::kBias, Tail::kRandom}) {
        Graph g;
        DefaultGraphGuard guard(g);
        Output x = ops::placeholder(dt, {-1, cc.h, cc.w, cc.c}, "x");
        Output f = ops::placeholder(dt, {cc.k, cc.k, cc.c, cc.o}, "f");
        Output p = ops::conv2d(x, f, {cc.stride, cc.stride}, cc.padding, {1, 1}, "conv");
        FeedDict feeds = {{x, random_tensor(dt, {cc.n, cc.h, cc.w, cc.c}, rng, -1, 1)},
                          {f, random_tensor(dt, {cc.k, cc.k, cc.c, cc.o}, rng, -1, 1)}};
        const int64_t oh = std::string(cc.padding) == "SAME" ? (cc.h + cc.stride - 1) / cc.stride
                                                             : (cc.h - cc.k) / cc.stride + 1;
        const int64_t ow = std::string(cc.padding) == "SAME" ? (cc.w + cc.stride - 1) / cc.stride
                                                             : (cc.w - cc.k) / cc.stride + 1;
        Output y = tail(t, p, dt, cc.o, {cc.n, oh, ow, cc.o}, rng, &feeds);
        const int threads = 1 + trial % 2;
        expect_same_bits(g, y, feeds, "FusedConv2D", true, threads);
        ++trial;
      }
}

SPIRE_FORWARD_TEST(FusedMatMul, EpiloguesEqualTheUnfusedGraphBitForBit) {
  std::mt19937_64 rng(7);
  struct MatMulCase {
    int64_t m, n, k;
    bool ta, tb;
  };
  // Threaded splits along m and along n, edge tiles, matrix-vector products and k = 0.
  const MatMulCase cases[] = {{300, 70, 64, false, false}, {37, 500, 33, true, false},
                              {129, 65, 300, false, true}, {5, 3, 7, true, true},
                              {1, 40, 16, false, false},   {40, 1, 16, false, true},
                              {6, 9, 0, false, false},     {64, 2048, 32, false, false},
                              {8, 4200, 16, true, false}};
  int trial = 0;
  for (DType dt : {DType::F32, DType::F64})
    for (const MatMulCase& mc : cases)
      for (Tail t : {Tail::kBiasRelu, Tail::kResidualRelu, Tail::kBias, Tail::kRandom}) {
        Graph g;
        DefaultGraphGuard guard(g);
        const Shape as = mc.ta ? Shape{mc.k, mc.m} : Shape{mc.m, mc.k};
        const Shape bs = mc.tb ? Shape{mc.n, mc.k} : Shape{mc.k, mc.n};
        Output a = ops::placeholder(dt, as, "a");
        Output b = ops::placeholder(dt, bs, "b");
        Output p = ops::matmul(a, b, mc.ta, mc.tb);
        FeedDict feeds = {{a, random_tensor(dt, as, rng, -1, 1)}, {b, random_tensor(dt, bs, rng, -1, 1)}};
        Output y = tail(t, p, dt, mc.n, {mc.m, mc.n}, rng, &feeds);
        expect_same_bits(g, y, feeds, "FusedMatMul", true, 1 + trial % 2);
        ++trial;
      }
}

SPIRE_FORWARD_TEST(FusedMaxPoolGrad, EpiloguesEqualTheUnfusedGraphBitForBit) {
  std::mt19937_64 rng(13);
  struct PoolCase {
    int64_t n, h, w, c, k, stride;
    const char* padding;
  };
  // Windows that tile the input (stores), overlapping SAME windows (accumulates), odd VALID.
  const PoolCase cases[] = {{4, 8, 8, 16, 2, 2, "VALID"}, {3, 9, 7, 5, 3, 2, "SAME"}, {2, 7, 7, 8, 2, 2, "VALID"}};
  int trial = 0;
  for (DType dt : {DType::F32, DType::F64})
    for (const PoolCase& pc : cases)
      for (Tail t : {Tail::kBiasRelu, Tail::kResidualRelu, Tail::kBias, Tail::kRandom}) {
        Graph g;
        DefaultGraphGuard guard(g);
        const Shape xs{pc.n, pc.h, pc.w, pc.c};
        Output x = ops::placeholder(dt, xs, "x");
        Output y = ops::max_pool(x, {pc.k, pc.k}, {pc.stride, pc.stride}, pc.padding);
        Output dy = ops::placeholder(dt, y.shape(), "dy");
        // Random x with ties (values on a coarse grid) so first-maximum routing matters.
        Tensor xv = random_tensor(dt, xs, rng, -4, 4);
        for (int64_t i = 0; i < xv.num_elements(); ++i) {
          if (dt == DType::F32) xv.data<float>()[i] = std::round(xv.data<float>()[i]);
          else xv.data<double>()[i] = std::round(xv.data<double>()[i]);
        }
        Output p = ops::max_pool_grad(x, y, dy, {pc.k, pc.k}, {pc.stride, pc.stride}, pc.padding);
        FeedDict feeds = {{x, xv}, {dy, random_tensor(dt, y.shape(), rng, -1, 1)}};
        Output out = tail(t, p, dt, pc.c, xs, rng, &feeds);
        expect_same_bits(g, out, feeds, "FusedMaxPoolGrad", true, 1 + trial % 2);
        ++trial;
      }
}

// BatchNorm at inference (layers/batch_norm.cc: (x - mean) * rsqrt(var + eps) * gamma + beta,
// the layer's Identity, then the activation) becomes the convolution's epilogue.
TEST(EpilogueFusion, ConvolutionBatchNormInferenceAndReluAreOneStep) {
  std::mt19937_64 rng(17);
  for (DType dt : {DType::F32, DType::F64}) {
    Graph g;
    DefaultGraphGuard guard(g);
    Output x = ops::placeholder(dt, {3, 10, 10, 8}, "x");
    Output w = ops::placeholder(dt, {3, 3, 8, 16}, "w");
    std::vector<Output> params;
    FeedDict feeds = {{x, random_tensor(dt, {3, 10, 10, 8}, rng, -1, 1)},
                      {w, random_tensor(dt, {3, 3, 8, 16}, rng, -1, 1)}};
    for (const char* name : {"mean", "var", "gamma", "beta"}) {
      params.push_back(ops::placeholder(dt, {16}, name));
      feeds.emplace_back(params.back(), random_tensor(dt, {16}, rng, 0.5, 1.5));
    }
    Output conv = ops::conv2d(x, w, {1, 1}, "SAME", {1, 1}, "conv");
    Output inv = ops::rsqrt(params[1] + 1e-5) * params[2];
    Output bn = ops::identity((conv - params[0]) * inv + params[3], "bn/output");
    Output y = ops::relu(bn, "relu");
    expect_same_bits(g, y, feeds, "FusedConv2D", true);
    Session s(g, epilogues(true));
    EXPECT_EQ(s.plan_text({y}, feeds), "cpu: Const, relu\n") << "one step after the epsilon";
  }
}

// With the algorithm search on, each session times its own candidates, so a fused and an
// unfused session may keep different algorithms (which round differently): their results
// agree to rounding, and each session's later runs repeat its first bit for bit.
TEST(EpilogueFusion, MeasuredConvolutionsTakeTheEpilogueWhicheverAlgorithmWins) {
  std::mt19937_64 rng(19);
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {4, 12, 12, 16}, "x");
  Output w = ops::placeholder(DType::F32, {3, 3, 16, 16}, "w");
  Output bias = ops::placeholder(DType::F32, {16}, "bias");
  Output y = ops::relu(ops::add(ops::conv2d(x, w, {1, 1}, "SAME", {1, 1}, "conv"), bias), "y");
  FeedDict feeds = {{x, random_tensor(DType::F32, {4, 12, 12, 16}, rng, -1, 1)},
                    {w, random_tensor(DType::F32, {3, 3, 16, 16}, rng, -1, 1)},
                    {bias, random_tensor(DType::F32, {16}, rng, -1, 1)}};
  Session on(g, epilogues(true, 2, /*measure=*/true)), off(g, epilogues(false, 2));
  StepStats st;
  Tensor first = on.run({y}, feeds, {}, &st)[0];
  EXPECT_EQ(op_types(st).count("FusedConv2D"), 1u);
  Tensor again = on.run({y}, feeds)[0];
  EXPECT_TRUE(bit_equal(first, again)) << "the first run returned another algorithm's result than it kept";
  Tensor want = off.run({y}, feeds)[0];
  const float* a = first.data<float>();
  const float* b = want.data<float>();
  for (int64_t i = 0; i < first.num_elements(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << i;
}

TEST(EpilogueFusion, AResultThatBroadcastsBeyondTheProductIsComputedFromATemporary) {
  std::mt19937_64 rng(3);
  for (int threads : {1, 2}) {
    Graph g;
    DefaultGraphGuard guard(g);
    Output a = ops::placeholder(DType::F32, {64, 48}, "a");
    Output b = ops::placeholder(DType::F32, {48, 80}, "b");
    Output wide = ops::placeholder(DType::F32, {3, 64, 80}, "wide");
    Output y = ops::relu(ops::add(ops::matmul(a, b), wide), "out");  // [3, 64, 80]
    FeedDict feeds = {{a, random_tensor(DType::F32, {64, 48}, rng, -1, 1)},
                      {b, random_tensor(DType::F32, {48, 80}, rng, -1, 1)},
                      {wide, random_tensor(DType::F32, {3, 64, 80}, rng, -1, 1)}};
    Tensor got = expect_same_bits(g, y, feeds, "FusedMatMul", true, threads);
    EXPECT_EQ(got.shape(), (Shape{3, 64, 80}));
  }
}

// Shapes of one GEMM block and of several (rows, columns and k blocks of both bf16 kernels),
// on 1 and 3 threads.
TEST(EpilogueFusion, MixedPrecisionProductsTakeTheEpilogueAfterRounding) {
  struct Dims { int64_t m, k, n; };
  for (const Dims& d : {Dims{33, 40, 17}, Dims{300, 700, 600}})
    for (int threads : {1, 3}) {
      std::mt19937_64 rng(5);
      Graph g;
      DefaultGraphGuard guard(g);
      Output a = ops::placeholder(DType::F32, {d.m, d.k}, "a");
      Output b = ops::placeholder(DType::F32, {d.k, d.n}, "b");
      Output bias = ops::placeholder(DType::F32, {d.n}, "bias");
      Output y = ops::gelu(ops::add(ops::matmul(a, b, false, false, DType::BF16), bias),
                           ops::GeluApproximate::kNone, "out");
      FeedDict feeds = {{a, random_tensor(DType::F32, {d.m, d.k}, rng, -1, 1)},
                        {b, random_tensor(DType::F32, {d.k, d.n}, rng, -1, 1)},
                        {bias, random_tensor(DType::F32, {d.n}, rng, -1, 1)}};
      expect_same_bits(g, y, feeds, "FusedMatMul", true, threads);
    }
}

TEST(EpilogueFusion, AProductReadElsewhereFetchedOrSwitchedOffKeepsItsStep) {
  std::mt19937_64 rng(11);
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 8, 8, 4}, "x");
  Output f = ops::placeholder(DType::F32, {3, 3, 4, 8}, "f");
  Output bias = ops::placeholder(DType::F32, {8}, "bias");
  Output p = ops::conv2d(x, f, {1, 1}, "SAME", {1, 1}, "conv");
  Output y = ops::relu(ops::add(p, bias, "add"), "y");
  Output other = ops::sum(p, {0, 1, 2, 3}, false, "other");  // a second, non-elementwise reader
  FeedDict feeds = {{x, random_tensor(DType::F32, {2, 8, 8, 4}, rng, -1, 1)},
                    {f, random_tensor(DType::F32, {3, 3, 4, 8}, rng, -1, 1)},
                    {bias, random_tensor(DType::F32, {8}, rng, -1, 1)}};
  Session s(g, epilogues(true));
  StepStats st;
  s.run({y, other}, feeds, {}, &st);
  EXPECT_EQ(op_types(st).count("FusedConv2D"), 0u);
  EXPECT_EQ(op_types(st).count("Conv2D"), 1u);
  // Fetched: the product must be seen as itself.
  st = {};
  s.run({y, p}, feeds, {}, &st);
  EXPECT_EQ(op_types(st).count("FusedConv2D"), 0u);
  // Alone: it fuses, and the step is named after the group's last node.
  st = {};
  s.run({y}, feeds, {}, &st);
  EXPECT_EQ(op_types(st).count("FusedConv2D"), 1u);
  EXPECT_EQ(s.plan_text({y}, feeds), "cpu: y\n");
  // Switched off (or with elementwise fusion off): no epilogue.
  Session off(g, epilogues(false));
  EXPECT_EQ(off.plan_text({y}, feeds), "cpu: conv, y\n") << "the elementwise group still fuses";
  st = {};
  off.run({y}, feeds, {}, &st);
  EXPECT_EQ(op_types(st).count("FusedConv2D"), 0u);
  SessionOptions no_elementwise = epilogues(true);
  no_elementwise.fuse_elementwise = false;
  Session plain(g, no_elementwise);
  EXPECT_EQ(plain.plan_text({y}, feeds), "cpu: conv, add, y\n");
}

// Identity computes nothing (its kernel hands its input on): a product read only by Identity
// nodes keeps its own step, with no epilogue pass over it; within a group that computes,
// Identity still joins.
TEST(EpilogueFusion, IdentityAloneIsNoEpilogue) {
  std::mt19937_64 rng(12);
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {5, 7}, "a");
  Output b = ops::placeholder(DType::F32, {7, 3}, "b");
  Output p = ops::matmul(a, b, false, false, "mm");
  Output y = ops::identity(ops::identity(p, "id1"), "y");
  Output q = ops::matmul(b, a, true, true, "mm2");
  Output z = ops::relu(ops::identity(q, "id2"), "z");
  FeedDict feeds = {{a, random_tensor(DType::F32, {5, 7}, rng, -1, 1)},
                    {b, random_tensor(DType::F32, {7, 3}, rng, -1, 1)}};
  Session s(g, epilogues(true));
  EXPECT_EQ(s.plan_text({y}, feeds), "cpu: mm, id1, y\n");
  EXPECT_EQ(s.plan_text({z}, feeds), "cpu: z\n");
  expect_same_bits(g, y, feeds, "FusedMatMul", false);
  expect_same_bits(g, z, feeds, "FusedMatMul", true);
}

TEST(EpilogueFusion, AShapeErrorInTheEpilogueNamesItsNode) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {-1, 4}, "a");
  Output b = ops::placeholder(DType::F32, {4, 6}, "b");
  Output r = ops::placeholder(DType::F32, {-1, 6}, "r");
  Output y = ops::tanh(ops::add(ops::matmul(a, b), r, "bad_add"), "out");
  Session s(g, epilogues(true));
  expect_error([&] {
    s.run({y}, {{a, Tensor::full(DType::F32, {3, 4}, 1.0)}, {b, Tensor::full(DType::F32, {4, 6}, 1.0)},
                {r, Tensor::full(DType::F32, {5, 6}, 1.0)}});
  }, {"bad_add", "[3, 6]", "[5, 6]", "do not broadcast"});
}

TEST(EpilogueFusion, AProductErrorNamesTheProductNode) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {-1, -1}, "a");
  Output b = ops::placeholder(DType::F32, {-1, 6}, "b");
  Output y = ops::relu(ops::matmul(a, b, false, false, "the_matmul"), "out");
  Session s(g, epilogues(true));
  expect_error([&] {
    s.run({y}, {{a, Tensor::full(DType::F32, {3, 4}, 1.0)}, {b, Tensor::full(DType::F32, {5, 6}, 1.0)}});
  }, {"the_matmul", "FusedMatMul"});
}

TEST(EpilogueFusion, EnvironmentSwitch) {
  Graph g;
  ::setenv("SPIRE_FUSE_EPILOGUES", "0", 1);
  EXPECT_FALSE(Session(g).options().fuse_epilogues);
  ::setenv("SPIRE_FUSE_EPILOGUES", "1", 1);
  EXPECT_TRUE(Session(g, epilogues(false)).options().fuse_epilogues);
  ::unsetenv("SPIRE_FUSE_EPILOGUES");
}

}  // namespace
}  // namespace spire::testing
