#include "train/trainer.h"

#include <chrono>

#include "core/ops/math_ops.h"
#include "core/ops/state_ops.h"
#include "train/callbacks.h"
#include "core/logger.h"

namespace spire {

// ---- step counter (tensorpack's MaintainStepCounter) ------------------------

// Keeps the "global_step" variable, incremented by every hooked run, and the
// trainer's loop.global_step in sync with it (so a restored checkpoint
// continues the count).
class Trainer::StepCounter : public Callback {
 public:
  std::string name() const override { return "MaintainStepCounter"; }
  StepCounter() { chief_only_ = false; }

 protected:
  void _setup_graph() override {
    Graph& g = trainer().graph();
    DefaultGraphGuard guard(g);
    NameScope top(g, "");
    Output existing;
    for (const Output& v : global_variables("", &g))
      if (v.node->name() == "global_step") existing = v;
    if (existing.valid()) {
      step_ = existing;
    } else {
      VariableScopeGuard root(VariableScope{}, Reuse::kInherit, &g);
      step_ = get_variable("global_step", Shape{}, DType::I64, init::zeros(), false).value;
    }
    increment_ = ops::assign_add(step_, ops::scalar(1, DType::I64, &g), "global_step_increment").node;
  }
  void _before_train() override { load(); }

 public:
  /// Sets the trainer's loop.global_step from the variable (restored or initialized).
  void load() {
    Tensor v = trainer().session().variable_value(step_.node);
    trainer().loop_.global_step = v.defined() ? v.item<int64_t>() : 0;
  }

 protected:
  SessionRunArgs _before_run(SessionRunContext&) override { return {{}, {increment_}, {}}; }
  void _after_run(SessionRunContext&, const SessionRunValues&) override {
    ++trainer().loop_.global_step;
  }

 private:
  Output step_;
  Node* increment_ = nullptr;
};

namespace {

// Adapts the callbacks group to the session's hook interface.
class CallbacksHook : public SessionRunHook {
 public:
  explicit CallbacksHook(Callbacks& group) : group_(group) {}
  SessionRunArgs before_run(SessionRunContext& ctx) override { return group_.before_run(ctx); }
  void after_run(SessionRunContext& ctx, const SessionRunValues& v) override {
    group_.after_run(ctx, v);
  }

