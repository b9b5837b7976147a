// Tests of the dataset readers (train/datasets.h): MNIST IDX files (gzip and
// uncompressed) and CIFAR-10 binary batches that the tests write themselves,
// corrupt files (wrong magic, truncated, count mismatch, bad sizes), and the
// real MNIST files in ../shared/data/mnist when present.
#include "train/datasets.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "tests/support/op_test_util.h"
#include "tests/support/temp_dir.h"

namespace spire::testing {
namespace {

namespace fs = std::filesystem;


using Bytes = std::vector<uint8_t>;

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

uint8_t pixel(int i, int p) { return static_cast<uint8_t>((i * 37 + p * 3) % 256); }

Bytes idx_images(int n, int rows = 28, int cols = 28, uint32_t magic = 0x803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, static_cast<uint32_t>(n));
  put_be32(b, static_cast<uint32_t>(rows));
  put_be32(b, static_cast<uint32_t>(cols));
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < rows * cols; ++p) b.push_back(pixel(i, p));
  return b;
}

Bytes idx_labels(int n, uint32_t magic = 0x801) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>((i * 3) % 10));
  return b;
}

void write_plain(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  ASSERT_TRUE(static_cast<bool>(f)) << path;
}

void write_gzip(const std::string& path, const Bytes& b) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr) << path;
  ASSERT_EQ(gzwrite(gz, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
}

void check_mnist(const ImageLabelData& d, int n, int rows = 28, int cols = 28) {
  ASSERT_EQ(d.images.type_string(), str_cat("f32[", n, ", ", rows, ", ", cols, "]"));
  ASSERT_EQ(d.labels.type_string(), str_cat("i64[", n, "]"));
  std::vector<float> px = d.images.to_vector<float>();
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < rows * cols; ++p)
      ASSERT_EQ(px[static_cast<size_t>(i * rows * cols + p)], static_cast<float>(pixel(i, p)));
  std::vector<int64_t> lab = d.labels.to_vector<int64_t>();
  for (int i = 0; i < n; ++i) EXPECT_EQ(lab[static_cast<size_t>(i)], (i * 3) % 10);
}

TEST(MnistIdx, ReadsGzipAndUncompressed) {
  TempDir dir;
  write_gzip(dir.file("img.gz"), idx_images(5));
  write_gzip(dir.file("lab.gz"), idx_labels(5));
  write_plain(dir.file("img"), idx_images(5));
  write_plain(dir.file("lab"), idx_labels(5));
  check_mnist(load_mnist_idx(dir.file("img.gz"), dir.file("lab.gz")), 5);
  check_mnist(load_mnist_idx(dir.file("img"), dir.file("lab")), 5);
  check_mnist(load_mnist_idx(dir.file("img.gz"), dir.file("lab")), 5);
  EXPECT_EQ(read_maybe_gzip_file(dir.file("lab.gz")), idx_labels(5));
  EXPECT_EQ(read_maybe_gzip_file(dir.file("img")), idx_images(5));
  // Other image sizes are read as they are.
  write_gzip(dir.file("small.gz"), idx_images(3, 3, 4));
  write_gzip(dir.file("lab3.gz"), idx_labels(3));
  check_mnist(load_mnist_idx(dir.file("small.gz"), dir.file("lab3.gz")), 3, 3, 4);
  // Zero images is a valid (empty) file.
  write_plain(dir.file("img0"), idx_images(0));
  write_plain(dir.file("lab0"), idx_labels(0));
  ImageLabelData empty = load_mnist_idx(dir.file("img0"), dir.file("lab0"));
  EXPECT_EQ(empty.images.type_string(), "f32[0, 28, 28]");
}

