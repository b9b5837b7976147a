// ByteVocab, TextDataset and TextWindowData (see text_dataset.h).
#include "train/text_dataset.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "train/file_util.h"

namespace spire {

namespace {
constexpr const char* kVocabHeader = "spire-byte-vocab 1";

std::string printable(uint8_t b) {
  if (b >= 32 && b < 127) return str_cat("'", static_cast<char>(b), "' (", int{b}, ")");
  return str_cat("byte ", int{b});
}
}  // namespace

// ---- ByteVocab -----------------------------------------------------------------------

ByteVocab ByteVocab::from_text(std::string_view text) {
  SPIRE_CHECK(!text.empty(), "ByteVocab: the text is empty");
  std::array<bool, 256> seen{};
  for (char c : text) seen[static_cast<uint8_t>(c)] = true;
  std::vector<uint8_t> bytes;
  for (int b = 0; b < 256; ++b)
    if (seen[static_cast<size_t>(b)]) bytes.push_back(static_cast<uint8_t>(b));
  return ByteVocab(std::move(bytes));
}

ByteVocab::ByteVocab(std::vector<uint8_t> bytes) : itos_(std::move(bytes)) {
  SPIRE_CHECK(!itos_.empty(), "ByteVocab: no bytes given");
  stoi_.fill(-1);
  for (size_t i = 0; i < itos_.size(); ++i) {
    SPIRE_CHECK(i == 0 || itos_[i] > itos_[i - 1],
                "ByteVocab: the bytes must be strictly increasing, got ", int{itos_[i - 1]},
                " then ", int{itos_[i]}, " at position ", i);
    stoi_[itos_[i]] = static_cast<int16_t>(i);
  }
}

int64_t ByteVocab::encode(uint8_t byte) const {
  SPIRE_CHECK(stoi_[byte] >= 0, "ByteVocab: ", printable(byte), " is not in the vocabulary of ",
              size(), " bytes");
  return stoi_[byte];
}

std::vector<int64_t> ByteVocab::encode(std::string_view text) const {
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(encode(static_cast<uint8_t>(c)));
  return out;
}

std::string ByteVocab::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (int64_t t : tokens) {
    SPIRE_CHECK(t >= 0 && t < size(), "ByteVocab: token ", t, " is outside the vocabulary [0, ",
                size(), ")");
    out.push_back(static_cast<char>(itos_[static_cast<size_t>(t)]));
  }
  return out;
}

std::string ByteVocab::decode(const Tensor& tokens) const {
  SPIRE_CHECK(tokens.dtype() == DType::I64 || tokens.dtype() == DType::I32,
              "ByteVocab::decode: tokens must be i32 or i64, got ", tokens.type_string());
  std::vector<int64_t> ids;
  if (tokens.dtype() == DType::I64) {
    ids = tokens.to_vector<int64_t>();
  } else {
    for (int32_t v : tokens.to_vector<int32_t>()) ids.push_back(v);
  }
  return decode(ids);
}

void ByteVocab::save(const std::string& path) const {
  std::string out = std::string(kVocabHeader) + "\n";
  for (size_t i = 0; i < itos_.size(); ++i) out += (i ? " " : "") + std::to_string(int{itos_[i]});
  out += "\n";
  atomic_write_file(path, out);
}

ByteVocab ByteVocab::load(const std::string& path) {
  const std::string text = read_file(path);
  std::istringstream in(text);
  std::string header, line;
  std::getline(in, header);
  SPIRE_CHECK(header == kVocabHeader, "ByteVocab::load: '", path,
              "' is not a byte vocabulary (its first line is not \"", kVocabHeader, "\")");
  std::getline(in, line);
  std::istringstream nums(line);
  std::vector<uint8_t> bytes;
  std::string tok;
  while (nums >> tok) {
    char* end = nullptr;
    const long v = std::strtol(tok.c_str(), &end, 10);
    SPIRE_CHECK(*end == '\0' && v >= 0 && v < 256, "ByteVocab::load: '", path, "': '", tok,
                "' is not a byte value 0..255");
    bytes.push_back(static_cast<uint8_t>(v));
  }
  SPIRE_CHECK(!bytes.empty(), "ByteVocab::load: '", path, "' lists no bytes");
  try {
    return ByteVocab(std::move(bytes));
  } catch (const Error& e) {
    throw_error("ByteVocab::load: '", path, "': ", e.what());
  }
}

