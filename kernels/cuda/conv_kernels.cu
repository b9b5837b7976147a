// CUDA kernels for Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter (ops registered in
// core/ops/nn_ops.cc; NHWC input, HWIO filter, strides, SAME/VALID padding, dilations), f32
// and f64 like the CPU kernels (kernels/cpu/conv_kernels.cc), through cuDNN's convolution
// API (cudnnConvolutionForward / BackwardData / BackwardFilter) on the device context's
// handle, which is bound to the device's stream. FusedConv2D (made by the fusion pass,
// core/fusion.h) runs the forward convolution into its output, then its epilogue program
// over it (kernels/cuda/fused_program.h).
//
// Layouts. cuDNN takes NHWC activations with a KRSC filter ([O, KH, KW, C], "NHWC" filter
// format), or NCHW activations with a KCRS filter ([O, C, KH, KW]). Our filters are HWIO, so
// they are always permuted (a small gather kernel, copy4_kernel below) into scratch memory,
// and the filter gradient comes back the same way. f32 runs in NHWC (no activation copies;
// tensor-core kernels where TF32 is allowed); if cuDNN offers no algorithm for an NHWC
// problem, the NCHW path below is used instead. f64 always runs in NCHW (cuDNN's double
// kernels are NCHW kernels; frameworks do not run double convolutions in NHWC), with the
// activations permuted by the same gather kernel.
//
// Padding. TF's SAME padding puts pad_total / 2 before and the rest after, so the two sides
// differ by one when pad_total is odd; cuDNN only pads symmetrically. As TensorFlow does, the
// input is then extended by one zero row at the bottom (and/or one zero column at the
// right) into scratch memory, and cuDNN pads both sides by pad_before: with hp = h + extra,
//   out = (hp + 2 * pad_before - eff) / stride + 1 = ((oh - 1) * stride) / stride + 1 = oh
// and window oy starts at oy * stride - pad_before, exactly the CPU's windows. The input
// gradient of such a problem is computed for the extended input and cropped; the filter
// gradient uses the extended input. (The extension happens in the same copy as the NCHW
// permutation on the f64 path.) The output size cuDNN derives from its descriptors is
// checked against ours once per problem.
//
// Algorithms. Once per (direction, dtype, shapes, strides, padding, dilations, TF32) the
// choice is made with cudnnGet*Algorithm_v7 (heuristics, no benchmarking), preferring
// deterministic algorithms, then taking the first whose workspace (asked from cuDNN for the
// math type it will run with) fits in 256 MiB; the choice is cached in the device context
// (cc.cache<ConvAlgoCache>() under cc.cache_mutex()). The workspace is scratch memory from
// the caching allocator.
//
// Precision. f32 without TF32 (the default) runs with CUDNN_FMA_MATH, which forbids tensor
// core (TF32) math; algorithms the heuristics mark as tensor-op-only are skipped. With
// ctx.allow_tf32() the request is CUDNN_TENSOR_OP_MATH and the chosen algorithm runs with
// the math type cuDNN reports for it. Down-converting algorithms
// (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) are never used. f64 uses CUDNN_DEFAULT_MATH.
//
// Empty outputs return at once; an output that is a sum over nothing (zero input channels,
// an empty batch for the filter gradient, ...) is zero-filled without calling cuDNN.
#include <algorithm>
#include <array>
#include <climits>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "core/fusion.h"
#include "core/kernel_registry.h"
#include "kernels/cuda/fused_program.h"
#include "kernels/conv_geometry.h"
#include "kernels/cuda/launch.h"

