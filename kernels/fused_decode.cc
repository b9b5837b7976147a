// Decoding of fused elementwise programs (kernels/fused_decode.h).
#include "kernels/fused_decode.h"

#include <cstdlib>

#include "core/fusion.h"
#include "core/ops/math_ops.h"

namespace spire::kernels {
namespace {

/// Instruction j's own attrs, from the fused node's typed lists (core/ops/fused_ops.cc).
std::vector<AttrMap> instruction_attrs(const KernelContext& ctx, int count) {
  std::vector<AttrMap> out(static_cast<size_t>(count));
  auto add = [&](const std::string& key, AttrValue v) {
    const size_t slash = key.find('/');
    int j = -1;
    if (slash != std::string::npos) j = std::atoi(key.substr(0, slash).c_str());
    if (j < 0 || j >= count) ctx.fail("malformed fused program: attr '", key, "'");
    out[static_cast<size_t>(j)][key.substr(slash + 1)] = std::move(v);
  };
  const auto strings = ctx.attr<std::vector<std::string>>("string_attrs");
  if (strings.size() % 2) ctx.fail("malformed fused program: string_attrs has an odd length");
  for (size_t i = 0; i + 1 < strings.size(); i += 2) add(strings[i], strings[i + 1]);
  const auto names = ctx.attr<std::vector<std::string>>("number_attr_names");
  const auto numbers = ctx.attr<std::vector<double>>("number_attrs");
  if (names.size() != numbers.size()) ctx.fail("malformed fused program: number_attrs");
  for (size_t i = 0; i < names.size(); ++i) add(names[i], numbers[i]);
  return out;
}

}  // namespace

FusedProgramCode decode_fused_program(const KernelContext& ctx, std::vector<Shape> shapes,
                                      DeviceType device, DType dtype) {
  FusedProgramCode p;
  const auto ops = ctx.attr<std::vector<std::string>>("ops");
  const auto operands = ctx.attr<std::vector<int64_t>>("operands");
  const auto names = ctx.attr<std::vector<std::string>>("nodes");
  p.nin = static_cast<int>(shapes.size());
  const int nin = p.nin, ni = static_cast<int>(ops.size());
  if (ni == 0 || names.size() != ops.size())
    ctx.fail("malformed fused program: ", ni, " ops, ", names.size(), " names");
  p.shapes = std::move(shapes);
  p.shapes.resize(static_cast<size_t>(nin + ni));
  std::vector<Shape>& shape = p.shapes;
  std::vector<AttrMap> attrs = instruction_attrs(ctx, ni);
  size_t next = 0;
  for (int j = 0; j < ni; ++j) {
    const auto ju = static_cast<size_t>(j);
    FusedInstruction ins;
    ins.op = ops[ju];
    ins.node = names[ju];
    ins.attrs = std::move(attrs[ju]);
    const int arity = fusable_arity(device, ins.op, dtype);
    if (arity == 0)
      ctx.fail("fused node '", ins.node, "': op ", ins.op, " does not fuse for ", dtype_name(dtype), " on ",
               device == DeviceType::CPU ? "the CPU" : "CUDA devices");
    if (next + static_cast<size_t>(arity) > operands.size())
      ctx.fail("malformed fused program: too few operands for instruction ", j);
    int refs[2] = {-1, -1};
    for (int r = 0; r < arity; ++r) {
      const int64_t v = operands[next++];
      if (v < 0 || v >= nin + j) ctx.fail("malformed fused program: operand ", v, " of instruction ", j);
      refs[r] = static_cast<int>(v);
    }
    ins.a = refs[0];
    ins.b = arity == 2 ? refs[1] : -1;
    const Shape& sa = shape[static_cast<size_t>(ins.a)];
    Shape s = sa;
    if (ins.b >= 0) {
      const Shape& sb = shape[static_cast<size_t>(ins.b)];
      // GeluGrad takes one shape (its kernel does not broadcast); every other binary op broadcasts.
      if (ins.op == "GeluGrad" && !(sa == sb))
        ctx.fail("fused node '", ins.node, "' (op GeluGrad): dy and x must have one shape, got ", sa.to_string(),
                 " and ", sb.to_string());
      if (!broadcast_shapes(sa, sb, &s))
        ctx.fail("fused node '", ins.node, "' (op ", ins.op, "): shapes ", sa.to_string(), " and ", sb.to_string(),
                 " do not broadcast");
    }
    shape[static_cast<size_t>(nin + j)] = s;
    p.code.push_back(std::move(ins));
  }
  if (next != operands.size()) ctx.fail("malformed fused program: ", operands.size() - next, " operands left over");
  // Every input broadcasts to the result (the evaluators read inputs at the result's
  // broadcast offsets); an input that only reaches a dead instruction may not.
  const Shape& out = shape.back();
  for (int k = 0; k < nin; ++k) {
    Shape b;
    if (!broadcast_shapes(shape[static_cast<size_t>(k)], out, &b) || !(b == out))
      ctx.fail("malformed fused program: input ", k, " of shape ", shape[static_cast<size_t>(k)].to_string(),
               " does not broadcast to the result's shape ", out.to_string());
  }
  return p;
}

std::string fused_instruction_key(const KernelContext& ctx, const FusedInstruction& ins, double* number) {
  *number = 0;
  if (ins.op == "Gelu") {
    const auto form = ops::parse_gelu_approximate(instruction_attr<std::string>(ctx, ins, "approximate"));
    return form == ops::GeluApproximate::kTanh ? "Gelu/tanh" : "Gelu";
  }
  if (ins.op == "LeakyRelu") *number = instruction_attr<double>(ctx, ins, "alpha");
  return ins.op;
}

std::vector<Shape> epilogue_shapes(const KernelContext& ctx, const Shape& product, int first_arg) {
  std::vector<Shape> shapes{product};
  for (int k = first_arg; k < ctx.num_inputs(); ++k) shapes.push_back(ctx.input(k).shape());
  return shapes;
}

}  // namespace spire::kernels
