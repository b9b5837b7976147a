// Error checking for the CUDA runtime, cuBLAS and cuDNN: SPIRE_CUDA_CHECK,
// SPIRE_CUBLAS_CHECK and SPIRE_CUDNN_CHECK turn a failing status into
// spire::Error with the file, line, call and the library's own message.
// SPIRE_CUDA_LAUNCH_CHECK() checks the last kernel launch.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/error.h"

namespace spire::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file,
                                          int line) {
  throw_error("CUDA error at ", file, ":", line, ": ", call, " failed: ", cudaGetErrorName(err),
              " (", cudaGetErrorString(err), ")");
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t st, const char* call, const char* file,
                                            int line) {
  throw_error("cuBLAS error at ", file, ":", line, ": ", call, " failed: ",
              cublasGetStatusName(st), " (", cublasGetStatusString(st), ")");
}

[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t st, const char* call, const char* file,
                                           int line) {
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  throw_error("cuDNN error at ", file, ":", line, ": ", call, " failed: ",
              cudnnGetErrorString(st), detail[0] ? " (" : "", detail, detail[0] ? ")" : "");
}

}  // namespace spire::cuda

#define SPIRE_CUDA_CHECK(call)                                                     \
  do {                                                                             \
    cudaError_t spire_cuda_err_ = (call);                                          \
    if (spire_cuda_err_ != cudaSuccess)                                            \
      ::spire::cuda::throw_cuda_error(spire_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define SPIRE_CUBLAS_CHECK(call)                                                 \
  do {                                                                           \
    cublasStatus_t spire_cublas_st_ = (call);                                    \
    if (spire_cublas_st_ != CUBLAS_STATUS_SUCCESS)                               \
      ::spire::cuda::throw_cublas_error(spire_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

#define SPIRE_CUDNN_CHECK(call)                                                  \
  do {                                                                           \
    cudnnStatus_t spire_cudnn_st_ = (call);                                      \
    if (spire_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                 \
      ::spire::cuda::throw_cudnn_error(spire_cudnn_st_, #call, __FILE__, __LINE__); \
  } while (0)

/// Checks the launch of the kernel just queued (configuration errors).
#define SPIRE_CUDA_LAUNCH_CHECK() SPIRE_CUDA_CHECK(cudaGetLastError())