namespace spire::cuda {
namespace {

constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;

// ---- layouts and the gather copy -------------------------------------------------------
//
// A 4-D tensor is described by its logical dims and the order of its logical axes in memory
// (outermost first). Activations have logical axes (N, C, H, W) = (0, 1, 2, 3), filters
// (O, I, H, W) = (0, 1, 2, 3); cuDNN's filter layout for each activation layout lists the
// axes in the same order (NHWC <-> KRSC, NCHW <-> KCRS).

using Dims4 = std::array<int64_t, 4>;
using Order4 = std::array<int, 4>;

constexpr Order4 kNHWC = {0, 2, 3, 1};  // activations NHWC; filters O,KH,KW,I (KRSC)
constexpr Order4 kNCHW = {0, 1, 2, 3};  // activations NCHW; filters O,I,KH,KW (KCRS)
constexpr Order4 kHWIO = {2, 3, 1, 0};  // our filters

enum class Layout { kNHWC, kNCHW };

const Order4& order_of(Layout l) { return l == Layout::kNHWC ? kNHWC : kNCHW; }
cudnnTensorFormat_t format_of(Layout l) {
  return l == Layout::kNHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

int64_t count_of(const Dims4& d) { return d[0] * d[1] * d[2] * d[3]; }

// True when two tensors of logical dims `d` in memory orders a and b have the same bytes
// (the orders agree once axes of size 1 are dropped).
bool same_memory(const Dims4& d, const Order4& a, const Order4& b) {
  std::vector<int> ka, kb;
  for (int i = 0; i < 4; ++i) {
    if (d[a[i]] != 1) ka.push_back(a[i]);
    if (d[b[i]] != 1) kb.push_back(b[i]);
  }
  return ka == kb;
}

// What copy4_kernel needs: the destination's dims in its memory order, the source stride
// along each of them, and the source extent along each (coordinates beyond it read as 0).
struct Copy4 {
  int64_t dims[4];
  int64_t strides[4];
  int64_t limits[4];
};

// out[i] = in at the same logical coordinates, or 0 where those lie outside the source
// (zero extension); a destination smaller than the source crops it.
template <typename T>
__global__ void copy4_kernel(Copy4 p, int64_t total, const T* in, T* out) {
  SPIRE_GRID_STRIDE_LOOP(i, total) {
    int64_t rest = i, off = 0;
    bool inside = true;
    for (int d = 3; d >= 0; --d) {
      const int64_t idx = rest % p.dims[d];
      rest /= p.dims[d];
      inside = inside && idx < p.limits[d];
      off += idx * p.strides[d];
    }
    out[i] = inside ? in[off] : T(0);
  }
}

// Copies src (logical dims sd, memory order so) to dst (logical dims dd, memory order dord).
template <typename T>
void copy4(CudaContext& cc, const T* src, const Dims4& sd, const Order4& so, T* dst,
           const Dims4& dd, const Order4& dord) {
  const int64_t total = count_of(dd);
  if (total == 0) return;
  int64_t stride[4];  // source stride per logical axis
  int64_t acc = 1;
  for (int k = 3; k >= 0; --k) {
    stride[so[k]] = acc;
    acc *= sd[so[k]];
  }
  Copy4 p;
  for (int k = 0; k < 4; ++k) {
    p.dims[k] = dd[dord[k]];
    p.strides[k] = stride[dord[k]];
    p.limits[k] = sd[dord[k]];
  }
  copy4_kernel<T><<<blocks_for(cc, total), kThreads, 0, cc.stream()>>>(p, total, src, dst);
  SPIRE_CUDA_LAUNCH_CHECK();
}

// An input tensor in the layout cuDNN is given: the original memory when it already has
// that layout and size, else a converted (permuted, zero-extended) copy in scratch memory.
template <typename T>
class StagedInput {
 public:
  StagedInput(CudaContext& cc, const T* src, const Dims4& sd, const Order4& so, const Dims4& dd,
              const Order4& dord) {
    if (sd == dd && same_memory(sd, so, dord)) {
      ptr_ = src;
      return;
    }
    scratch_ = std::make_unique<Scratch>(cc, static_cast<size_t>(count_of(dd)) * sizeof(T));
    copy4(cc, src, sd, so, scratch_->as<T>(), dd, dord);
    ptr_ = scratch_->as<T>();
  }
  const T* get() const { return ptr_; }

 private:
  std::unique_ptr<Scratch> scratch_;
  const T* ptr_ = nullptr;
};

// An output cuDNN writes in its layout (dims cd, order co): straight into the final tensor
// (dims fd, order fo) when they coincide, else into scratch memory that finish() converts
// (permutes, crops) into the final tensor.
template <typename T>
class StagedOutput {
 public:
  StagedOutput(CudaContext& cc, T* final_ptr, const Dims4& fd, const Order4& fo, const Dims4& cd,
               const Order4& co)
      : cc_(cc), final_(final_ptr), fd_(fd), fo_(fo), cd_(cd), co_(co) {
    if (fd == cd && same_memory(fd, fo, co)) {
      ptr_ = final_ptr;
      return;
    }
    scratch_ = std::make_unique<Scratch>(cc, static_cast<size_t>(count_of(cd)) * sizeof(T));
    ptr_ = scratch_->as<T>();
  }
  T* get() const { return ptr_; }
  void finish() {
    if (scratch_) copy4(cc_, static_cast<const T*>(ptr_), cd_, co_, final_, fd_, fo_);
  }

 private:
  CudaContext& cc_;
  T* final_;
  Dims4 fd_;
  Order4 fo_;
  Dims4 cd_;
  Order4 co_;
  std::unique_ptr<Scratch> scratch_;
  T* ptr_ = nullptr;
};

// ---- geometry ------------------------------------------------------------------------------

// The shared geometry (kernels/conv_geometry.h) plus the zero extension cuDNN needs.
struct ConvGeom : kernels::ConvGeometry {
  int64_t eh, ew;  // zero rows / columns appended (asymmetric SAME padding)
  int64_t hp() const { return h + eh; }
  int64_t wp() const { return w + ew; }
  // Logical (N, C, H, W) dims of the input as given, as cuDNN sees it, and of the output;
  // logical (O, I, H, W) dims of the filter.
  Dims4 x_dims() const { return {n, c, h, w}; }
  Dims4 xp_dims() const { return {n, c, hp(), wp()}; }
  Dims4 y_dims() const { return {n, o, oh, ow}; }
  Dims4 f_dims() const { return {o, c, kh, kw}; }
};

// The rows (or columns) cuDNN's symmetric padding misses at the end: the last window ends at
// (out - 1) * stride - pad_before + eff, which TF's SAME padding reaches with pad_after =
// pad_total - pad_before in {pad_before, pad_before + 1}; VALID needs none.
int64_t extra_after(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t dil,
                    int64_t pad_before) {
  const int64_t end = (out - 1) * stride - pad_before + (k - 1) * dil + 1;  // one past the last
  const int64_t pad_after = std::max<int64_t>(end - in, 0);
  return std::max<int64_t>(pad_after - pad_before, 0);
}

// The shared geometry; cuDNN pads both sides by pt / pl and the input is extended by eh / ew.
// Fails through ctx when a size does not fit cuDNN's 32-bit descriptors.
ConvGeom conv_geom(KernelContext& ctx, const kernels::ConvGeometry& base) {
  ConvGeom g;
  static_cast<kernels::ConvGeometry&>(g) = base;
  g.eh = g.oh > 0 ? extra_after(g.h, g.oh, g.kh, g.sh, g.dh, g.pt) : 0;
  g.ew = g.ow > 0 ? extra_after(g.w, g.ow, g.kw, g.sw, g.dw, g.pl) : 0;
  const std::string why = kernels::cudnn_limit_violation(g, g.eh, g.ew);
  if (!why.empty()) ctx.fail(why);
  return g;
}

// ---- cuDNN descriptors ------------------------------------------------------------------------

enum class Dir { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

// Everything cuDNN is told about one convolution.
struct ConvProblem {
  Dir dir;
  bool f64;
  bool tf32;  // TF32 allowed (f32 only)
  Layout layout;
  ConvGeom g;
  cudnnDataType_t data_type() const { return f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }
  // The math type asked from the heuristics.
  cudnnMathType_t requested_math() const {
    if (f64) return CUDNN_DEFAULT_MATH;
    return tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  }
};

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { SPIRE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { SPIRE_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d)); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { SPIRE_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d)); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// Sizes were checked against int's range by conv_geom.
int as_int(int64_t v) { return static_cast<int>(v); }

// The descriptors of a problem: x is the (extended) input, y the output, w the filter.
struct Descriptors {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  Descriptors(const ConvProblem& p, cudnnMathType_t math) {
    const ConvGeom& g = p.g;
    const cudnnDataType_t dt = p.data_type();
    const cudnnTensorFormat_t fmt = format_of(p.layout);
    SPIRE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x.d, fmt, dt, as_int(g.n), as_int(g.c),
                                                 as_int(g.hp()), as_int(g.wp())));
    SPIRE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y.d, fmt, dt, as_int(g.n), as_int(g.o),
                                                 as_int(g.oh), as_int(g.ow)));
    SPIRE_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w.d, dt, fmt, as_int(g.o), as_int(g.c),
                                                 as_int(g.kh), as_int(g.kw)));
    SPIRE_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv.d, as_int(g.pt), as_int(g.pl),
                                                      as_int(g.sh), as_int(g.sw), as_int(g.dh),
                                                      as_int(g.dw), CUDNN_CROSS_CORRELATION, dt));
    SPIRE_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.d, math));
  }
};

