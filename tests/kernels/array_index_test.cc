// The index math of the CUDA array kernels (kernels/array_index.h), run on
// the host: each test plans a map the way kernels/cuda/array_kernels.cu
// does, calls the same per-element functions for every element (the tiled
// transpose through an emulated shared-memory tile, block by block), and
// compares with the CPU kernel of the op run in a Session. Emulated outputs
// start as a poison pattern, so an element the GPU loop would never write
// fails the comparison. This is the executed check of the GPU index math on
// machines without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/array_index.h"
#include "spire.h"

namespace spire {
namespace {

using Ints = std::vector<int64_t>;
using kernels::BoxMap;
using kernels::GatherDims;
using kernels::TileMap;
using kernels::Tiled2D;
using kernels::TransposePlan;

// ---- helpers -------------------------------------------------------------------------

// Random values: floats in [-2, 2], integers in [-50, 50], bools of both kinds.
Tensor random_input(DType dt, const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor t(dt, s);
  visit_dtype(dt, "random_input", [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if constexpr (std::is_same_v<T, bool>) p[i] = (rng() & 1) != 0;
      else if constexpr (std::is_integral_v<T>) p[i] = static_cast<T>(static_cast<int64_t>(rng() % 101) - 50);
      else p[i] = static_cast<T>(std::uniform_real_distribution<double>(-2, 2)(rng));
    }
  });
  return t;
}

// An uninitialized-looking output: every byte 0xA5 (bool bytes then read as
// neither 0 nor 1, floats as garbage), so unwritten elements never match.
Tensor poisoned(DType dt, const Shape& s) {
  Tensor t(dt, s);
  if (t.nbytes()) std::memset(t.raw_data(), 0xA5, t.nbytes());
  return t;
}

Tensor zeros(DType dt, const Shape& s) {
  Tensor t(dt, s);
  if (t.nbytes()) std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

// Calls f(E{}) with E an unsigned integer type of `esize` bytes (as the CUDA kernels).
template <typename F>
void with_elem(size_t esize, F&& f) {
  switch (esize) {
    case 1: f(uint8_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
    default: FAIL() << "element size " << esize;
  }
}

// Byte-exact equality (data movers copy bit patterns).
void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
  const auto* a = static_cast<const unsigned char*>(got.raw_data());
  const auto* b = static_cast<const unsigned char*>(want.raw_data());
  const size_t es = dtype_size(got.dtype());
  for (size_t i = 0; i < got.nbytes(); ++i)
    ASSERT_EQ(a[i], b[i]) << what << ": element " << i / es << " differs; got "
                          << got.to_string(64) << ", want " << want.to_string(64);
}

// Equality within summation rounding (for the accumulating ops).
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const double tol = got.dtype() == DType::F32 ? 1e-5 : (got.dtype() == DType::F64 ? 1e-12 : 0);
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    const double a = got.element_as_double(i), b = want.element_as_double(i);
    ASSERT_LE(std::abs(a - b), tol * (1 + std::abs(b)))
        << what << ": element " << i << "; got " << got.to_string(64) << ", want " << want.to_string(64);
  }
}

std::string str(const Ints& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// The CPU result of the graph `build` makes from constants of `inputs`.
template <typename Build>
std::vector<Tensor> cpu_run(const std::vector<Tensor>& inputs, Build&& build) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Output> in;
  for (const Tensor& t : inputs) in.push_back(ops::constant(t));
  std::vector<Output> outs = build(in);
  Session s(g);
  return s.run(outs);
}

template <typename Build>
Tensor cpu_run1(const std::vector<Tensor>& inputs, Build&& build) {
  return cpu_run(inputs, [&](const std::vector<Output>& in) { return std::vector<Output>{build(in)}; })[0];
}

// ---- emulated kernels (the loops of kernels/cuda/array_kernels.cu) -----------------------------

Tensor emulate_box_gather(const BoxMap& m, const Tensor& in, const Shape& out_shape) {
  Tensor out = poisoned(in.dtype(), out_shape);
  with_elem(dtype_size(in.dtype()), [&](auto e) {
    using E = decltype(e);
    for (int64_t i = 0; i < out.num_elements(); ++i)
      kernels::box_gather_element(m, static_cast<const E*>(in.raw_data()), static_cast<E*>(out.raw_data()), i);
  });
  return out;
}

