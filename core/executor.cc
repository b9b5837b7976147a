// The Session's executor (see core/executor.h).
#include "core/executor.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <sstream>
#include <unordered_map>

#include "core/device_backend.h"
#include "core/fusion.h"
#include "core/op_registry.h"
#include "core/step_order.h"

namespace spire {

// ---- planning --------------------------------------------------------------

namespace {

// Fails unless the session has `device` (CPU devices come from the options;
// accelerators from their backend).
// Inter-op waves: at most this many nodes each, found among this many next nodes.
constexpr int kMaxWave = 4;
constexpr int kWaveWindow = 24;
// ... and of work estimates (OpDef::cost) within this factor of each other.
constexpr double kWaveCostRatio = 2.0;

void check_device(const Node& n, const Device& device, const SessionOptions& opt) {
  if (device.is_cpu()) {
    if (device.index >= opt.num_cpu_devices)
      throw_error("Session::run: ", n.describe(), " is placed on ", device.to_string(),
                  ", but the session has ", opt.num_cpu_devices, " CPU device",
                  opt.num_cpu_devices == 1 ? "" : "s", " (SessionOptions::num_cpu_devices)");
  }
}

}  // namespace

std::shared_ptr<ExecutionPlan> ExecutionPlan::compile(Graph& graph,
                                                      const std::vector<Output>& fetches,
                                                      const std::vector<Node*>& targets,
                                                      const FeedDict& feeds,
                                                      const ExecutorEnv& env) {
  const SessionOptions& opt = *env.options;
  std::map<Output, int> fed;  // fed output -> feed slot (assigned below)
  for (const auto& kv : feeds) fed[kv.first] = -1;
  std::vector<Node*> order = topological_order(graph, fetches, targets, fed);
  for (Node* n : order)
    if (n->op_def().is_placeholder())
      throw_error("Session::run: placeholder '", n->name(), "' (", dtype_name(n->output_dtype(0)),
                  n->output_shape(0).to_string(), ") must be fed");

  auto plan = std::shared_ptr<ExecutionPlan>(new ExecutionPlan());
  ExecutionPlan& p = *plan;

  // Elementwise fusion: each group's FusedElementwise node (in the plan's own graph) takes
  // its root's place in the order; the other members do not run.
  std::unordered_map<const Node*, const FusedGroup*> group_of_fused;
  if (opt.fuse_elementwise) {
    p.fused_graph_ = std::make_unique<Graph>();
    p.fused_groups_ = fuse_elementwise(order, std::set<Output>(fetches.begin(), fetches.end()), fed,
                                       *p.fused_graph_, opt.fuse_epilogues);
    std::unordered_map<const Node*, Node*> replace;  // root -> fused; other members -> null
    for (const FusedGroup& g : p.fused_groups_) {
      for (Node* m : g.nodes) replace[m] = nullptr;
      replace[g.nodes.back()] = g.fused;
      group_of_fused[g.fused] = &g;
    }
    if (!replace.empty()) {
      std::vector<Node*> fused_order;
      for (Node* n : order) {
        auto r = replace.find(n);
        if (r == replace.end()) fused_order.push_back(n);
        else if (r->second) fused_order.push_back(r->second);
      }
      order.swap(fused_order);
    }
  }
  // The data inputs a step reads: the node's own, or for a fused node its group's.
  auto sources_of = [&](const Node* n) -> const std::vector<Output>& {
    auto g = group_of_fused.find(n);
    return g == group_of_fused.end() ? n->inputs() : g->second->inputs;
  };
  // Inter-op parallelism: independent nodes of a CPU device next to each other, as waves.
  std::vector<std::vector<Node*>> node_waves;
  if (opt.inter_op != InterOp::kOff && !opt.sequential) {
    auto eligible = [&](const Node* n) {
      const OpDef& op = n->op_def();
      // (Nodes without inputs, such as constants, cost nothing to run.)
      if (op.multi_device() || !n->device().is_cpu() || op.stateful() || op.is_copy() ||
          op.is_variable() || op.is_placeholder() || !op.rendezvous_attr().empty() ||
          !n->control_inputs().empty() || n->num_inputs() == 0)
        return false;
      const std::string& own = op.own_lane_attr();
      return own.empty() || !n->has_attr(own) || !n->attr<bool>(own);
    };
    auto max_members = [&](const Device& d) {
      if (d.index < 0 || d.index >= static_cast<int>(env.cpu_pools->size())) return 1;
      return std::min(kMaxWave, (*env.cpu_pools)[static_cast<size_t>(d.index)]->num_threads());
    };
    // A fused group's root is produced by its fused node.
    std::unordered_map<const Node*, const Node*> fused_root;
    for (const FusedGroup& g : p.fused_groups_) fused_root[g.nodes.back()] = g.fused;
    auto deps_of = [&](const Node* n, std::vector<const Node*>& deps) {
      for (const Output& in : sources_of(n)) {
        auto r = fused_root.find(in.node);
        deps.push_back(r == fused_root.end() ? in.node : r->second);
      }
      for (const Node* c : n->control_inputs()) deps.push_back(c);
    };
    auto cost = [](const Node* n) { return n->op_def().cost(*n); };
    node_waves = group_independent_nodes(order, deps_of, eligible, cost, max_members, kWaveWindow,
                                         kWaveCostRatio);
  }

  std::unordered_map<const Node*, int> first_slot;
  int slots = 0;
  for (auto& kv : fed) kv.second = slots++;
  for (Node* n : order) {
    first_slot[n] = slots;
    slots += n->num_outputs();
  }
  for (const auto& [fused, g] : group_of_fused) first_slot[g->nodes.back()] = first_slot.at(fused);
  p.num_slots_ = slots;
  p.feed_slots_ = fed;
  auto slot_of = [&](const Output& o) -> int {
    auto f = fed.find(o);
    if (f != fed.end()) return f->second;
    return first_slot.at(o.node) + o.index;
  };

  // Steps: one per node, or one per participant of a multi-device node
  // (all participants in one step in sequential mode).
  std::unordered_map<const Node*, std::vector<int>> steps_of;
  for (Node* n : order) {
    const bool multi = n->op_def().multi_device();
    std::vector<std::vector<int>> groups;
    if (multi) {
      const int np = static_cast<int>(n->devices().size());
      for (int q = 0; q < np; ++q) check_device(*n, n->devices()[static_cast<size_t>(q)], opt);
      for (int q = 1; q < np; ++q)
        if (n->devices()[static_cast<size_t>(q)].type != n->devices()[0].type)
          throw_error("Session::run: ", n->describe(), " has participants on ",
                      n->devices()[0].to_string(), " and ", n->devices()[static_cast<size_t>(q)].to_string(),
                      ": the participants of a collective must be devices of one type");
      if (opt.sequential) {
        groups.emplace_back();
        for (int q = 0; q < np; ++q) groups.back().push_back(q);
      } else {
        for (int q = 0; q < np; ++q) groups.push_back({q});
      }
    } else {
      check_device(*n, n->device(), opt);
      groups.emplace_back();
    }
    for (const auto& group : groups) {
      Step st;
      st.node = n;
      st.device = multi ? n->devices()[static_cast<size_t>(group[0])] : n->device();
      DType kdt = kernel_dtype(*n);
      st.kernel = KernelRegistry::global().find(n->op_type(), st.device.type, kdt);
      if (!st.kernel)
        throw_error("Session::run: no kernel registered for op ", n->op_type(), " on ",
                    st.device.to_string(), " for dtype ", dtype_name(kdt), " (node '", n->name(),
                    "'; inputs: ", n->describe_inputs(), ")");
      if (st.device.is_cpu()) {
        st.pool = (*env.cpu_pools)[static_cast<size_t>(st.device.index)].get();
      } else {
        const DeviceBackend* backend = find_device_backend(st.device.type);
        if (backend == nullptr || !backend->context)
          throw_error("Session::run: node '", n->name(), "' (op ", n->op_type(), ") is placed on ",
                      st.device.to_string(), ", but this build of Spire has no backend for it "
                      "(configure with SPIRE_CUDA=ON)");
        try {
          st.device_context = backend->context(st.device.index);
        } catch (const Error& e) {
          throw_error("Session::run: ", n->describe(), " is placed on ", st.device.to_string(),
                      ": ", e.what());
        }
        st.backend = backend;
      }
      st.transfer_inputs = !n->op_def().is_copy();
      st.sources = &sources_of(n);
      for (int i = 0; i < n->num_inputs(); ++i) {
        const Output& in = (*st.sources)[static_cast<size_t>(i)];
        if (multi && std::find(group.begin(), group.end(), i) == group.end()) {
          st.input_slots.push_back(-1);  // another participant's input
          st.ref_inputs.push_back(nullptr);
          continue;
        }
        st.input_slots.push_back(slot_of(in));
        // A reference read takes the variable's current value when the step
        // runs, not the Variable node's slot (so it keeps that slot's buffer
        // from pinning the variable, and updates may write in place).
        bool ref = !fed.count(in) && in.node->op_def().ref_output();
        st.ref_inputs.push_back(ref ? env.variable(in.node) : nullptr);
      }
      if (multi) {
        st.outputs = group;
        st.participants = group;
      } else {
        for (int o = 0; o < n->num_outputs(); ++o) st.outputs.push_back(o);
      }
      st.first_output_slot = first_slot[n];
      p.max_inputs_ = std::max(p.max_inputs_, n->num_inputs());
      steps_of[n].push_back(static_cast<int>(p.steps_.size()));
      p.steps_.push_back(std::move(st));
    }
  }

  // Lanes: one per device in device order (one lane for everything in
  // sequential mode); each keeps the global order.
  if (opt.sequential) {
    if (!p.steps_.empty()) {
      p.lane_devices_.push_back(Device::cpu());
      p.lanes_.emplace_back();
      for (size_t k = 0; k < p.steps_.size(); ++k) p.lanes_[0].push_back(static_cast<int>(k));
    }
  } else {
    // A step whose op's own-lane attr is true (on a CPU device) gets a
    // second lane of its device, so waiting in it leaves the device's
    // compute running (every lane keeps the global order, so lanes only
    // wait for earlier steps: no deadlock).
    auto own_lane = [](const Step& st) {
      const std::string& a = st.node->op_def().own_lane_attr();
      return !a.empty() && st.device.is_cpu() && st.node->has_attr(a) && st.node->attr<bool>(a);
    };
    std::map<std::pair<Device, bool>, int> lane_of;
    for (const auto& st : p.steps_) lane_of[{st.device, own_lane(st)}] = 0;
    for (auto& kv : lane_of) {
      kv.second = static_cast<int>(p.lane_devices_.size());
      p.lane_devices_.push_back(kv.first.first);
    }
    p.lanes_.resize(p.lane_devices_.size());
    for (size_t k = 0; k < p.steps_.size(); ++k) {
      Step& st = p.steps_[k];
      st.lane = lane_of.at({st.device, own_lane(st)});
      p.lanes_[static_cast<size_t>(st.lane)].push_back(static_cast<int>(k));
    }
  }

  // Waves of steps (each node of a wave is one step, in one lane; the steps are
  // consecutive there, as the nodes are in `order`).
  for (const auto& nodes : node_waves) {
    Wave w;
    for (Node* n : nodes) w.steps.push_back(steps_of.at(n).front());
    for (int k : w.steps) p.steps_[static_cast<size_t>(k)].wave = static_cast<int>(p.waves_.size());
    p.max_wave_ = std::max(p.max_wave_, w.steps.size());
    p.waves_.push_back(std::move(w));
  }
  if (!p.waves_.empty()) {
    p.wave_choice_.reset(new std::atomic<WaveChoice>[p.waves_.size()]);
    const WaveChoice start =
        opt.inter_op == InterOp::kAlways ? WaveChoice::kParallel : WaveChoice::kMeasuring;
    for (size_t w = 0; w < p.waves_.size(); ++w) p.wave_choice_[w].store(start);
    p.wave_timing_.assign(p.waves_.size(), WaveTiming{});
  }

  // Producers and readers of every slot.
  std::vector<int> producer(static_cast<size_t>(slots), -1);
  for (size_t k = 0; k < p.steps_.size(); ++k) {
    const Step& st = p.steps_[k];
    for (int o : st.outputs) producer[static_cast<size_t>(st.first_output_slot + o)] = static_cast<int>(k);
  }
  std::vector<std::vector<int>> readers(static_cast<size_t>(slots));
  for (size_t k = 0; k < p.steps_.size(); ++k) {
    const Step& st = p.steps_[k];
    for (size_t i = 0; i < st.input_slots.size(); ++i) {
      int s = st.input_slots[i];
      if (s < 0 || st.ref_inputs[i]) continue;
      auto& r = readers[static_cast<size_t>(s)];
      if (r.empty() || r.back() != static_cast<int>(k)) r.push_back(static_cast<int>(k));
    }
  }

  // Cross-lane dependencies: values (references included, to keep the
  // sequential order's semantics) and control inputs made in another lane.
  for (size_t k = 0; k < p.steps_.size(); ++k) {
    Step& st = p.steps_[k];
    std::vector<int> deps;
    for (int s : st.input_slots)
      if (s >= 0 && producer[static_cast<size_t>(s)] >= 0) deps.push_back(producer[static_cast<size_t>(s)]);
    for (Node* c : st.node->control_inputs())
      for (int d : steps_of[c]) deps.push_back(d);
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    for (int d : deps) {
      if (p.steps_[static_cast<size_t>(d)].lane == st.lane) continue;
      st.waits.push_back(d);
      p.steps_[static_cast<size_t>(d)].signals = true;
      p.has_signals_ = true;
    }
  }

  // Fetches are kept; every other slot is freed after its last reader.
  std::vector<bool> fetched(static_cast<size_t>(slots), false);
  for (const auto& f : fetches) {
    int s = slot_of(f);
    p.fetch_slots_.push_back(s);
    fetched[static_cast<size_t>(s)] = true;
  }
  p.reader_counts_.assign(static_cast<size_t>(slots), 0);
  for (int s = 0; s < slots; ++s) {
    if (fetched[static_cast<size_t>(s)]) continue;
    const auto& r = readers[static_cast<size_t>(s)];
    const int prod = producer[static_cast<size_t>(s)];
    if (r.empty()) {
      if (prod >= 0) p.steps_[static_cast<size_t>(prod)].release.push_back(s);
      continue;
    }
    const int lane = p.steps_[static_cast<size_t>(r[0])].lane;
    bool one_lane = prod < 0 || p.steps_[static_cast<size_t>(prod)].lane == lane;
    for (int k : r) one_lane = one_lane && p.steps_[static_cast<size_t>(k)].lane == lane;
    if (one_lane) {
      p.steps_[static_cast<size_t>(r.back())].release.push_back(s);
    } else {
      p.reader_counts_[static_cast<size_t>(s)] = static_cast<int>(r.size());
      p.has_counted_slots_ = true;
      for (int k : r) p.steps_[static_cast<size_t>(k)].count_down.push_back(s);
    }
  }

  // Buffer reuse: an input whose slot this step releases may become an output's buffer
  // (checked again at run time: nothing but the executor may hold it). Not for multi-device
  // steps or reference reads, nor for a slot that two inputs of the step read.
  if (opt.reuse_input_buffers) {
    for (Step& st : p.steps_) {
      if (!st.participants.empty() || st.input_slots.size() > 64) continue;
      for (size_t i = 0; i < st.input_slots.size(); ++i) {
        const int s = st.input_slots[i];
        if (s < 0 || st.ref_inputs[i]) continue;
        if (std::find(st.release.begin(), st.release.end(), s) == st.release.end()) continue;
        if (std::count(st.input_slots.begin(), st.input_slots.end(), s) != 1) continue;
        st.forwardable |= uint64_t{1} << i;
      }
    }
  }
  return plan;
}

std::vector<Device> ExecutionPlan::lane_devices() const { return lane_devices_; }

std::string ExecutionPlan::to_text() const {
  std::ostringstream os;
  for (size_t l = 0; l < lanes_.size(); ++l) {
    os << lane_devices_[l].to_string() << ":";
    for (size_t j = 0; j < lanes_[l].size(); ++j) {
      const Step& st = steps_[static_cast<size_t>(lanes_[l][j])];
      // A wave's members: "{a | b}".
      const bool in_wave = st.wave >= 0;
      const std::vector<int>* members = in_wave ? &waves_[static_cast<size_t>(st.wave)].steps : nullptr;
      const bool wave_first = in_wave && members->front() == lanes_[l][j];
      const bool wave_last = in_wave && members->back() == lanes_[l][j];
      os << (j == 0 ? " " : in_wave && !wave_first ? " | " : ", ") << (wave_first ? "{" : "")
         << st.node->name() << (wave_last ? "}" : "");
      if (!st.participants.empty()) {
        os << '[';
        for (size_t q = 0; q < st.participants.size(); ++q) os << (q ? "," : "") << st.participants[q];
        os << ']';
      }
    }
    os << '\n';
  }
  return os.str();
}

// ---- execution -------------------------------------------------------------

struct ExecutionPlan::RunState {
  const ExecutorEnv* env = nullptr;
  std::vector<Tensor> values;
  std::unique_ptr<std::atomic<int>[]> counts;  // per slot read by several lanes
  std::unique_ptr<std::atomic<bool>[]> done;   // per step that other lanes wait for
  std::vector<void*> events;                   // per step: its GPU event (set before done)
  std::vector<const DeviceBackend*> event_backends;
  std::mutex mu;  // with cv: lanes waiting for other lanes' steps
  std::condition_variable cv;
  CancellationToken cancellation;
  RunContext run;
  std::mutex error_mu;
  std::exception_ptr error;  // guarded by error_mu: the first real failure
  bool error_is_cancellation = false;
  StepTrace* trace = nullptr;  // set when the run is traced