// ---- algorithm choice -------------------------------------------------------------------------

struct AlgoChoice {
  Layout layout = Layout::kNHWC;
  int algo = 0;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

// Per-device cache of algorithm choices (guard with CudaContext::cache_mutex()).
struct ConvAlgoCache {
  std::map<std::vector<int64_t>, AlgoChoice> entries;
};

// cuDNN is thread-safe only "so long as the threads do not share the same cuDNN handle
// simultaneously", and the device context's one handle is shared by every host thread that
// runs convolutions on the device (e.g. two sessions run from two threads). Every use of the
// handle in this file holds this per-device mutex (after cache_mutex() where both are held).
struct CudnnHandleLock {
  std::mutex mu;
};

std::vector<int64_t> cache_key(const ConvProblem& p) {
  const ConvGeom& g = p.g;
  const int64_t dims[] = {g.n, g.c, g.hp(), g.wp(), g.o, g.kh, g.kw, g.oh,
                          g.ow, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl};
  std::vector<int64_t> key = {static_cast<int64_t>(p.dir), p.f64, p.tf32};
  key.insert(key.end(), std::begin(dims), std::end(dims));
  return key;
}

// The first acceptable algorithm of the heuristics' list `perf` (best first): deterministic
// ones first, then any; skipping unsupported ones, down-converting ones, tensor-op ones when
// TF32 is not allowed for f32, and those whose workspace exceeds the limit.
// workspace_of(algo, &bytes) asks cuDNN with the conv descriptor set to the math type the
// algorithm will run with.
template <typename Perf, typename WorkspaceOf>
bool pick_algo(const ConvProblem& p, const std::vector<Perf>& perf,
               cudnnConvolutionDescriptor_t conv, WorkspaceOf workspace_of, AlgoChoice* out) {
  const bool strict_fp32 = !p.f64 && !p.tf32;
  for (int pass = 0; pass < 2; ++pass) {
    for (const Perf& r : perf) {
      if (r.status != CUDNN_STATUS_SUCCESS) continue;
      if (pass == 0 && r.determinism != CUDNN_DETERMINISTIC) continue;
      if (r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
      if (strict_fp32 && r.mathType == CUDNN_TENSOR_OP_MATH) continue;
      // Without TF32, f32 always runs with FMA math (no tensor cores); otherwise with the
      // math type the heuristics report for the algorithm.
      const cudnnMathType_t math = strict_fp32 ? CUDNN_FMA_MATH : r.mathType;
      if (cudnnSetConvolutionMathType(conv, math) != CUDNN_STATUS_SUCCESS) continue;
      size_t bytes = 0;
      if (workspace_of(r.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
      if (bytes > kMaxWorkspaceBytes) continue;
      out->layout = p.layout;
      out->algo = static_cast<int>(r.algo);
      out->math = math;
      out->workspace = bytes;
      return true;
    }
  }
  return false;
}

// Runs the heuristics for problem p (in p.layout); false when nothing qualifies.
bool find_algo(KernelContext& ctx, cudnnHandle_t h, const ConvProblem& p, AlgoChoice* out) {
  Descriptors d(p, p.requested_math());
  // Our output size must be cuDNN's (see the padding note at the top).
  int yn = 0, yc = 0, yh = 0, yw = 0;
  SPIRE_CUDNN_CHECK(
      cudnnGetConvolution2dForwardOutputDim(d.conv.d, d.x.d, d.w.d, &yn, &yc, &yh, &yw));
  if (yn != p.g.n || yc != p.g.o || yh != p.g.oh || yw != p.g.ow)
    ctx.fail("internal error: cuDNN computes a ", yn, "x", yh, "x", yw, "x", yc,
             " output, expected ", p.g.n, "x", p.g.oh, "x", p.g.ow, "x", p.g.o);
  int max_count = 0, returned = 0;
  if (p.dir == Dir::kForward) {
    SPIRE_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
    SPIRE_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, d.x.d, d.w.d, d.conv.d, d.y.d, static_cast<int>(perf.size()), &returned, perf.data()));
    perf.resize(static_cast<size_t>(std::max(returned, 0)));
    return pick_algo(
        p, perf, d.conv.d,
        [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.d, d.w.d, d.conv.d, d.y.d, a,
                                                         bytes);
        },
        out);
  }
  if (p.dir == Dir::kBackwardData) {
    SPIRE_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(
        static_cast<size_t>(std::max(max_count, 1)));
    SPIRE_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, d.w.d, d.y.d, d.conv.d, d.x.d, static_cast<int>(perf.size()), &returned, perf.data()));
    perf.resize(static_cast<size_t>(std::max(returned, 0)));
    return pick_algo(
        p, perf, d.conv.d,
        [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.d, d.y.d, d.conv.d, d.x.d, a,
                                                              bytes);
        },
        out);
  }
  SPIRE_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(
      static_cast<size_t>(std::max(max_count, 1)));
  SPIRE_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, d.x.d, d.y.d, d.conv.d, d.w.d, static_cast<int>(perf.size()), &returned, perf.data()));
  perf.resize(static_cast<size_t>(std::max(returned, 0)));
  return pick_algo(
      p, perf, d.conv.d,
      [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.d, d.y.d, d.conv.d, d.w.d, a,
                                                              bytes);
      },
      out);
}

