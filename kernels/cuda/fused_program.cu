// The CUDA evaluator of fused elementwise programs (kernels/cuda/fused_program.h) and the
// FusedElementwise kernel (core/ops/fused_ops.cc). Registers, at load time, the ops that
// fuse on CUDA devices: visit_fused_instructions's list (kernels/fused_code.h), the same
// (op, dtype) pairs as the CPU evaluator's.
//
// An instruction's function is fused_call<W, T> for its op's wrapper W. Its device address
// is read once per device (cudaMemcpyFromSymbol of a __device__ variable holding it) into
// the device context's cache; a program is then a FusedCode of those addresses, passed to
// the kernel as a __grid_constant__ parameter so that the threads read it from the constant
// bank without a local copy. A thread keeps the program's values in a local array (ptxas,
// sm_90: 320 / 512 bytes of stack for f32 / f64, and at most 40 bytes for any instruction's
// function), well within the default 1 KiB stack per thread.
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/fusion.h"
#include "core/kernel_registry.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fused_program.h"
#include "kernels/cuda/launch.h"
#include "kernels/fused_code.h"

namespace spire::cuda {
namespace {

template <typename T>
constexpr DType dtype_of_v = std::is_same_v<T, float> ? DType::F32 : DType::F64;

/// The device address of fused_call<W, T>.
template <typename W, typename T>
__device__ kernels::FusedFn<T> kDeviceFn = &kernels::fused_call<W, T>;

template <typename T>
using FnTable = std::map<std::string, kernels::FusedFn<T>>;

/// Per device (a function's address belongs to the device's module): every instruction's
/// function, by fused_instruction_key.
struct DeviceFns {
  bool filled = false;
  FnTable<float> f32;
  FnTable<double> f64;
};

template <typename T>
struct AddressSink {
  FnTable<T>& table;
  template <typename W>
  void add(const char*, const char* key, int) {
    kernels::FusedFn<T> fn = nullptr;
    SPIRE_CUDA_CHECK(cudaMemcpyFromSymbol(&fn, kDeviceFn<W, T>, sizeof(fn)));
    table[key] = fn;
  }
};

template <typename T>
const FnTable<T>& device_fns(CudaContext& cc) {
  DeviceFns& d = cc.cache<DeviceFns>();
  std::lock_guard<std::mutex> lock(cc.cache_mutex());
  if (!d.filled) {
    DeviceGuard guard(cc.device());
    AddressSink<float> f32{d.f32};
    kernels::visit_fused_instructions<float>(f32);
    AddressSink<double> f64{d.f64};
    kernels::visit_fused_instructions<double>(f64);
    d.filled = true;
  }
  if constexpr (std::is_same_v<T, float>) {
    return d.f32;
  } else {
    return d.f64;
  }
}

static_assert(sizeof(kernels::FusedCode<double, uint64_t>) <= 4000, "a FusedCode must fit a kernel's parameters");

template <typename T, typename I>
__global__ void fused_program_kernel(const __grid_constant__ kernels::FusedCode<T, I> code, int64_t n, T* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) { out[i] = kernels::fused_element(code, static_cast<I>(i)); }
}

template <typename T, typename I>
void launch(KernelContext& ctx, CudaContext& cc, const kernels::FusedProgramCode& p,
            const std::vector<const T*>& inputs, T* out, int64_t n) {
  kernels::FusedCode<T, I> code;
  kernels::make_fused_code(ctx, p, device_fns<T>(cc), inputs, &code);
  fused_program_kernel<T, I><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(code, n, out);
  SPIRE_CUDA_LAUNCH_CHECK();
}

// FusedElementwise: the program over the node's inputs, into an input's buffer when that
// input dies here (each thread reads its element of it before writing it).
template <typename T>
void fused_elementwise_kernel(KernelContext& ctx) {
  const int nin = ctx.num_inputs();
  std::vector<Shape> shapes;
  std::vector<int> candidates;
  for (int k = 0; k < nin; ++k) {
    shapes.push_back(ctx.input(k).shape());
    candidates.push_back(k);
  }
  const kernels::FusedProgramCode p =
      kernels::decode_fused_program(ctx, std::move(shapes), DeviceType::CUDA, dtype_of_v<T>);
  Tensor& out = ctx.forward_input_or_allocate_output(candidates, 0, p.output_shape());
  std::vector<const T*> inputs;
  for (int k = 0; k < nin; ++k) inputs.push_back(ctx.input(k).data<T>());
  run_fused_program<T>(ctx, p, inputs, out.data<T>());
}

// Registers what fuses on CUDA devices.
struct FusableSink {
  DType dtype;
  template <typename W>
  void add(const char* op, const char*, int arity) {
    register_fusable(DeviceType::CUDA, op, dtype, arity);
  }
};

}  // namespace

template <typename T>
void run_fused_program(KernelContext& ctx, const kernels::FusedProgramCode& p, const std::vector<const T*>& inputs,
                       T* out) {
  const int64_t n = p.output_shape().num_elements();
  if (n <= 0) return;
  CudaContext& cc = context(ctx);
  DeviceGuard guard(cc.device());
  if (n <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max()))
    launch<T, uint32_t>(ctx, cc, p, inputs, out, n);
  else
    launch<T, uint64_t>(ctx, cc, p, inputs, out, n);
}

template <typename T>
CudaEpilogue<T>::CudaEpilogue(KernelContext& ctx, const Shape& product, int first_arg)
    : program_(kernels::decode_fused_program(ctx, kernels::epilogue_shapes(ctx, product, first_arg),
                                             DeviceType::CUDA, dtype_of_v<T>)) {
  for (int k = first_arg; k < ctx.num_inputs(); ++k) args_.push_back(ctx.input(k).data<T>());
  out_ = &ctx.allocate_output(0, program_.output_shape());
  if (program_.output_shape() == product) {
    product_ = out_->data<T>();
  } else if (product.num_elements() > 0) {
    temp_ = std::make_unique<Scratch>(context(ctx), sizeof(T) * static_cast<size_t>(product.num_elements()));
    product_ = temp_->as<T>();
  }
}

template <typename T>
void CudaEpilogue<T>::finish(KernelContext& ctx) {
  std::vector<const T*> inputs{product_};
  inputs.insert(inputs.end(), args_.begin(), args_.end());
  run_fused_program<T>(ctx, program_, inputs, out_->data<T>());
}

template void run_fused_program<float>(KernelContext&, const kernels::FusedProgramCode&,
                                       const std::vector<const float*>&, float*);
template void run_fused_program<double>(KernelContext&, const kernels::FusedProgramCode&,
                                        const std::vector<const double*>&, double*);
template class CudaEpilogue<float>;
template class CudaEpilogue<double>;

SPIRE_STATIC_INIT(cuda_fused_program) {
  FusableSink f32{DType::F32};
  kernels::visit_fused_instructions<float>(f32);
  FusableSink f64{DType::F64};
  kernels::visit_fused_instructions<double>(f64);
  auto& r = KernelRegistry::global();
  r.add("FusedElementwise", DeviceType::CUDA, DType::F32, fused_elementwise_kernel<float>);
  r.add("FusedElementwise", DeviceType::CUDA, DType::F64, fused_elementwise_kernel<double>);
}

}  // namespace spire::cuda