  ~RunState() {
    for (size_t k = 0; k < events.size(); ++k)
      if (events[k] && event_backends[k] && event_backends[k]->release_event)
        event_backends[k]->release_event(events[k]);
  }

  // Keeps the first failure; a cancellation only when nothing else failed.
  void fail(std::exception_ptr e) {
    bool cancelled = false;
    try {
      std::rethrow_exception(e);
    } catch (const Cancelled&) {
      cancelled = true;
    } catch (...) {
    }
    {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error || (error_is_cancellation && !cancelled)) {
        error = e;
        error_is_cancellation = cancelled;
      }
    }
    cancellation.cancel();
    { std::lock_guard<std::mutex> lock(mu); }
    cv.notify_all();
  }
};

void ExecutionPlan::wait_for(const Step& st, int producer, RunState& rs) const {
  const Step& from = steps_[static_cast<size_t>(producer)];
  if (!rs.done[producer].load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(rs.mu);
    try {
      wait_until(lock, rs.cv, rs.run,
                 [&] { return rs.done[producer].load(std::memory_order_acquire); },
                 [&] {
                   return str_cat(from.node->describe(), " on ", from.device.to_string());
                 });
    } catch (const Cancelled&) {
      throw;
    } catch (const Error& e) {
      throw_error(st.node->describe(), " on ", st.device.to_string(), ": ", e.what());
    }
  }
  void* event = rs.events[static_cast<size_t>(producer)];
  if (event == nullptr) return;
  // The producer's device work may still be queued: a GPU consumer's queue
  // waits for its event; a CPU consumer waits on the host.
  try {
    if (st.backend && st.backend == from.backend && st.backend->wait_event)
      st.backend->wait_event(st.device.index, event);
    else if (from.backend->synchronize_event)
      from.backend->synchronize_event(event);
  } catch (const std::exception& e) {
    throw_error(st.node->describe(), " on ", st.device.to_string(), " waiting for ",
                from.node->describe(), " on ", from.device.to_string(), ": ", e.what());
  }
}

