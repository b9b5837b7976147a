// Tests of the fused optimizer updates (core/ops/optimizer_ops.h):
//  - forward tests of each op against hand-computed values, including
//    snapshots (a value read before an update never changes) and errors;
//  - the copy-on-write rule (may_update_in_place);
//  - the CUDA kernel's work split (plan_multi_tensor, multi_tensor_block of
//    kernels/optimizer_functors.h) run on the host over every element for
//    odd sizes, several launches and tensors split across launches, compared
//    with the CPU kernel run through a Session (runs without a GPU);
//  - CPU/GPU parity cases: the op updates variables assigned from the
//    case's random inputs and the case fetches the new values (one run);
//  - a dedicated GPU test (Adam over 130 variables of odd sizes, several
//    steps, copy-on-write on the device) that skips without a CUDA device.
#include <cmath>
#include <cstring>
#include <random>

#include "core/device_backend.h"
#include "kernels/optimizer_functors.h"
#include "layers/optimizers.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

Output var_with(const Tensor& value, const std::string& name, std::vector<Node*>* inits) {
  Output v = ops::variable(value.shape(), value.dtype(), name);
  inits->push_back(ops::assign(v, ops::constant(value)).node);
  return v;
}

Tensor f64(const Shape& s, const std::vector<double>& v) { return Tensor::from_vector<double>(s, v); }
Tensor f32(const Shape& s, const std::vector<float>& v) { return Tensor::from_vector<float>(s, v); }

// ---- forward tests ---------------------------------------------------------------------

SPIRE_FORWARD_TEST(FusedApplyGradientDescent, TwoVariablesAndSnapshot) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Node*> inits;
  Output w = var_with(f32({3}, {1, 2, 3}), "w", &inits);
  Output u = var_with(f32({2, 1}, {4, -4}), "u", &inits);
  Output gw = ops::constant(f32({3}, {0.5f, -1, 2}));
  Output gu = ops::constant(f32({2, 1}, {1, 1}));
  Node* apply = ops::fused_apply_gradient_descent({w, u}, {gw, gu},
                                                  ops::scalar(0.25, DType::F32), "apply");
  EXPECT_EQ(apply->op_type(), "FusedApplyGradientDescent");
  EXPECT_EQ(apply->num_outputs(), 0);
  EXPECT_EQ(apply->attr<int64_t>("n"), 2);
  Session s(g);
  s.run_targets(inits);
  Tensor before = s.run({w})[0];
  Tensor held = s.variable_value(u.node);
  s.run_targets({apply});
  expect_tensor(s.variable_value(w.node), {3}, {0.875, 2.25, 2.5}, 0);
  expect_tensor(s.variable_value(u.node), {2, 1}, {3.75, -4.25}, 0);
  // Copy-on-write: tensors read before the update keep their values.
  expect_tensor(before, {3}, {1, 2, 3}, 0);
  expect_tensor(held, {2, 1}, {4, -4}, 0);
  s.run_targets({apply});
  expect_tensor(s.variable_value(w.node), {3}, {0.75, 2.5, 2}, 0);
}

SPIRE_FORWARD_TEST(FusedApplyMomentum, PlainAndNesterov) {
  for (bool nesterov : {false, true}) {
    Graph g;
    DefaultGraphGuard guard(g);
    std::vector<Node*> inits;
    Output w = var_with(f64({2}, {1, -2}), "w", &inits);
    Output acc = var_with(f64({2}, {0.5, 0}), "w/Momentum", &inits);
    Node* apply = ops::fused_apply_momentum({w}, {ops::constant(f64({2}, {1, 2}))}, {acc},
                                            ops::scalar(0.5, DType::F64), 0.75, nesterov);
    EXPECT_EQ(apply->attr<bool>("use_nesterov"), nesterov);
    Session s(g);
    s.run_targets(inits);
    s.run_targets({apply});
    // acc = acc * 0.75 + g = {1.375, 2}; w -= 0.5 * acc, or 0.5 * (g + 0.75 * acc).
    expect_tensor(s.variable_value(acc.node), {2}, {1.375, 2}, 0);
    if (nesterov)
      expect_tensor(s.variable_value(w.node), {2}, {-0.015625, -3.75}, 0);
    else
      expect_tensor(s.variable_value(w.node), {2}, {0.3125, -3}, 0);
  }
}

struct AdamCase {
  std::vector<double> w{1, 2, -0.5}, g{0.5, -1, 0.25}, m{0, 0.2, -0.1}, v{0, 0.5, 0.04};
  double lr = 0.1, b1p = 0.9 * 0.9, b2p = 0.999 * 0.999, b1 = 0.9, b2 = 0.999, eps = 1e-8;
};

