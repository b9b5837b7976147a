// Tests of train/event_writer: the hand-written tensorflow.Event encoding,
// TFRecord framing with masked CRC32C (re-read and verified in C++), the
// EventFileWriter's files, and -- when the PyPI `tensorboard` package is
// installed -- that TensorBoard's own loader reads what Spire wrote.
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/support/op_test_util.h"
#include "train/event_writer.h"
#include "train/file_util.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

#ifndef SPIRE_SOURCE_DIR
#error "tests/CMakeLists.txt must define SPIRE_SOURCE_DIR"
#endif

namespace spire::testing {
namespace {

// ---- a minimal protobuf decoder for checking the encoding ----

struct DecodedValue {
  std::string tag;
  float simple_value = 0;
  bool has_simple_value = false;
};
struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  bool has_summary = false;
  std::vector<DecodedValue> values;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  bool done() const { return pos_ >= s_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos_ >= s_.size()) throw Error("varint past the end");
      uint8_t b = static_cast<uint8_t>(s_[pos_++]);
      v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) return v;
    }
    throw Error("varint too long");
  }
  uint64_t fixed(int n) {
    if (pos_ + n > s_.size()) throw Error("fixed past the end");
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(s_[pos_++])} << (8 * i);
    return v;
  }
  std::string bytes() {
    uint64_t n = varint();
    if (n > s_.size() - pos_) throw Error("bytes past the end");
    std::string out = s_.substr(pos_, n);
    pos_ += n;
    return out;
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

DecodedValue decode_value(const std::string& s) {
  DecodedValue v;
  Reader r(s);
  while (!r.done()) {
    uint64_t key = r.varint();
    if (key == 0x0A) {
      v.tag = r.bytes();
    } else if (key == 0x15) {
      uint32_t bits = static_cast<uint32_t>(r.fixed(4));
      std::memcpy(&v.simple_value, &bits, 4);
      v.has_simple_value = true;
    } else {
      throw Error(str_cat("unexpected Summary.Value key ", key));
    }
  }
  return v;
}

DecodedEvent decode_event(const std::string& s) {
  DecodedEvent e;
  Reader r(s);
  while (!r.done()) {
    uint64_t key = r.varint();
    if (key == 0x09) {
      uint64_t bits = r.fixed(8);
      std::memcpy(&e.wall_time, &bits, 8);
    } else if (key == 0x10) {
      e.step = static_cast<int64_t>(r.varint());
    } else if (key == 0x1A) {
      e.file_version = r.bytes();
    } else if (key == 0x2A) {
      e.has_summary = true;
      std::string summary = r.bytes();
      Reader sr(summary);
      while (!sr.done()) {
        if (sr.varint() != 0x0A) throw Error("unexpected Summary key");
        e.values.push_back(decode_value(sr.bytes()));
      }
    } else {
      throw Error(str_cat("unexpected Event key ", key));
    }
  }
  return e;
}

std::vector<DecodedEvent> read_events(const std::string& path) {
  std::vector<DecodedEvent> out;
  for (const std::string& rec : read_tfrecords(path)) out.push_back(decode_event(rec));
  return out;
}

std::string only_event_file(const TempDir& dir, const std::string& sub = "") {
  auto names = dir.list(sub);
  if (names.size() != 1) throw Error(str_cat("expected one file, found ", names.size()));
  return dir.path() + (sub.empty() ? "" : "/" + sub) + "/" + names[0];
}

// ---- encoding ------------------------------------------------------------------

TEST(EventEncoding, ScalarEventMatchesHandEncodedProtobuf) {
  std::string got = encode_scalar_event(1.5, 3, {{"a", 2.0f}});
  const unsigned char want[] = {
      0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F,  // wall_time = 1.5 (fixed64)
      0x10, 0x03,                          // step = 3 (varint)
      0x2A, 0x0A,                          // summary, 10 bytes
      0x0A, 0x08,                          //   value, 8 bytes
      0x0A, 0x01, 'a',                     //     tag = "a"
      0x15, 0, 0, 0, 0x40};                //     simple_value = 2.0f (fixed32)
  EXPECT_EQ(got, std::string(reinterpret_cast<const char*>(want), sizeof(want)));
}

TEST(EventEncoding, FileVersionAndNegativeAndLargeSteps) {
  std::string fv = encode_file_version_event(0.25, 0, "brain.Event:2");
  DecodedEvent e = decode_event(fv);
  EXPECT_EQ(e.file_version, "brain.Event:2");
  EXPECT_EQ(e.wall_time, 0.25);
  EXPECT_FALSE(e.has_summary);
  for (int64_t step : {int64_t{0}, int64_t{127}, int64_t{128}, int64_t{1} << 40, int64_t{-1},
                       std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    DecodedEvent d = decode_event(encode_scalar_event(1.0, step, {{"x", 1.0f}}));
    EXPECT_EQ(d.step, step);
  }
  // A long tag needs a multi-byte length varint.
  std::string tag(300, 't');
  DecodedEvent d = decode_event(encode_scalar_event(1.0, 1, {{tag, -0.5f}, {"b", 1e30f}}));
  ASSERT_EQ(d.values.size(), 2u);
  EXPECT_EQ(d.values[0].tag, tag);
  EXPECT_EQ(d.values[0].simple_value, -0.5f);
  EXPECT_EQ(d.values[1].tag, "b");
  EXPECT_EQ(d.values[1].simple_value, 1e30f);
}

TEST(EventEncoding, TfRecordFramingAndCrcChecks) {
  TempDir dir;
  std::string data = "hello event";
  std::string rec = encode_tfrecord(data);
  ASSERT_EQ(rec.size(), 8 + 4 + data.size() + 4);
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= uint64_t{static_cast<uint8_t>(rec[i])} << (8 * i);
  EXPECT_EQ(len, data.size());
  auto u32_at = [&](size_t pos) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(rec[pos + i])} << (8 * i);
    return v;
  };
  EXPECT_EQ(u32_at(8), masked_crc32c(rec.data(), 8));
  EXPECT_EQ(rec.substr(12, data.size()), data);
  EXPECT_EQ(u32_at(12 + data.size()), masked_crc32c(data.data(), data.size()));

  std::string path = dir.path() + "/records";
  std::string two = rec + encode_tfrecord("") + encode_tfrecord(std::string(1000, 'z'));
  atomic_write_file(path, two);
  auto records = read_tfrecords(path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0], data);
  EXPECT_EQ(records[1], "");
  EXPECT_EQ(records[2], std::string(1000, 'z'));
  // Every bit flip is caught by one of the CRCs (or as truncation).
  for (size_t i = 0; i < rec.size(); ++i) {
    std::string bad = two;
    bad[i] ^= 0x04;
    atomic_write_file(path, bad);
    EXPECT_THROW(read_tfrecords(path), Error) << "byte " << i;
  }
  std::string bad = two;
  bad[14] ^= 0x01;
  atomic_write_file(path, bad);
  expect_error([&] { read_tfrecords(path); }, {path, "record 0", "data CRC mismatch"});
  bad = two;
  bad[2] ^= 0x01;
  atomic_write_file(path, bad);
  expect_error([&] { read_tfrecords(path); }, {"length CRC mismatch"});
  atomic_write_file(path, two.substr(0, two.size() - 3));
  expect_error([&] { read_tfrecords(path); }, {"record 2", "truncated"});
}

