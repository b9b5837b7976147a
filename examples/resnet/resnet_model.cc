// tensorpack's ResNets and ImageNetModel cost (examples/resnet/resnet_model.h).
#include "resnet_model.h"

#include <array>
#include <string>

namespace spire_examples {
namespace {

using namespace spire;

// Conv2D's defaults in every tensorpack ResNet: bias-free, He initialization on fan_out.
Conv2DOptions resnet_conv_defaults() {
  return Conv2DOptions().use_bias(false).kernel_initializer(
      init::variance_scaling(2.0, "fan_out", "truncated_normal"));
}

// tensorpack's get_bn: BatchNorm "bn" as an activation, gamma starting at 0 or 1.
Activation bn(bool zero_init) {
  return Activation([zero_init](const Output& x) {
    BatchNormOptions opts;
    if (zero_init) opts.gamma_initializer(init::zeros());
    return BatchNorm("bn", x, opts);
  });
}

int64_t channels(const Output& x) { return x.shape()[3]; }

// ---- 32x32 ResNets (cifar10-resnet.py) -------------------------------------------

// Option A: a 2x2 average pool, then in/2 zero channels on each side (channels double).
Output option_a_shortcut(const Output& x) {
  Output l = AvgPooling("pool", x, 2);
  const int64_t half = channels(x) / 2;
  return ops::pad(l, {{0, 0}, {0, 0}, {0, 0}, {half, half}});
}

Output cifar_unit(const std::string& name, const Output& x, bool increase_dim, bool first,
                  CifarResNetMode mode) {
  const int64_t in = channels(x);
  const int64_t out = increase_dim ? in * 2 : in;
  const int64_t stride = increase_dim ? 2 : 1;
  VariableScopeGuard scope(name);
  Output shortcut = increase_dim ? option_a_shortcut(x) : x;
  if (mode == CifarResNetMode::kPreact) {
    Output b1 = first ? x : BNReLU(x);
    Output c1 = Conv2D("conv1", b1, out, 3, Conv2DOptions().strides(stride).activation(activations::bnrelu()));
    Output c2 = Conv2D("conv2", c1, out, 3);
    return ops::add(c2, shortcut, "output");
  }
  Output c1 = Conv2D("conv1", x, out, 3, Conv2DOptions().strides(stride).activation(activations::bnrelu()));
  Output c2 = Conv2D("conv2", c1, out, 3, Conv2DOptions().activation(bn(false)));
  return ops::relu(ops::add(c2, shortcut), "output");
}

// ---- 224x224 ResNets (resnet_model.py) -------------------------------------------

Output resnet_shortcut(const Output& x, int64_t n_out, int64_t stride) {
  if (channels(x) == n_out) return x;
  return Conv2D("convshortcut", x, n_out, 1,
                Conv2DOptions().strides(stride).activation(bn(false)));
}

Output basic_block(const Output& x, int64_t features, int64_t stride) {
  Output l = Conv2D("conv1", x, features, 3, Conv2DOptions().strides(stride).activation(activations::bnrelu()));
  l = Conv2D("conv2", l, features, 3, Conv2DOptions().activation(bn(true)));
  return ops::relu(ops::add(l, resnet_shortcut(x, features, stride)), "output");
}

Output bottleneck_block(const Output& x, int64_t features, int64_t stride) {
  Output l = Conv2D("conv1", x, features, 1, Conv2DOptions().activation(activations::bnrelu()));
  l = Conv2D("conv2", l, features, 3, Conv2DOptions().strides(stride).activation(activations::bnrelu()));
  l = Conv2D("conv3", l, features * 4, 1, Conv2DOptions().activation(bn(true)));
  return ops::relu(ops::add(l, resnet_shortcut(x, features * 4, stride)), "output");
}

struct ImagenetDepth {
  int depth;
  std::array<int, 4> blocks;
  bool bottleneck;
};
constexpr std::array<ImagenetDepth, 5> kImagenetDepths = {{{18, {2, 2, 2, 2}, false},
                                                          {34, {3, 4, 6, 3}, false},
                                                          {50, {3, 4, 6, 3}, true},
                                                          {101, {3, 4, 23, 3}, true},
                                                          {152, {3, 8, 36, 3}, true}}};

}  // namespace

bool is_cifar_resnet_depth(int depth) { return depth >= 8 && (depth - 2) % 6 == 0; }

bool is_imagenet_resnet_depth(int depth) {
  for (const ImagenetDepth& d : kImagenetDepths)
    if (d.depth == depth) return true;
  return false;
}

Output cifar_resnet(const Output& image, int depth, int64_t classes, CifarResNetMode mode) {
  if (!is_cifar_resnet_depth(depth))
    throw_error("cifar_resnet: depth ", depth, " is not 6n + 2 with n >= 1 (20, 32, 56, 110)");
  if (image.shape().rank() != 4 || image.shape()[3] <= 0)
    throw_error("cifar_resnet: expected NHWC images with known channels, got shape ",
                image.shape().to_string());
  const int n = (depth - 2) / 6;
  ArgScope conv_scope(resnet_conv_defaults());
  Output l = Conv2D("conv0", image, 16, 3, Conv2DOptions().activation(activations::bnrelu()));
  for (int stage = 1; stage <= 3; ++stage) {
    for (int k = 0; k < n; ++k) {
      const std::string name = "res" + std::to_string(stage) + "." + std::to_string(k);
      l = cifar_unit(name, l, stage > 1 && k == 0, stage == 1 && k == 0, mode);
    }
  }
  if (mode == CifarResNetMode::kPreact) {
    VariableScopeGuard scope("bnlast");
    l = BNReLU(l, "output");
  }
  l = GlobalAvgPooling("gap", l);
  return FullyConnected("linear", l, classes);
}

Output imagenet_resnet(const Output& image, int depth, int64_t classes) {
  const ImagenetDepth* spec = nullptr;
  for (const ImagenetDepth& d : kImagenetDepths)
    if (d.depth == depth) spec = &d;
  if (!spec) throw_error("imagenet_resnet: depth ", depth, " is not one of 18, 34, 50, 101, 152");
  if (image.shape().rank() != 4 || image.shape()[3] <= 0)
    throw_error("imagenet_resnet: expected NHWC images with known channels, got shape ",
                image.shape().to_string());
  ArgScope conv_scope(resnet_conv_defaults());
  Output l = Conv2D("conv0", image, 64, 7, Conv2DOptions().strides(2).activation(activations::bnrelu()));
  l = MaxPooling("pool0", l, 3, PoolingOptions().strides(2).padding("SAME"));
  const std::array<int64_t, 4> features = {64, 128, 256, 512};
  for (int g = 0; g < 4; ++g) {
    VariableScopeGuard group("group" + std::to_string(g));
    for (int b = 0; b < spec->blocks[static_cast<size_t>(g)]; ++b) {
      VariableScopeGuard block("block" + std::to_string(b));
      const int64_t stride = (b == 0 && g > 0) ? 2 : 1;
      l = spec->bottleneck ? bottleneck_block(l, features[static_cast<size_t>(g)], stride)
                           : basic_block(l, features[static_cast<size_t>(g)], stride);
    }
  }
  l = GlobalAvgPooling("gap", l);
  return FullyConnected("linear", l, classes,
                        FullyConnectedOptions().kernel_initializer(init::normal(0.0, 0.01)));
}

Output classification_cost(const Output& logits, const Output& label, double weight_decay,
                           double label_smoothing) {
  Output xent = ops::mean(softmax_cross_entropy(logits, label, label_smoothing), {}, false,
                          "xentropy-loss");
  Output wrong1 = prediction_incorrect(logits, label, 1, "wrong-top1");
  Output wrong5 = prediction_incorrect(logits, label, 5, "wrong-top5");
  Output err1 = ops::mean(wrong1, {}, false, "train-error-top1");
  Output err5 = ops::mean(wrong5, {}, false, "train-error-top5");
  Output wd = regularize_cost(".*/W", weight_decay, "l2_regularize_loss");
  Output cost = ops::add(xent, wd, "cost");
  add_moving_summary({xent, err1, err5, wd, cost});
  return cost;
}

}  // namespace spire_examples