template <typename T>
Tensor emulate_box_pad(const BoxMap& m, const Tensor& in, const Shape& out_shape, T fill) {
  Tensor out = poisoned(in.dtype(), out_shape);
  for (int64_t i = 0; i < out.num_elements(); ++i)
    kernels::box_pad_element(m, in.data<T>(), fill, out.data<T>(), i);
  return out;
}

// ---- transpose -----------------------------------------------------------------------

Tensor emulate_transpose(const Tensor& x, const Ints& perm, int64_t min_tiled_side,
                         TransposePlan::Kind* kind) {
  Ints od;
  for (int64_t p : perm) od.push_back(x.dim(static_cast<int>(p)));
  TransposePlan plan;
  EXPECT_TRUE(kernels::plan_transpose(x.shape().dims(), perm, &plan, min_tiled_side));
  *kind = plan.kind;
  if (plan.kind == TransposePlan::Kind::kView) return x.reshaped(Shape(od));
  Tensor y = poisoned(x.dtype(), Shape(od));
  with_elem(dtype_size(x.dtype()), [&](auto e) {
    using E = decltype(e);
    const E* in = static_cast<const E*>(x.raw_data());
    E* out = static_cast<E*>(y.raw_data());
    if (plan.kind == TransposePlan::Kind::kGeneric) {
      for (int64_t i = 0; i < y.num_elements(); ++i) kernels::strided_gather_element(plan.gather, in, out, i);
      return;
    }
    // One emulated block per tile: threads (x, y) of kTransposeTile x kTransposeBlockRows.
    constexpr int kT = kernels::kTransposeTile, kR = kernels::kTransposeBlockRows;
    E tile[kT][kT + 1];
    for (int64_t t = 0; t < kernels::tiled_count(plan.tiled); ++t) {
      for (auto& row : tile) std::fill(std::begin(row), std::end(row), E(0xA5));
      for (int ty = 0; ty < kR; ++ty)
        for (int tx = 0; tx < kT; ++tx)
          for (int k = ty; k < kT; k += kR) {
            const int64_t off = kernels::tiled_load_offset(plan.tiled, t, k, tx);
            if (off >= 0) tile[k][tx] = in[off];
          }
      for (int ty = 0; ty < kR; ++ty)
        for (int tx = 0; tx < kT; ++tx)
          for (int k = ty; k < kT; k += kR) {
            const int64_t off = kernels::tiled_store_offset(plan.tiled, t, k, tx);
            if (off >= 0) out[off] = tile[tx][k];
          }
    }
  });
  return y;
}

void check_transpose(DType dt, const Shape& s, const Ints& perm, uint64_t seed) {
  Tensor x = random_input(dt, s, seed);
  Tensor want = cpu_run1({x}, [&](const auto& in) { return ops::transpose(in[0], perm); });
  for (int64_t side : {kernels::kTransposeMinTiledSide, int64_t{1}}) {
    TransposePlan::Kind kind;
    Tensor got = emulate_transpose(x, perm, side, &kind);
    expect_same(got, want, "transpose " + s.to_string() + " perm " + str(perm) + " kind " +
                               std::to_string(static_cast<int>(kind)) + " min side " + std::to_string(side));
  }
}

