// The per-element form of a fused elementwise program (core/fusion.h), as a
// GPU thread evaluates it (kernels/cuda/fused_program.cu): every instruction
// is one function of the signature FusedFn, made from the op's shared functor
// (kernels/functors.h) by fused_call, and a thread computes its output element
// from its inputs' elements through the whole program, so the group's
// intermediate values never leave registers. Everything here is SPIRE_HD or
// host code with no CUDA include, so tests/kernels/fused_code_test.cc runs the
// same evaluator on the host, with host function pointers, against the CPU's
// block evaluator (kernels/cpu/fused_program.h).
//
// visit_fused_instructions lists what a per-element evaluator runs: the same
// (op, dtype) pairs as the CPU evaluator (the shared elementwise table's ops
// whose result has the operands' dtype, for f32 and f64; Gelu exact and tanh,
// LeakyRelu, Identity), each under the key fused_instruction_key gives
// (kernels/fused_decode.h).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "core/fusion.h"
#include "kernels/broadcast_index.h"
#include "kernels/elementwise_table.h"
#include "kernels/functors.h"
#include "kernels/fused_decode.h"

namespace spire::kernels {

/// One instruction of T: its result from its operands (b is a's value for a unary op) and
/// its number argument (LeakyRelu's alpha).
template <typename T>
using FusedFn = T (*)(T a, T b, double number);

/// Instruction wrappers: W::apply is what fused_call<W, T> computes.
template <typename F>
struct FusedBinary {
  template <typename T>
  SPIRE_HD static T apply(T a, T b, double) {
    return F{}(a, b);
  }
};
template <typename F>
struct FusedUnary {
  template <typename T>
  SPIRE_HD static T apply(T a, T, double) {
    return F{}(a);
  }
};
struct FusedLeakyRelu {
  template <typename T>
  SPIRE_HD static T apply(T a, T, double alpha) {
    return functors::LeakyRelu{alpha}(a);
  }
};
struct FusedCopy {
  template <typename T>
  SPIRE_HD static T apply(T a, T, double) {
    return a;
  }
};

template <typename W, typename T>
SPIRE_HD T fused_call(T a, T b, double number) {
  return W::template apply<T>(a, b, number);
}

namespace detail {
template <typename T>
constexpr DType fused_dtype_v = std::is_same_v<T, float> ? DType::F32 : DType::F64;

template <typename T, typename Sink>
struct FusedTableVisitor {
  Sink& sink;
  static bool lists(std::initializer_list<DType> dtypes) {
    for (DType d : dtypes)
      if (d == fused_dtype_v<T>) return true;
    return false;
  }
  template <typename F>
  void binary(const char* op, F, std::initializer_list<DType> dtypes) const {
    // Same-dtype ops only: a comparison's bool result does not fuse.
    if constexpr (std::is_invocable_v<F, T, T> && functors::kSupports<F, T>) {
      if constexpr (std::is_same_v<std::invoke_result_t<F, T, T>, T>)
        if (lists(dtypes)) sink.template add<FusedBinary<F>>(op, op, 2);
    }
  }
  template <typename F>
  void unary(const char* op, F, std::initializer_list<DType> dtypes) const {
    if constexpr (std::is_invocable_v<F, T> && functors::kSupports<F, T>) {
      if constexpr (std::is_same_v<std::invoke_result_t<F, T>, T>)
        if (lists(dtypes)) sink.template add<FusedUnary<F>>(op, op, 1);
    }
  }
};
}  // namespace detail

/// Calls sink.template add<W>(op, key, arity) for every instruction a per-element
/// evaluator of T (float or double) runs: `op` is the graph op, `key` its entry under
/// fused_instruction_key, W its wrapper for fused_call.
template <typename T, typename Sink>
void visit_fused_instructions(Sink& sink) {
  visit_elementwise_table(detail::FusedTableVisitor<T, Sink>{sink});
  sink.template add<FusedUnary<functors::Gelu>>("Gelu", "Gelu", 1);
  sink.template add<FusedUnary<functors::GeluTanh>>("Gelu", "Gelu/tanh", 1);
  sink.template add<FusedLeakyRelu>("LeakyRelu", "LeakyRelu", 1);
  sink.template add<FusedCopy>("Identity", "Identity", 1);
}

/// A program ready for per-element evaluation: instruction j computes value nin + j as
/// fn[j](value a[j], value b[j] (a[j] when unary), number[j]); input k's element for output
/// element i is in[k][i], in[k][0] when `scalar[k]` (when `flat`), else at its broadcast
/// offset (bi). Passed to a GPU kernel by value.
template <typename T, typename I>
struct FusedCode {
  int nin = 0, ni = 0;
  bool flat = true;
  bool scalar[kMaxFusedInputs] = {};
  int8_t a[kMaxFusedInstructions] = {};
  int8_t b[kMaxFusedInstructions] = {};
  FusedFn<T> fn[kMaxFusedInstructions] = {};
  double number[kMaxFusedInstructions] = {};
  const T* in[kMaxFusedInputs] = {};
  BroadcastIndex<kMaxFusedInputs, I> bi;
};

/// Output element i of program c (row-major index).
template <typename T, typename I>
SPIRE_HD inline T fused_element(const FusedCode<T, I>& c, I i) {
  T v[kMaxFusedInputs + kMaxFusedInstructions];
  if (c.flat) {
    for (int k = 0; k < c.nin; ++k) v[k] = c.in[k][c.scalar[k] ? I(0) : i];
  } else {
    I off[kMaxFusedInputs];
    broadcast_offsets(c.bi, i, off);
    for (int k = 0; k < c.nin; ++k) v[k] = c.in[k][off[k]];
  }
  for (int j = 0; j < c.ni; ++j) {
    const T a = v[c.a[j]];
    v[c.nin + j] = c.fn[j](a, c.b[j] < 0 ? a : v[c.b[j]], c.number[j]);
  }
  return v[c.nin + c.ni - 1];
}

/// Fills `c` for the decoded program `p` with instruction j's function from `table` (a map
/// from fused_instruction_key to FusedFn<T>, filled by visit_fused_instructions) and input
/// k at `inputs[k]`. Fails (ctx.fail) on a key the table lacks, more inputs or instructions
/// than FusedCode holds, or a broadcast of more than kMaxBroadcastRank merged dimensions.
template <typename T, typename I, typename Table>
void make_fused_code(const KernelContext& ctx, const FusedProgramCode& p, const Table& table,
                     const std::vector<const T*>& inputs, FusedCode<T, I>* c) {
  const int ni = static_cast<int>(p.code.size());
  if (p.nin > kMaxFusedInputs || ni > kMaxFusedInstructions)
    ctx.fail("a fused program takes at most ", kMaxFusedInputs, " inputs and ", kMaxFusedInstructions,
             " instructions; got ", p.nin, " and ", ni);
  if (static_cast<int>(inputs.size()) != p.nin)
    ctx.fail("internal error: ", inputs.size(), " input pointers for ", p.nin, " program inputs");
  *c = FusedCode<T, I>{};
  c->nin = p.nin;
  c->ni = ni;
  for (int j = 0; j < ni; ++j) {
    const FusedInstruction& ins = p.code[static_cast<size_t>(j)];
    double number = 0;
    const std::string key = fused_instruction_key(ctx, ins, &number);
    auto it = table.find(key);
    if (it == table.end())
      ctx.fail("fused node '", ins.node, "': op ", ins.op, " (", key, ") has no per-element evaluator");
    c->fn[j] = it->second;
    c->number[j] = number;
    c->a[j] = static_cast<int8_t>(ins.a);
    c->b[j] = static_cast<int8_t>(ins.b);
  }
  const Shape& out = p.output_shape();
  const int64_t n = out.num_elements();
  std::array<Shape, kMaxFusedInputs> shapes{};
  for (int k = 0; k < p.nin; ++k) {
    const Shape& s = p.shapes[static_cast<size_t>(k)];
    c->in[k] = inputs[static_cast<size_t>(k)];
    shapes[static_cast<size_t>(k)] = s;
    const FlatRead r = flat_read(s.num_elements(), n);
    c->scalar[k] = r == FlatRead::kScalar;
    c->flat = c->flat && r != FlatRead::kStrided;
  }
  if (!c->flat && !make_broadcast_index<kMaxFusedInputs, I>(out, shapes, &c->bi))
    ctx.fail("a fused program broadcasts over at most ", kMaxBroadcastRank,
             " dimensions after merging; output shape ", out.to_string());
}

}  // namespace spire::kernels
