// The CPU kernel of FusedElementwise (core/fusion.h, core/ops/fused_ops.cc): a
// group of elementwise ops evaluated block by block by FusedProgram
// (kernels/cpu/fused_program.h), whose blocks stay in the core's L1 cache:
// only the group's inputs are read from memory and only its result is
// written, into an input's buffer when that input dies here. Results equal
// the unfused ops' bit for bit.
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/cpu/fused_program.h"

namespace spire::cpu {
namespace {

template <typename T>
void fused_kernel(KernelContext& ctx) {
  const int nin = ctx.num_inputs();
  std::vector<Shape> shapes;
  std::vector<int> candidates;
  for (int k = 0; k < nin; ++k) {
    shapes.push_back(ctx.input(k).shape());
    candidates.push_back(k);
  }
  FusedProgram<T> program(ctx, std::move(shapes));
  Tensor& out = ctx.forward_input_or_allocate_output(candidates, 0, program.output_shape());
  if (out.num_elements() == 0) return;
  std::vector<const T*> inputs;
  for (int k = 0; k < nin; ++k) inputs.push_back(ctx.input(k).data<T>());
  program.bind(std::move(inputs), out.data<T>());
  program.run_all(ctx);
}

}  // namespace

SPIRE_REGISTER_KERNEL("FusedElementwise", DeviceType::CPU, fused_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("FusedElementwise", DeviceType::CPU, fused_kernel<double>, DType::F64);

}  // namespace spire::cpu
