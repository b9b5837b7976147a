// tensorpack's ResNet examples (examples/ResNet: cifar10-resnet.py, imagenet-resnet.py)
// in one program: the ResNets of examples/resnet/resnet_model.h trained by any of
// tensorpack's trainers (examples/example_flags.h), with SGD + momentum, tensorpack's
// weight decay on the '.*/W' weights, top-1 / top-5 errors as training summaries and
// validation metrics, checkpoints, resume, stats.json and TensorBoard events.
//
//   ./build/examples/resnet --dataset mnist            # ResNet-20 on MNIST padded to 32x32
//   ./build/examples/resnet --dataset cifar10 --data DIR --depth 56
//   ./build/examples/resnet --dataset fake --depth 50 --batch 32 --max-epoch 1
//   mpirun -np 2 ./build/examples/resnet --dataset mnist --trainer horovod
//
// Datasets: mnist (28x28 padded with zeros to 32x32, 1 channel), cifar10 and cifar100
// (the binary releases), imagenet (tensorpack's ILSVRC12 folder layout: JPEG or PNG
// files decoded and augmented with fbresnet_augmentor on --data-threads threads), fake
// (random images and labels, for throughput runs as tensorpack's --fake: 224x224 for
// the depths of resnet_model.py, 18, 34, 50, 101, 152, else 32x32). Input
// normalization happens in the graph (per-channel mean and standard deviation of the
// dataset). The 32x32 models train on CIFAR with cifar10-resnet.py's augmentation
// (random 32x32 crops of the image pasted on 40x40 zeros, horizontal flips); MNIST has
// none (its digits are not mirror-symmetric). The pipelines are built by
// examples/resnet/resnet_data.h, which bench/image_pipeline.cc measures as they are.
//
// Learning rate (tensorpack's ScheduledHyperParamSetter, linear interpolation, set every
// step): --lr is the peak (default 0.1); --scale-lr applies Goyal et al.'s linear
// scaling rule (peak = lr x total batch / 256, the total batch summed over towers and
// ranks); --warmup-epochs N ramps linearly to the peak over N epochs, from --lr with
// --scale-lr (Goyal et al.'s gradual warmup) or from peak / 10 without; then
// --schedule piecewise (x0.1 at 50% and 75% of --max-epoch, as cifar10-resnet.py's
// 32 and 48 of 64 epochs) or cosine (sampled every 1% of the steps and interpolated).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <spire.h>

#include "resnet/resnet_data.h"
#include "resnet/resnet_model.h"
#include "example_flags.h"

namespace {

using namespace spire;
using namespace spire_examples;

using Dataset = ResNetDataset;

struct Flags {
  Dataset dataset = Dataset::kMnist;
  std::string data;
  std::string logdir;
  int depth = 20;
  CifarResNetMode mode = CifarResNetMode::kPreact;
  int64_t batch = 128;
  int max_epoch = 8;
  int64_t steps_per_epoch = 0;
  double lr = 0.1;
  bool scale_lr = false;
  double warmup_epochs = 0;
  bool cosine = false;
  double weight_decay = -1;  // -1: 2e-4 for the 32x32 models, 1e-4 for the 224x224 ones
  double label_smoothing = 0;
  int64_t fake_images = 0;
  int64_t val_images = 0;  // 0: the whole test set
  SyncStatistics sync_bn = SyncStatistics::kNone;
  bool depth_given = false;
  int threads_data = 4;   // imagenet: decoding and augmenting threads
  bool imagenet = false;  // the 224x224 family (resnet_model.py), else the 32x32 one
  TrainerFlags t;
};

void usage(const char* argv0) {
  std::printf(
      "Usage: %s [--dataset D] [--data DIR] [--depth N] [--batch N] [trainer flags] ...\n"
      "Trains tensorpack's ResNets; checkpoints, stats.json and TensorBoard events go to\n"
      "--logdir. Run the same command again to resume an interrupted run.\n"
      "  --dataset D          mnist (default), cifar10, cifar100, imagenet or fake\n"
      "  --data DIR           the dataset's directory (mnist: default ../shared/data/mnist;\n"
      "                       cifar: the binary release; imagenet: train/<wnid>/*.JPEG, val/)\n"
      "  --data-threads N     imagenet: threads decoding and augmenting (default 4)\n"
      "  --depth N            6n+2: 20 (default), 32, 56, 110 (32x32 ResNets), or with fake data\n"
      "                       18, 34, 50, 101, 152 (224x224 ResNets)\n"
      "  --arch A             32x32 models: preact (default, cifar10-resnet.py) or resnet\n"
      "  --batch N            images per tower and step (default 128)\n"
      "  --max-epoch N        last epoch (default 8)\n"
      "  --steps-per-epoch N  steps per epoch (default: one pass over the training set)\n"
      "  --lr X               peak learning rate (default 0.1)\n"
      "  --scale-lr           linear scaling rule: peak = lr x total batch / 256\n"
      "  --warmup-epochs N    linear warmup to the peak over N epochs (default 0)\n"
      "  --schedule S         piecewise (default) or cosine\n"
      "  --weight-decay X     L2 on the '.*/W' weights (default 2e-4 for 32x32, 1e-4 for 224x224)\n"
      "  --label-smoothing X  (default 0)\n"
      "  --fake-images N      fake: distinct random images (default 1024 for 32x32, 128 for 224)\n"
      "  --val-images N       validate on the first N test images (default: all)\n"
      "  --sync-bn S          BatchNorm statistics: none (default: each tower's own) or towers\n"
      "                       (averaged over every tower and rank; also nccl, horovod)\n"
      "  --logdir DIR         log directory (default train_log/resnet<depth>-<dataset>)\n"
      "%s",
      argv0, trainer_flags_usage());
}

double parse_double(const std::string& flag, const std::string& v, double min) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= min) || !std::isfinite(x))
    throw_error(flag, ": expected a number >= ", min, ", got '", v, "'");
  return x;
}

