// Shape checks and batch broadcasting of MatMul and BatchMatMul (see matmul_shapes.h).
#include "kernels/matmul_shapes.h"

namespace spire::kernels {

MatMulDims matmul_dims(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.rank() != 2 || b.rank() != 2) ctx.fail("inputs must be matrices");
  MatMulDims d;
  d.ta = ctx.attr<bool>("transpose_a"), d.tb = ctx.attr<bool>("transpose_b");
  d.m = d.ta ? a.dim(1) : a.dim(0), d.k = d.ta ? a.dim(0) : a.dim(1);
  const int64_t kb = d.tb ? b.dim(1) : b.dim(0);
  d.n = d.tb ? b.dim(0) : b.dim(1);
  if (d.k != kb)
    ctx.fail("inner dimensions do not match: ", a.shape().to_string(), " and ",
             b.shape().to_string());
  return d;
}

Shape BatchMatMulShapes::out_shape() const {
  std::vector<int64_t> out_dims = batch.dims();
  out_dims.push_back(d.m);
  out_dims.push_back(d.n);
  return Shape(out_dims);
}

BatchMatMulShapes batch_matmul_shapes(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.rank() < 2 || b.rank() < 2) ctx.fail("inputs must have rank >= 2");
  BatchMatMulShapes s;
  MatMulDims& d = s.d;
  d.ta = ctx.attr<bool>("adj_a"), d.tb = ctx.attr<bool>("adj_b");
  const int ra = a.rank(), rb = b.rank();
  s.ar = a.dim(ra - 2), s.ac = a.dim(ra - 1), s.br = b.dim(rb - 2), s.bc = b.dim(rb - 1);
  d.m = d.ta ? s.ac : s.ar, d.k = d.ta ? s.ar : s.ac, d.n = d.tb ? s.br : s.bc;
  const int64_t kb = d.tb ? s.bc : s.br;
  if (d.k != kb)
    ctx.fail("inner dimensions do not match: ", a.shape().to_string(), " and ",
             b.shape().to_string());
  s.batch_a.assign(a.shape().dims().begin(), a.shape().dims().end() - 2);
  s.batch_b.assign(b.shape().dims().begin(), b.shape().dims().end() - 2);
  if (!broadcast_shapes(Shape(s.batch_a), Shape(s.batch_b), &s.batch))
    ctx.fail("batch dimensions cannot be broadcast together");
  s.count_a = Shape(s.batch_a).num_elements(), s.count_b = Shape(s.batch_b).num_elements();
  s.total = s.batch.num_elements();
  return s;
}

std::vector<int64_t> batch_strides(const std::vector<int64_t>& s, const std::vector<int64_t>& out) {
  const size_t r = out.size(), pad = r - s.size();
  std::vector<int64_t> stride(r, 0);
  int64_t acc = 1;
  for (size_t i = r; i-- > pad;) {
    stride[i] = s[i - pad] == 1 ? 0 : acc;
    acc *= s[i - pad];
  }
  return stride;
}

}  // namespace spire::kernels
