// GPU kernel benchmarks of Spire's CUDA backend. Each kernel runs through a
// Session on cuda:0, as a user runs it: the graph's inputs are Variables on
// the GPU, set once from the host, so a run moves nothing between host and
// device; a run has the op as its only target (nothing fetched). After a
// warm-up, N runs are queued and the wall time up to spire::synchronize_device
// is divided by N (N chosen so one window lasts ~0.1 s); the best of several
// windows is reported (the median goes to the CSV). The executor's per-run
// host work overlaps the GPU's, so a kernel shorter than that overhead shows
// the overhead.
//
// Two ceilings are measured in the same run with CUDA and cuBLAS directly:
//   - device-to-device copy bandwidth: cudaMemcpyAsync of a 1 GiB buffer,
//     cudaEvent-timed, best of 10, counted as 2 * bytes / time (read + write);
//   - cuBLAS SGEMM at 8192^3 (cublasSgemm, TF32 off; and separately with
//     TF32 tensor cores on), best of several.
// Bandwidth kernels count bytes moved = inputs read once + outputs written
// once, over tensors of 64M and 256M f32 elements (256 MiB / 1 GiB, well
// above the 50-60 MiB L2 of an H100/H200); compute kernels count FLOPs
// (2 per multiply-add). Prints a Markdown table
//   kernel | size | time (us) | achieved | % of ceiling | target
// after all measurements (progress goes to stderr). Target: elementwise,
// reduction and softmax (cross-entropy included) kernels reach >= 85% of the
// copy bandwidth (the transpose and fused/unfused chain rows have no target).
//
// Usage: gpu_kernels [--quick] [--csv FILE] [--filter SUBSTR] [--help]
//   --quick   smaller sizes (16M elements, matmul 1024/2048, conv batch 128)
//             for a smoke test
//   --csv     also write every row (best and median times) to FILE
//   --filter  only kernels whose name contains SUBSTR (ceilings always run)
// Exits 0 with a message when no CUDA device is visible; 1 when a kernel
// failed (its row says why). Built only with -DSPIRE_CUDA=ON
// (bench/CMakeLists.txt); bench/gpu_check.sh runs it.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/device_backend.h"
#include "spire.h"

