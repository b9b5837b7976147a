// A GAN on MNIST with a custom trainer that is not single-cost (tensorpack's
// GANModelDesc / SeparateGANTrainer pattern): an MLP generator (z [B, 64] ->
// FC 256 + BatchNorm + relu -> FC 784 tanh -> 28x28, variable scope "gen")
// and an MLP discriminator (FC 256 leaky_relu -> FC 1, scope "discrim"),
// sigmoid cross-entropy losses written with softplus, one Adam optimizer
// (lr 2e-4, beta1 0.5) per variable subset, and a trainer whose run_step
// runs one discriminator step then one generator step through the hooked
// session. Every epoch a callback writes an 8x8 grid of samples from a
// fixed z to <logdir>/samples-epoch<N>.png; ModelSaver keeps checkpoints.
// With --device gpu (or gpu:N, cuda, cuda:N) the whole graph (the tower, both
// optimizers, the global step, the callbacks' nodes) is built on that GPU.
//
//   ./build/examples/mnist_gan [--data DIR] [--logdir DIR] [--max-epoch N]
//                              [--steps-per-epoch N] [--threads N] [--device D]
//                              [--help]
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <spire.h>

#include "example_flags.h"

#include "device_flag.h"
#include "image_util.h"

using namespace spire;

namespace {

constexpr int64_t kBatch = 64;
constexpr int64_t kZDim = 64;

// ---- the model ------------------------------------------------------------

// G(z): images [B, 28, 28] in [-1, 1]. Call inside a TowerContext; the
// variables live under "gen/".
Output generator(const Output& z) {
  VariableScopeGuard vs("gen");
  Output h = FullyConnected("fc0", z, 256);
  h = BatchNorm("bn0", h);
  h = ops::relu(h, "relu0");
  h = FullyConnected("fc1", h, 28 * 28, FullyConnectedOptions().activation(ops::tanh));
  return ops::reshape(h, Shape{-1, 28, 28}, "gen_images");
}

// D(x): logits [B] for images [B, 28, 28] in [-1, 1]; variables under "discrim/".
Output discriminator(const Output& images) {
  VariableScopeGuard vs("discrim");
  Output h = FullyConnected("fc0", images, 256,
                            FullyConnectedOptions().activation(activations::leaky_relu(0.2)));
  Output logit = FullyConnected("fc1", h, 1);
  return ops::reshape(logit, Shape{-1}, "logits");
}

// The tower function: from the real images (f32 0..255) build G and D and
// return {d_loss, g_loss}. Sigmoid cross-entropy with logits l is
// softplus(-l) for label 1 and softplus(l) for label 0.
std::vector<Output> gan_tower(const std::vector<Output>& in) {
  Output real = in[0] * (2.0 / 255.0) - 1.0;
  Output z = ops::random_normal({kBatch, kZDim}, DType::F32, 0.0, 1.0, 0, "z");
  Output fake = generator(z);
  // One discriminator call on [real; fake] (D has no batch statistics).
  Output logits = discriminator(ops::concat({real, fake}, 0));
  std::vector<Output> parts = ops::split(logits, 2, 0);
  Output l_real = parts[0], l_fake = parts[1];
  Output d_loss_pos = ops::mean(ops::softplus(-l_real), {}, false, "d_loss_pos");
  Output d_loss_neg = ops::mean(ops::softplus(l_fake), {}, false, "d_loss_neg");
  Output d_loss = ops::mul(d_loss_pos + d_loss_neg, ops::scalar(0.5, DType::F32), "d_loss");
  Output g_loss = ops::mean(ops::softplus(-l_fake), {}, false, "g_loss");
  // How often D is right on real and on fake images.
  ops::mean(ops::cast(ops::greater(l_real, ops::scalar(0.0, DType::F32)), DType::F32), {}, false,
            "d_accuracy_real");
  ops::mean(ops::cast(ops::less(l_fake, ops::scalar(0.0, DType::F32)), DType::F32), {}, false,
            "d_accuracy_fake");
  return {d_loss, g_loss};
}

// ---- the trainer ------------------------------------------------------------

// A two-cost trainer (tensorpack's SeparateGANTrainer with d_period = g_period
// = 1): the tower gives {d_loss, g_loss}; each has its own Adam over its own
// variables; run_step runs a D step then a G step, both hooked (so each
// consumes a batch from the input and counts as a global step). The graph
// built here goes on `device`; the caller keeps the same device for the
// callbacks' nodes (DeviceScope around train_with_defaults).
class GANTrainer : public TowerTrainer {
 public:
  GANTrainer(std::shared_ptr<InputSource> input, const std::vector<InputDesc>& signature,
             const Device& device)
      : input_(std::move(input)) {
    Graph& g = graph();
    DefaultGraphGuard guard(g);
    DeviceScope on_device(g, device);
    set_tower_func(TowerFunc(gan_tower, signature));
    std::vector<CallbackPtr> cbs = input_->setup(signature, g);
    {
      TowerContext ctx("", /*is_training=*/true);
      const TowerHandle& h = (*tower_func_)(input_->get_input_tensors());
      d_loss_ = h.outputs[0];
      g_loss_ = h.outputs[1];
      d_acc_real_ = h.get_tensor("d_accuracy_real");
      d_acc_fake_ = h.get_tensor("d_accuracy_fake");
    }
    std::vector<Output> d_vars = trainable_variables("discrim");
    std::vector<Output> g_vars = trainable_variables("gen");
    SPIRE_CHECK(!d_vars.empty() && !g_vars.empty(), "GANTrainer: no variables under gen/ or discrim/");
    d_opt_ = std::make_shared<AdamOptimizer>(2e-4, 0.5, 0.999, 1e-8, "d_opt");
    g_opt_ = std::make_shared<AdamOptimizer>(2e-4, 0.5, 0.999, 1e-8, "g_opt");
    {
      NameScope ns(g, "optimize");
      d_min_ = d_opt_->minimize(d_loss_, {}, d_vars, "d_op");
      // The generator step also updates BatchNorm's moving averages.
      std::vector<Node*> g_deps = {g_opt_->minimize(g_loss_, {}, g_vars, "g_op_apply")};
      for (const Output& u : g.get_collection(GraphKeys::UPDATE_OPS)) g_deps.push_back(u.node);
      g_min_ = ops::group(g_deps, "g_op");
    }
    for (auto& cb : cbs) register_callback(cb);
  }

