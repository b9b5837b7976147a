// The examples' command-line flags (mnist_convnet, mnist_gan, resnet): reading
// "--key value" / "--key=value", integer values, finding the MNIST files, and the
// trainer flags: --trainer picks one of
// tensorpack's trainers by name, with --devices/--gpus, --ps, --mode, --ps-device,
// --compression, --backend, --fusion-threshold, --first-bucket, --device and --threads;
// --timeline traces steps into the log directory (any trainer); make_trainer builds it,
// make_validation the inference callback that fits it (DataParallelInferenceRunner
// over several towers, DistributedInferenceRunner under horovod), and
// launch_example_training runs a TrainConfig with resume, placement and the
// per-role endings (servers and non-chief workers report and stop).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spire.h>

namespace spire_examples {

struct TrainerFlags {
  std::string trainer = "simple";  // simple, replicated, ps, async, horovod, dist-ps, dist-replicated
  std::string devices;             // the towers' devices (multi-device and dist-* trainers)
  std::string device = "cpu";      // where simple and horovod run
  int threads = -1;                // -1: 2, or under mpirun the cores / the ranks on this host
  int num_ps = 1;                  // dist-*: the first K ranks are parameter servers
  std::optional<spire::ReplicatedMode> mode;             // replicated
  std::optional<spire::PsDevice> ps_device;              // ps
  std::optional<spire::HorovodCompression> compression;  // horovod
  std::optional<spire::HorovodBackend> backend;          // horovod
  std::optional<int64_t> fusion_threshold;               // horovod: bucket cap, bytes
  std::optional<int64_t> first_bucket;                   // horovod: first bucket's cap, bytes
  std::optional<spire::TraceWindow> timeline;            // steps traced into timeline-rank<r>.json

  bool horovod() const { return trainer == "horovod"; }
  bool distributed() const { return trainer == "dist-ps" || trainer == "dist-replicated"; }
};

/// Reads the flag at argv[*i] into key and value ("--key=value", or "--key value",
/// advancing *i); throws spire::Error for anything else.
void split_flag(int argc, char** argv, int* i, std::string* key, std::string* value);

/// The MNIST directory: `given` (checked), else ../shared/data/mnist relative to the
/// current directory or to the repository. Throws spire::Error naming the places tried
/// and the four files needed.
std::string find_mnist_dir(const std::string& given);

/// The file ../shared/data/<relative>, relative to the current directory or to the
/// repository; throws spire::Error naming both places when neither has it.
std::string find_data_file(const std::string& relative);

/// Usage lines of the trainer flags, for an example's --help.
const char* trainer_flags_usage();

/// Reads `key` = `value` into `f` when it is a trainer flag; false when it is not one.
/// Throws spire::Error for a bad value.
bool parse_trainer_flag(const std::string& key, const std::string& value, TrainerFlags* f);

/// Checks the combination after parsing and fills the defaults (--devices cpu:0,cpu:1
/// for the multi-device trainers, cpu:0 for dist-*, --threads); throws spire::Error.
void finish_trainer_flags(TrainerFlags* f);

/// An integer flag value >= min; throws spire::Error naming the flag otherwise.
int64_t parse_int_flag(const std::string& flag, const std::string& value, int64_t min);

/// The towers' devices (empty for simple and horovod).
std::vector<spire::Device> tower_devices(const TrainerFlags& f);

/// Where simple and horovod build their graph (--device; under horovod a GPU becomes
/// this rank's local GPU).
spire::Device main_device(const TrainerFlags& f);

/// The trainer --trainer names, with its options.
std::unique_ptr<spire::SingleCostTrainer> make_trainer(const TrainerFlags& f);

/// Validation on `data` with `inferencers` as fits the trainer: every tower's device,
/// every horovod rank's share (summed), or one InferenceRunner.
spire::CallbackPtr make_validation(const TrainerFlags& f, std::shared_ptr<spire::DataFlow> data,
                                   std::vector<spire::InferencerPtr> inferencers);

/// SessionOptions with --threads and the CPU devices the towers use.
spire::SessionOptions session_options(const TrainerFlags& f);

/// Runs `config` (made AutoResumeTrainConfig: the same command resumes) on `trainer`
/// under the trainer's device scope. `on_resume(starting_epoch)` runs before training
/// when it resumes past epoch 1 (to continue a dataflow's shuffling). Returns false
/// for a rank that has nothing to report (a parameter server, a non-chief worker),
/// after printing what it did.
bool launch_example_training(const TrainerFlags& f, spire::TrainConfig config,
                             spire::SingleCostTrainer& trainer,
                             const std::function<void(int)>& on_resume = {});

/// The last recorded value of `name` and its epoch: from this run's monitors on a
/// horovod rank that writes no stats.json, else from stats.json, else the monitors.
bool final_stat(const spire::Trainer& trainer, const std::string& logdir, const std::string& name,
                double* value, int* epoch);

/// FNV-1a over every global variable in name order (equal on every horovod rank).
uint64_t variables_checksum(spire::Trainer& trainer);

}  // namespace spire_examples
