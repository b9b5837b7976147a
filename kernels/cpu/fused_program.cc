// The CPU evaluator of fused elementwise programs (kernels/cpu/fused_program.h).
// Compiled without FMA contraction, as kernels/cpu/elementwise.cc, so every
// instruction rounds as the op's own kernel does.
#include "kernels/cpu/fused_program.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "core/fusion.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/vector_loops.h"
#include "kernels/elementwise_table.h"
#include "kernels/fused_decode.h"
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
using Maker = std::function<BlockFn<T>(const KernelContext& ctx, const kernels::FusedInstruction& ins)>;

template <typename T>
struct OpTable {
  std::map<std::string, Maker<T>> ops;
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
          op_table<T>().ops[op] = [f](const KernelContext&, const kernels::FusedInstruction&) { return binary_block<T>(f); };
          register_fusable(DeviceType::CPU, op, dtype_of_v<T>, 2);
        }
      }
    } else if constexpr (std::is_invocable_v<F, T> && functors::kSupports<F, T>) {
      if constexpr (std::is_same_v<std::invoke_result_t<F, T>, T>) {
        op_table<T>().ops[op] = [f](const KernelContext&, const kernels::FusedInstruction&) { return unary_block<T>(f); };
        register_fusable(DeviceType::CPU, op, dtype_of_v<T>, 1);
      }
    }
  }
};

template <typename T>
void add_attr_ops() {
  op_table<T>().ops["Gelu"] = [](const KernelContext& ctx, const kernels::FusedInstruction& ins) -> BlockFn<T> {
    double unused;
    if (kernels::fused_instruction_key(ctx, ins, &unused) == "Gelu/tanh") return unary_block<T>(functors::GeluTanh{});
    return unary_block<T>(functors::Gelu{});
  };
  register_fusable(DeviceType::CPU, "Gelu", dtype_of_v<T>, 1);
  op_table<T>().ops["LeakyRelu"] = [](const KernelContext& ctx, const kernels::FusedInstruction& ins) {
    double alpha;
    kernels::fused_instruction_key(ctx, ins, &alpha);
    return unary_block<T>(functors::LeakyRelu{alpha});
  };
  register_fusable(DeviceType::CPU, "LeakyRelu", dtype_of_v<T>, 1);
  // Identity (a layer's "output" node between a BatchNorm and its activation, say) is a copy
  // inside a block: it no longer breaks a chain.
  op_table<T>().ops["Identity"] = [](const KernelContext&, const kernels::FusedInstruction&) {
    return unary_block<T>([](T x) { return x; });
  };
  register_fusable(DeviceType::CPU, "Identity", dtype_of_v<T>, 1);
}


/// How an input is read for a block.
/// How an input is read for a block: in place (the result's own elements), as one value,
/// as a repeated row (its shape, leading 1s dropped, is the result's trailing dims: a bias),
/// or gathered element by element through broadcast strides.
enum class InputKind { kFull, kScalar, kRow, kGather };

/// Whether `in` (leading 1s dropped) equals the trailing dims of `out`.
bool is_trailing_row(const Shape& in, const Shape& out) {
  int lead = 0;
  while (lead < in.rank() && in[lead] == 1) ++lead;
  const int r = in.rank() - lead;
  if (r > out.rank()) return false;
  for (int i = 0; i < r; ++i)
    if (in[lead + i] != out[out.rank() - r + i]) return false;
  return true;
}

struct Instruction {
  int a = 0, b = -1;  // value indices (inputs first, then instructions); b < 0: unary
};

struct Registrar {
  Registrar() {
    kernels::visit_elementwise_table(TableFiller{});
    add_attr_ops<float>();
    add_attr_ops<double>();
  }
} registrar;

}  // namespace

template <typename T>
struct FusedProgram<T>::Impl {
  std::vector<BlockFn<T>> fns;
  std::vector<Instruction> code;
  std::vector<Shape> shape;  // inputs, then instructions
  int nin = 0, ni = 0;
  int64_t total = 0;
  // Bound data.
  std::vector<InputKind> kind;
  std::vector<const T*> in_ptr;
  std::vector<std::vector<int64_t>> strides;
  T* out = nullptr;
};