  void run_step() override {
    auto d = hooked_sess().run({d_loss_, d_acc_real_, d_acc_fake_}, {}, {d_min_});
    auto gl = hooked_sess().run({g_loss_}, {}, {g_min_});
    sum_d_ += d[0].item<double>();
    sum_acc_real_ += d[1].item<double>();
    sum_acc_fake_ += d[2].item<double>();
    sum_g_ += gl[0].item<double>();
    ++count_;
  }

  // Averages of this epoch's steps (reset by take_epoch_stats).
  struct Stats {
    double d_loss, g_loss, d_acc_real, d_acc_fake;
  };
  Stats take_epoch_stats() {
    double n = count_ > 0 ? static_cast<double>(count_) : 1.0;
    Stats s{sum_d_ / n, sum_g_ / n, sum_acc_real_ / n, sum_acc_fake_ / n};
    sum_d_ = sum_g_ = sum_acc_real_ = sum_acc_fake_ = 0;
    count_ = 0;
    return s;
  }
  InputSource& input() const { return *input_; }

 private:
  std::shared_ptr<InputSource> input_;
  std::shared_ptr<Optimizer> d_opt_, g_opt_;
  Output d_loss_, g_loss_, d_acc_real_, d_acc_fake_;
  Node* d_min_ = nullptr;
  Node* g_min_ = nullptr;
  double sum_d_ = 0, sum_g_ = 0, sum_acc_real_ = 0, sum_acc_fake_ = 0;
  int64_t count_ = 0;
};

// Puts the epoch's average losses and D accuracies to the monitors.
class GANEpochStats : public Callback {
 public:
  std::string name() const override { return "GANEpochStats"; }

 protected:
  void _trigger_epoch() override {
    auto& t = static_cast<GANTrainer&>(trainer());
    GANTrainer::Stats s = t.take_epoch_stats();
    Monitors& m = t.monitors();
    m.put_scalar("d_loss", s.d_loss);
    m.put_scalar("g_loss", s.g_loss);
    m.put_scalar("d_accuracy_real", s.d_acc_real);
    m.put_scalar("d_accuracy_fake", s.d_acc_fake);
  }
};

// Builds an inference copy of the generator on a fixed z and writes an 8x8
// grid of its samples to <logdir>/samples-epoch<N>.png after every epoch.
class GANSampleWriter : public Callback {
 public:
  std::string name() const override { return "GANSampleWriter"; }

