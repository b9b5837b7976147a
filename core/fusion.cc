// Elementwise fusion (see core/fusion.h).
#include "core/fusion.h"

#include <algorithm>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "core/op_registry.h"

namespace spire {

namespace {

struct FusableTable {
  std::mutex mu;
  std::map<std::tuple<DeviceType, std::string, DType>, int> arity;
  std::map<std::tuple<DeviceType, std::string, DType>, std::string> epilogue;
};

FusableTable& fusable_table() {
  static FusableTable t;
  return t;
}

}  // namespace

void register_fusable(DeviceType device, const std::string& op, DType dtype, int arity) {
  SPIRE_CHECK(arity == 1 || arity == 2, "register_fusable: op ", op, " has arity ", arity,
              " (1 or 2)");
  FusableTable& t = fusable_table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.arity[{device, op, dtype}] = arity;
}

int fusable_arity(DeviceType device, const std::string& op, DType dtype) {
  FusableTable& t = fusable_table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.arity.find({device, op, dtype});
  return it == t.arity.end() ? 0 : it->second;
}

void register_epilogue(DeviceType device, const std::string& op, DType dtype, const std::string& fused_op) {
  FusableTable& t = fusable_table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.epilogue[{device, op, dtype}] = fused_op;
}

std::string epilogue_op(DeviceType device, const std::string& op, DType dtype) {
  FusableTable& t = fusable_table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.epilogue.find({device, op, dtype});
  return it == t.epilogue.end() ? std::string() : it->second;
}

std::vector<FusedGroup> fuse_elementwise(const std::vector<Node*>& order, const std::set<Output>& kept,
                                         const std::map<Output, int>& fed, Graph& side, bool epilogues) {
  std::unordered_map<const Node*, int> pos;
  std::unordered_map<const Node*, std::vector<Node*>> readers;  // of output 0, distinct
  std::unordered_set<const Node*> control_input;
  for (size_t k = 0; k < order.size(); ++k) {
    Node* n = order[k];
    pos[n] = static_cast<int>(k);
    for (const Output& in : n->inputs()) {
      auto& r = readers[in.node];
      if (in.index == 0 && (r.empty() || r.back() != n)) r.push_back(n);
    }
    for (Node* c : n->control_inputs()) control_input.insert(c);
  }
  // Whether `n` may be an instruction: fusable on its device, one dtype throughout.
  auto candidate = [&](const Node* n) {
    if (n->num_outputs() != 1 || n->num_inputs() == 0 || n->op_def().multi_device() ||
        n->op_def().stateful() || !n->control_inputs().empty() || control_input.count(n))
      return false;
    const DType t = n->output_dtype(0);
    if (fusable_arity(n->device().type, n->op_type(), t) != n->num_inputs()) return false;
    for (const auto& kv : n->attrs())  // carried as numbers or strings (FusedElementwise's attrs)
      if (!std::holds_alternative<double>(kv.second.value()) && !std::holds_alternative<int64_t>(kv.second.value()) &&
          !std::holds_alternative<std::string>(kv.second.value()))
        return false;
    for (const Output& in : n->inputs())
      if (in.dtype() != t) return false;
    return !fed.count(n->output(0));
  };

  std::unordered_map<const Node*, int> group_of;
  std::vector<FusedGroup> groups;
  for (size_t k = order.size(); k-- > 0;) {
    Node* root = order[k];
    if (group_of.count(root) || !candidate(root)) continue;
    const int gid = static_cast<int>(groups.size());
    std::vector<Node*> members{root};
    group_of[root] = gid;
    // The group's inputs if `extra` joined it.
    auto inputs_with = [&](const Node* extra) {
      std::set<Output> ext;
      auto inside = [&](const Node* m) {
        auto g = group_of.find(m);
        return m == extra || (g != group_of.end() && g->second == gid);
      };
      for (const Node* m : members)
        for (const Output& in : m->inputs())
          if (!inside(in.node)) ext.insert(in);
      if (extra)
        for (const Output& in : extra->inputs())
          if (!inside(in.node)) ext.insert(in);
      return ext;
    };
    // Grow to a fixpoint: a producer whose readers are all members joins.
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t m = 0; m < members.size() && static_cast<int>(members.size()) < kMaxFusedInstructions; ++m) {
        for (const Output& in : members[m]->inputs()) {
          Node* p = in.node;
          if (group_of.count(p) || !candidate(p) || !pos.count(p)) continue;
          if (p->device() != root->device() || p->output_dtype(0) != root->output_dtype(0)) continue;
          if (kept.count(p->output(0))) continue;
          bool only_members = true;
          for (const Node* r : readers[p]) {
            auto g = group_of.find(r);
            only_members = only_members && g != group_of.end() && g->second == gid;
          }
          if (!only_members) continue;
          if (static_cast<int>(inputs_with(p).size()) > kMaxFusedInputs) continue;
          group_of[p] = gid;
          members.push_back(p);
          grew = true;
          if (static_cast<int>(members.size()) >= kMaxFusedInstructions) break;
        }
      }
    }
    std::sort(members.begin(), members.end(), [&](const Node* a, const Node* b) { return pos[a] < pos[b]; });
    // A producer whose epilogue the group becomes: the first input (in evaluation order)
    // that qualifies.
    Node* producer = nullptr;
    std::string producer_op;
    for (size_t m = 0; epilogues && !producer && m < members.size(); ++m)
      for (const Output& in : members[m]->inputs()) {
        Node* p = in.node;
        if (in.index != 0 || group_of.count(p) || !pos.count(p) || p->num_outputs() != 1 ||
            p->op_def().multi_device() || p->op_def().stateful() || !p->control_inputs().empty() ||
            control_input.count(p) || p->device() != root->device() ||
            p->output_dtype(0) != root->output_dtype(0) || kept.count(p->output(0)) || fed.count(p->output(0)))
          continue;
        const std::string op = epilogue_op(p->device().type, p->op_type(), p->output_dtype(0));
        if (op.empty()) continue;
        bool only_members = true;
        for (const Node* r : readers[p]) {
          auto g = group_of.find(r);
          only_members = only_members && g != group_of.end() && g->second == gid;
        }
        if (!only_members) continue;
        producer = p;
        producer_op = op;
        break;
      }
    // Members that only forward their input (Identity) compute nothing: a group of those
    // alone, even with a producer, would add a pass over the product that the unfused nodes
    // (which hand their input's buffer on) do not make.
    const bool computes = std::any_of(members.begin(), members.end(),
                                      [](const Node* m) { return !m->op_def().forwards_input(); });
    if (!computes || members.size() + (producer ? 1 : 0) < 2) {
      for (const Node* m : members) group_of.erase(m);
      continue;
    }
    FusedGroup g;
    g.nodes = members;
    std::map<Output, int> input_index;
    if (producer) {
      group_of[producer] = gid;
      g.producer = producer;
      g.nodes.insert(g.nodes.begin(), producer);
      input_index[producer->output(0)] = 0;  // program input 0: the product
      g.inputs.push_back(producer->output(0));
    }
    std::vector<std::string> ops, names, string_attrs, number_keys;
    std::vector<double> numbers;
    std::vector<int64_t> operands;
    std::unordered_map<const Node*, int> instr;
    AttrMap attrs;
    for (size_t j = 0; j < members.size(); ++j) instr[members[j]] = static_cast<int>(j);
    // Operands: input k is k, instruction j is (number of inputs) + j; the inputs are
    // numbered first, so instructions are encoded after all of them are known.
    std::vector<std::pair<bool, int>> refs;  // (is instruction, index)
    for (size_t j = 0; j < members.size(); ++j) {
      const Node* m = members[j];
      ops.push_back(m->op_type());
      names.push_back(m->name());
      for (const Output& in : m->inputs()) {
        auto it = instr.find(in.node);
        if (it != instr.end()) {
          refs.emplace_back(true, it->second);
          continue;
        }
        auto [slot, added] = input_index.emplace(in, static_cast<int>(g.inputs.size()));
        if (added) g.inputs.push_back(in);
        refs.emplace_back(false, slot->second);
      }
      for (const auto& [key, value] : m->attrs()) {
        const std::string k = std::to_string(j) + "/" + key;
        if (auto* str = std::get_if<std::string>(&value.value())) {
          string_attrs.push_back(k);
          string_attrs.push_back(*str);
        } else {
          number_keys.push_back(k);
          numbers.push_back(value.get<double>(k));
        }
      }
    }
    const int64_t nin = static_cast<int64_t>(g.inputs.size());
    for (const auto& [is_instr, index] : refs) operands.push_back(is_instr ? nin + index : index);
    attrs["ops"] = ops;
    attrs["operands"] = operands;
    attrs["nodes"] = names;
    attrs["string_attrs"] = string_attrs;
    attrs["number_attr_names"] = number_keys;
    attrs["number_attrs"] = numbers;
    std::string fused_op = "FusedElementwise";
    if (producer) {
      // The fused node takes the producer's inputs and attrs, then the program's other inputs.
      g.inputs.erase(g.inputs.begin());
      g.inputs.insert(g.inputs.begin(), producer->inputs().begin(), producer->inputs().end());
      for (const auto& [key, value] : producer->attrs()) attrs[key] = value;
      attrs["producer"] = producer->name();
      fused_op = producer_op;
    }
    DeviceScope scope(side, root->device());
    std::vector<Output> stand_ins;
    for (const Output& in : g.inputs)
      stand_ins.push_back(side.add_node("Placeholder", {}, {{"dtype", in.dtype()}, {"shape", in.shape()}},
                                        "fused_input")->output(0));
    g.fused = side.add_node(fused_op, stand_ins, attrs, root->name());
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace spire
