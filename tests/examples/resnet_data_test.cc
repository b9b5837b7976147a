// Tests of the ResNet example's input pipelines (examples/resnet/resnet_data.h), the
// ones examples/resnet trains on and bench/image_pipeline measures, on files the tests
// write: an ILSVRC12-style folder of JPEGs (decoded, fbresnet-augmented to 224x224 on two
// threads, batched), CIFAR-10 binaries (cifar_augmentor keeps 32x32 but moves pixels),
// fake data, and the validation pipelines' batch sizes.
#include "examples/resnet/resnet_data.h"

#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "tests/support/image_writer.h"
#include "tests/support/temp_dir.h"

namespace spire::testing {
namespace {

using namespace spire_examples;
namespace fs = std::filesystem;

// A w x h RGB image whose samples vary with the pixel and `id`.
ImageBytes jpeg(int w, int h, int id) {
  std::vector<uint8_t> px;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) px.push_back(static_cast<uint8_t>((x * 7 + y * 3 + c * 80 + id * 40) % 256));
  return encode_jpeg(w, h, 3, px, 90);
}

// Every batch of one epoch of `df`.
std::vector<Datapoint> one_epoch(DataFlow& df) {
  std::vector<Datapoint> out;
  for (Datapoint& dp : df.epoch()) out.push_back(dp);
  return out;
}

TEST(ResNetData, ImagenetTrainDecodesAugmentsAndBatchesOnThreads) {
  TempDir dir;
  for (int cls = 0; cls < 2; ++cls) {
    const std::string folder = dir.file(str_cat("train/n0", cls + 1));
    fs::create_directories(folder);
    for (int i = 0; i < 3; ++i)
      write_bytes_file(str_cat(folder, "/", i, ".JPEG"), jpeg(60 + 10 * i, 45 + 5 * cls, cls * 3 + i));
  }
  ResNetDataOptions o;
  o.dataset = ResNetDataset::kImagenet;
  o.dir = dir.path();
  o.imagenet = true;
  o.batch = 2;
  o.data_threads = 2;
  ResNetTrainData train = make_resnet_train_data(o, resnet_image_spec(o.dataset, true));
  ASSERT_TRUE(train.set_next_epoch);
  EXPECT_EQ(train.flow->size(), 3);
  train.flow->reset_state();
  std::multiset<int64_t> labels;
  for (const Datapoint& b : one_epoch(*train.flow)) {
    ASSERT_EQ(b.size(), 2u);
    EXPECT_EQ(b[0].type_string(), "f32[2, 224, 224, 3]");
    EXPECT_EQ(b[1].type_string(), "i64[2]");
    for (int64_t l : b[1].to_vector<int64_t>()) labels.insert(l);
  }
  EXPECT_EQ(labels, (std::multiset<int64_t>{0, 0, 0, 1, 1, 1}));
}

TEST(ResNetData, CifarTrainAugmentsAndTestBatchesBy250) {
  TempDir dir;
  // 10 records: label r % 10, then the R, G, B planes (a gradient, not all zeros).
  for (int b = 1; b <= 5; ++b) {
    std::ofstream out(dir.file(str_cat("data_batch_", b, ".bin")), std::ios::binary);
    for (int r = 0; r < 2; ++r) {
      out.put(static_cast<char>((b * 2 + r) % 10));
      for (int i = 0; i < 3072; ++i) out.put(static_cast<char>(1 + (i * 5 + b) % 250));
    }
  }
  {
    std::ofstream out(dir.file("test_batch.bin"), std::ios::binary);
    for (int r = 0; r < 3; ++r) {
      out.put(static_cast<char>(r));
      for (int i = 0; i < 3072; ++i) out.put(static_cast<char>(1 + i % 250));
    }
  }
  ResNetDataOptions o;
  o.dataset = ResNetDataset::kCifar10;
  o.dir = dir.path();
  o.batch = 4;
  const ImageSpec spec = resnet_image_spec(o.dataset, false);
  EXPECT_EQ(spec.size, 32);
  ResNetTrainData train = make_resnet_train_data(o, spec);
  EXPECT_EQ(train.flow->size(), 2);  // 10 / 4, the partial batch dropped
  train.flow->reset_state();
  // cifar_augmentor pastes on 40x40 zeros and crops 32x32 at random: over a few epochs
  // some image gets a zero border, which no source pixel is.
  bool any_zero = false;
  for (int epoch = 0; epoch < 4; ++epoch)
    for (const Datapoint& b : one_epoch(*train.flow)) {
      EXPECT_EQ(b[0].type_string(), "f32[4, 32, 32, 3]");
      for (float v : b[0].to_vector<float>()) any_zero |= v == 0.0f;
    }
  EXPECT_TRUE(any_zero) << "no augmentation seen";
  std::shared_ptr<DataFlow> test = make_resnet_test_data(o, spec);
  test->reset_state();
  const std::vector<Datapoint> t = one_epoch(*test);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0][0].type_string(), "f32[3, 32, 32, 3]");  // the remainder of a batch of 250
  EXPECT_EQ(t[0][1].to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
}

TEST(ResNetData, FakeDataHasTheModelsSizesAndValImagesLimitsTheTest) {
  ResNetDataOptions o;
  o.dataset = ResNetDataset::kFake;
  o.imagenet = true;
  o.batch = 3;
  o.fake_images = 7;
  o.val_images = 5;
  const ImageSpec spec = resnet_image_spec(o.dataset, true);
  ResNetTrainData train = make_resnet_train_data(o, spec);
  EXPECT_EQ(train.flow->size(), 2);
  train.flow->reset_state();
  for (const Datapoint& b : one_epoch(*train.flow)) EXPECT_EQ(b[0].type_string(), "f32[3, 224, 224, 3]");
  std::shared_ptr<DataFlow> test = make_resnet_test_data(o, spec);
  EXPECT_EQ(test->size(), 2);  // 5 images in batches of 3, with the remainder
  EXPECT_EQ(resnet_image_spec(ResNetDataset::kFake, false).size, 32);
}

TEST(ResNetData, DatasetNamesRoundTrip) {
  for (ResNetDataset d : {ResNetDataset::kMnist, ResNetDataset::kCifar10, ResNetDataset::kCifar100,
                          ResNetDataset::kImagenet, ResNetDataset::kFake})
    EXPECT_EQ(parse_resnet_dataset(resnet_dataset_name(d)), d);
  EXPECT_THROW(parse_resnet_dataset("svhn"), Error);
}

}  // namespace
}  // namespace spire::testing
