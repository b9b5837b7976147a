// Input sources (see input_source.h): per-tower tensors, the feeding
// callbacks, and StagingInput's background stager.
#include "train/input_source.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include "core/ops/state_ops.h"
#include "train/dataflow.h"
#include "train/trainer.h"
#include "core/logger.h"

namespace spire {

// ---- InputSource ------------------------------------------------------------------

std::vector<CallbackPtr> InputSource::setup(const std::vector<InputDesc>& signature, Graph& g,
                                            const std::vector<Device>& tower_devices) {
  SPIRE_CHECK(!setup_done_, "InputSource::setup: called twice");
  std::set<Device> seen;
  for (const Device& d : tower_devices)
    SPIRE_CHECK(seen.insert(d).second, "InputSource::setup: device ", d.to_string(),
                " is listed twice in the towers' devices");
  tower_devices_ = tower_devices;
  auto cbs = _setup(signature, g);
  setup_done_ = true;
  return cbs;
}

int64_t InputSource::size() const {
  throw_error("InputSource::size(): this input source has no size; set steps_per_epoch");
}

void InputSource::check_tower(int tower) const {
  SPIRE_CHECK(tower >= 0 && tower < num_towers(), "InputSource: tower ", tower,
              " does not exist (the input serves ", num_towers(), " tower",
              num_towers() == 1 ? "" : "s", ")");
}

namespace {

// Builds `make(k)` for every tower k, inside tower k's device scope.
template <typename Make>
std::vector<std::vector<Output>> per_tower(Graph& g, const std::vector<Device>& devices, Make make) {
  std::vector<std::vector<Output>> out;
  const int n = std::max<int>(1, static_cast<int>(devices.size()));
  for (int k = 0; k < n; ++k) {
    std::optional<DeviceScope> scope;
    if (!devices.empty()) scope.emplace(g, devices[static_cast<size_t>(k)]);
    std::optional<NameScope> ns;
    if (k > 0) ns.emplace(g, "input" + std::to_string(k) + "/");
    out.push_back(make(k));
  }
  return out;
}

}  // namespace

// ---- FeedInput -----------------------------------------------------------------------

// Feeds the next step's datapoints (one per tower) in before_run.
class FeedInput::FeedCallback : public Callback {
 public:
  explicit FeedCallback(FeedInput& in) : in_(in) { chief_only_ = false; }
  std::string name() const override { return "FeedInput"; }

 protected:
  void _before_train() override { in_.reset_state_at_step(trainer().global_step()); }
  SessionRunArgs _before_run(SessionRunContext&) override {
    std::vector<std::vector<Tensor>> step;
    if (!in_.next_step(step)) throw StopTraining("FeedInput: the dataflow is exhausted");
    SessionRunArgs args;
    args.feeds = in_.feeds_of(step);
    return args;
  }