template <typename T>
FusedProgram<T>::FusedProgram(const KernelContext& ctx, std::vector<Shape> shapes) : impl_(new Impl) {
  Impl& p = *impl_;
  kernels::FusedProgramCode decoded =
      kernels::decode_fused_program(ctx, std::move(shapes), DeviceType::CPU, dtype_of_v<T>);
  p.nin = decoded.nin;
  p.ni = static_cast<int>(decoded.code.size());
  for (const kernels::FusedInstruction& ins : decoded.code) {
    auto entry = op_table<T>().ops.find(ins.op);
    if (entry == op_table<T>().ops.end())
      ctx.fail("fused node '", ins.node, "': op ", ins.op, " has no CPU evaluator for ", dtype_name(dtype_of_v<T>));
    p.fns.push_back(entry->second(ctx, ins));
    p.code.push_back(Instruction{ins.a, ins.b});
  }
  p.shape = std::move(decoded.shapes);
  p.total = p.shape.back().num_elements();
}

template <typename T>
FusedProgram<T>::~FusedProgram() = default;

template <typename T>
const Shape& FusedProgram<T>::output_shape() const {
  return impl_->shape.back();
}

template <typename T>
void FusedProgram<T>::bind(std::vector<const T*> inputs, T* out) {
  Impl& p = *impl_;
  SPIRE_CHECK(static_cast<int>(inputs.size()) == p.nin, "FusedProgram::bind: ", inputs.size(), " inputs for ", p.nin);
  p.in_ptr = std::move(inputs);
  p.out = out;
  p.kind.assign(static_cast<size_t>(p.nin), InputKind::kFull);
  p.strides.assign(static_cast<size_t>(p.nin), {});
  const Shape& out_shape = output_shape();
  for (int k = 0; k < p.nin; ++k) {
    const auto ku = static_cast<size_t>(k);
    const int64_t n = p.shape[ku].num_elements();
    if (n == p.total) {
      p.kind[ku] = InputKind::kFull;
    } else if (n == 1) {
      p.kind[ku] = InputKind::kScalar;
    } else if (is_trailing_row(p.shape[ku], out_shape)) {
      p.kind[ku] = InputKind::kRow;
    } else {
      p.kind[ku] = InputKind::kGather;
      p.strides[ku] = broadcast_strides(p.shape[ku], out_shape);
    }
  }
}

// One evaluating thread's scratch: a block row per value, the values' pointers and flags.
template <typename T>
struct FusedProgram<T>::Workspace {
  explicit Workspace(const Impl& p)
      : scratch(static_cast<size_t>((p.nin + p.ni) * kBlock)), val(static_cast<size_t>(p.nin + p.ni)),
        scalar(static_cast<size_t>(p.nin + p.ni)), idx(static_cast<size_t>(p.shape.back().rank())) {}
  std::vector<T> scratch;
  std::vector<const T*> val;
  std::vector<char> scalar;
  std::vector<int64_t> idx;
};

template <typename T>
void FusedProgram<T>::run(int64_t begin, int64_t end) const {
  Workspace ws(*impl_);
  run(ws, begin, end);
}

