#include "core/session.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "core/device_backend.h"
#include "core/op_registry.h"

namespace spire {

struct Session::Plan {
  struct Step {
    Node* node = nullptr;
    const KernelFn* kernel = nullptr;
    Device device;
    void* device_context = nullptr;  // the backend's per-device context (null on CPU)
    const DeviceBackend* backend = nullptr;  // null on CPU
    bool transfer_inputs = true;     // false for Copy, whose kernel moves its input itself
    std::vector<int> input_slots;
    std::vector<const Node*> ref_inputs;  // per input: the state node read at run time, or null
    int first_output_slot = 0;
    std::vector<int> release;  // slots whose last reader is this step
  };
  std::vector<Step> steps;
  int num_slots = 0;
  int max_inputs = 0;
  std::vector<int> fetch_slots;
  std::map<Output, int> feed_slots;
};

Session::Session(Graph& graph, SessionOptions options)
    : graph_(graph), options_(options),
      thread_pool_(std::make_unique<ThreadPool>(options.num_threads)) {}
Session::~Session() = default;

void Session::add_hook(SessionRunHook* hook) {
  SPIRE_CHECK(hook, "Session::add_hook: null hook");
  hooks_.push_back(hook);
}

void Session::remove_hook(SessionRunHook* hook) {
  hooks_.erase(std::remove(hooks_.begin(), hooks_.end(), hook), hooks_.end());
}

// ---- state -----------------------------------------------------------------

Tensor& Session::variable(const Node* var) {
  std::lock_guard<std::mutex> lock(mu_);
  return variables_[var];
}

uint64_t Session::advance_rng(const Node* n, uint64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t& c = rng_[n];
  uint64_t start = c;
  c += count;
  return start;
}

Tensor Session::constant_cache(const Node* n, const std::function<Tensor()>& make) {
  std::lock_guard<std::mutex> lock(mu_);
  Tensor& slot = constants_[n];
  if (!slot.defined()) slot = make();
  return slot;
}

Tensor Session::variable_value(const Node* var) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = variables_.find(var);
  return it == variables_.end() ? Tensor() : it->second;
}

bool Session::is_initialized(const Node* var) const { return variable_value(var).defined(); }

void Session::set_variable_value(const Node* var, const Tensor& value) {
  SPIRE_CHECK(var && var->graph() == &graph_, "Session::set_variable_value: node is not in this session's graph");
  SPIRE_CHECK(var->op_type() == "Variable", "Session::set_variable_value: ", var->describe(),
              " is not a variable");
  SPIRE_CHECK(value.defined() && value.dtype() == var->output_dtype(0) &&
                  var->output_shape(0).is_compatible_with(value.shape()),
              "Session::set_variable_value: variable '", var->name(), "' is ",
              dtype_name(var->output_dtype(0)), var->output_shape(0).to_string(), ", got ",
              value.defined() ? value.type_string() : std::string("<undefined>"));
  std::lock_guard<std::mutex> lock(mu_);
  variables_[var] = value.to(var->device()).clone();
}

// ---- planning --------------------------------------------------------------

namespace {

std::string plan_key(const std::vector<Output>& fetches, const std::vector<Node*>& targets,
                     const FeedDict& feeds) {
  std::string key;
  key.reserve(16 * (fetches.size() + targets.size() + feeds.size()) + 4);
  for (const auto& f : fetches) key += std::to_string(f.node->id()) + ':' + std::to_string(f.index) + ',';
  key += '|';
  for (Node* t : targets) key += std::to_string(t->id()) + ',';
  key += '|';
  std::vector<Output> fo;
  for (const auto& kv : feeds) fo.push_back(kv.first);
  std::sort(fo.begin(), fo.end());
  for (const auto& f : fo) key += std::to_string(f.node->id()) + ':' + std::to_string(f.index) + ',';
  return key;
}

}  // namespace

std::shared_ptr<Session::Plan> Session::get_plan(const std::vector<Output>& fetches,
                                                 const std::vector<Node*>& targets,
                                                 const FeedDict& feeds) {
  std::string key = plan_key(fetches, targets, feeds);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (plans_version_ != graph_.version()) {
      plans_.clear();
      plans_version_ = graph_.version();
    }
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
  }
  auto plan = compile(fetches, targets, feeds);
  std::lock_guard<std::mutex> lock(mu_);
  plans_[key] = plan;
  return plan;
}