SPIRE_FORWARD_TEST(FusedApplyAdam, OneStepFromGivenSlots) {
  AdamCase c;
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Node*> inits;
  Output w = var_with(f64({3}, c.w), "w", &inits);
  Output m = var_with(f64({3}, c.m), "w/Adam", &inits);
  Output v = var_with(f64({3}, c.v), "w/Adam_1", &inits);
  Node* apply = ops::fused_apply_adam({w}, {ops::constant(f64({3}, c.g))}, {m}, {v},
                                      ops::scalar(c.lr, DType::F64), ops::scalar(c.b1p, DType::F64),
                                      ops::scalar(c.b2p, DType::F64), c.b1, c.b2, c.eps);
  Session s(g);
  s.run_targets(inits);
  s.run_targets({apply});
  std::vector<double> ww = c.w, mm = c.m, vv = c.v;
  const double lr_t = c.lr * std::sqrt(1 - c.b2p) / (1 - c.b1p);
  for (size_t i = 0; i < 3; ++i) {
    mm[i] = c.b1 * mm[i] + (1 - c.b1) * c.g[i];
    vv[i] = c.b2 * vv[i] + (1 - c.b2) * c.g[i] * c.g[i];
    ww[i] -= lr_t * mm[i] / (std::sqrt(vv[i]) + c.eps);
  }
  expect_tensor(s.variable_value(w.node), {3}, ww, 1e-15);
  expect_tensor(s.variable_value(m.node), {3}, mm, 1e-15);
  expect_tensor(s.variable_value(v.node), {3}, vv, 1e-15);
}

SPIRE_FORWARD_TEST(FusedApplyAdamW, OneStepFromGivenSlots) {
  AdamCase c;
  const double wd = 0.25;
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Node*> inits;
  Output w = var_with(f64({3}, c.w), "w", &inits);
  Output m = var_with(f64({3}, c.m), "w/Adam", &inits);
  Output v = var_with(f64({3}, c.v), "w/Adam_1", &inits);
  Node* apply = ops::fused_apply_adamw(
      {w}, {ops::constant(f64({3}, c.g))}, {m}, {v}, ops::scalar(c.lr, DType::F64),
      ops::scalar(c.b1p, DType::F64), ops::scalar(c.b2p, DType::F64), c.b1, c.b2, c.eps, wd);
  Session s(g);
  s.run_targets(inits);
  s.run_targets({apply});
  std::vector<double> ww = c.w, mm = c.m, vv = c.v;
  for (size_t i = 0; i < 3; ++i) {  // torch.optim.AdamW
    ww[i] *= 1 - c.lr * wd;
    mm[i] = c.b1 * mm[i] + (1 - c.b1) * c.g[i];
    vv[i] = c.b2 * vv[i] + (1 - c.b2) * c.g[i] * c.g[i];
    ww[i] -= c.lr / (1 - c.b1p) * mm[i] / (std::sqrt(vv[i]) / std::sqrt(1 - c.b2p) + c.eps);
  }
  expect_tensor(s.variable_value(w.node), {3}, ww, 1e-15);
  expect_tensor(s.variable_value(m.node), {3}, mm, 1e-15);
  expect_tensor(s.variable_value(v.node), {3}, vv, 1e-15);
}

SPIRE_FORWARD_TEST(FusedApplyAdamW, GatedByApplyIf) {
  AdamCase c;
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Node*> inits;
  Output w = var_with(f64({3}, c.w), "w", &inits);
  Output m = var_with(f64({3}, c.m), "w/Adam", &inits);
  Output v = var_with(f64({3}, c.v), "w/Adam_1", &inits);
  Output gate = ops::placeholder(DType::F64, {}, "apply_if");
  Node* apply = ops::fused_apply_adamw(
      {w}, {ops::constant(f64({3}, c.g))}, {m}, {v}, ops::scalar(c.lr, DType::F64),
      ops::scalar(c.b1p, DType::F64), ops::scalar(c.b2p, DType::F64), c.b1, c.b2, c.eps, 0.25,
      "apply", gate);
  EXPECT_TRUE(apply->attr<bool>("gated"));
  EXPECT_EQ(apply->num_inputs(), 4 * 1 + 4);
  Session s(g);
  s.run_targets(inits);
  Tensor held = s.variable_value(w.node);
  s.run_targets({apply}, {{gate, Tensor::scalar<double>(0.0)}});  // closed: nothing changes
  expect_tensor(s.variable_value(w.node), {3}, c.w, 0);
  expect_tensor(s.variable_value(m.node), {3}, c.m, 0);
  expect_tensor(s.variable_value(v.node), {3}, c.v, 0);
  s.run_targets({apply}, {{gate, Tensor::scalar<double>(1.0)}});  // open: one AdamW step
  std::vector<double> ww = c.w;
  for (size_t i = 0; i < 3; ++i) {
    ww[i] *= 1 - c.lr * 0.25;
    const double mm = c.b1 * c.m[i] + (1 - c.b1) * c.g[i];
    const double vv = c.b2 * c.v[i] + (1 - c.b2) * c.g[i] * c.g[i];
    ww[i] -= c.lr / (1 - c.b1p) * mm / (std::sqrt(vv) / std::sqrt(1 - c.b2p) + c.eps);
  }
  expect_tensor(s.variable_value(w.node), {3}, ww, 1e-15);
  expect_tensor(held, {3}, c.w, 0);
  // The gate must be a scalar of the variables' dtype.
  expect_error([&] {
    ops::fused_apply_gradient_descent({w}, {ops::constant(f64({3}, c.g))},
                                      ops::scalar(0.1, DType::F64), "bad",
                                      ops::scalar(1.0, DType::F32));
  }, {"FusedApplyGradientDescent", "f64 scalars"});
}

