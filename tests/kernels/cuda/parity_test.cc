// The registry-driven CPU/GPU parity test. Every parity case also runs on
// the CPU in every build (twice, bit-identical). Coverage checks (they need the
// CUDA build, not a GPU): every (op, dtype) with a CPU kernel has a CUDA
// kernel unless the op is marked CPU-only, and every op with a CUDA kernel
// is exercised by some gradient or parity case. On a GPU: every gradient case
// (in f64 and f32) and every parity case runs on the CPU and under
// DeviceScope(cuda:0) with the same random inputs, GPU allocations poisoned
// (0xFF) first, and the outputs are compared with relative bounds; the
// gradient cases also compare the GPU's analytic gradients with the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/device_backend.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

// StopGradient has no gradient case (it stops them); Identity has one.
SPIRE_PARITY_CASE(stop_gradient, {"StopGradient", "odd size", {{{7, 13}}},
  [](const std::vector<Output>& in) -> std::vector<Output> {
    return {ops::mul(ops::stop_gradient(in[0]), in[0])};
  }});

bool cuda_built() { return find_device_backend(DeviceType::CUDA) != nullptr; }

std::string skip_reason() {
  if (!cuda_built()) return "this build has no CUDA backend (SPIRE_CUDA=OFF)";
  if (device_count(DeviceType::CUDA) == 0) return "no CUDA device is visible on this machine";
  return {};
}

// Ops whose CUDA kernels the parity cases cannot run (state ops need a
// session's variables; Placeholder never runs); they have dedicated tests in
// runtime_test.cc.
const std::set<std::string> kStateOps = {"Placeholder", "Variable", "Assign", "AssignAdd",
                                         "AssignSub", "NoOp"};

// f32 bounds of the gradient cases by op (long sums and transcendental
// functions differ more between the CPU and the GPU libraries).
double grad_case_tol_f32(const std::string& op) {
  static const std::map<std::string, double> tol = {
      {"MatMul", 1e-4}, {"BatchMatMul", 1e-4}, {"Conv2D", 1e-4}, {"Conv2DBackpropInput", 1e-4},
      {"Conv2DBackpropFilter", 1e-4}, {"Pow", 1e-4}, {"Erf", 1e-4}, {"Gelu", 1e-4},
      {"Softplus", 1e-4}, {"Prod", 1e-4}, {"LayerNorm", 1e-4}, {"LayerNormGrad", 1e-4}};
  auto it = tol.find(op);
  return it == tol.end() ? 2e-5 : it->second;
}

// A generic case: inputs, a builder, bounds.
struct Runnable {
  std::string label;
  std::vector<ParityInput> inputs;
  std::function<std::vector<Output>(const std::vector<Output>&)> build;
  std::function<double(int, std::mt19937_64&)> sample;  // optional (gradient cases)
  DType dtype;
  double tol;
  bool check_gradients = false;
};

Tensor make_input(const ParityInput& in, DType dtype, int index,
                  const std::function<double(int, std::mt19937_64&)>& sample, std::mt19937_64& rng) {
  if (!sample) return parity_input(dtype, in.shape, in.lo, in.hi, rng);
  Tensor t(dtype, in.shape);
  visit_dtype(dtype, "parity input", [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = static_cast<T>(sample(index, rng));
  });
  return t;
}

// Builds the case in a fresh graph on `device`; returns outputs (and
// gradients of sum(w * out) w.r.t. the float inputs when asked).
struct Built {
  Graph g;
  std::vector<Output> phs, outs, grads;
  std::vector<int> grad_input;  // input index of each grads entry
};

void build_on(Built& b, const Runnable& r, const Device& device, const std::vector<Tensor>& ws) {
  DefaultGraphGuard guard(b.g);
  DeviceScope scope(b.g, device);
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    DType dt = r.inputs[i].dtype == DType::Invalid ? r.dtype : r.inputs[i].dtype;
    b.phs.push_back(ops::placeholder(dt, r.inputs[i].shape, "in" + std::to_string(i)));
  }
  b.outs = r.build(b.phs);
  if (!r.check_gradients) return;
  std::vector<Output> fouts, wconst;
  size_t k = 0;
  for (const auto& o : b.outs) {
    if (!is_floating(o.dtype())) continue;
    fouts.push_back(o);
    wconst.push_back(ops::constant(ws[k++]));
  }
  if (fouts.empty()) return;
  std::vector<Output> xs;
  for (size_t i = 0; i < b.phs.size(); ++i)
    if (is_floating(b.phs[i].dtype())) {
      xs.push_back(b.phs[i]);
      b.grad_input.push_back(static_cast<int>(i));
    }
  auto gs = gradients(fouts, xs, wconst);
  for (size_t i = 0; i < gs.size(); ++i)
    if (gs[i].valid()) b.grads.push_back(gs[i]);
    else b.grad_input[i] = -1;
  b.grad_input.erase(std::remove(b.grad_input.begin(), b.grad_input.end(), -1), b.grad_input.end());
}