void ExecutionPlan::run_step(const Step& st, RunState& rs, std::vector<Tensor>& inputs,
                             int lane) const {
  const int64_t trace_start = rs.trace ? rs.trace->now_ns() : 0;
  load_inputs(st, rs, inputs);
  execute(st, rs, inputs, forwardable_inputs(st, rs, inputs), lane, trace_start, {});
  release_inputs(st, rs, inputs);
}

void ExecutionPlan::load_inputs(const Step& st, RunState& rs, std::vector<Tensor>& inputs) const {
  Node* n = st.node;
  const int nin = n->num_inputs();
  for (int i = 0; i < nin; ++i) {
    const int s = st.input_slots[static_cast<size_t>(i)];
    Tensor& in = inputs[static_cast<size_t>(i)];
    if (s < 0) {
      in = Tensor();
      continue;
    }
    // (Copy-assignment into `in` reuses its shape's storage; a conditional
    // expression would build a temporary Tensor first.)
    if (VariableResource* ref = st.ref_inputs[static_cast<size_t>(i)]) in = ref->read();
    else in = rs.values[static_cast<size_t>(s)];
    if (!in.defined()) {
      if (!n->op_def().allows_undefined_input(i)) {
        const Output& src = (*st.sources)[static_cast<size_t>(i)];
        if (src.node->op_def().is_variable())
          throw_error("Session::run: variable '", src.node->name(),
                      "' is uninitialized (read by node '", n->name(),
                      "'); run its initializer first");
        throw_error("Session::run: input ", i, " of node '", n->name(), "' is undefined");
      }
      continue;
    }
    const Device& want = n->devices().empty() ? st.device : n->devices()[static_cast<size_t>(i)];
    if (st.transfer_inputs && in.device() != want) {
      try {
        in = in.to(want);
      } catch (const std::exception& e) {
        throw_error("node '", n->name(), "' (op ", n->op_type(), "): moving input ", i, " from ",
                    in.device().to_string(), " to ", want.to_string(), ": ", e.what());
      }
    }
  }
}

