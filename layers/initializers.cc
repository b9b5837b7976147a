// Variable initializers (see initializers.h): constants, uniform/normal/
// truncated-normal draws and TF's VarianceScaling family (Glorot, He), with
// TF's fan computation. Random ones build ops::random_* nodes (op seed 0 by
// default: the stream comes from the graph seed and the node's position).
#include "layers/initializers.h"

#include <cmath>

#include "core/error.h"
#include "core/ops/array_ops.h"
#include "core/ops/math_ops.h"
#include "core/ops/random_ops.h"
#include "core/ops/state_ops.h"
#include "core/tensor.h"

namespace spire::init {

namespace {

bool broadcastable_dtype(DType dt) {
  return dt == DType::F32 || dt == DType::F64 || dt == DType::I32 || dt == DType::I64 ||
         dt == DType::Bool;
}

void check_shape(const Shape& shape, const char* what) {
  if (!shape.is_fully_defined())
    throw_error("initializer ", what, ": shape ", shape.to_string(), " must be fully defined");
}

/// Random ops draw f32/f64; half types draw f32 and cast.
DType draw_dtype(DType dtype, const char* what) {
  if (dtype == DType::F32 || dtype == DType::F64) return dtype;
  if (dtype == DType::F16 || dtype == DType::BF16) return DType::F32;
  throw_error("initializer ", what, ": dtype ", dtype_name(dtype),
              " is not supported (random initializers need a floating dtype)");
}

Output finish(const Output& x, DType dtype) {
  return x.dtype() == dtype ? x : ops::cast(x, dtype, "Cast");
}

}  // namespace

Initializer constant(double value) {
  return [value](const Shape& shape, DType dtype, Graph& g) -> Output {
    check_shape(shape, "constant");
    if (shape.rank() == 0 || !broadcastable_dtype(dtype))
      return ops::constant(Tensor::full(dtype, shape, value), "Const", &g);
    // A scalar broadcast to the shape keeps the graph small for big variables.
    Output s = ops::constant(Tensor::full(dtype, Shape{}, value), "value", &g);
    return ops::broadcast_to(s, shape, "Const");
  };
}

Initializer zeros() { return constant(0.0); }
Initializer ones() { return constant(1.0); }

Initializer uniform(double minval, double maxval, int64_t seed) {
  SPIRE_CHECK(std::isfinite(minval) && std::isfinite(maxval) && minval <= maxval,
              "init::uniform: need finite minval <= maxval, got [", minval, ", ", maxval, ")");
  return [=](const Shape& shape, DType dtype, Graph& g) -> Output {
    check_shape(shape, "uniform");
    DType dt = draw_dtype(dtype, "uniform");
    return finish(ops::random_uniform(shape, dt, minval, maxval, seed, "random_uniform", &g), dtype);
  };
}

Initializer normal(double mean, double stddev, int64_t seed) {
  SPIRE_CHECK(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0,
              "init::normal: need finite mean and stddev >= 0, got mean ", mean, " stddev ", stddev);
  return [=](const Shape& shape, DType dtype, Graph& g) -> Output {
    check_shape(shape, "normal");
    DType dt = draw_dtype(dtype, "normal");
    return finish(ops::random_normal(shape, dt, mean, stddev, seed, "random_normal", &g), dtype);
  };
}

Initializer truncated_normal(double mean, double stddev, int64_t seed) {
  SPIRE_CHECK(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0,
              "init::truncated_normal: need finite mean and stddev >= 0, got mean ", mean,
              " stddev ", stddev);
  return [=](const Shape& shape, DType dtype, Graph& g) -> Output {
    check_shape(shape, "truncated_normal");
    DType dt = draw_dtype(dtype, "truncated_normal");
    return finish(ops::truncated_normal(shape, dt, mean, stddev, seed, "truncated_normal", &g),
                  dtype);
  };
}

std::pair<double, double> compute_fans(const Shape& shape) {
  const int r = shape.rank();
  if (r < 1) return {1.0, 1.0};
  if (r == 1) return {static_cast<double>(shape[0]), static_cast<double>(shape[0])};
  if (r == 2) return {static_cast<double>(shape[0]), static_cast<double>(shape[1])};
  double receptive = 1.0;
  for (int i = 0; i < r - 2; ++i) receptive *= static_cast<double>(shape[i]);
  return {static_cast<double>(shape[r - 2]) * receptive,
          static_cast<double>(shape[r - 1]) * receptive};
}

Initializer variance_scaling(double scale, const std::string& mode,
                             const std::string& distribution, int64_t seed) {
  SPIRE_CHECK(std::isfinite(scale) && scale > 0,
              "init::variance_scaling: scale must be positive, got ", scale);
  SPIRE_CHECK(mode == "fan_in" || mode == "fan_out" || mode == "fan_avg",
              "init::variance_scaling: mode must be fan_in, fan_out or fan_avg, got '", mode, "'");
  // TF1 accepted "normal" as the truncated normal.
  const std::string dist = distribution == "normal" ? "truncated_normal" : distribution;
  SPIRE_CHECK(dist == "truncated_normal" || dist == "untruncated_normal" || dist == "uniform",
              "init::variance_scaling: distribution must be truncated_normal, untruncated_normal "
              "or uniform, got '", distribution, "'");
  return [=](const Shape& shape, DType dtype, Graph& g) -> Output {
    check_shape(shape, "variance_scaling");
    auto [fan_in, fan_out] = compute_fans(shape);
    double fan = mode == "fan_in" ? fan_in : mode == "fan_out" ? fan_out : (fan_in + fan_out) / 2.0;
    double s = scale / std::max(1.0, fan);
    if (dist == "truncated_normal")
      return truncated_normal(0.0, std::sqrt(s) / 0.87962566103423978, seed)(shape, dtype, g);
    if (dist == "untruncated_normal") return normal(0.0, std::sqrt(s), seed)(shape, dtype, g);
    double limit = std::sqrt(3.0 * s);
    return uniform(-limit, limit, seed)(shape, dtype, g);
  };
}

Initializer glorot_uniform(int64_t seed) { return variance_scaling(1.0, "fan_avg", "uniform", seed); }
Initializer glorot_normal(int64_t seed) {
  return variance_scaling(1.0, "fan_avg", "truncated_normal", seed);
}
Initializer he_normal(int64_t seed) { return variance_scaling(2.0, "fan_in", "truncated_normal", seed); }
Initializer he_uniform(int64_t seed) { return variance_scaling(2.0, "fan_in", "uniform", seed); }

}  // namespace spire::init