TEST(FusedApply, ReadsTheLearningRateEveryRunAndOrdersAfterControlInputs) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Node*> inits;
  Output w = var_with(f64({2}, {1, 1}), "w", &inits);
  Output lr = var_with(Tensor::scalar<double>(0.5), "lr", &inits);
  Node* apply = ops::fused_apply_gradient_descent({w}, {ops::constant(f64({2}, {1, 2}))}, lr);
  Output fetch_after;
  {
    ControlDependencies after(g, {apply});
    fetch_after = ops::identity(w);
  }
  Session s(g);
  s.run_targets(inits);
  expect_tensor(s.run({fetch_after})[0], {2}, {0.5, 0}, 0);
  s.set_variable_value(lr.node, Tensor::scalar<double>(0.25));
  expect_tensor(s.run({fetch_after})[0], {2}, {0.25, -0.5}, 0);
}

TEST(FusedApply, VariableAssignedFromAnotherKeepsItsValue) {
  // b = a shares a's buffer; updating a must not change b.
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Node*> inits;
  Output a = var_with(f32({2}, {1, 2}), "a", &inits);
  Output b = ops::variable({2}, DType::F32, "b");
  Output copy = ops::assign(b, a);
  Node* apply = ops::fused_apply_gradient_descent({a}, {ops::constant(f32({2}, {1, 1}))},
                                                  ops::scalar(1, DType::F32));
  Session s(g);
  s.run_targets(inits);
  s.run({copy});
  s.run_targets({apply});
  expect_tensor(s.variable_value(a.node), {2}, {0, 1}, 0);
  expect_tensor(s.variable_value(b.node), {2}, {1, 2}, 0);
}

TEST(FusedApply, Errors) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output w = ops::variable({2, 2}, DType::F64, "w");
  Output u = ops::variable({3}, DType::F64, "u");
  Output x32 = ops::variable({3}, DType::F32, "x32");
  Output iv = ops::variable({3}, DType::I32, "iv");
  Output lr = ops::scalar(0.1, DType::F64);
  Output g22 = ops::constant(Tensor::zeros(DType::F64, {2, 2}));
  Output g3 = ops::constant(Tensor::zeros(DType::F64, {3}));
  expect_error([&] { ops::fused_apply_gradient_descent({w}, {g3}, lr); },
               {"FusedApplyGradientDescent", "gradient", "[3]", "'w:0'", "[2, 2]"});
  expect_error([&] { ops::fused_apply_gradient_descent({w, x32}, {g22, g3}, lr); },
               {"'x32:0'", "differ in dtype"});
  expect_error([&] { ops::fused_apply_gradient_descent({w, w}, {g22, g22}, lr); },
               {"'w'", "listed twice"});
  expect_error([&] { ops::fused_apply_gradient_descent({g22}, {g22}, lr); },
               {"must be a variable"});
  expect_error([&] { ops::fused_apply_gradient_descent({iv}, {g3}, lr); }, {"not f32 or f64"});
  expect_error([&] { ops::fused_apply_gradient_descent({w}, {g22, g3}, lr); },
               {"1 variables but 2 gradients"});
  expect_error([&] { ops::fused_apply_gradient_descent({u}, {g3}, ops::scalar(1, DType::F32)); },
               {"scalars must be f64 scalars"});
  expect_error([&] { ops::fused_apply_momentum({w, u}, {g22, g3}, {u, w}, lr, 0.9, false); },
               {"accumulator slot", "'u:0'", "'w:0'", "does not match"});
  expect_error([&] { ops::fused_apply_momentum({w}, {g22}, {w}, lr, 0.9, false); },
               {"'w'", "passed twice"});
  // The shape function checks nodes built without the builders.
  expect_error([&] { g.add_node("FusedApplyGradientDescent", {u, g3, g3, lr}, {{"n", 1}}); },
               {"expected 3 inputs for n = 1"});
  expect_error([&] { g.add_node("FusedApplyGradientDescent", {u, g22, lr}, {{"n", 1}}); },
               {"gradient of variable 0", "[2, 2]", "[3]"});
  expect_error([&] { g.add_node("FusedApplyMomentum", {u, g3, w, lr}, {{"n", 1}, {"momentum", 0.5}}); },
               {"slot of variable 0", "[2, 2]"});

  // Run time: an uninitialized slot, a gradient of the wrong run-time shape.
  Output acc = ops::variable({3}, DType::F64, "u/Momentum");
  Output init_u = ops::assign(u, g3);
  Node* mom = ops::fused_apply_momentum({u}, {g3}, {acc}, lr, 0.9, false);
  Output gp = ops::placeholder(DType::F64, {-1}, "gp");
  Node* sgd = ops::fused_apply_gradient_descent({u}, {gp}, lr);
  Session s(g);
  s.run({init_u});
  expect_error([&] { s.run_targets({mom}); }, {"'u/Momentum'", "uninitialized"});
  expect_error([&] { s.run({}, {{gp, Tensor::zeros(DType::F64, {4})}}, {sgd}); },
               {"gradient of variable 'u'", "f64[4]", "[3]"});
}