// ---- TextDataset -----------------------------------------------------------------------

const char* text_split_name(TextSplit split) { return split == TextSplit::kTrain ? "train" : "val"; }

TextDataset::TextDataset(const std::string& path, double train_fraction) : source_(path) {
  const std::string text = read_file(path);
  SPIRE_CHECK(!text.empty(), "TextDataset: '", path, "' is empty");
  vocab_ = ByteVocab::from_text(text);
  init(text, train_fraction);
}

TextDataset TextDataset::from_text(std::string_view text, double train_fraction,
                                   const std::string& source) {
  SPIRE_CHECK(!text.empty(), "TextDataset: ", source, " is empty");
  return TextDataset(text, ByteVocab::from_text(text), train_fraction, source);
}

TextDataset::TextDataset(std::string_view text, ByteVocab vocab, double train_fraction,
                         const std::string& source)
    : source_(source), vocab_(std::move(vocab)) {
  SPIRE_CHECK(!text.empty(), "TextDataset: ", source, " is empty");
  init(text, train_fraction);
}

void TextDataset::init(std::string_view text, double train_fraction) {
  SPIRE_CHECK(train_fraction > 0 && train_fraction <= 1, "TextDataset '", source_,
              "': train_fraction must be in (0, 1], got ", train_fraction);
  tokens_.resize(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    SPIRE_CHECK(vocab_.contains(b), "TextDataset '", source_, "': ", printable(b),
                " at offset ", i, " is not in the vocabulary of ", vocab_.size(), " bytes");
    tokens_[i] = static_cast<uint8_t>(vocab_.encode(b));
  }
  // nanoGPT: n = len(data); train = data[:int(n*0.9)] (a double product, truncated).
  const auto n = static_cast<int64_t>(tokens_.size());
  n_train_ = static_cast<int64_t>(static_cast<double>(n) * train_fraction);
}

int64_t TextDataset::split_size(TextSplit split) const {
  return split == TextSplit::kTrain ? n_train_
                                    : static_cast<int64_t>(tokens_.size()) - n_train_;
}

const uint8_t* TextDataset::split_tokens(TextSplit split) const {
  return tokens_.data() + (split == TextSplit::kTrain ? 0 : n_train_);
}

int64_t TextDataset::num_windows(TextSplit split, int64_t block_size) const {
  SPIRE_CHECK(block_size >= 1, "TextDataset '", source_, "': the block size must be >= 1, got ",
              block_size);
  const int64_t n = split_size(split);
  SPIRE_CHECK(n >= block_size + 1, "TextDataset '", source_, "': the ", text_split_name(split),
              " split has ", n, " tokens, fewer than block_size + 1 = ", block_size + 1,
              " (a window and its next-token target)");
  return n - block_size;
}