TEST(MnistIdx, RejectsBadFiles) {
  TempDir dir;
  write_gzip(dir.file("img.gz"), idx_images(5));
  write_gzip(dir.file("lab.gz"), idx_labels(5));
  const std::string img = dir.file("img.gz"), lab = dir.file("lab.gz");

  // Wrong magic: the files swapped, and garbage.
  expect_error([&] { load_mnist_idx(lab, img); },
               {lab, "bad magic number 0x00000801", "expected 0x00000803"});
  write_gzip(dir.file("lab_bad.gz"), idx_labels(5, 0x803));
  expect_error([&] { load_mnist_idx(img, dir.file("lab_bad.gz")); },
               {"lab_bad.gz", "bad magic number 0x00000803", "expected 0x00000801"});

  // Truncated uncompressed file: expected and actual sizes.
  Bytes short_img = idx_images(5);
  short_img.resize(short_img.size() - 100);
  write_plain(dir.file("short_img"), short_img);
  expect_error([&] { load_mnist_idx(dir.file("short_img"), lab); },
               {"short_img", "truncated", "expected 3936 bytes", "5 images of 28x28", "got 3836"});
  // A valid gzip stream of too little data.
  Bytes short_lab = idx_labels(5);
  short_lab.resize(short_lab.size() - 2);
  write_gzip(dir.file("short_lab.gz"), short_lab);
  expect_error([&] { load_mnist_idx(img, dir.file("short_lab.gz")); },
               {"short_lab.gz", "truncated", "expected 13 bytes", "got 11", "gzip"});
  // A truncated gzip stream.
  {
    Bytes whole;
    std::ifstream f(img, std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(f), {});
    whole.resize(whole.size() / 2);
    write_plain(dir.file("cut.gz"), whole);
  }
  expect_error([&] { load_mnist_idx(dir.file("cut.gz"), lab); }, {"cut.gz", "truncated"});
  expect_error([&] { read_maybe_gzip_file(dir.file("cut.gz")); },
               {"cut.gz", "corrupt or truncated gzip stream"});
  // Too short for a header.
  write_plain(dir.file("tiny"), Bytes{0, 0, 8});
  expect_error([&] { load_mnist_idx(dir.file("tiny"), lab); },
               {"tiny", "expected at least 4 bytes", "got 3"});
  write_plain(dir.file("header"), Bytes{0, 0, 8, 3, 0, 0, 0, 5, 0});
  expect_error([&] { load_mnist_idx(dir.file("header"), lab); },
               {"header", "expected at least 16 bytes", "got 9"});
  // Trailing bytes.
  Bytes long_lab = idx_labels(5);
  long_lab.push_back(1);
  write_plain(dir.file("long_lab"), long_lab);
  expect_error([&] { load_mnist_idx(img, dir.file("long_lab")); },
               {"long_lab", "expected 13 bytes", "got 14"});
  // Count mismatch.
  write_gzip(dir.file("lab4.gz"), idx_labels(4));
  expect_error([&] { load_mnist_idx(img, dir.file("lab4.gz")); },
               {"count mismatch", "5 images", "4 labels", "lab4.gz"});
  // Missing file.
  expect_error([&] { load_mnist_idx(dir.file("nope.gz"), lab); }, {"cannot open", "nope.gz"});
}