uint64_t ExecutionPlan::forwardable_inputs(const Step& st, const RunState& rs,
                                           const std::vector<Tensor>& inputs) const {
  // Inputs the kernel may overwrite: released here, and held by nothing but this step (the
  // slot, and the executor's copy unless the input was moved to another device). A holder
  // elsewhere (a variable, a constant, a fetch, a view such as a Reshape's output, another
  // step of the same wave that loaded it too) keeps it.
  const int nin = st.node->num_inputs();
  uint64_t forwardable = 0;
  if (st.forwardable) {
    for (int i = 0; i < nin; ++i) {
      if (!(st.forwardable >> i & 1)) continue;
      const Tensor& in = inputs[static_cast<size_t>(i)];
      if (!in.defined()) continue;
      const Tensor& slot = rs.values[static_cast<size_t>(st.input_slots[static_cast<size_t>(i)])];
      if (in.buffer_use_count() == (in.shares_buffer_with(slot) ? 2 : 1)) forwardable |= uint64_t{1} << i;
    }
    // use_count() is a relaxed load: order the former holders' reads before the kernel's writes.
    if (forwardable) std::atomic_thread_fence(std::memory_order_acquire);
  }
  return forwardable;
}

void ExecutionPlan::execute(const Step& st, RunState& rs, std::vector<Tensor>& inputs,
                            uint64_t forwardable, int lane, int64_t trace_start,
                            const std::string& wave_arg) const {
  Node* n = st.node;
  const int nin = n->num_inputs();
  Tensor* outs = rs.values.data() + st.first_output_slot;
  KernelContext ctx(*n, st.device, inputs.data(), outs, rs.env->state, st.device_context, st.pool);
  ctx.set_forwardable_inputs(forwardable);
  ctx.set_allow_tf32(rs.env->options->allow_tf32);
  ctx.set_measure_algorithms(rs.env->options->measure_conv_algorithms);
  ctx.set_participants(&st.participants);
  ctx.set_run(&rs.run);
  if (rs.trace) ctx.set_trace(rs.trace, lane);
  try {
    (*st.kernel)(ctx);
    // Debug mode: surface asynchronous device errors at the node that made them.
    if (st.backend && st.backend->synchronize_after_kernels) st.backend->synchronize(st.device.index);
  } catch (const Cancelled&) {
    throw;
  } catch (const Error& e) {
    // An error that already names the node keeps its type; one that gets the node's name
    // keeps its kind (a DisagreementError, which a distributed trainer tells apart from a
    // failure, stays one).
    const std::string msg = e.what();
    if (msg.find("'" + n->name() + "'") != std::string::npos) throw;
    throw_like(e, str_cat("node '", n->name(), "' (op ", n->op_type(), "): ", msg));
  } catch (const std::exception& e) {
    throw_error("node '", n->name(), "' (op ", n->op_type(), "): ", e.what());
  }
  if (rs.env->options->check_outputs) {
    const bool is_var = n->op_def().is_variable();
    for (int o : st.outputs) {
      const Tensor& t = outs[o];
      if (!t.defined()) {
        if (is_var) continue;  // uninitialized: checked by readers
        throw_error("internal error: kernel of ", n->describe(), " left output ", o, " undefined");
      }
      if (t.device() != n->output_device(o) && !is_var)
        throw_error("internal error: kernel of ", n->describe(), " on ",
                    n->output_device(o).to_string(), " returned output ", o, " on ",
                    t.device().to_string());
      if (t.dtype() != n->output_dtype(o) || !n->output_shape(o).is_compatible_with(t.shape()))
        throw_error("node '", n->name(), "' (op ", n->op_type(), "): output ", o, " is ",
                    t.type_string(), " but was inferred as ", dtype_name(n->output_dtype(o)),
                    n->output_shape(o).to_string(), "; inputs: ", ctx.describe_runtime_inputs());
    }
  }
  if (rs.trace) {
    TraceEvent e{n->name(), n->op_type(), st.device.to_string(), lane, trace_start,
                 rs.trace->now_ns(), 0, {}};
    if (ctx.forwarded_inputs()) {
      std::string f;
      for (int i = 0; i < nin; ++i)
        if (ctx.forwarded_inputs() >> i & 1) f += (f.empty() ? "" : ",") + std::to_string(i);
      e.args.emplace_back("in_place", f);
    }
    if (!st.participants.empty()) {
      std::string p;
      for (int q : st.participants) p += (p.empty() ? "" : ",") + std::to_string(q);
      e.args.emplace_back("participants", p);
    }
    if (!wave_arg.empty()) e.args.emplace_back("inter_op", wave_arg);
    rs.trace->add(std::move(e));
  }
}

