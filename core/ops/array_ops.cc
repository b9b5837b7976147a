// Registrations of the shape and indexing ops (see array_ops.h): Reshape,
// Transpose, ExpandDims, Squeeze, Concat, Split, Slice, Pad, Gather, OneHot,
// Tile, BroadcastTo, and the helper ops their gradients use, which take a
// `like` input so they work with shapes known only at run time:
// ReshapeLike, SplitLike (gradient of Concat), SliceGrad, PadGrad,
// GatherGrad (scatter-add) and TileGrad. Each helper's gradient is the op it
// undoes, so second-order gradients work. Kernels:
// kernels/cpu/array_kernels.cc.
#include "core/ops/array_ops.h"

#include <algorithm>
#include <numeric>

#include "core/ops/math_ops.h"
#include "core/ops/op_util.h"
#include "core/ops/state_ops.h"

namespace spire::ops {

namespace {

using Grads = std::vector<Output>;
using Ints = std::vector<int64_t>;

// Adds the known dimensions a and b (-1 when either is unknown).
int64_t add_dims(int64_t a, int64_t b) { return a < 0 || b < 0 ? -1 : a + b; }

int axis_in(InferContext& c, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) c.fail("axis ", axis, " is out of range for rank ", rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Merges two partially known dims that must agree; fails on a known mismatch.
bool merge_dim(int64_t a, int64_t b, int64_t* out) {
  if (a >= 0 && b >= 0 && a != b) return false;
  *out = a >= 0 ? a : b;
  return true;
}

std::string ints_str(const Ints& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The Reshape shape function, shared with the kernel's run-time check.
void reshape_shape(InferContext& c) {
  Shape target = c.attr<Shape>("shape");
  int unknown = -1;
  int64_t known = 1;
  for (int i = 0; i < target.rank(); ++i) {
    if (target[i] == -1) {
      if (unknown >= 0) c.fail("at most one dimension of the new shape may be -1, got ", target.to_string());
      unknown = i;
    } else if (target[i] < 0) {
      c.fail("invalid dimension ", target[i], " in new shape ", target.to_string());
    } else {
      known *= target[i];
    }
  }
  const int64_t n = c.input_shape(0).num_elements();
  if (n >= 0) {
    if (unknown >= 0) {
      if (known == 0 || n % known != 0)
        c.fail("cannot reshape a tensor of ", n, " elements into shape ", target.to_string());
      target.set_dim(unknown, n / known);
    } else if (known != n) {
      c.fail("cannot reshape a tensor of ", n, " elements into shape ", target.to_string(), " (",
             known, " elements)");
    }
  }
  c.set_output(0, c.input_dtype(0), target);
}

Ints reversed_perm(int rank) {
  Ints p(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) p[static_cast<size_t>(i)] = rank - 1 - i;
  return p;
}

// Split shapes: output i has x's shape with dimension `axis` = sizes[i].
void set_split_outputs(InferContext& c, int axis, const Ints& sizes) {
  const Shape& x = c.input_shape(0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape s = x;
    s.set_dim(axis, sizes[i]);
    c.set_output(static_cast<int>(i), c.input_dtype(0), s);
  }
}

// Checks begin/size of Slice against a (partial) input shape; returns the output shape.
Shape slice_out_shape(InferContext& c, const Shape& x, const Ints& begin, const Ints& size) {
  if (static_cast<int>(begin.size()) != x.rank() || static_cast<int>(size.size()) != x.rank())
    c.fail("begin ", ints_str(begin), " and size ", ints_str(size), " must have one entry per ",
           "dimension (rank ", x.rank(), ")");
  Shape out = x;
  for (int i = 0; i < x.rank(); ++i) {
    const int64_t b = begin[static_cast<size_t>(i)], s = size[static_cast<size_t>(i)];
    if (b < 0 || s < -1) c.fail("invalid begin ", ints_str(begin), " or size ", ints_str(size));
    if (x[i] >= 0 && (b > x[i] || (s >= 0 && b + s > x[i])))
      c.fail("slice begin ", ints_str(begin), " size ", ints_str(size), " is out of bounds for shape ",
             x.to_string());
    out.set_dim(i, s >= 0 ? s : (x[i] >= 0 ? x[i] - b : -1));
  }
  return out;
}

Ints check_paddings(InferContext& c, int rank) {
  Ints p = c.attr<Ints>("paddings");
  if (static_cast<int>(p.size()) != 2 * rank)
    c.fail("paddings ", ints_str(p), " must have 2 * rank = ", 2 * rank, " entries");
  for (int64_t v : p)
    if (v < 0) c.fail("paddings must be non-negative, got ", ints_str(p));
  return p;
}

Ints check_multiples(InferContext& c, int rank) {
  Ints m = c.attr<Ints>("multiples");
  if (static_cast<int>(m.size()) != rank)
    c.fail("multiples ", ints_str(m), " must have one entry per dimension (rank ", rank, ")");
  for (int64_t v : m)
    if (v < 0) c.fail("multiples must be non-negative, got ", ints_str(m));
  return m;
}

}  // namespace

// ---- reshaping -------------------------------------------------------------

SPIRE_REGISTER_OP("Reshape")
    .input("x")
    .required_attr("shape")
    .shape_fn(reshape_shape)
    .grad([](GradContext& c) -> Grads { return {reshape_like(c.grad(), c.input(0))}; })
    .doc("Same elements in a new shape (a view); one dimension may be -1, resolved at run time.");

SPIRE_REGISTER_OP("ReshapeLike")
    .input("x")
    .input("like")
    .shape_fn([](InferContext& c) {
      const Shape& x = c.input_shape(0);
      const Shape& like = c.input_shape(1);
      if (x.is_fully_defined() && like.is_fully_defined() && x.num_elements() != like.num_elements())
        c.fail("cannot reshape ", x.to_string(), " like ", like.to_string(), ": element counts differ");
      c.set_output(0, c.input_dtype(0), like);
    })
    .grad([](GradContext& c) -> Grads { return {reshape_like(c.grad(), c.input(0)), Output()}; })
    .doc("x viewed with the run-time shape of `like` (equal element count); the gradient of reshapes.");

SPIRE_REGISTER_OP("ExpandDims")
    .input("x")
    .required_attr("axis")
    .shape_fn([](InferContext& c) {
      const Shape& x = c.input_shape(0);
      const int64_t a = c.attr<int64_t>("axis");
      if (a < -(x.rank() + 1) || a > x.rank())
        c.fail("axis ", a, " is out of range for inserting into rank ", x.rank());
      const int axis = static_cast<int>(a < 0 ? a + x.rank() + 1 : a);
      Ints dims = x.dims();
      dims.insert(dims.begin() + axis, 1);
      c.set_output(0, c.input_dtype(0), Shape(dims));
    })
    .grad([](GradContext& c) -> Grads { return {reshape_like(c.grad(), c.input(0))}; })
    .doc("Inserts a size-1 dimension at `axis` (a view).");

SPIRE_REGISTER_OP("Squeeze")
    .input("x")
    .attr("axes", Ints{})
    .shape_fn([](InferContext& c) {
      const Shape& x = c.input_shape(0);
      Ints axes = c.attr<Ints>("axes");
      std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
      if (axes.empty()) {
        for (int i = 0; i < x.rank(); ++i) drop[static_cast<size_t>(i)] = x[i] == 1;
      }
      for (int64_t a : axes) {
        int i = axis_in(c, a, x.rank());
        if (x[i] >= 0 && x[i] != 1) c.fail("cannot squeeze axis ", a, " of size ", x[i]);
        drop[static_cast<size_t>(i)] = true;
      }
      Ints dims;
      for (int i = 0; i < x.rank(); ++i)
        if (!drop[static_cast<size_t>(i)]) dims.push_back(x[i]);
      c.set_output(0, c.input_dtype(0), Shape(dims));
    })
    .grad([](GradContext& c) -> Grads { return {reshape_like(c.grad(), c.input(0))}; })
    .doc("Removes size-1 dimensions (a view). With no axes, removes the dims statically known "
         "to be 1; unknown dims are kept.");

SPIRE_REGISTER_OP("Transpose")
    .input("x")
    .attr("perm", Ints{})
    .shape_fn([](InferContext& c) {
      const Shape& x = c.input_shape(0);
      Ints perm = c.attr<Ints>("perm");
      if (perm.empty()) perm = reversed_perm(x.rank());
      bool ok = static_cast<int>(perm.size()) == x.rank();
      std::vector<bool> seen(static_cast<size_t>(x.rank()), false);
      for (size_t i = 0; ok && i < perm.size(); ++i) {
        ok = perm[i] >= 0 && perm[i] < x.rank() && !seen[static_cast<size_t>(perm[i])];
        if (ok) seen[static_cast<size_t>(perm[i])] = true;
      }
      if (!ok) c.fail("perm ", ints_str(perm), " is not a permutation of the ", x.rank(), " dimensions");
      Ints dims;
      for (int64_t p : perm) dims.push_back(x[static_cast<int>(p)]);
      c.set_output(0, c.input_dtype(0), Shape(dims));
    })
    .grad([](GradContext& c) -> Grads {
      Ints perm = c.attr<Ints>("perm");
      if (perm.empty()) perm = reversed_perm(c.input(0).shape().rank());
      Ints inv(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
      return {transpose(c.grad(), inv)};
    })
    .doc("Permutes dimensions: out.shape[i] = x.shape[perm[i]] (empty perm reverses).");

// ---- joining and splitting ---------------------------------------------------

SPIRE_REGISTER_OP("Concat")
    .variadic_input("values", 1)
    .required_attr("axis")
    .shape_fn([](InferContext& c) {
      const Shape& x0 = c.input_shape(0);
      if (x0.rank() == 0) c.fail("cannot concatenate scalars");
      const int axis = axis_in(c, c.attr<int64_t>("axis"), x0.rank());
      Shape out = x0;
      for (int i = 1; i < c.num_inputs(); ++i) {
        c.expect_same_dtype(0, i);
        const Shape& s = c.input_shape(i);
        if (s.rank() != x0.rank()) c.fail("input ", i, " has rank ", s.rank(), ", expected ", x0.rank());
        for (int d = 0; d < s.rank(); ++d) {
          int64_t m;
          if (d == axis) {
            out.set_dim(d, add_dims(out[d], s[d]));
          } else if (!merge_dim(out[d], s[d], &m)) {
            c.fail("input ", i, " has shape ", s.to_string(), ", which differs from ", x0.to_string(),
                   " in dimension ", d, " (only dimension ", axis, " may differ)");
          } else {
            out.set_dim(d, m);
          }
        }
      }
      c.set_output(0, c.input_dtype(0), out);
    })
    .grad([](GradContext& c) -> Grads {
      std::vector<Output> likes = c.node()->inputs();
      return split_like(c.grad(), likes, c.attr<int64_t>("axis"));
    })
    .doc("Joins tensors along `axis`; the other dimensions must agree.");

SPIRE_REGISTER_OP("SplitLike")
    .input("x")
    .variadic_input("likes", 1)
    .required_attr("axis")
    .shape_fn([](InferContext& c) {
      const Shape& x = c.input_shape(0);
      const int axis = axis_in(c, c.attr<int64_t>("axis"), x.rank());
      int64_t total = 0;
      for (int i = 1; i < c.num_inputs(); ++i) {
        const Shape& l = c.input_shape(i);
        if (l.rank() != x.rank()) c.fail("input ", i, " has rank ", l.rank(), ", expected ", x.rank());
        Shape s = x;
        s.set_dim(axis, l[axis]);
        total = add_dims(total, l[axis]);
        c.set_output(i - 1, c.input_dtype(0), s);
      }
      if (total >= 0 && x[axis] >= 0 && total != x[axis])
        c.fail("the parts have ", total, " entries along axis ", axis, " but x has ", x[axis]);
    })
    .grad([](GradContext& c) -> Grads {
      std::vector<Output> gs;
      for (int i = 0; i < c.node()->num_outputs(); ++i) gs.push_back(c.grad(i));
      Grads out{concat(gs, c.attr<int64_t>("axis"))};
      out.resize(static_cast<size_t>(c.node()->num_inputs()));
      return out;
    })
    .doc("Splits x along `axis` into parts as long as each `likes[i]` along it (run time); "
         "the gradient of Concat.");

SPIRE_REGISTER_OP("Split")
    .input("x")
    .required_attr("axis")
    .attr("num", 0)
    .attr("sizes", Ints{})
    .shape_fn([](InferContext& c) {
      const Shape& x = c.input_shape(0);
      const int axis = axis_in(c, c.attr<int64_t>("axis"), x.rank());
      const int64_t num = c.attr<int64_t>("num");
      Ints sizes = c.attr<Ints>("sizes");
      const int64_t d = x[axis];
      if ((num > 0) == !sizes.empty()) c.fail("give either num > 0 or a non-empty sizes list");
      if (num > 0) {
        if (d >= 0 && d % num != 0)
          c.fail("dimension ", axis, " of size ", d, " cannot be split into ", num, " equal parts");
        set_split_outputs(c, axis, Ints(static_cast<size_t>(num), d >= 0 ? d / num : -1));
        return;
      }
      int unknown = -1;
      int64_t known = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (sizes[i] == -1 && unknown < 0) unknown = static_cast<int>(i);
        else if (sizes[i] < 0) c.fail("invalid sizes ", ints_str(sizes), " (at most one -1)");
        else known += sizes[i];
      }
      if (d >= 0) {
        if (unknown >= 0 ? known > d : known != d)
          c.fail("sizes ", ints_str(sizes), " do not add up to dimension ", axis, " of size ", d);
        if (unknown >= 0) sizes[static_cast<size_t>(unknown)] = d - known;
      }
      set_split_outputs(c, axis, sizes);
    })
    .grad([](GradContext& c) -> Grads {
      std::vector<Output> gs;
      for (int i = 0; i < c.node()->num_outputs(); ++i) gs.push_back(c.grad(i));
      return {concat(gs, c.attr<int64_t>("axis"))};
    })
    .doc("Splits along `axis` into `num` equal parts or parts of the given `sizes` (one may be -1).");

// ---- slicing and padding -----------------------------------------------------

SPIRE_REGISTER_OP("Slice")
    .input("x")
    .required_attr("begin")
    .required_attr("size")
    .shape_fn([](InferContext& c) {
      c.set_output(0, c.input_dtype(0),
                   slice_out_shape(c, c.input_shape(0), c.attr<Ints>("begin"), c.attr<Ints>("size")));
    })
    .grad([](GradContext& c) -> Grads {
      return {slice_grad(c.grad(), c.input(0), c.attr<Ints>("begin"), c.attr<Ints>("size"))};
    })
    .doc("x[begin[i] : begin[i] + size[i]] per dimension; size -1 means to the end.");

SPIRE_REGISTER_OP("SliceGrad")
    .input("grad")
    .input("like")
    .required_attr("begin")
    .required_attr("size")
    .shape_fn([](InferContext& c) {
      c.expect_same_dtype(0, 1);
      Shape s = slice_out_shape(c, c.input_shape(1), c.attr<Ints>("begin"), c.attr<Ints>("size"));
      const Shape& g = c.input_shape(0);
      int64_t m;
      bool ok = g.rank() == s.rank();
      for (int i = 0; ok && i < g.rank(); ++i) ok = merge_dim(g[i], s[i], &m);
      if (!ok) c.fail("grad shape ", g.to_string(), " does not match the slice shape ", s.to_string());
      c.set_output(0, c.input_dtype(0), c.input_shape(1));
    })
    .grad([](GradContext& c) -> Grads {
      return {slice(c.grad(), c.attr<Ints>("begin"), c.attr<Ints>("size")), Output()};
    })
    .doc("Zeros shaped like `like` with `grad` placed at `begin`: the gradient of Slice.");

SPIRE_REGISTER_OP("Pad")
    .input("x")
    .required_attr("paddings")
    .attr("value", 0.0)
    .shape_fn([](InferContext& c) {
      const Shape& x = c.input_shape(0);
      Ints p = check_paddings(c, x.rank());
      Shape out = x;
      for (int i = 0; i < x.rank(); ++i)
        out.set_dim(i, x[i] < 0 ? -1 : x[i] + p[static_cast<size_t>(2 * i)] + p[static_cast<size_t>(2 * i + 1)]);
      c.set_output(0, c.input_dtype(0), out);
    })
    .grad([](GradContext& c) -> Grads { return {pad_grad(c.grad(), c.input(0), c.attr<Ints>("paddings"))}; })
    .doc("Pads with a constant `value`; paddings = {before_0, after_0, before_1, after_1, ...}.");

SPIRE_REGISTER_OP("PadGrad")
    .input("grad")
    .input("like")
    .required_attr("paddings")
    .shape_fn([](InferContext& c) {
      c.expect_same_dtype(0, 1);
      const Shape& g = c.input_shape(0);
      const Shape& x = c.input_shape(1);
      if (g.rank() != x.rank()) c.fail("grad and like must have the same rank");
      Ints p = check_paddings(c, x.rank());
      Shape out = x;
      for (int i = 0; i < x.rank(); ++i) {
        int64_t from_g = g[i] < 0 ? -1 : g[i] - p[static_cast<size_t>(2 * i)] - p[static_cast<size_t>(2 * i + 1)];
        int64_t m;
        if (!merge_dim(x[i], from_g, &m) || (g[i] >= 0 && from_g < 0))
          c.fail("grad shape ", g.to_string(), " is not like shape ", x.to_string(), " padded by ",
                 ints_str(p));
        out.set_dim(i, m);
      }
      c.set_output(0, c.input_dtype(0), out);
    })
    .grad([](GradContext& c) -> Grads {
      Output g = add_op("Pad", {c.grad()}, {{"paddings", c.attr<Ints>("paddings")}, {"value", 0.0}})->output(0);
      return {g, Output()};
    })
    .doc("The interior of `grad` without the paddings (shaped like `like`): the gradient of Pad.");

// ---- indexing ------------------------------------------------------------------

SPIRE_REGISTER_OP("Gather")
    .input("params")
    .input("indices")
    .attr("axis", 0)
    .shape_fn([](InferContext& c) {
      c.expect_dtype(1, {DType::I32, DType::I64});
      const Shape& p = c.input_shape(0);
      if (p.rank() == 0) c.fail("params must have rank >= 1");
      const int axis = axis_in(c, c.attr<int64_t>("axis"), p.rank());
      Ints dims(p.dims().begin(), p.dims().begin() + axis);
      for (int64_t d : c.input_shape(1).dims()) dims.push_back(d);
      dims.insert(dims.end(), p.dims().begin() + axis + 1, p.dims().end());
      c.set_output(0, c.input_dtype(0), Shape(dims));
    })
    .grad([](GradContext& c) -> Grads {
      return {gather_grad(c.grad(), c.input(1), c.input(0), c.attr<int64_t>("axis")), Output()};
    })
    .doc("Slices of params along `axis` at integer indices; an index outside [0, dim) is an "
         "error naming the node and the index on the CPU, and gives a slice of zeros on a GPU "
         "(as TensorFlow's GPU kernel; a GPU kernel cannot raise), where GatherGrad skips it.");

SPIRE_REGISTER_OP("GatherGrad")
    .input("grad")
    .input("indices")
    .input("like")
    .attr("axis", 0)
    .shape_fn([](InferContext& c) {
      c.expect_dtype(1, {DType::I32, DType::I64});
      c.expect_same_dtype(0, 2);
      if (c.input_dtype(0) == DType::Bool) c.fail("grad must be numeric, got bool");
      const Shape& p = c.input_shape(2);
      if (p.rank() == 0) c.fail("like must have rank >= 1");
      const int axis = axis_in(c, c.attr<int64_t>("axis"), p.rank());
      const Shape& g = c.input_shape(0);
      const Shape& idx = c.input_shape(1);
      bool ok = g.rank() == p.rank() - 1 + idx.rank();
      int64_t m;
      for (int i = 0; ok && i < g.rank(); ++i) {
        int64_t want = i < axis ? p[i] : (i < axis + idx.rank() ? idx[i - axis] : p[i - idx.rank() + 1]);
        ok = merge_dim(g[i], want, &m);
      }
      if (!ok) c.fail("grad shape does not match a gather of like by indices along axis ", axis);
      c.set_output(0, c.input_dtype(0), p);
    })
    .grad([](GradContext& c) -> Grads {
      return {gather(c.grad(), c.input(1), c.attr<int64_t>("axis")), Output(), Output()};
    })
    .doc("Scatter-add of grad into zeros shaped like `like` at indices along `axis`: the "
         "gradient of Gather w.r.t. params (repeated indices accumulate).");

SPIRE_REGISTER_OP("OneHot")
    .input("indices")
    .required_attr("depth")
    .attr("on_value", 1.0)
    .attr("off_value", 0.0)
    .attr("dtype", DType::F32)
    .shape_fn([](InferContext& c) {
      c.expect_dtype(0, {DType::I32, DType::I64});
      const int64_t depth = c.attr<int64_t>("depth");
      if (depth < 0) c.fail("depth must be non-negative, got ", depth);
      DType dt = c.attr<DType>("dtype");
      if (dt != DType::F32 && dt != DType::F64 && dt != DType::I32 && dt != DType::I64 && dt != DType::Bool)
        c.fail("unsupported dtype ", dtype_name(dt));
      Ints dims = c.input_shape(0).dims();
      dims.push_back(depth);
      c.set_output(0, dt, Shape(dims));
    })
    .no_gradient()
    .doc("One-hot encoding along a new last axis; out-of-range indices give all off_value.");

// ---- tiling and broadcasting -----------------------------------------------------

SPIRE_REGISTER_OP("Tile")
    .input("x")
    .required_attr("multiples")
    .shape_fn([](InferContext& c) {
      const Shape& x = c.input_shape(0);
      Ints m = check_multiples(c, x.rank());
      Shape out = x;
      for (int i = 0; i < x.rank(); ++i) out.set_dim(i, x[i] < 0 ? -1 : x[i] * m[static_cast<size_t>(i)]);
      c.set_output(0, c.input_dtype(0), out);
    })
    .grad([](GradContext& c) -> Grads { return {tile_grad(c.grad(), c.input(0), c.attr<Ints>("multiples"))}; })
    .doc("Repeats x multiples[i] times along dimension i.");

SPIRE_REGISTER_OP("TileGrad")
    .input("grad")
    .input("like")
    .required_attr("multiples")
    .shape_fn([](InferContext& c) {
      c.expect_same_dtype(0, 1);
      if (c.input_dtype(0) == DType::Bool) c.fail("grad must be numeric, got bool");
      const Shape& g = c.input_shape(0);
      const Shape& x = c.input_shape(1);
      Ints m = check_multiples(c, x.rank());
      bool ok = g.rank() == x.rank();
      for (int i = 0; ok && i < g.rank(); ++i)
        ok = g[i] < 0 || x[i] < 0 || g[i] == x[i] * m[static_cast<size_t>(i)];
      if (!ok) c.fail("grad shape ", g.to_string(), " is not like shape ", x.to_string(), " tiled ",
                      ints_str(m));
      c.set_output(0, c.input_dtype(0), x);
    })
    .grad([](GradContext& c) -> Grads { return {tile(c.grad(), c.attr<Ints>("multiples")), Output()}; })
    .doc("Sums the tiled copies in grad back to the shape of `like`: the gradient of Tile.");

SPIRE_REGISTER_OP("BroadcastTo")
    .input("x")
    .required_attr("shape")
    .shape_fn([](InferContext& c) {
      const Shape& x = c.input_shape(0);
      Shape target = c.attr<Shape>("shape");
      if (!target.is_fully_defined()) c.fail("the target shape ", target.to_string(), " must be fully defined");
      bool ok = x.rank() <= target.rank();
      for (int i = 0; ok && i < x.rank(); ++i) {
        const int64_t d = x[i], t = target[target.rank() - x.rank() + i];
        ok = d < 0 || d == 1 || d == t;
      }
      if (!ok) c.fail("cannot broadcast ", x.to_string(), " to ", target.to_string());
      c.set_output(0, c.input_dtype(0), target);
    })
    .grad([](GradContext& c) -> Grads { return {sum_to_like(c.grad(), c.input(0))}; })
    .doc("Broadcasts x to `shape` (NumPy rules).");

// ---- builders --------------------------------------------------------------

Output reshape(const Output& x, const Shape& shape, const std::string& name) {
  return add_op("Reshape", {x}, {{"shape", shape}}, name)->output(0);
}
Output reshape_like(const Output& x, const Output& like, const std::string& name) {
  if (x.shape().is_fully_defined() && x.shape() == like.shape()) return x;
  return add_op("ReshapeLike", {x, like}, {}, name)->output(0);
}
Output transpose(const Output& x, const Ints& perm, const std::string& name) {
  return add_op("Transpose", {x}, {{"perm", Ints(perm)}}, name)->output(0);
}
Output expand_dims(const Output& x, int64_t axis, const std::string& name) {
  return add_op("ExpandDims", {x}, {{"axis", axis}}, name)->output(0);
}
Output squeeze(const Output& x, const Ints& axes, const std::string& name) {
  return add_op("Squeeze", {x}, {{"axes", Ints(axes)}}, name)->output(0);
}
Output concat(const std::vector<Output>& xs, int64_t axis, const std::string& name) {
  SPIRE_CHECK(!xs.empty(), "concat: no inputs");
  return add_op("Concat", xs, {{"axis", axis}}, name)->output(0);
}
namespace {
std::vector<Output> all_outputs(Node* n) {
  std::vector<Output> out;
  for (int i = 0; i < n->num_outputs(); ++i) out.push_back(n->output(i));
  return out;
}
}  // namespace
std::vector<Output> split_like(const Output& x, const std::vector<Output>& likes, int64_t axis,
                               const std::string& name) {
  SPIRE_CHECK(!likes.empty(), "split_like: no parts");
  std::vector<Output> in{x};
  in.insert(in.end(), likes.begin(), likes.end());
  return all_outputs(add_op("SplitLike", in, {{"axis", axis}}, name));
}
std::vector<Output> split(const Output& x, int64_t num, int64_t axis, const std::string& name) {
  return all_outputs(add_op("Split", {x}, {{"axis", axis}, {"num", num}}, name));
}
std::vector<Output> split(const Output& x, const Ints& sizes, int64_t axis, const std::string& name) {
  return all_outputs(add_op("Split", {x}, {{"axis", axis}, {"sizes", Ints(sizes)}}, name));
}
Output slice(const Output& x, const Ints& begin, const Ints& size, const std::string& name) {
  return add_op("Slice", {x}, {{"begin", Ints(begin)}, {"size", Ints(size)}}, name)->output(0);
}
Output slice_grad(const Output& grad, const Output& like, const Ints& begin, const Ints& size,
                  const std::string& name) {
  return add_op("SliceGrad", {grad, like}, {{"begin", Ints(begin)}, {"size", Ints(size)}}, name)
      ->output(0);
}
namespace {
Ints flat_paddings(const std::vector<std::pair<int64_t, int64_t>>& paddings) {
  Ints flat;
  for (const auto& p : paddings) flat.push_back(p.first), flat.push_back(p.second);
  return flat;
}
}  // namespace
Output pad(const Output& x, const std::vector<std::pair<int64_t, int64_t>>& paddings, double value,
           const std::string& name) {
  return add_op("Pad", {x}, {{"paddings", flat_paddings(paddings)}, {"value", value}}, name)->output(0);
}
Output pad_grad(const Output& grad, const Output& like, const Ints& paddings, const std::string& name) {
  return add_op("PadGrad", {grad, like}, {{"paddings", Ints(paddings)}}, name)->output(0);
}
Output gather(const Output& params, const Output& indices, int64_t axis, const std::string& name) {
  return add_op("Gather", {params, indices}, {{"axis", axis}}, name)->output(0);
}
Output gather_grad(const Output& grad, const Output& indices, const Output& params_like, int64_t axis,
                   const std::string& name) {
  return add_op("GatherGrad", {grad, indices, params_like}, {{"axis", axis}}, name)->output(0);
}
Output one_hot(const Output& indices, int64_t depth, double on_value, double off_value, DType dtype,
               const std::string& name) {
  return add_op("OneHot", {indices},
                {{"depth", depth}, {"on_value", on_value}, {"off_value", off_value}, {"dtype", dtype}},
                name)
      ->output(0);
}
Output tile(const Output& x, const Ints& multiples, const std::string& name) {
  return add_op("Tile", {x}, {{"multiples", Ints(multiples)}}, name)->output(0);
}
Output tile_grad(const Output& grad, const Output& like, const Ints& multiples, const std::string& name) {
  return add_op("TileGrad", {grad, like}, {{"multiples", Ints(multiples)}}, name)->output(0);
}
Output broadcast_to(const Output& x, const Shape& shape, const std::string& name) {
  return add_op("BroadcastTo", {x}, {{"shape", shape}}, name)->output(0);
}

}  // namespace spire::ops
