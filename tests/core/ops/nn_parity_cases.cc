// CPU/GPU parity cases for the CUDA matmul, convolution and pooling kernels
// (kernels/cuda/matmul_kernels.cu, conv_kernels.cu, pool_kernels.cu), beyond the small
// gradient cases of nn_ops_cases.cc (which also run as parity cases):
//  - MatMul: every transpose combination for 1x1x1, 7x13x5, 129x257x65 (long f32 sums) and
//    empty m, n and K (a sum over nothing is 0);
//  - MatMul and BatchMatMul in f16 and bf16 (cuBLAS with f32 compute), every transpose;
//  - BatchMatMul: equal batches, a shared rank-2 operand on either side, batch dims that
//    broadcast on both sides (the pointer-array path), K = 0, an empty batch, and more than
//    65535 entries (issued in chunks);
//  - Conv2D and its two backprop ops: MNIST-like layers, stride 2, SAME padding that is
//    asymmetric (odd pad_total: the extended-input path), 1x1 and 5x5 filters, dilation,
//    windows larger than the input, batch 1, one channel, odd channel counts, and empty
//    batch / channel / filter dims;
//  - MaxPool, MaxPoolGrad, MaxPoolGradGrad, AvgPool, AvgPoolGrad with SAME/VALID, strides 1,
//    2, 3, asymmetric padding, and inputs with ties (integers cast to floats) so that the
//    first-maximum rule of the max-pool gradients is compared too.
// f32 tolerances allow for long sums in a different order (TF32 stays off by default).
// The GPU runs only where a GPU exists; ParityCases.RunOnTheCpuTwiceWithTheSameResult
// (tests/kernels/cuda/parity_test.cc) runs every case on the CPU in every build, so a broken
// case shows up in CI too.
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "autograd/gradients.h"
#include "core/ops/nn_ops.h"
#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;
using Ints = std::vector<int64_t>;

const std::vector<DType> kFloats = {DType::F32, DType::F64};

// The cases of this file are parity_cases()[kFirstCase, kEndCase) (one translation unit
// initializes in order).
constexpr double kSumTolF32 = 1e-4;  // sums over up to a few thousand terms
constexpr double kSumTolF64 = 1e-10;

std::string ints_name(const Ints& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + std::to_string(v[i]);
  return s;
}

void add(const std::string& op, const std::string& name, std::vector<ParityInput> inputs,
         std::function<Outs(const In&)> build, double tol_f32 = kSumTolF32,
         double tol_f64 = kSumTolF64) {
  register_parity_case(
      ParityCase{op, name, std::move(inputs), std::move(build), kFloats, tol_f32, tol_f64});
}

// ---- MatMul ---------------------------------------------------------------------------------

const bool kMatMulCases [[maybe_unused]] = [] {
  const Ints sizes[] = {{1, 1, 1}, {7, 13, 5}, {129, 257, 65}, {5, 0, 3}, {0, 4, 3}, {3, 4, 0},
                        {1, 300, 1}, {64, 1, 33}};
  for (const Ints& s : sizes) {
    const int64_t m = s[0], k = s[1], n = s[2];
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      const Shape a = ta ? Shape{k, m} : Shape{m, k};
      const Shape b = tb ? Shape{n, k} : Shape{k, n};
      const std::string name = "m k n = " + ints_name(s) + (ta ? " transpose_a" : "") +
                               (tb ? " transpose_b" : "");
      add("MatMul", name, {{a}, {b}}, [ta, tb](const In& x) -> Outs {
        return {ops::matmul(x[0], x[1], ta, tb)};
      });
    }
  }
  return true;
}();

// ---- BatchMatMul ------------------------------------------------------------------------------

struct BmmCase {
  Ints batch_a, batch_b;
  int64_t m, k, n;
  bool all_adj;  // every adj_a/adj_b combination, else only the plain one
};

Shape matrix_shape(const Ints& batch, int64_t rows, int64_t cols) {
  Ints d = batch;
  d.push_back(rows);
  d.push_back(cols);
  return Shape(d);
}

