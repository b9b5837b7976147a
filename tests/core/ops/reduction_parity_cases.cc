// CPU/GPU parity cases for the CUDA reductions and softmax kernels
// (kernels/cuda/reduction_kernels.cu, kernels/cuda/softmax_kernels.cu):
// Sum, Mean, Max, Min, Prod over axes {}, {0}, {last}, {0,2} and the middle
// axis of rank-3 tensors (keepdims both ways), sizes 1, 7 and 1000003 (rows
// longer than a block, split over blocks), long rows and columns, in
// f32/f64/i32/i64; ArgMax (i32 and i64 outputs); SumToLike with broadcast
// shapes; Softmax, LogSoftmax and SparseSoftmaxCrossEntropyWithLogits with
// rows of 1, 10, 1000 and 5000 classes; L2Loss up to 1000003 elements;
// InTopK with ties and bad targets.
// Run only where a GPU exists.
#include <string>
#include <vector>

#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;
using Ints = std::vector<int64_t>;

const std::vector<DType> kFloats = {DType::F32, DType::F64};

Output reduce(const std::string& op, const Output& x, const Ints& axes, bool keep) {
  if (op == "Sum") return ops::sum(x, axes, keep);
  if (op == "Mean") return ops::mean(x, axes, keep);
  if (op == "Max") return ops::max(x, axes, keep);
  if (op == "Min") return ops::min(x, axes, keep);
  return ops::prod(x, axes, keep);
}

std::string axes_name(const Ints& axes) {
  std::string s = "{";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + std::to_string(axes[i]);
  return s + "}";
}

// One reduction case in the float dtypes and one in each integer dtype.
void add_reduction(const std::string& op, const Shape& shape, const Ints& axes, bool keep,
                   double tol_f32 = 1e-5) {
  // Products of many factors stay finite and away from 0 with factors near 1;
  // integer products stay in {-1, 0, 1} (no overflow).
  const bool is_prod = op == "Prod";
  const bool long_prod = is_prod && shape.num_elements() > 64;
  const double lo = long_prod ? 0.999 : (is_prod ? 0.5 : -2);
  const double hi = long_prod ? 1.001 : (is_prod ? 1.5 : 2);
  const std::string name = shape.to_string() + " axes " + axes_name(axes) +
                           (keep ? " keepdims" : "");
  auto build = [op, axes, keep](const In& x) -> Outs { return {reduce(op, x[0], axes, keep)}; };
  register_parity_case(ParityCase{op, name, {{shape, DType::Invalid, lo, hi}}, build, kFloats,
                                  tol_f32, 1e-12});
  const double ilo = is_prod ? -1.4 : -9, ihi = is_prod ? 1.4 : 9;
  for (DType dt : {DType::I32, DType::I64})
    register_parity_case(ParityCase{op, name + " " + dtype_name(dt), {{shape, dt, ilo, ihi}},
                                    build, {DType::F32}, 0, 0});
}

