// The CPU kernel of FusedElementwise (core/fusion.h, core/ops/fused_ops.cc): a
// group of elementwise ops evaluated block by block. Each block of kBlock
// output elements runs the instructions in order, each through the same
// per-instruction-set loop and functor as the op's own kernel
// (kernels/cpu/vector_loops.h, kernels/functors.h), into a scratch row that
// stays in the core's L1 cache; only the group's inputs are read from memory
// and only its result is written. An instruction whose operands are all one
// value (scalars) is computed once. Inputs broadcast to the result's shape:
// a full input is read in place, a scalar as one value, any other broadcast
// gathered per block. Results equal the unfused ops' bit for bit (the same
// arithmetic in the same precision; compiled without FMA contraction, as
// kernels/cpu/elementwise.cc). Also registers, for core's pass, which ops fuse
// on the CPU and for which dtypes (f32, f64).
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "core/fusion.h"
#include "core/kernel_registry.h"
#include "core/ops/math_ops.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/vector_loops.h"
#include "kernels/elementwise_table.h"
#include "kernels/functors.h"

namespace spire::cpu {
namespace {

constexpr int64_t kBlock = 512;

/// One instruction over a block: c[0, n) = f(a, b), where an operand flagged scalar is one
/// value broadcast over the block (b is unused by unary ops).
template <typename T>
using BlockFn = std::function<void(const T* a, bool a_scalar, const T* b, bool b_scalar, T* c, int64_t n)>;

template <typename T, typename F>
BlockFn<T> unary_block(F f) {
  return [f](const T* a, bool, const T*, bool, T* c, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
      unary_vec(a, c, n, f);
    } else {
      for (int64_t i = 0; i < n; ++i) c[i] = f(a[i]);
    }
  };
}

template <typename T, typename F>
BlockFn<T> binary_block(F f) {
  return [f](const T* a, bool sa, const T* b, bool sb, T* c, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
      if (sb) return binary_vec<VecScalar::kB>(a, b, c, n, f);
      if (sa) return binary_vec<VecScalar::kA>(a, b, c, n, f);
      return binary_vec<VecScalar::kNone>(a, b, c, n, f);
    } else {
      if (sb) {
        const T bv = b[0];
        for (int64_t i = 0; i < n; ++i) c[i] = f(a[i], bv);
      } else if (sa) {
        const T av = a[0];
        for (int64_t i = 0; i < n; ++i) c[i] = f(av, b[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) c[i] = f(a[i], b[i]);
      }
    }
  };
}

/// Makes an instruction's block function from that instruction's own attrs.
template <typename T>
using Maker = std::function<BlockFn<T>(const KernelContext& ctx, const AttrMap& attrs)>;

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

/// An instruction's attr (a clear error when absent or of another type).
template <typename V>
V instruction_attr(const KernelContext& ctx, const AttrMap& attrs, const std::string& name) {
  auto it = attrs.find(name);
  if (it == attrs.end()) ctx.fail("malformed fused program: an instruction lacks attr '", name, "'");
  return it->second.get<V>(ctx.node().describe() + " instruction attr '" + name + "'");
}

template <typename T>
struct OpTable {
  std::map<std::string, std::pair<int, Maker<T>>> ops;  // op -> (arity, maker)
};

template <typename T>
OpTable<T>& op_table() {
  static OpTable<T> t;
  return t;
}

template <typename T>
constexpr DType dtype_of_v = std::is_same_v<T, float> ? DType::F32 : DType::F64;

// Fills both tables from the shared elementwise table and registers what fuses.
struct TableFiller {
  template <typename F>
  void binary(const char* op, F f, std::initializer_list<DType> dtypes) const {
    add<2>(op, f, dtypes);
  }
  template <typename F>
  void unary(const char* op, F f, std::initializer_list<DType> dtypes) const {
    add<1>(op, f, dtypes);
  }
  template <int kArity, typename F>
  void add(const char* op, F f, std::initializer_list<DType> dtypes) const {
    for (DType dt : dtypes) {
      if (dt == DType::F32) add_typed<float, kArity>(op, f);
      if (dt == DType::F64) add_typed<double, kArity>(op, f);
    }
  }
  template <typename T, int kArity, typename F>
  static void add_typed(const char* op, F f) {
    if constexpr (kArity == 2) {
      // Same-dtype ops only: a comparison's bool result does not fuse.
      if constexpr (std::is_invocable_v<F, T, T> && functors::kSupports<F, T>) {
        if constexpr (std::is_same_v<std::invoke_result_t<F, T, T>, T>) {
          op_table<T>().ops[op] = {2, [f](const KernelContext&, const AttrMap&) { return binary_block<T>(f); }};
          register_fusable(DeviceType::CPU, op, dtype_of_v<T>, 2);
        }
      }
    } else if constexpr (std::is_invocable_v<F, T> && functors::kSupports<F, T>) {
      if constexpr (std::is_same_v<std::invoke_result_t<F, T>, T>) {
        op_table<T>().ops[op] = {1, [f](const KernelContext&, const AttrMap&) { return unary_block<T>(f); }};
        register_fusable(DeviceType::CPU, op, dtype_of_v<T>, 1);
      }
    }
  }
};

template <typename T>
void add_attr_ops() {
  op_table<T>().ops["Gelu"] = {1, [](const KernelContext& ctx, const AttrMap& attrs) -> BlockFn<T> {
    const bool tanh_form = ops::parse_gelu_approximate(instruction_attr<std::string>(ctx, attrs, "approximate")) ==
                           ops::GeluApproximate::kTanh;
    if (tanh_form) return unary_block<T>(functors::GeluTanh{});
    return unary_block<T>(functors::Gelu{});
  }};
  register_fusable(DeviceType::CPU, "Gelu", dtype_of_v<T>, 1);
  op_table<T>().ops["LeakyRelu"] = {1, [](const KernelContext& ctx, const AttrMap& attrs) {
    return unary_block<T>(functors::LeakyRelu{instruction_attr<double>(ctx, attrs, "alpha")});
  }};
  register_fusable(DeviceType::CPU, "LeakyRelu", dtype_of_v<T>, 1);
}

/// How an input is read for a block.
enum class InputKind { kFull, kScalar, kGather };

struct Instruction {
  int a = 0, b = -1;  // value indices (inputs first, then instructions); b < 0: unary
};

template <typename T>
void fused_kernel(KernelContext& ctx) {
  const auto ops = ctx.attr<std::vector<std::string>>("ops");
  const auto operands = ctx.attr<std::vector<int64_t>>("operands");
  const auto names = ctx.attr<std::vector<std::string>>("nodes");
  const int nin = ctx.num_inputs();
  const int ni = static_cast<int>(ops.size());
  if (ni == 0 || names.size() != ops.size()) ctx.fail("malformed fused program: ", ni, " ops, ", names.size(), " names");
  // Decode the program and check every instruction's shapes as the unfused op would.
  std::vector<BlockFn<T>> fns;
  std::vector<Instruction> code;
  std::vector<Shape> shape(static_cast<size_t>(nin + ni));
  for (int k = 0; k < nin; ++k) shape[static_cast<size_t>(k)] = ctx.input(k).shape();
  const std::vector<AttrMap> attrs = instruction_attrs(ctx, ni);
  size_t next = 0;
  for (int j = 0; j < ni; ++j) {
    const std::string& op = ops[static_cast<size_t>(j)];
    auto entry = op_table<T>().ops.find(op);
    if (entry == op_table<T>().ops.end())
      ctx.fail("fused node '", names[static_cast<size_t>(j)], "': op ", op, " does not fuse for ", dtype_name(dtype_of_v<T>));
    const int arity = entry->second.first;
    if (next + static_cast<size_t>(arity) > operands.size())
      ctx.fail("malformed fused program: too few operands for instruction ", j);
    Instruction ins;
    int refs[2] = {-1, -1};
    for (int r = 0; r < arity; ++r) {
      const int64_t v = operands[next++];
      if (v < 0 || v >= nin + j) ctx.fail("malformed fused program: operand ", v, " of instruction ", j);
      refs[r] = static_cast<int>(v);
    }
    ins.a = refs[0];
    ins.b = arity == 2 ? refs[1] : -1;
    Shape s = shape[static_cast<size_t>(ins.a)];
    // GeluGrad takes one shape (its kernel does not broadcast); every other binary op broadcasts.
    if (ins.b >= 0 && op == "GeluGrad" && !(shape[static_cast<size_t>(ins.a)] == shape[static_cast<size_t>(ins.b)]))
      ctx.fail("fused node '", names[static_cast<size_t>(j)], "' (op GeluGrad): dy and x must have one shape, got ",
               shape[static_cast<size_t>(ins.a)].to_string(), " and ", shape[static_cast<size_t>(ins.b)].to_string());
    if (ins.b >= 0 && !broadcast_shapes(shape[static_cast<size_t>(ins.a)], shape[static_cast<size_t>(ins.b)], &s))
      ctx.fail("fused node '", names[static_cast<size_t>(j)], "' (op ", op, "): shapes ",
               shape[static_cast<size_t>(ins.a)].to_string(), " and ",
               shape[static_cast<size_t>(ins.b)].to_string(), " do not broadcast");
    shape[static_cast<size_t>(nin + j)] = s;
    fns.push_back(entry->second.second(ctx, attrs[static_cast<size_t>(j)]));
    code.push_back(ins);
  }
  const Shape out_shape = shape.back();
  std::vector<int> candidates;
  for (int k = 0; k < nin; ++k) candidates.push_back(k);
  Tensor& out = ctx.forward_input_or_allocate_output(candidates, 0, out_shape);
  const int64_t total = out.num_elements();
  if (total == 0) return;
  T* po = out.data<T>();

  // The inputs' reads: full (the result's elements, in place), one value, or gathered.
  std::vector<InputKind> kind(static_cast<size_t>(nin));
  std::vector<const T*> in_ptr(static_cast<size_t>(nin));
  std::vector<std::vector<int64_t>> strides(static_cast<size_t>(nin));
  for (int k = 0; k < nin; ++k) {
    const Tensor& x = ctx.input(k);
    in_ptr[static_cast<size_t>(k)] = x.data<T>();
    const int64_t n = x.num_elements();
    if (n == total) {
      kind[static_cast<size_t>(k)] = InputKind::kFull;
    } else if (n == 1) {
      kind[static_cast<size_t>(k)] = InputKind::kScalar;
    } else {
      kind[static_cast<size_t>(k)] = InputKind::kGather;
      strides[static_cast<size_t>(k)] = broadcast_strides(x.shape(), out_shape);
    }
  }
  const int rank = out_shape.rank();
  const int64_t nblocks = (total + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / kBlock);
  ctx.parallel_for(nblocks, grain, [&](int64_t b0, int64_t b1) {
    std::vector<T> scratch(static_cast<size_t>((nin + ni) * kBlock));
    std::vector<const T*> val(static_cast<size_t>(nin + ni));
    std::vector<char> scalar(static_cast<size_t>(nin + ni));
    std::vector<int64_t> idx(static_cast<size_t>(rank));
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t o = blk * kBlock;
      const int64_t n = std::min(kBlock, total - o);
      for (int k = 0; k < nin; ++k) {
        const auto ku = static_cast<size_t>(k);
        scalar[ku] = kind[ku] == InputKind::kScalar;
        if (kind[ku] == InputKind::kFull) {
          val[ku] = in_ptr[ku] + o;
        } else if (kind[ku] == InputKind::kScalar) {
          val[ku] = in_ptr[ku];
        } else {
          // Unravel o, then walk the block with the input's broadcast strides.
          T* dst = scratch.data() + ku * kBlock;
          const auto& st = strides[ku];
          int64_t rem = o, off = 0;
          for (int d = rank - 1; d >= 0; --d) {
            idx[static_cast<size_t>(d)] = rem % out_shape[d];
            rem /= out_shape[d];
            off += idx[static_cast<size_t>(d)] * st[static_cast<size_t>(d)];
          }
          for (int64_t i = 0; i < n; ++i) {
            dst[i] = in_ptr[ku][off];
            for (int d = rank - 1; d >= 0; --d) {
              const auto du = static_cast<size_t>(d);
              off += st[du];
              if (++idx[du] < out_shape[d]) break;
              off -= st[du] * out_shape[d];
              idx[du] = 0;
            }
          }
          val[ku] = dst;
        }
      }
      for (int j = 0; j < ni; ++j) {
        const Instruction& ins = code[static_cast<size_t>(j)];
        const auto v = static_cast<size_t>(nin + j);
        const bool sa = scalar[static_cast<size_t>(ins.a)];
        const bool sb = ins.b < 0 || scalar[static_cast<size_t>(ins.b)];
        const T* a = val[static_cast<size_t>(ins.a)];
        const T* b = ins.b < 0 ? nullptr : val[static_cast<size_t>(ins.b)];
        T* dst = scratch.data() + v * kBlock;
        if (sa && sb) {  // one value for the whole block
          fns[static_cast<size_t>(j)](a, true, b, true, dst, 1);
          scalar[v] = 1;
          if (j == ni - 1)
            for (int64_t i = 0; i < n; ++i) po[o + i] = dst[0];
        } else {
          if (j == ni - 1) dst = po + o;
          fns[static_cast<size_t>(j)](a, sa, b, sb, dst, n);
          scalar[v] = 0;
        }
        val[v] = dst;
      }
    }
  });
}

struct Registrar {
  Registrar() {
    kernels::visit_elementwise_table(TableFiller{});
    add_attr_ops<float>();
    add_attr_ops<double>();
    KernelRegistry::global().add("FusedElementwise", DeviceType::CPU, DType::F32, fused_kernel<float>);
    KernelRegistry::global().add("FusedElementwise", DeviceType::CPU, DType::F64, fused_kernel<double>);
  }
} registrar;

}  // namespace
}  // namespace spire::cpu