namespace {

using spire::Device;
using spire::DType;
using spire::Graph;
using spire::Node;
using spire::Output;
using spire::Session;
using spire::SessionOptions;
using spire::Shape;
using spire::Tensor;
namespace ops = spire::ops;

#define BENCH_CUDA(expr)                                                                    \
  do {                                                                                      \
    cudaError_t bench_err_ = (expr);                                                        \
    if (bench_err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "gpu_kernels: %s failed: %s (%s:%d)\n", #expr,                  \
                   cudaGetErrorString(bench_err_), __FILE__, __LINE__);                     \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

#define BENCH_CUBLAS(expr)                                                                  \
  do {                                                                                      \
    cublasStatus_t bench_st_ = (expr);                                                      \
    if (bench_st_ != CUBLAS_STATUS_SUCCESS) {                                               \
      std::fprintf(stderr, "gpu_kernels: %s failed: %s (%s:%d)\n", #expr,                  \
                   cublasGetStatusString(bench_st_), __FILE__, __LINE__);                   \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

const Device kGpu = Device::cuda(0);
constexpr double kTargetPct = 85.0;

// ---- options -------------------------------------------------------------------------

struct Options {
  bool quick = false;
  std::string csv;
  std::string filter;
  std::vector<int64_t> elements;     // sizes of the bandwidth kernels
  std::vector<int64_t> matmul_sizes;
  int64_t conv_batch = 512;
  int64_t sgemm_ceiling_n = 8192;
  size_t copy_bytes = size_t{1} << 30;
  double window_s = 0.1;  // target length of one timed window
  int windows = 5;
};

void usage(const char* argv0) {
  std::printf(
      "Usage: %s [--quick] [--csv FILE] [--filter SUBSTR] [--help]\n"
      "Times Spire's CUDA kernels through a Session on cuda:0 against the device-to-device\n"
      "copy bandwidth and cuBLAS SGEMM measured in the same run.\n"
      "  --quick          smaller sizes (a smoke test; numbers not comparable)\n"
      "  --csv FILE       also write all rows as CSV to FILE\n"
      "  --filter SUBSTR  only the kernels whose name contains SUBSTR\n",
      argv0);
}

// Returns false after --help; exits 2 on a bad argument.
bool parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpu_kernels: %s needs a value (see --help)\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") return false;
    if (a == "--quick") o->quick = true;
    else if (a == "--csv") o->csv = value("--csv");
    else if (a == "--filter") o->filter = value("--filter");
    else {
      std::fprintf(stderr, "gpu_kernels: unknown argument '%s' (see --help)\n", a.c_str());
      std::exit(2);
    }
  }
  if (o->quick) {
    o->elements = {int64_t{1} << 24};
    o->matmul_sizes = {1024, 2048};
    o->conv_batch = 128;
    o->sgemm_ceiling_n = 4096;
    o->copy_bytes = size_t{256} << 20;
    o->window_s = 0.02;
    o->windows = 3;
  } else {
    o->elements = {int64_t{1} << 26, int64_t{1} << 28};
    o->matmul_sizes = {1024, 4096, 8192};
  }
  return true;
}

// ---- rows of the table ----------------------------------------------------------------

enum class Kind { kBandwidth, kCompute };

struct Row {
  std::string kernel;
  std::string size;
  Kind kind = Kind::kBandwidth;
  double work = 0;  // bytes (bandwidth) or FLOPs (compute)
  double best_s = 0, median_s = 0;
  int runs_per_window = 0;
  double ceiling = 0;  // GB/s or TFLOP/s
  std::string ceiling_name;
  bool has_target = false;
  std::string error;  // non-empty: the kernel failed

  // GB/s or TFLOP/s at the best time.
  double rate() const {
    if (best_s <= 0) return 0;
    return kind == Kind::kBandwidth ? work / best_s / 1e9 : work / best_s / 1e12;
  }
  double pct() const { return ceiling > 0 ? 100.0 * rate() / ceiling : 0; }
  const char* unit() const { return kind == Kind::kBandwidth ? "GB/s" : "TFLOP/s"; }
};

struct Ceilings {
  double copy_gbs = 0;
  double sgemm_tflops = 0;
  double sgemm_tf32_tflops = 0;
};

// ---- host data ------------------------------------------------------------------------

// Fast deterministic fill (splitmix64): uniform floats in [lo, hi).
void fill_uniform(float* p, int64_t n, uint64_t seed, float lo, float hi) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  const float scale = (hi - lo) / 16777216.0f;
  for (int64_t i = 0; i < n; ++i) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = lo + static_cast<float>(z >> 40) * scale;
  }
}

Tensor host_f32(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(DType::F32, shape);
  fill_uniform(t.data<float>(), t.num_elements(), seed, lo, hi);
  return t;
}

Tensor host_labels(int64_t n, int64_t classes, uint64_t seed) {
  Tensor t(DType::I64, {n});
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 7;
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<int64_t>(x % static_cast<uint64_t>(classes));
  }
  return t;
}

std::string shape_str(const Shape& s) { return s.to_string(); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- ceilings (CUDA and cuBLAS directly) ---------------------------------------------

double measure_copy_gbs(size_t bytes, cudaStream_t stream) {
  void* src = nullptr;
  void* dst = nullptr;
  BENCH_CUDA(cudaMalloc(&src, bytes));
  BENCH_CUDA(cudaMalloc(&dst, bytes));
  BENCH_CUDA(cudaMemsetAsync(src, 0x3c, bytes, stream));
  BENCH_CUDA(cudaMemsetAsync(dst, 0, bytes, stream));
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i)
    BENCH_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  BENCH_CUDA(cudaStreamSynchronize(stream));
  float best_ms = 1e30f;
  for (int r = 0; r < 10; ++r) {
    BENCH_CUDA(cudaEventRecord(e0, stream));
    BENCH_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    BENCH_CUDA(cudaEventRecord(e1, stream));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    best_ms = std::min(best_ms, ms);
  }
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  BENCH_CUDA(cudaFree(src));
  BENCH_CUDA(cudaFree(dst));
  return 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;
}

