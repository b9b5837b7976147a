// tensorpack's ResNets as Spire tower functions (tensorpack examples/ResNet:
// resnet_model.py for 224x224 input, cifar10-resnet.py for 32x32 input), with
// tensorpack's layer names, initializers, BatchNorm settings and shortcut rules,
// and the classification cost of its ImageNetModel (cross-entropy, optional label
// smoothing, 'wrong-top1' / 'wrong-top5', L2 weight decay on the '.*/W' weights).
// Used by examples/resnet.cc, the PyTorch parity test (tests/examples/) and the
// benchmarks; every layer comes from layers/, so the models train under every trainer.
//
// Input is NHWC float, already normalized. Convolutions use TensorFlow's SAME
// padding, which at stride 2 pads (0, 1) where PyTorch's padding=1 pads (1, 1):
// a PyTorch twin must pad explicitly (see tests/examples/resnet_torch.py).
#pragma once

#include <string>

#include <spire.h>

namespace spire_examples {

/// The residual unit of a 32x32 ResNet (He et al. 2016, basic blocks of 16/32/64
/// channels, shortcuts "option A": 2x2 average pooling and zero channels).
enum class CifarResNetMode {
  kPreact,  // tensorpack's cifar10-resnet.py: BN+ReLU before each convolution, 'bnlast'
  kResNet,  // the original: convolution, BN, ReLU after the addition
};

/// Logits [N, classes] of a 32x32 ResNet of `depth` = 6n + 2 layers (20, 32, 56, 110)
/// on NHWC images [N, 32, 32, C]. Variables: conv0/W, conv0/bn/..., res{1,2,3}.{k}/conv{1,2}/W
/// with their BatchNorms ("bn"), bnlast/bn (preact), linear/W, linear/b. Convolutions are
/// bias-free with variance_scaling(2, fan_out); the FC layer keeps Spire's default.
spire::Output cifar_resnet(const spire::Output& image, int depth, int64_t classes,
                           CifarResNetMode mode = CifarResNetMode::kPreact);

/// Logits [N, classes] of tensorpack's resnet_backbone for `depth` 18, 34 (basic blocks)
/// or 50, 101, 152 (bottlenecks, stride on the 3x3 convolution) on NHWC images
/// [N, H, W, C] (224x224 for ImageNet): conv0 7x7/2 + BNReLU, pool0 max 3x3/2 SAME,
/// group0..3 of 64/128/256/512 features, global average pooling, FC 'linear'
/// (weights N(0, 0.01)). The last BatchNorm of every residual branch starts with
/// gamma 0 (Goyal et al.); projection shortcuts ("convshortcut", BN with gamma 1)
/// only where the channel count changes.
spire::Output imagenet_resnet(const spire::Output& image, int depth, int64_t classes = 1000);

/// Whether `depth` is a ResNet depth this file builds for that input size.
bool is_cifar_resnet_depth(int depth);
bool is_imagenet_resnet_depth(int depth);

/// tensorpack's ImageNetModel loss: 'xentropy-loss' (mean cross-entropy, label smoothing
/// e as softmax_cross_entropy), the vectors 'wrong-top1' and 'wrong-top5' (for
/// ClassificationError) and their training summaries 'train-error-top1/5', plus
/// `weight_decay` * sum(W^2) / 2 over the trainable variables matching '.*/W'
/// ('l2_regularize_loss'; gradient weight_decay * W, as PyTorch's SGD weight_decay on
/// those weights). Returns the total, named 'cost'; all four scalars get moving summaries.
spire::Output classification_cost(const spire::Output& logits, const spire::Output& label,
                                  double weight_decay, double label_smoothing = 0.0);

}  // namespace spire_examples
