// Attribute and run-time shape resolution of the fused attention ops, shared
// by the CPU and CUDA kernels (see kernels/attention.h).
#include "kernels/attention.h"

#include <cmath>
#include <vector>

namespace spire::kernels {

Shape attention_out_shape(const Shape& q, int64_t dv) {
  std::vector<int64_t> dims = q.dims();
  dims.back() = dv;
  return Shape(std::move(dims));
}

Shape attention_lse_shape(const Shape& q) {
  std::vector<int64_t> dims(q.dims().begin(), q.dims().end() - 1);
  return Shape(std::move(dims));
}

namespace {

// Fails unless `t` has shape `want`.
void expect_shape(KernelContext& ctx, const char* what, const Tensor& t, const Shape& want) {
  if (t.shape() != want)
    ctx.fail(what, " has shape ", t.shape().to_string(), ", expected ", want.to_string());
}

// Sets a's causal, scale (0 means 1/sqrt(D); a.d must be set) and block from the node's
// attrs.
void read_attention_attrs(KernelContext& ctx, AttentionDims& a) {
  a.causal = ctx.attr<bool>("causal");
  const double scale = ctx.attr<double>("scale");
  a.scale = scale != 0 ? scale : (a.d > 0 ? 1.0 / std::sqrt(static_cast<double>(a.d)) : 1.0);
  a.block = ctx.attr<int64_t>("block_size");
  if (a.block < 1) ctx.fail("block_size must be positive, got ", a.block);
}

}  // namespace

AttentionDims attention_dims(KernelContext& ctx) {
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  const int r = q.rank();
  AttentionDims a;
  a.seq_first = ctx.attr<bool>("seq_first");
  const int inner = a.seq_first ? 3 : 2;  // [T, D] or [T, H, D] after the leading dims
  auto shapes = [&] {
    return str_cat("q ", q.shape().to_string(), ", k ", k.shape().to_string(), ", v ",
                   v.shape().to_string());
  };
  if (r < inner || k.rank() != r || v.rank() != r)
    ctx.fail("q, k and v must have the same rank >= ", inner,
             a.seq_first ? " ([..., T, H, D] with seq_first)" : " ([..., T, D])", "; got ",
             shapes());
  a.batch = 1;
  for (int i = 0; i < r - inner; ++i) {
    if (k.dim(i) != q.dim(i) || v.dim(i) != q.dim(i))
      ctx.fail("q, k and v must have the same leading (batch, head) dims; got ", shapes());
    a.batch *= q.dim(i);
  }
  if (a.seq_first) {
    a.heads = a.qkv_heads = q.dim(r - 2);
    if (k.dim(r - 2) != a.heads || v.dim(r - 2) != a.heads)
      ctx.fail("q, k and v must have the same number of heads (dim -2 with seq_first); got ",
               shapes());
    a.batch *= a.heads;
  }
  a.tq = q.dim(r - inner);
  a.d = q.dim(r - 1);
  a.tk = k.dim(r - inner);
  a.dv = v.dim(r - 1);
  if (k.dim(r - 1) != a.d) ctx.fail("q and k must have the same last dim D; got ", shapes());
  if (v.dim(r - inner) != a.tk)
    ctx.fail("k and v must have the same number of keys; got ", shapes());
  read_attention_attrs(ctx, a);
  if (ctx.attr<double>("dropout_p") != 0)
    ctx.fail("dropout_p > 0 is not implemented (dropout_p = ", ctx.attr<double>("dropout_p"), ")");
  if (ctx.num_inputs() == 7) {  // the gradient op: out, lse, dout, dlse
    const Shape out = attention_out_shape(q.shape(), a.dv), lse = attention_lse_shape(q.shape());
    expect_shape(ctx, "out", ctx.input(3), out);
    expect_shape(ctx, "lse", ctx.input(4), lse);
    expect_shape(ctx, "dout", ctx.input(5), out);
    expect_shape(ctx, "dlse", ctx.input(6), lse);
  }
  return a;
}

Shape attention_packed_out_shape(const Shape& qkv) {
  std::vector<int64_t> dims = qkv.dims();
  if (dims.size() >= 4) dims.erase(dims.end() - 3);  // drop the 3
  return Shape(std::move(dims));
}

AttentionDims attention_packed_dims(KernelContext& ctx) {
  const Tensor& qkv = ctx.input(0);
  const int r = qkv.rank();
  if (r < 4 || qkv.dim(r - 3) != 3)
    ctx.fail("qkv must be [..., T, 3, H, D]; got ", qkv.shape().to_string());
  AttentionDims a;
  a.seq_first = true;
  a.heads = qkv.dim(r - 2);
  a.qkv_heads = 3 * a.heads;
  a.batch = a.heads;
  for (int i = 0; i < r - 4; ++i) a.batch *= qkv.dim(i);
  a.tq = a.tk = qkv.dim(r - 4);
  a.d = a.dv = qkv.dim(r - 1);
  read_attention_attrs(ctx, a);
  if (ctx.num_inputs() == 5) {  // the gradient op: out, lse, dout, dlse
    const Shape out = attention_packed_out_shape(qkv.shape()), lse = attention_lse_shape(out);
    expect_shape(ctx, "out", ctx.input(1), out);
    expect_shape(ctx, "lse", ctx.input(2), lse);
    expect_shape(ctx, "dout", ctx.input(3), out);
    expect_shape(ctx, "dlse", ctx.input(4), lse);
  }
  return a;
}

}  // namespace spire::kernels