void ExecutionPlan::release_inputs(const Step& st, RunState& rs,
                                   std::vector<Tensor>& inputs) const {
  for (int i = 0; i < st.node->num_inputs(); ++i) inputs[static_cast<size_t>(i)] = Tensor();
  for (int s : st.release) rs.values[static_cast<size_t>(s)] = Tensor();
  for (int s : st.count_down)
    if (rs.counts[s].fetch_sub(1, std::memory_order_acq_rel) == 1)
      rs.values[static_cast<size_t>(s)] = Tensor();
}

void ExecutionPlan::run_wave(int w, RunState& rs, std::vector<std::vector<Tensor>>& inputs,
                             int lane) const {
  const Wave& wave = waves_[static_cast<size_t>(w)];
  const size_t m = wave.steps.size();
  // Every member's cross-lane producers come before the wave's first member in the global
  // order (step_order.h), so waiting for all of them first cannot deadlock.
  for (int k : wave.steps) {
    const Step& st = steps_[static_cast<size_t>(k)];
    for (int p : st.waits) wait_for(st, p, rs);
  }
  WaveChoice choice = wave_choice_[w].load(std::memory_order_acquire);
  bool parallel = choice == WaveChoice::kParallel;
  if (choice == WaveChoice::kMeasuring) {
    std::lock_guard<std::mutex> lock(tune_mu_);
    const WaveTiming& t = wave_timing_[static_cast<size_t>(w)];
    parallel = t.parallel_runs < t.serial_runs;  // alternate, starting serial (warms up)
  }
  if (choice == WaveChoice::kSerial) {
    for (int k : wave.steps) run_step(steps_[static_cast<size_t>(k)], rs, inputs[0], lane);
    return;
  }
  // All members' inputs are loaded before any decides what it may overwrite: a value that
  // two members read is then held twice and neither overwrites it.
  auto member = [&](size_t i) -> const Step& { return steps_[static_cast<size_t>(wave.steps[i])]; };
  for (size_t i = 0; i < m; ++i) load_inputs(member(i), rs, inputs[i]);
  std::array<uint64_t, kMaxWave> forwardable{};  // m <= kMaxWave: no allocation per wave
  for (size_t i = 0; i < m; ++i) forwardable[i] = forwardable_inputs(member(i), rs, inputs[i]);
  const auto t0 = std::chrono::steady_clock::now();
  auto run_member = [&](size_t i, const std::string& arg) {
    const int64_t trace_start = rs.trace ? rs.trace->now_ns() : 0;
    execute(member(i), rs, inputs[i], forwardable[i], lane, trace_start, arg);
  };
  if (parallel) {
    // One member per chunk: the lane's thread and the pool's workers take them, and the
    // kernels' own parallel_for calls then run inline (the pool is busy with this loop).
    ThreadPool* pool = member(0).pool;
    pool->parallel_for(static_cast<int64_t>(m), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        run_member(static_cast<size_t>(i), rs.trace ? str_cat(i + 1, " of ", m) : std::string());
    });
  } else {
    for (size_t i = 0; i < m; ++i) run_member(i, {});
  }
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  for (size_t i = 0; i < m; ++i) release_inputs(member(i), rs, inputs[i]);
  if (choice != WaveChoice::kMeasuring) return;
  std::lock_guard<std::mutex> lock(tune_mu_);
  WaveTiming& t = wave_timing_[static_cast<size_t>(w)];
  int& runs = parallel ? t.parallel_runs : t.serial_runs;
  int64_t& best = parallel ? t.best_parallel_ns : t.best_serial_ns;
  best = runs == 0 ? ns : std::min(best, ns);
  ++runs;
  if (t.serial_runs >= kTuningRuns && t.parallel_runs >= kTuningRuns &&
      wave_choice_[w].load(std::memory_order_relaxed) == WaveChoice::kMeasuring)
    // Parallel only when it is clearly faster: serial is the plain path.
    wave_choice_[w].store(t.best_parallel_ns < t.best_serial_ns * 0.95 ? WaveChoice::kParallel
                                                                       : WaveChoice::kSerial,
                          std::memory_order_release);
}