// Best time of C = A * B (n x n, column-major, all f32) through cublasSgemm.
double time_sgemm_s(cublasHandle_t h, cudaStream_t stream, int n, bool tf32, const float* a,
                    const float* b, float* c) {
  BENCH_CUBLAS(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] {
    BENCH_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, n, b, n, &beta, c, n));
  };
  for (int i = 0; i < 3; ++i) gemm();
  BENCH_CUDA(cudaStreamSynchronize(stream));
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  const int reps = n <= 2048 ? 50 : 10;
  float best_ms = 1e30f;
  for (int r = 0; r < reps; ++r) {
    BENCH_CUDA(cudaEventRecord(e0, stream));
    gemm();
    BENCH_CUDA(cudaEventRecord(e1, stream));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    best_ms = std::min(best_ms, ms);
  }
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  return best_ms * 1e-3;
}

// Measures the ceilings and appends cuBLAS reference rows (SGEMM at the
// matmul sizes) to `rows`. All raw CUDA memory is freed before returning.
Ceilings measure_ceilings(const Options& o, std::vector<Row>* rows) {
  Ceilings c;
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::fprintf(stderr, "ceiling: device-to-device copy of %zu MiB...\n", o.copy_bytes >> 20);
  c.copy_gbs = measure_copy_gbs(o.copy_bytes, stream);

  int64_t nmax = o.sgemm_ceiling_n;
  for (int64_t n : o.matmul_sizes) nmax = std::max(nmax, n);
  const size_t elems = static_cast<size_t>(nmax * nmax);
  std::vector<float> host(elems);
  float *a = nullptr, *b = nullptr, *cm = nullptr;
  BENCH_CUDA(cudaMalloc(&a, elems * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&b, elems * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&cm, elems * sizeof(float)));
  fill_uniform(host.data(), static_cast<int64_t>(elems), 11, -1.0f, 1.0f);
  BENCH_CUDA(cudaMemcpy(a, host.data(), elems * sizeof(float), cudaMemcpyHostToDevice));
  fill_uniform(host.data(), static_cast<int64_t>(elems), 12, -1.0f, 1.0f);
  BENCH_CUDA(cudaMemcpy(b, host.data(), elems * sizeof(float), cudaMemcpyHostToDevice));
  host.clear();
  host.shrink_to_fit();

  cublasHandle_t h;
  BENCH_CUBLAS(cublasCreate(&h));
  BENCH_CUBLAS(cublasSetStream(h, stream));
  const int nc = static_cast<int>(o.sgemm_ceiling_n);
  std::fprintf(stderr, "ceiling: cublasSgemm %d^3 (TF32 off, then on)...\n", nc);
  const double flops_c = 2.0 * nc * static_cast<double>(nc) * nc;
  c.sgemm_tflops = flops_c / time_sgemm_s(h, stream, nc, false, a, b, cm) / 1e12;
  c.sgemm_tf32_tflops = flops_c / time_sgemm_s(h, stream, nc, true, a, b, cm) / 1e12;

  for (int64_t n : o.matmul_sizes) {
    if (!o.filter.empty() && std::string("cublasSgemm").find(o.filter) == std::string::npos &&
        std::string("MatMul").find(o.filter) == std::string::npos)
      continue;
    Row r;
    r.kernel = "cublasSgemm (reference)";
    r.size = std::to_string(n) + "^3 f32";
    r.kind = Kind::kCompute;
    r.work = 2.0 * n * static_cast<double>(n) * n;
    r.best_s = r.median_s = time_sgemm_s(h, stream, static_cast<int>(n), false, a, b, cm);
    r.ceiling = c.sgemm_tflops;
    r.ceiling_name = "SGEMM";
    rows->push_back(r);
  }
  BENCH_CUBLAS(cublasDestroy(h));
  BENCH_CUDA(cudaFree(a));
  BENCH_CUDA(cudaFree(b));
  BENCH_CUDA(cudaFree(cm));
  BENCH_CUDA(cudaStreamDestroy(stream));
  return c;
}

// ---- Spire cases ----------------------------------------------------------------------

// A graph on cuda:0 whose inputs are Variables set once from host tensors.
struct GraphCase {
  Graph g;
  std::vector<std::pair<Node*, Tensor>> values;

