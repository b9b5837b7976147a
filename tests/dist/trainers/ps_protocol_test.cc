// The parameter-server wire format's tensor bundles (dist/trainers/ps_protocol.h): a round
// trip keeps names, dtypes, shapes and bytes; every malformed message (truncated, a huge or
// negative shape, an unknown dtype, a byte count that does not match, an absurd tensor
// count) is a spire::Error naming what was read, found before anything is allocated.
#include <cstring>

#include "dist/trainers/ps_protocol.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

// A bundle message written field by field, so a test can put anything in it.
struct Raw {
  dist::MessageWriter w;
  Raw& i64(int64_t v) {
    w.put_i64(v);
    return *this;
  }
  Raw& str(const std::string& s) {
    w.put_string(s);
    return *this;
  }
  Raw& bytes(size_t n) {
    std::vector<char> b(n, 7);
    w.put_bytes(b.data(), n);
    return *this;
  }
};

ps::Bundle read(const std::vector<char>& data) {
  dist::MessageReader r(data, "a test message");
  return ps::get_bundle(r, "the test's bundle");
}

TEST(PsProtocol, BundlesRoundTrip) {
  std::mt19937_64 rng(4);
  Tensor h(DType::BF16, Shape{7});
  for (size_t i = 0; i < h.nbytes(); ++i) static_cast<char*>(h.raw_data())[i] = static_cast<char>(i * 37 + 1);
  ps::Bundle b{{"w", random_tensor(DType::F32, {3, 4}, rng)},
               {"scalar", random_tensor(DType::F64, {}, rng)},
               {"empty", Tensor(DType::I64, Shape{0, 5})},
               {"h", h}};
  dist::MessageWriter w;
  ps::put_bundle(w, b);
  const ps::Bundle got = read(w.data());
  ASSERT_EQ(got.size(), b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(got[i].first, b[i].first);
    EXPECT_EQ(got[i].second.dtype(), b[i].second.dtype());
    EXPECT_EQ(got[i].second.shape(), b[i].second.shape());
    ASSERT_EQ(got[i].second.nbytes(), b[i].second.nbytes());
    if (b[i].second.nbytes())
      EXPECT_EQ(std::memcmp(got[i].second.raw_data(), b[i].second.raw_data(), b[i].second.nbytes()), 0);
  }
  // A bundle cut anywhere is an error, never a read past the end.
  for (size_t cut : {size_t{4}, size_t{20}, w.data().size() / 2, w.data().size() - 1}) {
    std::vector<char> part(w.data().begin(), w.data().begin() + static_cast<std::ptrdiff_t>(cut));
    try {
      read(part);
      ADD_FAILURE() << "a bundle cut at byte " << cut << " was read";
    } catch (const Error& e) {  // named by the bundle's reader or the message's
      const std::string msg = e.what();
      EXPECT_TRUE(msg.find("the test's bundle") != std::string::npos ||
                  msg.find("a test message") != std::string::npos) << msg;
    }
  }
}

TEST(PsProtocol, MalformedBundlesAreErrorsBeforeAnyAllocation) {
  // Three dimensions of 2^40 f32 elements: 2^122 bytes; the message holds 12.
  Raw huge;
  huge.i64(1).str("big").i64(static_cast<int64_t>(DType::F32)).i64(3);
  for (int d = 0; d < 3; ++d) huge.i64(int64_t{1} << 40);
  huge.i64(12).bytes(12);
  expect_error([&] { read(huge.w.data()); },
               {"the test's bundle", "tensor 'big'", "more than the message holds"});
  // A shape that fits but a byte count that lies, and one larger than the message.
  Raw lie;
  lie.i64(1).str("w").i64(static_cast<int64_t>(DType::F64)).i64(1).i64(2).i64(8).bytes(8);
  expect_error([&] { read(lie.w.data()); }, {"tensor 'w'", "8 bytes where its shape needs 16"});
  Raw cut;
  cut.i64(1).str("w").i64(static_cast<int64_t>(DType::F32)).i64(1).i64(4).i64(16).bytes(8);
  expect_error([&] { read(cut.w.data()); }, {"tensor 'w'", "cut short (16 bytes, 8 left in the message)"});
  // A negative dimension, an unknown dtype, a rank out of range, an absurd tensor count.
  Raw neg;
  neg.i64(1).str("n").i64(static_cast<int64_t>(DType::F32)).i64(2).i64(3).i64(-2).i64(0);
  expect_error([&] { read(neg.w.data()); }, {"tensor 'n'", "dimension 1 = -2"});
  Raw dtype;
  dtype.i64(1).str("d").i64(99).i64(0).i64(4).bytes(4);
  expect_error([&] { read(dtype.w.data()); }, {"tensor 'd'", "unknown dtype code 99"});
  Raw rank;
  rank.i64(1).str("r").i64(static_cast<int64_t>(DType::F32)).i64(1000).bytes(64);
  expect_error([&] { read(rank.w.data()); }, {"tensor 'r'", "rank 1000"});
  Raw count;
  count.i64(int64_t{1} << 50).bytes(64);
  expect_error([&] { read(count.w.data()); }, {"the test's bundle", "tensors in 64 bytes"});
}

}  // namespace
}  // namespace spire::testing