 private:
  FeedInput& in_;
};

FeedInput::FeedInput(std::shared_ptr<DataFlow> df, bool infinite)
    : df_(std::move(df)), infinite_(infinite) {
  SPIRE_CHECK(df_, "FeedInput: null dataflow");
}

FeedInput::~FeedInput() = default;

int64_t FeedInput::size() const { return df_->size(); }

void FeedInput::reset_state_at_step(int64_t global_step) {
  SPIRE_CHECK(global_step >= 0, "FeedInput: reset_state_at_step(", global_step, "): the step must be >= 0");
  if (state_reset_) {
    df_->begin_epoch();
    return;
  }
  // A resumed run: the stream continues where step `global_step` of the
  // uninterrupted run read (every step takes one datapoint per tower).
  int64_t skip = global_step * num_towers();
  int64_t pass = 0;
  if (skip > 0 && df_->has_size() && df_->size() > 0 && df_->can_set_next_epoch()) {
    pass = skip / df_->size();
    skip %= df_->size();
    df_->set_next_epoch(pass);
  }
  df_->reset_state();
  state_reset_ = true;
  df_->begin_epoch();
  if (global_step == 0) return;
  logger::info("FeedInput: resuming at global_step ", global_step, ": ", df_->name(), " starts at pass ", pass,
               " and drops its first ", skip, " datapoint(s)");
  Datapoint dp;
  bool restarted = false;
  for (int64_t i = 0; i < skip;) {
    if (df_->next(dp)) {
      ++i;
      restarted = false;
      continue;
    }
    if (!infinite_) break;  // the first step finds the end of the data
    if (restarted) throw StopTraining("FeedInput: the dataflow is empty");
    df_->begin_epoch();
    restarted = true;
  }
}

std::vector<Output> FeedInput::get_input_tensors(int tower) const {
  check_tower(tower);
  SPIRE_CHECK(!placeholders_.empty(), "FeedInput: get_input_tensors before setup");
  return placeholders_[static_cast<size_t>(tower)];
}

std::vector<CallbackPtr> FeedInput::_setup(const std::vector<InputDesc>& signature, Graph& g) {
  placeholders_ = per_tower(g, tower_devices_, [&](int) {
    std::vector<Output> phs;
    for (const auto& d : signature) phs.push_back(ops::placeholder(d.dtype, d.shape, d.name, &g));
    return phs;
  });
  return {std::make_shared<FeedCallback>(*this)};
}

bool FeedInput::next_step(std::vector<std::vector<Tensor>>& step) {
  step.clear();
  const int towers = num_towers();
  bool restarted = false;
  while (static_cast<int>(step.size()) < towers) {
    Datapoint dp;
    if (df_->next(dp)) {
      step.push_back(std::move(dp));
      restarted = false;
      continue;
    }
    if (!infinite_ || restarted) {
      if (restarted) throw StopTraining("FeedInput: the dataflow is empty");
      step.clear();  // a step takes every tower's input or none
      return false;
    }
    df_->begin_epoch();
    restarted = true;
  }
  return true;
}

std::vector<std::pair<Output, Tensor>> FeedInput::feeds_of(
    std::vector<std::vector<Tensor>>& step) const {
  std::vector<std::pair<Output, Tensor>> feeds;
  for (size_t k = 0; k < step.size(); ++k) {
    const auto& phs = placeholders_[k];
    SPIRE_CHECK(step[k].size() == phs.size(), "FeedInput: a datapoint has ", step[k].size(),
                " components but the input signature has ", phs.size());
    for (size_t i = 0; i < phs.size(); ++i) feeds.push_back({phs[i], std::move(step[k][i])});
  }
  return feeds;
}

QueueInput::QueueInput(std::shared_ptr<DataFlow> df, int queue_size)
    : FeedInput(std::make_shared<PrefetchData>(std::move(df), queue_size, 1)) {}

// ---- StagingInput ------------------------------------------------------------------------

// The background thread: takes a step's datapoints from the FeedInput,
// copies each tower's to its device and queues the step (at most
// `capacity`). Errors of the thread (and the end of the data) reach the
// consumer in order, after the steps staged before them. The thread keeps
// the Stager and the FeedInput alive (shared_ptr), so stop() can give up on
// a thread stuck inside the dataflow after a bounded wait (detaching it)
// instead of hanging the trainer's shutdown.
class StagingInput::Stager : public std::enable_shared_from_this<StagingInput::Stager> {
 public:
  Stager(std::shared_ptr<FeedInput> in, int capacity, double timeout)
      : in_(std::move(in)), capacity_(capacity), timeout_(timeout) {}
  ~Stager() {
    if (thread_.joinable()) thread_.detach();  // only reached after stop() gave up
  }

  void start() {
    stop();
    std::lock_guard<std::mutex> lk(mu_);
    queue_.clear();
    error_ = nullptr;
    finished_ = false;
    stopping_ = false;
    exited_ = false;
    thread_ = std::thread([self = shared_from_this()] { self->loop(); });
  }

  void stop() {
    if (!thread_.joinable()) return;
    std::unique_lock<std::mutex> lk(mu_);
    stopping_ = true;
    cv_.notify_all();
    if (cv_.wait_for(lk, std::chrono::duration<double>(timeout_), [&] { return exited_; })) {
      lk.unlock();
      thread_.join();
    } else {
      lk.unlock();
      logger::error("StagingInput: the staging thread is still inside the dataflow after ",
                    timeout_, " s; leaving it behind");
      thread_.detach();
    }
  }

  // The next staged step; false at the end of a non-infinite dataflow.
  bool pop(std::vector<std::vector<Tensor>>& step) {
    std::unique_lock<std::mutex> lk(mu_);
    auto ready = [&] { return !queue_.empty() || finished_ || error_; };
    if (!cv_.wait_for(lk, std::chrono::duration<double>(timeout_), ready))
      throw_error("StagingInput: no staged step after ", timeout_,
                  " s (the dataflow produces nothing?)");
    if (!queue_.empty()) {
      step = std::move(queue_.front());
      queue_.pop_front();
      cv_.notify_all();
      return true;
    }
    if (error_) std::rethrow_exception(error_);
    return false;
  }

  int64_t staged() const {
    std::lock_guard<std::mutex> lk(mu_);
    return staged_;
  }

