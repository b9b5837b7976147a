// Tests of layers/mixed_precision.h: the policy names and scopes, what
// FullyConnected builds under a mixed policy (casts of x and the f32 W, a
// 16-bit MatMul, f32 output and f32 gradients), and an MLP trained on the
// CPU under mixed_bfloat16 and mixed_float16 (with LossScaleOptimizer)
// that tracks its f32 training loss step by step, with every variable and
// optimizer slot f32.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "layers/loss_scale.h"
#include "layers/mixed_precision.h"
#include "tests/layers/layer_test_util.h"

namespace spire::testing {
namespace {

// Nodes of `op` computing in `dtype`: their output dtype, or a mixed-precision MatMul's
// compute_dtype.
int count_nodes(const Graph& g, const std::string& op, DType dtype) {
  int n = 0;
  for (const auto& node : g.nodes()) {
    if (node->op_type() != op || node->num_outputs() == 0) continue;
    DType dt = node->output_dtype(0);
    if (node->has_attr("compute_dtype") && node->attr<DType>("compute_dtype") != DType::Invalid)
      dt = node->attr<DType>("compute_dtype");
    if (dt == dtype) ++n;
  }
  return n;
}

// A mixed-precision MatMul (compute_dtype) gives exactly the values of the graph it replaces,
// cast -> 16-bit MatMul -> cast, forward and backward, for every transpose combination, on
// values that need rounding (and a few that overflow f16).
TEST(MixedPrecisionMatMul, EqualsTheCastMatMulCastGraphBitForBit) {
  for (DType low : {DType::BF16, DType::F16})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      GraphEnv env;
      std::mt19937_64 rng(7 + t);
      const int64_t m = 37, k = 70, n = 45;  // ragged against every tile size
      Tensor av = random_tensor(DType::F32, ta ? Shape{k, m} : Shape{m, k}, rng, -3, 3);
      Tensor bv = random_tensor(DType::F32, tb ? Shape{n, k} : Shape{k, n}, rng, -3, 3);
      av.data<float>()[0] = 1e5f;  // beyond f16's range: inf in both graphs
      Tensor wv = random_tensor(DType::F32, Shape{m, n}, rng, -2, 2);
      Output a = ops::constant(av), b = ops::constant(bv), w = ops::constant(wv);
      Output fused = ops::matmul(a, b, ta, tb, low);
      Output unfused = ops::cast(ops::matmul(ops::cast(a, low), ops::cast(b, low), ta, tb), DType::F32);
      EXPECT_EQ(fused.node->op_type(), "MatMul");
      EXPECT_EQ(fused.dtype(), DType::F32);
      std::vector<Output> gf = gradients({ops::sum(ops::mul(fused, w))}, {a, b});
      std::vector<Output> gu = gradients({ops::sum(ops::mul(unfused, w))}, {a, b});
      SessionOptions o;
      o.num_threads = 2;
      Session s(env.g, o);
      const std::vector<Tensor> r = s.run({fused, unfused, gf[0], gu[0], gf[1], gu[1]});
      const char* what[] = {"product", "da", "db"};
      for (size_t i = 0; i < r.size(); i += 2) {
        ASSERT_EQ(r[i].shape(), r[i + 1].shape());
        EXPECT_EQ(0, std::memcmp(r[i].raw_data(), r[i + 1].raw_data(), r[i].nbytes()))
            << what[i / 2] << " differs, " << dtype_name(low) << " ta " << ta << " tb " << tb;
      }
      // The values really were rounded (not the f32 product).
      Output plain = ops::matmul(a, b, ta, tb);
      const Tensor p = s.run({plain})[0];
      EXPECT_NE(0, std::memcmp(p.raw_data(), r[0].raw_data(), p.nbytes()));
    }
}

TEST(MixedPrecisionMatMul, BadComputeDtypesAreClearErrors) {
  GraphEnv env;
  Output d = ops::placeholder(DType::F64, {2, 3});
  Output f = ops::placeholder(DType::F32, {2, 3});
  expect_error([&] { ops::matmul(d, d, false, true, DType::BF16); },
               {"MatMul", "compute_dtype bf16 needs f32 inputs", "f64"});
  expect_error([&] { ops::matmul(f, f, false, true, DType::I32); },
               {"MatMul", "compute_dtype must be bf16 or f16", "i32"});
  EXPECT_EQ(ops::matmul(f, f, false, true, DType::Invalid).node->attr<DType>("compute_dtype"),
            DType::Invalid);
}

TEST(PrecisionPolicy, NamesParsingAndScopes) {
  EXPECT_EQ(parse_precision_policy("bf16"), PrecisionPolicy::kMixedBFloat16);
  EXPECT_EQ(parse_precision_policy("mixed_float16"), PrecisionPolicy::kMixedFloat16);
  EXPECT_EQ(parse_precision_policy("fp32"), PrecisionPolicy::kFloat32);
  for (PrecisionPolicy p : {PrecisionPolicy::kFloat32, PrecisionPolicy::kMixedBFloat16,
                            PrecisionPolicy::kMixedFloat16})
    EXPECT_EQ(parse_precision_policy(precision_policy_name(p)), p);
  EXPECT_EQ(compute_dtype(PrecisionPolicy::kMixedBFloat16), DType::BF16);
  EXPECT_EQ(compute_dtype(PrecisionPolicy::kMixedFloat16), DType::F16);
  EXPECT_EQ(compute_dtype(PrecisionPolicy::kFloat32), DType::F32);
  expect_error([] { parse_precision_policy("half"); }, {"half", "mixed_bfloat16", "bf16"});

  GraphEnv env;
  EXPECT_EQ(precision_policy(), PrecisionPolicy::kFloat32);
  {
    PrecisionPolicyScope scope(PrecisionPolicy::kMixedFloat16);
    EXPECT_EQ(precision_policy(&env.g), PrecisionPolicy::kMixedFloat16);
    Graph other;
    EXPECT_EQ(precision_policy(&other), PrecisionPolicy::kFloat32);  // per graph
  }
  EXPECT_EQ(precision_policy(), PrecisionPolicy::kFloat32);
}

TEST(PrecisionPolicy, AutocastLowersOnlyF32UnderAMixedPolicy) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F32, {2, 3});
  Output d = ops::placeholder(DType::F64, {2, 3});
  EXPECT_EQ(autocast(x).node, x.node);  // float32 policy: unchanged
  set_precision_policy(PrecisionPolicy::kMixedBFloat16);
  EXPECT_EQ(autocast(x).dtype(), DType::BF16);
  EXPECT_EQ(autocast(d).node, d.node);  // f64 is never lowered
  Output w = ops::placeholder(DType::F32, {3, 4});
  Output y = autocast_matmul(x, w, false, false, "y");
  EXPECT_EQ(y.dtype(), DType::F32);
  EXPECT_EQ(y.node->name(), "y");
  EXPECT_EQ(count_nodes(env.g, "MatMul", DType::BF16), 1);
  Output dw = ops::placeholder(DType::F64, {3, 4});
  EXPECT_EQ(autocast_matmul(d, dw).dtype(), DType::F64);
  EXPECT_EQ(count_nodes(env.g, "MatMul", DType::F64), 1);
  Output bx = ops::placeholder(DType::F32, {5, 2, 3});
  Output bw = ops::placeholder(DType::F32, {5, 3, 4});
  EXPECT_EQ(autocast_batch_matmul(bx, bw).dtype(), DType::F32);
  EXPECT_EQ(count_nodes(env.g, "BatchMatMul", DType::BF16), 1);
}