std::shared_ptr<Session::Plan> Session::compile(const std::vector<Output>& fetches,
                                                const std::vector<Node*>& targets,
                                                const FeedDict& feeds) {
  std::map<Output, int> fed;  // fed output -> feed slot (assigned below)
  for (const auto& kv : feeds) fed[kv.first] = -1;

  // Depth-first search from fetches/targets to find needed nodes in
  // topological order; colors detect cycles.
  enum Color : uint8_t { kWhite, kGray, kBlack };
  std::vector<Color> color(static_cast<size_t>(graph_.num_nodes()), kWhite);
  std::vector<Node*> order;
  std::vector<Node*> roots;
  for (const auto& f : fetches)
    if (!fed.count(f)) roots.push_back(f.node);
  for (Node* t : targets) roots.push_back(t);

  for (Node* root : roots) {
    if (color[static_cast<size_t>(root->id())] != kWhite) continue;
    // Iterative DFS: stack of (node, next dependency index).
    std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
    color[static_cast<size_t>(root->id())] = kGray;
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      size_t ndeps = n->inputs().size() + n->control_inputs().size();
      if (next == ndeps) {
        color[static_cast<size_t>(n->id())] = kBlack;
        order.push_back(n);
        stack.pop_back();
        continue;
      }
      size_t k = next++;
      Node* dep;
      if (k < n->inputs().size()) {
        const Output& in = n->inputs()[k];
        if (fed.count(in)) continue;
        dep = in.node;
      } else {
        dep = n->control_inputs()[k - n->inputs().size()];
      }
      Color c = color[static_cast<size_t>(dep->id())];
      if (c == kBlack) continue;
      if (c == kGray) {
        std::ostringstream os;
        bool on = false;
        for (auto& fr : stack) {
          if (fr.first == dep) on = true;
          if (on) os << "'" << fr.first->name() << "' -> ";
        }
        os << "'" << dep->name() << "'";
        throw_error("Session::run: the graph has a cycle: ", os.str());
      }
      color[static_cast<size_t>(dep->id())] = kGray;
      stack.push_back({dep, 0});
    }
  }

  auto plan = std::make_shared<Plan>();
  std::unordered_map<const Node*, int> first_slot;
  int slots = 0;
  for (auto& kv : fed) kv.second = slots++;
  for (Node* n : order) {
    if (n->op_type() == "Placeholder")
      throw_error("Session::run: placeholder '", n->name(), "' (", dtype_name(n->output_dtype(0)),
                  n->output_shape(0).to_string(), ") must be fed");
    first_slot[n] = slots;
    slots += n->num_outputs();
  }
  plan->num_slots = slots;
  plan->feed_slots = fed;

  auto slot_of = [&](const Output& o) -> int {
    auto f = fed.find(o);
    if (f != fed.end()) return f->second;
    return first_slot.at(o.node) + o.index;
  };

  std::vector<int> last_reader(static_cast<size_t>(slots), -1);
  for (Node* n : order) {
    Plan::Step step;
    step.node = n;
    step.device = n->device();
    DType kdt = kernel_dtype(*n);
    step.kernel = KernelRegistry::global().find(n->op_type(), step.device.type, kdt);
    if (!step.kernel)
      throw_error("Session::run: no kernel registered for op ", n->op_type(), " on ",
                  step.device.to_string(), " for dtype ", dtype_name(kdt), " (node '", n->name(),
                  "'; inputs: ", n->describe_inputs(), ")");
    if (!step.device.is_cpu()) {
      const DeviceBackend* backend = find_device_backend(step.device.type);
      if (backend == nullptr || !backend->context)
        throw_error("Session::run: node '", n->name(), "' (op ", n->op_type(), ") is placed on ",
                    step.device.to_string(), ", but this build of Spire has no backend for it "
                    "(configure with SPIRE_CUDA=ON)");
      step.device_context = backend->context(step.device.index);
      step.backend = backend;
    }
    step.transfer_inputs = n->op_type() != "Copy";
    for (const auto& in : n->inputs()) {
      int s = slot_of(in);
      step.input_slots.push_back(s);
      bool ref = !fed.count(in) && in.node->op_def().ref_output();
      step.ref_inputs.push_back(ref ? in.node : nullptr);
      // A reference read takes the session's current value, not the slot, so
      // it does not keep the Variable node's output alive (which would stop
      // updates from writing in place).
      if (!ref) last_reader[static_cast<size_t>(s)] = static_cast<int>(plan->steps.size());
    }
    step.first_output_slot = first_slot[n];
    plan->max_inputs = std::max(plan->max_inputs, n->num_inputs());
    plan->steps.push_back(std::move(step));
  }
  std::vector<bool> fetched(static_cast<size_t>(slots), false);
  for (const auto& f : fetches) {
    int s = slot_of(f);
    plan->fetch_slots.push_back(s);
    fetched[static_cast<size_t>(s)] = true;
  }
  // Release each slot after its last reader, or right after its producer
  // when nothing reads it; fetched slots are kept.
  for (size_t i = 0; i < plan->steps.size(); ++i) {
    auto& st = plan->steps[i];
    for (int o = 0; o < st.node->num_outputs(); ++o) {
      int s = st.first_output_slot + o;
      if (last_reader[static_cast<size_t>(s)] < 0 && !fetched[static_cast<size_t>(s)])
        st.release.push_back(s);
    }
  }
  for (int s = 0; s < slots; ++s) {
    int r = last_reader[static_cast<size_t>(s)];
    if (r >= 0 && !fetched[static_cast<size_t>(s)]) plan->steps[static_cast<size_t>(r)].release.push_back(s);
  }
  return plan;
}

