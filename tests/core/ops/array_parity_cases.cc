// CPU/GPU parity cases for the shape and indexing ops (core/ops/array_ops.cc,
// CUDA kernels in kernels/cuda/array_kernels.cu) beyond what the gradient
// cases in array_ops_cases.cc cover: integer and bool dtypes, odd and large
// sizes (1, 7, 1000003 elements), empty dims, edge attrs (slice to the end,
// zero paddings, negative axes), every transpose path (view, tiled 2-D,
// batched tiled, strided gather), gather with i32 and i64 indices, OneHot
// (which has no gradient) and both TileGrad paths (per-output sums and the
// atomic scatter for few outputs with many copies). Cases whose inputs all
// have explicit dtypes run once (dtypes {F32}). Gather indices are drawn in
// range (out of range is an error on the CPU but zeros on the GPU); OneHot
// indices include out-of-range values (a row of off_value on both devices).
#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;
constexpr DType F32 = DType::F32, I32 = DType::I32, I64 = DType::I64, B = DType::Bool;
const std::vector<DType> kOnce = {DType::F32};

Output idx32(const Shape& s, const std::vector<int32_t>& v) {
  return ops::constant(Tensor::from_vector<int32_t>(s, v));
}

// ---- views -------------------------------------------------------------------------------

SPIRE_PARITY_CASE(ap_reshape_i32, {"Reshape", "i32 {7,3} -> {3,-1}", {{{7, 3}, I32, -50, 50}},
  [](const In& x) -> Outs { return {ops::reshape(x[0], {3, -1})}; }, kOnce});
SPIRE_PARITY_CASE(ap_reshape_prime, {"Reshape", "{1000003} -> {1000003,1}", {{{1000003}}},
  [](const In& x) -> Outs { return {ops::reshape(x[0], {-1, 1})}; }});
SPIRE_PARITY_CASE(ap_reshape_like_bool, {"ReshapeLike", "bool {2,3} like {3,1,2}", {{{2, 3}, B, 0, 1}, {{3, 1, 2}, B, 0, 1}},
  [](const In& x) -> Outs { return {ops::reshape_like(x[0], x[1])}; }, kOnce});
SPIRE_PARITY_CASE(ap_expand_dims_i64, {"ExpandDims", "i64 axis -1", {{{5, 7}, I64, -50, 50}},
  [](const In& x) -> Outs { return {ops::expand_dims(x[0], -1)}; }, kOnce});
SPIRE_PARITY_CASE(ap_squeeze_bool, {"Squeeze", "bool all size-1 dims", {{{1, 7, 1}, B, 0, 1}},
  [](const In& x) -> Outs { return {ops::squeeze(x[0])}; }, kOnce});

// ---- transpose ---------------------------------------------------------------------------

SPIRE_PARITY_CASE(ap_transpose_2d, {"Transpose", "[33,65] perm (1,0) (tiled)", {{{33, 65}}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {1, 0})}; }});
SPIRE_PARITY_CASE(ap_transpose_0213, {"Transpose", "[2,3,1025,7] perm (0,2,1,3)", {{{2, 3, 1025, 7}}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {0, 2, 1, 3})}; }});
SPIRE_PARITY_CASE(ap_transpose_3210, {"Transpose", "[2,3,1025,7] perm (3,2,1,0)", {{{2, 3, 1025, 7}}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {3, 2, 1, 0})}; }});
SPIRE_PARITY_CASE(ap_transpose_0132_narrow, {"Transpose", "[2,3,1025,7] perm (0,1,3,2) (narrow: gather)", {{{2, 3, 1025, 7}}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {0, 1, 3, 2})}; }});
SPIRE_PARITY_CASE(ap_transpose_0132_tiled, {"Transpose", "[2,3,1025,9] perm (0,1,3,2) (batched tiles)", {{{2, 3, 1025, 9}}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {0, 1, 3, 2})}; }});
SPIRE_PARITY_CASE(ap_transpose_last_first, {"Transpose", "[8,9,10] perm (2,0,1) (moves the last dim)", {{{8, 9, 10}}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {2, 0, 1})}; }});
SPIRE_PARITY_CASE(ap_transpose_merged, {"Transpose", "[4,5,33,3,8] perm (0,3,4,1,2) (merged, batched)", {{{4, 5, 33, 3, 8}}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {0, 3, 4, 1, 2})}; }});
SPIRE_PARITY_CASE(ap_transpose_big, {"Transpose", "[1000,1001] perm (1,0)", {{{1000, 1001}}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {1, 0})}; }});
SPIRE_PARITY_CASE(ap_transpose_i32, {"Transpose", "i32 [33,65] perm (1,0)", {{{33, 65}, I32, -50, 50}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {1, 0})}; }, kOnce});
SPIRE_PARITY_CASE(ap_transpose_i64, {"Transpose", "i64 [2,3,1025,9] perm (0,1,3,2)", {{{2, 3, 1025, 9}, I64, -50, 50}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {0, 1, 3, 2})}; }, kOnce});
SPIRE_PARITY_CASE(ap_transpose_i64_3210, {"Transpose", "i64 [2,3,1025,7] perm (3,2,1,0)", {{{2, 3, 1025, 7}, I64, -50, 50}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {3, 2, 1, 0})}; }, kOnce});
SPIRE_PARITY_CASE(ap_transpose_bool, {"Transpose", "bool [40,50] perm (1,0) and [7,40,3] perm (1,2,0)",
  {{{40, 50}, B, 0, 1}, {{7, 40, 3}, B, 0, 1}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {1, 0}), ops::transpose(x[1], {1, 2, 0})}; }, kOnce});