TEST(MnistIdx, MnistDataFlowFromDirectory) {
  TempDir gz, plain;
  write_gzip(gz.file("train-images-idx3-ubyte.gz"), idx_images(6));
  write_gzip(gz.file("train-labels-idx1-ubyte.gz"), idx_labels(6));
  write_gzip(gz.file("t10k-images-idx3-ubyte.gz"), idx_images(2));
  write_gzip(gz.file("t10k-labels-idx1-ubyte.gz"), idx_labels(2));
  write_plain(plain.file("train-images-idx3-ubyte"), idx_images(6));
  write_plain(plain.file("train-labels-idx1-ubyte"), idx_labels(6));

  for (const std::string& d : {gz.str(), plain.str()}) {
    Mnist m("train", d, /*shuffle=*/false);
    EXPECT_EQ(m.name(), "Mnist");
    EXPECT_EQ(m.size(), 6);
    m.reset_state();
    int i = 0;
    for (Datapoint& dp : m.epoch()) {
      ASSERT_EQ(dp.size(), 2u);
      EXPECT_EQ(dp[0].type_string(), "f32[28, 28]");
      EXPECT_EQ(dp[1].type_string(), "i64[]");
      EXPECT_EQ(dp[1].item<int64_t>(), (i * 3) % 10);
      EXPECT_EQ(dp[0].to_vector<float>()[5], static_cast<float>(pixel(i, 5)));
      ++i;
    }
    EXPECT_EQ(i, 6);
  }
  Mnist test("test", gz.str(), false);
  EXPECT_EQ(test.size(), 2);

  // Shuffled: a permutation, reproducible for a seed.
  auto labels_of = [&](uint64_t seed) {
    Mnist m("train", gz.str(), true, seed);
    m.reset_state();
    std::vector<float> first_pixels;
    for (Datapoint& dp : m.epoch()) first_pixels.push_back(dp[0].to_vector<float>()[1]);
    return first_pixels;
  };
  EXPECT_EQ(labels_of(3), labels_of(3));
  std::vector<float> a = labels_of(3), want;
  for (int i = 0; i < 6; ++i) want.push_back(pixel(i, 1));
  std::sort(a.begin(), a.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(a, want);

  expect_error([&] { Mnist("test", plain.str()); }, {"Mnist", "cannot find", "t10k-images-idx3-ubyte"});
  expect_error([&] { Mnist("val", gz.str()); }, {"train_or_test", "\"val\""});
}

// ---- CIFAR-10 ------------------------------------------------------------------------

uint8_t cifar_px(int rec, int c, int y, int x) {
  return static_cast<uint8_t>((rec * 11 + c * 50 + y * 7 + x) % 256);
}

Bytes cifar_records(int n, int first) {
  Bytes b;
  for (int r = first; r < first + n; ++r) {
    b.push_back(static_cast<uint8_t>(r % 10));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) b.push_back(cifar_px(r, c, y, x));
  }
  return b;
}

void write_cifar(const TempDir& dir, const std::string& sub = "") {
  std::string base = dir.str() + sub;
  fs::create_directories(base);
  for (int i = 1; i <= 5; ++i)
    write_plain(base + "/data_batch_" + std::to_string(i) + ".bin", cifar_records(2, 2 * (i - 1)));
  write_plain(base + "/test_batch.bin", cifar_records(3, 100));
}

TEST(Cifar10, ReadsBinaryBatches) {
  TempDir dir;
  write_cifar(dir);
  Cifar10 train("train", dir.str(), /*shuffle=*/false);
  EXPECT_EQ(train.name(), "Cifar10");
  EXPECT_EQ(train.size(), 10);
  train.reset_state();
  int r = 0;
  for (Datapoint& dp : train.epoch()) {
    ASSERT_EQ(dp[0].type_string(), "f32[32, 32, 3]");
    EXPECT_EQ(dp[1].item<int64_t>(), r % 10);
    std::vector<float> px = dp[0].to_vector<float>();
    for (int y : {0, 5, 31})
      for (int x : {0, 17, 31})
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(px[static_cast<size_t>((y * 32 + x) * 3 + c)], cifar_px(r, c, y, x))
              << r << " " << y << " " << x << " " << c;
    ++r;
  }
  EXPECT_EQ(r, 10);

  ImageLabelData test = load_cifar10_bin({dir.file("test_batch.bin")});
  EXPECT_EQ(test.images.type_string(), "f32[3, 32, 32, 3]");
  EXPECT_EQ(test.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(test.images.to_vector<float>()[3 * (32 * 2 + 1) + 2], cifar_px(100, 2, 2, 1));

  TempDir nested;
  write_cifar(nested, "/cifar-10-batches-bin");
  EXPECT_EQ(Cifar10("test", nested.str()).size(), 3);
}

TEST(Cifar10, RejectsBadFiles) {
  TempDir dir;
  write_cifar(dir);
  Bytes bad = cifar_records(2, 0);
  bad.resize(bad.size() + 5);
  write_plain(dir.file("data_batch_2.bin"), bad);
  expect_error([&] { Cifar10("train", dir.str()); },
               {"data_batch_2.bin", "size 6151 bytes", "not a multiple of 3073"});
  fs::remove(dir.file("data_batch_3.bin"));
  expect_error([&] { Cifar10("train", dir.str()); }, {"Cifar10", "cannot find data_batch_3.bin"});
  Bytes label = cifar_records(1, 0);
  label[0] = 10;
  write_plain(dir.file("test_batch.bin"), label);
  expect_error([&] { Cifar10("test", dir.str()); }, {"test_batch.bin", "label 10", "0..9"});
  write_plain(dir.file("test_batch.bin"), Bytes{});
  expect_error([&] { Cifar10("test", dir.str()); }, {"test_batch.bin", "empty"});
}

// ---- CIFAR-100 -----------------------------------------------------------------------

// Record r: coarse label (r * 3) % 20, fine label (r * 7) % 100, then the pixels.
Bytes cifar100_records(int n, int first) {
  Bytes b;
  for (int r = first; r < first + n; ++r) {
    b.push_back(static_cast<uint8_t>((r * 3) % 20));
    b.push_back(static_cast<uint8_t>((r * 7) % 100));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) b.push_back(cifar_px(r, c, y, x));
  }
  return b;
}