// ---- copy-on-write rule ---------------------------------------------------------------

TEST(FusedApply, MayUpdateInPlaceOnlyWhenNobodyElseHoldsTheBuffer) {
  Tensor slot(DType::F32, {4});
  Tensor unrelated(DType::F32, {4});
  EXPECT_TRUE(may_update_in_place(slot, unrelated));  // the slot alone
  Tensor input = slot;                                // the executor's copy of this input
  EXPECT_TRUE(may_update_in_place(slot, input));
  Tensor fetched = slot;  // any other holder
  EXPECT_FALSE(may_update_in_place(slot, input));
  EXPECT_FALSE(may_update_in_place(slot, unrelated));
  fetched = Tensor();
  Tensor view = slot.reshaped({2, 2});  // a view shares the buffer too
  EXPECT_FALSE(may_update_in_place(slot, input));
}

// ---- the multi-tensor work split, run on the host ---------------------------------------

TEST(FusedApplyMultiTensor, PlanCoversEveryElementOnce) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int64_t> sizes;
    const int n = 1 + static_cast<int>(rng() % 130);
    for (int i = 0; i < n; ++i) {
      const int kind = static_cast<int>(rng() % 5);
      sizes.push_back(kind == 0 ? 0 : kind == 1 ? 1 : kind == 2 ? int64_t(rng() % 50) : int64_t(rng() % 700));
    }
    const int max_tensors = 1 + static_cast<int>(rng() % kernels::kMultiTensorMax);
    const int64_t chunk = 1 + static_cast<int64_t>(rng() % 64);
    const int max_blocks = trial % 2 ? 1 + static_cast<int>(rng() % 40) : (1 << 30);
    kernels::MultiTensorPlan plan = kernels::plan_multi_tensor(sizes, max_tensors, chunk, max_blocks);
    ASSERT_EQ(plan.first_chunk.size(), plan.launches.size());
    std::vector<std::vector<int>> hits(sizes.size());
    for (size_t t = 0; t < sizes.size(); ++t) hits[t].assign(static_cast<size_t>(sizes[t]), 0);
    for (size_t l = 0; l < plan.launches.size(); ++l) {
      const auto& launch = plan.launches[l];
      ASSERT_GE(launch.count, 1);
      ASSERT_LE(launch.count, max_tensors);
      ASSERT_LE(launch.blocks(), max_blocks);
      for (int b = 0; b < launch.blocks(); ++b) {
        const int j = kernels::multi_tensor_position(launch.block_end, launch.count, b);
        ASSERT_LT(b, launch.block_end[j]);
        ASSERT_TRUE(j == 0 || b >= launch.block_end[j - 1]);
        const int t = launch.tensor[j];
        const int64_t local = b - (j == 0 ? 0 : launch.block_end[j - 1]);
        const int64_t begin = (plan.first_chunk[l][static_cast<size_t>(j)] + local) * chunk;
        const int64_t end = std::min(begin + chunk, sizes[static_cast<size_t>(t)]);
        ASSERT_LT(begin, end) << "a block without work";
        for (int64_t e = begin; e < end; ++e) ++hits[static_cast<size_t>(t)][static_cast<size_t>(e)];
      }
    }
    for (size_t t = 0; t < sizes.size(); ++t)
      for (size_t e = 0; e < hits[t].size(); ++e)
        ASSERT_EQ(hits[t][e], 1) << "trial " << trial << " tensor " << t << " element " << e;
  }
}

// The fused ops with their CPU kernel (through a Session) and, on the host,
// the CUDA kernel's plan + block body over the same inputs.
struct HostCase {
  std::string op;
  int slots;
  int scalars;
};

