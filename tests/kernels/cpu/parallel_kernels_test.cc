// Multithreaded CPU kernels agree with one thread: a small conv + pool +
// matmul + softmax cross-entropy graph with its gradients, plus elementwise
// ops, reductions, batch matmul and a direct threaded GEMM, run in Sessions
// with num_threads 1, 2 and 3. Outputs whose summation order does not depend
// on the split (elementwise, matmul, conv forward / input gradient, pooling,
// softmax, reductions over kept outer dims) must match exactly; the rest
// (filter gradient, reductions over the outer dim) within 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/ops/op_util.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "spire.h"

namespace spire {
namespace {

Tensor random_tensor(DType dt, const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor t(dt, s);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (dt == DType::F32) t.data<float>()[i] = static_cast<float>(u(rng));
    else t.data<double>()[i] = u(rng);
  }
  return t;
}

template <typename T>
void expect_same(const Tensor& a, const Tensor& b, bool exact, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    if (exact) {
      ASSERT_EQ(pa[i], pb[i]) << what << " differs at " << i;
    } else {
      const double scale = std::max(1.0, std::abs(static_cast<double>(pa[i])));
      ASSERT_NEAR(pa[i], pb[i], 1e-5 * scale) << what << " differs at " << i;
    }
  }
}

struct Case {
  std::string name;
  Output out;
  bool exact;
};

void run_and_compare(Graph& g, const std::vector<Case>& cases, const FeedDict& feeds) {
  std::vector<Output> fetches;
  for (const auto& c : cases) fetches.push_back(c.out);
  // Two runs each (random ops draw fresh numbers on the second one).
  Session ref(g);
  std::vector<std::vector<Tensor>> wants = {ref.run(fetches, feeds), ref.run(fetches, feeds)};
  for (int threads : {2, 3}) {
    SessionOptions opts;
    opts.num_threads = threads;
    Session s(g, opts);
    for (int rep = 0; rep < 2; ++rep) {
      const std::vector<Tensor>& want = wants[static_cast<size_t>(rep)];
      std::vector<Tensor> got = s.run(fetches, feeds);
      for (size_t i = 0; i < cases.size(); ++i) {
        const std::string what = cases[i].name + " (" + std::to_string(threads) + " threads)";
        if (want[i].dtype() == DType::F32) expect_same<float>(want[i], got[i], cases[i].exact, what);
        else if (want[i].dtype() == DType::F64) expect_same<double>(want[i], got[i], cases[i].exact, what);
        else FAIL() << what << ": unexpected dtype";
      }
    }
  }
}

TEST(ParallelKernelsTest, ConvPoolMatmulXentGraphAgrees) {
  for (DType dt : {DType::F32, DType::F64}) {
    Graph g;
    DefaultGraphGuard guard(g);
    const int64_t n = 24;
    Output x = ops::placeholder(dt, {n, 16, 16, 3}, "x");
    Output w = ops::placeholder(dt, {3, 3, 3, 16}, "w");
    Output fc = ops::placeholder(dt, {8 * 8 * 16, 10}, "fc");
    Output labels = ops::placeholder(DType::I32, {n}, "labels");
    Output conv = ops::conv2d(x, w, {1, 1}, "SAME");
    Output act = ops::relu(conv);
    Output pool = ops::max_pool(act, {2, 2}, {2, 2}, "VALID");
    Output flat = ops::reshape(pool, {n, 8 * 8 * 16});
    Output logits = ops::matmul(flat, fc);
    Output xent = ops::sparse_softmax_cross_entropy_with_logits(logits, labels);
    Output loss = ops::mean(xent);
    std::vector<Output> grads = gradients({loss}, {x, w, fc});
    Output conv_valid = ops::conv2d(x, w, {2, 2}, "VALID");
    Output dx_strided = ops::conv2d_backprop_input(x, w, ops::ones_like(conv_valid), {2, 2},
                                                   "VALID", {1, 1});
    std::vector<Case> cases = {
        {"conv", conv, true},
        {"relu", act, true},
        {"maxpool", pool, true},
        {"logits", logits, true},
        {"softmax", ops::softmax(logits), true},
        {"xent", xent, true},
        {"loss", loss, false},
        {"dx", grads[0], false},
        {"dw", grads[1], false},
        {"dfc", grads[2], false},
        {"conv_valid_strided", conv_valid, true},
        {"dx_strided", dx_strided, true},
        {"sum_axis0", ops::sum(conv, {0}), false},
        {"sum_inner", ops::sum(conv, {1, 2, 3}), true},
        {"sum_all", ops::sum(conv), false},
        {"max_all", ops::max(conv), true},
        {"mean_channels", ops::mean(conv, {0, 1, 2}), false},
    };
    std::mt19937 rng(3);
    Tensor lab(DType::I32, {n});
    for (int64_t i = 0; i < n; ++i) lab.data<int32_t>()[i] = static_cast<int32_t>(rng() % 10);
    FeedDict feeds = {{x, random_tensor(dt, {n, 16, 16, 3}, 1)},
                      {w, random_tensor(dt, {3, 3, 3, 16}, 2)},
                      {fc, random_tensor(dt, {8 * 8 * 16, 10}, 3)},
                      {labels, lab}};
    SCOPED_TRACE(dtype_name(dt));
    run_and_compare(g, cases, feeds);
  }
}

