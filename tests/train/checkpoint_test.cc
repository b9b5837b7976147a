// Tests of train/file_util (CRC32C, atomic writes) and train/checkpoint
// (safetensors round trips, validation of corrupt files, the checkpoint index)
// plus interop with the PyPI `safetensors` package when it is installed.
#include <dirent.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/tensor.h"
#include "tests/support/op_test_util.h"
#include "train/checkpoint.h"
#include "train/file_util.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

#ifndef SPIRE_SOURCE_DIR
#error "tests/CMakeLists.txt must define SPIRE_SOURCE_DIR"
#endif

namespace spire::testing {
namespace {

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

bool python_has(const std::string& modules) {
  std::string out;
  return run_command("python3 -c 'import " + modules + "' >/dev/null 2>&1", &out) == 0;
}

std::string script(const std::string& name) {
  return std::string(SPIRE_SOURCE_DIR) + "/tests/train/py/" + name;
}

std::vector<std::vector<std::string>> split_lines(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    std::vector<std::string> fields;
    std::string field;
    std::istringstream ls(line);
    while (std::getline(ls, field, '\t')) fields.push_back(field);
    rows.push_back(fields);
  }
  return rows;
}

// Tensors of every supported dtype, including a scalar and empty tensors.
std::map<std::string, Tensor> sample_tensors() {
  std::map<std::string, Tensor> t;
  t["dense/w"] = Tensor::from_vector<float>({2, 3}, {0.5f, -1.25f, 3.0f, 1e-30f, -0.0f, 7.75f});
  t["dense/b"] = Tensor::from_vector<double>({3}, {1e300, -2.5, 0.125});
  t["step"] = Tensor::scalar<int64_t>(1200);
  t["counts"] = Tensor::from_vector<int32_t>({2, 2}, {1, -2, 2147483647, -2147483647 - 1});
  t["mask"] = Tensor::from_vector<bool>({5}, {true, false, true, true, false});
  t["empty_f32"] = Tensor(DType::F32, {0, 4});
  t["empty_i64"] = Tensor(DType::I64, {0});
  t["scalar_f64"] = Tensor::scalar<double>(-3.5);
  t["flag"] = Tensor::scalar<bool>(true);
  return t;
}

void expect_same_tensor(const Tensor& a, const Tensor& b, const std::string& name) {
  SCOPED_TRACE(name);
  ASSERT_TRUE(b.defined());
  EXPECT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(b.device(), Device::cpu());
  if (a.nbytes()) {
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
  }
}

void expect_same_tensors(const std::map<std::string, Tensor>& a,
                         const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << name;
    expect_same_tensor(t, it->second, name);
  }
}

// A foreign (no Spire keys) safetensors file from a header JSON and data.
std::string foreign_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

// Expects load_checkpoint to throw an error naming the file and `what`,
// leaving the caller's result untouched.
void expect_load_error(const std::string& path, const std::vector<std::string>& what) {
  std::map<std::string, Tensor> result{{"sentinel", Tensor::scalar<float>(1)}};
  std::vector<std::string> subs = what;
  subs.push_back(path);
  expect_error([&] { result = load_checkpoint(path); }, subs);
  EXPECT_EQ(result.size(), 1u);
  EXPECT_EQ(result.count("sentinel"), 1u);
}

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  return n;
}

// ---- CRC32C ----------------------------------------------------------------

TEST(Crc32c, KnownVectors) {
  const char* digits = "123456789";
  EXPECT_EQ(crc32c(digits, 9), 0xe3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff'), up(32, 0), down(32, 0);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<char>(i);
    down[i] = static_cast<char>(31 - i);
  }
  // RFC 3720 (iSCSI) B.4 test vectors.
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8a9136aau);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62a8ab43u);
  EXPECT_EQ(crc32c(up.data(), 32), 0x46dd794eu);
  EXPECT_EQ(crc32c(down.data(), 32), 0x113fdb5cu);
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(detail::crc32c_extend_software(0, digits, 9), 0xe3069283u);
  EXPECT_EQ(detail::crc32c_extend_software(0, zeros.data(), 32), 0x8a9136aau);
  EXPECT_EQ(crc32c_hex(0xe3069283u), "e3069283");
  EXPECT_EQ(crc32c_hex(0x0000abcdu), "0000abcd");
}