  // A Variable holding `host` (copied to the GPU when the session starts).
  Output input(const Tensor& host, const std::string& name) {
    Output v = ops::variable(host.shape(), host.dtype(), name, &g);
    values.emplace_back(v.node, host);
    return v;
  }
};

struct Timing {
  double best_s = 0, median_s = 0;
  int runs_per_window = 0;
};

Timing time_target(Session& s, Node* target, const Options& o) {
  for (int i = 0; i < 3; ++i) s.run_targets({target});
  spire::synchronize_device(kGpu);
  auto t0 = std::chrono::steady_clock::now();
  s.run_targets({target});
  spire::synchronize_device(kGpu);
  const double one = std::max(seconds_since(t0), 1e-6);
  const int n = static_cast<int>(std::clamp(o.window_s / one, 3.0, 10000.0));
  std::vector<double> per_run;
  for (int w = 0; w < o.windows; ++w) {
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) s.run_targets({target});
    spire::synchronize_device(kGpu);
    per_run.push_back(seconds_since(t0) / n);
  }
  std::sort(per_run.begin(), per_run.end());
  return {per_run.front(), per_run[per_run.size() / 2], n};
}

class Runner {
 public:
  Runner(const Options& o, const Ceilings& c) : o_(o), c_(c) {}

  /// Times the op `build` returns (built under DeviceScope(cuda:0)); `work`
  /// is its bytes moved (bandwidth rows, with the >= 85% target) or FLOPs.
  void run(const std::string& kernel, const std::string& size, Kind kind, double work,
           const std::function<Node*(GraphCase&)>& build, bool tf32 = false,
           bool has_target = true, bool fuse = true) {
    if (!o_.filter.empty() && kernel.find(o_.filter) == std::string::npos) return;
    Row r;
    r.kernel = kernel;
    r.size = size;
    r.kind = kind;
    r.work = work;
    if (kind == Kind::kBandwidth) {
      r.ceiling = c_.copy_gbs;
      r.ceiling_name = "copy";
      r.has_target = has_target;
    } else {
      r.ceiling = tf32 ? c_.sgemm_tf32_tflops : c_.sgemm_tflops;
      r.ceiling_name = tf32 ? "SGEMM TF32" : "SGEMM";
    }
    std::fprintf(stderr, "measuring %s %s...\n", kernel.c_str(), size.c_str());
    try {
      GraphCase gc;
      Node* target = nullptr;
      {
        spire::DeviceScope on_gpu(gc.g, kGpu);
        target = build(gc);
      }
      SessionOptions so;
      so.allow_tf32 = tf32;
      so.fuse_elementwise = fuse;
      Session s(gc.g, so);
      for (auto& [node, host] : gc.values) s.set_variable_value(node, host);
      gc.values.clear();  // drop the host copies
      Timing t = time_target(s, target, o_);
      r.best_s = t.best_s;
      r.median_s = t.median_s;
      r.runs_per_window = t.runs_per_window;
    } catch (const std::exception& e) {
      r.error = e.what();
      std::fprintf(stderr, "  FAILED: %s\n", e.what());
      failed_ = true;
    }
    // Hand the case's memory back so the next case starts from an empty cache.
    try {
      spire::synchronize_device(kGpu);
      spire::get_allocator(kGpu)->empty_cache();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "  after the case: %s\n", e.what());
      failed_ = true;
    }
    rows_.push_back(r);
  }

  std::vector<Row>& rows() { return rows_; }
  bool failed() const { return failed_; }

 private:
  const Options& o_;
  Ceilings c_;
  std::vector<Row> rows_;
  bool failed_ = false;
};

constexpr double kF = sizeof(float);