SPIRE_PARITY_CASE(ap_transpose_view, {"Transpose", "[1,5,1] perm (2,1,0) (a view) and empty [0,3]", {{{1, 5, 1}}, {{0, 3}}},
  [](const In& x) -> Outs { return {ops::transpose(x[0], {2, 1, 0}), ops::transpose(x[1], {1, 0})}; }});

// ---- concat and split --------------------------------------------------------------------

SPIRE_PARITY_CASE(ap_concat_i32, {"Concat", "i32 axis 1 with an empty part",
  {{{3, 2}, I32, -50, 50}, {{3, 0}, I32, -50, 50}, {{3, 5}, I32, -50, 50}},
  [](const In& x) -> Outs { return {ops::concat({x[0], x[1], x[2]}, 1)}; }, kOnce});
SPIRE_PARITY_CASE(ap_concat_bool, {"Concat", "bool axis 0", {{{1, 3, 2}, B, 0, 1}, {{4, 3, 2}, B, 0, 1}},
  [](const In& x) -> Outs { return {ops::concat({x[0], x[1]}, 0)}; }, kOnce});
SPIRE_PARITY_CASE(ap_concat_i64_neg, {"Concat", "i64 axis -1, odd sizes", {{{7, 3, 1}, I64, -50, 50}, {{7, 3, 4}, I64, -50, 50}},
  [](const In& x) -> Outs { return {ops::concat({x[0], x[1]}, -1)}; }, kOnce});
SPIRE_PARITY_CASE(ap_concat_big, {"Concat", "{1000003} and {7} and {1}", {{{1000003}}, {{7}}, {{1}}},
  [](const In& x) -> Outs { return {ops::concat({x[0], x[1], x[2]}, 0)}; }});
SPIRE_PARITY_CASE(ap_split_i64, {"Split", "i64 sizes {1,-1,3} on axis -1", {{{4, 3, 9}, I64, -50, 50}},
  [](const In& x) -> Outs { return ops::split(x[0], std::vector<int64_t>{1, -1, 3}, -1); }, kOnce});
SPIRE_PARITY_CASE(ap_split_bool, {"Split", "bool 3 equal parts on axis 1", {{{2, 9, 5}, B, 0, 1}},
  [](const In& x) -> Outs { return ops::split(x[0], int64_t{3}, 1); }, kOnce});
SPIRE_PARITY_CASE(ap_split_big, {"Split", "{1000003,2} sizes {1000000,3}", {{{1000003, 2}}},
  [](const In& x) -> Outs { return ops::split(x[0], std::vector<int64_t>{1000000, 3}, 0); }});
SPIRE_PARITY_CASE(ap_split_like_i32, {"SplitLike", "i32 axis 0 into 1, 0 and 6 rows",
  {{{7, 3}, I32, -50, 50}, {{1, 3}, I32}, {{0, 3}, I32}, {{6, 3}, I32}},
  [](const In& x) -> Outs { return ops::split_like(x[0], {x[1], x[2], x[3]}, 0); }, kOnce});

// ---- slice and pad -----------------------------------------------------------------------

SPIRE_PARITY_CASE(ap_slice_i32, {"Slice", "i32 rank 5 with sizes to the end", {{{2, 3, 4, 5, 3}, I32, -50, 50}},
  [](const In& x) -> Outs { return {ops::slice(x[0], {1, 0, 2, 1, 0}, {1, -1, 2, 3, -1})}; }, kOnce});
SPIRE_PARITY_CASE(ap_slice_bool, {"Slice", "bool last column, and empty at the end", {{{5, 7}, B, 0, 1}},
  [](const In& x) -> Outs { return {ops::slice(x[0], {0, 6}, {-1, 1}), ops::slice(x[0], {5, 0}, {0, -1})}; }, kOnce});