TEST(Crc32c, HardwareMatchesSoftwareAtAllLengthsAndAlignments) {
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(300);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t start = 0; start < 9; ++start)
    for (size_t n = 0; n + start <= buf.size(); n += (n < 40 ? 1 : 37))
      ASSERT_EQ(crc32c(buf.data() + start, n),
                detail::crc32c_extend_software(0, buf.data() + start, n))
          << "start " << start << " n " << n;
  RecordProperty("hardware", detail::crc32c_uses_hardware() ? "sse4.2" : "table");
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::string s = "The quick brown fox jumps over the lazy dog, twice over.";
  for (size_t cut = 0; cut <= s.size(); ++cut)
    EXPECT_EQ(crc32c_extend(crc32c(s.data(), cut), s.data() + cut, s.size() - cut),
              crc32c(s.data(), s.size()));
}

TEST(Crc32c, MaskRoundTripsAndMatchesTensorFlow) {
  uint32_t crc = crc32c("foo", 3);
  EXPECT_NE(mask_crc32c(crc), crc);
  EXPECT_NE(mask_crc32c(mask_crc32c(crc)), mask_crc32c(crc));
  EXPECT_EQ(unmask_crc32c(mask_crc32c(crc)), crc);
  EXPECT_EQ(unmask_crc32c(unmask_crc32c(mask_crc32c(mask_crc32c(crc)))), crc);
  EXPECT_EQ(mask_crc32c(0xe3069283u), ((0xe3069283u >> 15) | (0xe3069283u << 17)) + 0xa282ead8u);
  EXPECT_EQ(masked_crc32c("123456789", 9), mask_crc32c(0xe3069283u));
}

// ---- file_util -----------------------------------------------------------------

TEST(FileUtil, AtomicWriteReplacesAndLeavesNoTempFiles) {
  TempDir dir;
  std::string path = dir.file("data.bin");
  atomic_write_file(path, std::string("first"));
  EXPECT_EQ(read_file(path), "first");
  std::string big(1 << 20, 'x');
  big[12345] = '\0';
  atomic_write_file(path, big);
  EXPECT_EQ(read_file(path), big);
  atomic_write_file(path, std::string());
  EXPECT_EQ(read_file(path), "");
  atomic_write_file_parts(path, {"ab", "", "cde"});
  EXPECT_EQ(read_file(path), "abcde");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"data.bin"});
}

TEST(FileUtil, ErrorsNameThePathAndReason) {
  TempDir dir;
  std::string missing_dir = dir.file("no/such/dir/file.bin");
  expect_error([&] { atomic_write_file(missing_dir, std::string("x")); },
               {missing_dir, "No such file or directory"});
  expect_error([&] { read_file(dir.file("absent")); },
               {dir.file("absent"), "No such file or directory"});
  expect_error([&] { read_file(dir.path()); }, {dir.path(), "directory"});
  // Renaming a file over a non-empty directory fails; the temp file is removed.
  std::filesystem::create_directories(dir.file("occupied/inner"));
  expect_error([&] { atomic_write_file(dir.file("occupied"), std::string("x")); },
               {dir.file("occupied"), "rename"});
  EXPECT_EQ(dir.list(), std::vector<std::string>{"occupied"});
}

TEST(FileUtil, MakeDirsAndJoin) {
  TempDir dir;
  std::string nested = dir.file("a/b/c");
  make_dirs(nested);
  make_dirs(nested);  // idempotent
  EXPECT_TRUE(std::filesystem::is_directory(nested));
  atomic_write_file(dir.file("plain"), std::string("x"));
  expect_error([&] { make_dirs(dir.file("plain")); }, {"not a directory"});
  EXPECT_EQ(join_path("a", "b"), "a/b");
  EXPECT_EQ(join_path("a/", "b"), "a/b");
  EXPECT_EQ(join_path("", "b"), "b");
}

// ---- checkpoints: round trips ------------------------------------------------

