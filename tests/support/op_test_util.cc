#include "tests/support/op_test_util.h"

#include <filesystem>
#include <thread>

#include <cmath>

namespace spire::testing {

std::vector<GradCase>& grad_cases() {
  static std::vector<GradCase> cases;
  return cases;
}

bool register_grad_case(GradCase c) {
  grad_cases().push_back(std::move(c));
  return true;
}

std::vector<ParityCase>& parity_cases() {
  static std::vector<ParityCase> cases;
  return cases;
}

bool register_parity_case(ParityCase c) {
  parity_cases().push_back(std::move(c));
  return true;
}

Tensor parity_input(DType dtype, const Shape& shape, double lo, double hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor t(dtype, shape);
  visit_dtype(dtype, "parity_input", [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      const double v = u(rng);
      if constexpr (std::is_same_v<T, bool>) p[i] = v >= 0.5 * (lo + hi);
      else if constexpr (std::is_integral_v<T>) p[i] = static_cast<T>(std::llround(v));
      else p[i] = static_cast<T>(v);
    }
  });
  return t;
}

std::vector<Tensor> run_parity_case(const ParityCase& c, DType float_dtype, const Device& device,
                                    uint64_t seed) {
  Graph g;
  DefaultGraphGuard guard(g);
  DeviceScope scope(g, device);
  std::mt19937_64 rng(seed);
  std::vector<Output> phs;
  FeedDict feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const ParityInput& in = c.inputs[i];
    const DType dt = in.dtype == DType::Invalid ? float_dtype : in.dtype;
    phs.push_back(ops::placeholder(dt, in.shape, "in" + std::to_string(i)));
    feeds.push_back({phs.back(), parity_input(dt, in.shape, in.lo, in.hi, rng)});
  }
  std::vector<Output> outs = c.build(phs);
  Session s(g);
  return s.run(outs, feeds);
}

SessionOptions cpus(int n, bool sequential) {
  SessionOptions o;
  o.num_cpu_devices = n;
  o.num_threads = n;
  o.sequential = sequential;
  return o;
}

SessionOptions unfused(SessionOptions o) {
  o.fuse_elementwise = false;
  o.reuse_input_buffers = false;
  return o;
}

int64_t os_thread_count() {
  static const bool warmed = [] {
    std::thread([] {}).join();
    return true;
  }();
  (void)warmed;
  int64_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

std::vector<std::string>& forward_covered_ops() {
  static std::vector<std::string> ops;
  return ops;
}

bool register_forward_case(const std::string& op) {
  forward_covered_ops().push_back(op);
  return true;
}

std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedDict& feeds) {
  Session s(*fetches.at(0).graph());
  return s.run(fetches, feeds);
}

Tensor run1(const Output& fetch, const FeedDict& feeds) { return run({fetch}, feeds)[0]; }

void expect_tensor(const Tensor& t, const Shape& shape, const std::vector<double>& values,
                   double tol) {
  ASSERT_TRUE(t.defined());
  ASSERT_EQ(t.shape(), shape) << "got " << t.to_string();
  ASSERT_EQ(t.num_elements(), static_cast<int64_t>(values.size()));
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double v = t.element_as_double(i), w = values[static_cast<size_t>(i)];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(v)) << "element " << i << " of " << t.to_string(64);
    } else if (std::isinf(w)) {
      EXPECT_EQ(v, w) << "element " << i << " of " << t.to_string(64);
    } else {
      EXPECT_NEAR(v, w, tol) << "element " << i << " of " << t.to_string(64);
    }
  }
}

void expect_error(const std::function<void()>& fn, const std::vector<std::string>& substrings) {
  try {
    fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& s : substrings)
      EXPECT_NE(msg.find(s), std::string::npos) << "message '" << msg << "' lacks '" << s << "'";
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-spire exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected spire::Error mentioning " << (substrings.empty() ? "" : substrings[0]);
}

Tensor random_tensor(DType dtype, const Shape& shape, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor t(dtype, shape);
  visit_dtype(dtype, "random_tensor", [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = static_cast<T>(u(rng));
  });
  return t;
}

}  // namespace spire::testing
