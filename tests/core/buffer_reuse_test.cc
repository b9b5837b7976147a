// Buffer reuse (SessionOptions::reuse_input_buffers): an elementwise kernel writes its output
// into an input's buffer only when that input's value dies at the node and nothing else holds
// it. Each test below would see a changed value if a buffer that is still read (a later
// reader, a fetch, a hook's fetch, a variable, a constant, a view, the caller's feed, another
// lane) were overwritten; the first and the memory test see that reuse happens at all.
#include <cmath>
#include <cstdlib>
#include <set>

#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

// Fusion off, so that every elementwise op is a step of its own.
SessionOptions reuse(bool on, SessionOptions o = {}) {
  o.reuse_input_buffers = on;
  o.fuse_elementwise = false;
  return o;
}

std::vector<float> ramp(int n, float lo, float step) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = lo + step * static_cast<float>(i);
  return v;
}

// "<step>:<input>" for each step of a traced run that wrote its output into an input.
std::set<std::string> in_place_steps(const StepStats& st) {
  std::set<std::string> names;
  for (const TraceEvent& e : st.events)
    for (const auto& [k, v] : e.args)
      if (k == "in_place") names.insert(e.name + ":" + v);
  return names;
}

TEST(BufferReuse, AChainRunsInPlaceAndComputesTheSame) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {64}, "x");
  Output a = ops::exp(x * 0.5, "a");
  Output b = ops::tanh(a, "b");
  Output c = ops::neg(b, "c");
  Output d = ops::add(c, x, "d");  // x is read here last: d may reuse c's or x's buffer
  const std::vector<float> xs = ramp(64, -2.0f, 0.0625f);
  std::vector<double> want;
  for (float v : xs) want.push_back(-std::tanh(std::exp(v * 0.5f)) + v);
  for (bool on : {true, false}) {
    Session s(g, reuse(on));
    StepStats st;
    Tensor out = s.run({d}, {{x, Tensor::from_vector<float>({64}, xs)}}, {}, &st)[0];
    expect_tensor(out, {64}, want, 1e-6);
    const std::set<std::string> got = in_place_steps(st);
    if (on) {
      EXPECT_EQ(got, (std::set<std::string>{"a:0", "b:0", "c:0", "d:0"})) << "reuse on";
    } else {
      EXPECT_TRUE(got.empty()) << "reuse off";
    }
  }
}

TEST(BufferReuse, AValueReadLaterIsNotOverwritten) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {32}, "x");
  Output a = ops::exp(x, "a");
  Output b = ops::neg(a, "b");      // a is read again below: b needs its own buffer
  Output c = ops::mul(b, a, "c");   // = -exp(2x)
  const std::vector<float> xs = ramp(32, -1.0f, 0.0625f);
  std::vector<double> want;
  for (float v : xs) want.push_back(-std::exp(v) * std::exp(v));
  Session s(g, reuse(true));
  StepStats st;
  expect_tensor(s.run({c}, {{x, Tensor::from_vector<float>({32}, xs)}}, {}, &st)[0], {32}, want, 1e-6);
  EXPECT_EQ(in_place_steps(st).count("b:0"), 0u);
}

TEST(BufferReuse, FetchesAndHookFetchesKeepTheirValues) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {16}, "x");
  Output a = ops::identity(x * 3.0 - 1.0, "a");  // negative and positive values
  Output h = ops::exp(x, "h");
  Output r = ops::relu(a, "r");
  Output k = ops::neg(h, "k");
  struct FetchHook : SessionRunHook {
    Output what;
    std::vector<float> seen;
    SessionRunArgs before_run(SessionRunContext&) override { return {{what}, {}, {}, false}; }
    void after_run(SessionRunContext&, const SessionRunValues& v) override {
      seen = v.results[0].to_vector<float>();
    }
  } hook;
  hook.what = h;
  const std::vector<float> xs = ramp(16, -1.0f, 0.125f);
  std::vector<double> want_a, want_r, want_h, want_k;
  for (float v : xs) {
    want_a.push_back(v * 3.0f - 1.0f);
    want_r.push_back(std::max(0.0f, v * 3.0f - 1.0f));
    want_h.push_back(std::exp(v));
    want_k.push_back(-std::exp(v));
  }
  Session s(g);
  s.add_hook(&hook);
  auto out = s.run({a, r, k}, {{x, Tensor::from_vector<float>({16}, xs)}});
  expect_tensor(out[0], {16}, want_a, 1e-6);
  expect_tensor(out[1], {16}, want_r, 1e-6);
  expect_tensor(out[2], {16}, want_k, 1e-6);
  ASSERT_EQ(hook.seen.size(), 16u);
  for (size_t i = 0; i < 16; ++i) EXPECT_FLOAT_EQ(hook.seen[i], static_cast<float>(want_h[i])) << i;
}