const bool kBatchMatMulCases [[maybe_unused]] = [] {
  const BmmCase cases[] = {
      {{4}, {4}, 7, 13, 5, true},           // strided batched
      {{6}, {6}, 33, 65, 17, true},         // bigger matrices
      {{3}, {}, 5, 6, 7, true},             // rank-2 b shared: tall GEMM (or stride 0)
      {{}, {3}, 5, 6, 7, true},             // rank-2 a shared: stride 0
      {{1}, {5}, 3, 3, 3, true},            // size-1 batch shared
      {{2, 1}, {3}, 3, 4, 2, true},         // both broadcast: pointer arrays
      {{2, 1, 3}, {1, 4, 1}, 2, 3, 2, true},
      {{2, 3}, {3}, 4, 5, 6, true},         // b repeats along the outer dim
      {{3}, {3}, 4, 0, 5, true},            // K = 0
      {{0}, {0}, 3, 4, 5, false},           // empty batch
      {{2}, {2}, 0, 4, 5, false},           // empty rows
      {{70000}, {70000}, 2, 3, 2, false},   // more than 65535 entries (strided, chunked)
      {{70001, 1}, {2}, 2, 3, 2, false},    // ... through the pointer arrays
  };
  for (const BmmCase& c : cases) {
    for (int t = 0; t < (c.all_adj ? 4 : 1); ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      const Shape a = ta ? matrix_shape(c.batch_a, c.k, c.m) : matrix_shape(c.batch_a, c.m, c.k);
      const Shape b = tb ? matrix_shape(c.batch_b, c.n, c.k) : matrix_shape(c.batch_b, c.k, c.n);
      const std::string name = a.to_string() + " @ " + b.to_string() + (ta ? " adj_a" : "") +
                               (tb ? " adj_b" : "");
      add("BatchMatMul", name, {{a}, {b}}, [ta, tb](const In& x) -> Outs {
        return {ops::batch_matmul(x[0], x[1], ta, tb)};
      });
    }
  }
  return true;
}();

// ---- MatMul and BatchMatMul in f16 / bf16 -----------------------------------------------------
// f32 inputs cast to the 16-bit dtype, multiplied there (cuBLAS: 16-bit operands, f32
// compute on the tensor cores; CPU: f32 GEMM of the widened operands), the product cast back
// to f32. Both accumulate in f32 and round once, so they differ by at most one rounding of
// the 16-bit dtype (a sum in another order can cross a rounding boundary): tol = epsilon.

const bool kHalfMatMulCases [[maybe_unused]] = [] {
  struct HalfCase {
    Shape a, b;
    bool bmm;
  };
  const HalfCase shapes[] = {
      {{7, 13}, {13, 5}, false},       {{129, 257}, {257, 65}, false},
      {{4, 7, 13}, {4, 13, 5}, true},  {{2, 1, 9, 33}, {3, 33, 17}, true},
      {{3, 5, 6}, {6, 7}, true},
  };
  for (DType dt : {DType::F16, DType::BF16}) {
    const double eps = dt == DType::F16 ? 0x1p-10 : 0x1p-7;
    for (const HalfCase& c : shapes) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
        auto flip = [](Shape s, bool on) {
          if (!on) return s;
          std::vector<int64_t> d = s.dims();
          std::swap(d[d.size() - 1], d[d.size() - 2]);
          return Shape(d);
        };
        const Shape a = flip(c.a, ta), b = flip(c.b, tb);
        const std::string name = std::string(dtype_name(dt)) + " " + a.to_string() + " @ " +
                                 b.to_string() + (ta ? " transpose_a" : "") +
                                 (tb ? " transpose_b" : "");
        register_parity_case(ParityCase{
            c.bmm ? "BatchMatMul" : "MatMul", name, {{a}, {b}},
            [dt, ta, tb, bmm = c.bmm](const In& x) -> Outs {
              Output ha = ops::cast(x[0], dt), hb = ops::cast(x[1], dt);
              Output p = bmm ? ops::batch_matmul(ha, hb, ta, tb) : ops::matmul(ha, hb, ta, tb);
              return {ops::cast(p, DType::F32)};
            },
            {DType::F32}, eps, 0.0});
        if (c.bmm) continue;
        // The same product as one mixed-precision MatMul (f32 in and out, compute_dtype), with
        // the gradients of <w, product> (mixed-precision MatMuls too).
        register_parity_case(ParityCase{
            "MatMul", name + " (compute_dtype, with gradients)", {{a}, {b}},
            [dt, ta, tb](const In& x) -> Outs {
              Output p = ops::matmul(x[0], x[1], ta, tb, dt);
              Tensor wt(DType::F32, p.shape());
              for (int64_t i = 0; i < wt.num_elements(); ++i)
                wt.data<float>()[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
              Outs r = {p};
              for (const Output& g : gradients({p}, {x[0], x[1]}, {ops::constant(wt)})) r.push_back(g);
              return r;
            },
            {DType::F32}, eps, 0.0});
      }
    }
  }
  return true;
}();

// ---- Conv2D and its backprop ops ------------------------------------------------------------

struct ConvCase {
  std::string name;
  Shape x, f;
  Ints strides;
  std::string padding;
  Ints dilations;
};

