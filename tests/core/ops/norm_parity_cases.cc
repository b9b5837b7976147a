// CPU/GPU parity cases for the CUDA LayerNorm and LayerNormGrad kernels
// (kernels/cuda/layer_norm_kernels.cu), beyond the small gradient cases of
// norm_ops_cases.cc (which also run as parity cases): rows of 1 to 1000
// elements (shorter and longer than a warp), many rows (several blocks of
// the dgamma/dbeta column sums), no beta, C = 1, an empty batch (dgamma and
// dbeta are sums over no rows: zeros), inputs with a large offset (the
// two-pass variance), and the forward and backward in one graph. Also GELU's
// tanh form at large |x|. They run on the CPU in every build
// (ParityCases.RunOnTheCpuTwiceWithTheSameResult) and on a GPU where one exists.
#include <string>
#include <vector>

#include "core/ops/norm_ops.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;

const bool kLayerNormCases [[maybe_unused]] = [] {
  struct Case {
    Shape x;
    bool beta;
    double lo, hi;  // x's range
  };
  const Case cases[] = {
      {{4, 5}, true, -2, 2},       {{3, 1000}, true, -2, 2},   {{700, 19}, false, -2, 2},
      {{2, 3, 33}, true, -2, 2},   {{6, 1}, true, -2, 2},      {{0, 7}, true, -2, 2},
      {{64, 128}, false, 95, 105}, {{5, 257}, false, -3, 1},
  };
  for (const Case& c : cases) {
    const int64_t ch = c.x[c.x.rank() - 1];
    Shape stats(std::vector<int64_t>(c.x.dims().begin(), c.x.dims().end() - 1));
    const std::string name = c.x.to_string() + (c.beta ? " with beta" : " without beta") +
                             " x in [" + std::to_string(c.lo) + ", " + std::to_string(c.hi) + "]";
    std::vector<ParityInput> in = {{c.x, DType::Invalid, c.lo, c.hi}, {{ch}, DType::Invalid, 0.5, 1.5},
                                   {c.x}};
    if (c.beta) in.push_back({{ch}});
    const bool beta = c.beta;
    register_parity_case(ParityCase{
        "LayerNorm", name, in,
        [beta](const In& x) -> Outs {
          ops::LayerNormOutputs o = ops::layer_norm(x[0], x[1], beta ? x[3] : Output());
          ops::LayerNormGradOutputs g = ops::layer_norm_grad(x[2], x[0], x[1], o.mean, o.rstd);
          return {o.y, o.mean, o.rstd, g.dx, g.dgamma, g.dbeta};
        },
        {DType::F32, DType::F64}, 1e-4, 1e-10});
    // LayerNormGrad alone, with free mean and rstd.
    register_parity_case(ParityCase{
        "LayerNormGrad", name + " free statistics",
        {{c.x}, {c.x}, {{ch}}, {stats}, {stats, DType::Invalid, 0.5, 2}},
        [](const In& x) -> Outs {
          ops::LayerNormGradOutputs g = ops::layer_norm_grad(x[0], x[1], x[2], x[3], x[4]);
          return {g.dx, g.dgamma, g.dbeta};
        },
        {DType::F32, DType::F64}, 1e-4, 1e-10});
  }
  return true;
}();

SPIRE_PARITY_CASE(gelu_tanh_wide, {"Gelu", "tanh approximation, x in [-12, 12]",
  {{{9, 131}, DType::Invalid, -12, 12}},
  [](const In& x) -> Outs { return {ops::gelu(x[0], ops::GeluApproximate::kTanh)}; }});

}  // namespace
}  // namespace spire::testing