TEST(PrecisionPolicy, FullyConnectedKeepsF32VariablesAndGradients) {
  for (PrecisionPolicy p : {PrecisionPolicy::kMixedBFloat16, PrecisionPolicy::kMixedFloat16}) {
    GraphEnv env;
    set_precision_policy(p);
    const DType low = compute_dtype(p);
    Output x = ops::placeholder(DType::F32, {-1, 6}, "x");
    Output y = FullyConnected("fc", x, 3, FullyConnectedOptions().activation(activations::gelu()));
    EXPECT_EQ(y.dtype(), DType::F32);
    EXPECT_EQ(count_nodes(env.g, "MatMul", low), 1) << precision_policy_name(p);
    EXPECT_EQ(count_nodes(env.g, "MatMul", DType::F32), 0);
    EXPECT_EQ(count_nodes(env.g, "Cast", low), 0);  // the MatMul rounds x and W itself
    std::vector<Output> vars = trainable_variables("", &env.g);
    ASSERT_EQ(vars.size(), 2u);
    for (const Output& v : vars) EXPECT_EQ(v.dtype(), DType::F32) << v.node->name();
    std::vector<Output> grads = gradients({ops::sum(y)}, vars);
    for (const Output& gr : grads) EXPECT_EQ(gr.dtype(), DType::F32);
    // The backward matmuls (x's and W's gradients) run in the low dtype too.
    EXPECT_EQ(count_nodes(env.g, "MatMul", low), 3);
    // Values: y equals the f32 layer within the rounding of x, W and the product.
    auto s = init_session(env.g);
    std::mt19937_64 rng(3);
    Tensor xv = random_tensor(DType::F32, {4, 6}, rng, -1, 1);
    Tensor got = s->run({y}, {{x, xv}})[0];
    Tensor w = s->variable_value(env.g.find_node("fc/W"));
    const float* px = xv.data<float>();
    const float* pw = w.data<float>();
    const double eps = low == DType::F16 ? 0x1p-10 : 0x1p-7;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) {
        double z = 0, mag = 0;
        for (int k = 0; k < 6; ++k) {
          z += double(px[i * 6 + k]) * pw[k * 3 + j];
          mag += std::fabs(double(px[i * 6 + k]) * pw[k * 3 + j]);
        }
        const double want = 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
        // Three roundings (x, W, product) of relative size eps / 2, times gelu's slope <= 1.13.
        EXPECT_NEAR(got.data<float>()[i * 3 + j], want, 1.13 * 1.5 * eps * mag + 1e-6);
      }
  }
}