// ---- execution -------------------------------------------------------------

std::vector<Tensor> Session::execute(const Plan& plan, const std::vector<Output>& fetches,
                                     const FeedDict& feeds) {
  std::vector<Tensor> values(static_cast<size_t>(plan.num_slots));
  // A fed value moves to the device of the output it replaces (through
  // pinned memory for a GPU), once, whatever the number of readers.
  for (const auto& [out, t] : feeds)
    values[static_cast<size_t>(plan.feed_slots.at(out))] = t.to(out.node->device());

  std::vector<Tensor> inputs(static_cast<size_t>(plan.max_inputs));
  Device current = Device::cpu();  // the accelerator made current last (CPU: none yet)
  for (const auto& step : plan.steps) {
    Node* n = step.node;
    if (step.backend && step.device != current) {
      if (step.backend->make_current) step.backend->make_current(step.device.index);
      current = step.device;
    }
    const int nin = static_cast<int>(step.input_slots.size());
    for (int i = 0; i < nin; ++i) {
      const Node* ref = step.ref_inputs[static_cast<size_t>(i)];
      Tensor ref_value;
      if (ref) ref_value = variable(ref);
      Tensor& v = ref ? ref_value
                      : values[static_cast<size_t>(step.input_slots[static_cast<size_t>(i)])];
      if (!v.defined()) {
        if (!n->op_def().allows_undefined_input(i)) {
          const Output& src = n->input(i);
          if (src.node->op_type() == "Variable")
            throw_error("Session::run: variable '", src.node->name(),
                        "' is uninitialized (read by node '", n->name(),
                        "'); run its initializer first");
          throw_error("Session::run: input ", i, " of node '", n->name(), "' is undefined");
        }
        inputs[static_cast<size_t>(i)] = Tensor();
      } else if (step.transfer_inputs && v.device() != step.device) {
        inputs[static_cast<size_t>(i)] = v.to(step.device);
      } else {
        inputs[static_cast<size_t>(i)] = v;
      }
    }
    Tensor* outs = values.data() + step.first_output_slot;
    KernelContext ctx(*n, step.device, inputs.data(), outs, this, step.device_context,
                      step.device.type == DeviceType::CPU ? thread_pool_.get() : nullptr);
    ctx.set_allow_tf32(options_.allow_tf32);
    try {
      (*step.kernel)(ctx);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.find("'" + n->name() + "'") == std::string::npos)
        msg = str_cat("node '", n->name(), "' (op ", n->op_type(), "): ", msg);
      throw Error(msg);
    } catch (const std::exception& e) {
      throw_error("node '", n->name(), "' (op ", n->op_type(), "): ", e.what());
    }
    if (options_.check_outputs) {
      for (int o = 0; o < n->num_outputs(); ++o) {
        const Tensor& t = outs[o];
        if (!t.defined()) {
          if (n->op_type() == "Variable") continue;  // uninitialized: checked by readers
          throw_error("internal error: kernel of ", n->describe(), " left output ", o, " undefined");
        }
        if (t.device() != step.device && n->op_type() != "Variable")
          throw_error("internal error: kernel of ", n->describe(), " on ", step.device.to_string(),
                      " returned output ", o, " on ", t.device().to_string());
        if (t.dtype() != n->output_dtype(o) || !n->output_shape(o).is_compatible_with(t.shape()))
          throw_error("node '", n->name(), "' (op ", n->op_type(), "): output ", o, " is ",
                      t.type_string(), " but was inferred as ", dtype_name(n->output_dtype(o)),
                      n->output_shape(o).to_string(), "; inputs: ", ctx.describe_runtime_inputs());
      }
    }
    for (int i = 0; i < nin; ++i) inputs[static_cast<size_t>(i)] = Tensor();
    for (int s : step.release) values[static_cast<size_t>(s)] = Tensor();
  }

  std::vector<Tensor> results;
  results.reserve(fetches.size());
  for (size_t i = 0; i < fetches.size(); ++i) {
    Tensor& v = values[static_cast<size_t>(plan.fetch_slots[i])];
    if (!v.defined()) {
      if (fetches[i].node->op_type() == "Variable")
        throw_error("Session::run: variable '", fetches[i].node->name(), "' is uninitialized");
      throw_error("Session::run: fetch '", fetches[i].name(), "' has no value");
    }
    results.push_back(v.to(Device::cpu()));
  }
  return results;
}

