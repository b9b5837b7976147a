// The main job for now: a two-layer MLP built with Spire's raw graph API and
// trained by plain gradient descent on three Gaussian blobs it generates.
// It prints the loss falling and the final training accuracy.
//
//   ./examples/mlp_gd [steps=300] [learning_rate=0.1]
#include <cstdio>
#include <cstdlib>
#include <random>

#include "spire.h"

using namespace spire;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  const double lr = argc > 2 ? std::atof(argv[2]) : 0.1;
  const int64_t n = 600, classes = 3, dim = 2, hidden = 32;
  try {
    // Data: three blobs around the corners of a triangle.
    std::mt19937_64 rng(1234);
    std::normal_distribution<float> noise(0.0f, 1.1f);
    const float centers[3][2] = {{0, 2}, {-1.8f, -1}, {1.8f, -1}};
    std::vector<float> xs;
    std::vector<int64_t> ys;
    for (int64_t i = 0; i < n; ++i) {
      int64_t c = i % classes;
      xs.push_back(centers[c][0] + noise(rng));
      xs.push_back(centers[c][1] + noise(rng));
      ys.push_back(c);
    }
    Tensor x_val = Tensor::from_vector<float>({n, dim}, xs);
    Tensor y_val = Tensor::from_vector<int64_t>({n}, ys);

    Graph g;
    DefaultGraphGuard guard(g);
    g.set_seed(7);
    Output x = ops::placeholder(DType::F32, {-1, dim}, "x");
    Output y = ops::placeholder(DType::I64, {-1}, "y");

    // Parameters and their initializers.
    Output w1 = ops::variable({dim, hidden}, DType::F32, "fc1/W");
    Output b1 = ops::variable({hidden}, DType::F32, "fc1/b");
    Output w2 = ops::variable({hidden, classes}, DType::F32, "fc2/W");
    Output b2 = ops::variable({classes}, DType::F32, "fc2/b");
    Node* init = ops::group({
        ops::assign(w1, ops::truncated_normal({dim, hidden}, DType::F32, 0, 0.5)).node,
        ops::assign(b1, ops::constant(Tensor::zeros(DType::F32, {hidden}))).node,
        ops::assign(w2, ops::truncated_normal({hidden, classes}, DType::F32, 0, 0.3)).node,
        ops::assign(b2, ops::constant(Tensor::zeros(DType::F32, {classes}))).node}, "init");

    // Model and loss.
    Output h = ops::tanh(ops::matmul(x, w1) + b1);
    Output logits = ops::matmul(h, w2) + b2;
    Output loss = ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, y), {}, false, "loss");
    Output correct = ops::equal(ops::argmax(logits, 1), y);
    Output accuracy = ops::mean(ops::cast(correct, DType::F32), {}, false, "accuracy");

    // Plain gradient descent: one node group updates every parameter.
    std::vector<Output> params = {w1, b1, w2, b2};
    std::vector<Output> grads = gradients({loss}, params);
    std::vector<Node*> updates;
    for (size_t i = 0; i < params.size(); ++i)
      updates.push_back(ops::assign_sub(params[i], grads[i] * lr).node);
    Node* train_op = ops::group(updates, "train_op");
    g.finalize();

    Session sess(g);
    sess.run_targets({init});
    FeedDict feeds = {{x, x_val}, {y, y_val}};
    for (int step = 0; step <= steps; ++step) {
      if (step % 25 == 0 || step == steps) {
        auto r = sess.run({loss, accuracy}, feeds);
        std::printf("step %4d  loss %.4f  accuracy %.3f\n", step, r[0].item<double>(),
                    r[1].item<double>());
      }
      if (step < steps) sess.run_targets({train_op}, feeds);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
