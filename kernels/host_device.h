// SPIRE_HD: marks a function for both host and device (__host__ __device__ under nvcc,
// nothing otherwise), for the math shared by the CPU and CUDA kernels (kernels/functors.h,
// kernels/vector_math.h and the index helpers).
#pragma once

#if defined(__CUDACC__)
#define SPIRE_HD __host__ __device__
#else
#define SPIRE_HD
#endif