// The cached algorithm (and layout) for problem p, choosing it on first use: f32 tries NHWC,
// then NCHW; f64 uses NCHW.
AlgoChoice choose_algo(KernelContext& ctx, CudaContext& cc, ConvProblem p) {
  const ConvGeom& g = p.g;
  for (int64_t count : {count_of(g.xp_dims()), count_of(g.y_dims()), count_of(g.f_dims())})
    if (count > INT_MAX)
      ctx.fail("tensor of ", count, " elements is too large for cuDNN (more than 2^31 - 1)");
  ConvAlgoCache& cache = cc.cache<ConvAlgoCache>();
  std::lock_guard<std::mutex> lock(cc.cache_mutex());
  const std::vector<int64_t> key = cache_key(p);
  auto it = cache.entries.find(key);
  if (it != cache.entries.end()) return it->second;
  std::vector<Layout> layouts;
  if (!p.f64) layouts.push_back(Layout::kNHWC);
  layouts.push_back(Layout::kNCHW);
  AlgoChoice choice;
  std::lock_guard<std::mutex> handle_lock(cc.cache<CudnnHandleLock>().mu);
  for (Layout l : layouts) {
    p.layout = l;
    if (find_algo(ctx, cc.cudnn(), p, &choice)) {
      cache.entries.emplace(key, choice);
      return choice;
    }
  }
  ctx.fail("cuDNN offers no convolution algorithm for this problem within a ",
           kMaxWorkspaceBytes >> 20, " MiB workspace");
}

