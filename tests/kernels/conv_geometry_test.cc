// The host-side check the CUDA convolution kernels make before describing a
// problem to cuDNN: sizes beyond cuDNN's 32-bit descriptors are errors, not
// truncations (runs everywhere; the CUDA kernels call the same function).
#include "kernels/conv_geometry.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

kernels::ConvGeometry geometry(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t o) {
  kernels::ConvGeometry g{};
  g.n = n;
  g.h = h;
  g.w = w;
  g.c = c;
  g.kh = g.kw = k;
  g.o = o;
  g.oh = h;
  g.ow = w;
  g.sh = g.sw = g.dh = g.dw = 1;
  g.pt = g.pl = k / 2;
  return g;
}

TEST(CudnnLimits, SizesBeyondInt32AreNamedNotTruncated) {
  EXPECT_EQ(kernels::cudnn_limit_violation(geometry(128, 28, 28, 32, 5, 64), 1, 1), "");
  // Each dimension fits, but the input has 2^31 elements.
  std::string why = kernels::cudnn_limit_violation(geometry(2048, 1024, 1024, 1, 3, 1), 0, 0);
  EXPECT_NE(why.find("the input has 2147483648 elements"), std::string::npos) << why;
  // The appended SAME-padding rows count too.
  why = kernels::cudnn_limit_violation(geometry(1, 32767, 65536, 1, 3, 1), 1, 0);
  EXPECT_NE(why.find("input has"), std::string::npos) << why;
  EXPECT_EQ(kernels::cudnn_limit_violation(geometry(1, 32767, 65536, 1, 3, 1), 0, 0), "");
  // A single dimension beyond int.
  why = kernels::cudnn_limit_violation(geometry(int64_t{1} << 31, 1, 1, 1, 1, 1), 0, 0);
  EXPECT_NE(why.find("the batch 2147483648 does not fit"), std::string::npos) << why;
  why = kernels::cudnn_limit_violation(geometry(1, 4, 4, 1 << 20, 3, 1 << 12), 0, 0);
  EXPECT_NE(why.find("the filter has"), std::string::npos) << why;
}

}  // namespace
}  // namespace spire::testing
