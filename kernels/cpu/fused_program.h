// The CPU evaluator of a fused elementwise program (core/fusion.h): the
// instructions a FusedElementwise node carries in its attrs, or the epilogue
// a FusedConv2D / FusedMatMul node applies to its product. The program is
// decoded once per kernel call (kernels/fused_decode.h: each instruction's
// shapes checked as its own op would), then evaluated over any range of output
// elements in blocks of 512 that stay in the core's L1 cache, each instruction
// through its op's own functor and vector loop (kernels/cpu/vector_loops.h, kernels/functors.h),
// so results equal the unfused ops' bit for bit. An input whose element count
// is the output's is read in place (it may be the output buffer itself: a
// product the epilogue rewrites), a one-element input as a scalar, any other
// broadcast gathered per block. Also registers, at load time, which ops fuse
// on the CPU and for which dtypes (f32, f64; register_fusable).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/kernel_registry.h"
#include "core/shape.h"
#include "kernels/fused_decode.h"

namespace spire::cpu {

/// One decoded program of T (float or double).
template <typename T>
class FusedProgram {
 public:
  /// Decodes the program in ctx's node attrs ("ops", "operands", "nodes",
  /// "string_attrs", "number_attr_names", "number_attrs"); program input k has
  /// shape `shapes[k]`. Fails (ctx.fail) on a malformed program or shapes that
  /// do not broadcast as the ops require.
  FusedProgram(const KernelContext& ctx, std::vector<Shape> shapes);
  ~FusedProgram();
  FusedProgram(const FusedProgram&) = delete;
  FusedProgram& operator=(const FusedProgram&) = delete;

  /// The program's result shape (its inputs' broadcast through the instructions).
  const Shape& output_shape() const;
  /// Binds program input k to `inputs[k]` and the result to `out`
  /// (output_shape()'s elements). An input may alias `out` only when it has
  /// the output's element count (read and written at the same element).
  void bind(std::vector<const T*> inputs, T* out);
  /// Evaluates result elements [begin, end) (flat, row-major) on the calling
  /// thread; safe to call from several threads on disjoint ranges.
  void run(int64_t begin, int64_t end) const;
  /// Evaluates the result's rows [r0, r1), columns [c0, c1) of its [rows, cols]
  /// view (cols = the result's last dimension).
  void run_block(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t cols) const;
  /// Evaluates every result element over ctx's threads.
  void run_all(KernelContext& ctx) const;

 private:
  struct Impl;
  struct Workspace;
  void run(Workspace& ws, int64_t begin, int64_t end) const;
  std::unique_ptr<Impl> impl_;
};

/// The epilogue of a FusedConv2D / FusedMatMul node (core/fusion.h): its program, whose
/// input 0 is the product and whose inputs 1, 2, ... are the node's inputs from `first_arg`
/// on. Allocates output 0. When the program's result has the product's shape (a bias, an
/// activation, a residual add), the product is computed into output 0 and rewritten there,
/// block by block as the GEMM finishes each (block()), or whole (run_all()); otherwise the
/// product goes to a temporary and finish() evaluates the program from it.
template <typename T>
class Epilogue {
 public:
  Epilogue(KernelContext& ctx, const Shape& product, int first_arg);
  /// Whether the epilogue rewrites the product in place (block() and run_all() apply).
  bool in_place() const { return in_place_; }
  /// Where the product is to be computed.
  T* product() { return in_place_ ? out_->data<T>() : temp_.data(); }
  /// Points the program at a product computed into `buf` (in place: also its result).
  void bind_product(T* buf);
  /// Rewrites rows [r0, r1), columns [c0, c1) of the product (in place only).
  void block(int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {
    program_.run_block(r0, r1, c0, c1, cols_);
  }
  /// Rewrites the whole product over ctx's threads (in place only).
  void run_all(KernelContext& ctx) const { program_.run_all(ctx); }
  /// Evaluates the program from the temporary product into output 0 (not in place).
  void finish(KernelContext& ctx);

 private:
  FusedProgram<T> program_;
  std::vector<const T*> args_;
  bool in_place_;
  int64_t cols_;
  Tensor* out_;
  std::vector<T> temp_;
};

using kernels::in_product;

extern template class FusedProgram<float>;
extern template class FusedProgram<double>;
extern template class Epilogue<float>;
extern template class Epilogue<double>;

}  // namespace spire::cpu