// Returns false when --help was given.
bool parse_flags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return false;
    if (a == "--scale-lr") {
      f->scale_lr = true;
      continue;
    }
    std::string key, val;
    split_flag(argc, argv, &i, &key, &val);
    if (key == "--dataset") f->dataset = parse_resnet_dataset(val);
    else if (key == "--data") f->data = val;
    else if (key == "--logdir") f->logdir = val;
    else if (key == "--depth") {
      f->depth = static_cast<int>(parse_int_flag(key, val, 1));
      f->depth_given = true;
    }
    else if (key == "--arch") {
      if (val == "preact") f->mode = CifarResNetMode::kPreact;
      else if (val == "resnet") f->mode = CifarResNetMode::kResNet;
      else throw_error("--arch: expected preact or resnet, got '", val, "'");
    } else if (key == "--batch") f->batch = parse_int_flag(key, val, 1);
    else if (key == "--max-epoch") f->max_epoch = static_cast<int>(parse_int_flag(key, val, 1));
    else if (key == "--steps-per-epoch") f->steps_per_epoch = parse_int_flag(key, val, 1);
    else if (key == "--lr") f->lr = parse_double(key, val, 0);
    else if (key == "--warmup-epochs") f->warmup_epochs = parse_double(key, val, 0);
    else if (key == "--schedule") {
      if (val != "piecewise" && val != "cosine")
        throw_error("--schedule: expected piecewise or cosine, got '", val, "'");
      f->cosine = val == "cosine";
    } else if (key == "--weight-decay") f->weight_decay = parse_double(key, val, 0);
    else if (key == "--label-smoothing") f->label_smoothing = parse_double(key, val, 0);
    else if (key == "--fake-images") f->fake_images = parse_int_flag(key, val, 1);
    else if (key == "--val-images") f->val_images = parse_int_flag(key, val, 1);
    else if (key == "--data-threads") f->threads_data = static_cast<int>(parse_int_flag(key, val, 1));
    else if (key == "--sync-bn") f->sync_bn = parse_sync_statistics(val);
    else if (!parse_trainer_flag(key, val, &f->t))
      throw_error("unknown argument '", key, "' (see --help)");
  }
  // Fake data takes the 224x224 family for its depths (50 and 152 are also 6n+2).
  if (f->dataset == Dataset::kImagenet && !f->depth_given) f->depth = 50;
  f->imagenet = f->dataset == Dataset::kImagenet ||
                (f->dataset == Dataset::kFake && is_imagenet_resnet_depth(f->depth));
  const bool small = !f->imagenet;
  if (f->imagenet && !is_imagenet_resnet_depth(f->depth))
    throw_error("--depth ", f->depth, ": ImageNet ResNets have depth 18, 34, 50 (default), 101 or 152");
  if (small && !is_cifar_resnet_depth(f->depth))
    throw_error("--depth ", f->depth, ": the ", resnet_dataset_name(f->dataset), " images are 32x32, so a depth 6n+2 ",
                "(20, 32, 56, 110)", f->dataset == Dataset::kFake ? " or a 224x224 ResNet's (18, 34, 50, 101, 152)" : "");
  if (f->dataset != Dataset::kMnist && f->dataset != Dataset::kFake && f->data.empty())
    throw_error("--dataset ", resnet_dataset_name(f->dataset), " needs --data DIR (",
                f->dataset == Dataset::kImagenet ? "with train/<wnid>/*.JPEG and val/"
                                                 : "the binary release", ")");
  if (f->label_smoothing > 1) throw_error("--label-smoothing must lie in [0, 1]");
  if (f->weight_decay < 0) f->weight_decay = small ? 2e-4 : 1e-4;
  if (f->fake_images == 0) f->fake_images = small ? 1024 : 128;
  if (f->logdir.empty())
    f->logdir = "train_log/resnet" + std::to_string(f->depth) + "-" + resnet_dataset_name(f->dataset);
  finish_trainer_flags(&f->t);
  return true;
}

