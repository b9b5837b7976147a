// Parity of the fused attention op (ScaledDotProductAttention and its gradient op) with
// PyTorch's torch.nn.functional.scaled_dot_product_attention: Spire runs the op and the
// gradients of <w, out> w.r.t. q, k and v for several odd-sized cases (causal and not,
// Tq != Tk, Dv != D, an explicit scale, tiles smaller than T and the default 64), in f64
// and f32, and writes inputs and results as safetensors; tests/core/ops/attention_torch.py
// recomputes them with PyTorch (is_causal, scale) and compares, each tensor as
// max |a - b| / max(max |b|, 1): 1e-10 in f64, 1e-5 in f32. Skips when python3 lacks
// torch or safetensors (the script exits 77; .ci/run installs both, so CI runs it).
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "train/checkpoint.h"

namespace spire::testing {
namespace {

struct TorchCase {
  int64_t b, h, tq, tk, d, dv;
  bool causal;
  double scale;  // 0: PyTorch's default 1/sqrt(D)
  int64_t block;
};

const std::vector<TorchCase> kCases = {
    {2, 3, 13, 13, 7, 7, true, 0, 4},   {2, 3, 13, 13, 7, 7, false, 0, 4},
    {1, 2, 5, 9, 3, 5, false, 0.3, 2},  {1, 2, 9, 5, 4, 4, true, 0, 3},
    {1, 2, 7, 11, 6, 6, true, 0, 64},   {2, 2, 67, 67, 16, 16, true, 0, 64},
};

TEST(AttentionTorchParity, MatchesScaledDotProductAttention) {
  TempDir dir("spire_attention_parity");
  std::map<std::string, Tensor> tensors;
  std::ostringstream cfg;
  cfg.precision(17);
  cfg << "{\"cases\": [";
  int n = 0;
  for (DType dt : {DType::F64, DType::F32}) {
    for (const TorchCase& c : kCases) {
      const std::string p = "c" + std::to_string(n) + "_";
      Graph g;
      DefaultGraphGuard guard(g);
      std::mt19937_64 rng(static_cast<uint64_t>(n));
      Tensor tq = random_tensor(dt, {c.b, c.h, c.tq, c.d}, rng, -1.5, 1.5);
      Tensor tk = random_tensor(dt, {c.b, c.h, c.tk, c.d}, rng, -1.5, 1.5);
      Tensor tv = random_tensor(dt, {c.b, c.h, c.tk, c.dv}, rng, -1, 1);
      Tensor tw = random_tensor(dt, {c.b, c.h, c.tq, c.dv}, rng, -1, 1);
      Output q = ops::constant(tq), k = ops::constant(tk), v = ops::constant(tv);
      Output out = ops::add_op("ScaledDotProductAttention", {q, k, v},
                               {{"causal", c.causal}, {"scale", c.scale}, {"block_size", c.block}})
                       ->output(0);
      std::vector<Output> fetch = {out};
      for (const Output& gr : gradients({out}, {q, k, v}, {ops::constant(tw)})) fetch.push_back(gr);
      std::vector<Tensor> got = run(fetch);
      tensors[p + "q"] = tq;
      tensors[p + "k"] = tk;
      tensors[p + "v"] = tv;
      tensors[p + "w"] = tw;
      tensors[p + "out"] = got[0];
      tensors[p + "dq"] = got[1];
      tensors[p + "dk"] = got[2];
      tensors[p + "dv"] = got[3];
      cfg << (n ? ", " : "") << "{\"prefix\": \"" << p << "\", \"causal\": "
          << (c.causal ? "true" : "false") << ", \"scale\": " << c.scale
          << ", \"tolerance\": " << (dt == DType::F64 ? 1e-10 : 1e-5) << "}";
      ++n;
    }
  }
  cfg << "]}\n";
  save_checkpoint(dir.file("attention.safetensors"), tensors);
  std::ofstream(dir.file("config.json")) << cfg.str();

  std::string out;
  const std::string cmd = std::string("python3 -B '") + SPIRE_SOURCE_DIR +
                          "/tests/core/ops/attention_torch.py' '" + dir.path() + "' 2>&1";
  const int rc = run_command(cmd, &out);
  if (rc == 77)
    GTEST_SKIP() << "python3 with `torch` and `safetensors` is not available (pip install torch "
                    "safetensors); skipping the PyTorch parity check";
  EXPECT_EQ(rc, 0) << "attention_torch.py found Spire and PyTorch apart:\n" << out;
  if (rc == 0) std::printf("%s", out.c_str());
}

}  // namespace
}  // namespace spire::testing
