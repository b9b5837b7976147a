#include "core/session.h"

#include <cstdlib>

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include <thread>

#include "core/executor.h"
#include "core/op_registry.h"

namespace spire {

namespace {

std::vector<std::unique_ptr<ThreadPool>> make_cpu_pools(const SessionOptions& o) {
  SPIRE_CHECK(o.num_cpu_devices >= 1 && o.num_cpu_devices <= kMaxCpuDevices,
              "SessionOptions::num_cpu_devices must be in [1, ", kMaxCpuDevices, "], got ",
              o.num_cpu_devices);
  SPIRE_CHECK(o.num_threads >= 0, "SessionOptions::num_threads must be >= 0 (0 = hardware "
              "concurrency), got ", o.num_threads);
  std::vector<int> split = o.cpu_device_threads;
  if (split.empty()) {
    int total = o.num_threads == 0
                    ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))
                    : o.num_threads;
    for (int d = 0; d < o.num_cpu_devices; ++d)
      split.push_back(std::max(1, total / o.num_cpu_devices + (d < total % o.num_cpu_devices ? 1 : 0)));
  }
  SPIRE_CHECK(static_cast<int>(split.size()) == o.num_cpu_devices,
              "SessionOptions::cpu_device_threads has ", split.size(), " entries for ",
              o.num_cpu_devices, " CPU devices");
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int t : split) {
    SPIRE_CHECK(t >= 1, "SessionOptions::cpu_device_threads: every CPU device needs at least 1 "
                "thread, got ", t);
    pools.push_back(std::make_unique<ThreadPool>(t));
  }
  return pools;
}

// Switches that the environment may override for every session (to run a whole test
// suite with a pass off): "0" or "1"; anything else is an error naming the variable.
void apply_env_switch(const char* name, bool* value) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return;
  const std::string s(v);
  if (s == "0") *value = false;
  else if (s == "1") *value = true;
  else throw_error("Session: environment variable ", name, "='", s, "' must be 0 or 1");
}

// SPIRE_INTER_OP: 0 (off), 1 (measured) or always.
void apply_env_inter_op(InterOp* value) {
  const char* v = std::getenv("SPIRE_INTER_OP");
  if (v == nullptr || *v == '\0') return;
  const std::string s(v);
  if (s == "0") *value = InterOp::kOff;
  else if (s == "1") *value = InterOp::kMeasured;
  else if (s == "always") *value = InterOp::kAlways;
  else throw_error("Session: environment variable SPIRE_INTER_OP='", s, "' must be 0, 1 or always");
}

SessionOptions with_environment(SessionOptions o) {
  apply_env_switch("SPIRE_REUSE_INPUT_BUFFERS", &o.reuse_input_buffers);
  apply_env_switch("SPIRE_FUSE_ELEMENTWISE", &o.fuse_elementwise);
  apply_env_switch("SPIRE_FUSE_EPILOGUES", &o.fuse_epilogues);
  apply_env_switch("SPIRE_MEASURE_CONV_ALGORITHMS", &o.measure_conv_algorithms);
  apply_env_inter_op(&o.inter_op);
  return o;
}

}  // namespace

Session::Session(Graph& graph, SessionOptions options)
    : graph_(graph), options_(with_environment(std::move(options))), cpu_pools_(make_cpu_pools(options_)),
      lane_threads_(std::make_unique<LaneThreads>()) {}

Session::~Session() = default;

MemoryStats Session::memory_stats(const Device& device) const {
  return get_allocator(device)->memory_stats();
}

void Session::reset_peak_memory(const Device& device) { get_allocator(device)->reset_peak(); }

int Session::lane_thread_count() const { return lane_threads_->num_workers(); }

ThreadPool& Session::thread_pool(int cpu_index) const {
  SPIRE_CHECK(cpu_index >= 0 && cpu_index < static_cast<int>(cpu_pools_.size()),
              "Session::thread_pool: no CPU device cpu:", cpu_index, " (the session has ",
              cpu_pools_.size(), ")");
  return *cpu_pools_[static_cast<size_t>(cpu_index)];
}

void Session::add_hook(SessionRunHook* hook) {
  SPIRE_CHECK(hook, "Session::add_hook: null hook");
  hooks_.push_back(hook);
}

void Session::remove_hook(SessionRunHook* hook) {
  hooks_.erase(std::remove(hooks_.begin(), hooks_.end(), hook), hooks_.end());
}

// ---- state -----------------------------------------------------------------

const VariableResource* Session::find_variable(const Node* var) const {
  std::shared_lock<std::shared_mutex> lock(var_mu_);
  auto it = variables_.find(var);
  return it == variables_.end() ? nullptr : it->second.get();
}

VariableResource& Session::variable(const Node* var) {
  if (const VariableResource* r = find_variable(var)) return *const_cast<VariableResource*>(r);
  std::unique_lock<std::shared_mutex> lock(var_mu_);
  auto& slot = variables_[var];
  if (!slot) slot = std::make_unique<VariableResource>();
  return *slot;
}

uint64_t Session::advance_rng(const Node* n, uint64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t& c = rng_[n];
  uint64_t start = c;
  c += count;
  return start;
}

std::vector<std::pair<const Node*, uint64_t>> Session::rng_offsets() const {
  std::vector<std::pair<const Node*, uint64_t>> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.assign(rng_.begin(), rng_.end());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first->id() < b.first->id(); });
  return out;
}

