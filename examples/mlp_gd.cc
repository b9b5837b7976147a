// The raw-graph example: a two-layer MLP built with Spire's raw graph API and
// trained by plain gradient descent on three Gaussian blobs it generates.
// It prints the loss falling and the final training accuracy. With
// --device gpu (or gpu:N, cuda, cuda:N) the whole graph is built on that GPU;
// the numbers match the CPU run up to float rounding.
//
//   ./build/examples/mlp_gd [steps=300] [learning_rate=0.1] [--device D] [--help]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include <spire.h>

#include "device_flag.h"

using namespace spire;

namespace {

void usage(const char* argv0) {
  std::printf(
      "Usage: %s [steps=300] [learning_rate=0.1] [--device D]\n"
      "Trains a two-layer MLP on three generated Gaussian blobs by plain gradient descent.\n"
      "  steps            gradient-descent steps (default 300)\n"
      "  learning_rate    step size (default 0.1)\n"
      "  --device D       %s; the flag may come anywhere\n",
      argv0, spire_examples::device_flag_spellings());
}

struct Args {
  int steps = 300;
  double lr = 0.1;
  std::string device = "cpu";
};

// Positional [steps] [learning_rate] plus --device D (or --device=D)
// anywhere. Returns false when --help was given.
bool parse_args(int argc, char** argv, Args* a) {
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--help" || s == "-h") return false;
    if (s == "--device") {
      if (i + 1 >= argc) throw_error("--device: missing value (see --help)");
      a->device = argv[++i];
    } else if (s.rfind("--device=", 0) == 0) {
      a->device = s.substr(9);
    } else if (s.rfind("--", 0) == 0) {
      throw_error("unknown argument '", s, "' (see --help)");
    } else if (positional == 0) {
      char* end = nullptr;
      long v = std::strtol(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || v < 0 || v > 1000000000)
        throw_error("steps: expected an integer >= 0, got '", s, "'");
      a->steps = static_cast<int>(v);
      ++positional;
    } else if (positional == 1) {
      char* end = nullptr;
      a->lr = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0') throw_error("learning_rate: expected a number, got '", s, "'");
      ++positional;
    } else {
      throw_error("unexpected argument '", s, "' (see --help)");
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = 600, classes = 3, dim = 2, hidden = 32;
  try {
    Args args;
    if (!parse_args(argc, argv, &args)) {
      usage(argv[0]);
      return 0;
    }
    const int steps = args.steps;
    const double lr = args.lr;
    const Device device = spire_examples::parse_device_flag(args.device);
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
    // Every node below (parameters, their initializers, the model, the
    // gradients and the updates) is placed on `device`; the fed data moves
    // there and the fetched loss and accuracy come back to the CPU.
    DeviceScope on_device(g, device);
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
