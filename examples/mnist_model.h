// The layers of tensorpack's MNIST convnet (examples/mnist_convnet.cc), in
// one place for the example and the GPU training-step benchmark
// (bench/gpu_train_step.cc): conv 3x3x32 -> maxpool -> conv -> conv ->
// maxpool -> conv -> FC 512 + ReLU -> dropout 0.5 -> FC 10.
#pragma once

#include <spire.h>

namespace spire_examples {

/// Logits [B, 10] of images [B, 28, 28] with pixel values in 0..255.
inline spire::Output mnist_convnet_logits(const spire::Output& images) {
  using namespace spire;
  // [N, 28, 28] in 0..255 -> NHWC [N, 28, 28, 1] in [-1, 1].
  Output image = ops::expand_dims(images, 3) * (2.0 / 255.0) - 1.0;
  ArgScope conv_defaults(Conv2DOptions().activation(ops::relu));
  Output l = Conv2D("conv0", image, 32, 3);
  l = MaxPooling("pool0", l, 2);
  l = Conv2D("conv1", l, 32, 3);
  l = Conv2D("conv2", l, 32, 3);
  l = MaxPooling("pool1", l, 2);
  l = Conv2D("conv3", l, 32, 3);
  l = FullyConnected("fc0", l, 512, FullyConnectedOptions().activation(ops::relu));
  l = Dropout("dropout", l, DropoutOptions().rate(0.5));
  return FullyConnected("fc1", l, 10);
}

}  // namespace spire_examples
