// Tests of train/text_dataset.h: the byte vocabulary (sorted distinct bytes,
// encode/decode, save/load), the 90/10 split, batch_at's x/y windows in i32
// and i64, the offsets' range and determinism per seed and epoch,
// TextWindowData (same seed, same batches; resume by epoch), the errors,
// and the Shakespeare corpus when the machine has it.
#include <algorithm>
#include <fstream>
#include <set>

#include "tests/support/op_test_util.h"
#include "tests/support/temp_dir.h"
#include "train/file_util.h"
#include "train/text_dataset.h"

namespace spire::testing {
namespace {

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(ByteVocab, SortedDistinctBytesEncodeDecode) {
  ByteVocab v = ByteVocab::from_text("hello, world\n");
  EXPECT_EQ(v.size(), 10);
  const std::string want = "\n ,dehlorw";
  EXPECT_EQ(std::string(v.bytes().begin(), v.bytes().end()), want);
  EXPECT_EQ(v.encode('\n'), 0);
  EXPECT_EQ(v.encode('w'), 9);
  EXPECT_EQ(v.encode("low"), (std::vector<int64_t>{6, 7, 9}));
  EXPECT_EQ(v.decode(v.encode("hello, world\n")), "hello, world\n");
  EXPECT_EQ(v.decode(Tensor::from_vector<int32_t>({2, 2}, {3, 4, 6, 6})), "dell");
  EXPECT_EQ(v.decode(Tensor::from_vector<int64_t>({1}, {8})), "r");
  expect_error([&] { v.encode('z'); }, {"'z'", "not in the vocabulary of 10"});
  expect_error([&] { v.decode(std::vector<int64_t>{10}); }, {"token 10", "[0, 10)"});
  expect_error([&] { v.decode(std::vector<int64_t>{-1}); }, {"token -1"});
  expect_error([&] { ByteVocab::from_text(""); }, {"empty"});
  expect_error([&] { ByteVocab(std::vector<uint8_t>{3, 3}); }, {"strictly increasing"});
}

TEST(ByteVocab, SaveLoadRoundTripAndErrors) {
  TempDir dir;
  std::string all;
  for (int b = 255; b >= 0; b -= 3) all.push_back(static_cast<char>(b));
  ByteVocab v = ByteVocab::from_text(all);
  v.save(dir.file("vocab.txt"));
  EXPECT_EQ(read_file(dir.file("vocab.txt")).substr(0, 21), "spire-byte-vocab 1\n0 ");
  ByteVocab back = ByteVocab::load(dir.file("vocab.txt"));
  EXPECT_EQ(back, v);
  EXPECT_EQ(back.decode(back.encode(all)), all);
  expect_error([&] { ByteVocab::load(dir.file("missing.txt")); }, {"missing.txt"});
  write(dir.file("bad1.txt"), "something else\n1 2\n");
  expect_error([&] { ByteVocab::load(dir.file("bad1.txt")); }, {"bad1.txt", "not a byte vocabulary"});
  write(dir.file("bad2.txt"), "spire-byte-vocab 1\n1 300\n");
  expect_error([&] { ByteVocab::load(dir.file("bad2.txt")); }, {"bad2.txt", "'300'"});
  write(dir.file("bad3.txt"), "spire-byte-vocab 1\n5 4\n");
  expect_error([&] { ByteVocab::load(dir.file("bad3.txt")); }, {"bad3.txt", "strictly increasing"});
  write(dir.file("bad4.txt"), "spire-byte-vocab 1\n\n");
  expect_error([&] { ByteVocab::load(dir.file("bad4.txt")); }, {"bad4.txt", "no bytes"});
}

// 100 bytes: "abcdefghij" ten times -> train = first 90, val = last 10.
std::string ten_alphabets() {
  std::string s;
  for (int r = 0; r < 10; ++r) s += "abcdefghij";
  return s;
}

TEST(TextDataset, SplitAndWindows) {
  TempDir dir;
  write(dir.file("t.txt"), ten_alphabets());
  TextDataset d(dir.file("t.txt"));
  EXPECT_EQ(d.vocab().size(), 10);
  EXPECT_EQ(d.split_size(TextSplit::kTrain), 90);
  EXPECT_EQ(d.split_size(TextSplit::kVal), 10);
  EXPECT_EQ(d.num_windows(TextSplit::kTrain, 8), 82);
  EXPECT_EQ(d.num_windows(TextSplit::kVal, 9), 1);
  // Train offset 3: x = d e f g (tokens 3..6), y = e f g h.
  auto [x, y] = d.batch_at(TextSplit::kTrain, {3, 81}, 4);
  EXPECT_EQ(x.dtype(), DType::I64);
  EXPECT_EQ(x.shape(), Shape({2, 4}));
  EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{3, 4, 5, 6, 1, 2, 3, 4}));
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{4, 5, 6, 7, 2, 3, 4, 5}));
  // Validation starts at byte 90 ('a'); i32 tokens.
  auto [xv, yv] = d.batch_at(TextSplit::kVal, {0, 4}, 5, DType::I32);
  EXPECT_EQ(xv.dtype(), DType::I32);
  EXPECT_EQ(xv.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4, 4, 5, 6, 7, 8}));
  EXPECT_EQ(yv.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 5, 6, 7, 8, 9}));
  // A custom fraction, and text with the vocabulary of a checkpoint.
  TextDataset half = TextDataset::from_text("abcdabcd", 0.5);
  EXPECT_EQ(half.split_size(TextSplit::kTrain), 4);
  TextDataset with_vocab("cab", ByteVocab::from_text("abcz"), 1.0, "sample");
  EXPECT_EQ(with_vocab.split_size(TextSplit::kVal), 0);
  EXPECT_EQ(with_vocab.vocab().size(), 4);
}

