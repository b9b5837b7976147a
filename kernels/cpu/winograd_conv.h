// Winograd F(2x2, 3x3) convolution (Lavin and Gray, "Fast Algorithms for Convolutional
// Neural Networks", 2015) for the CPU kernels of Conv2D and its input gradient
// (kernels/cpu/conv_kernels.cc): stride-1, undilated 3x3 convolutions of NHWC input, the
// problem of kernels/cpu/direct_conv.h (any padding). Each 2x2 block of output is
//   Y = A^T [ (G g G^T) . (B^T d B) ] A
// for the block's 4x4 input patch d: 16 multiplies per channel pair instead of 36, so the
// multiply-adds become 16 GEMMs (one per transformed position, [tiles x C] x [C x O], on
// kernels/cpu/gemm.h) of 2.25 times less work, plus transforms that are additions. Tiles are
// processed in fixed blocks (the transformed input and products of a block stay in the
// core's L2 cache), blocks split over the threads, so the result does not depend on the
// thread count. It rounds differently from the direct and im2col algorithms (the transforms
// add and halve before the products), within a few units in the last place times the
// channel count, so it is only chosen by measuring (SessionOptions::measure_conv_algorithms,
// kernels/cpu/conv_algorithm.h), never by the fixed rule.
#pragma once

#include "kernels/cpu/direct_conv.h"

namespace spire {
class ThreadPool;
}

namespace spire::cpu {

/// Whether Winograd F(2x2, 3x3) takes this stride-1 problem: a 3x3 filter and at least 8
/// input and 8 output channels (fewer leave its 16 GEMMs too thin to pay for the transforms).
bool winograd_applies(const DirectConvShape& s);

/// y [n, oh, ow, o] = the convolution of x with w [3, 3, c, o] (overwritten). Requires
/// winograd_applies(s). `pool` may be null.
void winograd_conv2d(const DirectConvShape& s, const float* x, const float* w, float* y, ThreadPool* pool);
void winograd_conv2d(const DirectConvShape& s, const double* x, const double* w, double* y, ThreadPool* pool);

}  // namespace spire::cpu