void expect_close(const Tensor& cpu, const Tensor& gpu, double tol, const std::string& what) {
  ASSERT_EQ(cpu.dtype(), gpu.dtype()) << what;
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  ASSERT_EQ(gpu.device(), Device::cpu()) << what << ": fetches come back to the host";
  // A float element passes within tol of itself (1 + |a|), or within tol of the output's
  // largest finite magnitude: an element of a long sum (a convolution's gradient, a row sum)
  // that cancels to near zero carries the rounding of its large terms, which differs
  // between the two devices' summation orders (the norm-wise bound by which GEMM and
  // convolution results are compared). Wrong indexing or a lost term is off by the scale
  // of the terms and fails both.
  double scale = 0;
  if (is_floating(cpu.dtype()))
    for (int64_t i = 0; i < cpu.num_elements(); ++i) {
      const double a = cpu.element_as_double(i);
      if (std::isfinite(a)) scale = std::max(scale, std::abs(a));
    }
  int reported = 0;
  for (int64_t i = 0; i < cpu.num_elements(); ++i) {
    double a = cpu.element_as_double(i), b = gpu.element_as_double(i);
    bool ok;
    if (std::isnan(a)) ok = std::isnan(b);
    else if (std::isinf(a)) ok = a == b;
    else if (!is_floating(cpu.dtype())) ok = a == b;
    else ok = std::abs(a - b) <= tol * std::max(1 + std::abs(a), scale);
    if (!ok && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " cpu " << a << " gpu " << b << " (tol " << tol
                    << ", largest |cpu| " << scale << ")";
  }
}

void run_parity(const Runnable& r) {
  SCOPED_TRACE(r.label);
  std::mt19937_64 rng(std::hash<std::string>{}(r.label));
  std::vector<Tensor> ins;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    DType dt = r.inputs[i].dtype == DType::Invalid ? r.dtype : r.inputs[i].dtype;
    ins.push_back(make_input(r.inputs[i], dt, static_cast<int>(i), r.sample, rng));
  }
  // Output weights for the gradients: need the output shapes, so build the
  // CPU graph once without gradients first.
  std::vector<Tensor> ws;
  if (r.check_gradients) {
    Built probe;
    Runnable plain = r;
    plain.check_gradients = false;
    build_on(probe, plain, Device::cpu(), {});
    for (const auto& o : probe.outs)
      if (is_floating(o.dtype())) ws.push_back(random_tensor(o.dtype(), o.shape(), rng, -1, 1));
  }
  Built cpu, gpu;
  build_on(cpu, r, Device::cpu(), ws);
  build_on(gpu, r, Device::cuda(0), ws);
  auto fetch = [](Built& b) {
    std::vector<Output> f = b.outs;
    f.insert(f.end(), b.grads.begin(), b.grads.end());
    return f;
  };
  auto feeds = [&](Built& b) {
    FeedDict fd;
    for (size_t i = 0; i < b.phs.size(); ++i) fd.push_back({b.phs[i], ins[i]});
    return fd;
  };
  Session scpu(cpu.g), sgpu(gpu.g);
  auto vc = scpu.run(fetch(cpu), feeds(cpu));
  auto vg = sgpu.run(fetch(gpu), feeds(gpu));
  ASSERT_EQ(vc.size(), vg.size());
  for (size_t k = 0; k < vc.size(); ++k) {
    std::string what = k < cpu.outs.size() ? "output " + std::to_string(k)
                                            : "gradient w.r.t. input " +
                                                  std::to_string(cpu.grad_input[k - cpu.outs.size()]);
    expect_close(vc[k], vg[k], r.tol, what);
  }
}

std::vector<Runnable> all_runnables() {
  std::vector<Runnable> rs;
  for (const auto& c : grad_cases()) {
    if (c.cpu_devices > 1) continue;  // pinned to several CPU devices: a CPU-only case
    std::vector<ParityInput> ins;
    for (const auto& s : c.shapes) ins.push_back({s});
    for (DType dt : {DType::F64, DType::F32}) {
      Runnable r;
      r.label = "grad case " + c.op + " / " + c.name + " / " + dtype_name(dt);
      r.inputs = ins;
      r.build = c.build;
      r.sample = c.sample;
      r.dtype = dt;
      r.tol = dt == DType::F64 ? 1e-10 : grad_case_tol_f32(c.op);
      r.check_gradients = true;
      rs.push_back(r);
    }
  }
  for (const auto& c : parity_cases())
    for (DType dt : c.dtypes) {
      Runnable r;
      r.label = "parity case " + c.op + " / " + c.name + " / " + dtype_name(dt);
      r.inputs = c.inputs;
      r.build = c.build;
      r.dtype = dt;
      r.tol = dt == DType::F64 ? c.tol_f64 : c.tol_f32;
      rs.push_back(r);
    }
  return rs;
}