std::pair<Tensor, Tensor> TextDataset::batch_at(TextSplit split,
                                                const std::vector<int64_t>& offsets,
                                                int64_t block_size, DType dtype) const {
  SPIRE_CHECK(dtype == DType::I64 || dtype == DType::I32, "TextDataset '", source_,
              "': tokens are i32 or i64, not ", dtype_name(dtype));
  SPIRE_CHECK(!offsets.empty(), "TextDataset '", source_, "': batch_at got no offsets");
  const int64_t windows = num_windows(split, block_size);
  const auto B = static_cast<int64_t>(offsets.size());
  Tensor x(dtype, Shape{B, block_size}), y(dtype, Shape{B, block_size});
  const uint8_t* tok = split_tokens(split);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = offsets[static_cast<size_t>(b)];
    SPIRE_CHECK(i >= 0 && i < windows, "TextDataset '", source_, "': window start ", i,
                " is outside [0, ", windows, ") of the ", text_split_name(split),
                " split for block_size ", block_size);
    for (int64_t t = 0; t < block_size; ++t) {
      if (dtype == DType::I64) {
        x.data<int64_t>()[b * block_size + t] = tok[i + t];
        y.data<int64_t>()[b * block_size + t] = tok[i + t + 1];
      } else {
        x.data<int32_t>()[b * block_size + t] = tok[i + t];
        y.data<int32_t>()[b * block_size + t] = tok[i + t + 1];
      }
    }
  }
  return {x, y};
}

std::vector<int64_t> TextDataset::sample_offsets(TextSplit split, int64_t batch_size,
                                                 int64_t block_size, SplitMix64& rng) const {
  SPIRE_CHECK(batch_size >= 1, "TextDataset '", source_, "': the batch size must be >= 1, got ",
              batch_size);
  const auto windows = static_cast<uint64_t>(num_windows(split, block_size));
  std::vector<int64_t> out(static_cast<size_t>(batch_size));
  for (int64_t& o : out) o = static_cast<int64_t>(rng.uniform_below(windows));
  return out;
}

// ---- TextWindowData ----------------------------------------------------------------------

TextWindowData::TextWindowData(std::shared_ptr<const TextDataset> data, TextSplit split,
                               int64_t block_size, int64_t batch_size, int64_t batches_per_epoch,
                               uint64_t seed, DType dtype)
    : data_(std::move(data)),
      split_(split),
      block_size_(block_size),
      batch_size_(batch_size),
      batches_per_epoch_(batches_per_epoch),
      seed_(seed),
      dtype_(dtype) {
  SPIRE_CHECK(data_ != nullptr, "TextWindowData: the dataset is null");
  SPIRE_CHECK(batch_size >= 1, "TextWindowData: the batch size must be >= 1, got ", batch_size);
  SPIRE_CHECK(batches_per_epoch >= 1, "TextWindowData: batches_per_epoch must be >= 1, got ",
              batches_per_epoch);
  SPIRE_CHECK(dtype == DType::I64 || dtype == DType::I32,
              "TextWindowData: tokens are i32 or i64, not ", dtype_name(dtype));
  data_->num_windows(split, block_size);  // throws for a split too short
}

void TextWindowData::set_next_epoch(int64_t e) {
  SPIRE_CHECK(e >= 0, name(), ": set_next_epoch(", e, "): the epoch must be >= 0");
  next_epoch_ = e;
}

std::vector<int64_t> TextWindowData::offsets_of(int64_t epoch, int64_t batch) const {
  SPIRE_CHECK(epoch >= 0 && batch >= 0 && batch < batches_per_epoch_, name(),
              ": no batch ", batch, " of epoch ", epoch, " (", batches_per_epoch_,
              " batches per epoch)");
  SplitMix64 rng = SplitMix64::for_epoch(seed_, epoch);
  std::vector<int64_t> out;
  for (int64_t j = 0; j <= batch; ++j) out = data_->sample_offsets(split_, batch_size_, block_size_, rng);
  return out;
}

void TextWindowData::begin_epoch_impl() {
  rng_ = SplitMix64::for_epoch(seed_, next_epoch_);
  ++next_epoch_;
  done_ = 0;
}

bool TextWindowData::next_impl(Datapoint& dp) {
  if (done_ >= batches_per_epoch_) return false;
  ++done_;
  auto [x, y] = data_->batch_at(split_, data_->sample_offsets(split_, batch_size_, block_size_, rng_),
                                block_size_, dtype_);
  dp = {std::move(x), std::move(y)};
  return true;
}

}  // namespace spire