TEST(BufferReuse, VariablesConstantsAndFeedsAreNeverWritten) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({3}, DType::F32, "v");
  Output k = ops::constant(Tensor::from_vector<float>({3}, {4, -5, 6}), "k");
  Output x = ops::placeholder(DType::F32, {3}, "x");
  Output nv = ops::neg(ops::identity(v), "nv");  // the identity is a view of the variable
  Output nk = ops::neg(k, "nk");
  Output nk2 = ops::neg(ops::identity(k), "nk2");
  Output nx = ops::neg(x, "nx");
  Session s(g);
  s.set_variable_value(v.node, Tensor::from_vector<float>({3}, {1, -2, 3}));
  Tensor feed = Tensor::from_vector<float>({3}, {7, -8, 9});
  for (int run = 0; run < 3; ++run) {
    auto out = s.run({nv, nk, nk2, nx}, {{x, feed}});
    expect_tensor(out[0], {3}, {-1, 2, -3});
    expect_tensor(out[1], {3}, {-4, 5, -6});
    expect_tensor(out[2], {3}, {-4, 5, -6});
    expect_tensor(out[3], {3}, {-7, 8, -9});
    expect_tensor(s.variable_value(v.node), {3}, {1, -2, 3});
    expect_tensor(feed, {3}, {7, -8, 9});
  }
}

TEST(BufferReuse, AViewOfALiveValueIsNotOverwritten) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {6}, "x");
  Output a = ops::exp(x, "a");
  Output r = ops::reshape(a, {2, 3}, "r");   // shares a's buffer
  Output nr = ops::neg(r, "nr");             // r dies here, a does not
  Output out = ops::mul(ops::reshape(nr, {6}), a, "out");  // = -exp(2x)
  const std::vector<float> xs = ramp(6, -1.0f, 0.25f);
  std::vector<double> want;
  for (float v : xs) want.push_back(-std::exp(2 * v));
  Session s(g);
  expect_tensor(s.run({out}, {{x, Tensor::from_vector<float>({6}, xs)}})[0], {6}, want, 1e-5);
}

TEST(BufferReuse, AValueReadByTwoLanesIsNotOverwritten) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {4096}, "x");
  Output a = ops::exp(x, "a");
  Output b, c;
  {
    DeviceScope d(g, Device::cpu(1));
    b = ops::neg(a, "b");
  }
  c = ops::tanh(a, "c");
  const std::vector<float> xs = ramp(4096, -1.0f, 1.0f / 2048);
  std::vector<double> want_b, want_c;
  for (float v : xs) {
    want_b.push_back(-std::exp(v));
    want_c.push_back(std::tanh(std::exp(v)));
  }
  Session s(g, cpus(2));
  for (int run = 0; run < 50; ++run) {
    auto out = s.run({b, c}, {{x, Tensor::from_vector<float>({4096}, xs)}});
    expect_tensor(out[0], {4096}, want_b, 1e-6);
    expect_tensor(out[1], {4096}, want_c, 1e-6);
  }
}

TEST(BufferReuse, LowersTheStepsPeak) {
  Graph g;
  DefaultGraphGuard guard(g);
  const int64_t n = 1 << 20;  // 4 MiB of f32
  Output x = ops::placeholder(DType::F32, {n}, "x");
  Output y = x;
  for (int i = 0; i < 8; ++i) y = ops::tanh(y);
  Tensor feed = Tensor::full(DType::F32, {n}, 0.25);
  size_t peak[2] = {0, 0};
  for (bool on : {true, false}) {
    Session s(g, reuse(on));
    s.run({y}, {{x, feed}});  // warm the allocator's cache
    const size_t start = s.memory_stats().in_use;
    s.reset_peak_memory();
    Tensor out = s.run({y}, {{x, feed}})[0];
    peak[on ? 1 : 0] = s.memory_stats().peak_in_use - start;
    float want = 0.25f;
    for (int i = 0; i < 8; ++i) want = std::tanh(want);
    EXPECT_NEAR(out.to_vector<float>()[0], want, 1e-6);
  }
  const size_t bytes = static_cast<size_t>(n) * 4;
  EXPECT_LE(peak[1], bytes + bytes / 2) << "with reuse: the fed copy, overwritten in place";
  EXPECT_GE(peak[0], 2 * bytes) << "without reuse: an input and its output live together";
}

TEST(BufferReuse, EnvironmentSwitch) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {8}, "x");
  Output y = ops::neg(ops::exp(x), "y");
  ::setenv("SPIRE_REUSE_INPUT_BUFFERS", "0", 1);
  {
    Session s(g);
    EXPECT_FALSE(s.options().reuse_input_buffers);
    StepStats st;
    s.run({y}, {{x, Tensor::full(DType::F32, {8}, 1.0)}}, {}, &st);
    EXPECT_TRUE(in_place_steps(st).empty());
  }
  ::setenv("SPIRE_REUSE_INPUT_BUFFERS", "yes", 1);
  expect_error([&] { Session s(g); }, {"SPIRE_REUSE_INPUT_BUFFERS", "'yes'", "0 or 1"});
  ::unsetenv("SPIRE_REUSE_INPUT_BUFFERS");
  Session s(g);
  EXPECT_TRUE(s.options().reuse_input_buffers);
}

}  // namespace
}  // namespace spire::testing