// Runs everywhere: every parity case builds and runs on the CPU, twice from
// the same inputs with bit-identical results (what the random cases and the
// comparison with the GPU rely on), and every output has the inferred type.
TEST(ParityCases, RunOnTheCpuTwiceWithTheSameResult) {
  ASSERT_FALSE(parity_cases().empty());
  for (size_t k = 0; k < parity_cases().size(); ++k) {
    const ParityCase& c = parity_cases()[k];
    for (DType dt : c.dtypes) {
      SCOPED_TRACE(c.op + " / " + c.name + " / " + dtype_name(dt));
      std::vector<Tensor> a, b;
      ASSERT_NO_THROW(a = run_parity_case(c, dt, Device::cpu(), k));
      ASSERT_NO_THROW(b = run_parity_case(c, dt, Device::cpu(), k));
      ASSERT_FALSE(a.empty());
      ASSERT_EQ(a.size(), b.size());
      for (size_t o = 0; o < a.size(); ++o) {
        ASSERT_EQ(a[o].shape(), b[o].shape());
        ASSERT_EQ(a[o].dtype(), b[o].dtype());
        if (a[o].nbytes() > 0)  // empty outputs have no buffer
          ASSERT_EQ(0, std::memcmp(a[o].raw_data(), b[o].raw_data(), a[o].nbytes())) << "output " << o;
      }
    }
  }
}

TEST(CudaCoverage, EveryCpuKernelHasACudaKernelUnlessCpuOnly) {
  if (!cuda_built()) GTEST_SKIP() << skip_reason();
  auto& reg = KernelRegistry::global();
  int checked = 0;
  for (const auto& [op, device, dtype] : reg.keys()) {
    if (device != DeviceType::CPU) continue;
    const OpDef* def = OpRegistry::global().find(op);
    if (def && def->cpu_only()) continue;
    ++checked;
    EXPECT_NE(reg.find(op, DeviceType::CUDA, dtype), nullptr)
        << "op " << op << " has a CPU kernel for " << dtype_name(dtype)
        << " but no CUDA kernel and no cpu_only() mark";
  }
  EXPECT_GT(checked, 100);
}

TEST(CudaCoverage, EveryCudaOpRunsInSomeCase) {
  if (!cuda_built()) GTEST_SKIP() << skip_reason();
  // Ops of the nodes each case builds on the GPU (graph building needs no GPU).
  std::set<std::string> exercised;
  for (const auto& r : all_runnables()) {
    Built b;
    std::vector<Tensor> ws;
    try {
      Runnable plain = r;
      plain.check_gradients = false;
      build_on(b, plain, Device::cuda(0), ws);
    } catch (const Error&) {
      continue;  // e.g. a gradient case whose builder is f64-only
    }
    for (const auto& n : b.g.nodes()) exercised.insert(n->op_type());
  }
  std::set<std::string> cuda_ops;
  for (const auto& [op, device, dtype] : KernelRegistry::global().keys())
    if (device == DeviceType::CUDA) cuda_ops.insert(op);
  for (const auto& op : cuda_ops)
    if (!kStateOps.count(op))
      EXPECT_TRUE(exercised.count(op)) << "op " << op
                                       << " has a CUDA kernel but no gradient or parity case runs it";
}

TEST(CudaParity, AllCases) {
  std::string why = skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  Allocator* alloc = get_allocator(Device::cuda(0));
  alloc->set_poison(true);  // outputs start as NaN / -1 before each kernel writes them
  int ran = 0, f32_skipped = 0;
  for (const auto& r : all_runnables()) {
    // Gradient-case builders written for f64 may not build in f32; those
    // are reported, not failed (their f64 run still counts).
    if (r.dtype == DType::F32 && r.check_gradients) {
      Built probe;
      Runnable plain = r;
      plain.check_gradients = false;
      try {
        build_on(probe, plain, Device::cpu(), {});
      } catch (const Error&) {
        ++f32_skipped;
        continue;
      }
    }
    run_parity(r);
    ++ran;
  }
  alloc->set_poison(false);
  std::printf("[ parity ] %d case runs on cuda:0; %d gradient cases do not build in f32\n", ran,
              f32_skipped);
  EXPECT_GT(ran, 200);
}

}  // namespace
}  // namespace spire::testing
