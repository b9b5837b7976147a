// CPU/GPU parity cases for the nodes the fusion pass makes (core/fusion.h), built here by
// hand so that every evaluator path runs on both devices whatever the pass chooses:
//  - FusedElementwise over same-shape inputs and a scalar (the flat path) and over a row, a
//    column and a broadcast block (the strided path), with attr-carrying instructions (Gelu
//    tanh and exact, LeakyRelu's alpha), a unary op on an input and GeluGrad;
//  - FusedMatMul with a bias + Relu epilogue (rewritten in the output), transposed operands,
//    and an epilogue whose result is larger than the product (product in scratch memory);
//  - FusedConv2D with bias + LeakyRelu and with a residual add;
//  - FusedMaxPoolGrad with a mask (a ReLU's gradient).
// Sessions fuse by default, so the gradient and parity cases of chains also run fused on the
// GPU (kernels/cuda/fused_program.cu); these make sure each fused kernel runs even where the
// pass would not have made it. ParityCases.RunOnTheCpuTwiceWithTheSameResult runs them on the
// CPU in every build.
#include <string>
#include <vector>

#include "core/ops/nn_ops.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;

// A fused program as the pass writes it into a node's attrs (core/ops/fused_ops.cc).
struct Program {
  std::vector<std::string> ops, nodes, strings, number_names;
  std::vector<int64_t> operands;
  std::vector<double> numbers;
  Program& op(const std::string& type, std::vector<int64_t> args) {
    nodes.push_back("i" + std::to_string(ops.size()) + "_" + type);
    ops.push_back(type);
    operands.insert(operands.end(), args.begin(), args.end());
    return *this;
  }
  Program& str(const std::string& attr, const std::string& value) {
    strings.push_back(std::to_string(ops.size() - 1) + "/" + attr);
    strings.push_back(value);
    return *this;
  }
  Program& num(const std::string& attr, double value) {
    number_names.push_back(std::to_string(ops.size() - 1) + "/" + attr);
    numbers.push_back(value);
    return *this;
  }
  AttrMap attrs(AttrMap a = {}) const {
    a["ops"] = ops;
    a["operands"] = operands;
    a["nodes"] = nodes;
    a["string_attrs"] = strings;
    a["number_attr_names"] = number_names;
    a["number_attrs"] = numbers;
    return a;
  }
};

Output fused(const std::string& type, const In& in, const AttrMap& attrs) {
  return default_graph().add_node(type, in, attrs, type)->output(0);
}

void add(const std::string& op, const std::string& name, std::vector<ParityInput> inputs,
         std::function<Outs(const In&)> build, double tol_f32 = 1e-5, double tol_f64 = 1e-12) {
  register_parity_case(ParityCase{op, name, std::move(inputs), std::move(build), {DType::F32, DType::F64},
                                  tol_f32, tol_f64});
}

const bool kCases [[maybe_unused]] = [] {
  // Inputs 0..2 (full, full, scalar): ((x + y) * s) -> Gelu tanh -> LeakyRelu(0.2) - Tanh(y),
  // then GeluGrad with x.
  add("FusedElementwise", "flat: full and scalar inputs", {{{4, 33, 7}}, {{4, 33, 7}}, {{}}},
      [](const In& x) -> Outs {
        Program p;
        p.op("Add", {0, 1}).op("Mul", {3, 2}).op("Gelu", {4}).str("approximate", "tanh");
        p.op("LeakyRelu", {5}).num("alpha", 0.2).op("Tanh", {1}).op("Sub", {6, 7}).op("GeluGrad", {8, 0});
        return {fused("FusedElementwise", x, p.attrs())};
      });
  // Inputs: full [3, 5, 11], row [11], column [3, 1, 1], block [5, 1]: strided reads.
  add("FusedElementwise", "strided: row, column and block broadcasts",
      {{{3, 5, 11}}, {{11}}, {{3, 1, 1}, DType::Invalid, 0.5, 2}, {{5, 1}}},
      [](const In& x) -> Outs {
        Program p;
        p.op("Add", {0, 1}).op("Div", {4, 2}).op("Gelu", {5}).str("approximate", "none");
        p.op("Maximum", {6, 3}).op("Sigmoid", {7});
        return {fused("FusedElementwise", x, p.attrs())};
      });
  // A program whose inputs are all smaller than its result: [6, 1] + [1, 9].
  add("FusedElementwise", "outer broadcast", {{{6, 1}}, {{1, 9}}}, [](const In& x) -> Outs {
    Program p;
    p.op("Mul", {0, 1}).op("Exp", {2});
    return {fused("FusedElementwise", x, p.attrs())};
  });
  add("FusedMatMul", "bias + Relu in the output", {{{9, 13}}, {{13, 17}}, {{17}}}, [](const In& x) -> Outs {
    Program p;
    p.op("Add", {0, 1}).op("Relu", {2});
    AttrMap a = p.attrs();
    a["producer"] = std::string("matmul");
    return {fused("FusedMatMul", x, a)};
  });
  add("FusedMatMul", "transposed operands, result larger than the product",
      {{{13, 9}}, {{17, 13}}, {{2, 9, 17}}}, [](const In& x) -> Outs {
        Program p;
        p.op("Sub", {0, 1}).op("Tanh", {2});
        AttrMap a = p.attrs();
        a["transpose_a"] = true;
        a["transpose_b"] = true;
        return {fused("FusedMatMul", x, a)};
      });
  add("FusedConv2D", "bias + LeakyRelu, SAME, stride 2", {{{2, 9, 9, 3}}, {{3, 3, 3, 5}}, {{5}}},
      [](const In& x) -> Outs {
        Program p;
        p.op("Add", {0, 1}).op("LeakyRelu", {2}).num("alpha", 0.1);
        AttrMap a = p.attrs();
        a["strides"] = std::vector<int64_t>{2, 2};
        return {fused("FusedConv2D", x, a)};
      }, 1e-4, 1e-10);
  add("FusedConv2D", "residual add + Relu, VALID", {{{2, 8, 8, 4}}, {{3, 3, 4, 6}}, {{2, 6, 6, 6}}},
      [](const In& x) -> Outs {
        Program p;
        p.op("Add", {0, 1}).op("Relu", {2});
        AttrMap a = p.attrs();
        a["padding"] = std::string("VALID");
        return {fused("FusedConv2D", x, a)};
      }, 1e-4, 1e-10);
  // dx of a 2x2 / stride-2 max pool times a mask (a ReLU's gradient), y computed from x.
  add("FusedMaxPoolGrad", "dx times a mask", {{{2, 6, 7, 3}}, {{2, 3, 3, 3}}, {{2, 6, 7, 3}}},
      [](const In& x) -> Outs {
        Program p;
        p.op("Mul", {0, 1});
        AttrMap a = p.attrs();
        a["ksize"] = std::vector<int64_t>{2, 2};
        a["strides"] = std::vector<int64_t>{2, 2};
        a["padding"] = std::string("VALID");
        const Output y = ops::max_pool(x[0], {2, 2}, {2, 2}, "VALID");
        return {fused("FusedMaxPoolGrad", {x[0], y, x[1], x[2]}, a)};
      });
  return true;
}();

}  // namespace
}  // namespace spire::testing
