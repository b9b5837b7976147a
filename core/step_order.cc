// Execution orders of a run's nodes (see core/step_order.h).
#include "core/step_order.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "core/op_registry.h"

namespace spire {

namespace {

// Reorders `dfs` (the needed nodes in depth-first order; rendezvous
// members consecutive) into another topological order in which the
// devices take turns: each device's next node is its ready node (all
// inputs placed) that comes first in `dfs`, and the devices alternate as
// if every node took the same time. Every lane then runs its own work
// before work that waits on another lane's later nodes: in a depth-first
// order one tower's gradient copies to device 1 come before tower 1's
// forward pass on device 1, which would then wait for all of tower 0. With
// one device this is `dfs` itself (the ready node first in `dfs` is always
// the next one of `dfs`). A rendezvous group and a multi-device node are
// placed as one unit, when all their inputs are placed.
std::vector<Node*> interleave_devices(
    const std::vector<Node*>& dfs,
    const std::unordered_map<const Node*, const std::vector<Node*>*>& group_of,
    const std::map<Output, int>& fed) {
  // Units: one per node, one per rendezvous group (its members in `dfs` order).
  std::unordered_map<const Node*, int> unit_of;
  std::vector<std::vector<Node*>> units;
  for (Node* n : dfs) {
    auto g = group_of.find(n);
    if (g != group_of.end()) {
      auto first = unit_of.find(g->second->front());
      if (first != unit_of.end()) {
        unit_of[n] = first->second;
        units[static_cast<size_t>(first->second)].push_back(n);
        continue;
      }
      for (Node* m : *g->second) unit_of[m] = static_cast<int>(units.size());
    } else {
      unit_of[n] = static_cast<int>(units.size());
    }
    units.push_back({n});
  }
  const int nu = static_cast<int>(units.size());
  std::vector<int> pending(static_cast<size_t>(nu), 0);
  std::vector<std::vector<int>> dependents(static_cast<size_t>(nu));
  for (int u = 0; u < nu; ++u) {
    std::set<int> deps;
    for (Node* n : units[static_cast<size_t>(u)]) {
      for (const Output& in : n->inputs())
        if (!fed.count(in)) deps.insert(unit_of.at(in.node));
      for (Node* c : n->control_inputs()) {
        auto it = unit_of.find(c);
        if (it != unit_of.end()) deps.insert(it->second);  // absent: a met (fed) control input
      }
    }
    deps.erase(u);
    pending[static_cast<size_t>(u)] = static_cast<int>(deps.size());
    for (int d : deps) dependents[static_cast<size_t>(d)].push_back(u);
  }
  // One ready queue per device (a unit's device: its first node's), by dfs position.
  std::map<Device, std::set<int>> ready;
  auto device_of = [&](int u) { return units[static_cast<size_t>(u)].front()->device(); };
  for (int u = 0; u < nu; ++u)
    if (pending[static_cast<size_t>(u)] == 0) ready[device_of(u)].insert(u);
  std::vector<Node*> out;
  out.reserve(dfs.size());
  // Rounds: every device with a ready unit places one; what they make ready
  // becomes ready for the next round (as if each unit took one time step).
  std::vector<int> next;
  while (out.size() < dfs.size()) {
    bool placed = false;
    next.clear();
    for (auto& [device, queue] : ready) {
      if (queue.empty()) continue;
      const int u = *queue.begin();
      queue.erase(queue.begin());
      for (Node* n : units[static_cast<size_t>(u)]) out.push_back(n);
      for (int v : dependents[static_cast<size_t>(u)])
        if (--pending[static_cast<size_t>(v)] == 0) next.push_back(v);
      placed = true;
    }
    if (!placed) throw_error("Session::run: internal error: no node is ready to order");
    for (int v : next) ready[device_of(v)].insert(v);
  }
  return out;
}

}  // namespace

// Depth-first search from the fetches and targets: the needed nodes in a
// topological order (inputs before consumers), cutting at fed outputs; then
// the devices' nodes interleaved (interleave_devices).
std::vector<Node*> topological_order(Graph& graph, const std::vector<Output>& fetches,
                                     const std::vector<Node*>& targets,
                                     const std::map<Output, int>& fed) {
  enum Color : uint8_t { kWhite, kGray, kBlack };
  std::vector<Color> color(static_cast<size_t>(graph.num_nodes()), kWhite);
  std::vector<Node*> order;
  std::vector<Node*> roots;
  for (const auto& f : fetches)
    if (!fed.count(f)) roots.push_back(f.node);
  for (Node* t : targets) roots.push_back(t);

  // Rendezvous groups (OpDef::rendezvous_attr): members are visited as one
  // node whose dependencies are all of theirs, and emitted together.
  std::map<std::string, std::vector<Node*>> groups;
  std::unordered_map<const Node*, const std::vector<Node*>*> group_of;
  for (int id = 0; id < graph.num_nodes(); ++id) {
    Node* n = graph.node(id);
    const std::string& attr = n->op_def().rendezvous_attr();
    if (attr.empty() || !n->has_attr(attr)) continue;
    const std::string key = n->attr<std::string>(attr);
    if (!key.empty()) groups[n->op_type() + "/" + key].push_back(n);
  }
  for (const auto& [key, members] : groups)
    for (Node* m : members) group_of[m] = &members;

  // Control inputs are visited before data inputs: a control input orders a node after
  // an earlier member of a chain (a distributed trainer's collectives, in the order the
  // backward pass reaches them), so the chain's earlier members, and what they need, come
  // first. Data first would place all that the chain's last member needs (the whole
  // backward pass, for the last gradient bucket) before its first member's inputs.
  auto deps_of = [&](Node* n, std::vector<Node*>& deps) {
    for (Node* dep : n->control_inputs()) {
      // A control dependency on a node whose every output is fed is met
      // (TensorFlow's rule): the node does not run.
      bool all_fed = dep->num_outputs() > 0;
      for (int o = 0; o < dep->num_outputs() && all_fed; ++o) all_fed = fed.count(dep->output(o)) != 0;
      if (!all_fed) deps.push_back(dep);
    }
    for (const Output& in : n->inputs())
      if (!fed.count(in)) deps.push_back(in.node);
  };
  struct Frame {
    Node* node;
    size_t next;
    std::vector<Node*> deps;
    const std::vector<Node*>* group;
  };
  std::vector<Frame> stack;
  auto push = [&](Node* n) {
    Frame f{n, 0, {}, nullptr};
    auto g = group_of.find(n);
    if (g != group_of.end()) {
      f.group = g->second;
      for (Node* m : *f.group) {
        color[static_cast<size_t>(m->id())] = kGray;
        deps_of(m, f.deps);
      }
    } else {
      color[static_cast<size_t>(n->id())] = kGray;
      deps_of(n, f.deps);
    }
    stack.push_back(std::move(f));
  };

  for (Node* root : roots) {
    if (color[static_cast<size_t>(root->id())] != kWhite) continue;
    push(root);
    while (!stack.empty()) {
      Frame& fr = stack.back();
      if (fr.next == fr.deps.size()) {
        if (fr.group) {
          for (Node* m : *fr.group) {
            color[static_cast<size_t>(m->id())] = kBlack;
            order.push_back(m);
          }
        } else {
          color[static_cast<size_t>(fr.node->id())] = kBlack;
          order.push_back(fr.node);
        }
        stack.pop_back();
        continue;
      }
      Node* dep = fr.deps[fr.next++];
      Color c = color[static_cast<size_t>(dep->id())];
      if (c == kBlack) continue;
      if (c == kGray) {
        std::ostringstream os;
        bool on = false;
        for (auto& f : stack) {
          if (f.node == dep || (f.group && group_of.count(dep) && group_of.at(dep) == f.group)) on = true;
          if (on) os << "'" << f.node->name() << "' -> ";
        }
        os << "'" << dep->name() << "'";
        throw_error("Session::run: the graph has a cycle: ", os.str(),
                    group_of.count(dep) ? " (through nodes that meet at run time: a rendezvous "
                                          "member must not depend on another member)"
                                        : "");
      }
      push(dep);
    }
  }
  return interleave_devices(order, group_of, fed);
}

std::vector<std::vector<Node*>> group_independent_nodes(
    std::vector<Node*>& order,
    const std::function<void(const Node*, std::vector<const Node*>&)>& deps_of,
    const std::function<bool(const Node*)>& eligible, const std::function<double(const Node*)>& cost,
    const std::function<int(const Device&)>& max_members, int window, double max_cost_ratio) {
  const size_t n = order.size();
  std::unordered_map<const Node*, size_t> index;  // position in `order`
  for (size_t i = 0; i < n; ++i) index[order[i]] = i;
  std::vector<Node*> out;
  out.reserve(n);
  // Position of each node of `order` in `out`, or -1 while not yet placed.
  std::vector<int64_t> placed(n, -1);
  std::vector<std::vector<Node*>> waves;
  // Whether every node `m` depends on directly was placed before out[wave_start]: nodes
  // outside `order` (fed, or not needed) count as placed.
  std::vector<const Node*> deps;
  auto ready_before = [&](const Node* m, int64_t wave_start) {
    deps.clear();
    deps_of(m, deps);
    for (const Node* d : deps) {
      auto it = index.find(d);
      if (it == index.end()) continue;
      const int64_t p = placed[it->second];
      if (p < 0 || p >= wave_start) return false;
    }
    return true;
  };
  for (size_t i = 0; i < n; ++i) {
    if (placed[i] >= 0) continue;
    Node* first = order[i];
    const int64_t wave_start = static_cast<int64_t>(out.size());
    placed[i] = wave_start;
    out.push_back(first);
    if (!eligible(first)) continue;
    const double first_cost = cost(first);
    if (first_cost < 0) continue;
    const int limit = max_members(first->device());
    std::vector<Node*> wave{first};
    // A node moved ahead of the nodes between it and `first` must not depend on them or on
    // the wave's members: all that it reads is placed before the wave. (A dependency through
    // other nodes passes through one of those too, as `order` is topological.)
    for (size_t j = i + 1; j < n && j <= i + static_cast<size_t>(window); ++j) {
      if (static_cast<int>(wave.size()) >= limit) break;
      if (placed[j] >= 0) continue;
      Node* m = order[j];
      if (m->device() != first->device() || !eligible(m)) continue;
      const double c = cost(m);
      if (c < 0 || std::max(c, first_cost) > max_cost_ratio * std::min(c, first_cost)) continue;
      if (!ready_before(m, wave_start)) continue;
      placed[j] = static_cast<int64_t>(out.size());
      out.push_back(m);
      wave.push_back(m);
    }
    if (wave.size() > 1) waves.push_back(std::move(wave));
  }
  order.swap(out);
  return waves;
}

}  // namespace spire