template <typename T, typename F>
void run_block_body_on_host(F f, const std::vector<int64_t>& sizes, std::vector<std::vector<T>>& state,
                            const std::vector<std::vector<T>>& grads, const std::vector<T>& scalars,
                            int max_tensors, int64_t chunk, int max_blocks, int threads,
                            bool out_of_place, bool misalign) {
  constexpr int kStates = F::kSlots + 1;
  const int n = static_cast<int>(sizes.size());
  f.prepare(scalars.data());
  // Output buffers: the state itself (in place) or copies written separately.
  std::vector<std::vector<T>> in = state, out = state;
  // Misaligned copies start one element into a larger buffer.
  const size_t off = misalign ? 1 : 0;
  std::vector<std::vector<T>> in_buf(in.size()), out_buf(out.size()), g_buf(grads.size());
  for (size_t k = 0; k < in.size(); ++k) {
    in_buf[k].assign(in[k].size() + off, T(0));
    std::copy(in[k].begin(), in[k].end(), in_buf[k].begin() + static_cast<long>(off));
    out_buf[k].assign(in[k].size() + off, T(-7));
  }
  for (size_t k = 0; k < grads.size(); ++k) {
    g_buf[k].assign(grads[k].size() + off, T(0));
    std::copy(grads[k].begin(), grads[k].end(), g_buf[k].begin() + static_cast<long>(off));
  }
  kernels::MultiTensorPlan plan = kernels::plan_multi_tensor(sizes, max_tensors, chunk, max_blocks);
  for (size_t l = 0; l < plan.launches.size(); ++l) {
    const auto& launch = plan.launches[l];
    kernels::MultiTensorArgs<T, kStates, F::kScalars> a;
    a.count = launch.count;
    for (int j = 0; j < launch.count; ++j) {
      const int i = launch.tensor[j];
      a.block_end[j] = launch.block_end[j];
      a.size[j] = sizes[static_cast<size_t>(i)];
      a.first_chunk[j] = plan.first_chunk[l][static_cast<size_t>(j)];
      a.grad[j] = g_buf[static_cast<size_t>(i)].data() + off;
      bool aligned = !misalign;
      for (int s = 0; s < kStates; ++s) {
        auto& ib = in_buf[static_cast<size_t>(s * n + i)];
        auto& ob = out_of_place ? out_buf[static_cast<size_t>(s * n + i)] : ib;
        a.in[s][j] = ib.data() + off;
        a.out[s][j] = ob.data() + off;
        aligned = aligned && reinterpret_cast<uintptr_t>(a.in[s][j]) % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(a.out[s][j]) % 16 == 0;
      }
      aligned = aligned && reinterpret_cast<uintptr_t>(a.grad[j]) % 16 == 0;
      a.aligned[j] = aligned;
    }
    for (int b = 0; b < launch.blocks(); ++b)
      for (int th = 0; th < threads; ++th)
        kernels::multi_tensor_block(a, f, chunk, b, th, threads);
  }
  for (size_t k = 0; k < state.size(); ++k) {
    auto& src = out_of_place ? out_buf[k] : in_buf[k];
    std::copy(src.begin() + static_cast<long>(off), src.end(), state[k].begin());
  }
}