TEST(Checkpoint, RoundTripsEveryDtypeScalarsAndEmptyTensors) {
  TempDir dir;
  auto tensors = sample_tensors();
  // f16 / bf16 are storage-only dtypes: raw bytes round trip.
  Tensor h(DType::F16, {3});
  const uint16_t half_bits[3] = {0x3c00, 0xc000, 0x7bff};
  std::memcpy(h.raw_data(), half_bits, sizeof(half_bits));
  tensors["half"] = h;
  std::string path = dir.file("model.safetensors");
  save_checkpoint(path, tensors, {{"note", "hello"}, {"step", "1200"}});
  Checkpoint ck = read_checkpoint(path);
  expect_same_tensors(tensors, ck.tensors);
  EXPECT_EQ(ck.metadata.at("note"), "hello");
  EXPECT_EQ(ck.metadata.at("step"), "1200");
  EXPECT_EQ(ck.metadata.at("spire_format_version"), "1");
  EXPECT_EQ(ck.metadata.at("spire_crc32c").size(), 8u);
  EXPECT_EQ(ck.metadata.at("spire_header_crc32c").size(), 8u);
  EXPECT_EQ(ck.tensors.at("mask").to_vector<bool>(),
            (std::vector<bool>{true, false, true, true, false}));
  EXPECT_EQ(ck.tensors.at("step").item<int64_t>(), 1200);
  EXPECT_EQ(ck.tensors.at("step").rank(), 0);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"model.safetensors"});
}

TEST(Checkpoint, EmptyMapAndLargeTensorRoundTrip) {
  TempDir dir;
  save_checkpoint(dir.file("empty.safetensors"), {});
  EXPECT_TRUE(load_checkpoint(dir.file("empty.safetensors")).empty());
  std::vector<float> v(1 << 20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f;
  std::map<std::string, Tensor> big{{"big", Tensor::from_vector<float>({1024, 1024}, v)}};
  save_checkpoint(dir.file("big.safetensors"), big);
  expect_same_tensors(big, load_checkpoint(dir.file("big.safetensors")));
}

TEST(Checkpoint, FileLayoutIsSafetensors) {
  TempDir dir;
  std::string path = dir.file("m.safetensors");
  save_checkpoint(path, sample_tensors());
  std::string bytes = read_file(path);
  uint64_t n = header_length(bytes);
  EXPECT_EQ(n % 8, 0u) << "header padded to 8-byte alignment";
  ASSERT_LE(8 + n, bytes.size());
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_NE(header.find("\"dtype\":\"BOOL\""), std::string::npos);
  EXPECT_NE(header.find("\"data_offsets\":[0,"), std::string::npos);
  EXPECT_NE(header.find("\"__metadata__\""), std::string::npos);
  size_t data_bytes = 0;
  for (const auto& [name, t] : sample_tensors()) data_bytes += t.nbytes();
  EXPECT_EQ(bytes.size(), 8 + n + data_bytes) << "no gaps in the data section";
}

TEST(Checkpoint, SaveRejectsBadInputsAndKeepsTheOldFile) {
  TempDir dir;
  std::string path = dir.file("m.safetensors");
  save_checkpoint(path, {{"a", Tensor::scalar<float>(1)}});
  std::string before = read_file(path);
  expect_error([&] { save_checkpoint(path, {{"a", Tensor()}}); }, {path, "'a'", "undefined"});
  expect_error([&] { save_checkpoint(path, {{"__metadata__", Tensor::scalar<float>(1)}}); },
               {"reserved"});
  expect_error([&] { save_checkpoint(path, {}, {{"spire_crc32c", "0"}}); }, {"reserved"});
  expect_error([&] { save_checkpoint(path, {{"bad\xff", Tensor::scalar<float>(1)}}); },
               {path, "UTF-8"});
  EXPECT_EQ(read_file(path), before);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"m.safetensors"});
  expect_error([&] { save_checkpoint(dir.file("missing/m.safetensors"), {}); },
               {dir.file("missing/m.safetensors"), "No such file"});
}

// ---- checkpoints: corrupt files --------------------------------------------------

class CheckpointCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    good_ = dir_.file("good.safetensors");
    save_checkpoint(good_, sample_tensors(), {{"note", "x"}});
    bytes_ = read_file(good_);
    header_len_ = header_length(bytes_);
  }
  std::string write_variant(const std::string& bytes) {
    std::string path = dir_.file("bad.safetensors");
    write_raw(path, bytes);
    return path;
  }
  TempDir dir_;
  std::string good_, bytes_;
  uint64_t header_len_ = 0;
};

