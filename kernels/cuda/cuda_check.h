// Error checking for the CUDA runtime: SPIRE_CUDA_CHECK(call) turns a
// failing cudaError_t into spire::Error with the file, line, call and
// CUDA's own message. (cuBLAS/cuDNN wrappers join it in the CUDA backend.)
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

namespace spire::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file,
                                          int line) {
  throw_error("CUDA error at ", file, ":", line, ": ", call, " failed: ", cudaGetErrorName(err),
              " (", cudaGetErrorString(err), ")");
}

}  // namespace spire::cuda

#define SPIRE_CUDA_CHECK(call)                                                   \
  do {                                                                           \
    cudaError_t spire_cuda_err_ = (call);                                        \
    if (spire_cuda_err_ != cudaSuccess)                                          \
      ::spire::cuda::throw_cuda_error(spire_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)