TEST(TextDataset, Errors) {
  TempDir dir;
  expect_error([&] { TextDataset(dir.file("none.txt")); }, {"none.txt"});
  write(dir.file("empty.txt"), "");
  expect_error([&] { TextDataset(dir.file("empty.txt")); }, {"empty.txt", "empty"});
  write(dir.file("t.txt"), ten_alphabets());
  TextDataset d(dir.file("t.txt"));
  expect_error([&] { d.num_windows(TextSplit::kVal, 10); },
               {"t.txt", "val split has 10 tokens", "block_size + 1 = 11"});
  expect_error([&] { d.num_windows(TextSplit::kTrain, 0); }, {"block size must be >= 1"});
  expect_error([&] { d.batch_at(TextSplit::kTrain, {82}, 8); }, {"window start 82", "[0, 82)"});
  expect_error([&] { d.batch_at(TextSplit::kTrain, {-1}, 8); }, {"window start -1"});
  expect_error([&] { d.batch_at(TextSplit::kTrain, {0}, 8, DType::F32); }, {"i32 or i64"});
  expect_error([&] { TextDataset::from_text("abc", 0.0); }, {"train_fraction", "(0, 1]"});
  expect_error([&] { TextDataset("abz", ByteVocab::from_text("ab"), 0.9, "prompt"); },
               {"prompt", "'z'", "offset 2"});
  auto shared = std::make_shared<TextDataset>(dir.file("t.txt"));
  expect_error([&] { TextWindowData(shared, TextSplit::kVal, 10, 2, 5); }, {"val split has 10"});
  expect_error([&] { TextWindowData(shared, TextSplit::kTrain, 4, 0, 5); }, {"batch size"});
  expect_error([&] { TextWindowData(nullptr, TextSplit::kTrain, 4, 2, 5); }, {"null"});
}

TEST(TextDataset, OffsetsCoverTheRangeAndFollowTheSeed) {
  TextDataset d = TextDataset::from_text(ten_alphabets());
  // Train windows of 85: starts 0..4 (nanoGPT's randint(len - T) = randint(5)).
  SplitMix64 rng(42);
  std::set<int64_t> seen;
  for (int i = 0; i < 20; ++i)
    for (int64_t o : d.sample_offsets(TextSplit::kTrain, 10, 85, rng)) {
      EXPECT_GE(o, 0);
      EXPECT_LT(o, 5);
      seen.insert(o);
    }
  EXPECT_EQ(seen.size(), 5u);
  SplitMix64 a(7), b(7), c(8);
  std::vector<int64_t> oa = d.sample_offsets(TextSplit::kTrain, 16, 8, a);
  EXPECT_EQ(oa, d.sample_offsets(TextSplit::kTrain, 16, 8, b));
  EXPECT_NE(oa, d.sample_offsets(TextSplit::kTrain, 16, 8, c));
}

