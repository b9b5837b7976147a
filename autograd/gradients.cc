// Reverse-mode autodiff in the style of TensorFlow's gradients.cc: find the
// nodes between xs and ys, count pending consumers, walk back from ys in
// reverse topological order, summing the gradients an output gets from its
// consumers before calling the op's gradient function.
#include "autograd/gradients.h"

#include <deque>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/op_registry.h"
#include "core/ops/math_ops.h"
#include "core/ops/op_util.h"
#include "core/ops/state_ops.h"

namespace spire {

namespace {

bool float_output(const Output& o) { return is_floating(o.dtype()); }

}  // namespace

std::vector<Output> gradients(const std::vector<Output>& ys, const std::vector<Output>& xs,
                              const std::vector<Output>& grad_ys) {
  SPIRE_CHECK(!ys.empty(), "gradients: ys is empty");
  Graph* g = ys[0].graph();
  SPIRE_CHECK(g, "gradients: invalid y");
  for (const auto& y : ys) SPIRE_CHECK(y.valid() && y.graph() == g, "gradients: ys must be valid outputs of one graph");
  for (const auto& x : xs)
    SPIRE_CHECK(x.valid() && x.graph() == g, "gradients: x '", x.name(),
                "' is invalid or belongs to another graph");
  SPIRE_CHECK(grad_ys.empty() || grad_ys.size() == ys.size(), "gradients: ", grad_ys.size(),
              " grad_ys given for ", ys.size(), " ys");

  // Nodes reachable backwards from ys (through data inputs).
  std::unordered_set<const Node*> from_ys;
  {
    std::vector<Node*> stack;
    for (const auto& y : ys)
      if (from_ys.insert(y.node).second) stack.push_back(y.node);
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const auto& in : n->inputs())
        if (from_ys.insert(in.node).second) stack.push_back(in.node);
    }
  }
  // Nodes reachable forwards from xs that ys depend on: the "between" set.
  std::unordered_map<const Node*, std::vector<Node*>> consumers;
  for (const auto& up : g->nodes())
    for (const auto& in : up->inputs())
      if (from_ys.count(up.get())) consumers[in.node].push_back(up.get());
  std::unordered_set<const Node*> between;
  {
    std::vector<Node*> stack;
    for (const auto& x : xs)
      if (from_ys.count(x.node) && between.insert(x.node).second) stack.push_back(x.node);
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (Node* c : consumers[n])
        if (between.insert(c).second) stack.push_back(c);
    }
  }

  // Pending counts: consumers of each node inside `between` (per edge).
  std::unordered_map<const Node*, int> pending;
  for (const Node* n : between)
    for (const auto& in : n->inputs())
      if (between.count(in.node)) ++pending[in.node];

  // Gradients received per output.
  std::map<Output, std::vector<Output>> grads;
  for (size_t i = 0; i < ys.size(); ++i) {
    if (!between.count(ys[i].node)) continue;
    Output gy;
    if (grad_ys.empty()) {
      DeviceScope there(*ys[i].graph(), ys[i].device());  // the seed lives with its y
      gy = ops::ones_like(ys[i]);
    } else {
      gy = grad_ys[i];
    }
    SPIRE_CHECK(gy.dtype() == ys[i].dtype(), "gradients: grad_ys[", i, "] has dtype ",
                dtype_name(gy.dtype()), " but ys[", i, "] is ", dtype_name(ys[i].dtype()));
    grads[ys[i]].push_back(gy);
  }

  // The sum of the gradients an output received, built where the output
  // lives (for a multi-device node, on that participant's device).
  auto summed = [&](const Output& o) -> Output {
    auto it = grads.find(o);
    if (it == grads.end() || it->second.empty()) return Output();
    if (it->second.size() > 1) {
      DeviceScope there(*o.graph(), o.device());
      it->second = {ops::add_n(it->second)};
    }
    return it->second[0];
  };

  std::unordered_set<const Node*> is_x;
  for (const auto& x : xs) is_x.insert(x.node);

  std::deque<Node*> ready;
  for (const auto& y : ys)
    if (between.count(y.node) && pending[y.node] == 0 &&
        std::find(ready.begin(), ready.end(), y.node) == ready.end())
      ready.push_back(y.node);

  while (!ready.empty()) {
    Node* n = ready.front();
    ready.pop_front();
    // Gradient nodes run where their forward node runs (TF's
    // colocate_gradients_with_ops); a gradient crossing devices gets the
    // Copy nodes the graph inserts.
    DeviceScope colocate(*n->graph(), n->device());
    std::vector<Output> out_grads(static_cast<size_t>(n->num_outputs()));
    bool any = false;
    for (int i = 0; i < n->num_outputs(); ++i) {
      out_grads[static_cast<size_t>(i)] = summed(n->output(i));
      any = any || out_grads[static_cast<size_t>(i)].valid();
    }
    bool propagate = any && n->num_inputs() > 0;
    // Stop at xs that are sources of no interest further back? No: an x may
    // depend on another x, so keep propagating through inner nodes.
    const OpDef& def = n->op_def();
    if (propagate && def.no_gradient()) propagate = false;
    std::vector<Output> in_grads;
    if (propagate) {
      bool needs = false;
      for (const auto& in : n->inputs()) needs = needs || (between.count(in.node) && float_output(in));
      if (needs) {
        if (!def.grad_fn())
          throw_error("gradients: no gradient defined for op ", n->op_type(), " (node '",
                      n->name(), "'), which lies between the ys and xs; wrap it in stop_gradient "
                      "if no gradient should flow through it");
        std::vector<bool> received(out_grads.size());
        for (size_t i = 0; i < out_grads.size(); ++i) received[i] = out_grads[i].valid();
        for (int i = 0; i < n->num_outputs(); ++i)
          if (!out_grads[static_cast<size_t>(i)].valid()) {
            Output o = n->output(i);
            DeviceScope there(*n->graph(), o.device());
            out_grads[static_cast<size_t>(i)] = float_output(o) ? ops::zeros_like(o) : Output();
          }
        GradContext gc(n, out_grads, received);
        in_grads = def.grad_fn()(gc);
        if (static_cast<int>(in_grads.size()) != n->num_inputs())
          throw_error("internal error: gradient of ", n->describe(), " returned ",
                      in_grads.size(), " gradients for ", n->num_inputs(), " inputs");
      }
    }
    for (int i = 0; i < n->num_inputs(); ++i) {
      const Output& in = n->input(i);
      if (!between.count(in.node)) continue;
      if (!in_grads.empty() && in_grads[static_cast<size_t>(i)].valid() && float_output(in)) {
        const Output& gi = in_grads[static_cast<size_t>(i)];
        if (gi.dtype() != in.dtype())
          throw_error("internal error: gradient of ", n->describe(), " for input ", i, " is ",
                      dtype_name(gi.dtype()), " but the input is ", dtype_name(in.dtype()));
        grads[in].push_back(gi);
      }
      if (--pending[in.node] == 0) ready.push_back(in.node);
    }
  }

  std::vector<Output> result;
  result.reserve(xs.size());
  for (const auto& x : xs) {
    DeviceScope colocate(*x.node->graph(), x.device());
    result.push_back(summed(x));
  }
  return result;
}

}  // namespace spire
