// Registrations of elementwise math, activations, comparisons, logical ops,
// select and cast, with shape inference and gradients (see math_ops.h):
// Add, Sub, Mul, Div, Pow, Maximum, Minimum, AddN; Neg, Exp, Log, Sqrt, Rsqrt,
// Abs, Square, Sign, Erf, Relu, Sigmoid, Tanh, Gelu (exact, or the tanh
// approximation with attr approximate="tanh"), Softplus, LeakyRelu;
// comparisons, logical ops, Select and Cast.
#include "core/ops/math_ops.h"

#include <cmath>

#include "core/enum_names.h"

#include "core/ops/op_util.h"
#include "core/ops/state_ops.h"

namespace spire::ops {

namespace {

Output binary(const char* op, const Output& x, const Output& y, const std::string& name) {
  return add_op(op, {x, y}, {}, name)->output(0);
}
Output unary(const char* op, const Output& x, const std::string& name, const AttrMap& attrs = {}) {
  return add_op(op, {x}, attrs, name)->output(0);
}
Output mask(const Output& b, const Output& like) { return cast(b, like.dtype()); }

void float_unary_shape(InferContext& c) {
  expect_float(c, 0);
  same_as_input0(c);
}
void numeric_unary_shape(InferContext& c) {
  if (c.input_dtype(0) == DType::Bool) c.fail("input must be numeric, got bool");
  same_as_input0(c);
}
void numeric_binary_shape(InferContext& c) {
  if (c.input_dtype(0) == DType::Bool) c.fail("inputs must be numeric, got bool");
  broadcast_binary_shape(c);
}
void float_binary_shape(InferContext& c) {
  expect_float(c, 0);
  broadcast_binary_shape(c);
}
void compare_shape(InferContext& c) { broadcast_binary_shape(c, DType::Bool); }
void logical_binary_shape(InferContext& c) {
  c.expect_dtype(0, {DType::Bool});
  broadcast_binary_shape(c, DType::Bool);
}

using Grads = std::vector<Output>;

const EnumSpelling<GeluApproximate> kGeluApproximate[] = {
    {"none", GeluApproximate::kNone},
    {"tanh", GeluApproximate::kTanh},
};

// d/dx of GELU's tanh form 0.5 x (1 + t), t = tanh(k (x + 0.044715 x^3)),
// k = sqrt(2/pi): 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2).
Output gelu_tanh_derivative(const Output& x) {
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  Output x2 = square(x);
  Output t = tanh(mul(mul(x, scalar_like(k, x)), add(scalar_like(1, x), mul(scalar_like(c, x), x2))));
  Output half = scalar_like(0.5, x);
  Output sech2 = sub(scalar_like(1, x), square(t));
  Output inner = add(scalar_like(k, x), mul(scalar_like(3 * c * k, x), x2));
  return add(mul(half, add(scalar_like(1, x), t)), mul(mul(half, x), mul(sech2, inner)));
}

}  // namespace

GeluApproximate parse_gelu_approximate(const std::string& name, const char* who) {
  return parse_enum(kGeluApproximate, name, who, "approximate");
}
const char* gelu_approximate_name(GeluApproximate a) { return enum_name(kGeluApproximate, a); }

// ---- binary arithmetic -----------------------------------------------------

SPIRE_REGISTER_OP("Add").input("x").input("y").shape_fn(numeric_binary_shape)
    .grad([](GradContext& c) -> Grads {
      return {sum_to_like(c.grad(), c.input(0), c.input(1)), sum_to_like(c.grad(), c.input(1), c.input(0))};
    });

SPIRE_REGISTER_OP("Sub").input("x").input("y").shape_fn(numeric_binary_shape)
    .grad([](GradContext& c) -> Grads {
      return {sum_to_like(c.grad(), c.input(0), c.input(1)),
              sum_to_like(neg(c.grad()), c.input(1), c.input(0))};
    });

SPIRE_REGISTER_OP("Mul").input("x").input("y").shape_fn(numeric_binary_shape)
    .grad([](GradContext& c) -> Grads {
      Output g = c.grad(), x = c.input(0), y = c.input(1);
      return {sum_to_like(mul(g, y), x, y), sum_to_like(mul(g, x), y, x)};
    });

SPIRE_REGISTER_OP("Div").input("x").input("y").shape_fn(numeric_binary_shape)
    .grad([](GradContext& c) -> Grads {
      Output g = c.grad(), x = c.input(0), y = c.input(1);
      return {sum_to_like(div(g, y), x, y), sum_to_like(neg(div(mul(g, x), square(y))), y, x)};
    })
    .doc("x / y; integer division truncates toward zero and rejects a zero divisor on the "
         "CPU (on a GPU a zero divisor gives 0: a GPU kernel cannot raise).");

SPIRE_REGISTER_OP("Pow").input("x").input("y").shape_fn(float_binary_shape)
    .grad([](GradContext& c) -> Grads {
      Output g = c.grad(), x = c.input(0), y = c.input(1), z = c.output();
      Output gx = mul(g, mul(y, pow(x, sub(y, scalar_like(1, y)))));
      Output zero = zeros_like(x);
      Output safe_log = where(greater(x, zero), log(where(greater(x, zero), x, ones_like(x))), zero);
      Output gy = mul(g, mul(z, safe_log));
      return {sum_to_like(gx, x, y), sum_to_like(gy, y, x)};
    });

SPIRE_REGISTER_OP("Maximum").input("x").input("y").shape_fn(numeric_binary_shape)
    .grad([](GradContext& c) -> Grads {
      Output g = c.grad(), x = c.input(0), y = c.input(1);
      return {sum_to_like(mul(g, mask(greater_equal(x, y), g)), x, y),
              sum_to_like(mul(g, mask(less(x, y), g)), y, x)};
    });

SPIRE_REGISTER_OP("Minimum").input("x").input("y").shape_fn(numeric_binary_shape)
    .grad([](GradContext& c) -> Grads {
      Output g = c.grad(), x = c.input(0), y = c.input(1);
      return {sum_to_like(mul(g, mask(less_equal(x, y), g)), x, y),
              sum_to_like(mul(g, mask(greater(x, y), g)), y, x)};
    });

SPIRE_REGISTER_OP("AddN")
    .variadic_input("xs", 1)
    .shape_fn([](InferContext& c) {
      if (c.input_dtype(0) == DType::Bool) c.fail("inputs must be numeric, got bool");
      Shape s = c.input_shape(0);
      for (int i = 1; i < c.num_inputs(); ++i) {
        c.expect_same_dtype(0, i);
        const Shape& t = c.input_shape(i);
        if (t.rank() != s.rank()) c.fail("all inputs must have the same shape");
        for (int d = 0; d < s.rank(); ++d) {
          if (s[d] >= 0 && t[d] >= 0 && s[d] != t[d]) c.fail("all inputs must have the same shape");
          if (s[d] < 0) s.set_dim(d, t[d]);
        }
      }
      c.set_output(0, c.input_dtype(0), s);
    })
    .grad([](GradContext& c) -> Grads {
      return Grads(static_cast<size_t>(c.node()->num_inputs()), c.grad());
    })
    .doc("Sum of equally shaped tensors.");

// ---- unary -----------------------------------------------------------------

SPIRE_REGISTER_OP("Neg").input("x").shape_fn(numeric_unary_shape)
    .grad([](GradContext& c) -> Grads { return {neg(c.grad())}; });

SPIRE_REGISTER_OP("Exp").input("x").shape_fn(float_unary_shape)
    .grad([](GradContext& c) -> Grads { return {mul(c.grad(), c.output())}; });

SPIRE_REGISTER_OP("Log").input("x").shape_fn(float_unary_shape)
    .grad([](GradContext& c) -> Grads { return {div(c.grad(), c.input(0))}; });

SPIRE_REGISTER_OP("Sqrt").input("x").shape_fn(float_unary_shape)
    .grad([](GradContext& c) -> Grads {
      return {div(mul(c.grad(), scalar_like(0.5, c.grad())), c.output())};
    });

SPIRE_REGISTER_OP("Rsqrt").input("x").shape_fn(float_unary_shape)
    .grad([](GradContext& c) -> Grads {
      Output y = c.output();
      return {mul(c.grad(), mul(scalar_like(-0.5, y), mul(y, square(y))))};
    });

SPIRE_REGISTER_OP("Abs").input("x").shape_fn(numeric_unary_shape)
    .grad([](GradContext& c) -> Grads { return {mul(c.grad(), sign(c.input(0)))}; });

SPIRE_REGISTER_OP("Square").input("x").shape_fn(numeric_unary_shape)
    .grad([](GradContext& c) -> Grads {
      return {mul(c.grad(), mul(scalar_like(2, c.input(0)), c.input(0)))};
    });

SPIRE_REGISTER_OP("Sign").input("x").shape_fn(numeric_unary_shape).no_gradient()
    .doc("-1, 0 or 1; its gradient is zero.");

SPIRE_REGISTER_OP("Erf").input("x").shape_fn(float_unary_shape)
    .grad([](GradContext& c) -> Grads {
      Output x = c.input(0);
      return {mul(c.grad(), mul(scalar_like(2.0 / std::sqrt(M_PI), x), exp(neg(square(x)))))};
    });

SPIRE_REGISTER_OP("Relu").input("x").shape_fn(numeric_unary_shape)
    .grad([](GradContext& c) -> Grads {
      // The mask x > 0, computed as sign(relu(x)) from the output: one op instead of
      // zeros_like + greater + cast. relu(NaN) = NaN and sign(NaN) = NaN, so a NaN input
      // gives a NaN gradient (TensorFlow's behaviour: a diverging run stays visible).
      return {mul(c.grad(), sign(c.output()))};
    });

SPIRE_REGISTER_OP("Sigmoid").input("x").shape_fn(float_unary_shape)
    .grad([](GradContext& c) -> Grads {
      Output y = c.output();
      return {mul(c.grad(), mul(y, sub(scalar_like(1, y), y)))};
    });

SPIRE_REGISTER_OP("Tanh").input("x").shape_fn(float_unary_shape)
    .grad([](GradContext& c) -> Grads {
      Output y = c.output();
      return {mul(c.grad(), sub(scalar_like(1, y), square(y)))};
    });

SPIRE_REGISTER_OP("Gelu").input("x").attr("approximate", "none")
    .shape_fn([](InferContext& c) {
      const std::string a = c.attr<std::string>("approximate");
      if (a != "none" && a != "tanh")
        c.fail("approximate must be \"none\" or \"tanh\" (PyTorch's spelling), got \"", a, "\"");
      float_unary_shape(c);
    })
    .grad([](GradContext& c) -> Grads {
      Output x = c.input(0);
      if (parse_gelu_approximate(c.attr<std::string>("approximate")) == GeluApproximate::kTanh)
        return {mul(c.grad(), gelu_tanh_derivative(x))};
      // d/dx [x Phi(x)] = Phi(x) + x phi(x), one fused pass.
      return {gelu_grad(c.grad(), x)};
    })
    .doc("GELU, torch.nn.functional.gelu: x * Phi(x) with approximate=\"none\" (the "
         "default), 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) with approximate=\"tanh\" "
         "(GPT-2, llm.c). Its gradient is built from differentiable ops (second order).");

SPIRE_REGISTER_OP("GeluGrad").input("dy").input("x")
    .shape_fn([](InferContext& c) {
      if (c.input_shape(0) != c.input_shape(1) || c.input_dtype(0) != c.input_dtype(1))
        c.fail("dy and x must have one shape and dtype, got ", c.input_shape(0).to_string(), " ",
               dtype_name(c.input_dtype(0)), " and ", c.input_shape(1).to_string(), " ",
               dtype_name(c.input_dtype(1)));
      if (!is_floating(c.input_dtype(0))) c.fail("needs a float dtype, got ", dtype_name(c.input_dtype(0)));
      c.set_output(0, c.input_dtype(0), c.input_shape(0));
    })
    .grad([](GradContext& c) -> Grads {
      // out = dy * G'(x): d/d(dy) = G'(x); d/dx = dy * G''(x), G''(x) = phi(x) (2 - x^2).
      Output dy = c.input(0), x = c.input(1), g = c.grad();
      Output pdf = mul(scalar_like(1.0 / std::sqrt(2 * M_PI), x),
                       exp(mul(scalar_like(-0.5, x), square(x))));
      Output second = mul(pdf, sub(scalar_like(2, x), square(x)));
      return {gelu_grad(g, x), mul(mul(g, dy), second)};
    })
    .doc("The exact GELU's gradient dy * (Phi(x) + x phi(x)) in one elementwise pass (Gelu's "
         "gradient with approximate=\"none\"); its own gradient is built from differentiable "
         "ops.");

SPIRE_REGISTER_OP("Softplus").input("x").shape_fn(float_unary_shape)
    .grad([](GradContext& c) -> Grads { return {mul(c.grad(), sigmoid(c.input(0)))}; });

SPIRE_REGISTER_OP("LeakyRelu").input("x").attr("alpha", 0.2).shape_fn(float_unary_shape)
    .grad([](GradContext& c) -> Grads {
      Output x = c.input(0);
      double alpha = c.attr<double>("alpha");
      Output slope = add(mul(mask(greater(x, zeros_like(x)), x), scalar_like(1 - alpha, x)),
                         scalar_like(alpha, x));
      return {mul(c.grad(), slope)};
    });

// ---- comparisons and logical ops (no gradient) ----------------------------

SPIRE_REGISTER_OP("Equal").input("x").input("y").shape_fn(compare_shape).no_gradient();
SPIRE_REGISTER_OP("NotEqual").input("x").input("y").shape_fn(compare_shape).no_gradient();
SPIRE_REGISTER_OP("Less").input("x").input("y").shape_fn(compare_shape).no_gradient();
SPIRE_REGISTER_OP("LessEqual").input("x").input("y").shape_fn(compare_shape).no_gradient();
SPIRE_REGISTER_OP("Greater").input("x").input("y").shape_fn(compare_shape).no_gradient();
SPIRE_REGISTER_OP("GreaterEqual").input("x").input("y").shape_fn(compare_shape).no_gradient();
SPIRE_REGISTER_OP("LogicalAnd").input("x").input("y").shape_fn(logical_binary_shape).no_gradient();
SPIRE_REGISTER_OP("LogicalOr").input("x").input("y").shape_fn(logical_binary_shape).no_gradient();
SPIRE_REGISTER_OP("LogicalNot").input("x")
    .shape_fn([](InferContext& c) {
      c.expect_dtype(0, {DType::Bool});
      same_as_input0(c);
    })
    .no_gradient();

// ---- select and cast -------------------------------------------------------

SPIRE_REGISTER_OP("Select")
    .input("cond").input("x").input("y")
    .shape_fn([](InferContext& c) {
      c.expect_dtype(0, {DType::Bool});
      c.expect_same_dtype(1, 2);
      Shape a, b;
      if (!broadcast_shapes(c.input_shape(0), c.input_shape(1), &a) ||
          !broadcast_shapes(a, c.input_shape(2), &b))
        c.fail("shapes cannot be broadcast together");
      c.set_output(0, c.input_dtype(1), b);
    })
    .kernel_dtype_from_input(1)
    .grad([](GradContext& c) -> Grads {
      Output g = c.grad(), cond = c.input(0), zero = zeros_like(g);
      return {Output(), sum_to_like(where(cond, g, zero), c.input(1)),
              sum_to_like(where(cond, zero, g), c.input(2))};
    })
    .doc("cond ? x : y elementwise, broadcasting all three.");

SPIRE_REGISTER_OP("Cast")
    .input("x")
    .required_attr("dtype")
    .shape_fn([](InferContext& c) { c.set_output(0, c.attr<DType>("dtype"), c.input_shape(0)); })
    .grad([](GradContext& c) -> Grads {
      DType from = c.input(0).dtype(), to = c.node()->output_dtype(0);
      if (!is_floating(from) || !is_floating(to)) return {Output()};
      return {cast(c.grad(), from)};
    })
    .doc("Converts elementwise to `dtype`; gradients flow between floating dtypes only.");

// ---- builders --------------------------------------------------------------

Output add(const Output& x, const Output& y, const std::string& n) { return binary("Add", x, y, n); }
Output sub(const Output& x, const Output& y, const std::string& n) { return binary("Sub", x, y, n); }
Output mul(const Output& x, const Output& y, const std::string& n) { return binary("Mul", x, y, n); }
Output div(const Output& x, const Output& y, const std::string& n) { return binary("Div", x, y, n); }
Output pow(const Output& x, const Output& y, const std::string& n) { return binary("Pow", x, y, n); }
Output maximum(const Output& x, const Output& y, const std::string& n) {
  return binary("Maximum", x, y, n);
}
Output minimum(const Output& x, const Output& y, const std::string& n) {
  return binary("Minimum", x, y, n);
}
Output add_n(const std::vector<Output>& xs, const std::string& n) {
  SPIRE_CHECK(!xs.empty(), "add_n: no inputs");
  if (xs.size() == 1) return xs[0];
  return add_op("AddN", xs, {}, n)->output(0);
}
Output neg(const Output& x, const std::string& n) { return unary("Neg", x, n); }
Output exp(const Output& x, const std::string& n) { return unary("Exp", x, n); }
Output log(const Output& x, const std::string& n) { return unary("Log", x, n); }
Output sqrt(const Output& x, const std::string& n) { return unary("Sqrt", x, n); }
Output rsqrt(const Output& x, const std::string& n) { return unary("Rsqrt", x, n); }
Output abs(const Output& x, const std::string& n) { return unary("Abs", x, n); }
Output square(const Output& x, const std::string& n) { return unary("Square", x, n); }
Output sign(const Output& x, const std::string& n) { return unary("Sign", x, n); }
Output erf(const Output& x, const std::string& n) { return unary("Erf", x, n); }
Output relu(const Output& x, const std::string& n) { return unary("Relu", x, n); }
Output sigmoid(const Output& x, const std::string& n) { return unary("Sigmoid", x, n); }
Output tanh(const Output& x, const std::string& n) { return unary("Tanh", x, n); }
Output gelu(const Output& x, const std::string& n) { return unary("Gelu", x, n); }
Output gelu_grad(const Output& dy, const Output& x, const std::string& n) {
  return add_op("GeluGrad", {dy, x}, {}, n)->output(0);
}
Output gelu(const Output& x, GeluApproximate approximate, const std::string& n) {
  return unary("Gelu", x, n, {{"approximate", gelu_approximate_name(approximate)}});
}
Output softplus(const Output& x, const std::string& n) { return unary("Softplus", x, n); }
Output leaky_relu(const Output& x, double alpha, const std::string& n) {
  return unary("LeakyRelu", x, n, {{"alpha", alpha}});
}
Output equal(const Output& x, const Output& y, const std::string& n) { return binary("Equal", x, y, n); }
Output not_equal(const Output& x, const Output& y, const std::string& n) {
  return binary("NotEqual", x, y, n);
}
Output less(const Output& x, const Output& y, const std::string& n) { return binary("Less", x, y, n); }
Output less_equal(const Output& x, const Output& y, const std::string& n) {
  return binary("LessEqual", x, y, n);
}
Output greater(const Output& x, const Output& y, const std::string& n) {
  return binary("Greater", x, y, n);
}
Output greater_equal(const Output& x, const Output& y, const std::string& n) {
  return binary("GreaterEqual", x, y, n);
}
Output logical_and(const Output& x, const Output& y, const std::string& n) {
  return binary("LogicalAnd", x, y, n);
}
Output logical_or(const Output& x, const Output& y, const std::string& n) {
  return binary("LogicalOr", x, y, n);
}
Output logical_not(const Output& x, const std::string& n) { return unary("LogicalNot", x, n); }
Output where(const Output& cond, const Output& x, const Output& y, const std::string& n) {
  return add_op("Select", {cond, x, y}, {}, n)->output(0);
}
Output cast(const Output& x, DType dtype, const std::string& n) {
  if (x.dtype() == dtype) return x;
  return add_op("Cast", {x}, {{"dtype", dtype}}, n)->output(0);
}

}  // namespace spire::ops

namespace spire {
using namespace spire::ops;
Output operator+(const Output& a, const Output& b) { return ops::add(a, b); }
Output operator-(const Output& a, const Output& b) { return ops::sub(a, b); }
Output operator*(const Output& a, const Output& b) { return ops::mul(a, b); }
Output operator/(const Output& a, const Output& b) { return ops::div(a, b); }
Output operator-(const Output& a) { return ops::neg(a); }
Output operator+(const Output& a, double b) { return ops::add(a, scalar_like(b, a)); }
Output operator-(const Output& a, double b) { return ops::sub(a, scalar_like(b, a)); }
Output operator*(const Output& a, double b) { return ops::mul(a, scalar_like(b, a)); }
Output operator/(const Output& a, double b) { return ops::div(a, scalar_like(b, a)); }
Output operator+(double a, const Output& b) { return ops::add(scalar_like(a, b), b); }
Output operator-(double a, const Output& b) { return ops::sub(scalar_like(a, b), b); }
Output operator*(double a, const Output& b) { return ops::mul(scalar_like(a, b), b); }
Output operator/(double a, const Output& b) { return ops::div(scalar_like(a, b), b); }
}  // namespace spire