// Output shape of conv2d(x, f) (the dy shape of the backprop ops).
Shape conv_out(const ConvCase& c) {
  ops::WindowDim hd, wd;
  std::string err = ops::window_dim(c.x[1], c.f[0], c.strides[0], c.dilations[0], c.padding, &hd);
  if (err.empty())
    err = ops::window_dim(c.x[2], c.f[1], c.strides[1], c.dilations[1], c.padding, &wd);
  if (!err.empty()) throw_error("bad conv parity case ", c.name, ": ", err);
  return Shape{c.x[0], hd.out, wd.out, c.f[3]};
}

const bool kConvCases [[maybe_unused]] = [] {
  const ConvCase cases[] = {
      {"MNIST conv0 5x5", {8, 28, 28, 1}, {5, 5, 1, 32}, {1, 1}, "SAME", {1, 1}},
      {"MNIST conv1 5x5", {4, 14, 14, 32}, {5, 5, 32, 64}, {1, 1}, "SAME", {1, 1}},
      {"5x5 VALID", {2, 11, 9, 3}, {5, 5, 3, 4}, {1, 1}, "VALID", {1, 1}},
      {"stride 2 SAME asymmetric rows", {2, 6, 7, 3}, {3, 3, 3, 4}, {2, 2}, "SAME", {1, 1}},
      {"4x4 SAME asymmetric both", {1, 8, 8, 2}, {4, 4, 2, 3}, {1, 1}, "SAME", {1, 1}},
      {"2x2 SAME asymmetric, pad only after", {1, 10, 9, 3}, {2, 2, 3, 2}, {1, 1}, "SAME", {1, 1}},
      {"3x2 strides 2x3 SAME", {3, 9, 10, 5}, {3, 2, 5, 6}, {2, 3}, "SAME", {1, 1}},
      {"1x1", {3, 5, 7, 4}, {1, 1, 4, 6}, {1, 1}, "VALID", {1, 1}},
      {"1x1 stride 2 SAME", {2, 7, 6, 3}, {1, 1, 3, 5}, {2, 2}, "SAME", {1, 1}},
      {"batch 1, one channel in and out", {1, 7, 7, 1}, {3, 3, 1, 1}, {2, 2}, "SAME", {1, 1}},
      {"window larger than the input", {1, 3, 3, 2}, {5, 5, 2, 2}, {1, 1}, "SAME", {1, 1}},
      {"6x6 window on 3x3, odd pad", {2, 3, 3, 2}, {6, 6, 2, 3}, {1, 1}, "SAME", {1, 1}},
      {"stride 3 > window VALID", {2, 9, 9, 3}, {2, 2, 3, 4}, {3, 3}, "VALID", {1, 1}},
      {"dilation 2 SAME", {1, 9, 8, 2}, {3, 3, 2, 3}, {1, 1}, "SAME", {2, 2}},
      {"dilation 2 stride 2 SAME asymmetric", {2, 8, 8, 2}, {3, 3, 2, 3}, {2, 2}, "SAME", {2, 2}},
      {"dilation 2x1 VALID", {1, 9, 7, 3}, {2, 3, 3, 2}, {1, 2}, "VALID", {2, 1}},
      {"17 -> 13 channels", {2, 5, 5, 17}, {3, 3, 17, 13}, {1, 1}, "SAME", {1, 1}},
      {"empty batch", {0, 5, 5, 2}, {3, 3, 2, 3}, {1, 1}, "SAME", {1, 1}},
      {"no input channels", {1, 4, 4, 0}, {3, 3, 0, 2}, {1, 1}, "SAME", {1, 1}},
      {"no output channels", {2, 4, 4, 3}, {3, 3, 3, 0}, {1, 1}, "VALID", {1, 1}},
  };
  for (const ConvCase& c : cases) {
    const Shape dy = conv_out(c);
    const Ints st = c.strides, dil = c.dilations;
    const std::string pad = c.padding;
    add("Conv2D", c.name, {{c.x}, {c.f}}, [st, pad, dil](const In& x) -> Outs {
      return {ops::conv2d(x[0], x[1], st, pad, dil)};
    });
    // input_like / filter_like: random tensors whose values the ops ignore.
    add("Conv2DBackpropInput", c.name, {{c.x}, {c.f}, {dy}}, [st, pad, dil](const In& x) -> Outs {
      return {ops::conv2d_backprop_input(x[0], x[1], x[2], st, pad, dil)};
    });
    add("Conv2DBackpropFilter", c.name, {{c.x}, {c.f}, {dy}}, [st, pad, dil](const In& x) -> Outs {
      return {ops::conv2d_backprop_filter(x[0], x[1], x[2], st, pad, dil)};
    });
  }
  // The forward and both gradients of one layer in one graph (as in training).
  add("Conv2D", "MNIST conv1 with its gradients", {{{4, 14, 14, 32}}, {{5, 5, 32, 64}}},
      [](const In& x) -> Outs {
        Output y = ops::conv2d(x[0], x[1], {1, 1}, "SAME");
        Outs g = gradients({ops::sum(ops::square(y))}, {x[0], x[1]});
        return {y, g[0], g[1]};
      },
      1e-3, 1e-9);
  return true;
}();