// ---- data -----------------------------------------------------------------------------------

ResNetDataOptions data_options(const Flags& f) {
  ResNetDataOptions o;
  o.dataset = f.dataset;
  o.dir = f.dataset == Dataset::kMnist ? find_mnist_dir(f.data) : f.data;
  o.imagenet = f.imagenet;
  o.batch = f.batch;
  o.data_threads = f.threads_data;
  o.fake_images = f.fake_images;
  o.val_images = f.val_images;
  return o;
}

// ---- the model ------------------------------------------------------------------------------

class ResNetModel : public ModelDesc {
 public:
  ResNetModel(const Flags& f, ImageSpec spec) : f_(f), spec_(std::move(spec)) {}

  std::vector<InputDesc> inputs() const override {
    if (f_.dataset == Dataset::kMnist) return {{"input", DType::F32, {-1, 28, 28}}, {"label", DType::I64, {-1}}};
    return {{"input", DType::F32, {-1, spec_.size, spec_.size, spec_.channels}}, {"label", DType::I64, {-1}}};
  }

  Output build_graph(const std::vector<Output>& in) override {
    Output image = in[0];
    if (f_.dataset == Dataset::kMnist)
      image = ops::pad(ops::expand_dims(image, 3), {{0, 0}, {2, 2}, {2, 2}, {0, 0}});
    // Per-channel normalization, in the graph as tensorpack's models do.
    Tensor mean(DType::F32, Shape{spec_.channels}), inv_std(DType::F32, Shape{spec_.channels});
    for (int64_t c = 0; c < spec_.channels; ++c) {
      mean.data<float>()[c] = static_cast<float>(spec_.mean[static_cast<size_t>(c)]);
      inv_std.data<float>()[c] = static_cast<float>(1.0 / spec_.stddev[static_cast<size_t>(c)]);
    }
    image = ops::mul(ops::sub(image, ops::constant(mean)), ops::constant(inv_std), "normalized");
    // tensorpack's BatchNorm(sync_statistics=...) for every BatchNorm of the model.
    ArgScope bn_scope(BatchNormOptions().sync_statistics(f_.sync_bn));
    Output logits = f_.imagenet ? imagenet_resnet(image, f_.depth, spec_.classes)
                                : cifar_resnet(image, f_.depth, spec_.classes, f_.mode);
    return classification_cost(logits, in[1], f_.weight_decay, f_.label_smoothing);
  }

  std::shared_ptr<Optimizer> optimizer() override {
    // The "learning_rate" variable the schedule sets; tensorpack's imagenet recipe uses
    // Nesterov momentum, its CIFAR one plain momentum.
    return std::make_shared<MomentumOptimizer>(f_.lr, 0.9, /*use_nesterov=*/f_.imagenet);
  }

 private:
  Flags f_;
  ImageSpec spec_;
};

// ---- the learning-rate schedule ------------------------------------------------------------