const bool kReductionCases [[maybe_unused]] = [] {
  for (const char* op : {"Sum", "Mean", "Max", "Min", "Prod"}) {
    // Long sums in f32 differ from the CPU's order by more than 1e-5.
    const double long_tol = std::string(op) == "Max" || std::string(op) == "Min" ? 0 : 1e-4;
    for (bool keep : {false, true})
      for (const Ints& axes : {Ints{}, Ints{0}, Ints{2}, Ints{-1}, Ints{0, 2}, Ints{1}})
        add_reduction(op, Shape{5, 7, 3}, axes, keep);
    for (const Ints& axes : {Ints{}, Ints{0}, Ints{2}, Ints{0, 2}, Ints{1}})
      add_reduction(op, Shape{17, 300, 45}, axes, false, long_tol);
    for (int64_t n : {1, 7, 1000003})
      for (const Ints& axes : {Ints{}, Ints{0}}) add_reduction(op, Shape{n}, axes, false, long_tol);
    add_reduction(op, Shape{4099, 33}, {0}, false, long_tol);   // column, split over rows
    add_reduction(op, Shape{33, 4099}, {1}, false);             // block per row
    add_reduction(op, Shape{3, 100003}, {1}, true, long_tol);   // rows split over blocks
    add_reduction(op, Shape{100003, 3}, {0}, false, long_tol);  // narrow columns, split
    add_reduction(op, Shape{100003, 3}, {1}, false);            // very short rows
    add_reduction(op, Shape{3, 1, 4, 1}, {1, 3}, false);        // only size-1 dims reduced
    add_reduction(op, Shape{2, 3, 4, 5}, {0, 2}, true);         // non-adjacent, two passes
    add_reduction(op, Shape{2, 3, 4, 5}, {1, 3}, false);
    // Empty reductions: the identity (Mean: NaN for floats, 0 for integers).
    add_reduction(op, Shape{0, 3}, {0}, false);
    add_reduction(op, Shape{2, 0, 3}, {1}, true);
  }
  return true;
}();

// L2Loss over every element: one block, a warp's row, rows split over blocks.
const bool kL2LossCases [[maybe_unused]] = [] {
  for (int64_t n : {1, 7, 300, 4099, 1000003}) {
    auto build = [](const In& x) -> Outs { return {ops::l2_loss(x[0])}; };
    register_parity_case(ParityCase{"L2Loss", "{" + std::to_string(n) + "}", {{Shape{n}}}, build,
                                    kFloats, n > 4099 ? 1e-4 : 1e-5, 1e-12});
  }
  return true;
}();

// ---- ArgMax --------------------------------------------------------------------

void add_argmax(const Shape& shape, int64_t axis) {
  for (DType out : {DType::I64, DType::I32}) {
    const std::string name = shape.to_string() + " axis " + std::to_string(axis) + " -> " +
                             dtype_name(out);
    auto build = [axis, out](const In& x) -> Outs { return {ops::argmax(x[0], axis, out)}; };
    // Random floats (no ties in practice) and integers from a small range
    // (many ties: the first index wins on both devices).
    register_parity_case(ParityCase{"ArgMax", name, {{shape}}, build, kFloats, 0, 0});
    for (DType dt : {DType::I32, DType::I64})
      register_parity_case(ParityCase{"ArgMax", name + " " + dtype_name(dt),
                                      {{shape, dt, -20, 20}}, build, {DType::F32}, 0, 0});
  }
}

const bool kArgMaxCases [[maybe_unused]] = [] {
  add_argmax(Shape{1}, 0);
  add_argmax(Shape{7}, 0);
  add_argmax(Shape{1000003}, 0);
  for (int64_t axis : {0, 1, 2, -1}) add_argmax(Shape{5, 7, 3}, axis);
  add_argmax(Shape{4099, 33}, 0);
  add_argmax(Shape{33, 4099}, 1);
  add_argmax(Shape{3, 100003}, 1);
  add_argmax(Shape{64, 10}, 1);
  return true;
}();

// ---- SumToLike -------------------------------------------------------------------

void add_sum_to_like(const Shape& x, const Shape& like, double tol_f32 = 1e-5) {
  const std::string name = x.to_string() + " -> " + like.to_string();
  // add_op: ops::sum_to_like skips the node when the shapes are equal.
  auto build = [](const In& in) -> Outs { return {ops::add_op("SumToLike", in)->output(0)}; };
  register_parity_case(ParityCase{"SumToLike", name, {{x}, {like}}, build, kFloats, tol_f32, 1e-12});
  for (DType dt : {DType::I32, DType::I64})
    register_parity_case(ParityCase{"SumToLike", name + " " + dtype_name(dt),
                                    {{x, dt, -9, 9}, {like, dt}}, build, {DType::F32}, 0, 0});
}

