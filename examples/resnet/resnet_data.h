// The input pipelines of the ResNet example (examples/resnet.cc), written once so that
// the example and the input benchmark (bench/image_pipeline.cc) build exactly the same
// DataFlows: the datasets (MNIST, CIFAR-10/100, an ILSVRC12-style folder, fake data),
// their image sizes and normalization constants, and tensorpack's pipelines for them:
//
//   imagenet  ILSVRC12Files -> MultiThreadMapData(decode + fbresnet_augmentor, on
//             data_threads threads; bad images skipped and counted) -> BatchData
//             (imagenet-resnet.py's training flow); val: ILSVRC12 ->
//             fbresnet_augmentor(false) -> BatchData(remainder)
//   cifar     Cifar10/100 -> AugmentImageComponent(cifar_augmentor: paste on 40x40
//             zeros, random 32x32 crop, flip) -> BatchData (cifar10-resnet.py's)
//   mnist     Mnist -> BatchData (28x28, padded to 32x32 in the graph; no augmentation)
//   fake      random N(0, 1) images and labels in a DataFromList -> BatchData
//
// The trainer puts the training flow behind a QueueInput (a background thread), so
// these flows end at BatchData.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <spire.h>

namespace spire_examples {

/// The datasets the ResNet example trains on.
enum class ResNetDataset { kMnist, kCifar10, kCifar100, kImagenet, kFake };

/// "mnist", "cifar10", "cifar100", "imagenet" or "fake" (the --dataset flag).
ResNetDataset parse_resnet_dataset(const std::string& v);
const char* resnet_dataset_name(ResNetDataset d);

/// The images a dataset gives the model.
struct ImageSpec {
  int64_t size, channels, classes;
  std::vector<double> mean, stddev;  // per channel, in 0..255 units
};

/// The images of `dataset`; `imagenet` picks the size of the fake data (224x224 with
/// 1000 classes, else 32x32 with 10).
ImageSpec resnet_image_spec(ResNetDataset dataset, bool imagenet);

/// How to build the pipelines.
struct ResNetDataOptions {
  ResNetDataset dataset = ResNetDataset::kMnist;
  /// The dataset's directory: the MNIST files (already found, find_mnist_dir), the
  /// CIFAR binary release, the ILSVRC12 folder; unused for fake data.
  std::string dir;
  /// The 224x224 family (the test batch is `batch`, not 250; fake data's size).
  bool imagenet = false;
  int64_t batch = 128;       // per tower and step
  int data_threads = 4;      // imagenet: decoding and augmenting threads
  int64_t fake_images = 1024;  // fake: distinct random training images
  int64_t val_images = 0;    // validate on the first N test images; 0: all
};

/// The training flow and how to resume its order.
struct ResNetTrainData {
  std::shared_ptr<spire::DataFlow> flow;              // batches of `batch`, partial ones dropped
  std::function<void(int64_t)> set_next_epoch;  // the shuffled order's epoch, to resume
};

/// The training pipeline of `o.dataset` (see the file comment).
ResNetTrainData make_resnet_train_data(const ResNetDataOptions& o, const ImageSpec& spec);

/// The validation pipeline: the test split, in order, batched with the remainder.
std::shared_ptr<spire::DataFlow> make_resnet_test_data(const ResNetDataOptions& o, const ImageSpec& spec);

}  // namespace spire_examples
