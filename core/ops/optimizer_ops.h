// Fused optimizer updates: one node updates every variable of an optimizer
// (of one dtype and device) and its slots, instead of a handful of small
// ops per variable. The optimizers of layers/optimizers.h emit them; the
// math is in kernels/optimizer_functors.h (shared by the CPU kernel and the
// CUDA multi-tensor kernel).
//
// Each node takes one variadic input list [vars(n), grads(n), slots..., scalars]
// (attr "n" = number of variables), writes the new values into the
// variables and slots (TF1 reference semantics, copy-on-write like
// AssignAdd: a buffer is overwritten only when no other tensor refers to
// it), and has no outputs: use it as a target or a control input. It runs
// where its first variable lives; all variables, slots, gradients and
// scalars have one dtype (f32 or f64). Scalars (learning rate, beta powers)
// are graph values read on every run, so schedules and assignments to the
// learning_rate variable take effect on the next step.
//
// Gating: every builder takes an optional `apply_if`, a scalar of the
// variables' dtype. Given one, the node gets attr gated = true and apply_if
// as its last input; on a run where apply_if is 0 the node leaves every
// variable and slot as it is (the CPU kernel returns at once; the CUDA
// kernel writes the old values, so copy-on-write targets stay right).
// Gradient accumulation (layers/accum_grad_optimizer.h) and skipped steps
// are built on it: a define-and-run graph has no conditional execution.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace spire::ops {

/// FusedApplyGradientDescent: var -= lr * grad for each (var, grad).
Node* fused_apply_gradient_descent(const std::vector<Output>& vars,
                                   const std::vector<Output>& grads, const Output& lr,
                                   const std::string& name = "", const Output& apply_if = {});

/// FusedApplyMomentum: accum = accum * momentum + grad; var -= lr * accum,
/// or with Nesterov var -= lr * (grad + accum * momentum).
Node* fused_apply_momentum(const std::vector<Output>& vars, const std::vector<Output>& grads,
                           const std::vector<Output>& accums, const Output& lr, double momentum,
                           bool use_nesterov, const std::string& name = "",
                           const Output& apply_if = {});

/// FusedApplyAdam (TF1): lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power);
/// m = beta1 m + (1 - beta1) grad; v = beta2 v + (1 - beta2) grad^2;
/// var -= lr_t * m / (sqrt(v) + epsilon). The beta powers are not updated.
Node* fused_apply_adam(const std::vector<Output>& vars, const std::vector<Output>& grads,
                       const std::vector<Output>& m, const std::vector<Output>& v,
                       const Output& lr, const Output& beta1_power, const Output& beta2_power,
                       double beta1, double beta2, double epsilon, const std::string& name = "",
                       const Output& apply_if = {});

/// FusedApplyAdamW (torch.optim.AdamW): m and v as Adam; var = var * (1 - lr *
/// weight_decay) - lr / (1 - beta1_power) * m / (sqrt(v) / sqrt(1 - beta2_power) + epsilon).
Node* fused_apply_adamw(const std::vector<Output>& vars, const std::vector<Output>& grads,
                        const std::vector<Output>& m, const std::vector<Output>& v,
                        const Output& lr, const Output& beta1_power, const Output& beta2_power,
                        double beta1, double beta2, double epsilon, double weight_decay,
                        const std::string& name = "", const Output& apply_if = {});

}  // namespace spire::ops