 protected:
  void _setup_graph() override {
    std::mt19937 rng(12345);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> z(kRows * kCols * kZDim);
    for (float& v : z) v = normal(rng);
    Output zc = ops::constant(Tensor::from_vector<float>({kRows * kCols, kZDim}, z), "fixed_z");
    TowerContext ctx("sample", /*is_training=*/false);
    samples_ = generator(zc);
  }
  void _trigger_epoch() override {
    const std::string& dir = trainer().logdir();
    if (dir.empty()) return;
    // Fetches come back to the CPU (a no-op copy there) whatever the device.
    Tensor img = trainer().sess().run({samples_})[0].to(Device::cpu());
    int w = 0, h = 0;
    std::vector<uint8_t> grid = spire_examples::tile_images(img.data<float>(), kRows * kCols, 28,
                                                            28, kRows, kCols, -1.0f, 1.0f, 2, 0,
                                                            &w, &h);
    std::string path = dir + "/samples-epoch" + std::to_string(trainer().epoch_num()) + ".png";
    std::string err;
    if (!spire_examples::write_png_gray8(path, w, h, grid, &err)) throw_error(err);
    logger::info("GANSampleWriter: wrote ", path, " (", w, "x", h, ")");
  }

 private:
  static constexpr int64_t kRows = 8, kCols = 8;
  Output samples_;
};

// ---- command line ----------------------------------------------------------------

struct Flags {
  std::string data;
  std::string logdir = "train_log/mnist_gan";
  int max_epoch = 5;
  int64_t steps_per_epoch = 400;
  int threads = 2;
  std::string device = "cpu";
};

void usage(const char* argv0) {
  std::printf(
      "Usage: %s [--data DIR] [--logdir DIR] [--max-epoch N] [--steps-per-epoch N] [--threads N]\n"
      "          [--device D]\n"
      "Trains an MLP GAN on MNIST; writes samples-epoch<N>.png (8x8 samples from a fixed z),\n"
      "checkpoints and stats.json to --logdir (default train_log/mnist_gan).\n"
      "  --data DIR            MNIST directory (default ../shared/data/mnist, relative to the\n"
      "                        current directory or to the repository)\n"
      "  --max-epoch N         epochs to train (default 5)\n"
      "  --steps-per-epoch N   D+G step pairs per epoch (default 400)\n"
      "  --threads N           CPU threads of the session (default 2)\n"
      "  --device D            %s\n",
      argv0, spire_examples::device_flag_spellings());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Flags f;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        usage(argv[0]);
        return 0;
      }
      std::string key, val;
      spire_examples::split_flag(argc, argv, &i, &key, &val);
      if (key == "--data") f.data = val;
      else if (key == "--logdir") f.logdir = val;
      else if (key == "--max-epoch") f.max_epoch = static_cast<int>(spire_examples::parse_int_flag(key, val, 1));
      else if (key == "--steps-per-epoch") f.steps_per_epoch = spire_examples::parse_int_flag(key, val, 1);
      else if (key == "--threads") f.threads = static_cast<int>(spire_examples::parse_int_flag(key, val, 0));
      else if (key == "--device") f.device = val;
      else throw_error("unknown argument '", key, "' (see --help)");
    }
    const Device device = spire_examples::parse_device_flag(f.device);
    std::string data = spire_examples::find_mnist_dir(f.data);
    if (f.logdir.empty()) throw_error("--logdir must not be empty");
    make_dirs(f.logdir);

    // Real images only: drop the label, batch with a fixed size (z is [64, 64]).
    auto images = std::make_shared<MapData>(std::make_shared<Mnist>("train", data),
                                            [](Datapoint dp) -> std::optional<Datapoint> {
                                              return Datapoint{dp[0]};
                                            });
    auto batched = std::make_shared<BatchData>(images, kBatch, /*remainder=*/false);
    auto input = std::make_shared<QueueInput>(batched);
    std::vector<InputDesc> signature = {{"input", DType::F32, {kBatch, 28, 28}}};

    GANTrainer trainer(input, signature, device);
    trainer.set_logdir(f.logdir);
    SessionOptions so;
    so.num_threads = f.threads;
    std::vector<CallbackPtr> callbacks = {std::make_shared<ModelSaver>(),
                                          std::make_shared<GANEpochStats>(),
                                          std::make_shared<GANSampleWriter>()};
    {
      // The callbacks' nodes (the sample generator, the saver's, the global
      // step's) go on the same device as the trainer's graph.
      DeviceScope on_device(trainer.graph(), device);
      trainer.train_with_defaults(callbacks, {}, new_session_creator(so), nullptr, f.steps_per_epoch,
                                  1, f.max_epoch);
    }
    const Monitors& m = trainer.monitors();
    std::printf("final epoch %d: d_loss %.4f g_loss %.4f; D right on %.1f%% of real, %.1f%% of fake\n",
                trainer.epoch_num(), m.get_latest("d_loss"), m.get_latest("g_loss"),
                100 * m.get_latest("d_accuracy_real"), 100 * m.get_latest("d_accuracy_fake"));
    std::printf("samples: %s/samples-epoch%d.png\n", f.logdir.c_str(), trainer.epoch_num());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
