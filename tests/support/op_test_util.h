// Test support shared by the op tests: the registries of gradient-check and
// forward cases (so a test can demand that every registered op has them),
// and helpers to run a graph and compare tensors.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "spire.h"

namespace spire::testing {

/// A finite-difference gradient check of one op: random f64 inputs of the
/// given shapes are fed to `build`, whose outputs are checked.
struct GradCase {
  std::string op;    // the op this case covers
  std::string name;  // short description
  std::vector<Shape> shapes;
  /// Builds the op from placeholders for the inputs; returns the outputs to check.
  std::function<std::vector<Output>(const std::vector<Output>&)> build;
  /// Optional input generator (default: uniform in [-2, 2]); e.g. positive values for log.
  std::function<double(int input, std::mt19937_64&)> sample;
  double tol = 2e-6;
  /// Also check second-order gradients (gradient of the gradient).
  bool second_order = false;
  /// Finite-difference step.
  double eps = 1e-6;
  /// CPU devices the case's session has (cases of multi-device ops place
  /// their participants on cpu:0 .. cpu:N-1 themselves; such cases run on
  /// the CPU only, not in the GPU parity test).
  int cpu_devices = 1;
};

std::vector<GradCase>& grad_cases();
bool register_grad_case(GradCase c);

/// One input of a ParityCase. dtype Invalid means "the case's float dtype".
struct ParityInput {
  Shape shape;
  DType dtype = DType::Invalid;
  /// Values are drawn uniformly from [lo, hi] (rounded for integer dtypes).
  double lo = -2, hi = 2;
};

/// A CPU/GPU parity case for ops the gradient cases do not cover (integer
/// and boolean ops, random ops, helpers with index inputs): the graph built
/// by `build` runs on the CPU and under DeviceScope(cuda:0) with the same
/// random inputs, and the outputs are compared. Gradient cases also run as
/// parity cases (in f64 and f32), so differentiable ops need no extra case.
struct ParityCase {
  std::string op;
  std::string name;
  std::vector<ParityInput> inputs;
  std::function<std::vector<Output>(const std::vector<Output>&)> build;
  /// Float dtypes the case runs in (each input with dtype Invalid gets it).
  std::vector<DType> dtypes = {DType::F32, DType::F64};
  /// Relative-error bounds |gpu - cpu| <= tol * (1 + |cpu|).
  double tol_f32 = 1e-5;
  double tol_f64 = 1e-12;
};

std::vector<ParityCase>& parity_cases();
bool register_parity_case(ParityCase c);

/// A random input as the parity test draws it: uniform in [lo, hi], rounded
/// for integer dtypes, bools true in the upper half of the range.
Tensor parity_input(DType dtype, const Shape& shape, double lo, double hi, std::mt19937_64& rng);
/// Builds `c` in a fresh graph under DeviceScope(device), feeds inputs drawn
/// with parity_input from `seed` (dtype Invalid inputs get `float_dtype`)
/// and returns the fetched outputs.
std::vector<Tensor> run_parity_case(const ParityCase& c, DType float_dtype, const Device& device,
                                    uint64_t seed);

/// Ops covered by forward (hand-computed) tests.
std::vector<std::string>& forward_covered_ops();
bool register_forward_case(const std::string& op);

/// Runs `fetches` in a fresh session of their graph.
std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedDict& feeds = {});
Tensor run1(const Output& fetch, const FeedDict& feeds = {});

/// Expects dtype/shape equality and elementwise |a-b| <= tol (as doubles).
void expect_tensor(const Tensor& t, const Shape& shape, const std::vector<double>& values,
                   double tol = 1e-6);
/// Expects `fn` to throw spire::Error whose message contains every substring.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& substrings);

/// Options of a session with n CPU devices, one kernel thread each (and
/// lanes on one thread when `sequential`).
SessionOptions cpus(int n, bool sequential = false);

/// `o` with elementwise fusion and buffer reuse off: every node of a plan is a step of its
/// own with its own output buffer (for tests of plans, traces and allocations that use
/// elementwise ops as stand-ins for work).
SessionOptions unfused(SessionOptions o = {});

/// Threads of this process (Linux /proc/self/task). The first call starts and
/// joins a thread first, so that a sanitizer's helper thread (TSan starts one
/// with the first thread) is already counted.
int64_t os_thread_count();

/// Random tensor with values uniform in [lo, hi].
Tensor random_tensor(DType dtype, const Shape& shape, std::mt19937_64& rng, double lo = -1,
                     double hi = 1);

}  // namespace spire::testing

/// Registers a gradient-check case at load time:
///   SPIRE_GRAD_CASE(mul_broadcast, {"Mul", "broadcast", {{2,3},{3}}, [](auto& in){...}});
#define SPIRE_GRAD_CASE(tag, ...)                                      \
  static const bool spire_grad_case_##tag [[maybe_unused]] =           \
      ::spire::testing::register_grad_case(::spire::testing::GradCase __VA_ARGS__)

/// Registers a CPU/GPU parity case at load time:
///   SPIRE_PARITY_CASE(argmax_rows, {"ArgMax", "rows", {{{5, 7}}}, [](auto& in){...}});
#define SPIRE_PARITY_CASE(tag, ...)                                    \
  static const bool spire_parity_case_##tag [[maybe_unused]] =         \
      ::spire::testing::register_parity_case(::spire::testing::ParityCase __VA_ARGS__)

/// A forward test of op `Op` (hand-computed values); also records coverage.
#define SPIRE_FORWARD_TEST(Op, Name)                                              \
  static const bool spire_fwd_reg_##Op##_##Name [[maybe_unused]] =                \
      ::spire::testing::register_forward_case(#Op);                               \
  TEST(Forward_##Op, Name)
