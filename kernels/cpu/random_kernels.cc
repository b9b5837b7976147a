// CPU kernels for the random ops: RandomUniform, RandomNormal,
// TruncatedNormal and Dropout, in f32 and f64. The numbers come from the
// counter-based Philox generator in kernels/random.h, so element i of a
// draw is the same here as in a CUDA kernel given the same key and stream
// offset. The key is derived from the graph seed and the op seed (or node
// id); the offset is reserved per run with SessionState::advance_rng.
#include <cstdint>

#include "core/kernel_registry.h"
#include "kernels/random.h"

namespace spire::cpu {
namespace {

uint64_t node_key(const KernelContext& ctx) {
  const Node& n = ctx.node();
  return random::derive_key(n.graph()->seed(), n.attr<int64_t>("seed"), n.id());
}

/// Reserves `count` counters of this node's stream for this run.
uint64_t stream_offset(KernelContext& ctx, int64_t count) {
  return ctx.state().advance_rng(&ctx.node(), static_cast<uint64_t>(count));
}

template <typename T>
void random_uniform_kernel(KernelContext& ctx) {
  const T lo = static_cast<T>(ctx.attr<double>("minval"));
  const T hi = static_cast<T>(ctx.attr<double>("maxval"));
  if (!(lo < hi)) ctx.fail("minval must be less than maxval in ", dtype_name(dtype_of<T>));
  Tensor& out = ctx.allocate_output(0, ctx.node().output_shape(0));
  const int64_t n = out.num_elements();
  const uint64_t key = node_key(ctx);
  const uint64_t offset = stream_offset(ctx, n);
  T* p = out.data<T>();
  for (int64_t i = 0; i < n; ++i)
    p[i] = random::uniform_range<T>(random::philox_bits(key, offset + static_cast<uint64_t>(i)),
                                    lo, hi);
}

template <typename T, bool kTruncated>
void random_normal_kernel(KernelContext& ctx) {
  const double mean = ctx.attr<double>("mean");
  const double stddev = ctx.attr<double>("stddev");
  Tensor& out = ctx.allocate_output(0, ctx.node().output_shape(0));
  const int64_t n = out.num_elements();
  const uint64_t key = node_key(ctx);
  const uint64_t offset = stream_offset(ctx, n);
  T* p = out.data<T>();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t idx = offset + static_cast<uint64_t>(i);
    const double z = kTruncated ? random::truncated_standard_normal<T>(key, idx)
                                : random::standard_normal<T>(key, idx);
    p[i] = static_cast<T>(mean + stddev * z);
  }
}

template <typename T>
void dropout_kernel(KernelContext& ctx) {
  const double rate = ctx.attr<double>("rate");
  if (!(rate >= 0.0 && rate < 1.0)) ctx.fail("rate must be in [0, 1), got ", rate);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, x.shape());
  Tensor& mask = ctx.allocate_output(1, x.shape());
  const int64_t n = x.num_elements();
  const uint64_t key = node_key(ctx);
  const uint64_t offset = stream_offset(ctx, n);
  const T scale = static_cast<T>(1.0 / (1.0 - rate));
  const T* px = x.data<T>();
  T* py = y.data<T>();
  T* pm = mask.data<T>();
  // Counter-based draws: element i uses counter offset + i whichever thread computes it.
  ctx.parallel_for(n, int64_t{1} << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T m = random::dropout_keep(key, offset + static_cast<uint64_t>(i), rate) ? scale : T(0);
      pm[i] = m;
      py[i] = px[i] * m;
    }
  });
}

}  // namespace

SPIRE_STATIC_INIT(cpu_random_kernels) {
  auto& r = KernelRegistry::global();
  r.add("RandomUniform", DeviceType::CPU, DType::F32, random_uniform_kernel<float>);
  r.add("RandomUniform", DeviceType::CPU, DType::F64, random_uniform_kernel<double>);
  r.add("RandomNormal", DeviceType::CPU, DType::F32, random_normal_kernel<float, false>);
  r.add("RandomNormal", DeviceType::CPU, DType::F64, random_normal_kernel<double, false>);
  r.add("TruncatedNormal", DeviceType::CPU, DType::F32, random_normal_kernel<float, true>);
  r.add("TruncatedNormal", DeviceType::CPU, DType::F64, random_normal_kernel<double, true>);
  r.add("Dropout", DeviceType::CPU, DType::F32, dropout_kernel<float>);
  r.add("Dropout", DeviceType::CPU, DType::F64, dropout_kernel<double>);
}

}  // namespace spire::cpu