// ---- EventFileWriter -------------------------------------------------------------

TEST(EventFileWriter, WritesVersionThenScalars) {
  TempDir dir;
  std::string logdir = dir.path() + "/train_log/run";  // created on demand
  std::string path;
  {
    EventFileWriter w(logdir);
    path = w.path();
    w.add_scalar("loss", 0.75, 10, 1700000000.5);
    w.add_scalar("loss", 0.5, 20);
    w.add_scalars({{"accuracy", 0.25}, {"lr", 1e-3}}, 20);
    w.flush();
    // Flushed records are visible while the writer is open.
    EXPECT_EQ(read_events(path).size(), 4u);
    w.add_scalar("loss", 0.125, 30);
  }  // the destructor flushes and closes
  EXPECT_EQ(path.rfind(logdir + "/events.out.tfevents.", 0), 0u) << path;
  EXPECT_EQ(only_event_file(dir, "train_log/run"), path);
  auto events = read_events(path);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_NEAR(events[0].wall_time, unix_time_now(), 600);
  EXPECT_EQ(events[1].wall_time, 1700000000.5);
  EXPECT_EQ(events[1].step, 10);
  ASSERT_EQ(events[1].values.size(), 1u);
  EXPECT_EQ(events[1].values[0].tag, "loss");
  EXPECT_EQ(events[1].values[0].simple_value, 0.75f);
  EXPECT_NEAR(events[2].wall_time, unix_time_now(), 600);
  ASSERT_EQ(events[3].values.size(), 2u);
  EXPECT_EQ(events[3].step, 20);
  EXPECT_EQ(events[3].values[0].tag, "accuracy");
  EXPECT_EQ(events[3].values[1].tag, "lr");
  EXPECT_EQ(events[3].values[1].simple_value, 1e-3f);
  EXPECT_EQ(events[4].values[0].simple_value, 0.125f);
}