TEST(ParallelKernelsTest, ElementwiseBroadcastAndReductionsAgree) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {64, 40, 33}, "a");
  Output b = ops::placeholder(DType::F32, {40, 1}, "b");
  Output c = ops::placeholder(DType::F32, {64, 40, 33}, "c");
  Output big = ops::placeholder(DType::F32, {300001}, "big");
  Output bias = ops::placeholder(DType::F32, {33}, "bias");
  Output row_bias = ops::placeholder(DType::F32, {40, 1}, "row_bias");
  std::vector<Case> cases = {
      {"sum_to_like_bias", ops::sum_to_like(a, bias), false},
      {"sum_to_like_rows", ops::sum_to_like(a, row_bias), false},
      {"broadcast_like", ops::broadcast_like(b, a), true},
      {"add_full", a + c, true},
      {"mul_broadcast", a * b, true},
      {"mul_scalar", a * 0.5, true},
      {"exp", ops::exp(a), true},
      {"cast", ops::cast(ops::greater(a, c), DType::F32), true},
      {"select", ops::select(ops::greater(a, c), a, c), true},
      {"addn", ops::add_n({a, c, a}), true},
      {"sum_last", ops::sum(a, {2}), true},
      {"sum_middle", ops::sum(a, {1}), true},
      {"sum_first", ops::sum(a, {0}), false},
      {"sum_big", ops::sum(big), false},
      {"mean_big", ops::mean(big), false},
      {"max_big", ops::max(big), true},
      {"log_softmax_mid", ops::log_softmax(a, 1), true},
      {"dropout", ops::dropout(a, 0.5, 7), true},
      {"gelu", ops::gelu(a), true},
      {"gelu_grad", ops::gelu_grad(c, a), true},
      {"gelu_grad_big", ops::gelu_grad(big, big), true},
      {"bf16_round_trip", ops::cast(ops::cast(a, DType::BF16), DType::F32), true},
  };
  FeedDict feeds = {{a, random_tensor(DType::F32, {64, 40, 33}, 4)},
                    {b, random_tensor(DType::F32, {40, 1}, 5)},
                    {c, random_tensor(DType::F32, {64, 40, 33}, 6)},
                    {big, random_tensor(DType::F32, {300001}, 7)},
                    {bias, random_tensor(DType::F32, {33}, 13)},
                    {row_bias, random_tensor(DType::F32, {40, 1}, 14)}};
  run_and_compare(g, cases, feeds);
}

TEST(ParallelKernelsTest, MatmulAndBatchMatmulAgreeExactly) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {300, 200}, "a");
  Output b = ops::placeholder(DType::F32, {200, 260}, "b");
  Output ba = ops::placeholder(DType::F32, {16, 40, 50}, "ba");
  Output bb = ops::placeholder(DType::F32, {16, 50, 30}, "bb");
  Output big_a = ops::placeholder(DType::F32, {2, 200, 300}, "big_a");
  std::vector<Case> cases = {
      {"matmul", ops::matmul(a, b), true},
      {"matmul_ta", ops::matmul(b, b, true, false), true},
      {"matmul_tb", ops::matmul(a, a, false, true), true},
      {"batch_matmul_small", ops::batch_matmul(ba, bb), true},
      {"batch_matmul_big", ops::batch_matmul(big_a, a, true, true), true},
      {"batch_matmul_shared_b", ops::batch_matmul(big_a, b, true), true},
  };
  FeedDict feeds = {{a, random_tensor(DType::F32, {300, 200}, 8)},
                    {b, random_tensor(DType::F32, {200, 260}, 9)},
                    {ba, random_tensor(DType::F32, {16, 40, 50}, 10)},
                    {bb, random_tensor(DType::F32, {16, 50, 30}, 11)},
                    {big_a, random_tensor(DType::F32, {2, 200, 300}, 12)}};
  run_and_compare(g, cases, feeds);
}

TEST(ParallelKernelsTest, ThreadedGemmIsBitwiseIdentical) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{513, 70, 300},
                           {70, 1000, 129},
                           {1, 4000, 400},
                           {4000, 1, 400},
                           {100352, 32, 9},
                           {9, 32, 20000},
                           // A last part of one column / row (the whole is no GEMV).
                           {64, 65, 512},
                           {97, 40, 600}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          std::vector<float> A(static_cast<size_t>(m * k)), B(static_cast<size_t>(k * n));
          for (auto& v : A) v = u(rng);
          for (auto& v : B) v = u(rng);
          std::vector<float> c1(static_cast<size_t>(m * n), 0.25f), c2 = c1;
          const int64_t lda = ta ? m : k, ldb = tb ? k : n;
          cpu::gemm(ta, tb, m, n, k, 1.0f, A.data(), lda, B.data(), ldb, 0.5f, c1.data(), n);
          cpu::gemm(ta, tb, m, n, k, 1.0f, A.data(), lda, B.data(), ldb, 0.5f, c2.data(), n, &pool);
          ASSERT_EQ(c1, c2) << m << "x" << n << "x" << k << " ta=" << ta << " tb=" << tb
                            << " threads=" << threads;
        }
      }
    }
  }
}

TEST(ParallelKernelsTest, KernelErrorsInsideChunksPropagate) {
  Graph g;
  DefaultGraphGuard guard(g);
  const int64_t n = 5000;
  Output logits = ops::placeholder(DType::F32, {n, 10}, "logits");
  Output labels = ops::placeholder(DType::I32, {n}, "labels");
  Output xent = ops::sparse_softmax_cross_entropy_with_logits(logits, labels);
  Tensor lab(DType::I32, {n});
  for (int64_t i = 0; i < n; ++i) lab.data<int32_t>()[i] = i == n - 3 ? 11 : 1;
  SessionOptions opts;
  opts.num_threads = 2;
  Session s(g, opts);
  try {
    s.run({xent}, {{logits, random_tensor(DType::F32, {n, 10}, 1)}, {labels, lab}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 11"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spire