void bandwidth_cases(Runner& R, int64_t n) {
  const int64_t cols = 1024;
  const int64_t rows = n / cols;
  const Shape flat{n};
  const Shape mat{rows, cols};

  R.run("Add (same shape)", shape_str(flat), Kind::kBandwidth, 3 * kF * n, [&](GraphCase& c) {
    return ops::add(c.input(host_f32(flat, 1), "a"), c.input(host_f32(flat, 2), "b")).node;
  });
  R.run("Mul (row broadcast)", shape_str(mat) + " * [1024]", Kind::kBandwidth,
        kF * (2.0 * n + cols), [&](GraphCase& c) {
          return ops::mul(c.input(host_f32(mat, 3), "a"), c.input(host_f32({cols}, 4), "b")).node;
        });
  R.run("Relu", shape_str(flat), Kind::kBandwidth, 2 * kF * n,
        [&](GraphCase& c) { return ops::relu(c.input(host_f32(flat, 5), "x")).node; });
  // A chain of four elementwise ops, relu(tanh((a + b) * 0.5)) + a: one FusedElementwise
  // kernel (kernels/cuda/fused_program.cu) against the four kernels with fusion off. Bytes:
  // the chain's own inputs and result (the unfused run also moves its intermediates).
  for (bool fuse : {true, false}) {
    R.run(fuse ? "Fused chain (4 ops)" : "Unfused chain (4 ops)", shape_str(flat), Kind::kBandwidth, 3 * kF * n,
          [&](GraphCase& c) {
            Output a = c.input(host_f32(flat, 15), "a");
            Output b = c.input(host_f32(flat, 16), "b");
            return ops::add(ops::relu(ops::tanh(ops::add(a, b) * 0.5)), a).node;
          },
          /*tf32=*/false, /*has_target=*/false, fuse);
  }
  R.run("Sum (all)", shape_str(flat), Kind::kBandwidth, kF * (n + 1),
        [&](GraphCase& c) { return ops::sum(c.input(host_f32(flat, 6), "x")).node; });
  R.run("Sum (last axis)", shape_str(mat), Kind::kBandwidth, kF * (n + rows),
        [&](GraphCase& c) { return ops::sum(c.input(host_f32(mat, 7), "x"), {1}).node; });
  R.run("Mean (axis 0)", shape_str(mat), Kind::kBandwidth, kF * (n + cols),
        [&](GraphCase& c) { return ops::mean(c.input(host_f32(mat, 8), "x"), {0}).node; });
  for (int64_t classes : {int64_t{1000}, int64_t{32768}}) {
    const Shape sm{n / classes, classes};
    R.run("Softmax (rows)", shape_str(sm), Kind::kBandwidth,
          2 * kF * static_cast<double>(sm.num_elements()),
          [&](GraphCase& c) { return ops::softmax(c.input(host_f32(sm, 9), "x")).node; });
  }
  {
    const int64_t classes = 1000, batch = n / classes;
    const Shape lg{batch, classes};
    // Reads the logits and the i64 labels, writes the f32 loss vector.
    R.run("SparseSoftmaxCrossEntropyWithLogits", shape_str(lg) + ", i64 labels", Kind::kBandwidth,
          kF * static_cast<double>(lg.num_elements()) + 8.0 * batch + kF * batch,
          [&](GraphCase& c) {
            return ops::sparse_softmax_cross_entropy_with_logits(
                       c.input(host_f32(lg, 10, -4.0f, 4.0f), "logits"),
                       c.input(host_labels(batch, classes, 11), "labels"))
                .node;
          });
  }
  {
    // Square-ish: 2^(bits/2) rows.
    int bits = 0;
    while ((int64_t{1} << (bits + 1)) <= n) ++bits;
    const int64_t r = int64_t{1} << (bits / 2), cc = n / r;
    const Shape tr{r, cc};
    R.run("Transpose (2-D)", shape_str(tr), Kind::kBandwidth,
          2 * kF * static_cast<double>(tr.num_elements()),
          [&](GraphCase& c) { return ops::transpose(c.input(host_f32(tr, 12), "x"), {1, 0}).node; },
          /*tf32=*/false, /*has_target=*/false);
  }
}

void matmul_cases(Runner& R, const Options& o) {
  for (int64_t n : o.matmul_sizes) {
    R.run("MatMul", std::to_string(n) + "^3 f32", Kind::kCompute, 2.0 * n * double(n) * n,
          [&](GraphCase& c) {
            return ops::matmul(c.input(host_f32({n, n}, 13), "a"), c.input(host_f32({n, n}, 14), "b"))
                .node;
          });
  }
  const int64_t n = o.matmul_sizes.back();
  R.run("MatMul (allow_tf32)", std::to_string(n) + "^3 f32", Kind::kCompute,
        2.0 * n * double(n) * n,
        [&](GraphCase& c) {
          return ops::matmul(c.input(host_f32({n, n}, 13), "a"), c.input(host_f32({n, n}, 14), "b"))
              .node;
        },
        /*tf32=*/true);
}