const bool kSumToLikeCases [[maybe_unused]] = [] {
  add_sum_to_like(Shape{3, 4}, Shape{4});
  add_sum_to_like(Shape{2, 3, 4}, Shape{3, 1});
  add_sum_to_like(Shape{5, 1, 6}, Shape{1, 1, 1});
  add_sum_to_like(Shape{2, 3, 4, 5}, Shape{3, 1, 5});
  add_sum_to_like(Shape{4099, 33}, Shape{33});
  add_sum_to_like(Shape{64, 9, 9, 32}, Shape{32}, 1e-4);  // a bias gradient
  add_sum_to_like(Shape{1000003}, Shape{}, 1e-4);
  add_sum_to_like(Shape{7, 1}, Shape{7, 1});  // same shape: passed through
  return true;
}();

// ---- Softmax, LogSoftmax, sparse cross-entropy ------------------------------------------

const bool kSoftmaxCases [[maybe_unused]] = [] {
  for (int64_t classes : {1, 10, 1000, 5000}) {
    const Shape s{classes >= 1000 ? 37 : 129, classes};
    const std::string name = s.to_string();
    register_parity_case(ParityCase{"Softmax", name, {{s, DType::Invalid, -20, 20}},
                                    [](const In& x) -> Outs { return {ops::softmax(x[0])}; },
                                    kFloats});
    register_parity_case(ParityCase{"LogSoftmax", name, {{s, DType::Invalid, -20, 20}},
                                    [](const In& x) -> Outs { return {ops::log_softmax(x[0])}; },
                                    kFloats});
    for (DType lt : {DType::I32, DType::I64})
      register_parity_case(ParityCase{
          "SparseSoftmaxCrossEntropyWithLogits", name + " labels " + dtype_name(lt),
          {{s, DType::Invalid, -20, 20}, {Shape{s[0]}, lt, 0, static_cast<double>(classes - 1)}},
          [](const In& x) -> Outs {
            return {ops::sparse_softmax_cross_entropy_with_logits(x[0], x[1])};
          },
          kFloats});
  }
  // InTopK: scores cast through i32 so that rows hold ties at the k-th value; targets
  // include -1 and C (out of range, so false).
  for (int64_t classes : {10, 1000}) {
    for (int64_t k : {1, 5}) {
      const Shape s{257, classes};
      for (DType lt : {DType::I32, DType::I64})
        register_parity_case(ParityCase{
            "InTopK", s.to_string() + " k " + std::to_string(k) + " targets " + dtype_name(lt),
            {{s, DType::Invalid, -4, 4}, {Shape{s[0]}, lt, -1, static_cast<double>(classes)}},
            [k](const In& x) -> Outs {
              Output tied = ops::cast(ops::cast(x[0], DType::I32), x[0].dtype());
              return {ops::in_top_k(tied, x[1], k), ops::in_top_k(x[0], x[1], k)};
            },
            kFloats});
    }
  }
  // Non-last axes (one thread per position, walking the axis).
  register_parity_case(ParityCase{"Softmax", "axis 0 of {1000, 33}", {{Shape{1000, 33}}},
                                  [](const In& x) -> Outs { return {ops::softmax(x[0], 0)}; },
                                  kFloats});
  register_parity_case(ParityCase{"LogSoftmax", "axis 1 of {4, 7, 9}", {{Shape{4, 7, 9}}},
                                  [](const In& x) -> Outs { return {ops::log_softmax(x[0], 1)}; },
                                  kFloats});
  // A row just over the warp limit (block per row) and a long one.
  register_parity_case(ParityCase{"Softmax", "{3, 1025}", {{Shape{3, 1025}}},
                                  [](const In& x) -> Outs { return {ops::softmax(x[0])}; },
                                  kFloats});
  register_parity_case(ParityCase{"LogSoftmax", "{2, 100003}", {{Shape{2, 100003}}},
                                  [](const In& x) -> Outs { return {ops::log_softmax(x[0])}; },
                                  kFloats, 1e-4});
  return true;
}();

}  // namespace
}  // namespace spire::testing
