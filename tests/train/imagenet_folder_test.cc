// Tests of ILSVRC12Files / ILSVRC12 (train/imagenet_folder.h) on folder trees
// the tests write: labels from synsets.txt and from the sorted train folders,
// flat val with val.txt and val in class folders, what is listed and what is
// not, the errors naming files and lines, deterministic shuffling, decoding
// in the DataFlow (skip_bad_images counted per pass) and through
// MultiThreadMapData + BatchData.
#include "train/imagenet_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/support/image_writer.h"
#include "tests/support/op_test_util.h"
#include "tests/support/temp_dir.h"

namespace spire::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kW = 5, kH = 4;

// Image `id`: RGB sample (x, y, c) below; all images kW x kH.
uint8_t sample(int id, int x, int y, int c) {
  return static_cast<uint8_t>(id * 16 + x * 3 + y * 5 + c * 50 + 1);
}

ImageBytes image_png(int id) {
  PngSpec s;
  s.width = kW;
  s.height = kH;
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x)
      for (int c = 0; c < 3; ++c) s.samples.push_back(sample(id, x, y, c));
  return encode_png(s);
}

// The id of a decoded (BGR) image, checking every pixel.
int image_id(const Tensor& t) {
  EXPECT_EQ(t.type_string(), str_cat("f32[", kH, ", ", kW, ", 3]"));
  std::vector<float> v = t.to_vector<float>();
  const int id = (static_cast<int>(v[2]) - 1) / 16;  // R of pixel (0, 0)
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(v[static_cast<size_t>((y * kW + x) * 3 + (2 - c))], sample(id, x, y, c));
  return id;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

// dir/train/{n03,n01,n02}/ with images 0..6, a non-image file, and a
// flat dir/val/ with 3 images (ids 10..12) and val.txt.
struct Tree {
  TempDir dir;
  Tree() {
    const std::vector<std::pair<std::string, std::vector<std::string>>> train = {
        {"n01", {"a.JPEG", "b.jpg"}}, {"n02", {"c.JPEG", "d.png", "e.JPEG"}}, {"n03", {"f.JPEG", "g.PNG"}}};
    int id = 0;
    for (const auto& [wnid, files] : train) {
      fs::create_directories(dir.file("train/" + wnid));
      for (const std::string& f : files) write_bytes_file(dir.file("train/" + wnid + "/" + f), image_png(id++));
    }
    write_text(dir.file("train/n02/README.txt"), "not an image");
    fs::create_directories(dir.file("val"));
    for (int i = 0; i < 3; ++i)
      write_bytes_file(dir.file(str_cat("val/ILSVRC2012_val_0000000", i + 1, ".JPEG")), image_png(10 + i));
    write_text(dir.file("val.txt"),
               "ILSVRC2012_val_00000002.JPEG 2\r\nILSVRC2012_val_00000001.JPEG 0\n\n"
               "ILSVRC2012_val_00000003.JPEG 1\n");
  }
  std::string str() const { return dir.str(); }
};

std::vector<std::pair<std::string, int64_t>> listing(ILSVRC12Files& df) {
  std::vector<std::pair<std::string, int64_t>> out;
  if (!df.is_reset()) df.reset_state();
  for (Datapoint& dp : df.epoch()) {
    const std::string p = tensor_to_string(dp[0]);
    out.emplace_back(p.substr(p.rfind('/', p.rfind('/') - 1) + 1), dp[1].item<int64_t>());
  }
  return out;
}

using Listing = std::vector<std::pair<std::string, int64_t>>;

TEST(ILSVRC12Files, LabelsFromSortedTrainFolders) {
  Tree t;
  ILSVRC12Files train(t.str(), "train");
  EXPECT_EQ(train.name(), "ILSVRC12Files");
  EXPECT_EQ(train.size(), 7);
  EXPECT_EQ(train.synsets(), (std::vector<std::string>{"n01", "n02", "n03"}));
  ILSVRC12Options plain;
  plain.shuffle = false;
  ILSVRC12Files ordered(t.str(), "train", plain);
  EXPECT_EQ(listing(ordered), (Listing{{"n01/a.JPEG", 0}, {"n01/b.jpg", 0}, {"n02/c.JPEG", 1},
                                       {"n02/d.png", 1}, {"n02/e.JPEG", 1}, {"n03/f.JPEG", 2},
                                       {"n03/g.PNG", 2}}));
  // val: flat, in val.txt's order, not shuffled by default.
  ILSVRC12Files val(t.str(), "val");
  EXPECT_EQ(val.synsets(), train.synsets());
  for (int epoch = 0; epoch < 4; ++epoch)
    EXPECT_EQ(listing(val), (Listing{{"val/ILSVRC2012_val_00000002.JPEG", 2},
                                     {"val/ILSVRC2012_val_00000001.JPEG", 0},
                                     {"val/ILSVRC2012_val_00000003.JPEG", 1}}))
        << epoch;
}

TEST(ILSVRC12Files, LabelsFromSynsetsTxtAndValFolders) {
  Tree t;
  TempDir meta;
  write_text(meta.file("synsets.txt"), "n03\nn01 extra words\r\n\nn02\nn04\n");
  write_text(meta.file("val.txt"), "ILSVRC2012_val_00000003.JPEG 3\n");
  ILSVRC12Options o;
  o.meta_dir = meta.str();
  o.shuffle = false;
  ILSVRC12Files train(t.str(), "train", o);
  EXPECT_EQ(train.synsets(), (std::vector<std::string>{"n03", "n01", "n02", "n04"}));
  EXPECT_EQ(train.labels(), (std::vector<int64_t>{1, 1, 2, 2, 2, 0, 0}));
  ILSVRC12Files val(t.str(), "val", o);
  EXPECT_EQ(listing(val), (Listing{{"val/ILSVRC2012_val_00000003.JPEG", 3}}));

  // val in class folders (tensorpack's 'train' layout), labels from synsets.txt.
  fs::create_directories(t.dir.file("val2/n02"));
  fs::create_directories(t.dir.file("val2/n04"));
  write_bytes_file(t.dir.file("val2/n02/v1.JPEG"), image_png(20));
  write_bytes_file(t.dir.file("val2/n04/v2.JPEG"), image_png(21));
  ILSVRC12Files val2(t.str(), "val2", o);
  EXPECT_EQ(listing(val2), (Listing{{"n02/v1.JPEG", 2}, {"n04/v2.JPEG", 3}}));
  // Without synsets.txt, the train folders decide: n04 is unknown.
  o.meta_dir.clear();
  expect_error([&] { ILSVRC12Files(t.str(), "val2", o); },
               {"ILSVRC12Files", "val2/n04", "not a known synset", "has 3"});
}

TEST(ILSVRC12Files, RejectsBadLayouts) {
  Tree t;
  expect_error([&] { ILSVRC12Files(t.str(), "test"); }, {"ILSVRC12Files", "/test is not a folder"});
  fs::create_directories(t.dir.file("test"));
  write_bytes_file(t.dir.file("test/x.JPEG"), image_png(1));
  expect_error([&] { ILSVRC12Files(t.str(), "test"); },
               {"no class folders", "test.txt", "\"<file name> <label>\""});
  write_text(t.dir.file("test.txt"), "x.JPEG 1\ny.JPEG 0\n");
  expect_error([&] { ILSVRC12Files(t.str(), "test"); }, {"test.txt:2 lists y.JPEG", "does not exist"});
  write_text(t.dir.file("test.txt"), "x.JPEG one\n");
  expect_error([&] { ILSVRC12Files(t.str(), "test"); }, {"test.txt:1", "x.JPEG one"});
  write_text(t.dir.file("test.txt"), "x.JPEG 1 2\n");
  expect_error([&] { ILSVRC12Files(t.str(), "test"); }, {"test.txt:1", "\"<file name> <label>\""});
  write_text(t.dir.file("test.txt"), "\nx.JPEG 3\n");
  expect_error([&] { ILSVRC12Files(t.str(), "test"); }, {"test.txt:2: label 3 is out of range (3 synsets)"});
  write_text(t.dir.file("test.txt"), "x.JPEG 2\n");
  EXPECT_EQ(ILSVRC12Files(t.str(), "test").labels(), (std::vector<int64_t>{2}));

  TempDir meta;
  write_text(meta.file("synsets.txt"), "n01\nn02\nn01\n");
  ILSVRC12Options o;
  o.meta_dir = meta.str();
  expect_error([&] { ILSVRC12Files(t.str(), "train", o); }, {"synsets.txt:3: synset n01 already on line 1"});
  write_text(meta.file("synsets.txt"), "n01\nn02\n");
  expect_error([&] { ILSVRC12Files(t.str(), "train", o); },
               {"train/n03 is not a known synset", "synsets.txt has 2"});
  expect_error([&] { ILSVRC12Files(t.str(), "a/b"); }, {"split name", "a/b"});
  // A flat train folder.
  TempDir flat;
  fs::create_directories(flat.file("train"));
  expect_error([&] { ILSVRC12Files(flat.str(), "train"); }, {"no class folders"});
}

TEST(ILSVRC12Files, ShufflesDeterministically) {
  Tree t;
  ILSVRC12Options o;
  o.seed = 7;
  ILSVRC12Files a(t.str(), "train", o), b(t.str(), "train", o);
  const Listing e0 = listing(a), e1 = listing(a), e2 = listing(a);
  EXPECT_EQ(listing(b), e0);
  EXPECT_EQ(listing(b), e1);
  EXPECT_NE(e0, e1);
  Listing sorted0 = e0, sorted1 = e1;
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  EXPECT_EQ(sorted0, sorted1);
  EXPECT_EQ(sorted0.size(), 7u);
  // Resuming at epoch 2 reproduces its order.
  ILSVRC12Files c(t.str(), "train", o);
  c.set_next_epoch(2);
  EXPECT_EQ(listing(c), e2);
  // Another seed, another order.
  o.seed = 8;
  ILSVRC12Files d(t.str(), "train", o);
  EXPECT_NE(listing(d), e0);
}

TEST(ILSVRC12, DecodesAndSkipsBadImages) {
  Tree t;
  ILSVRC12Options o;
  o.shuffle = false;
  ILSVRC12 val(t.str(), "val", o);
  EXPECT_EQ(val.name(), "ILSVRC12");
  val.reset_state();
  std::vector<std::pair<int, int64_t>> got;
  for (Datapoint& dp : val.epoch()) got.emplace_back(image_id(dp[0]), dp[1].item<int64_t>());
  EXPECT_EQ(got, (std::vector<std::pair<int, int64_t>>{{11, 2}, {10, 0}, {12, 1}}));

  // A truncated file and a text file named .JPEG in train.
  ImageBytes cut = image_png(3);
  cut.resize(cut.size() - 30);
  write_bytes_file(t.dir.file("train/n02/d.png"), cut);
  write_text(t.dir.file("train/n03/f.JPEG"), "<html>not found</html>");
  ILSVRC12 strict(t.str(), "train", o);
  strict.reset_state();
  strict.begin_epoch();
  Datapoint dp;
  EXPECT_TRUE(strict.next(dp));
  EXPECT_TRUE(strict.next(dp));
  EXPECT_TRUE(strict.next(dp));
  expect_error([&] { strict.next(dp); }, {"train/n02/d.png", "truncated PNG"});

  o.skip_bad_images = true;
  ILSVRC12 skipping(t.str(), "train", o);
  EXPECT_EQ(skipping.size(), 7);
  skipping.reset_state();
  for (int pass = 1; pass <= 2; ++pass) {
    std::vector<int> ids;
    for (Datapoint& d : skipping.epoch()) ids.push_back(image_id(d[0]));
    EXPECT_EQ(ids, (std::vector<int>{0, 1, 2, 4, 6}));
    EXPECT_EQ(skipping.skipped_this_pass(), 2);
    EXPECT_EQ(skipping.skipped_total(), 2 * pass);
  }
}

TEST(ILSVRC12Files, ParallelDecodeAndBatch) {
  // tensorpack's val pipeline: ILSVRC12Files -> MultiThreadMapData(decode) -> BatchData.
  Tree t;
  ILSVRC12Options o;
  o.seed = 3;
  auto files = std::make_shared<ILSVRC12Files>(t.str(), "train", o);
  auto decoded = std::make_shared<MultiThreadMapData>(files, 3, ImageFileDecoder(), 4);
  auto batches = std::make_shared<BatchData>(decoded, 3, /*remainder=*/true);
  EXPECT_EQ(batches->size(), 3);
  batches->reset_state();
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::multiset<std::pair<int, int64_t>> seen;
    int n_batches = 0;
    for (Datapoint& b : batches->epoch()) {
      ++n_batches;
      ASSERT_EQ(b[0].rank(), 4);
      const int64_t n = b[0].dim(0);
      EXPECT_EQ(b[0].type_string(), str_cat("f32[", n, ", ", kH, ", ", kW, ", 3]"));
      EXPECT_EQ(b[1].type_string(), str_cat("i64[", n, "]"));
      std::vector<float> v = b[0].to_vector<float>();
      std::vector<int64_t> labels = b[1].to_vector<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        Tensor one = Tensor::from_vector<float>(
            {kH, kW, 3}, std::vector<float>(v.begin() + i * kH * kW * 3, v.begin() + (i + 1) * kH * kW * 3));
        seen.emplace(image_id(one), labels[static_cast<size_t>(i)]);
      }
    }
    EXPECT_EQ(n_batches, 3);
    EXPECT_EQ(seen, (std::multiset<std::pair<int, int64_t>>{{0, 0}, {1, 0}, {2, 1}, {3, 1}, {4, 1}, {5, 2}, {6, 2}}));
  }
  batches.reset();
}

}  // namespace
}  // namespace spire::testing