TEST(ArrayIndex, TransposeAllPermsUpToRank4) {
  const std::vector<Shape> shapes = {{7}, {3, 5}, {1, 4}, {4, 1}, {2, 1, 3}, {3, 4, 5},
                                     {1, 3, 1}, {2, 3, 4, 5}, {2, 1, 3, 1}, {3, 1, 1, 5}};
  uint64_t seed = 1;
  for (const Shape& s : shapes) {
    Ints perm(static_cast<size_t>(s.rank()));
    std::iota(perm.begin(), perm.end(), 0);
    do {
      check_transpose(DType::F32, s, perm, seed++);
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(ArrayIndex, TransposeRank5AndDtypes) {
  Ints perm = {0, 1, 2, 3, 4};
  uint64_t seed = 100;
  do {
    check_transpose(DType::F32, {2, 3, 1, 4, 3}, perm, seed++);
  } while (std::next_permutation(perm.begin(), perm.end()));
  for (DType dt : {DType::F64, DType::I32, DType::I64, DType::Bool}) {
    check_transpose(dt, {3, 5}, {1, 0}, seed++);
    check_transpose(dt, {2, 3, 4}, {2, 0, 1}, seed++);
    check_transpose(dt, {2, 3, 4, 2}, {0, 3, 1, 2}, seed++);
  }
}

TEST(ArrayIndex, TransposeLargeAndTiled) {
  struct C {
    Shape s;
    Ints perm;
    TransposePlan::Kind kind;  // the default plan
  };
  using K = TransposePlan::Kind;
  const std::vector<C> cases = {
      {{33, 65}, {1, 0}, K::kTiled},
      {{2, 3, 1025, 7}, {0, 2, 1, 3}, K::kGeneric},
      {{2, 3, 1025, 7}, {3, 2, 1, 0}, K::kGeneric},
      {{2, 3, 1025, 7}, {0, 1, 3, 2}, K::kGeneric},  // 7 columns: below the tiled minimum
      {{2, 3, 1025, 9}, {0, 1, 3, 2}, K::kTiled},    // batch 6 of [1025, 9]
      {{5, 33, 40}, {0, 2, 1}, K::kTiled},
      {{4, 5, 33, 3, 8}, {0, 3, 4, 1, 2}, K::kTiled},  // merged: [4, 165, 24] -> [4, 24, 165]
      {{64, 64}, {1, 0}, K::kTiled},
      {{31, 1, 97}, {2, 1, 0}, K::kTiled},
      {{8, 9, 10}, {2, 0, 1}, K::kTiled},  // moves the last dim: [72, 10] -> [10, 72]
      {{1, 40, 1}, {2, 1, 0}, K::kView},
  };
  uint64_t seed = 500;
  for (const C& c : cases) {
    TransposePlan plan;
    ASSERT_TRUE(kernels::plan_transpose(c.s.dims(), c.perm, &plan));
    EXPECT_EQ(plan.kind, c.kind) << c.s.to_string() << " perm " << str(c.perm);
    check_transpose(DType::F32, c.s, c.perm, seed++);
  }
  // The batched form of [4, 5, 33, 3, 8] with perm (0, 3, 4, 1, 2).
  TransposePlan plan;
  ASSERT_TRUE(kernels::plan_transpose({4, 5, 33, 3, 8}, {0, 3, 4, 1, 2}, &plan));
  ASSERT_EQ(plan.kind, TransposePlan::Kind::kTiled);
  EXPECT_EQ(plan.tiled.batch, 4);
  EXPECT_EQ(plan.tiled.rows, 165);
  EXPECT_EQ(plan.tiled.cols, 24);
}

TEST(ArrayIndex, TransposeRankLimit) {
  // Ten dims reversed cannot merge: the gather needs rank 10 and the planner refuses.
  Ints dims(10, 2), perm(10);
  for (int i = 0; i < 10; ++i) perm[static_cast<size_t>(i)] = 9 - i;
  TransposePlan plan;
  EXPECT_FALSE(kernels::plan_transpose(dims, perm, &plan));
  // Ten dims where only the last two swap merge to [256, 2, 2] -> [256, 2, 2]
  // (a gather of rank 3: the 2 x 2 matrices are too small to tile).
  Ints perm2 = {0, 1, 2, 3, 4, 5, 6, 7, 9, 8};
  ASSERT_TRUE(kernels::plan_transpose(dims, perm2, &plan));
  ASSERT_EQ(plan.kind, TransposePlan::Kind::kGeneric);
  EXPECT_EQ(plan.gather.rank, 3);
  EXPECT_EQ(plan.gather.dims[0], 256);
}

// ---- slice, pad and their gradients --------------------------------------------------

struct SliceCase {
  Shape s;
  Ints begin, size;
};

const std::vector<SliceCase>& slice_cases() {
  static const std::vector<SliceCase> cases = {
      {{7}, {2}, {-1}},
      {{7}, {0}, {7}},
      {{7}, {6}, {1}},
      {{7}, {7}, {0}},  // empty, at the end
      {{3, 5}, {1, 0}, {2, -1}},
      {{3, 5}, {0, 4}, {3, 1}},
      {{4, 1, 6}, {0, 0, 1}, {4, 1, 4}},
      {{2, 3, 5}, {1, 1, 0}, {1, 2, -1}},
      {{2, 3, 4, 5, 3}, {1, 0, 2, 1, 0}, {1, -1, 2, 3, -1}},
      {{2, 3, 4, 5, 3}, {0, 1, 0, 0, 2}, {-1, 1, -1, -1, 1}},
      {{0, 4}, {0, 1}, {0, 2}},
      {{5, 6}, {0, 0}, {5, 6}},
      {{}, {}, {}},
  };
  return cases;
}

Ints resolve(const SliceCase& c) {
  Ints box = c.size;
  for (size_t i = 0; i < box.size(); ++i)
    if (box[i] < 0) box[i] = c.s[static_cast<int>(i)] - c.begin[i];
  return box;
}

TEST(ArrayIndex, Slice) {
  uint64_t seed = 1000;
  for (const SliceCase& c : slice_cases())
    for (DType dt : {DType::F32, DType::I64, DType::Bool}) {
      Tensor x = random_input(dt, c.s, seed++);
      Tensor want = cpu_run1({x}, [&](const auto& in) { return ops::slice(in[0], c.begin, c.size); });
      const Ints box = resolve(c);
      BoxMap m;
      ASSERT_TRUE(kernels::make_box_map(c.s.dims(), c.begin, box, &m));
      expect_same(emulate_box_gather(m, x, Shape(box)), want,
                  "slice " + c.s.to_string() + " begin " + str(c.begin) + " size " + str(c.size));
    }
}

TEST(ArrayIndex, SliceGrad) {
  uint64_t seed = 2000;
  for (const SliceCase& c : slice_cases()) {
    const Ints box = resolve(c);
    Tensor g = random_input(DType::F64, Shape(box), seed++);
    Tensor like = random_input(DType::F64, c.s, seed++);
    Tensor want = cpu_run1({g, like}, [&](const auto& in) {
      return ops::slice_grad(in[0], in[1], c.begin, c.size);
    });
    BoxMap m;
    ASSERT_TRUE(kernels::make_box_map(c.s.dims(), c.begin, box, &m));
    expect_same(emulate_box_pad<double>(m, g, c.s, 0.0), want,
                "slice_grad " + c.s.to_string() + " begin " + str(c.begin));
  }
}

struct PadCase {
  Shape s;
  Ints p;  // before_0, after_0, ...
  double value;
};

const std::vector<PadCase>& pad_cases() {
  static const std::vector<PadCase> cases = {
      {{7}, {0, 0}, 1},
      {{7}, {2, 3}, -1},
      {{3, 5}, {1, 2, 0, 3}, 0},
      {{3, 5}, {0, 0, 4, 0}, 2},
      {{2, 1, 3}, {0, 0, 2, 0, 1, 1}, 0.5},
      {{2, 1, 3, 1, 2}, {1, 0, 0, 2, 0, 0, 1, 1, 0, 1}, 3},
      {{0, 3}, {1, 1, 0, 0}, 7},  // empty input: all value
      {{2, 0}, {0, 0, 1, 2}, 7},
      {{}, {}, 0},
  };
  return cases;
}

Ints padded_dims(const PadCase& c, Ints* before) {
  Ints dims;
  for (int i = 0; i < c.s.rank(); ++i) {
    before->push_back(c.p[static_cast<size_t>(2 * i)]);
    dims.push_back(c.s[i] + c.p[static_cast<size_t>(2 * i)] + c.p[static_cast<size_t>(2 * i + 1)]);
  }
  return dims;
}

std::vector<std::pair<int64_t, int64_t>> pairs(const Ints& p) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t i = 0; i + 1 < p.size(); i += 2) out.push_back({p[i], p[i + 1]});
  return out;
}

TEST(ArrayIndex, Pad) {
  uint64_t seed = 3000;
  for (const PadCase& c : pad_cases())
    for (DType dt : {DType::F32, DType::I32, DType::Bool}) {
      Tensor x = random_input(dt, c.s, seed++);
      Tensor want = cpu_run1({x}, [&](const auto& in) { return ops::pad(in[0], pairs(c.p), c.value); });
      Ints before;
      const Ints dims = padded_dims(c, &before);
      BoxMap m;
      ASSERT_TRUE(kernels::make_box_map(dims, before, c.s.dims(), &m));
      visit_dtype(dt, "pad", [&](auto zero) {
        using T = decltype(zero);
        expect_same(emulate_box_pad<T>(m, x, Shape(dims), static_cast<T>(c.value)), want,
                    "pad " + c.s.to_string() + " paddings " + str(c.p) + " " + dtype_name(dt));
      });
    }
}

TEST(ArrayIndex, PadGrad) {
  uint64_t seed = 4000;
  for (const PadCase& c : pad_cases()) {
    Ints before;
    const Ints dims = padded_dims(c, &before);
    Tensor g = random_input(DType::F32, Shape(dims), seed++);
    Tensor like = random_input(DType::F32, c.s, seed++);
    Tensor want = cpu_run1({g, like}, [&](const auto& in) { return ops::pad_grad(in[0], in[1], c.p); });
    BoxMap m;
    ASSERT_TRUE(kernels::make_box_map(dims, before, c.s.dims(), &m));
    expect_same(emulate_box_gather(m, g, c.s), want, "pad_grad " + c.s.to_string() + " paddings " + str(c.p));
  }
}

TEST(ArrayIndex, BoxMergesDims) {
  BoxMap m;
  // Trailing dims taken whole merge into the sliced dim before them.
  ASSERT_TRUE(kernels::make_box_map({4, 5, 6, 7}, {1, 2, 0, 0}, {2, 3, 6, 7}, &m));
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.big[1], 5 * 6 * 7);
  EXPECT_EQ(m.begin[1], 2 * 6 * 7);
  EXPECT_EQ(m.box[1], 3 * 6 * 7);
  // Nine dims each cut cannot merge.
  EXPECT_FALSE(kernels::make_box_map(Ints(9, 3), Ints(9, 1), Ints(9, 1), &m));
}

