// Gradient-check cases for the shape and indexing ops (core/ops/array_ops.cc)
// and their gradient helper ops (ReshapeLike, SplitLike, SliceGrad,
// PadGrad, GatherGrad, TileGrad). Products with another input or with
// themselves make the second-order checks non-trivial.
#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;

Output idx32(const Shape& s, const std::vector<int32_t>& v) {
  return ops::constant(Tensor::from_vector<int32_t>(s, v));
}
Output idx64(const Shape& s, const std::vector<int64_t>& v) {
  return ops::constant(Tensor::from_vector<int64_t>(s, v));
}

SPIRE_GRAD_CASE(reshape, {"Reshape", "{3,1,2} -> {2,-1}", {{3, 1, 2}}, [](const In& x) -> Outs {
  Output r = ops::reshape(x[0], {2, -1});
  return {ops::mul(r, r)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(reshape_like, {"ReshapeLike", "{2,3} like {3,2}", {{2, 3}, {3, 2}}, [](const In& x) -> Outs {
  return {ops::mul(ops::reshape_like(x[0], x[1]), x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(transpose, {"Transpose", "perm {2,0,1}", {{2, 3, 4}}, [](const In& x) -> Outs {
  Output t = ops::transpose(x[0], {2, 0, 1});
  return {ops::mul(t, t)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(transpose_default, {"Transpose", "reverse {3,1,2}", {{3, 1, 2}, {2, 1, 3}}, [](const In& x) -> Outs {
  return {ops::mul(ops::transpose(x[0]), x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(expand_dims, {"ExpandDims", "axis -1", {{3, 2}, {3, 1, 1}}, [](const In& x) -> Outs {
  return {ops::mul(ops::expand_dims(x[0], -2), x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(squeeze, {"Squeeze", "axis 1 of {3,1,2}", {{3, 1, 2}}, [](const In& x) -> Outs {
  Output s = ops::squeeze(x[0], {1});
  return {ops::mul(s, s)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(concat, {"Concat", "axis 1, three inputs", {{2, 3}, {2, 1}, {2, 2}}, [](const In& x) -> Outs {
  Output y = ops::concat({x[0], x[1], x[2]}, 1);
  return {ops::mul(y, y)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(concat_same, {"Concat", "axis 0, same input twice", {{1, 2}}, [](const In& x) -> Outs {
  return {ops::concat({x[0], x[0]}, 0)}; }});
SPIRE_GRAD_CASE(split_like, {"SplitLike", "{5,2} like {2,2},{3,2}", {{5, 2}, {2, 2}, {3, 2}}, [](const In& x) -> Outs {
  auto p = ops::split_like(x[0], {x[1], x[2]}, 0);
  return {ops::mul(p[0], x[1]), ops::mul(p[1], p[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(split_num, {"Split", "2 equal parts, only the first used", {{4, 3}}, [](const In& x) -> Outs {
  auto p = ops::split(x[0], 2, 0);
  return {ops::mul(p[0], p[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(split_sizes, {"Split", "sizes {1,-1} on axis -1", {{3, 4}}, [](const In& x) -> Outs {
  auto p = ops::split(x[0], std::vector<int64_t>{1, -1}, -1);
  return {ops::mul(p[0], p[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(slice, {"Slice", "begin {1,1} size {2,-1}", {{3, 4}}, [](const In& x) -> Outs {
  Output s = ops::slice(x[0], {1, 1}, {2, -1});
  return {ops::mul(s, s)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(slice_grad, {"SliceGrad", "{2,2} into {3,4}", {{2, 2}, {3, 4}}, [](const In& x) -> Outs {
  return {ops::mul(ops::slice_grad(x[0], x[1], {1, 1}, {2, 2}), x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(pad, {"Pad", "{3,1,2} value 0.5", {{3, 1, 2}}, [](const In& x) -> Outs {
  Output p = ops::pad(x[0], {{1, 0}, {0, 2}, {1, 1}}, 0.5);
  return {ops::mul(p, p)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(pad_grad, {"PadGrad", "{4,6} to {2,3}", {{4, 6}, {2, 3}}, [](const In& x) -> Outs {
  return {ops::mul(ops::pad_grad(x[0], x[1], {1, 1, 2, 1}), x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(gather_rows, {"Gather", "repeated rows, axis 0", {{5, 3}}, [](const In& x) -> Outs {
  Output y = ops::gather(x[0], idx32({4}, {4, 1, 4, 0}));
  return {ops::mul(y, y)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(gather_axis1, {"Gather", "2-D indices, axis 1", {{2, 4, 1}}, [](const In& x) -> Outs {
  return {ops::gather(x[0], idx64({2, 2}, {3, 0, 3, 2}), 1)}; }});
SPIRE_GRAD_CASE(gather_grad, {"GatherGrad", "scatter into {4,3}", {{3, 3}, {4, 3}}, [](const In& x) -> Outs {
  return {ops::mul(ops::gather_grad(x[0], idx32({3}, {2, 0, 2}), x[1], 0), x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(tile, {"Tile", "{2,3} x {2,1}", {{2, 3}}, [](const In& x) -> Outs {
  Output t = ops::tile(x[0], {2, 1});
  return {ops::mul(t, t)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(tile_3d, {"Tile", "{3,1,2} x {1,3,2}", {{3, 1, 2}}, [](const In& x) -> Outs {
  return {ops::tile(x[0], {1, 3, 2})}; }});
SPIRE_GRAD_CASE(tile_grad, {"TileGrad", "{4,6} to {2,3}", {{4, 6}, {2, 3}}, [](const In& x) -> Outs {
  return {ops::mul(ops::tile_grad(x[0], x[1], {2, 2}), x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(broadcast_to, {"BroadcastTo", "{3,1} to {2,3,4}", {{3, 1}}, [](const In& x) -> Outs {
  Output b = ops::broadcast_to(x[0], {2, 3, 4});
  return {ops::mul(b, b)}; }, nullptr, 2e-6, true});

}  // namespace
}  // namespace spire::testing