void check_cifar100(DataFlow& df, int n, int first, bool coarse) {
  df.reset_state();
  int r = first;
  for (Datapoint& dp : df.epoch()) {
    ASSERT_EQ(dp[0].type_string(), "f32[32, 32, 3]");
    EXPECT_EQ(dp[1].item<int64_t>(), coarse ? (r * 3) % 20 : (r * 7) % 100) << r;
    std::vector<float> px = dp[0].to_vector<float>();
    for (int y : {0, 9, 31})
      for (int x : {0, 13, 31})
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(px[static_cast<size_t>((y * 32 + x) * 3 + c)], cifar_px(r, c, y, x))
              << r << " " << y << " " << x << " " << c;
    ++r;
  }
  EXPECT_EQ(r, first + n);
}

TEST(Cifar100, ReadsFineAndCoarseLabels) {
  TempDir dir;
  // 17 records: the fine labels reach 98 (r = 14), above any coarse label.
  write_plain(dir.file("train.bin"), cifar100_records(17, 0));
  write_plain(dir.file("test.bin"), cifar100_records(4, 30));
  Cifar100 fine("train", dir.str(), Cifar100Label::kFine, /*shuffle=*/false);
  EXPECT_EQ(fine.name(), "Cifar100");
  EXPECT_EQ(fine.size(), 17);
  check_cifar100(fine, 17, 0, false);
  Cifar100 coarse("train", dir.str(), Cifar100Label::kCoarse, /*shuffle=*/false);
  check_cifar100(coarse, 17, 0, true);
  Cifar100 test("test", dir.str(), Cifar100Label::kFine, /*shuffle=*/false);
  check_cifar100(test, 4, 30, false);
  // The default is the fine label.
  EXPECT_EQ(load_cifar100_bin({dir.file("test.bin")}).labels.to_vector<int64_t>(),
            (std::vector<int64_t>{10, 17, 24, 31}));
  EXPECT_EQ(load_cifar100_bin({dir.file("test.bin")}, Cifar100Label::kCoarse)
                .labels.to_vector<int64_t>(),
            (std::vector<int64_t>{10, 13, 16, 19}));
  // Several files concatenate; shuffling visits every record once.
  EXPECT_EQ(load_cifar100_bin({dir.file("train.bin"), dir.file("test.bin")}).images.type_string(),
            "f32[21, 32, 32, 3]");
  Cifar100 shuffled("train", dir.str(), Cifar100Label::kFine, /*shuffle=*/true, /*seed=*/5);
  shuffled.reset_state();
  std::vector<int64_t> seen;
  for (Datapoint& dp : shuffled.epoch()) seen.push_back(dp[1].item<int64_t>());
  std::vector<int64_t> expected;
  for (int r = 0; r < 17; ++r) expected.push_back((r * 7) % 100);
  EXPECT_NE(seen, expected);
  std::sort(seen.begin(), seen.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);

  // The extracted archive's folder.
  TempDir nested;
  fs::create_directories(nested.file("cifar-100-binary"));
  write_plain(nested.file("cifar-100-binary/test.bin"), cifar100_records(2, 0));
  EXPECT_EQ(Cifar100("test", nested.str()).size(), 2);
}

