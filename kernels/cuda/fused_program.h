// The CUDA evaluator of fused elementwise programs (core/fusion.h): the
// FusedElementwise kernel and the epilogue of FusedMatMul / FusedConv2D. A
// program is decoded as on the CPU (kernels/fused_decode.h), each instruction
// bound to the device address of its op's shared functor (kernels/fused_code.h),
// and one grid-stride kernel computes every output element through the whole
// program (fused_element). Results are the unfused CUDA kernels' up to FMA
// contraction inside a functor (nvcc contracts in both; the order of a
// functor's operations is the same).
#pragma once

#include <memory>
#include <vector>

#include "core/kernel_registry.h"
#include "core/shape.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/fused_decode.h"

namespace spire::cuda {

/// Evaluates program `p` with input k at `inputs[k]` (device memory) into `out`
/// (p.output_shape()'s elements) on ctx's stream. An input may alias `out` when it has
/// the output's element count (each element is read before it is written).
template <typename T>
void run_fused_program(KernelContext& ctx, const kernels::FusedProgramCode& p, const std::vector<const T*>& inputs,
                       T* out);

/// The epilogue of a FusedConv2D / FusedMatMul node on a CUDA device: its program, whose
/// input 0 is the product and whose inputs 1, 2, ... are the node's inputs from `first_arg`
/// on. Allocates output 0. When the program's result has the product's shape, the product
/// is computed into output 0 and rewritten there; otherwise into device scratch memory.
template <typename T>
class CudaEpilogue {
 public:
  CudaEpilogue(KernelContext& ctx, const Shape& product, int first_arg);
  /// Where the product is to be computed (the product's element count).
  T* product() const { return product_; }
  /// Evaluates the program from the product into output 0.
  void finish(KernelContext& ctx);

 private:
  kernels::FusedProgramCode program_;
  std::vector<const T*> args_;
  Tensor* out_ = nullptr;
  std::unique_ptr<Scratch> temp_;
  T* product_ = nullptr;
};

extern template class CudaEpilogue<float>;
extern template class CudaEpilogue<double>;

}  // namespace spire::cuda
