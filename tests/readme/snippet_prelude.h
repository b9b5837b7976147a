// The prelude of the README's C++ fragments (scripts/readme_snippets.py
// wraps every ```cpp block without `int main(` in a main() that starts with
// `TrainConfig config = spire_readme::tiny_config();`). A tiny model and
// data set, so that a trainer snippet such as
//   SyncMultiGPUTrainerReplicated trainer(parse_device_list("cpu:0,cpu:1"));
//   launch_train_with_config(config, trainer);
// trains for real in well under a second: a linear classifier of 4 features
// into 2 classes, 32 in-memory datapoints in batches of 4 (8 batches: one
// epoch is a few steps with any trainer), 1 epoch, no callbacks, no
// monitors, no log directory. Compiled against the installed headers only.
#pragma once

#include <spire.h>

#include <memory>
#include <vector>

namespace spire_readme {

class TinyModel : public spire::ModelDesc {
 public:
  std::vector<spire::InputDesc> inputs() const override {
    return {{"x", spire::DType::F32, {-1, 4}}, {"label", spire::DType::I64, {-1}}};
  }
  spire::Output build_graph(const std::vector<spire::Output>& in) override {
    spire::Output logits = spire::FullyConnected("fc", in[0], 2);
    return spire::ops::mean(spire::ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]), {},
                            false, "cost");
  }
  std::shared_ptr<spire::Optimizer> optimizer() override {
    return std::make_shared<spire::GradientDescentOptimizer>(0.1);
  }
};

/// 32 datapoints (x: f32[4], label: i64 scalar, the class the first feature
/// tells), in batches of 4.
inline std::shared_ptr<spire::DataFlow> tiny_dataflow() {
  std::vector<spire::Datapoint> points;
  for (int i = 0; i < 32; ++i) {
    const int64_t label = i % 2;
    const float sign = label ? 1.0f : -1.0f;
    points.push_back({spire::Tensor::from_vector<float>({4}, {sign, 0.5f, -0.25f, 0.1f * float(i % 5)}),
                      spire::Tensor::from_vector<int64_t>({}, {label})});
  }
  return std::make_shared<spire::BatchData>(
      std::make_shared<spire::DataFromList>(std::move(points), /*shuffle=*/false), 4);
}

/// TinyModel on tiny_dataflow() for 1 epoch, quietly.
inline spire::TrainConfig tiny_config() {
  spire::TrainConfig config;
  config.model = std::make_shared<TinyModel>();
  config.dataflow = tiny_dataflow();
  config.max_epoch = 1;
  config.extra_callbacks = std::vector<spire::CallbackPtr>{};
  config.monitors = std::vector<spire::MonitorPtr>{};
  return config;
}

}  // namespace spire_readme