// Runs the convolution of direction p.dir with algorithm a (p.layout == a.layout):
// forward y = conv(in0 = x, in1 = w); backward data dx = (in0 = w, in1 = dy); backward filter
// dw = (in0 = x, in1 = dy).
template <typename T>
void run_conv(CudaContext& cc, const ConvProblem& p, const AlgoChoice& a, const T* in0,
              const T* in1, T* out) {
  Descriptors d(p, a.math);
  Scratch ws(cc, a.workspace);
  const T alpha = T(1), beta = T(0);  // float scaling for f32 data, double for f64
  std::lock_guard<std::mutex> handle_lock(cc.cache<CudnnHandleLock>().mu);
  cudnnHandle_t h = cc.cudnn();
  if (p.dir == Dir::kForward) {
    SPIRE_CUDNN_CHECK(cudnnConvolutionForward(h, &alpha, d.x.d, in0, d.w.d, in1, d.conv.d,
                                              static_cast<cudnnConvolutionFwdAlgo_t>(a.algo),
                                              ws.data(), a.workspace, &beta, d.y.d, out));
  } else if (p.dir == Dir::kBackwardData) {
    SPIRE_CUDNN_CHECK(
        cudnnConvolutionBackwardData(h, &alpha, d.w.d, in0, d.y.d, in1, d.conv.d,
                                     static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), ws.data(),
                                     a.workspace, &beta, d.x.d, out));
  } else {
    SPIRE_CUDNN_CHECK(
        cudnnConvolutionBackwardFilter(h, &alpha, d.x.d, in0, d.y.d, in1, d.conv.d,
                                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo),
                                       ws.data(), a.workspace, &beta, d.w.d, out));
  }
}