// ---- an MLP trained in f32, bf16 and f16 --------------------------------------------

constexpr int kBatch = 32, kIn = 16, kHidden = 32, kClasses = 5, kSteps = 40;

struct MlpRun {
  std::vector<double> losses;
  int64_t skipped = 0;
  int low_matmuls = 0;
  std::vector<std::string> non_f32;  // variables (slots too) that are not f32
};

// Inputs and teacher labels of batch `b` (four fixed batches, cycled).
std::pair<Tensor, Tensor> batch(int b) {
  std::mt19937_64 rng(1000 + static_cast<uint64_t>(b % 4));
  std::normal_distribution<float> normal;
  std::vector<float> x(kBatch * kIn);
  for (float& v : x) v = normal(rng);
  std::vector<int64_t> labels(kBatch);
  for (int i = 0; i < kBatch; ++i) {
    // A fixed nonlinear teacher: the class of the largest of 5 sums of squares of features.
    int best = 0;
    double best_v = -1;
    for (int c = 0; c < kClasses; ++c) {
      double v = 0;
      for (int k = c; k < kIn; k += kClasses) v += double(x[i * kIn + k]) * x[i * kIn + k];
      if (v > best_v) best_v = v, best = c;
    }
    labels[static_cast<size_t>(i)] = best;
  }
  return {Tensor::from_vector<float>({kBatch, kIn}, x),
          Tensor::from_vector<int64_t>({kBatch}, labels)};
}