 private:
  Callbacks& group_;
};

}  // namespace

SessionCreator new_session_creator() { return new_session_creator(SessionOptions{}); }

SessionCreator new_session_creator(SessionOptions options) {
  return [options](Graph& g) {
    auto s = std::make_unique<Session>(g, options);
    Node* init;
    {
      DefaultGraphGuard guard(g);
      GraphUnfinalizeGuard unfinalize(g);
      init = global_variables_initializer(&g);
    }
    s->run_targets({init});
    return s;
  };
}

// ---- Trainer -----------------------------------------------------------------

Trainer::Trainer() : graph_(std::make_shared<Graph>()) {}
Trainer::~Trainer() {
  if (session_ && hook_) session_->remove_hook(hook_.get());
}

void Trainer::register_callback(CallbackPtr cb) {
  SPIRE_CHECK(cb, "register_callback: null callback");
  SPIRE_CHECK(!setup_done_, "register_callback(", cb->name(),
              "): callbacks must be registered before training starts");
  if (!is_chief_ && cb->chief_only()) {
    logger::info("Callback ", cb->name(), " is chief-only, skipped.");
    return;
  }
  callbacks_.push_back(std::move(cb));
}

MultiProcessTrainer* Trainer::multi_process() { return dynamic_cast<MultiProcessTrainer*>(this); }

void Trainer::setup_callbacks(const std::vector<CallbackPtr>& callbacks,
                              const std::vector<MonitorPtr>& monitors) {
  SPIRE_CHECK(!setup_done_, "setup_callbacks: called twice");
  job_logdir_ = logdir_;
  if (!is_chief_ && !logdir_.empty()) {
    const MultiProcessTrainer* mp = multi_process();
    logger::info(mp ? mp->process_name() : std::string("This process"), " does not write the log directory ",
                 logdir_, " (the chief does)");
    logdir_.clear();
  }
  std::vector<CallbackPtr> ordered;
  auto step_counter = std::make_shared<StepCounter>();
  step_counter_ = step_counter.get();
  ordered.push_back(step_counter);
  ordered.insert(ordered.end(), callbacks.begin(), callbacks.end());
  for (auto& cb : ordered) register_callback(cb);
  std::vector<MonitorPtr> registered;
  for (auto& m : monitors) {
    size_t before = callbacks_.size();
    register_callback(m);
    if (callbacks_.size() > before) registered.push_back(m);
  }
  monitors_ = std::make_shared<Monitors>(registered);
  register_callback(monitors_);
  group_ = std::make_shared<Callbacks>(callbacks_);
  {
    DefaultGraphGuard guard(*graph_);
    group_->setup_graph(*this);
  }
  setup_done_ = true;
}

void Trainer::initialize(SessionCreator creator, std::shared_ptr<SessionInit> init) {
  SPIRE_CHECK(setup_done_, "Trainer::initialize: call setup_callbacks first");
  MultiProcessTrainer* mp = multi_process();
  try {
    if (!creator) creator = new_session_creator(default_session_options());
    session_ = std::shared_ptr<Session>(creator(*graph_));
    SPIRE_CHECK(session_, "Trainer::initialize: the session creator returned null");
    on_session_created(*session_);
    if (init) {
      if (is_chief_) {
        init->init(*session_);
      } else {
        logger::info("Not the chief: the session initializer is skipped.");
      }
    }
    if (mp) mp->after_session_init(*session_);
    // Valid from here on (the input callbacks' before_train resume the data at it).
    step_counter_->load();
    hook_ = std::make_unique<CallbacksHook>(*group_);
    session_->add_hook(hook_.get());
    graph_->finalize();
  } catch (const std::exception& e) {
    if (mp) mp->on_failure(e);
    throw;
  }
}

void Trainer::main_loop(int64_t steps_per_epoch, int starting_epoch, int max_epoch) {
  SPIRE_CHECK(session_, "Trainer::main_loop: call initialize first");
  SPIRE_CHECK(steps_per_epoch > 0, "Trainer::main_loop: steps_per_epoch must be positive, got ",
              steps_per_epoch);
  loop_.steps_per_epoch = steps_per_epoch;
  loop_.starting_epoch = starting_epoch;
  loop_.max_epoch = max_epoch;
  loop_.epoch_num = starting_epoch - 1;
  MultiProcessTrainer* mp = multi_process();
  auto on_failure = [mp](const std::exception& e) {
    if (mp) mp->on_failure(e);
  };
  // A StopTraining raised on one process of several takes effect at the next step or epoch
  // boundary, where every process learns of it (MultiProcessTrainer::agree_to_stop) and stops
  // there too; a single process stops at once. Every process reaches the same boundaries with
  // the same collectives behind it: a stop raised in an epoch hook still lets the hooks after
  // it run (Callbacks keeps going on a multi-process trainer), and a hook's stop request is
  // read before the boundary. (A StopTraining from inside a step, e.g. one rank's input
  // running out, leaves the others in the step's collectives: a clear mismatch error.)
  bool stopping = false;
  std::string stop_reason;
  auto note_stop = [&](const StopTraining& e) {
    if (!mp) throw;  // (called inside the handler of e)
    stopping = true;
    stop_reason = e.what();
  };
  auto boundary = [&] {
    if (!mp) return;
    if (session_->stop_requested() && !stopping) {
      stopping = true;
      stop_reason = "a hook requested a stop";
    }
    if (mp->agree_to_stop(stopping))
      throw StopTraining(stopping ? stop_reason : "another process stopped training");
  };
  try {
    try {
      group_->before_train();
    } catch (const StopTraining& e) {
      note_stop(e);
    }
    for (int epoch = starting_epoch; epoch <= max_epoch; ++epoch) {
      boundary();
      loop_.epoch_num = epoch;
      loop_.local_step = -1;
      logger::info("Start Epoch ", epoch, " ...");
      auto start = std::chrono::steady_clock::now();
      try {
        group_->before_epoch();
      } catch (const StopTraining& e) {
        note_stop(e);
      }
      for (loop_.local_step = 0; loop_.local_step < steps_per_epoch; ++loop_.local_step) {
        boundary();
        try {
          if (!mp && session_->stop_requested()) throw StopTraining("a hook requested a stop");
          run_step();
          group_->trigger_step();
        } catch (const StopTraining& e) {
          note_stop(e);
        }
      }
      boundary();
      try {
        group_->after_epoch();
      } catch (const StopTraining& e) {
        note_stop(e);
      }
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      logger::info("Epoch ", epoch, " (global_step ", loop_.global_step, ") finished, time:",
                   secs, " sec.");
      try {
        group_->trigger_epoch();
      } catch (const StopTraining& e) {
        note_stop(e);
      }
    }
    boundary();  // a stop in the last epoch's hooks: every process ends stopped alike
    if (stopping) throw StopTraining(stop_reason);
    logger::info("Training has finished!");
  } catch (const StopTraining& e) {
    logger::info("Training was stopped by exception ", e.what(), ".");
  } catch (...) {
    try {
      throw;
    } catch (const std::exception& e) {
      on_failure(e);
    } catch (...) {
      on_failure(std::runtime_error("an unknown exception"));
    }
    try {
      group_->after_train();
    } catch (const std::exception& e) {
      logger::error("after_train failed while handling another error: ", e.what());
    }
    throw;
  }
  try {
    group_->after_train();
  } catch (const std::exception& e) {
    on_failure(e);
    throw;
  }
  if (mp) mp->on_main_loop_finished();
}

void Trainer::run_step() {
  SPIRE_CHECK(train_op, "Trainer::run_step: no train_op was set (set train_op or override run_step)");
  hooked_sess().run({}, {}, {train_op});
}

void Trainer::train(const std::vector<CallbackPtr>& callbacks,
                    const std::vector<MonitorPtr>& monitors, SessionCreator creator,
                    std::shared_ptr<SessionInit> init, int64_t steps_per_epoch,
                    int starting_epoch, int max_epoch) {
  try {
    setup_callbacks(callbacks, monitors);
  } catch (const std::exception& e) {
    // (A callback's setup may fail on one process only.)
    if (MultiProcessTrainer* mp = multi_process()) mp->on_failure(e);
    throw;
  }
  initialize(std::move(creator), std::move(init));
  if (MultiProcessTrainer* mp = multi_process()) {
    try {
      if (mp->run_service()) return;
      mp->synchronize_loop(steps_per_epoch, starting_epoch, max_epoch);
      mp->synchronize_rng(*session_);
    } catch (const std::exception& e) {
      mp->on_failure(e);
      throw;
    }
  }
  main_loop(steps_per_epoch, starting_epoch, max_epoch);
}

PlainSession Trainer::sess() const { return PlainSession(session()); }
HookedSession Trainer::hooked_sess() const { return HookedSession(session()); }
std::shared_ptr<Session> Trainer::shared_session() const {
  SPIRE_CHECK(session_, "Trainer: the session is created by initialize()");
  return session_;
}

Session& Trainer::session() const {
  SPIRE_CHECK(session_, "Trainer: the session is created by initialize()");
  return *session_;
}
Monitors& Trainer::monitors() const {
  SPIRE_CHECK(monitors_, "Trainer: monitors exist after setup_callbacks()");
  return *monitors_;
}

// ---- TowerTrainer --------------------------------------------------------------

void TowerTrainer::set_tower_func(TowerFunc tower_func) {
  SPIRE_CHECK(!tower_func_, "TowerTrainer: the tower function can be set only once");
  tower_func_ = std::make_unique<TowerFunc>(std::move(tower_func));
}

const TowerFunc& TowerTrainer::tower_func() const {
  SPIRE_CHECK(tower_func_, "TowerTrainer: no tower function was set");
  return *tower_func_;
}

const std::vector<std::shared_ptr<TowerHandle>>& TowerTrainer::towers() const {
  return tower_func().towers();
}

std::function<std::vector<Tensor>(const std::vector<Tensor>&)> TowerTrainer::get_predictor(
    const std::vector<std::string>& input_names, const std::vector<std::string>& output_names) {
  return make_predictor("InferenceTower", std::nullopt, input_names, output_names);
}

std::function<std::vector<Tensor>(const std::vector<Tensor>&)> TowerTrainer::get_predictor(
    const std::vector<std::string>& input_names, const std::vector<std::string>& output_names,
    const Device& device) {
  std::string dev = device.to_string();
  for (char& c : dev)
    if (c == ':') c = '-';
  return make_predictor("tower-pred-" + dev, device, input_names, output_names);
}

std::function<std::vector<Tensor>(const std::vector<Tensor>&)> TowerTrainer::make_predictor(
    const std::string& tower_name, const std::optional<Device>& device,
    const std::vector<std::string>& input_names, const std::vector<std::string>& output_names) {
  SPIRE_CHECK(tower_func_, "get_predictor: no tower function was set");
  std::shared_ptr<TowerHandle> handle;
  for (const auto& h : tower_func_->towers())
    if (h->ns_name == tower_name) handle = h;
  if (!handle) {
    Graph& g = graph();
    DefaultGraphGuard guard(g);
    GraphUnfinalizeGuard unfinalize(g);
    std::optional<DeviceScope> on;
    if (device) on.emplace(g, *device);
    std::vector<Output> inputs;
    {
      NameScope ns(g, tower_name + "/");
      for (const auto& d : tower_func_->input_signature())
        inputs.push_back(ops::placeholder(d.dtype, d.shape, d.name));
    }
    const std::string vs = device ? variable_scope_on(*device) : std::string();
    TowerContext ctx(tower_name, false, vs);
    (*tower_func_)(inputs);
    handle = tower_func_->towers().back();
  }
  std::vector<Output> ins, outs;
  for (const auto& n : input_names) {
    bool found = false;
    for (size_t i = 0; i < handle->input_signature.size(); ++i)
      if (handle->input_signature[i].name == n) {
        ins.push_back(handle->inputs[i]);
        found = true;
      }
    SPIRE_CHECK(found, "get_predictor: '", n, "' is not an input of the tower function");
  }
  for (const auto& n : output_names) outs.push_back(handle->get_tensor(n));
  // The predictor owns shares of the graph and the session (declared in that
  // order, so the session, which refers to the graph, goes first).
  struct Held {
    std::shared_ptr<Graph> graph;
    std::shared_ptr<Session> session;
  };
  auto held = std::make_shared<Held>(Held{shared_graph(), shared_session()});
  return [held, ins, outs](const std::vector<Tensor>& values) {
    SPIRE_CHECK(values.size() == ins.size(), "predictor: expected ", ins.size(), " inputs, got ",
                values.size());
    FeedDict feeds;
    for (size_t i = 0; i < ins.size(); ++i) feeds.push_back({ins[i], values[i]});
    return held->session->run_without_hooks(outs, feeds);
  };
}

// ---- SingleCostTrainer -------------------------------------------------------------

void SingleCostTrainer::setup_graph(const std::vector<InputDesc>& input_signature,
                                    std::shared_ptr<InputSource> input, GetCostFn get_cost_fn,
                                    GetOptFn get_opt_fn) {
  SPIRE_CHECK(input, "setup_graph: null input source");
  SPIRE_CHECK(get_cost_fn && get_opt_fn, "setup_graph: get_cost_fn and get_opt_fn are required");
  set_tower_func(TowerFunc(
      [get_cost_fn](const std::vector<Output>& in) { return std::vector<Output>{get_cost_fn(in)}; },
      input_signature));
  DefaultGraphGuard guard(graph());
  std::vector<CallbackPtr> cbs = input->setup(input_signature, graph(), tower_devices());
  std::vector<CallbackPtr> train_cbs = _setup_graph(*input, std::move(get_opt_fn));
  cbs.insert(cbs.end(), train_cbs.begin(), train_cbs.end());
  for (auto& cb : cbs) register_callback(cb);
  input_ = std::move(input);
}

Output SingleCostTrainer::build_tower_cost(InputSource& input) {
  TowerContext* ctx = get_current_tower_context(&graph());
  const TowerHandle& h = (*tower_func_)(input.get_input_tensors(ctx ? ctx->index() : 0));
  SPIRE_CHECK(h.outputs.size() == 1, "SingleCostTrainer: the tower function must return the cost");
  const Output& cost = h.outputs[0];
  SPIRE_CHECK(cost.shape().rank() == 0, "SingleCostTrainer: the cost must be a scalar, got '",
              cost.name(), "' of shape ", cost.shape().to_string());
  SPIRE_CHECK(is_floating(cost.dtype()), "SingleCostTrainer: the cost must be floating point, got ",
              dtype_name(cost.dtype()));
  return cost;
}

GradsAndVars SingleCostTrainer::compute_tower_gradients(InputSource& input, Optimizer& opt,
                                                        const std::vector<Output>& var_list) {
  return opt.compute_gradients(build_tower_cost(input), var_list);
}

std::vector<CallbackPtr> SimpleTrainer::_setup_graph(InputSource& input, GetOptFn get_opt_fn) {
  TowerContext ctx("", true);
  std::shared_ptr<Optimizer> opt = get_opt_fn();
  SPIRE_CHECK(opt, "SimpleTrainer: get_opt_fn returned null");
  GradsAndVars grads = compute_tower_gradients(input, *opt);
  train_op = opt->apply_gradients(grads, {}, "train_op");
  optimizer_ = opt;
  return {};
}

std::vector<CallbackPtr> NoOpTrainer::_setup_graph(InputSource& input, GetOptFn) {
  TowerContext ctx("", true);
  (*tower_func_)(input.get_input_tensors());
  return {};
}

void NoOpTrainer::run_step() {
  if (train_op) Trainer::run_step();
}

}  // namespace spire

namespace spire {

void Trainer::train_with_defaults(std::vector<CallbackPtr> callbacks, std::vector<MonitorPtr> monitors,
                                  SessionCreator creator, std::shared_ptr<SessionInit> init,
                                  int64_t steps_per_epoch, int starting_epoch, int max_epoch,
                                  const std::vector<CallbackPtr>* extra_callbacks) {
  std::vector<CallbackPtr> extra = extra_callbacks ? *extra_callbacks : default_callbacks();
  callbacks.insert(callbacks.end(), extra.begin(), extra.end());
  if (monitors.empty()) monitors = default_monitors();
  train(callbacks, monitors, std::move(creator), std::move(init), steps_per_epoch, starting_epoch,
        max_epoch);
}

}  // namespace spire