// ---- concat and split ------------------------------------------------------------------

struct ConcatCase {
  std::vector<Shape> parts;
  int64_t axis;
};

TEST(ArrayIndex, ConcatSplitSplitLike) {
  const std::vector<ConcatCase> cases = {
      {{{2, 3}, {2, 1}, {2, 0}, {2, 4}}, 1},
      {{{3, 2, 5}, {1, 2, 5}}, 0},
      {{{3, 2, 5}, {3, 2, 1}, {3, 2, 3}}, -1},
      {{{3, 1, 5}, {3, 4, 5}, {3, 2, 5}}, 1},
      {{{7}, {1}, {5}}, 0},
      {{{2, 3, 1, 2, 3}, {2, 3, 4, 2, 3}}, 2},
      {{{0, 3}, {0, 2}}, 1},
  };
  uint64_t seed = 5000;
  for (const ConcatCase& c : cases)
    for (DType dt : {DType::F32, DType::I64, DType::Bool}) {
      std::vector<Tensor> xs;
      for (const Shape& s : c.parts) xs.push_back(random_input(dt, s, seed++));
      const std::string what = "concat of " + std::to_string(c.parts.size()) + " first " +
                               c.parts[0].to_string() + " axis " + std::to_string(c.axis);
      Tensor want = cpu_run1(xs, [&](const auto& in) { return ops::concat(in, c.axis); });
      const int r = c.parts[0].rank();
      const int axis = static_cast<int>(c.axis < 0 ? c.axis + r : c.axis);
      Ints dims = c.parts[0].dims();
      dims[static_cast<size_t>(axis)] = 0;
      for (const Shape& s : c.parts) dims[static_cast<size_t>(axis)] += s[axis];
      // Concat: one scatter per input.
      Tensor got = poisoned(dt, Shape(dims));
      int64_t offset = 0;
      for (const Tensor& x : xs) {
        const BoxMap m = kernels::make_axis_box_map(dims, axis, offset, x.dim(axis));
        with_elem(dtype_size(dt), [&](auto e) {
          using E = decltype(e);
          for (int64_t i = 0; i < x.num_elements(); ++i)
            kernels::box_scatter_element(m, static_cast<const E*>(x.raw_data()), static_cast<E*>(got.raw_data()), i);
        });
        offset += x.dim(axis);
      }
      expect_same(got, want, what);
      // Split by sizes and SplitLike: back to the parts.
      Ints sizes;
      for (const Shape& s : c.parts) sizes.push_back(s[axis]);
      std::vector<Tensor> split_want = cpu_run({want}, [&](const auto& in) { return ops::split(in[0], sizes, c.axis); });
      std::vector<Tensor> like_in = {want};
      like_in.insert(like_in.end(), xs.begin(), xs.end());
      std::vector<Tensor> like_want = cpu_run(like_in, [&](const auto& in) {
        return ops::split_like(in[0], std::vector<Output>(in.begin() + 1, in.end()), c.axis);
      });
      offset = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const BoxMap m = kernels::make_axis_box_map(dims, axis, offset, sizes[i]);
        Tensor part = emulate_box_gather(m, want, xs[i].shape());
        expect_same(part, xs[i], what + ": split part " + std::to_string(i));
        expect_same(part, split_want[i], what + ": split (CPU) part " + std::to_string(i));
        expect_same(part, like_want[i], what + ": split_like (CPU) part " + std::to_string(i));
        offset += sizes[i];
      }
    }
  // Split into equal parts with a negative axis.
  Tensor x = random_input(DType::I32, {4, 6, 3}, 77);
  std::vector<Tensor> want = cpu_run({x}, [&](const auto& in) { return ops::split(in[0], int64_t{3}, -2); });
  for (int64_t i = 0; i < 3; ++i) {
    const BoxMap m = kernels::make_axis_box_map({4, 6, 3}, 1, 2 * i, 2);
    expect_same(emulate_box_gather(m, x, {4, 2, 3}), want[static_cast<size_t>(i)], "split num 3");
  }
}