SPIRE_PARITY_CASE(ap_slice_big, {"Slice", "{1000003} from 5 to the end", {{{1000003}}},
  [](const In& x) -> Outs { return {ops::slice(x[0], {5}, {-1})}; }});
SPIRE_PARITY_CASE(ap_slice_grad_i64, {"SliceGrad", "i64 {2,1,3} into {3,4,5}", {{{2, 1, 3}, I64, -50, 50}, {{3, 4, 5}, I64}},
  [](const In& x) -> Outs { return {ops::slice_grad(x[0], x[1], {1, 2, 1}, {2, 1, 3})}; }, kOnce});
SPIRE_PARITY_CASE(ap_slice_grad_f, {"SliceGrad", "rank 4 to the end", {{{2, 3, 5, 6}}, {{3, 3, 7, 6}}},
  [](const In& x) -> Outs { return {ops::slice_grad(x[0], x[1], {1, 0, 2, 0}, {-1, -1, 5, -1})}; }});
SPIRE_PARITY_CASE(ap_pad_i32, {"Pad", "i32 value 3", {{{3, 5}, I32, -50, 50}},
  [](const In& x) -> Outs { return {ops::pad(x[0], {{1, 2}, {0, 3}}, 3)}; }, kOnce});
SPIRE_PARITY_CASE(ap_pad_bool, {"Pad", "bool value 1, rank 3", {{{2, 1, 3}, B, 0, 1}},
  [](const In& x) -> Outs { return {ops::pad(x[0], {{0, 0}, {2, 0}, {1, 1}}, 1)}; }, kOnce});
SPIRE_PARITY_CASE(ap_pad_i64_zero, {"Pad", "i64 paddings of 0 and an empty input", {{{4, 7}, I64, -50, 50}, {{0, 3}, I64}},
  [](const In& x) -> Outs { return {ops::pad(x[0], {{0, 0}, {0, 0}}), ops::pad(x[1], {{1, 1}, {0, 2}}, -4)}; }, kOnce});
SPIRE_PARITY_CASE(ap_pad_big, {"Pad", "{1000003} by (1,2) value -1", {{{1000003}}},
  [](const In& x) -> Outs { return {ops::pad(x[0], {{1, 2}}, -1)}; }});
SPIRE_PARITY_CASE(ap_pad_grad_i32, {"PadGrad", "i32 rank 5", {{{3, 1, 4, 3, 3}, I32, -50, 50}, {{2, 1, 3, 1, 2}, I32}},
  [](const In& x) -> Outs { return {ops::pad_grad(x[0], x[1], {1, 0, 0, 0, 0, 1, 0, 2, 1, 0})}; }, kOnce});

// ---- gather and one-hot ------------------------------------------------------------------

SPIRE_PARITY_CASE(ap_gather_i32_idx, {"Gather", "rows by i32 indices", {{{50, 7}}, {{300}, I32, 0, 49}},
  [](const In& x) -> Outs { return {ops::gather(x[0], x[1])}; }});
SPIRE_PARITY_CASE(ap_gather_i64_idx, {"Gather", "axis 1 by 2-D i64 indices", {{{3, 40, 5}}, {{6, 7}, I64, 0, 39}},
  [](const In& x) -> Outs { return {ops::gather(x[0], x[1], 1)}; }});
SPIRE_PARITY_CASE(ap_gather_last_axis, {"Gather", "axis -1, scalar index", {{{4, 3, 9}}},
  [](const In& x) -> Outs { return {ops::gather(x[0], ops::constant(Tensor::scalar<int64_t>(8)), -1)}; }});
SPIRE_PARITY_CASE(ap_gather_int_params, {"Gather", "i32 and i64 params", {{{9, 4}, I32, -50, 50}, {{2, 9, 3}, I64, -50, 50}, {{11}, I32, 0, 8}},
  [](const In& x) -> Outs { return {ops::gather(x[0], x[2]), ops::gather(x[1], x[2], 1)}; }, kOnce});
SPIRE_PARITY_CASE(ap_gather_bool, {"Gather", "bool params", {{{6, 5}, B, 0, 1}, {{4}, I64, 0, 5}},
  [](const In& x) -> Outs { return {ops::gather(x[0], x[1])}; }, kOnce});
SPIRE_PARITY_CASE(ap_gather_big, {"Gather", "{100003,7} by 5001 indices", {{{100003, 7}}, {{5001}, I32, 0, 100002}},
  [](const In& x) -> Outs { return {ops::gather(x[0], x[1])}; }});
