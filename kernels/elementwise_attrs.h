// Host-side pieces of the elementwise kernels shared by the CPU kernels
// (kernels/cpu/elementwise.cc, BroadcastTo in kernels/cpu/array_kernels.cc)
// and the CUDA kernels (kernels/cuda/elementwise.cu, SumToLike in
// kernels/cuda/reduction_kernels.cu): the shape checks (with ctx.fail and
// the same messages on every device) and the registrar of the shared
// elementwise table (kernels/elementwise_table.h). Plain C++ (no CUDA); the
// non-template functions are compiled from kernels/elementwise_attrs.cc.
#pragma once

#include <initializer_list>
#include <type_traits>

#include "core/kernel_registry.h"
#include "core/ops/math_ops.h"
#include "kernels/functors.h"

namespace spire::kernels {

/// The broadcast of shapes a and b; fails when they do not broadcast.
Shape broadcast_or_fail(KernelContext& ctx, const Shape& a, const Shape& b);

/// The output shape of Select (inputs 0, 1 and 2 broadcast together).
Shape select_shape(KernelContext& ctx);

/// AddN: fails unless every input has input 0's shape.
void check_same_shapes(KernelContext& ctx);

/// BroadcastTo / BroadcastLike of input 0 to `target`: fails when it does not
/// broadcast there; when input 0 already has that shape it becomes output 0
/// (no copy) and this returns true.
bool broadcast_or_forward(KernelContext& ctx, const Shape& target);

/// SumToLike of input 0 down to the shape of input 1 (like): fails unless
/// like broadcasts to input 0's shape. When input 0 already has that shape it
/// becomes output 0 (no copy) and this returns null; else output 0 is
/// allocated with like's shape and returned.
Tensor* sum_to_like_output(KernelContext& ctx);

/// BroadcastLike / BroadcastTo of input 0 to `target` (checked as by
/// broadcast_or_forward): null when input 0 was forwarded, else output 0
/// allocated with shape target.
Tensor* broadcast_output(KernelContext& ctx, const Shape& target);

/// Registers the shared elementwise table for `device` (pass it to
/// visit_elementwise_table): each (op, dtype) runs Launch::binary<T>(ctx, f)
/// or Launch::unary<T>(ctx, f) with the op's functor, for the dtypes the
/// functor supports.
template <typename Launch>
struct TableRegistrar {
  DeviceType device;

  template <typename F>
  void binary(const char* op, F f, std::initializer_list<DType> dtypes) const {
    add<2>(op, f, dtypes);
  }
  template <typename F>
  void unary(const char* op, F f, std::initializer_list<DType> dtypes) const {
    add<1>(op, f, dtypes);
  }

 private:
  template <int kArity, typename F>
  void add(const char* op, F f, std::initializer_list<DType> dtypes) const {
    for (DType dt : dtypes)
      KernelRegistry::global().add(op, device, dt, [f, dt](KernelContext& ctx) {
        visit_dtype(dt, ctx.node().op_type().c_str(), [&](auto zero) {
          using T = decltype(zero);
          if constexpr (kArity == 2) {
            if constexpr (std::is_invocable_v<F, T, T> && functors::kSupports<F, T>)
              Launch::template binary<T>(ctx, f);
          } else if constexpr (std::is_invocable_v<F, T> && functors::kSupports<F, T>) {
            Launch::template unary<T>(ctx, f);
          }
        });
      });
  }
};

/// LeakyRelu (f32, f64) through Launch::unary (see TableRegistrar).
template <typename Launch>
void leaky_relu_kernel(KernelContext& ctx) {
  const functors::LeakyRelu f{ctx.attr<double>("alpha")};
  visit_dtype(ctx.input(0).dtype(), "LeakyRelu", [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_floating_point_v<T>) Launch::template unary<T>(ctx, f);
  });
}

/// Gelu (f32, f64) through Launch::unary (see TableRegistrar): the exact
/// functor, or GeluTanh for attr approximate="tanh".
template <typename Launch>
void gelu_kernel(KernelContext& ctx) {
  const bool tanh_form = ops::parse_gelu_approximate(ctx.attr<std::string>("approximate")) ==
                         ops::GeluApproximate::kTanh;
  visit_dtype(ctx.input(0).dtype(), "Gelu", [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_floating_point_v<T>) {
      if (tanh_form) Launch::template unary<T>(ctx, functors::GeluTanh{});
      else Launch::template unary<T>(ctx, functors::Gelu{});
    }
  });
}

}  // namespace spire::kernels