// ---- gather, gather_grad, one_hot ---------------------------------------------------------

struct GatherCase {
  Shape params;
  Shape idx_shape;
  std::vector<int64_t> idx;
  int64_t axis;
};

const std::vector<GatherCase>& gather_cases() {
  static const std::vector<GatherCase> cases = {
      {{5, 3}, {4}, {4, 1, 4, 0}, 0},
      {{2, 4, 3}, {2, 2}, {3, 0, 3, 2}, 1},
      {{2, 4, 3}, {5}, {2, 2, 0, 1, 2}, -1},
      {{2, 4, 3}, {}, {3}, 1},  // scalar index: the axis disappears
      {{7}, {3, 1}, {6, 0, 6}, 0},
      {{3, 5, 2, 1}, {2, 3}, {4, 4, 1, 0, 2, 3}, 1},
      {{3, 5}, {0}, {}, 1},  // no indices
  };
  return cases;
}

template <typename I>
Tensor index_tensor(const GatherCase& c) {
  std::vector<I> v(c.idx.begin(), c.idx.end());
  return Tensor::from_vector<I>(c.idx_shape, v);
}

GatherDims gather_dims(const Shape& p, int64_t axis_attr, int64_t ni) {
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + p.rank() : axis_attr);
  GatherDims g;
  g.outer = 1;
  g.inner = 1;
  for (int d = 0; d < axis; ++d) g.outer *= p[d];
  for (int d = axis + 1; d < p.rank(); ++d) g.inner *= p[d];
  g.n = p[axis];
  g.ni = ni;
  return g;
}