// Sums of many repeated indices: atomic adds in any order.
SPIRE_PARITY_CASE(ap_gather_grad_f, {"GatherGrad", "many repeats", {{{500, 3}}, {{5, 3}}, {{500}, I32, 0, 4}},
  [](const In& x) -> Outs { return {ops::gather_grad(x[0], x[2], x[1], 0)}; }, {DType::F32, DType::F64}, 1e-4});
SPIRE_PARITY_CASE(ap_gather_grad_i64_idx, {"GatherGrad", "axis 1, i64 indices", {{{2, 6, 3}}, {{2, 4, 3}}, {{6}, I64, 0, 3}},
  [](const In& x) -> Outs { return {ops::gather_grad(x[0], x[2], x[1], 1)}; }, {DType::F32, DType::F64}, 1e-4});
SPIRE_PARITY_CASE(ap_gather_grad_int, {"GatherGrad", "i32 and i64",
  {{{40, 3}, I32, -50, 50}, {{5, 3}, I32}, {{3, 40}, I64, -50, 50}, {{3, 7}, I64}, {{40}, I32, 0, 4}},
  [](const In& x) -> Outs {
    return {ops::gather_grad(x[0], x[4], x[1], 0), ops::gather_grad(x[2], x[4], x[3], 1)}; }, kOnce});
SPIRE_PARITY_CASE(ap_one_hot_depth10, {"OneHot", "depth 10, i32 indices, f32", {{{37}, I32, 0, 9}},
  [](const In& x) -> Outs { return {ops::one_hot(x[0], 10)}; }, kOnce});
SPIRE_PARITY_CASE(ap_one_hot_i64, {"OneHot", "depth 10, i64 indices, i64/bool/f64, with out-of-range",
  {{{3, 5}, I64, -3, 12}},
  [](const In& x) -> Outs {
    return {ops::one_hot(x[0], 10, 7, -2, DType::I64), ops::one_hot(x[0], 10, 1, 0, DType::Bool),
            ops::one_hot(x[0], 10, 0.5, -0.25, DType::F64)}; }, kOnce});
SPIRE_PARITY_CASE(ap_one_hot_i32_out, {"OneHot", "depth 10, i32 indices with out-of-range, i32 output; constant indices",
  {{{2, 3}, I32, -1, 10}},
  [](const In& x) -> Outs {
    return {ops::one_hot(x[0], 10, 1, 0, DType::I32),
            ops::one_hot(idx32({2, 3}, {0, 9, 4, 4, -1, 10}), 10, 1, 0, DType::I32)}; }, kOnce});

// ---- tile --------------------------------------------------------------------------------

SPIRE_PARITY_CASE(ap_tile_i32, {"Tile", "i32 rank 5", {{{2, 3, 1, 2, 1}, I32, -50, 50}},
  [](const In& x) -> Outs { return {ops::tile(x[0], {2, 1, 3, 1, 2})}; }, kOnce});
SPIRE_PARITY_CASE(ap_tile_bool, {"Tile", "bool, and a scalar", {{{3, 1, 2}, B, 0, 1}, {{}, B, 0, 1}},
  [](const In& x) -> Outs { return {ops::tile(x[0], {1, 3, 2}), ops::tile(x[1], {})}; }, kOnce});
SPIRE_PARITY_CASE(ap_tile_big, {"Tile", "{1000003} x 2, and multiples 0", {{{1000003}}, {{2, 3}}},
  [](const In& x) -> Outs { return {ops::tile(x[0], {2}), ops::tile(x[1], {0, 2})}; }});
SPIRE_PARITY_CASE(ap_tile_grad_int, {"TileGrad", "i32 and i64",
  {{{4, 6}, I32, -50, 50}, {{2, 3}, I32}, {{3, 6, 2}, I64, -50, 50}, {{1, 3, 2}, I64}},
  [](const In& x) -> Outs {
    return {ops::tile_grad(x[0], x[1], {2, 2}), ops::tile_grad(x[2], x[3], {3, 2, 1})}; }, kOnce});
// Few outputs with many copies: the atomic scatter path.
SPIRE_PARITY_CASE(ap_tile_grad_atomic, {"TileGrad", "{4096,3} to {1,3}", {{{4096, 3}}, {{1, 3}}},
  [](const In& x) -> Outs { return {ops::tile_grad(x[0], x[1], {4096, 1})}; }, {DType::F32, DType::F64}, 1e-3});
SPIRE_PARITY_CASE(ap_tile_grad_big, {"TileGrad", "{3000009} to {1000003}", {{{3000009}}, {{1000003}}},
  [](const In& x) -> Outs { return {ops::tile_grad(x[0], x[1], {3})}; }});

}  // namespace
}  // namespace spire::testing
