// The order in which a distributed trainer's collectives are called
// (dist::ready_levels, dist::order_collectives): levels are the longest
// input chain (control inputs too), a cycle is an error naming a node, and
// on a synchronized-BatchNorm-like graph each gradient bucket is ordered
// before the BatchNorm gradients the backward pass reaches after it (not
// after all of them, as creation order would put it), the chain is
// acyclic and runs.
#include <algorithm>
#include <cstring>

#include "autograd/gradients.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using dist::ReduceOp;

TEST(CollectiveOrder, ReadyLevelsAreTheLongestInputChain) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F64, {2}, "a");
  Output b = ops::tanh(a);
  Output c = ops::exp(b);
  Output side = ops::placeholder(DType::F64, {2}, "side");
  Output d = ops::add(c, side);  // level 3 through c, not 1 through side
  Node* e = ops::group({}, "e", &g);
  e->add_control_input(d.node);
  const std::vector<int64_t> level = dist::ready_levels(g);
  EXPECT_EQ(level[static_cast<size_t>(a.node->id())], 0);
  EXPECT_EQ(level[static_cast<size_t>(side.node->id())], 0);
  EXPECT_EQ(level[static_cast<size_t>(b.node->id())], 1);
  EXPECT_EQ(level[static_cast<size_t>(c.node->id())], 2);
  EXPECT_EQ(level[static_cast<size_t>(d.node->id())], 3);
  EXPECT_EQ(level[static_cast<size_t>(e->id())], 4);  // a control input counts
  // A cycle (only control inputs can make one) is an error naming a node on it.
  b.node->add_control_input(e);
  expect_error([&] { dist::ready_levels(g); }, {"ready_levels", "cycle", "node '"});
}

TEST(CollectiveOrder, BucketsGoBeforeTheBatchNormGradientsTheBackwardPassReachesLater) {
  // x -> [w1] -> "BatchNorm" 1 (subtract the allreduced mean) -> [w2] -> "BatchNorm" 2 -> [w3]
  // -> loss; then one allreduce per gradient, made (as the trainer does) after the whole
  // backward pass, w3's first.
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {4, 3}, "x");
  Output w1 = ops::placeholder(DType::F64, {3, 3}, "w1"), w2 = ops::placeholder(DType::F64, {3, 3}, "w2"),
         w3 = ops::placeholder(DType::F64, {3, 2}, "w3");
  auto bn = [](const Output& h, const std::string& name) {
    dist::CollectiveOptions o;
    o.name = name;
    Output mean = dist::all_reduce({ops::mean(h, {0}, true)}, ReduceOp::kMean, o)[0];
    return ops::tanh(ops::sub(h, mean));
  };
  Output h1 = bn(ops::matmul(x, w1), "bn1");
  Output h2 = bn(ops::matmul(h1, w2), "bn2");
  Output loss = ops::sum(ops::square(ops::matmul(h2, w3)));
  const size_t before_backward = static_cast<size_t>(g.num_nodes());
  std::vector<Output> grads = gradients({loss}, {w1, w2, w3});
  std::vector<Node*> buckets(3);
  for (int i = 2; i >= 0; --i) {
    dist::CollectiveOptions o;
    o.name = str_cat("bucket_w", i + 1);
    buckets[static_cast<size_t>(i)] = dist::all_reduce({grads[static_cast<size_t>(i)]}, ReduceOp::kMean, o)[0].node;
  }
  const std::vector<Node*> made = dist::collective_nodes(g, "");
  // The BatchNorm gradients' allreduces (made by gradients(), bn2's first).
  std::vector<Node*> bn_grads;
  for (Node* n : made)
    if (static_cast<size_t>(n->id()) >= before_backward &&
        std::find(buckets.begin(), buckets.end(), n) == buckets.end())
      bn_grads.push_back(n);
  ASSERT_EQ(bn_grads.size(), 2u);
  ASSERT_EQ(made.size(), 7u);

  const std::vector<Node*> order = dist::order_collectives(made);
  ASSERT_EQ(order.size(), made.size());
  auto at = [&](const Node* n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
  std::string listed;
  for (const Node* n : order) listed += n->name() + " ";
  // The forward pass's allreduces first; then w3's bucket before bn2's gradient (it exists
  // once the loss's gradient reaches h2), w2's before bn1's gradient; w1's last.
  EXPECT_EQ(at(g.find_node("bn1")), 0) << listed;
  EXPECT_EQ(at(g.find_node("bn2")), 1) << listed;
  EXPECT_LT(at(buckets[2]), at(bn_grads[0])) << listed;
  EXPECT_LT(at(bn_grads[0]), at(buckets[1])) << listed;
  EXPECT_LT(at(buckets[1]), at(bn_grads[1])) << listed;
  EXPECT_LT(at(bn_grads[1]), at(buckets[0])) << listed;
  // A chain: each waits for the one before.
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& deps = order[i]->control_inputs();
    EXPECT_NE(std::find(deps.begin(), deps.end(), order[i - 1]), deps.end()) << order[i]->name();
  }
  // Acyclic, and it runs: the reduced gradients (one participant) are the gradients.
  std::mt19937_64 rng(5);
  FeedDict feeds{{x, random_tensor(DType::F64, {4, 3}, rng)},
                 {w1, random_tensor(DType::F64, {3, 3}, rng)},
                 {w2, random_tensor(DType::F64, {3, 3}, rng)},
                 {w3, random_tensor(DType::F64, {3, 2}, rng)}};
  Session s(g);
  std::vector<Tensor> got = s.run({grads[0], buckets[0]->output(0), grads[2], buckets[2]->output(0)}, feeds);
  for (size_t i : {0u, 2u}) {
    ASSERT_EQ(got[i + 1].shape(), got[i].shape());
    EXPECT_EQ(std::memcmp(got[i + 1].raw_data(), got[i].raw_data(), got[i].nbytes()), 0);
  }
}

TEST(CollectiveOrder, ABucketIsReadyWithItsGradientsNotItsPacking) {
  // Gradient a (level 1) packed with b (level 1) through Reshape + Concat, and gradient c
  // (level 2) alone: by the allreduces' own levels the packed bucket (level 4) would come after
  // c's (level 3); ready with their gradients, it comes first.
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {3}, "x");
  Output a = ops::tanh(x), b = ops::exp(x), c = ops::tanh(ops::exp(x));
  Output packed = ops::concat({ops::reshape(a, Shape{3}), ops::reshape(b, Shape{3})}, 0, "pack");
  Node* ab = dist::all_reduce({packed})[0].node;
  Node* alone = dist::all_reduce({c})[0].node;
  const std::vector<int64_t> level = dist::ready_levels(g);
  ASSERT_GT(level[static_cast<size_t>(ab->id())], level[static_cast<size_t>(alone->id())]);
  const std::vector<Node*> order = dist::order_collectives({ab, alone}, {{ab, {a.node, b.node}}});
  EXPECT_EQ(order, (std::vector<Node*>{ab, alone}));
  // Errors: a node given twice (it would wait for itself), a node of another graph.
  expect_error([&] { dist::order_collectives({alone, alone}); }, {"order_collectives", "given twice"});
  Graph other;
  Node* elsewhere = nullptr;
  {
    DefaultGraphGuard g2(other);
    elsewhere = dist::all_reduce({ops::placeholder(DType::F64, {2}, "y")})[0].node;
  }
  expect_error([&] { dist::order_collectives({alone, elsewhere}); }, {"order_collectives", "another graph"});
}

}  // namespace
}  // namespace spire::testing