template <typename I>
void check_gather(DType dt, const GatherCase& c, uint64_t seed) {
  Tensor params = random_input(dt, c.params, seed);
  Tensor idx = index_tensor<I>(c);
  Tensor want = cpu_run1({params, idx}, [&](const auto& in) { return ops::gather(in[0], in[1], c.axis); });
  const GatherDims g = gather_dims(c.params, c.axis, idx.num_elements());
  Tensor got = poisoned(dt, want.shape());
  with_elem(dtype_size(dt), [&](auto e) {
    using E = decltype(e);
    for (int64_t i = 0; i < got.num_elements(); ++i)
      kernels::gather_element(g, static_cast<const E*>(params.raw_data()), idx.data<I>(),
                              static_cast<E*>(got.raw_data()), i);
  });
  expect_same(got, want, "gather " + c.params.to_string() + " axis " + std::to_string(c.axis) +
                             " indices " + dtype_name(dtype_of<I>));
}

TEST(ArrayIndex, Gather) {
  uint64_t seed = 6000;
  for (const GatherCase& c : gather_cases())
    for (DType dt : {DType::F32, DType::I64, DType::Bool}) {
      check_gather<int32_t>(dt, c, seed++);
      check_gather<int64_t>(dt, c, seed++);
    }
}

TEST(ArrayIndex, GatherOutOfRangeGivesZeros) {
  // The CPU kernel rejects these indices; the GPU element function gives zeros.
  const std::vector<float> params = {1, 2, 3, 4, 5, 6};  // [3, 2]
  const std::vector<int32_t> idx = {2, -1, 3, 0};
  const GatherDims g{1, 3, 4, 2};
  std::vector<float> out(8, -7.f);
  for (int64_t i = 0; i < 8; ++i) kernels::gather_element(g, params.data(), idx.data(), out.data(), i);
  EXPECT_EQ(out, (std::vector<float>{5, 6, 0, 0, 0, 0, 1, 2}));
  // GatherGrad skips them.
  const std::vector<float> grad = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> acc(6, 0.f);
  for (int64_t i = 0; i < 8; ++i)
    kernels::gather_grad_element(g, grad.data(), idx.data(), acc.data(), i, [](float* p, float v) { *p += v; });
  EXPECT_EQ(acc, (std::vector<float>{7, 8, 0, 0, 1, 2}));
}

