#include "train/input_source.h"

#include "core/ops/state_ops.h"
#include "train/dataflow.h"

namespace spire {

std::vector<CallbackPtr> InputSource::setup(const std::vector<InputDesc>& signature, Graph& g) {
  SPIRE_CHECK(!setup_done_, "InputSource::setup: called twice");
  auto cbs = _setup(signature, g);
  setup_done_ = true;
  return cbs;
}

int64_t InputSource::size() const {
  throw_error("InputSource::size(): this input source has no size; set steps_per_epoch");
}

// Feeds the next datapoint in before_run. The dataflow is iterated in
// epochs; with `infinite` a finished epoch starts the next one.
class FeedInput::FeedCallback : public Callback {
 public:
  explicit FeedCallback(FeedInput& in) : in_(in) { chief_only_ = false; }
  std::string name() const override { return "FeedInput"; }

 protected:
  void _before_train() override { in_.reset_state(); }
  SessionRunArgs _before_run(SessionRunContext&) override {
    Datapoint dp;
    if (!in_.df_->next(dp)) {
      if (!in_.infinite_) throw StopTraining("FeedInput: the dataflow is exhausted");
      in_.df_->begin_epoch();
      if (!in_.df_->next(dp)) throw StopTraining("FeedInput: the dataflow is empty");
    }
    const auto& phs = in_.placeholders_;
    SPIRE_CHECK(dp.size() == phs.size(), "FeedInput: a datapoint has ", dp.size(),
                " components but the input signature has ", phs.size());
    SessionRunArgs args;
    for (size_t i = 0; i < phs.size(); ++i) args.feeds.push_back({phs[i], dp[i]});
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

void FeedInput::reset_state() {
  if (!state_reset_) {
    df_->reset_state();
    state_reset_ = true;
  }
  df_->begin_epoch();
}

std::vector<CallbackPtr> FeedInput::_setup(const std::vector<InputDesc>& signature, Graph& g) {
  for (const auto& d : signature) placeholders_.push_back(ops::placeholder(d.dtype, d.shape, d.name, &g));
  return {std::make_shared<FeedCallback>(*this)};
}

QueueInput::QueueInput(std::shared_ptr<DataFlow> df, int queue_size)
    : FeedInput(std::make_shared<PrefetchData>(std::move(df), queue_size, 1)) {}

DummyConstantInput::DummyConstantInput(std::vector<Shape> shapes) : shapes_(std::move(shapes)) {}

std::vector<CallbackPtr> DummyConstantInput::_setup(const std::vector<InputDesc>& signature, Graph& g) {
  SPIRE_CHECK(shapes_.size() == signature.size(), "DummyConstantInput: ", shapes_.size(),
              " shapes for ", signature.size(), " inputs");
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
    tensors_.push_back(ops::constant(t, signature[i].name, &g));
  }
  return {};
}

}  // namespace spire