template <typename T>
void check_host_block_body_matches_cpu_kernel(const std::string& op) {
  SCOPED_TRACE(op + " " + dtype_name(dtype_of<T>));
  const int slots = op == "FusedApplyGradientDescent" ? 0 : op == "FusedApplyMomentum" ? 1 : 2;
  const int nscalars = slots == 2 ? 3 : 1;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-1, 1), pos(0.5, 2);
  // 60 tensors (two launches of 48 at most), odd sizes, one spanning chunks.
  std::vector<int64_t> sizes;
  for (int i = 0; i < 60; ++i) sizes.push_back(i % 7 == 0 ? 1 : 1 + static_cast<int64_t>(rng() % 97));
  sizes[5] = 0;
  sizes[17] = 3 * 41 + 5;
  const int n = static_cast<int>(sizes.size());
  std::vector<std::vector<T>> state(static_cast<size_t>((slots + 1) * n)), grads(static_cast<size_t>(n));
  for (int s = 0; s <= slots; ++s)
    for (int i = 0; i < n; ++i) {
      auto& v = state[static_cast<size_t>(s * n + i)];
      for (int64_t e = 0; e < sizes[static_cast<size_t>(i)]; ++e)
        v.push_back(static_cast<T>(s == 2 ? pos(rng) : u(rng)));
    }
  for (int i = 0; i < n; ++i)
    for (int64_t e = 0; e < sizes[static_cast<size_t>(i)]; ++e)
      grads[static_cast<size_t>(i)].push_back(static_cast<T>(u(rng)));
  std::vector<T> scalars = {T(0.125), T(0.81), T(0.998)};
  scalars.resize(static_cast<size_t>(nscalars));

  // The CPU kernel through a Session.
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Node*> inits;
  std::vector<Output> vars, gs, slot_vars[2], sc;
  auto tensor_of = [](const std::vector<T>& v) {
    return Tensor::from_vector<T>({static_cast<int64_t>(v.size())}, v);
  };
  for (int i = 0; i < n; ++i) {
    vars.push_back(var_with(tensor_of(state[static_cast<size_t>(i)]), "w" + std::to_string(i), &inits));
    gs.push_back(ops::constant(tensor_of(grads[static_cast<size_t>(i)])));
    for (int s = 1; s <= slots; ++s)
      slot_vars[s - 1].push_back(var_with(tensor_of(state[static_cast<size_t>(s * n + i)]),
                                          "w" + std::to_string(i) + "/slot" + std::to_string(s), &inits));
  }
  for (T v : scalars) sc.push_back(ops::constant(Tensor::scalar<T>(v)));
  Node* apply = nullptr;
  if (op == "FusedApplyGradientDescent") apply = ops::fused_apply_gradient_descent(vars, gs, sc[0]);
  if (op == "FusedApplyMomentum")
    apply = ops::fused_apply_momentum(vars, gs, slot_vars[0], sc[0], 0.75, true);
  if (op == "FusedApplyAdam")
    apply = ops::fused_apply_adam(vars, gs, slot_vars[0], slot_vars[1], sc[0], sc[1], sc[2], 0.9,
                                  0.999, 1e-3);
  if (op == "FusedApplyAdamW")
    apply = ops::fused_apply_adamw(vars, gs, slot_vars[0], slot_vars[1], sc[0], sc[1], sc[2], 0.8,
                                   0.99, 1e-3, 0.25);
  ASSERT_NE(apply, nullptr);
  Session s(g);
  s.run_targets(inits);
  s.run_targets({apply});

  // The functor as the CUDA kernel builds it, from the node's attrs.
  Tensor dummy;
  KernelContext kctx(*apply, Device::cpu(), &dummy, nullptr, nullptr);
  std::vector<std::vector<T>> expected(state.size());
  for (int st = 0; st <= slots; ++st)
    for (int i = 0; i < n; ++i) {
      Output v = st == 0 ? vars[static_cast<size_t>(i)] : slot_vars[st - 1][static_cast<size_t>(i)];
      expected[static_cast<size_t>(st * n + i)] = s.variable_value(v.node).template to_vector<T>();
    }
  struct Config {
    int max_tensors;
    int64_t chunk;
    int max_blocks;
    int threads;
    bool out_of_place, misalign;
  };
  const std::vector<Config> configs = {
      {kernels::kMultiTensorMax, kernels::kMultiTensorChunk, 1 << 30, 256, true, false},
      {kernels::kMultiTensorMax, 8, 1 << 30, 3, false, false},   // vector path, small chunks
      {5, 8, 7, 2, true, true},                                  // scalar path, split tensors
      {kernels::kMultiTensorMax, 5, 1 << 30, 4, true, false}};   // chunk not a vector multiple
  kernels::visit_fused_apply_ops([&](const char* name, auto make) {
    if (op != name) return;
    for (const Config& c : configs) {
      std::vector<std::vector<T>> got = state;
      run_block_body_on_host<T>(make(kctx, T{}), sizes, got, grads, scalars, c.max_tensors,
                                c.chunk, c.max_blocks, c.threads, c.out_of_place, c.misalign);
      for (size_t k = 0; k < got.size(); ++k)
        for (size_t e = 0; e < got[k].size(); ++e)
          ASSERT_EQ(got[k][e], expected[k][e])
              << "state " << k / static_cast<size_t>(n) << " of tensor " << k % static_cast<size_t>(n)
              << " element " << e << " (chunk " << c.chunk << ", threads " << c.threads << ")";
    }
  });
}

TEST(FusedApplyMultiTensor, HostBlockBodyMatchesCpuKernel) {
  for (const char* op :
       {"FusedApplyGradientDescent", "FusedApplyMomentum", "FusedApplyAdam", "FusedApplyAdamW"}) {
    check_host_block_body_matches_cpu_kernel<float>(op);
    check_host_block_body_matches_cpu_kernel<double>(op);
  }
}

// ---- CPU/GPU parity cases ------------------------------------------------------------

// A parity case of a fused op: the inputs are, in the op's layout, the
// variables' values, the gradients, the slots' values and the scalars; the
// case assigns them to fresh variables, runs the update after the
// assignments and fetches every variable and slot after the update.
using FusedBuilder = std::function<Node*(const std::vector<Output>& vars,
                                         const std::vector<Output>& grads,
                                         const std::vector<std::vector<Output>>& slots,
                                         const std::vector<Output>& scalars)>;