template <typename T, typename I>
void check_gather_grad(const GatherCase& c, uint64_t seed) {
  Tensor idx = index_tensor<I>(c);
  Tensor gathered_shape = cpu_run1({random_input(dtype_of<T>, c.params, seed), idx},
                                   [&](const auto& in) { return ops::gather(in[0], in[1], c.axis); });
  Tensor grad = random_input(dtype_of<T>, gathered_shape.shape(), seed + 1);
  Tensor like = random_input(dtype_of<T>, c.params, seed + 2);
  Tensor want = cpu_run1({grad, idx, like}, [&](const auto& in) {
    return ops::gather_grad(in[0], in[1], in[2], c.axis);
  });
  const GatherDims g = gather_dims(c.params, c.axis, idx.num_elements());
  Tensor got = zeros(dtype_of<T>, c.params);  // the kernel's memset
  for (int64_t i = 0; i < grad.num_elements(); ++i)
    kernels::gather_grad_element(g, grad.data<T>(), idx.data<I>(), got.data<T>(), i,
                                 [](T* p, T v) { *p += v; });
  expect_close(got, want, "gather_grad " + c.params.to_string() + " axis " + std::to_string(c.axis));
}

TEST(ArrayIndex, GatherGrad) {
  uint64_t seed = 7000;
  for (const GatherCase& c : gather_cases()) {
    check_gather_grad<float, int32_t>(c, seed += 3);
    check_gather_grad<double, int64_t>(c, seed += 3);
    check_gather_grad<int32_t, int64_t>(c, seed += 3);
    check_gather_grad<int64_t, int32_t>(c, seed += 3);
  }
}

template <typename T, typename I>
void check_one_hot(const Shape& s, const std::vector<int64_t>& idx, int64_t depth, double on, double off) {
  Tensor indices = Tensor::from_vector<I>(s, std::vector<I>(idx.begin(), idx.end()));
  Tensor want = cpu_run1({indices}, [&](const auto& in) {
    return ops::one_hot(in[0], depth, on, off, dtype_of<T>);
  });
  Ints dims = s.dims();
  dims.push_back(depth);
  Tensor got = poisoned(dtype_of<T>, Shape(dims));
  for (int64_t i = 0; i < got.num_elements(); ++i)
    kernels::one_hot_element(depth, indices.data<I>(), static_cast<T>(on), static_cast<T>(off), got.data<T>(), i);
  expect_same(got, want, "one_hot " + s.to_string() + " depth " + std::to_string(depth));
}

TEST(ArrayIndex, OneHot) {
  // Out-of-range indices (-1, depth, large) give rows of off_value on both devices.
  const std::vector<int64_t> idx = {0, 9, 3, -1, 10, 5, 1000, 2};
  check_one_hot<float, int32_t>({8}, idx, 10, 1, 0);
  check_one_hot<double, int64_t>({2, 4}, idx, 10, 2.5, -1);
  check_one_hot<int64_t, int32_t>({4, 2}, idx, 10, 7, 3);
  check_one_hot<int32_t, int64_t>({8}, idx, 1, 1, 0);
  check_one_hot<bool, int64_t>({2, 2, 2}, idx, 6, 1, 0);
  check_one_hot<float, int32_t>({1}, {4}, 7, 1, 0);
}

