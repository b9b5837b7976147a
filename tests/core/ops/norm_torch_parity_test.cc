// PyTorch cross-check of the fused LayerNorm (forward and its LayerNormGrad
// backward) and of GELU's tanh approximation, in f64 at odd sizes: Spire
// writes the inputs and its results as safetensors, and
// tests/core/ops/norm_torch.py recomputes them with
// torch.nn.functional.layer_norm and gelu(approximate="tanh") (autograd for
// the gradients) and compares each tensor to 1e-10 (relative to its largest
// magnitude when above 1). Skips when python3 lacks torch or safetensors (the
// script exits 77 then; .ci/run installs both, so CI runs it).
#include <cstdio>
#include <random>
#include <string>

#include "tests/support/op_test_util.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace spire::testing {
namespace {

struct LnCase {
  Shape x;
  bool beta;
};

TEST(NormTorchParity, LayerNormAndGeluTanh) {
  TempDir dir("spire_norm_torch_parity");
  Graph g;
  DefaultGraphGuard guard(g);
  std::mt19937_64 rng(2027);
  std::map<std::string, Tensor> feeds_by_name;
  std::vector<std::string> names;
  std::vector<Output> fetches;
  auto input = [&](const std::string& name, const Shape& s, double lo, double hi) {
    feeds_by_name[name] = random_tensor(DType::F64, s, rng, lo, hi);
    return ops::constant(feeds_by_name[name]);
  };
  auto result = [&](const std::string& name, const Output& o) {
    names.push_back(name);
    fetches.push_back(o);
  };
  // Odd C (one below a multiple of 32 and above it), rank 1 to 3, with and without beta.
  const LnCase cases[] = {{{3, 5, 37}, true}, {{7, 129}, false}, {{33}, true}, {{2, 1, 3}, false}};
  int k = 0;
  for (const LnCase& c : cases) {
    const std::string p = "ln" + std::to_string(k++) + "_";
    const int64_t ch = c.x[c.x.rank() - 1];
    Output x = input(p + "x", c.x, -2, 3);
    Output gamma = input(p + "gamma", {ch}, -1.5, 1.5);
    Output beta = c.beta ? input(p + "beta", {ch}, -1, 1) : Output();
    Output dy = input(p + "dy", c.x, -1, 1);
    ops::LayerNormOutputs o = ops::layer_norm(x, gamma, beta);
    std::vector<Output> xs = {x, gamma};
    if (c.beta) xs.push_back(beta);
    std::vector<Output> gr = gradients({ops::sum(ops::mul(o.y, dy))}, xs);
    result(p + "y", o.y);
    result(p + "mean", o.mean);
    result(p + "rstd", o.rstd);
    result(p + "dx", gr[0]);
    result(p + "dgamma", gr[1]);
    if (c.beta) result(p + "dbeta", gr[2]);
  }
  Output gx = input("gelu_x", {5, 101}, -4, 4);
  Output gdy = input("gelu_dy", {5, 101}, -1, 1);
  Output gy = ops::gelu(gx, ops::GeluApproximate::kTanh);
  result("gelu_y", gy);
  result("gelu_dx", gradients({ops::sum(ops::mul(gy, gdy))}, {gx})[0]);

  std::vector<Tensor> values = run(fetches);
  std::map<std::string, Tensor> out = feeds_by_name;
  for (size_t i = 0; i < names.size(); ++i) out["spire_" + names[i]] = values[i];
  save_checkpoint(dir.file("norm.safetensors"), out);

  std::string text;
  const std::string cmd = std::string("python3 '") + SPIRE_SOURCE_DIR +
                          "/tests/core/ops/norm_torch.py' '" + dir.file("norm.safetensors") + "' 2>&1";
  const int rc = run_command(cmd, &text);
  if (rc == 77) GTEST_SKIP() << "python3 lacks torch or safetensors: " << text;
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("ln0_dx"), std::string::npos) << text;
  // The script's summary line (cases and the worst difference).
  const size_t last = text.find_last_of('\n', text.size() >= 2 ? text.size() - 2 : 0);
  std::printf("%s", text.substr(last == std::string::npos ? 0 : last + 1).c_str());
}

}  // namespace
}  // namespace spire::testing