MlpRun train_mlp(PrecisionPolicy policy, bool loss_scaling) {
  GraphEnv env;
  set_precision_policy(policy);
  Output x = ops::placeholder(DType::F32, {-1, kIn}, "x");
  Output label = ops::placeholder(DType::I64, {-1}, "label");
  FullyConnectedOptions relu = FullyConnectedOptions().activation(activations::relu());
  Output h = FullyConnected("fc0", x, kHidden, relu);
  h = FullyConnected("fc1", h, kHidden, relu);
  Output logits = FullyConnected("fc2", h, kClasses);
  Output loss = ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, label));
  std::shared_ptr<Optimizer> opt = std::make_shared<AdamOptimizer>(3e-3);
  std::shared_ptr<LossScaleOptimizer> scaler;
  if (loss_scaling) opt = scaler = std::make_shared<LossScaleOptimizer>(opt);
  Node* train = opt->minimize(loss);
  auto s = init_session(env.g);
  // The same starting weights in every run.
  std::mt19937_64 rng(42);
  for (const Output& v : trainable_variables("", &env.g))
    s->set_variable_value(v.node, random_tensor(DType::F32, v.shape(), rng, -0.4, 0.4));
  MlpRun r;
  for (int step = 0; step < kSteps; ++step) {
    auto [xv, lv] = batch(step);
    r.losses.push_back(s->run({loss}, {{x, xv}, {label, lv}}, {train})[0].item<double>());
  }
  if (scaler) r.skipped = s->variable_value(scaler->skipped_steps().node).item<int64_t>();
  r.low_matmuls = count_nodes(env.g, "MatMul", compute_dtype(policy));
  for (const Output& v : global_variables("", &env.g)) {
    const bool counter = v.node->name().rfind("loss_scale_", 0) == 0;  // the i64 counters
    if (v.dtype() != DType::F32 && !counter) r.non_f32.push_back(v.node->name());
  }
  return r;
}

TEST(MixedPrecisionTraining, MlpTracksItsF32LossInBf16AndF16) {
  const MlpRun f32 = train_mlp(PrecisionPolicy::kFloat32, false);
  // It learns: the loss falls well below its start.
  ASSERT_LT(f32.losses.back(), 0.6 * f32.losses.front());
  struct Mode {
    PrecisionPolicy policy;
    bool scaling;
    double eps;
  };
  for (const Mode& m : {Mode{PrecisionPolicy::kMixedBFloat16, false, 0x1p-7},
                        Mode{PrecisionPolicy::kMixedFloat16, true, 0x1p-10}}) {
    const MlpRun low = train_mlp(m.policy, m.scaling);
    const char* name = precision_policy_name(m.policy);
    EXPECT_EQ(low.low_matmuls, 9) << name;  // 3 forward, 6 backward
    EXPECT_TRUE(low.non_f32.empty()) << name << ": " << low.non_f32.front();
    // The first step's loss differs by the rounding of the forward pass only; later steps
    // drift as the updates differ. Bounds in units of the dtype's epsilon (measured: the
    // worst step is about 0.2 eps for both dtypes).
    EXPECT_NEAR(low.losses[0], f32.losses[0], 2 * m.eps * f32.losses[0]) << name;
    double worst = 0, differ = 0;
    for (int i = 0; i < kSteps; ++i) {
      const double rel = std::fabs(low.losses[i] - f32.losses[i]) / f32.losses[i];
      worst = std::max(worst, rel);
      differ += low.losses[i] != f32.losses[i];
      EXPECT_LT(rel, m.eps) << name << " step " << i << ": " << low.losses[i] << " vs f32 "
                                << f32.losses[i];
    }
    EXPECT_GT(differ, kSteps / 2) << name << ": the low-precision run must not be f32";
    EXPECT_EQ(low.skipped, 0) << name;
    std::printf("%s: worst relative loss difference from f32 over %d steps %.3g (%.2f eps), "
                "skipped steps %lld\n",
                name, kSteps, worst, worst / m.eps, static_cast<long long>(low.skipped));
  }
}

}  // namespace
}  // namespace spire::testing