// ---- tile and tile_grad --------------------------------------------------------------------

struct TileCase {
  Shape s;
  Ints m;
};

const std::vector<TileCase>& tile_cases() {
  static const std::vector<TileCase> cases = {
      {{2, 3}, {2, 1}},
      {{3, 1, 2}, {1, 3, 2}},
      {{}, {}},
      {{5}, {1}},
      {{5}, {3}},
      {{2, 3, 4}, {1, 1, 2}},
      {{2, 3, 4}, {3, 1, 1}},
      {{2, 3, 1, 2, 1}, {2, 1, 3, 1, 2}},
      {{1, 3}, {70, 1}},
      {{2, 3}, {0, 2}},  // empty output
      {{0, 3}, {2, 2}},
  };
  return cases;
}

TEST(ArrayIndex, Tile) {
  uint64_t seed = 8000;
  for (const TileCase& c : tile_cases())
    for (DType dt : {DType::F32, DType::I64, DType::Bool}) {
      Tensor x = random_input(dt, c.s, seed++);
      Tensor want = cpu_run1({x}, [&](const auto& in) { return ops::tile(in[0], c.m); });
      TileMap m;
      ASSERT_TRUE(kernels::make_tile_map(c.s.dims(), c.m, &m));
      Tensor got = poisoned(dt, want.shape());
      with_elem(dtype_size(dt), [&](auto e) {
        using E = decltype(e);
        for (int64_t i = 0; i < got.num_elements(); ++i)
          kernels::tile_element(m, static_cast<const E*>(x.raw_data()), static_cast<E*>(got.raw_data()), i);
      });
      expect_same(got, want, "tile " + c.s.to_string() + " by " + str(c.m));
    }
}

template <typename T>
void check_tile_grad(const TileCase& c, uint64_t seed) {
  Ints gd;
  int64_t copies = 1;
  for (int i = 0; i < c.s.rank(); ++i) {
    gd.push_back(c.s[i] * c.m[static_cast<size_t>(i)]);
    copies *= c.m[static_cast<size_t>(i)];
  }
  Tensor g = random_input(dtype_of<T>, Shape(gd), seed);
  Tensor like = random_input(dtype_of<T>, c.s, seed + 1);
  Tensor want = cpu_run1({g, like}, [&](const auto& in) { return ops::tile_grad(in[0], in[1], c.m); });
  const std::string what = "tile_grad " + c.s.to_string() + " by " + str(c.m);
  TileMap m;
  ASSERT_TRUE(kernels::make_tile_map(c.s.dims(), c.m, &m));
  // The per-output sum (the kernel zero-fills instead when there are no copies).
  Tensor sum = copies == 0 ? zeros(dtype_of<T>, c.s) : poisoned(dtype_of<T>, c.s);
  if (copies > 0)
    for (int64_t i = 0; i < sum.num_elements(); ++i)
      kernels::tile_grad_sum_element(m, copies, g.data<T>(), sum.data<T>(), i);
  expect_close(sum, want, what + " (sum)");
  // The atomic scatter-add over g.
  Tensor scat = zeros(dtype_of<T>, c.s);
  for (int64_t i = 0; i < g.num_elements(); ++i)
    kernels::tile_grad_scatter_element(m, g.data<T>(), scat.data<T>(), i, [](T* p, T v) { *p += v; });
  expect_close(scat, want, what + " (scatter)");
}

TEST(ArrayIndex, TileGrad) {
  uint64_t seed = 9000;
  for (const TileCase& c : tile_cases()) {
    check_tile_grad<float>(c, seed += 2);
    check_tile_grad<double>(c, seed += 2);
    check_tile_grad<int32_t>(c, seed += 2);
    check_tile_grad<int64_t>(c, seed += 2);
  }
}

TEST(ArrayIndex, TileMergesDims) {
  TileMap m;
  ASSERT_TRUE(kernels::make_tile_map({2, 3, 4, 5}, {2, 1, 3, 1}, &m));
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.in[0], 6);
  EXPECT_EQ(m.mult[0], 2);
  EXPECT_EQ(m.in[1], 20);
  EXPECT_EQ(m.mult[1], 3);
}

}  // namespace
}  // namespace spire
