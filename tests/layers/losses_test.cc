// Tests of layers/losses.h: softmax_cross_entropy with label smoothing against
// its definition -sum_j q_j log p_j (q = onehot * (1 - e) + e / K), its gradient
// softmax - q, the unsmoothed case being the sparse op itself, bad smoothing
// values; prediction_incorrect's top-1 / top-k vectors.
#include "layers/losses.h"

#include <cmath>

#include "tests/layers/layer_test_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

const std::vector<double> kLogits = {1.5, -0.5, 0.25, 3.0, 2.0, -1.0};  // [2, 3]
const std::vector<double> kLabels = {2, 0};

// Softmax of row r of kLogits.
std::vector<double> softmax_row(int r) {
  std::vector<double> p(3);
  double s = 0;
  for (int j = 0; j < 3; ++j) s += p[j] = std::exp(kLogits[r * 3 + j]);
  for (double& v : p) v /= s;
  return p;
}

TEST(Losses, SmoothedCrossEntropyMatchesItsDefinitionAndGradient) {
  for (double e : {0.0, 0.1, 1.0}) {
    GraphEnv env;
    Output logits = ops::constant(f64({2, 3}, kLogits));
    Output labels = ops::constant(Tensor::from_vector<int64_t>({2}, {2, 0}));
    Output loss = softmax_cross_entropy(logits, labels, e, "xent");
    EXPECT_EQ(loss.shape(), Shape({2}));
    Output grad = gradients({ops::sum(loss)}, {logits})[0];
    std::vector<Tensor> got = run({loss, grad});
    std::vector<double> want_loss, want_grad;
    for (int r = 0; r < 2; ++r) {
      std::vector<double> p = softmax_row(r);
      double l = 0;
      for (int j = 0; j < 3; ++j) {
        const double q = (j == kLabels[r] ? 1.0 - e : 0.0) + e / 3;
        l -= q * std::log(p[j]);
        want_grad.push_back(p[j] - q);
      }
      want_loss.push_back(l);
    }
    expect_tensor(got[0], {2}, want_loss, 1e-12);
    expect_tensor(got[1], {2, 3}, want_grad, 1e-12);
  }
}

TEST(Losses, UnsmoothedIsTheSparseOpAndBadSmoothingFails) {
  GraphEnv env;
  Output logits = ops::placeholder(DType::F32, {-1, 10}, "logits");
  Output labels = ops::placeholder(DType::I32, {-1}, "labels");
  EXPECT_EQ(softmax_cross_entropy(logits, labels).node->op_type(),
            "SparseSoftmaxCrossEntropyWithLogits");
  for (double e : {-0.1, 1.5, std::nan("")})
    expect_error([&] { softmax_cross_entropy(logits, labels, e, "xent"); },
                 {"softmax_cross_entropy", "xent", "label_smoothing", "[0, 1]"});
  Output unknown = ops::placeholder(DType::F32, {4, -1}, "unknown");
  expect_error([&] { softmax_cross_entropy(unknown, labels, 0.1, "xent"); },
               {"xent", "K known", "[4, ?]"});
}

TEST(Losses, PredictionIncorrectTopK) {
  GraphEnv env;
  // Row 0: label 1 third; row 1: label 0 first; row 2: label 1 tied for first.
  Output logits = ops::constant(f64({3, 3}, {1.5, -0.5, 0.25, 3.0, 2.0, -1.0, 0.0, 1.0, 1.0}));
  Output labels = ops::constant(Tensor::from_vector<int64_t>({3}, {1, 0, 1}));
  Output top1 = prediction_incorrect(logits, labels);
  Output top2 = prediction_incorrect(logits, labels, 2, "wrong-top2");
  EXPECT_EQ(top1.node->name(), "incorrect_vector");
  EXPECT_EQ(top2.node->name(), "wrong-top2");
  std::vector<Tensor> got = run({top1, top2});
  expect_tensor(got[0], {3}, {1, 0, 0}, 0);
  expect_tensor(got[1], {3}, {1, 0, 0}, 0);
  expect_tensor(run1(prediction_incorrect(logits, labels, 3)), {3}, {0, 0, 0}, 0);
}

}  // namespace
}  // namespace spire::testing