 private:
  void loop() {
    try {
      for (;;) {
        {
          std::unique_lock<std::mutex> lk(mu_);
          cv_.wait(lk, [&] { return stopping_ || static_cast<int>(queue_.size()) < capacity_; });
          if (stopping_) break;
        }
        std::vector<std::vector<Tensor>> step;
        bool more = in_->next_step(step);
        if (more) {
          const auto& devices = in_->tower_devices();
          for (size_t k = 0; k < step.size() && k < devices.size(); ++k)
            for (Tensor& t : step[k]) t = t.to(devices[k]);
        }
        std::lock_guard<std::mutex> lk(mu_);
        if (!more) {
          finished_ = true;
          break;
        }
        queue_.push_back(std::move(step));
        ++staged_;
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lk(mu_);
    exited_ = true;
    cv_.notify_all();
  }

  std::shared_ptr<FeedInput> in_;
  const int capacity_;
  const double timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<std::vector<Tensor>>> queue_;
  std::exception_ptr error_;
  bool finished_ = false;
  bool stopping_ = false;
  bool exited_ = false;
  int64_t staged_ = 0;
  std::thread thread_;
};

class StagingInput::StagingCallback : public Callback {
 public:
  explicit StagingCallback(StagingInput& in) : in_(in) { chief_only_ = false; }
  std::string name() const override { return "StagingInput"; }

 protected:
  void _before_train() override {
    in_.stager_->stop();  // a stager of an earlier train() must not race with the reset
    in_.input_->reset_state_at_step(trainer().global_step());
    in_.stager_->start();  // pre-fills before the first step
  }
  SessionRunArgs _before_run(SessionRunContext&) override {
    std::vector<std::vector<Tensor>> step;
    if (!in_.stager_->pop(step)) throw StopTraining("StagingInput: the dataflow is exhausted");
    SessionRunArgs args;
    args.feeds = in_.input_->feeds_of(step);
    return args;
  }
  void _after_train() override { in_.stager_->stop(); }

 private:
  StagingInput& in_;
};

StagingInput::StagingInput(std::shared_ptr<FeedInput> input, int nr_stage, double timeout_seconds)
    : input_(std::move(input)), nr_stage_(nr_stage), timeout_seconds_(timeout_seconds) {
  SPIRE_CHECK(input_, "StagingInput: null input");
  SPIRE_CHECK(nr_stage_ >= 1, "StagingInput: nr_stage must be >= 1, got ", nr_stage_);
  SPIRE_CHECK(timeout_seconds_ > 0, "StagingInput: timeout_seconds must be > 0");
  SPIRE_CHECK(!input_->setup_done(), "StagingInput: the wrapped input is already set up");
}

StagingInput::~StagingInput() {
  if (stager_) stager_->stop();
}

std::vector<Output> StagingInput::get_input_tensors(int tower) const {
  return input_->get_input_tensors(tower);
}

int64_t StagingInput::staged_steps() const { return stager_ ? stager_->staged() : 0; }

std::vector<CallbackPtr> StagingInput::_setup(const std::vector<InputDesc>& signature, Graph& g) {
  // The wrapped input's own feeding callback is not used: the stager takes its place.
  input_->setup(signature, g, tower_devices_);
  stager_ = std::make_shared<Stager>(input_, nr_stage_, timeout_seconds_);
  return {std::make_shared<StagingCallback>(*this)};
}

// ---- DummyConstantInput ------------------------------------------------------------------

DummyConstantInput::DummyConstantInput(std::vector<Shape> shapes) : shapes_(std::move(shapes)) {}

std::vector<Output> DummyConstantInput::get_input_tensors(int tower) const {
  check_tower(tower);
  SPIRE_CHECK(!tensors_.empty(), "DummyConstantInput: get_input_tensors before setup");
  return tensors_[static_cast<size_t>(tower)];
}

std::vector<CallbackPtr> DummyConstantInput::_setup(const std::vector<InputDesc>& signature, Graph& g) {
  SPIRE_CHECK(shapes_.size() == signature.size(), "DummyConstantInput: ", shapes_.size(),
              " shapes for ", signature.size(), " inputs");
  std::vector<Tensor> values;
  for (size_t i = 0; i < signature.size(); ++i) {
    SPIRE_CHECK(shapes_[i].is_fully_defined() && signature[i].shape.is_compatible_with(shapes_[i]),
                "DummyConstantInput: shape ", shapes_[i].to_string(), " does not fit input '",
                signature[i].name, "' ", signature[i].shape.to_string());
    Tensor t = Tensor::zeros(signature[i].dtype, shapes_[i]);
    if (is_floating(t.dtype())) {
      // A fixed pseudo-random pattern (no RNG state): values in [-1, 1).
      for (int64_t j = 0; j < t.num_elements(); ++j) {
        double v = static_cast<double>((j * 2654435761u) % 2000) / 1000.0 - 1.0;
        if (t.dtype() == DType::F32) t.data<float>()[j] = static_cast<float>(v);
        else t.data<double>()[j] = v;
      }
    }
    values.push_back(t);
  }
  tensors_ = per_tower(g, tower_devices_, [&](int) {
    std::vector<Output> out;
    for (size_t i = 0; i < signature.size(); ++i)
      out.push_back(ops::constant(values[i], signature[i].name, &g));
    return out;
  });
  return {};
}

}  // namespace spire