template <typename T>
ConvProblem make_problem(const KernelContext& ctx, Dir dir, const ConvGeom& g) {
  ConvProblem p;
  p.dir = dir;
  p.f64 = std::is_same_v<T, double>;
  p.tf32 = !p.f64 && ctx.allow_tf32();
  p.layout = Layout::kNCHW;
  p.g = g;
  return p;
}

template <typename T>
void zero_fill(CudaContext& cc, Tensor& t) {
  SPIRE_CUDA_CHECK(cudaMemsetAsync(t.data<T>(), 0,
                                   static_cast<size_t>(t.num_elements()) * sizeof(T), cc.stream()));
}

// ---- kernels ----------------------------------------------------------------------------------

// The convolution of x and f (geometry g) into y (NHWC, g's output dims), on ctx's device.
template <typename T>
void conv2d_into(KernelContext& ctx, const Tensor& x, const Tensor& f, const ConvGeom& g, T* y) {
  const int64_t count = g.n * g.oh * g.ow * g.o;
  if (count == 0) return;
  CudaContext& cc = context(ctx);
  DeviceGuard guard(cc.device());
  if (x.num_elements() == 0 || f.num_elements() == 0) {  // C == 0
    SPIRE_CUDA_CHECK(cudaMemsetAsync(y, 0, static_cast<size_t>(count) * sizeof(T), cc.stream()));
    return;
  }
  ConvProblem p = make_problem<T>(ctx, Dir::kForward, g);
  const AlgoChoice a = choose_algo(ctx, cc, p);
  p.layout = a.layout;
  const Order4& lo = order_of(a.layout);
  StagedInput<T> xin(cc, x.data<T>(), g.x_dims(), kNHWC, g.xp_dims(), lo);
  StagedInput<T> win(cc, f.data<T>(), g.f_dims(), kHWIO, g.f_dims(), lo);
  StagedOutput<T> out(cc, y, g.y_dims(), kNHWC, g.y_dims(), lo);
  run_conv<T>(cc, p, a, xin.get(), win.get(), out.get());
  out.finish();
}

template <typename T>
void conv2d_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& f = ctx.input(1);
  const ConvGeom g = conv_geom(ctx, kernels::conv_geometry(ctx, x.shape(), f.shape()));
  Tensor& y = ctx.allocate_output(0, Shape{g.n, g.oh, g.ow, g.o});
  conv2d_into<T>(ctx, x, f, g, y.data<T>());
}

// FusedConv2D: the convolution, then the node's epilogue program over it (in output 0 when
// the program keeps the product's shape: a bias, an activation, a residual add).
template <typename T>
void fused_conv2d_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& f = ctx.input(1);
  const ConvGeom g = kernels::in_product(
      ctx, [&] { return conv_geom(ctx, kernels::conv_geometry(ctx, x.shape(), f.shape())); });
  CudaEpilogue<T> epilogue(ctx, Shape{g.n, g.oh, g.ow, g.o}, 2);
  conv2d_into<T>(ctx, x, f, g, epilogue.product());
  epilogue.finish(ctx);
}