std::vector<std::pair<std::string, std::vector<std::string>>> ExecutionPlan::wave_choices() const {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (size_t w = 0; w < waves_.size(); ++w) {
    const WaveChoice c = wave_choice_[w].load(std::memory_order_acquire);
    std::vector<std::string> names;
    for (int k : waves_[w].steps) names.push_back(steps_[static_cast<size_t>(k)].node->name());
    out.emplace_back(c == WaveChoice::kParallel ? "parallel"
                     : c == WaveChoice::kSerial ? "serial"
                                                : "measuring",
                     std::move(names));
  }
  return out;
}

void ExecutionPlan::run_lane(int lane, RunState& rs) const {
  std::vector<Tensor> inputs(static_cast<size_t>(max_inputs_));
  std::vector<std::vector<Tensor>> wave_inputs;
  if (max_wave_ > 0)
    wave_inputs.assign(max_wave_, std::vector<Tensor>(static_cast<size_t>(max_inputs_)));
  Device current = Device::cpu();  // the accelerator made current last (none yet)
  const std::vector<int>& order = lanes_[static_cast<size_t>(lane)];
  for (size_t j = 0; j < order.size(); ++j) {
    const int k = order[j];
    const Step& st = steps_[static_cast<size_t>(k)];
    if (rs.cancellation.cancelled()) throw Cancelled("cancelled: another lane failed");
    if (st.wave >= 0) {  // a CPU step: no device to make current
      const Wave& wave = waves_[static_cast<size_t>(st.wave)];
      run_wave(st.wave, rs, wave_inputs, lane);
      for (int member : wave.steps) signal(member, rs);
      j += wave.steps.size() - 1;
      continue;
    }
    for (int w : st.waits) wait_for(st, w, rs);
    if (st.backend && st.device != current) {
      if (st.backend->make_current) st.backend->make_current(st.device.index);
      current = st.device;
    }
    run_step(st, rs, inputs, lane);
    signal(k, rs);
  }
}