ParityCase fused_case(const std::string& op, const std::string& name,
                      const std::vector<Shape>& shapes, int num_slots,
                      const std::vector<std::pair<double, double>>& scalar_ranges,
                      FusedBuilder make) {
  ParityCase c;
  c.op = op;
  c.name = name;
  const int n = static_cast<int>(shapes.size());
  for (const Shape& s : shapes) c.inputs.push_back({s, DType::Invalid, -1, 1});        // vars
  for (const Shape& s : shapes) c.inputs.push_back({s, DType::Invalid, -1, 1});        // grads
  for (int k = 0; k < num_slots; ++k)  // slots (Adam's v positive, away from 0)
    for (const Shape& s : shapes)
      c.inputs.push_back({s, DType::Invalid, k == 1 ? 0.5 : -1.0, k == 1 ? 2.0 : 1.0});
  for (const auto& [lo, hi] : scalar_ranges) c.inputs.push_back({Shape{}, DType::Invalid, lo, hi});
  c.build = [n, num_slots, make](const std::vector<Output>& in) {
    Graph& g = *in[0].graph();
    std::vector<Node*> assigns;
    auto fresh = [&](int input, const std::string& nm) {
      Output v = ops::variable(in[static_cast<size_t>(input)].shape(), in[static_cast<size_t>(input)].dtype(), nm);
      assigns.push_back(ops::assign(v, in[static_cast<size_t>(input)]).node);
      return v;
    };
    std::vector<Output> vars, grads, scalars;
    std::vector<std::vector<Output>> slots(static_cast<size_t>(num_slots));
    for (int i = 0; i < n; ++i) vars.push_back(fresh(i, "w" + std::to_string(i)));
    for (int i = 0; i < n; ++i) grads.push_back(in[static_cast<size_t>(n + i)]);
    for (int k = 0; k < num_slots; ++k)
      for (int i = 0; i < n; ++i)
        slots[static_cast<size_t>(k)].push_back(
            fresh((2 + k) * n + i, "w" + std::to_string(i) + "/slot" + std::to_string(k)));
    for (size_t k = static_cast<size_t>((2 + num_slots) * n); k < in.size(); ++k)
      scalars.push_back(in[k]);
    Node* update = nullptr;
    {
      ControlDependencies after(g, assigns);
      update = make(vars, grads, slots, scalars);
    }
    ControlDependencies after(g, {update});
    std::vector<Output> outs;
    for (const Output& v : vars) outs.push_back(ops::identity(v));
    for (const auto& list : slots)
      for (const Output& v : list) outs.push_back(ops::identity(v));
    return outs;
  };
  return c;
}

const std::vector<Shape> kOddShapes = {{1}, {7}, {3, 5}, {16385}, {1000003}};

std::vector<Shape> many_shapes() {  // 100 variables: three launches of the multi-tensor kernel
  std::vector<Shape> s;
  for (int i = 0; i < 100; ++i) s.push_back(Shape{1 + (i * 37) % 301});
  s[50] = Shape{2 * 16384 + 3};
  return s;
}

const bool kFusedParityCases [[maybe_unused]] = [] {
  const std::pair<double, double> lr{0.01, 0.5}, b1p{0.1, 0.9}, b2p{0.1, 0.99};
  FusedBuilder sgd = [](auto& v, auto& g, auto&, auto& s) {
    return ops::fused_apply_gradient_descent(v, g, s[0]);
  };
  register_parity_case(fused_case("FusedApplyGradientDescent", "odd sizes", kOddShapes, 0, {lr}, sgd));
  register_parity_case(fused_case("FusedApplyGradientDescent", "100 variables", many_shapes(), 0, {lr}, sgd));
  register_parity_case(fused_case("FusedApplyMomentum", "odd sizes", kOddShapes, 1, {lr},
                                  [](auto& v, auto& g, auto& sl, auto& s) {
                                    return ops::fused_apply_momentum(v, g, sl[0], s[0], 0.9, false);
                                  }));
  register_parity_case(fused_case("FusedApplyMomentum", "nesterov, 100 variables", many_shapes(), 1,
                                  {lr}, [](auto& v, auto& g, auto& sl, auto& s) {
                                    return ops::fused_apply_momentum(v, g, sl[0], s[0], 0.75, true);
                                  }));
  FusedBuilder adam = [](auto& v, auto& g, auto& sl, auto& s) {
    return ops::fused_apply_adam(v, g, sl[0], sl[1], s[0], s[1], s[2], 0.9, 0.999, 1e-8);
  };
  register_parity_case(fused_case("FusedApplyAdam", "odd sizes", kOddShapes, 2, {lr, b1p, b2p}, adam));
  register_parity_case(fused_case("FusedApplyAdam", "100 variables", many_shapes(), 2, {lr, b1p, b2p}, adam));
  register_parity_case(fused_case("FusedApplyAdamW", "odd sizes", kOddShapes, 2, {lr, b1p, b2p},
                                  [](auto& v, auto& g, auto& sl, auto& s) {
                                    return ops::fused_apply_adamw(v, g, sl[0], sl[1], s[0], s[1],
                                                                  s[2], 0.8, 0.99, 1e-6, 0.1);
                                  }));
  // Gated (apply_if, the last scalar): open (a value in [1, 2]) and closed (0).
  register_parity_case(fused_case("FusedApplyAdamW", "gated open, odd sizes", kOddShapes, 2,
                                  {lr, b1p, b2p, {1.0, 2.0}},
                                  [](auto& v, auto& g, auto& sl, auto& s) {
                                    return ops::fused_apply_adamw(v, g, sl[0], sl[1], s[0], s[1],
                                                                  s[2], 0.8, 0.99, 1e-6, 0.1,
                                                                  "apply", s[3]);
                                  }));
  register_parity_case(fused_case("FusedApplyMomentum", "gated closed, odd sizes", kOddShapes, 1,
                                  {lr, {0.0, 0.0}}, [](auto& v, auto& g, auto& sl, auto& s) {
                                    return ops::fused_apply_momentum(v, g, sl[0], s[0], 0.9, false,
                                                                     "apply", s[1]);
                                  }));
  return true;
}();