template <typename T>
void conv2d_backprop_input_kernel(KernelContext& ctx) {
  const Tensor& like = ctx.input(0);
  const Tensor& f = ctx.input(1);
  const Tensor& dy = ctx.input(2);
  ConvGeom g = conv_geom(ctx, kernels::conv_backprop_geometry(ctx));
  Tensor& dx = ctx.allocate_output(0, like.shape());
  if (dx.num_elements() == 0) return;
  CudaContext& cc = context(ctx);
  DeviceGuard guard(cc.device());
  if (f.num_elements() == 0 || dy.num_elements() == 0) return zero_fill<T>(cc, dx);  // O == 0
  ConvProblem p = make_problem<T>(ctx, Dir::kBackwardData, g);
  const AlgoChoice a = choose_algo(ctx, cc, p);
  p.layout = a.layout;
  const Order4& lo = order_of(a.layout);
  StagedInput<T> win(cc, f.data<T>(), g.f_dims(), kHWIO, g.f_dims(), lo);
  StagedInput<T> dyin(cc, dy.data<T>(), g.y_dims(), kNHWC, g.y_dims(), lo);
  // The gradient of the extended input, cropped to the real one.
  StagedOutput<T> out(cc, dx.data<T>(), g.x_dims(), kNHWC, g.xp_dims(), lo);
  run_conv<T>(cc, p, a, win.get(), dyin.get(), out.get());
  out.finish();
}

template <typename T>
void conv2d_backprop_filter_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& like = ctx.input(1);
  const Tensor& dy = ctx.input(2);
  ConvGeom g = conv_geom(ctx, kernels::conv_backprop_geometry(ctx));
  Tensor& dw = ctx.allocate_output(0, like.shape());
  if (dw.num_elements() == 0) return;
  CudaContext& cc = context(ctx);
  DeviceGuard guard(cc.device());
  if (x.num_elements() == 0 || dy.num_elements() == 0) return zero_fill<T>(cc, dw);  // N == 0
  ConvProblem p = make_problem<T>(ctx, Dir::kBackwardFilter, g);
  const AlgoChoice a = choose_algo(ctx, cc, p);
  p.layout = a.layout;
  const Order4& lo = order_of(a.layout);
  StagedInput<T> xin(cc, x.data<T>(), g.x_dims(), kNHWC, g.xp_dims(), lo);
  StagedInput<T> dyin(cc, dy.data<T>(), g.y_dims(), kNHWC, g.y_dims(), lo);
  StagedOutput<T> out(cc, dw.data<T>(), g.f_dims(), kHWIO, g.f_dims(), lo);
  run_conv<T>(cc, p, a, xin.get(), dyin.get(), out.get());
  out.finish();
}

}  // namespace

SPIRE_STATIC_INIT(cuda_conv_kernels) {
  auto& r = KernelRegistry::global();
  r.add("Conv2D", DeviceType::CUDA, DType::F32, conv2d_kernel<float>);
  r.add("Conv2D", DeviceType::CUDA, DType::F64, conv2d_kernel<double>);
  r.add("FusedConv2D", DeviceType::CUDA, DType::F32, fused_conv2d_kernel<float>);
  r.add("FusedConv2D", DeviceType::CUDA, DType::F64, fused_conv2d_kernel<double>);
  for (DType t : {DType::F32, DType::F64}) register_epilogue(DeviceType::CUDA, "Conv2D", t, "FusedConv2D");
  r.add("Conv2DBackpropInput", DeviceType::CUDA, DType::F32, conv2d_backprop_input_kernel<float>);
  r.add("Conv2DBackpropInput", DeviceType::CUDA, DType::F64, conv2d_backprop_input_kernel<double>);
  r.add("Conv2DBackpropFilter", DeviceType::CUDA, DType::F32, conv2d_backprop_filter_kernel<float>);
  r.add("Conv2DBackpropFilter", DeviceType::CUDA, DType::F64,
        conv2d_backprop_filter_kernel<double>);
}

}  // namespace spire::cuda