// The convolutions of the MNIST convnet (examples/mnist_convnet.cc: 3x3, 32
// filters, SAME) at batch B: conv0 on 28x28x1, conv1/conv2 on 14x14x32, conv3
// on 7x7x32; forward, and the two gradients the training step runs (no input
// gradient for conv0, whose input is the image).
void conv_cases(Runner& R, const Options& o) {
  struct Layer {
    const char* name;
    int64_t hw, cin;
  };
  const int64_t B = o.conv_batch, K = 3, F = 32;
  const std::vector<int64_t> strides = {1, 1}, dil = {1, 1};
  for (const Layer& l : {Layer{"conv0", 28, 1}, Layer{"conv1/conv2", 14, 32}, Layer{"conv3", 7, 32}}) {
    const Shape xs{B, l.hw, l.hw, l.cin}, ws{K, K, l.cin, F}, ys{B, l.hw, l.hw, F};
    const double flops = 2.0 * B * l.hw * l.hw * F * K * K * l.cin;
    const std::string size = std::string(l.name) + " " + shape_str(xs) + " * " + shape_str(ws);
    R.run("Conv2D", size, Kind::kCompute, flops, [&](GraphCase& c) {
      return ops::conv2d(c.input(host_f32(xs, 15), "x"), c.input(host_f32(ws, 16), "w"), strides,
                         "SAME")
          .node;
    });
    if (l.cin > 1) {
      R.run("Conv2DBackpropInput", size, Kind::kCompute, flops, [&](GraphCase& c) {
        return ops::conv2d_backprop_input(c.input(host_f32(xs, 15), "x"),
                                          c.input(host_f32(ws, 16), "w"),
                                          c.input(host_f32(ys, 17), "dy"), strides, "SAME", dil)
            .node;
      });
    }
    R.run("Conv2DBackpropFilter", size, Kind::kCompute, flops, [&](GraphCase& c) {
      return ops::conv2d_backprop_filter(c.input(host_f32(xs, 15), "x"),
                                         c.input(host_f32(ws, 16), "w"),
                                         c.input(host_f32(ys, 17), "dy"), strides, "SAME", dil)
          .node;
    });
  }
}

// ---- output ---------------------------------------------------------------------------

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

void print_table(const std::vector<Row>& rows, const Ceilings& c, const Options& o) {
  std::printf("\n## gpu_kernels table\n\n");
  std::printf("Ceilings (this run): device-to-device copy %.0f GB/s (read + write, %zu MiB); "
              "cublasSgemm %lld^3 %.1f TFLOP/s (TF32 off), %.1f TFLOP/s (TF32 on).\n",
              c.copy_gbs, o.copy_bytes >> 20, static_cast<long long>(o.sgemm_ceiling_n),
              c.sgemm_tflops, c.sgemm_tf32_tflops);
  std::printf("Target: elementwise, reduction and softmax kernels >= %.0f%% of the copy "
              "bandwidth. Times: best of %d windows of N runs (wall time to synchronize / N).%s\n\n",
              kTargetPct, o.windows, o.quick ? " --quick sizes." : "");
  std::printf("| kernel | size | time (us) | achieved | %% of ceiling | target |\n");
  std::printf("|---|---|---|---|---|---|\n");
  int met = 0, missed = 0;
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      std::string e = r.error.substr(0, 160);
      std::replace(e.begin(), e.end(), '|', '/');
      std::replace(e.begin(), e.end(), '\n', ' ');
      std::printf("| %s | %s | - | - | - | FAILED: %s |\n", r.kernel.c_str(), r.size.c_str(),
                  e.c_str());
      continue;
    }
    std::string target = "-";
    if (r.has_target) {
      const bool ok = r.pct() >= kTargetPct;
      (ok ? met : missed)++;
      target = std::string(">=85%: ") + (ok ? "met" : "MISSED");
    }
    std::printf("| %s | %s | %s | %s %s | %s of %s | %s |\n", r.kernel.c_str(), r.size.c_str(),
                fmt("%.1f", r.best_s * 1e6).c_str(),
                fmt(r.kind == Kind::kBandwidth ? "%.0f" : "%.2f", r.rate()).c_str(), r.unit(),
                fmt("%.1f%%", r.pct()).c_str(), r.ceiling_name.c_str(), target.c_str());
  }
  std::printf("\nBandwidth target: %d met, %d missed.\n", met, missed);
}