void Session::set_rng_offset(const Node* n, uint64_t offset) {
  SPIRE_CHECK(n, "Session::set_rng_offset: null node");
  SPIRE_CHECK(n->graph() == &graph_, "Session::set_rng_offset: node '", n->name(),
              "' (", n->op_type(), ") is not a node of this session's graph");
  std::lock_guard<std::mutex> lock(mu_);
  rng_[n] = offset;
}

Tensor Session::constant_cache(const Node* n, const std::function<Tensor()>& make) {
  std::lock_guard<std::mutex> lock(mu_);
  Tensor& slot = constants_[n];
  if (!slot.defined()) slot = make();
  return slot;
}

std::shared_ptr<void> Session::resource_slot(std::type_index type, const std::string& key,
                                             const std::function<std::shared_ptr<void>()>& make,
                                             const std::shared_ptr<void>* replace) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = resources_[{type, key}];
  if (replace) slot = *replace;
  if (!slot && make) slot = make();
  return slot;
}

Tensor Session::variable_value(const Node* var) const {
  const VariableResource* r = find_variable(var);
  return r ? r->read().clone() : Tensor();
}

bool Session::is_initialized(const Node* var) const {
  const VariableResource* r = find_variable(var);
  return r && r->read().defined();
}

void Session::set_variable_value(const Node* var, const Tensor& value) {
  SPIRE_CHECK(var && var->graph() == &graph_, "Session::set_variable_value: node is not in this session's graph");
  SPIRE_CHECK(var->op_def().is_variable(), "Session::set_variable_value: ", var->describe(),
              " is not a variable");
  SPIRE_CHECK(value.defined() && value.dtype() == var->output_dtype(0) &&
                  var->output_shape(0).is_compatible_with(value.shape()),
              "Session::set_variable_value: variable '", var->name(), "' is ",
              dtype_name(var->output_dtype(0)), var->output_shape(0).to_string(), ", got ",
              value.defined() ? value.type_string() : std::string("<undefined>"));
  Tensor own = value.to(var->device());
  if (own.shares_buffer_with(value)) own = value.clone();
  variable(var).update().value() = std::move(own);
}

// ---- planning and running ------------------------------------------------------

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

std::shared_ptr<ExecutionPlan> Session::get_plan(const std::vector<Output>& fetches,
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
  ExecutorEnv env = executor_env();
  auto plan = ExecutionPlan::compile(graph_, fetches, targets, feeds, env);
  std::lock_guard<std::mutex> lock(mu_);
  plans_[key] = plan;
  return plan;
}

ExecutorEnv Session::executor_env() {
  ExecutorEnv env;
  env.state = this;
  env.options = &options_;
  env.variable = [this](const Node* n) { return &variable(n); };
  env.cpu_pools = &cpu_pools_;
  env.lane_threads = lane_threads_.get();
  return env;
}

std::string Session::plan_text(const std::vector<Output>& fetches, const FeedDict& feeds,
                               const std::vector<Node*>& targets) {
  return get_plan(fetches, targets, feeds)->to_text();
}

std::vector<std::pair<std::string, std::vector<std::string>>> Session::inter_op_waves(
    const std::vector<Output>& fetches, const FeedDict& feeds, const std::vector<Node*>& targets) {
  return get_plan(fetches, targets, feeds)->wave_choices();
}

std::vector<Tensor> Session::run_without_hooks(const std::vector<Output>& fetches,
                                               const FeedDict& feeds,
                                               const std::vector<Node*>& targets,
                                               StepStats* trace) {
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
  ExecutorEnv env = executor_env();
  const uint64_t run_id = next_run_id_.fetch_add(1);
  if (trace == nullptr) return plan->run(fetches, feeds, run_id, env);
  std::vector<std::string> lanes;
  for (const Device& d : plan->lane_devices()) lanes.push_back(d.to_string());
  StepTrace collector(run_id, std::move(lanes));
  std::vector<Tensor> out = plan->run(fetches, feeds, run_id, env, &collector);
  *trace = collector.finish();
  return out;
}

std::vector<Tensor> Session::run(const std::vector<Output>& fetches, const FeedDict& feeds,
                                 const std::vector<Node*>& targets, StepStats* trace) {
  stop_requested_ = false;
  if (hooks_.empty()) return run_without_hooks(fetches, feeds, targets, trace);
  SessionRunContext ctx{*this, fetches, targets};
  std::vector<Output> all_fetches = fetches;
  std::vector<Node*> all_targets = targets;
  FeedDict all_feeds = feeds;
  std::vector<std::pair<size_t, size_t>> ranges;  // per hook: [begin, end) of its fetches
  bool hook_trace = false;
  for (SessionRunHook* h : hooks_) {
    SessionRunArgs args = h->before_run(ctx);
    hook_trace = hook_trace || args.trace;
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
  std::shared_ptr<StepStats> stats;
  if (trace || hook_trace) stats = std::make_shared<StepStats>();
  std::vector<Tensor> all = run_without_hooks(all_fetches, all_feeds, all_targets, stats.get());
  if (trace) *trace = *stats;
  for (size_t h = 0; h < hooks_.size(); ++h) {
    SessionRunValues values;
    if (hook_trace) values.step_stats = stats;
    values.results.assign(all.begin() + static_cast<long>(ranges[h].first),
                          all.begin() + static_cast<long>(ranges[h].second));
    hooks_[h]->after_run(ctx, values);
  }
  stop_requested_ = ctx.stop_requested;
  all.resize(fetches.size());
  return all;
}

}  // namespace spire
