// The decoded form of a fused elementwise program (core/fusion.h): the
// instructions a FusedElementwise node carries in its attrs, or the epilogue a
// FusedConv2D / FusedMatMul node applies to its product. Both evaluators decode
// with this one function: the CPU's, which runs each instruction over blocks of
// 512 elements (kernels/cpu/fused_program.h), and the CUDA one, which runs the
// whole program per element (kernels/fused_code.h, kernels/cuda/fused_program.h).
// Decoding checks what the unfused ops' kernels would: every op fuses on the
// device for the dtype (fusable_arity), operands refer to earlier values, and
// each instruction's operand shapes broadcast as its op requires.
#pragma once

#include <string>
#include <vector>

#include "core/attr.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/kernel_registry.h"
#include "core/shape.h"

namespace spire::kernels {

/// One instruction: its op, the name of the node it stands for, its operands (value
/// indices: program inputs first, then earlier instructions; b < 0 for a unary op) and
/// its own attrs.
struct FusedInstruction {
  std::string op;
  std::string node;
  int a = 0, b = -1;
  AttrMap attrs;
};

/// A decoded program: `nin` inputs, the instructions in evaluation order (the last one
/// is the result), and the shape of every value (inputs first, then instructions).
struct FusedProgramCode {
  int nin = 0;
  std::vector<FusedInstruction> code;
  std::vector<Shape> shapes;
  const Shape& output_shape() const { return shapes.back(); }
};

/// Decodes the program in ctx's node attrs ("ops", "operands", "nodes", "string_attrs",
/// "number_attr_names", "number_attrs") for `dtype` on `device`; program input k has
/// shape `shapes[k]`. Fails (ctx.fail) on a malformed program, an op that does not fuse
/// there, shapes that do not broadcast as the ops require, or an input that does not
/// broadcast to the result.
FusedProgramCode decode_fused_program(const KernelContext& ctx, std::vector<Shape> shapes,
                                      DeviceType device, DType dtype);

/// An instruction's attr (a clear error when absent or of another type).
template <typename V>
V instruction_attr(const KernelContext& ctx, const FusedInstruction& ins, const std::string& name) {
  auto it = ins.attrs.find(name);
  if (it == ins.attrs.end())
    ctx.fail("malformed fused program: instruction '", ins.node, "' (op ", ins.op, ") lacks attr '", name, "'");
  return it->second.get<V>(ctx.node().describe() + " instruction attr '" + name + "'");
}

/// The key under which an evaluator's table holds the function of `ins`: its op, or
/// "Gelu/tanh" for a Gelu with approximate="tanh". Sets `*number` to the instruction's
/// number argument (LeakyRelu's alpha; 0 for the others).
std::string fused_instruction_key(const KernelContext& ctx, const FusedInstruction& ins, double* number);

/// The shapes of an epilogue's program inputs: the product's, then ctx's inputs from
/// `first_arg` on.
std::vector<Shape> epilogue_shapes(const KernelContext& ctx, const Shape& product, int first_arg);

/// Runs `f` (a fused node's product stage: its shape checks) so that an error also names
/// the product's own node (the fused node carries the group's last node's name).
template <typename F>
auto in_product(const KernelContext& ctx, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw_error(e.what(), "; in the product node '", ctx.attr<std::string>("producer"), "'");
  }
}

}  // namespace spire::kernels