TEST(TextWindowData, SameSeedSameBatchesAndResume) {
  auto d = std::make_shared<TextDataset>(TextDataset::from_text(ten_alphabets() + "klmnopqrst"));
  auto collect = [&](uint64_t seed, int64_t start_epoch, int epochs) {
    TextWindowData df(d, TextSplit::kTrain, 6, 3, 4, seed);
    EXPECT_EQ(df.size(), 4);
    df.reset_state();
    df.set_next_epoch(start_epoch);
    std::vector<std::vector<int64_t>> out;
    for (int e = 0; e < epochs; ++e) {
      int batches = 0;
      for (Datapoint& dp : df.epoch()) {
        EXPECT_EQ(dp.size(), 2u);
        EXPECT_EQ(dp[0].shape(), Shape({3, 6}));
        // y is x shifted by one token.
        std::vector<int64_t> x = dp[0].to_vector<int64_t>(), y = dp[1].to_vector<int64_t>();
        for (int r = 0; r < 3; ++r)
          for (int t = 0; t + 1 < 6; ++t) EXPECT_EQ(y[r * 6 + t], x[r * 6 + t + 1]);
        // The datapoint is batch_at(offsets_of(epoch, batch)).
        auto [ex, ey] = d->batch_at(TextSplit::kTrain, df.offsets_of(start_epoch + e, batches), 6);
        EXPECT_EQ(x, ex.to_vector<int64_t>());
        EXPECT_EQ(y, ey.to_vector<int64_t>());
        out.push_back(x);
        ++batches;
      }
      EXPECT_EQ(batches, 4);
    }
    return out;
  };
  auto run1 = collect(5, 0, 2), run2 = collect(5, 0, 2), other = collect(6, 0, 2);
  EXPECT_EQ(run1, run2);
  EXPECT_NE(run1, other);
  EXPECT_NE(std::vector<std::vector<int64_t>>(run1.begin(), run1.begin() + 4),
            std::vector<std::vector<int64_t>>(run1.begin() + 4, run1.end()));
  // Resuming at epoch 1 gives epoch 1's batches.
  auto resumed = collect(5, 1, 1);
  EXPECT_EQ(resumed, std::vector<std::vector<int64_t>>(run1.begin() + 4, run1.end()));
  // i32 tokens.
  TextWindowData i32(d, TextSplit::kVal, 4, 2, 1, 0, DType::I32);
  i32.reset_state();
  for (Datapoint& dp : i32.epoch()) EXPECT_EQ(dp[0].dtype(), DType::I32);
}

TEST(TextDataset, ShakespeareCorpus) {
  const std::string found = std::string(SPIRE_SOURCE_DIR) + "/../shared/data/shakespeare/shakespeare.txt";
  if (!path_exists(found))
    GTEST_SKIP() << "the Shakespeare corpus (" << found << ") is not on this machine";
  TextDataset d(found);
  const std::string text = read_file(found);
  const auto n = static_cast<int64_t>(text.size());
  EXPECT_EQ(d.split_size(TextSplit::kTrain), static_cast<int64_t>(static_cast<double>(n) * 0.9));
  EXPECT_EQ(d.split_size(TextSplit::kTrain) + d.split_size(TextSplit::kVal), n);
  std::set<char> distinct(text.begin(), text.end());
  EXPECT_EQ(d.vocab().size(), static_cast<int64_t>(distinct.size()));
  SplitMix64 rng(1337);
  auto [x, y] = d.batch_at(TextSplit::kVal, d.sample_offsets(TextSplit::kVal, 12, 64, rng), 64);
  EXPECT_EQ(x.shape(), Shape({12, 64}));
  EXPECT_EQ(d.vocab().decode(d.vocab().encode(text.substr(0, 200))), text.substr(0, 200));
}

}  // namespace
}  // namespace spire::testing
