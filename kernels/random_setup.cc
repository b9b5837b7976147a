// Host-side setup of the random kernels (see random_setup.h).
#include "kernels/random_setup.h"

#include <utility>

#include "kernels/random.h"

namespace spire::random {

DrawSetup draw_setup(KernelContext& ctx, int64_t count) {
  const Node& n = ctx.node();
  DrawSetup s;
  s.key = derive_key(n.graph()->seed(), n.attr<int64_t>("seed"), n.id());
  s.offset = ctx.state().advance_rng(&n, static_cast<uint64_t>(count));
  return s;
}

double dropout_rate_attr(KernelContext& ctx) {
  const double rate = ctx.attr<double>("rate");
  if (!(rate >= 0.0 && rate < 1.0)) ctx.fail("rate must be in [0, 1), got ", rate);
  return rate;
}

void register_random_kernels(DeviceType device, const RandomKernels& f32,
                             const RandomKernels& f64) {
  auto& r = KernelRegistry::global();
  for (const auto& [dtype, k] : {std::pair{DType::F32, &f32}, std::pair{DType::F64, &f64}}) {
    r.add("RandomUniform", device, dtype, k->uniform);
    r.add("RandomNormal", device, dtype, k->normal);
    r.add("TruncatedNormal", device, dtype, k->truncated_normal);
    r.add("Dropout", device, dtype, k->dropout);
  }
}

}  // namespace spire::random