template <typename T>
void FusedProgram<T>::run(Workspace& ws, int64_t begin, int64_t end) const {
  const Impl& p = *impl_;
  const int nin = p.nin, ni = p.ni;
  const Shape& out_shape = output_shape();
  const int rank = out_shape.rank();
  T* po = p.out;
  std::vector<T>& scratch = ws.scratch;
  std::vector<const T*>& val = ws.val;
  std::vector<char>& scalar = ws.scalar;
  std::vector<int64_t>& idx = ws.idx;
  for (int64_t o = begin; o < end; o += kBlock) {
    const int64_t n = std::min(kBlock, end - o);
    for (int k = 0; k < nin; ++k) {
      const auto ku = static_cast<size_t>(k);
      scalar[ku] = p.kind[ku] == InputKind::kScalar;
      if (p.kind[ku] == InputKind::kFull) {
        val[ku] = p.in_ptr[ku] + o;
      } else if (p.kind[ku] == InputKind::kScalar) {
        val[ku] = p.in_ptr[ku];
      } else if (p.kind[ku] == InputKind::kRow) {
        // Runs of the row from o's place in it, wrapping around.
        T* dst = scratch.data() + ku * kBlock;
        const int64_t period = p.shape[ku].num_elements();
        int64_t at = o % period;
        for (int64_t i = 0; i < n;) {
          const int64_t run = std::min(n - i, period - at);
          std::copy(p.in_ptr[ku] + at, p.in_ptr[ku] + at + run, dst + i);
          i += run;
          at = 0;
        }
        val[ku] = dst;
      } else {
        // Unravel o, then walk the block with the input's broadcast strides.
        T* dst = scratch.data() + ku * kBlock;
        const auto& st = p.strides[ku];
        int64_t rem = o, off = 0;
        for (int d = rank - 1; d >= 0; --d) {
          idx[static_cast<size_t>(d)] = rem % out_shape[d];
          rem /= out_shape[d];
          off += idx[static_cast<size_t>(d)] * st[static_cast<size_t>(d)];
        }
        for (int64_t i = 0; i < n; ++i) {
          dst[i] = p.in_ptr[ku][off];
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
      const Instruction& ins = p.code[static_cast<size_t>(j)];
      const auto v = static_cast<size_t>(nin + j);
      const bool sa = scalar[static_cast<size_t>(ins.a)];
      const bool sb = ins.b < 0 || scalar[static_cast<size_t>(ins.b)];
      const T* a = val[static_cast<size_t>(ins.a)];
      const T* b = ins.b < 0 ? nullptr : val[static_cast<size_t>(ins.b)];
      T* dst = scratch.data() + v * kBlock;
      if (sa && sb) {  // one value for the whole block
        p.fns[static_cast<size_t>(j)](a, true, b, true, dst, 1);
        scalar[v] = 1;
        if (j == ni - 1)
          for (int64_t i = 0; i < n; ++i) po[o + i] = dst[0];
      } else {
        if (j == ni - 1) dst = po + o;
        p.fns[static_cast<size_t>(j)](a, sa, b, sb, dst, n);
        scalar[v] = 0;
      }
      val[v] = dst;
    }
  }
}

template <typename T>
void FusedProgram<T>::run_block(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t cols) const {
  Workspace ws(*impl_);
  if (c0 == 0 && c1 == cols) return run(ws, r0 * cols, r1 * cols);
  for (int64_t r = r0; r < r1; ++r) run(ws, r * cols + c0, r * cols + c1);
}

template <typename T>
void FusedProgram<T>::run_all(KernelContext& ctx) const {
  const int64_t total = impl_->total;
  if (total == 0) return;
  const int64_t nblocks = (total + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / kBlock);
  ctx.parallel_for(nblocks, grain, [&](int64_t b0, int64_t b1) {
    run(b0 * kBlock, std::min(total, b1 * kBlock));
  });
}

template <typename T>
Epilogue<T>::Epilogue(KernelContext& ctx, const Shape& product, int first_arg)
    : program_(ctx, kernels::epilogue_shapes(ctx, product, first_arg)),
      in_place_(program_.output_shape() == product),
      cols_(product.rank() > 0 ? product[product.rank() - 1] : 1) {
  for (int k = first_arg; k < ctx.num_inputs(); ++k) args_.push_back(ctx.input(k).data<T>());
  out_ = &ctx.allocate_output(0, program_.output_shape());
  if (!in_place_) temp_.resize(static_cast<size_t>(product.num_elements()));
}

template <typename T>
void Epilogue<T>::bind_product(T* buf) {
  std::vector<const T*> inputs{buf};
  inputs.insert(inputs.end(), args_.begin(), args_.end());
  program_.bind(std::move(inputs), in_place_ ? buf : out_->data<T>());
}

template <typename T>
void Epilogue<T>::finish(KernelContext& ctx) {
  SPIRE_CHECK(!in_place_, "Epilogue::finish: the epilogue runs in place");
  bind_product(temp_.data());
  program_.run_all(ctx);
}

template class FusedProgram<float>;
template class FusedProgram<double>;
template class Epilogue<float>;
template class Epilogue<double>;

}  // namespace spire::cpu