// ---- pooling --------------------------------------------------------------------------------

struct PoolCase {
  Shape x;
  Ints ksize, strides;
  std::string padding;
};

Shape pool_out(const PoolCase& c) {
  ops::WindowDim hd, wd;
  std::string err = ops::window_dim(c.x[1], c.ksize[0], c.strides[0], 1, c.padding, &hd);
  if (err.empty()) err = ops::window_dim(c.x[2], c.ksize[1], c.strides[1], 1, c.padding, &wd);
  if (!err.empty()) throw_error("bad pool parity case: ", err);
  return Shape{c.x[0], hd.out, wd.out, c.x[3]};
}

const bool kPoolCases [[maybe_unused]] = [] {
  const PoolCase cases[] = {
      {{2, 28, 28, 8}, {2, 2}, {2, 2}, "VALID"},  // MNIST-like, exact tiling
      {{2, 28, 28, 8}, {2, 2}, {2, 2}, "SAME"},
      {{1, 5, 5, 2}, {3, 3}, {2, 2}, "SAME"},
      {{2, 6, 7, 3}, {3, 2}, {2, 3}, "SAME"},  // asymmetric padding
      {{1, 7, 6, 2}, {3, 3}, {1, 1}, "SAME"},  // stride 1, overlapping
      {{1, 3, 3, 1}, {5, 5}, {1, 1}, "SAME"},  // window larger than the input
      {{1, 5, 5, 1}, {2, 2}, {3, 3}, "SAME"},  // stride > window
      {{3, 4, 5, 3}, {2, 2}, {1, 1}, "VALID"},
      {{1, 9, 11, 5}, {3, 3}, {2, 2}, "VALID"},
      {{2, 13, 13, 33}, {3, 3}, {2, 2}, "SAME"},
      {{0, 4, 4, 2}, {2, 2}, {2, 2}, "VALID"},  // empty batch
  };
  for (const PoolCase& c : cases) {
    const Shape y = pool_out(c);
    const Ints k = c.ksize, s = c.strides;
    const std::string pad = c.padding;
    const std::string name = c.x.to_string() + " ksize " + ints_name(k) + " strides " +
                             ints_name(s) + " " + pad;
    // Pooling only selects or averages: tight tolerances.
    const double tf = 1e-6, td = 1e-13;
    add("MaxPool", name, {{c.x}}, [k, s, pad](const In& x) -> Outs {
      return {ops::max_pool(x[0], k, s, pad)};
    }, tf, td);
    add("MaxPoolGrad", name, {{c.x}, {y}}, [k, s, pad](const In& x) -> Outs {
      return {ops::max_pool_grad(x[0], ops::max_pool(x[0], k, s, pad), x[1], k, s, pad)};
    }, tf, td);
    add("MaxPoolGradGrad", name, {{c.x}, {c.x}}, [k, s, pad](const In& x) -> Outs {
      return {ops::max_pool_grad_grad(x[0], ops::max_pool(x[0], k, s, pad), x[1], k, s, pad)};
    }, tf, td);
    add("AvgPool", name, {{c.x}}, [k, s, pad](const In& x) -> Outs {
      return {ops::avg_pool(x[0], k, s, pad)};
    }, tf, td);
    add("AvgPoolGrad", name, {{c.x}, {y}}, [k, s, pad](const In& x) -> Outs {
      return {ops::avg_pool_grad(x[0], x[1], k, s, pad)};
    }, tf, td);
    // Ties: x holds integers in [-2, 2], so most windows have several maxima and the
    // gradients must pick the first one, as on the CPU.
    add("MaxPoolGrad", name + " ties", {{c.x, DType::I32}, {y}}, [k, s, pad](const In& x) -> Outs {
      Output xf = ops::cast(x[0], x[1].dtype());
      return {ops::max_pool_grad(xf, ops::max_pool(xf, k, s, pad), x[1], k, s, pad)};
    }, tf, td);
    add("MaxPoolGradGrad", name + " ties", {{c.x, DType::I32}, {c.x}},
        [k, s, pad](const In& x) -> Outs {
          Output xf = ops::cast(x[0], x[1].dtype());
          return {ops::max_pool_grad_grad(xf, ops::max_pool(xf, k, s, pad), x[1], k, s, pad)};
        }, tf, td);
  }
  return true;
}();

}  // namespace
}  // namespace spire::testing
