// Implementation of examples/resnet/resnet_data.h.
#include "resnet_data.h"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

namespace spire_examples {

using namespace spire;

ResNetDataset parse_resnet_dataset(const std::string& v) {
  if (v == "mnist") return ResNetDataset::kMnist;
  if (v == "cifar10") return ResNetDataset::kCifar10;
  if (v == "cifar100") return ResNetDataset::kCifar100;
  if (v == "imagenet") return ResNetDataset::kImagenet;
  if (v == "fake") return ResNetDataset::kFake;
  throw_error("--dataset: expected mnist, cifar10, cifar100, imagenet or fake, got '", v, "'");
}

const char* resnet_dataset_name(ResNetDataset d) {
  switch (d) {
    case ResNetDataset::kMnist: return "mnist";
    case ResNetDataset::kCifar10: return "cifar10";
    case ResNetDataset::kCifar100: return "cifar100";
    case ResNetDataset::kImagenet: return "imagenet";
    case ResNetDataset::kFake: return "fake";
  }
  return "?";
}

ImageSpec resnet_image_spec(ResNetDataset dataset, bool imagenet) {
  switch (dataset) {
    case ResNetDataset::kMnist: return {32, 1, 10, {33.32}, {78.57}};
    // CIFAR's images are RGB; ImageNet's decoded BGR (cv2.imread's order, as tensorpack).
    case ResNetDataset::kCifar10: return {32, 3, 10, {125.31, 122.95, 113.87}, {62.99, 62.09, 66.70}};
    case ResNetDataset::kCifar100: return {32, 3, 100, {129.30, 124.07, 112.43}, {68.17, 65.39, 70.42}};
    case ResNetDataset::kImagenet:
      return {224, 3, 1000, {0.406 * 255, 0.456 * 255, 0.485 * 255}, {0.225 * 255, 0.224 * 255, 0.229 * 255}};
    case ResNetDataset::kFake:
      return {imagenet ? 224 : 32, 3, imagenet ? 1000 : 10, {0, 0, 0}, {1, 1, 1}};
  }
  return {};
}

namespace {

std::vector<Datapoint> fake_datapoints(const ImageSpec& spec, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> label(0, spec.classes - 1);
  std::vector<Datapoint> list;
  for (int64_t i = 0; i < n; ++i) {
    Tensor image(DType::F32, Shape{spec.size, spec.size, spec.channels});
    for (int64_t j = 0; j < image.num_elements(); ++j) image.data<float>()[j] = normal(rng);
    list.push_back({image, Tensor::scalar<int64_t>(label(rng))});
  }
  return list;
}

}  // namespace

ResNetTrainData make_resnet_train_data(const ResNetDataOptions& o, const ImageSpec& spec) {
  ResNetTrainData d;
  std::shared_ptr<DataFlow> train;
  if (o.dataset == ResNetDataset::kFake) {
    auto list = std::make_shared<DataFromList>(fake_datapoints(spec, o.fake_images, 1));
    d.set_next_epoch = [list](int64_t e) { list->set_next_epoch(e); };
    train = list;
  } else if (o.dataset == ResNetDataset::kImagenet) {
    // tensorpack's ImageNet pipeline: files -> decode + fbresnet_augmentor on a pool of
    // threads -> batches. Bad images are counted and skipped in training.
    auto files = std::make_shared<ILSVRC12Files>(o.dir, "train", ILSVRC12Options{});
    d.set_next_epoch = [files](int64_t e) { files->set_next_epoch(e); };
    auto decode = std::make_shared<ImageFileDecoder>(0, /*skip_bad_images=*/true);
    auto augment = fbresnet_augmentor(true, 11);
    train = std::make_shared<MultiThreadMapData>(
        files, o.data_threads, [decode, augment](Datapoint dp) -> std::optional<Datapoint> {
          std::optional<Datapoint> img = (*decode)(std::move(dp));
          if (!img) return std::nullopt;
          return augment_component_func(augment)(std::move(*img));
        });
  } else {
    std::shared_ptr<DataFromList> list;
    if (o.dataset == ResNetDataset::kMnist) list = std::make_shared<Mnist>("train", o.dir);
    else if (o.dataset == ResNetDataset::kCifar10) list = std::make_shared<Cifar10>("train", o.dir);
    else list = std::make_shared<Cifar100>("train", o.dir);
    d.set_next_epoch = [list](int64_t e) { list->set_next_epoch(e); };
    train = list;
    // cifar10-resnet.py: paste on 40x40 zeros, random 32x32 crop, flip (not on MNIST,
    // whose digits are not mirror-symmetric; its 28x28 images are padded in the graph).
    if (o.dataset != ResNetDataset::kMnist)
      train = std::make_shared<AugmentImageComponent>(train, std::vector<AugmentorPtr>{cifar_augmentor(true, 7)});
  }
  d.flow = std::make_shared<BatchData>(train, o.batch, false);
  return d;
}

std::shared_ptr<DataFlow> make_resnet_test_data(const ResNetDataOptions& o, const ImageSpec& spec) {
  std::shared_ptr<DataFlow> test;
  switch (o.dataset) {
    case ResNetDataset::kFake:
      test = std::make_shared<DataFromList>(fake_datapoints(spec, std::min<int64_t>(o.fake_images, 256), 2), false);
      break;
    case ResNetDataset::kImagenet:
      test = std::make_shared<ILSVRC12>(o.dir, "val", ILSVRC12Options{});
      test = std::make_shared<AugmentImageComponent>(test, std::vector<AugmentorPtr>{fbresnet_augmentor(false)});
      break;
    case ResNetDataset::kMnist: test = std::make_shared<Mnist>("test", o.dir, false); break;
    case ResNetDataset::kCifar10: test = std::make_shared<Cifar10>("test", o.dir, false); break;
    case ResNetDataset::kCifar100:
      test = std::make_shared<Cifar100>("test", o.dir, Cifar100Label::kFine, false);
      break;
  }
  if (o.val_images > 0) test = std::make_shared<FixedSizeData>(test, std::min(o.val_images, test->size()), false);
  const bool fixed_batch = o.dataset == ResNetDataset::kFake || o.imagenet;
  return std::make_shared<BatchData>(test, fixed_batch ? o.batch : 250, true);
}

}  // namespace spire_examples