TEST_F(CheckpointCorruption, MissingOrShortFile) {
  expect_load_error(dir_.file("absent.safetensors"), {"cannot open", "No such file"});
  expect_load_error(write_variant(""), {"too short"});
  expect_load_error(write_variant(bytes_.substr(0, 5)), {"too short"});
}

TEST_F(CheckpointCorruption, OversizedHeader) {
  std::string b = bytes_;
  b[5] = 1;  // header length ~ 2^40
  expect_load_error(write_variant(b), {"oversized header", "limit"});
  b = bytes_;
  uint64_t too_long = b.size();  // longer than what follows the length
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((too_long >> (8 * i)) & 0xff);
  expect_load_error(write_variant(b), {"oversized header"});
}

TEST_F(CheckpointCorruption, TruncatedFileAtEveryLength) {
  expect_load_error(write_variant(bytes_.substr(0, bytes_.size() - 4)), {"truncated"});
  for (size_t len = 0; len < bytes_.size(); ++len) {
    std::string path = write_variant(bytes_.substr(0, len));
    EXPECT_THROW(load_checkpoint(path), Error) << "prefix of " << len << " bytes";
  }
}

TEST_F(CheckpointCorruption, TrailingBytes) {
  expect_load_error(write_variant(bytes_ + "junk"), {"length mismatch", "trailing"});
}

TEST_F(CheckpointCorruption, BitFlipInDataFailsTheChecksum) {
  std::string b = bytes_;
  b[8 + header_len_ + 3] ^= 0x10;
  expect_load_error(write_variant(b), {"data checksum mismatch"});
}

TEST_F(CheckpointCorruption, BitFlipInHeaderJson) {
  std::string header = bytes_.substr(8, header_len_);
  // A flip inside a tensor name keeps the JSON valid: the header CRC catches it.
  size_t name_pos = header.find("dense/w");
  ASSERT_NE(name_pos, std::string::npos);
  std::string b = bytes_;
  b[8 + name_pos + 2] ^= 0x01;
  expect_load_error(write_variant(b), {"header checksum mismatch"});
  // A flip of the opening brace makes the JSON malformed.
  b = bytes_;
  b[8] ^= 0x01;
  expect_load_error(write_variant(b), {"malformed JSON"});
  // A flip in a shape digit.
  size_t shape_pos = header.find("\"shape\":[2,3]");
  ASSERT_NE(shape_pos, std::string::npos);
  b = bytes_;
  b[8 + shape_pos + 9] ^= 0x01;  // '2' -> '3'
  EXPECT_THROW(load_checkpoint(write_variant(b)), Error);
}

TEST(CheckpointBitFlips, EverySingleBitFlipIsDetected) {
  // A small checkpoint with each kind of content (metadata, several dtypes,
  // an empty tensor); each byte is patched in place, loaded, and restored.
  TempDir dir;
  std::string path = dir.file("flip.safetensors");
  save_checkpoint(path,
                  {{"w", Tensor::from_vector<float>({2}, {1.5f, -2.0f})},
                   {"m", Tensor::from_vector<bool>({2}, {true, false})},
                   {"e", Tensor(DType::I64, {0})}},
                  {{"k", "v"}});
  const std::string bytes = read_file(path);
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  auto put = [&](size_t pos, char c) {
    ASSERT_EQ(std::fseek(f, static_cast<long>(pos), SEEK_SET), 0);
    ASSERT_EQ(std::fputc(static_cast<unsigned char>(c), f), static_cast<unsigned char>(c));
    ASSERT_EQ(std::fflush(f), 0);
  };
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      put(i, static_cast<char>(bytes[i] ^ (1 << bit)));
      EXPECT_THROW(load_checkpoint(path), Error) << "byte " << i << " bit " << bit;
    }
    put(i, bytes[i]);
  }
  std::fclose(f);
  EXPECT_EQ(load_checkpoint(path).size(), 3u);
}