bool write_csv(const std::string& path, const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "kernel,size,time_us_best,time_us_median,runs_per_window,unit,rate,"
                  "pct_of_ceiling,ceiling,target_met,error\n");
  auto q = [](std::string s) {
    std::string out = "\"";
    for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch == '\n' ? ' ' : ch);
    return out + "\"";
  };
  for (const Row& r : rows) {
    const bool ok = r.error.empty();
    std::fprintf(f, "%s,%s,%.3f,%.3f,%d,%s,%.4f,%.2f,%s,%s,%s\n", q(r.kernel).c_str(),
                 q(r.size).c_str(), ok ? r.best_s * 1e6 : 0.0, ok ? r.median_s * 1e6 : 0.0,
                 r.runs_per_window, r.unit(), ok ? r.rate() : 0.0, ok ? r.pct() : 0.0,
                 q(r.ceiling_name).c_str(),
                 !r.has_target || !ok ? "" : (r.pct() >= kTargetPct ? "yes" : "no"),
                 q(r.error).c_str());
  }
  return std::fclose(f) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, &o)) {
    usage(argv[0]);
    return 0;
  }
  int cuda_devices = 0;
  cudaError_t err = cudaGetDeviceCount(&cuda_devices);
  if (err != cudaSuccess || cuda_devices == 0) {
    std::printf("gpu_kernels: skipped: no CUDA device visible (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount returned 0");
    return 0;
  }
  if (spire::device_count(spire::DeviceType::CUDA) == 0) {
    std::fprintf(stderr, "gpu_kernels: CUDA sees %d device(s) but Spire's CUDA backend reports none "
                         "(backend not registered?)\n", cuda_devices);
    return 1;
  }
  BENCH_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop;
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  int runtime = 0, driver = 0;
  BENCH_CUDA(cudaRuntimeGetVersion(&runtime));
  BENCH_CUDA(cudaDriverGetVersion(&driver));
  std::printf("gpu_kernels: %s, sm_%d%d, %d SMs, L2 %d MiB, %.1f GiB; CUDA runtime %d, driver %d\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30), runtime, driver);
  std::fflush(stdout);

  std::vector<Row> rows;
  const Ceilings c = measure_ceilings(o, &rows);
  std::fprintf(stderr, "ceilings: copy %.0f GB/s, SGEMM %.1f TFLOP/s, SGEMM TF32 %.1f TFLOP/s\n",
               c.copy_gbs, c.sgemm_tflops, c.sgemm_tf32_tflops);

  Runner R(o, c);
  try {
    for (int64_t n : o.elements) bandwidth_cases(R, n);
    matmul_cases(R, o);
    conv_cases(R, o);
  } catch (const std::exception& e) {
    // Errors inside a case are caught per row; this is for setup failures.
    std::fprintf(stderr, "gpu_kernels: %s\n", e.what());
    return 1;
  }
  // Spire's rows in measuring order, with the cuBLAS reference rows (in
  // `rows`) just before the first MatMul row (at the end when none).
  std::vector<Row> all;
  for (const Row& r : R.rows()) {
    if (r.kernel.rfind("MatMul", 0) == 0 && !rows.empty()) {
      all.insert(all.end(), rows.begin(), rows.end());
      rows.clear();
    }
    all.push_back(r);
  }
  all.insert(all.end(), rows.begin(), rows.end());

  if (!o.csv.empty() && !write_csv(o.csv, all)) {
    std::fprintf(stderr, "gpu_kernels: cannot write %s\n", o.csv.c_str());
    return 1;
  }
  print_table(all, c, o);
  return R.failed() ? 1 : 0;
}
