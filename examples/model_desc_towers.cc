// A model described once (ModelDesc: inputs, build_graph, optimizer) and
// built twice in one graph: a training tower (batch statistics, dropout,
// EMA updates) and inference towers that share its variables by name. After
// a few hundred Adam steps on generated data, two inference towers give
// identical outputs (BatchNorm uses the EMAs, dropout is off). With --device
// gpu (or gpu:N, cuda, cuda:N) the whole graph (both kinds of tower, the
// optimizer and its slots, the EMA updates) is built on that GPU.
//
//   ./build/examples/model_desc_towers [--device D] [--help]
#include <cstdio>
#include <random>
#include <string>

#include <spire.h>

#include "device_flag.h"

using namespace spire;

class BlobModel : public ModelDesc {
 public:
  std::vector<InputDesc> inputs() const override {
    return {{"x", DType::F32, {-1, 8}}, {"label", DType::I64, {-1}}};
  }
  Output build_graph(const std::vector<Output>& in) override {
    Output h = FullyConnected("fc0", in[0], 32, FullyConnectedOptions().activation(ops::relu));
    h = BatchNorm("bn0", h);
    h = Dropout("drop", h, DropoutOptions().rate(0.3));
    Output logits = FullyConnected("fc1", h, 3);
    Output xent = ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]), {}, false,
                            "cross_entropy");
    Output wd = regularize_cost(".*/W", 1e-4);
    return ops::add(xent, wd, "cost");
  }
  std::shared_ptr<Optimizer> optimizer() override { return std::make_shared<AdamOptimizer>(1e-2); }
};

namespace {

void usage(const char* argv0) {
  std::printf(
      "Usage: %s [--device D]\n"
      "Builds one ModelDesc as a training tower and two inference towers sharing its variables,\n"
      "trains 200 Adam steps on generated data and checks the inference towers agree.\n"
      "  --device D   %s\n",
      argv0, spire_examples::device_flag_spellings());
}

// Returns false when --help was given.
bool parse_args(int argc, char** argv, std::string* device) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--help" || s == "-h") return false;
    if (s == "--device") {
      if (i + 1 >= argc) throw_error("--device: missing value (see --help)");
      *device = argv[++i];
    } else if (s.rfind("--device=", 0) == 0) {
      *device = s.substr(9);
    } else {
      throw_error("unknown argument '", s, "' (see --help)");
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string device_flag = "cpu";
    if (!parse_args(argc, argv, &device_flag)) {
      usage(argv[0]);
      return 0;
    }
    const Device device = spire_examples::parse_device_flag(device_flag);
    const int64_t n = 256;
    std::mt19937_64 rng(5);
    std::normal_distribution<float> noise(0, 1);
    std::vector<float> xs;
    std::vector<int64_t> ys;
    for (int64_t i = 0; i < n; ++i) {
      int64_t c = i % 3;
      for (int d = 0; d < 8; ++d) xs.push_back(noise(rng) + (d % 3 == c ? 2.0f : 0.0f));
      ys.push_back(c);
    }
    Tensor x_val = Tensor::from_vector<float>({n, 8}, xs);
    Tensor y_val = Tensor::from_vector<int64_t>({n}, ys);

    Graph g;
    DefaultGraphGuard guard(g);
    g.set_seed(1);
    // Everything below is placed on `device`: placeholders, towers, the
    // optimizer (its slots and the global step), the initializers. The fed
    // data moves there; fetches come back to the CPU for the checks below.
    DeviceScope on_device(g, device);
    BlobModel model;
    TowerFunc tower = model.tower_func();
    std::vector<Output> inputs = model.make_placeholders();

    Output cost;
    {
      TowerContext train_tower("", /*is_training=*/true);
      cost = tower(inputs).outputs[0];
    }
    std::shared_ptr<Optimizer> opt = model.get_optimizer();
    Node* minimize = opt->minimize(cost);
    std::vector<Node*> updates = {minimize};
    for (const Output& u : g.get_collection(GraphKeys::UPDATE_OPS)) updates.push_back(u.node);
    Node* train_op = ops::group(updates, "train_op");

    const TowerHandle* infer[2];
    for (int i = 0; i < 2; ++i) {
      TowerContext predict_tower(i == 0 ? "infer" : "infer2", /*is_training=*/false);
      infer[i] = &tower(inputs);
    }
    Output logits0 = infer[0]->get_tensor("fc1/output");
    Output logits1 = infer[1]->get_tensor("fc1/output");
    std::printf("variables: %zu global, %zu trainable; inference tower 'infer' reads %s\n",
                global_variables().size(), trainable_variables().size(),
                infer[0]->get_variable("fc0/W").node->name().c_str());
    Node* init = global_variables_initializer();
    g.finalize();

    Session sess(g);
    sess.run_targets({init});
    FeedDict feeds = {{inputs[0], x_val}, {inputs[1], y_val}};
    for (int step = 0; step <= 200; ++step) {
      if (step % 50 == 0)
        std::printf("step %3d  training-tower cost %.4f\n", step, sess.run({cost}, feeds)[0].item<double>());
      sess.run_targets({train_op}, feeds);
    }
    auto r = sess.run({logits0, logits1, infer[0]->outputs[0]}, feeds);
    const float* a = r[0].data<float>();
    const float* b = r[1].data<float>();
    double max_diff = 0;
    for (int64_t i = 0; i < r[0].num_elements(); ++i) max_diff = std::max(max_diff, double(std::abs(a[i] - b[i])));
    std::printf("inference-tower cost %.4f; the two inference towers differ by at most %g\n",
                r[2].item<double>(), max_diff);
    return max_diff == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