std::vector<Tensor> Session::run_without_hooks(const std::vector<Output>& fetches,
                                               const FeedDict& feeds,
                                               const std::vector<Node*>& targets) {
  for (const auto& f : fetches) {
    SPIRE_CHECK(f.valid(), "Session::run: invalid fetch");
    SPIRE_CHECK(f.graph() == &graph_, "Session::run: fetch '", f.name(),
                "' belongs to another graph than this session's");
    SPIRE_CHECK(f.index >= 0 && f.index < f.node->num_outputs(), "Session::run: fetch '",
                f.name(), "' refers to a missing output");
  }
  for (Node* t : targets) {
    SPIRE_CHECK(t, "Session::run: null target");
    SPIRE_CHECK(t->graph() == &graph_, "Session::run: target '", t->name(),
                "' belongs to another graph than this session's");
  }
  std::map<Output, bool> seen;
  for (const auto& [out, t] : feeds) {
    SPIRE_CHECK(out.valid() && out.graph() == &graph_, "Session::run: feed '", out.name(),
                "' is not an output of this session's graph");
    SPIRE_CHECK(!seen[out], "Session::run: '", out.name(), "' is fed twice");
    seen[out] = true;
    SPIRE_CHECK(t.defined(), "Session::run: the value fed for '", out.name(), "' is undefined");
    if (t.dtype() != out.dtype() || !out.shape().is_compatible_with(t.shape()))
      throw_error("Session::run: cannot feed ", t.type_string(), " to '", out.name(),
                  "', which expects ", dtype_name(out.dtype()), out.shape().to_string());
  }
  auto plan = get_plan(fetches, targets, feeds);
  return execute(*plan, fetches, feeds);
}

std::vector<Tensor> Session::run(const std::vector<Output>& fetches, const FeedDict& feeds,
                                 const std::vector<Node*>& targets) {
  stop_requested_ = false;
  if (hooks_.empty()) return run_without_hooks(fetches, feeds, targets);
  SessionRunContext ctx{*this, fetches, targets};
  std::vector<Output> all_fetches = fetches;
  std::vector<Node*> all_targets = targets;
  FeedDict all_feeds = feeds;
  std::vector<std::pair<size_t, size_t>> ranges;  // per hook: [begin, end) of its fetches
  for (SessionRunHook* h : hooks_) {
    SessionRunArgs args = h->before_run(ctx);
    size_t begin = all_fetches.size();
    all_fetches.insert(all_fetches.end(), args.fetches.begin(), args.fetches.end());
    ranges.emplace_back(begin, all_fetches.size());
    all_targets.insert(all_targets.end(), args.targets.begin(), args.targets.end());
    for (auto& f : args.feeds) {
      for (auto& existing : all_feeds)
        SPIRE_CHECK(existing.first != f.first, "Session::run: a hook feeds '", f.first.name(),
                    "', which is already fed");
      all_feeds.push_back(f);
    }
  }
  std::vector<Tensor> all = run_without_hooks(all_fetches, all_feeds, all_targets);
  for (size_t h = 0; h < hooks_.size(); ++h) {
    SessionRunValues values;
    values.results.assign(all.begin() + static_cast<long>(ranges[h].first),
                          all.begin() + static_cast<long>(ranges[h].second));
    hooks_[h]->after_run(ctx, values);
  }
  stop_requested_ = ctx.stop_requested;
  all.resize(fetches.size());
  return all;
}

}  // namespace spire
