// CPU kernels for the random ops: RandomUniform, RandomNormal,
// TruncatedNormal and Dropout, in f32 and f64. The numbers come from the
// counter-based Philox generator in kernels/random.h, so element i of a
// draw is the same here as in a CUDA kernel given the same key and stream
// offset. The key is derived from the graph seed and the op seed (or node
// id); the offset is reserved per run with SessionState::advance_rng (both
// in kernels/random_setup.h, shared with the CUDA kernels).
#include <cstdint>

#include "core/kernel_registry.h"
#include "kernels/cpu/vector_loops.h"
#include "kernels/random.h"
#include "kernels/random_setup.h"

namespace spire::cpu {
namespace {

template <typename T>
void random_uniform_kernel(KernelContext& ctx) {
  const random::UniformRange<T> range = random::uniform_range_attrs<T>(ctx);
  Tensor& out = ctx.allocate_output(0, ctx.node().output_shape(0));
  const int64_t n = out.num_elements();
  const random::DrawSetup draw = random::draw_setup(ctx, n);
  T* p = out.data<T>();
  for (int64_t i = 0; i < n; ++i)
    p[i] = random::uniform_range<T>(
        random::philox_bits(draw.key, draw.offset + static_cast<uint64_t>(i)), range.lo, range.hi);
}

template <typename T, bool kTruncated>
void random_normal_kernel(KernelContext& ctx) {
  const double mean = ctx.attr<double>("mean");
  const double stddev = ctx.attr<double>("stddev");
  Tensor& out = ctx.allocate_output(0, ctx.node().output_shape(0));
  const int64_t n = out.num_elements();
  const random::DrawSetup draw = random::draw_setup(ctx, n);
  T* p = out.data<T>();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t idx = draw.offset + static_cast<uint64_t>(i);
    const double z = kTruncated ? random::truncated_standard_normal<T>(draw.key, idx)
                                : random::standard_normal<T>(draw.key, idx);
    p[i] = static_cast<T>(mean + stddev * z);
  }
}

template <typename T>
void dropout_kernel(KernelContext& ctx) {
  const double rate = random::dropout_rate_attr(ctx);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, x.shape());
  Tensor& mask = ctx.allocate_output(1, x.shape());
  const int64_t n = x.num_elements();
  const random::DrawSetup draw = random::draw_setup(ctx, n);
  const T scale = static_cast<T>(1.0 / (1.0 - rate));
  const T* px = x.data<T>();
  T* py = y.data<T>();
  T* pm = mask.data<T>();
  // Counter-based draws: element i uses counter offset + i whichever thread computes it.
  const uint64_t threshold = random::dropout_threshold(rate);
  // Integer work only (Philox and a compare), so each chunk vectorizes (run_vec).
  ctx.parallel_for(n, int64_t{1} << 14, [&](int64_t b, int64_t e) {
    run_vec([&] {
      // Locals, so the stores cannot alias them and the loop vectorizes.
      const uint64_t key = draw.key, offset = draw.offset, thr = threshold;
      const T keep = scale;
      const T* __restrict x = px;
      T* __restrict y = py;
      T* __restrict mask = pm;
      for (int64_t i = b; i < e; ++i) {
        const T m = random::dropout_keep_bits(key, offset + static_cast<uint64_t>(i), thr) ? keep : T(0);
        mask[i] = m;
        y[i] = x[i] * m;
      }
    });
  });
}

template <typename T>
random::RandomKernels kernels_for() {
  return {random_uniform_kernel<T>, random_normal_kernel<T, false>, random_normal_kernel<T, true>,
          dropout_kernel<T>};
}

}  // namespace

SPIRE_STATIC_INIT(cpu_random_kernels) {
  random::register_random_kernels(DeviceType::CPU, kernels_for<float>(), kernels_for<double>());
}

}  // namespace spire::cpu
