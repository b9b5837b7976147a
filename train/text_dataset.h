// Byte-level (character) text data for language models, as nanoGPT's
// data/shakespeare_char/prepare.py and train.py's get_batch:
//  - ByteVocab: the vocabulary is the sorted set of distinct bytes of the
//    text (token i = the i-th smallest byte present); encode/decode, and
//    save/load as a small text file kept next to a checkpoint so a sampler
//    can decode;
//  - TextDataset: a text file's tokens, split into the first
//    floor(0.9 * n) bytes for training and the rest for validation;
//    batch_at() gives x = data[i:i+T], y = data[i+1:i+1+T] for given window
//    starts i as [B, T] tensors (i32 or i64), sample_offsets() draws the
//    starts i uniform in [0, len - T) from a SplitMix64 stream
//    (train/dataflow.h), so a parity test can feed identical batches to
//    PyTorch (the offsets or the tensors themselves);
//  - TextWindowData: a DataFlow yielding such random batches {x, y}, epoch e
//    drawing its offsets from SplitMix64::for_epoch(seed, e) in order
//    (batch j of the epoch = the starts jB .. jB+B-1 of that stream): the
//    same seed gives the same batches, and a resumed run reproduces epoch
//    e's batches (set_next_epoch) without replaying earlier ones.
// Errors (missing or empty file, a split shorter than T + 1 tokens, a byte
// or token outside the vocabulary) are spire::Error naming the file.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "train/dataflow.h"

namespace spire {

/// A byte-level vocabulary: its tokens 0..size()-1 stand for the bytes
/// bytes()[0] < bytes()[1] < ... (nanoGPT's itos; stoi is its inverse).
class ByteVocab {
 public:
  /// The distinct bytes of `text`, sorted. Throws for an empty text.
  static ByteVocab from_text(std::string_view text);
  /// From the bytes in increasing order (non-empty, strictly increasing; throws otherwise).
  explicit ByteVocab(std::vector<uint8_t> bytes);

  int64_t size() const { return static_cast<int64_t>(itos_.size()); }
  /// The byte of each token (itos).
  const std::vector<uint8_t>& bytes() const { return itos_; }
  bool contains(uint8_t byte) const { return stoi_[byte] >= 0; }
  /// The token of `byte`; throws when the byte is not in the vocabulary.
  int64_t encode(uint8_t byte) const;
  std::vector<int64_t> encode(std::string_view text) const;
  /// The text of `tokens`; throws for a token outside [0, size()).
  std::string decode(const std::vector<int64_t>& tokens) const;
  /// The text of an i32 or i64 tensor of tokens (any shape, row-major).
  std::string decode(const Tensor& tokens) const;

  /// Writes the vocabulary to `path` (atomically): the line
  /// "spire-byte-vocab 1", then one line of the size()
  /// bytes as decimal numbers separated by spaces. Python reads it with
  /// `bytes(map(int, open(path).read().split('\n')[1].split()))`.
  void save(const std::string& path) const;
  /// Reads a file written by save(); throws for a missing or malformed file.
  static ByteVocab load(const std::string& path);

  bool operator==(const ByteVocab& o) const { return itos_ == o.itos_; }
  bool operator!=(const ByteVocab& o) const { return !(*this == o); }

 private:
  std::vector<uint8_t> itos_;
  std::array<int16_t, 256> stoi_{};
};

/// Which part of a TextDataset.
enum class TextSplit { kTrain, kVal };

/// "train" or "val".
const char* text_split_name(TextSplit split);

/// The tokens of a byte-level corpus and its train/validation split.
class TextDataset {
 public:
  /// Reads the file at `path` (throws when it cannot be read or is empty).
  /// The vocabulary is the whole file's (ByteVocab::from_text), the first
  /// floor(n * train_fraction) tokens are the training split (nanoGPT:
  /// data[:int(n*0.9)]), the rest validation. train_fraction in (0, 1].
  explicit TextDataset(const std::string& path, double train_fraction = 0.9);
  /// The same from text in memory; `source` names it in messages.
  static TextDataset from_text(std::string_view text, double train_fraction = 0.9,
                               const std::string& source = "<text>");
  /// The same, encoded with a given vocabulary (e.g. loaded next to a
  /// checkpoint); throws for a byte outside it.
  TextDataset(std::string_view text, ByteVocab vocab, double train_fraction,
              const std::string& source);

  const ByteVocab& vocab() const { return vocab_; }
  const std::string& source() const { return source_; }
  /// Number of tokens of a split.
  int64_t split_size(TextSplit split) const;
  /// The tokens of a split (ids < 256).
  const uint8_t* split_tokens(TextSplit split) const;

  /// Number of window starts of length T in a split: split_size - T
  /// (nanoGPT's torch.randint(len(data) - block_size)). Throws when the split
  /// has fewer than T + 1 tokens or T < 1.
  int64_t num_windows(TextSplit split, int64_t block_size) const;
  /// x[b] = tokens[i_b : i_b + T], y[b] = tokens[i_b + 1 : i_b + 1 + T] of the
  /// split for the starts `offsets` (each in [0, num_windows)): two [B, T]
  /// tensors of `dtype` (I32 or I64).
  std::pair<Tensor, Tensor> batch_at(TextSplit split, const std::vector<int64_t>& offsets,
                                     int64_t block_size, DType dtype = DType::I64) const;
  /// `batch_size` window starts drawn uniform in [0, num_windows) from `rng`
  /// (rng.uniform_below, in order).
  std::vector<int64_t> sample_offsets(TextSplit split, int64_t batch_size, int64_t block_size,
                                      SplitMix64& rng) const;

 private:
  TextDataset() = default;
  void init(std::string_view text, double train_fraction);
  std::string source_;
  ByteVocab vocab_{std::vector<uint8_t>{0}};
  std::vector<uint8_t> tokens_;
  int64_t n_train_ = 0;
};

/// Random batches of windows of a TextDataset split (nanoGPT's get_batch)
/// as a DataFlow: each datapoint is {x [B, T], y [B, T]} of `dtype`, and an
/// epoch has `batches_per_epoch` of them (size()). See the file comment for
/// the random stream.
class TextWindowData : public DataFlow {
 public:
  TextWindowData(std::shared_ptr<const TextDataset> data, TextSplit split, int64_t block_size,
                 int64_t batch_size, int64_t batches_per_epoch, uint64_t seed = 0,
                 DType dtype = DType::I64);
  bool has_size() const override { return true; }
  int64_t size() const override { return batches_per_epoch_; }
  std::string name() const override { return "TextWindowData"; }
  /// The epoch the next begin_epoch() starts (0 after construction); set it to resume.
  int64_t next_epoch() const { return next_epoch_; }
  bool can_set_next_epoch() const override { return true; }
  void set_next_epoch(int64_t e) override;
  /// The window starts of batch `batch` of epoch `epoch` (what that
  /// datapoint holds; for parity tests).
  std::vector<int64_t> offsets_of(int64_t epoch, int64_t batch) const;

 protected:
  void begin_epoch_impl() override;
  bool next_impl(Datapoint& dp) override;

 private:
  std::shared_ptr<const TextDataset> data_;
  TextSplit split_;
  int64_t block_size_, batch_size_, batches_per_epoch_;
  uint64_t seed_;
  DType dtype_;
  int64_t next_epoch_ = 0;
  int64_t done_ = 0;
  SplitMix64 rng_{0};
};

}  // namespace spire