TEST_F(CheckpointCorruption, SpireKeysMustBeComplete) {
  // Drop spire_header_crc32c by renaming it: a Spire file lacking a key is corrupt.
  std::string b = bytes_;
  size_t pos = b.find("spire_header_crc32c");
  ASSERT_NE(pos, std::string::npos);
  b[pos + 6] = 'H';
  expect_load_error(write_variant(b), {"lacks", "spire_header_crc32c"});
}

// ---- foreign files (no Spire keys): structural validation ----------------------

TEST(CheckpointForeign, ValidFileWithoutChecksumLoads) {
  TempDir dir;
  std::string data(12, '\0');
  float f[2] = {1.5f, -2.0f};
  int32_t i = 42;
  std::memcpy(&data[0], f, 8);
  std::memcpy(&data[8], &i, 4);
  std::string path = dir.file("foreign.safetensors");
  write_raw(path, foreign_file(
                      R"({"b":{"dtype":"I32","shape":[],"data_offsets":[8,12]},)"
                      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" "    ",
                      data));
  Checkpoint ck = read_checkpoint(path);
  EXPECT_TRUE(ck.metadata.empty());
  EXPECT_EQ(ck.tensors.at("a").to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(ck.tensors.at("b").item<int32_t>(), 42);
}

TEST(CheckpointForeign, StructuralErrors) {
  TempDir dir;
  std::string path = dir.file("f.safetensors");
  auto check = [&](const std::string& header, size_t data_len,
                   const std::vector<std::string>& what) {
    SCOPED_TRACE(header);
    write_raw(path, foreign_file(header, std::string(data_len, '\0')));
    expect_load_error(path, what);
  };
  check("{not json", 0, {"malformed JSON"});
  check("[1,2]", 0, {"not an object"});
  check(std::string("{}\0\0\0\0\0\0", 8), 0, {"malformed JSON", "NUL"});
  check(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2,
        {"'a'", "unknown", "F8_E4M3"});
  check(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, {"non-negative"});
  check(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8, {"non-negative"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", 12,
        {"'a'", "span 12 bytes", "needs 8"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, {"end before"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, {"data_offsets"});
  check(R"({"a":{"dtype":"F32","shape":[2]}})", 8, {"data_offsets"});
  check(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8, {"dtype"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
        12, {"overlap"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
        20, {"gap"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12, {"gap"});
  check(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8, {"truncated"});
  check(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8,
        {"too large"});
  check(R"({"__metadata__":{"k":1}})", 0, {"not a string"});
  check(R"({"__metadata__":[]})", 0, {"__metadata__"});
  check(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", 0, {"truncated"});
  // A BOOL byte other than 0/1.
  write_raw(path, foreign_file(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})",
                               std::string("\x01\x02", 2)));
  expect_load_error(path, {"BOOL", "byte value 2"});
  // A newer format version is refused.
  write_raw(path, foreign_file(R"({"__metadata__":{"spire_format_version":"99",)"
                               R"("spire_crc32c":"00000000","spire_header_crc32c":"00000000"}})",
                               ""));
  expect_load_error(path, {"newer"});
}

// ---- the checkpoint index ---------------------------------------------------------

std::map<std::string, Tensor> step_tensors(int64_t step) {
  return {{"w", Tensor::from_vector<float>({2}, {static_cast<float>(step), 1.0f})},
          {"global_step", Tensor::scalar<int64_t>(step)}};
}

TEST(CheckpointIndex, MaxToKeepDeletesTheOldest) {
  TempDir dir;
  std::string ckdir = dir.file("train_log/run1");
  EXPECT_EQ(latest_checkpoint(ckdir), "");
  for (int64_t step = 100; step <= 600; step += 100) {
    std::string path = save_checkpoint_in_dir(ckdir, "model", step, step_tensors(step), 3);
    EXPECT_EQ(path, ckdir + "/model-" + std::to_string(step) + ".safetensors");
    EXPECT_EQ(latest_checkpoint(ckdir), path);
  }
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(ckdir))
    files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"checkpoint", "model-400.safetensors",
                                             "model-500.safetensors", "model-600.safetensors"}));
  auto index = read_checkpoint_index(ckdir);
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(index->latest, "model-600.safetensors");
  EXPECT_EQ(index->all, (std::vector<std::string>{"model-400.safetensors", "model-500.safetensors",
                                                  "model-600.safetensors"}));
  auto restored = load_checkpoint(latest_checkpoint(ckdir));
  EXPECT_EQ(restored.at("global_step").item<int64_t>(), 600);
  // The index file is JSON in the documented shape.
  std::string text = read_file(ckdir + "/checkpoint");
  EXPECT_NE(text.find("\"latest\": \"model-600.safetensors\""), std::string::npos) << text;
}

TEST(CheckpointIndex, ResavingAStepAndKeepingAll) {
  TempDir dir;
  save_checkpoint_in_dir(dir.path(), "m", 1, step_tensors(1), 0);
  save_checkpoint_in_dir(dir.path(), "m", 2, step_tensors(2), 0);
  save_checkpoint_in_dir(dir.path(), "m", 1, step_tensors(1), 0);
  auto index = read_checkpoint_index(dir.path());
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(index->all, (std::vector<std::string>{"m-2.safetensors", "m-1.safetensors"}));
  EXPECT_EQ(index->latest, "m-1.safetensors");
  for (int i = 3; i <= 8; ++i) save_checkpoint_in_dir(dir.path(), "m", i, step_tensors(i), 0);
  EXPECT_EQ(read_checkpoint_index(dir.path())->all.size(), 8u);
  expect_error([&] { save_checkpoint_in_dir(dir.path(), "a/b", 1, step_tensors(1), 0); },
               {"prefix"});
}

TEST(CheckpointIndex, CorruptIndexIsAClearError) {
  TempDir dir;
  save_checkpoint_in_dir(dir.path(), "m", 1, step_tensors(1), 2);
  std::string index_path = dir.file("checkpoint");
  std::string good = read_file(index_path);
  auto check = [&](const std::string& text, const std::string& what) {
    SCOPED_TRACE(text);
    write_raw(index_path, text);
    expect_error([&] { latest_checkpoint(dir.path()); }, {index_path, "corrupt", what});
    // Saving does not overwrite a corrupt index (nor write the checkpoint).
    expect_error([&] { save_checkpoint_in_dir(dir.path(), "m", 2, step_tensors(2), 2); },
                 {index_path, "corrupt"});
    EXPECT_EQ(read_file(index_path), text);
    EXPECT_FALSE(path_exists(dir.file("m-2.safetensors")));
  };
  check("{\"latest\": \"m-1.safe", "malformed JSON");
  check("[]", "not a JSON object");
  check(good + std::string(1, '\0'), "malformed JSON");
  check("{\"all\": []}", "latest");
  check("{\"latest\": 3, \"all\": []}", "latest");
  check("{\"latest\": \"m-1.safetensors\", \"all\": \"x\"}", "all");
  check("{\"latest\": \"m-1.safetensors\", \"all\": [1]}", "non-string");
  check("{\"latest\": \"m-1.safetensors\", \"all\": [\"../../etc/passwd\"]}", "plain file name");
  check("{\"latest\": \"/etc/passwd\", \"all\": []}", "plain file name");
  write_raw(index_path, good);
  EXPECT_EQ(latest_checkpoint(dir.path()), dir.file("m-1.safetensors"));
  // An index naming a deleted file.
  std::filesystem::remove(dir.file("m-1.safetensors"));
  expect_error([&] { latest_checkpoint(dir.path()); }, {"m-1.safetensors", "does not exist"});
}

TEST(CheckpointIndex, WriteAndReadBack) {
  TempDir dir;
  EXPECT_FALSE(read_checkpoint_index(dir.path()).has_value());
  write_checkpoint_index(dir.path(), {"b.safetensors", {"a.safetensors", "b.safetensors"}});
  auto index = read_checkpoint_index(dir.path());
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(index->latest, "b.safetensors");
  EXPECT_EQ(index->all.size(), 2u);
  expect_error([&] { write_checkpoint_index(dir.path(), {"../x", {}}); }, {"plain file name"});
  EXPECT_EQ(dir.list(), std::vector<std::string>{"checkpoint"});
}

// ---- interop with the PyPI safetensors package -------------------------------------

TEST(CheckpointInterop, PythonSafetensorsLoadsSpireCheckpoint) {
  if (!python_has("safetensors, numpy"))
    GTEST_SKIP() << "python3 with the `safetensors` and `numpy` packages is not available "
                    "(pip install safetensors numpy); skipping the external-client check";
  TempDir dir;
  std::string path = dir.file("spire.safetensors");
  auto tensors = sample_tensors();
  save_checkpoint(path, tensors, {{"note", "from spire"}});
  std::string out;
  int rc = run_command("python3 '" + script("load_safetensors.py") + "' '" + path + "'", &out);
  ASSERT_EQ(rc, 0) << "load_safetensors.py failed:\n" << out;
  std::map<std::string, std::vector<std::string>> seen;
  std::map<std::string, std::string> meta;
  for (const auto& row : split_lines(out)) {
    if (row.size() == 5 && row[0] == "tensor") seen[row[1]] = row;
    if (row.size() == 3 && row[0] == "meta") meta[row[1]] = row[2];
  }
  ASSERT_EQ(seen.size(), tensors.size()) << out;
  const std::map<DType, std::string> numpy_dtype = {{DType::F32, "float32"},
                                                    {DType::F64, "float64"},
                                                    {DType::I32, "int32"},
                                                    {DType::I64, "int64"},
                                                    {DType::Bool, "bool"}};
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_EQ(seen.count(name), 1u);
    const auto& row = seen[name];
    EXPECT_EQ(row[2], numpy_dtype.at(t.dtype()));
    std::string shape = "[";
    for (int i = 0; i < t.rank(); ++i) shape += (i ? "," : "") + std::to_string(t.dim(i));
    EXPECT_EQ(row[3], shape + "]");
    double sum = 0;
    for (int64_t i = 0; i < t.num_elements(); ++i) sum += t.element_as_double(i);
    double py_sum = std::strtod(row[4].c_str(), nullptr);
    EXPECT_NEAR(py_sum, sum, 1e-12 * std::max(1.0, std::abs(sum))) << row[4];
  }
  EXPECT_EQ(meta["note"], "from spire");
  EXPECT_EQ(meta["spire_format_version"], "1");
}

TEST(CheckpointInterop, SpireLoadsPythonSafetensorsFile) {
  if (!python_has("safetensors, numpy"))
    GTEST_SKIP() << "python3 with the `safetensors` and `numpy` packages is not available "
                    "(pip install safetensors numpy); skipping the external-client check";
  TempDir dir;
  std::string path = dir.file("python.safetensors");
  std::string out;
  int rc = run_command("python3 '" + script("write_safetensors.py") + "' '" + path + "' 2>&1", &out);
  ASSERT_EQ(rc, 0) << "write_safetensors.py failed:\n" << out;
  Checkpoint ck = read_checkpoint(path);  // no Spire checksum: structural validation only
  EXPECT_EQ(ck.metadata.at("producer"), "safetensors-python");
  ASSERT_EQ(ck.tensors.size(), 6u);
  EXPECT_EQ(ck.tensors.at("weights").shape(), Shape({2, 3}));
  EXPECT_EQ(ck.tensors.at("weights").to_vector<float>(),
            (std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}));
  EXPECT_EQ(ck.tensors.at("bias").to_vector<double>(), (std::vector<double>{-1.5, 2.25, 1e300}));
  EXPECT_EQ(ck.tensors.at("ids").to_vector<int64_t>(),
            (std::vector<int64_t>{1, -2, 3, int64_t{1} << 40}));
  EXPECT_EQ(ck.tensors.at("count").rank(), 0);
  EXPECT_EQ(ck.tensors.at("count").item<int32_t>(), 7);
  EXPECT_EQ(ck.tensors.at("mask").to_vector<bool>(), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(ck.tensors.at("empty").shape(), Shape({0, 4}));
  EXPECT_EQ(ck.tensors.at("empty").dtype(), DType::F32);
  // Re-saving it with Spire adds the checksums and still loads.
  save_checkpoint(dir.file("resaved.safetensors"), ck.tensors);
  expect_same_tensors(ck.tensors, load_checkpoint(dir.file("resaved.safetensors")));
}

}  // namespace
}  // namespace spire::testing