TEST(Cifar100, RejectsBadFiles) {
  TempDir dir;
  Bytes cut = cifar100_records(3, 0);
  cut.resize(cut.size() - 1000);  // truncated inside the third record
  write_plain(dir.file("train.bin"), cut);
  expect_error([&] { Cifar100("train", dir.str()); },
               {"train.bin", "size 8222 bytes", "not a multiple of 3074",
                "2 label bytes (coarse, fine)", "CIFAR-100", "2 whole records + 2074 bytes"});
  // A CIFAR-10 batch is not a CIFAR-100 file (3 * 3073 is no multiple of 3074).
  write_plain(dir.file("train.bin"), cifar_records(3, 0));
  expect_error([&] { Cifar100("train", dir.str()); }, {"train.bin", "not a multiple of 3074"});
  expect_error([&] { Cifar100("test", dir.str()); }, {"Cifar100", "cannot find test.bin"});
  expect_error([&] { Cifar100("val", dir.str()); }, {"Cifar100", "\"train\" or \"test\"", "val"});
  Bytes bad = cifar100_records(2, 0);
  bad[3074 + 1] = 100;  // the second record's fine label
  write_plain(dir.file("test.bin"), bad);
  expect_error([&] { Cifar100("test", dir.str()); },
               {"test.bin", "record 1 has fine label 100", "0..99"});
  bad = cifar100_records(2, 0);
  bad[0] = 20;
  write_plain(dir.file("test.bin"), bad);
  expect_error([&] { Cifar100("test", dir.str(), Cifar100Label::kCoarse); },
               {"test.bin", "record 0 has coarse label 20", "0..19"});
  write_plain(dir.file("test.bin"), Bytes{});
  expect_error([&] { Cifar100("test", dir.str()); },
               {"test.bin", "empty", "CIFAR-100 records of 3074 bytes"});
}

// ---- real MNIST --------------------------------------------------------------------------

TEST(MnistReal, SharedDataset) {
  const std::string dir = std::string(SPIRE_SOURCE_DIR) + "/../shared/data/mnist";
  if (!fs::exists(dir + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "MNIST not found at " << dir;
  }
  ImageLabelData train = load_mnist_idx(dir + "/train-images-idx3-ubyte.gz",
                                        dir + "/train-labels-idx1-ubyte.gz");
  EXPECT_EQ(train.images.type_string(), "f32[60000, 28, 28]");
  EXPECT_EQ(train.labels.type_string(), "i64[60000]");
  const float* px = train.images.data<float>();
  auto [lo, hi] = std::minmax_element(px, px + train.images.num_elements());
  EXPECT_EQ(*lo, 0.f);
  EXPECT_EQ(*hi, 255.f);
  std::vector<int64_t> labels = train.labels.to_vector<int64_t>();
  EXPECT_EQ(labels[0], 5);
  EXPECT_EQ(*std::max_element(labels.begin(), labels.end()), 9);

  Mnist test("test", dir, /*shuffle=*/false);
  EXPECT_EQ(test.size(), 10000);
  test.reset_state();
  test.begin_epoch();
  Datapoint dp;
  ASSERT_TRUE(test.next(dp));
  EXPECT_EQ(dp[0].type_string(), "f32[28, 28]");
  EXPECT_EQ(dp[1].item<int64_t>(), 7);  // the first test digit is a 7
  Mnist m("train", dir, false);
  EXPECT_EQ(m.size(), 60000);
  m.reset_state();
  m.begin_epoch();
  ASSERT_TRUE(m.next(dp));
  EXPECT_EQ(dp[1].item<int64_t>(), 5);
}

}  // namespace
}  // namespace spire::testing