TEST(FusedApply, ParityCasesBuildOnTheCpu) {
  // The parity cases run only on a GPU; check here that they build and run
  // on the CPU and update what they fetch.
  int checked = 0;
  for (const ParityCase& c : parity_cases()) {
    if (c.op.rfind("FusedApply", 0) != 0) continue;
    SCOPED_TRACE(c.op + " / " + c.name);
    Graph g;
    DefaultGraphGuard guard(g);
    std::mt19937_64 rng(3);
    std::vector<Output> phs;
    FeedDict feeds;
    std::vector<Tensor> ins;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      phs.push_back(ops::placeholder(DType::F64, c.inputs[i].shape, "in" + std::to_string(i)));
      ins.push_back(random_tensor(DType::F64, c.inputs[i].shape, rng, c.inputs[i].lo, c.inputs[i].hi));
      feeds.push_back({phs.back(), ins.back()});
    }
    std::vector<Output> outs = c.build(phs);
    Session s(g);
    std::vector<Tensor> r = s.run(outs, feeds);
    ASSERT_GE(r.size(), 1u);
    // Variable 0 moved: its new value differs from the fed one somewhere
    // (not where the gate is closed: then nothing may move).
    const bool closed = c.name.find("gated closed") != std::string::npos;
    bool moved = false;
    for (int64_t e = 0; e < r[0].num_elements(); ++e)
      moved = moved || r[0].data<double>()[e] != ins[0].data<double>()[e];
    EXPECT_EQ(moved, !closed);
    if (closed)
      for (size_t k = 0; k < r.size(); ++k)  // every variable and slot kept its fed value
        EXPECT_EQ(r[k].to_vector<double>(), ins[k < 5 ? k : k + 5].to_vector<double>()) << k;
    ++checked;
  }
  EXPECT_EQ(checked, 9);
}

// ---- a dedicated GPU test ------------------------------------------------------------

// Adam through the optimizer on 130 f32 variables of odd sizes on `device`;
// returns every variable's value after `steps` steps, and checks there that
// a value fetched before the steps did not change.
std::vector<std::vector<float>> adam_steps(const Device& device, int steps) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Output> vars;
  Output loss;
  {
    DeviceScope ds(g, device);
    std::mt19937_64 rng(5);
    std::vector<Output> terms;
    for (int i = 0; i < 130; ++i) {
      const int64_t n = i == 7 ? 1000003 : i == 8 ? 16384 : 1 + (i * 53) % 777;
      Output v = get_variable("v" + std::to_string(i), {n}, DType::F32, init::constant(0.5));
      Output c = ops::constant(random_tensor(DType::F32, {n}, rng, -1, 1));
      terms.push_back(ops::sum(ops::square(v - c)));
      vars.push_back(v);
    }
    loss = ops::add_n(terms);
  }
  AdamOptimizer opt(0.01);
  Node* train = opt.minimize(loss);
  int fused = 0;
  for (const auto& n : g.nodes()) fused += n->op_type() == "FusedApplyAdam";
  EXPECT_EQ(fused, 1);
  Session s(g);
  s.run_targets({global_variables_initializer()});
  Tensor before = s.run({vars[7]})[0];
  for (int k = 0; k < steps; ++k) s.run_targets({train});
  EXPECT_EQ(before.to_vector<float>(), std::vector<float>(1000003, 0.5f));
  std::vector<std::vector<float>> out;
  for (const Output& v : vars) out.push_back(s.variable_value(v.node).to_vector<float>());
  return out;
}

TEST(FusedApplyGpu, AdamOn130VariablesMatchesCpu) {
  if (find_device_backend(DeviceType::CUDA) == nullptr || device_count(DeviceType::CUDA) == 0)
    GTEST_SKIP() << "no CUDA device: the fused optimizer kernels' GPU run needs one";
  auto cpu = adam_steps(Device::cpu(), 3);
  auto gpu = adam_steps(Device::cuda(0), 3);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].size(), gpu[i].size());
    for (size_t e = 0; e < cpu[i].size(); ++e)
      ASSERT_NEAR(gpu[i][e], cpu[i][e], 1e-5 * (1 + std::abs(cpu[i][e])))
          << "variable " << i << " element " << e;
  }
}

}  // namespace
}  // namespace spire::testing