ScheduledHyperParamSetter::Schedule lr_schedule(const Flags& f, int64_t steps_per_epoch, int64_t total_batch) {
  const double peak = f.scale_lr ? f.lr * static_cast<double>(total_batch) / 256.0 : f.lr;
  const int64_t total = steps_per_epoch * f.max_epoch;
  const auto warm = static_cast<int64_t>(std::llround(f.warmup_epochs * static_cast<double>(steps_per_epoch)));
  ScheduledHyperParamSetter::Schedule s;
  if (warm > 0) s.push_back({0, f.scale_lr ? f.lr : peak / 10});
  s.push_back({std::min(warm, total), peak});
  if (f.cosine) {
    const int64_t span = std::max<int64_t>(total - warm, 1);
    for (int k = 1; k <= 100; ++k) {
      const int64_t step = warm + span * k / 100;
      if (step <= s.back().first) continue;
      s.push_back({step, 0.5 * peak * (1 + std::cos(M_PI * static_cast<double>(step - warm) / span))});
    }
  } else {
    for (auto [frac, factor] : {std::pair{0.5, 0.1}, std::pair{0.75, 0.01}}) {
      const auto at = static_cast<int64_t>(frac * static_cast<double>(total));
      if (at <= s.back().first) continue;
      s.push_back({at - 1, s.back().second});
      s.push_back({at, peak * factor});
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Flags flags;
    if (!parse_flags(argc, argv, &flags)) {
      usage(argv[0]);
      return 0;
    }
    const TrainerFlags& t = flags.t;
    // The pipelines (examples/resnet/resnet_data.h, also measured by bench/image_pipeline).
    const ImageSpec spec = resnet_image_spec(flags.dataset, flags.imagenet);
    const ResNetDataOptions data_opts = data_options(flags);
    ResNetTrainData train_data = make_resnet_train_data(data_opts, spec);
    std::shared_ptr<DataFlow> test_data = make_resnet_test_data(data_opts, spec);
    make_dirs(flags.logdir);

    // Every tower takes its own batch, every process of a multi-process trainer its own
    // shard of the data: an epoch passes over the data once.
    std::unique_ptr<SingleCostTrainer> trainer = make_trainer(t);
    const int64_t towers = std::max<int64_t>(1, static_cast<int64_t>(tower_devices(t).size()));
    const int64_t shards = trainer->data_shard().second;
    const int64_t total_batch = flags.batch * towers * shards;
    const int64_t steps = flags.steps_per_epoch > 0 ? flags.steps_per_epoch
                                                    : std::max<int64_t>(1, train_data.flow->size() / shards / towers);
    logger::info("ResNet-", flags.depth, " on ", resnet_dataset_name(flags.dataset), " (", spec.size, "x", spec.size, "x",
                 spec.channels, ", ", spec.classes, " classes); ", total_batch, " images per step, ", steps,
                 " steps per epoch; trainer ", t.trainer, "; logs in ", flags.logdir);

    TrainConfig config;
    config.model = std::make_shared<ResNetModel>(flags, spec);
    config.dataflow = train_data.flow;
    config.callbacks = {
        std::make_shared<ModelSaver>(),
        make_validation(t, test_data,
                        {std::make_shared<ScalarStats>(std::vector<std::string>{"xentropy-loss"}),
                         std::make_shared<ClassificationError>("wrong-top1", "val-error-top1"),
                         std::make_shared<ClassificationError>("wrong-top5", "val-error-top5")}),
        std::make_shared<MinSaver>("val-error-top1"),
        std::make_shared<ScheduledHyperParamSetter>("learning_rate", lr_schedule(flags, steps, total_batch),
                                                    "linear", /*step_based=*/true),
        std::make_shared<EstimatedTimeLeft>(),
    };
    config.session_creator = new_session_creator(session_options(t));
    config.steps_per_epoch = steps;
    config.max_epoch = flags.max_epoch;
    config.logdir = flags.logdir;

    // (A resumed run's input continues at the restored global_step by itself.)
    if (!launch_example_training(t, config, *trainer)) return 0;
    double err = 0;
    int epoch = 0;
    if (final_stat(*trainer, flags.logdir, "val-error-top1", &err, &epoch))
      std::printf("final val-error-top1 (epoch %d, %s/stats.json): %.4f (accuracy %.4f)\n", epoch,
                  flags.logdir.c_str(), err, 1 - err);
    else
      std::printf("no validation error was recorded\n");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