void ExecutionPlan::signal(int k, RunState& rs) const {
  const Step& st = steps_[static_cast<size_t>(k)];
  if (!st.signals) return;
  if (st.backend && st.backend->record_event) {
    try {
      rs.events[static_cast<size_t>(k)] = st.backend->record_event(st.device.index);
    } catch (const std::exception& e) {
      throw_error(st.node->describe(), " on ", st.device.to_string(), ": ", e.what());
    }
    rs.event_backends[static_cast<size_t>(k)] = st.backend;
  }
  rs.done[k].store(true, std::memory_order_release);
  { std::lock_guard<std::mutex> lock(rs.mu); }
  rs.cv.notify_all();
}

std::vector<Tensor> ExecutionPlan::run(const std::vector<Output>& fetches, const FeedDict& feeds,
                                       uint64_t run_id, const ExecutorEnv& env,
                                       StepTrace* trace) const {
  RunState rs;
  rs.env = &env;
  rs.trace = trace;
  rs.values.resize(static_cast<size_t>(num_slots_));
  rs.run.id = run_id;
  rs.run.cancellation = &rs.cancellation;
  rs.run.one_lane = env.options->sequential;
  if (env.options->timeout_seconds > 0)  // at least 1 ms (0 would mean no limit)
    rs.run.timeout = std::chrono::milliseconds(std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(std::min(env.options->timeout_seconds, 1e9) * 1000.0))));
  // A fed value moves to the device of the output it replaces once,
  // whatever the number of readers. It is always a copy: nothing in the
  // session (a variable assigned from it, a fetched value) may keep the
  // caller's buffer.
  for (const auto& [out, t] : feeds) {
    Tensor v = t.to(out.device());
    if (v.shares_buffer_with(t)) v = t.clone();
    rs.values[static_cast<size_t>(feed_slots_.at(out))] = std::move(v);
  }
  if (has_counted_slots_) {
    rs.counts.reset(new std::atomic<int>[static_cast<size_t>(num_slots_)]);
    for (int s = 0; s < num_slots_; ++s) rs.counts[s].store(reader_counts_[static_cast<size_t>(s)]);
  }
  if (has_signals_) {
    rs.done.reset(new std::atomic<bool>[steps_.size()]);
    for (size_t k = 0; k < steps_.size(); ++k) rs.done[k].store(false);
    rs.events.assign(steps_.size(), nullptr);
    rs.event_backends.assign(steps_.size(), nullptr);
  }

  if (lanes_.size() == 1) {
    run_lane(0, rs);
  } else if (lanes_.size() > 1) {
    std::vector<std::function<void()>> tasks;
    for (size_t l = 0; l < lanes_.size(); ++l)
      tasks.push_back([this, l, &rs] {
        try {
          run_lane(static_cast<int>(l), rs);
        } catch (...) {
          rs.fail(std::current_exception());
        }
      });
    env.lane_threads->run(tasks);
    if (rs.error) std::rethrow_exception(rs.error);
  }

  // Fetched values go to the CPU. A value someone else still holds (a
  // variable, a constant, another fetch of the same slot) is copied, so a
  // fetched tensor never aliases session state.
  std::vector<Tensor> results;
  results.reserve(fetches.size());
  std::unordered_map<int, size_t> fetched_from;
  for (size_t i = 0; i < fetches.size(); ++i) {
    const int s = fetch_slots_[i];
    auto seen = fetched_from.find(s);
    if (seen != fetched_from.end()) {
      results.push_back(results[seen->second].clone());
      continue;
    }
    Tensor v = std::move(rs.values[static_cast<size_t>(s)]);
    if (!v.defined()) {
      if (fetches[i].node->op_def().is_variable())
        throw_error("Session::run: variable '", fetches[i].node->name(), "' is uninitialized");
      throw_error("Session::run: fetch '", fetches[i].name(), "' has no value");
    }
    Tensor out = v.to(Device::cpu());
    v = Tensor();
    if (out.buffer_use_count() > 1) out = out.clone();
    fetched_from[s] = results.size();
    results.push_back(std::move(out));
  }
  return results;
}

}  // namespace spire