TEST(EventFileWriter, DistinctFilesSuffixAndClose) {
  TempDir dir;
  EventFileWriter a(dir.path());
  EventFileWriter b(dir.path(), ".eval");
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(b.path().substr(b.path().size() - 5), ".eval");
  EXPECT_EQ(dir.list().size(), 2u);
  EXPECT_TRUE(a.is_open());
  a.close();
  a.close();  // idempotent
  EXPECT_FALSE(a.is_open());
  expect_error([&] { a.add_scalar("x", 1, 1); }, {a.path(), "closed"});
  expect_error([&] { a.flush(); }, {"closed"});
  EXPECT_EQ(read_events(a.path()).size(), 1u);
  expect_error([&] { EventFileWriter bad(dir.path(), "a/b"); }, {"'/'"});
}

TEST(EventFileWriter, CannotCreateLogdirIsAClearError) {
  TempDir dir;
  std::string file = dir.path() + "/plain";
  atomic_write_file(file, std::string("x"));
  expect_error([&] { EventFileWriter w(file + "/logs"); }, {file});
}

TEST(EventFileWriter, ConcurrentWritersKeepRecordsIntact) {
  TempDir dir;
  std::string path;
  {
    EventFileWriter w(dir.path());
    path = w.path();
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&w, t] {
        for (int i = 0; i < 200; ++i) w.add_scalar("t" + std::to_string(t), i, i);
      });
    for (auto& th : threads) th.join();
  }
  EXPECT_EQ(read_events(path).size(), 1u + 4 * 200);
}

// ---- TensorBoard reads it ----------------------------------------------------------

TEST(EventFileWriter, TensorBoardReadsTheEventFile) {
  std::string probe;
  if (run_command("python3 -c 'import tensorboard' >/dev/null 2>&1", &probe) != 0)
    GTEST_SKIP() << "python3 with the `tensorboard` package is not available "
                    "(pip install tensorboard); skipping the external-client check";
  TempDir dir;
  struct Scalar {
    std::string tag;
    int64_t step;
    float value;
  };
  std::vector<Scalar> written;
  std::string path;
  {
    EventFileWriter w(dir.path());
    path = w.path();
    for (int64_t step = 0; step < 50; step += 10) {
      float loss = 1.0f / static_cast<float>(step + 1) + 0.1f;
      w.add_scalar("train/loss", loss, step, 1700000000.0 + static_cast<double>(step));
      written.push_back({"train/loss", step, loss});
    }
    w.add_scalars({{"eval/accuracy", 0.875}, {"eval/top5", 0.3333333333}}, 40);
    written.push_back({"eval/accuracy", 40, 0.875f});
    written.push_back({"eval/top5", 40, 0.3333333333f});
    w.add_scalar("big_step", -2.5e10, int64_t{1} << 40);
    written.push_back({"big_step", int64_t{1} << 40, -2.5e10f});
  }
  std::string script = std::string(SPIRE_SOURCE_DIR) + "/tests/train/py/read_events.py";
  std::string out;
  int rc = run_command("python3 '" + script + "' '" + path + "' 2>/dev/null", &out);
  ASSERT_EQ(rc, 0) << "read_events.py failed; output:\n" << out;
  std::vector<std::string> versions;
  std::vector<Scalar> read;
  std::istringstream is(out);
  std::string line;
  while (std::getline(is, line)) {
    std::vector<std::string> f;
    std::istringstream ls(line);
    std::string field;
    while (std::getline(ls, field, '\t')) f.push_back(field);
    if (f.size() == 2 && f[0] == "file_version") versions.push_back(f[1]);
    if (f.size() == 5 && f[0] == "scalar")
      read.push_back({f[2], std::strtoll(f[1].c_str(), nullptr, 10),
                      static_cast<float>(std::strtod(f[3].c_str(), nullptr))});
  }
  EXPECT_EQ(versions, std::vector<std::string>{"brain.Event:2"}) << out;
  ASSERT_EQ(read.size(), written.size()) << out;
  for (size_t i = 0; i < written.size(); ++i) {
    EXPECT_EQ(read[i].tag, written[i].tag) << i;
    EXPECT_EQ(read[i].step, written[i].step) << i;
    EXPECT_EQ(read[i].value, written[i].value) << i;  // exact: float32 round trip
  }
}

}  // namespace
}  // namespace spire::testing
