// The main job: tensorpack's examples/basics/mnist-convnet.py in C++. A
// ModelDesc (4 conv layers, 2 max-pools, FC 512 + dropout, FC 10) trained
// with Adam on MNIST through TrainConfig + launch_train_with_config, with
// tensorpack's callbacks: ModelSaver, MaxSaver("validation_accuracy"),
// InferenceRunner on the test set (ScalarStats + ClassificationError) and a
// ScheduledHyperParamSetter for the learning rate, plus the default
// callbacks and monitors (stats.json, TensorBoard events, printed scalars).
// Started again with the same command it resumes from its log directory
// (AutoResumeTrainConfig). Prints the final validation accuracy.
//
//   ./build/examples/mnist_convnet [--data DIR] [--logdir DIR] [--max-epoch N]
//                                  [--steps-per-epoch N] [--threads N] [--device D]
//                                  [--trainer simple|replicated|ps|async|horovod|
//                                             dist-ps|dist-replicated] [--ps K]
//                                  [--devices cpu:0,cpu:1 | --gpus N] [--mode M]
//                                  [--ps-device D] [--compression C] [--backend B]
//                                  [--help]
//
// --trainer picks tensorpack's trainer (one line of change, as there):
// SimpleTrainer, SyncMultiGPUTrainerReplicated, SyncMultiGPUTrainerParameterServer
// or AsyncMultiGPUTrainer over --devices (virtual CPU devices or GPUs; --gpus N
// is gpu:0..gpu:N-1). Every tower takes its own batch of 128, so an epoch of
// K towers is 468 / K steps of K x 128 images; validation runs on every
// device (DataParallelInferenceRunner). --threads is split among the CPU devices.
// --mode is the replicated trainer's all-reduce (tensorpack's mode: ring,
// collective, nccl, cpu, gpu, hierarchical), --ps-device the ps trainer's
// placement (tensorpack's ps_device: cpu, gpu or devices; default auto).
//
// --trainer horovod is tensorpack's HorovodTrainer, one process per rank:
//   mpirun -np 2 ./build/examples/mnist_convnet --trainer horovod
// (as root add --allow-run-as-root; more ranks than cores need
// --oversubscribe). Each rank takes its own shard of the batches (468 / N
// steps of N x 128 images per epoch), validates its half of the test set
// and sums the counts with the others (DistributedInferenceRunner); rank 0
// alone writes the log directory and decides what to resume. --threads
// defaults to the cores divided by the ranks on this host. Every rank
// prints a checksum of its variables at the end (equal on every rank).
// --compression (none, fp16) and --backend (default: SPIRE_MPI_ALGORITHM's,
// auto, ring, recursive-doubling, halving-doubling, mpi, nccl) are
// HorovodOptions'.
//
// --trainer dist-ps / dist-replicated are tensorpack's
// DistributedTrainerParameterServer / DistributedTrainerReplicated under
// mpirun: the first --ps K ranks (default 1) are parameter servers, the
// others workers (the first of them the chief), each over --devices
// (default cpu:0):
//   mpirun -np 3 ./build/examples/mnist_convnet --trainer dist-ps --ps 1
// Each worker takes its own shard of the batches; the servers apply every
// worker's gradients as its own update (W workers, W updates of 128 images
// per step), so an epoch is 468 / W steps. The chief alone validates,
// saves and writes the log directory; a server prints what it served.
//
// --device gpu (or gpu:N, cuda, cuda:N) builds the whole trainer graph (the
// tower, Adam and its slots, the global step, the callbacks' nodes) on that
// GPU; the run matches the CPU run (same seeds, same data order) up to float
// rounding.
//
// Learning rate: tensorpack decays 1e-3 by 0.3 every 10 epochs of its 100
// (tf.train.exponential_decay, staircase). This run is budgeted to ~15
// minutes on 2 CPU cores, so the same staircase is compressed to every 3
// epochs, set per epoch by ScheduledHyperParamSetter on the optimizer's
// "learning_rate" variable: 1e-3 (epochs 1-3), 3e-4 (4-6), 1e-4 (7-9),
// 3e-5 (10+). The variable is checkpointed and the setter re-applies the
// schedule on resume.
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <spire.h>

#include "example_flags.h"
#include "mnist_model.h"

using namespace spire;

namespace {

// ---- the model ------------------------------------------------------------------

class MnistConvNet : public ModelDesc {
 public:
  std::vector<InputDesc> inputs() const override {
    return {{"input", DType::F32, {-1, 28, 28}}, {"label", DType::I64, {-1}}};
  }

  Output build_graph(const std::vector<Output>& in) override {
    const Output& label = in[1];
    Output logits = spire_examples::mnist_convnet_logits(in[0]);
    ops::softmax(logits, -1, "prob");

    Output cost = ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, label), {}, false,
                            "cross_entropy_loss");
    // in_top_k(logits, label, 1) == (argmax == label) up to ties.
    Output correct =
        ops::cast(ops::equal(ops::argmax(logits, 1, DType::I64), label), DType::F32, "correct");
    Output accuracy = ops::mean(correct, {}, false, "accuracy");
    // Per-example 0/1 errors, for ClassificationError.
    ops::sub(ops::scalar_like(1.0, correct), correct, "incorrect_vector");

    // tensorpack: 1e-5 * sum of tf.nn.l2_loss over the FC weights.
    Output wd_cost = regularize_cost("fc.*/W", 1e-5, "regularize_loss");
    Output total_cost = ops::add(cost, wd_cost, "total_cost");
    add_moving_summary({accuracy, cost, wd_cost, total_cost});
    return total_cost;
  }

  std::shared_ptr<Optimizer> optimizer() override {
    // Makes the non-trainable "learning_rate" variable the schedule sets.
    return std::make_shared<AdamOptimizer>(1e-3);
  }
};

// ---- command line ----------------------------------------------------------------

constexpr int kDefaultMaxEpoch = 10;

struct Flags {
  std::string data;
  std::string logdir = "train_log/mnist_convnet";
  int max_epoch = kDefaultMaxEpoch;
  int64_t steps_per_epoch = 0;
  spire_examples::TrainerFlags t;
};

void usage(const char* argv0) {
  std::printf(
      "Usage: %s [--data DIR] [--logdir DIR] [--max-epoch N] [--steps-per-epoch N]\n"
      "          [trainer flags]\n"
      "Trains tensorpack's MNIST convnet; checkpoints, stats.json and TensorBoard events go to\n"
      "--logdir. Run the same command again to resume an interrupted run.\n"
      "  --data DIR           MNIST directory (default ../shared/data/mnist, relative to the\n"
      "                       current directory or to the repository)\n"
      "  --logdir DIR         log directory (default train_log/mnist_convnet)\n"
      "  --max-epoch N        last epoch to train (default %d)\n"
      "  --steps-per-epoch N  training steps per epoch (default: one pass, 468 batches of 128)\n"
      "%s",
      argv0, kDefaultMaxEpoch, spire_examples::trainer_flags_usage());
}

// Returns false when --help was given.
bool parse_flags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return false;
    std::string key, val;
    spire_examples::split_flag(argc, argv, &i, &key, &val);
    if (key == "--data") f->data = val;
    else if (key == "--logdir") f->logdir = val;
    else if (key == "--max-epoch") f->max_epoch = static_cast<int>(spire_examples::parse_int_flag(key, val, 1));
    else if (key == "--steps-per-epoch") f->steps_per_epoch = spire_examples::parse_int_flag(key, val, 1);
    else if (!spire_examples::parse_trainer_flag(key, val, &f->t))
      throw_error("unknown argument '", key, "' (see --help)");
  }
  if (f->logdir.empty()) throw_error("--logdir must not be empty");
  spire_examples::finish_trainer_flags(&f->t);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace spire_examples;
  try {
    Flags flags;
    if (!parse_flags(argc, argv, &flags)) {
      usage(argv[0]);
      return 0;
    }
    const TrainerFlags& t = flags.t;
    const std::string data_dir = find_mnist_dir(flags.data);
    make_dirs(flags.logdir);
    logger::info("MNIST from ", data_dir, "; logs and checkpoints in ", flags.logdir, "; ", t.threads,
                 " kernel thread(s); trainer ", t.trainer, " on ",
                 t.devices.empty() ? main_device(t).to_string() : t.devices);

    // Data: 468 shuffled batches of 128 per epoch; the test set in 40 batches
    // of 250 (tensorpack uses 256 with a remainder; 250 divides 10000, so
    // ScalarStats' per-batch mean is the exact accuracy over all images).
    auto mnist_train = std::make_shared<Mnist>("train", data_dir);
    auto train_df = std::make_shared<BatchData>(mnist_train, 128, /*remainder=*/false);
    auto test_df = std::make_shared<BatchData>(std::make_shared<Mnist>("test", data_dir, false), 250,
                                               /*remainder=*/true);

    TrainConfig config;
    config.model = std::make_shared<MnistConvNet>();
    config.dataflow = train_df;  // fed through a QueueInput
    config.callbacks = {
        std::make_shared<ModelSaver>(),
        make_validation(t, test_df,
                        {std::make_shared<ScalarStats>(std::vector<std::string>{"cross_entropy_loss", "accuracy"}),
                         std::make_shared<ClassificationError>("incorrect_vector")}),
        std::make_shared<MaxSaver>("validation_accuracy"),
        std::make_shared<ScheduledHyperParamSetter>(
            "learning_rate", ScheduledHyperParamSetter::Schedule{{0, 1e-3}, {3, 3e-4}, {6, 1e-4}, {9, 3e-5}}),
        std::make_shared<EstimatedTimeLeft>(),
    };
    config.session_creator = new_session_creator(session_options(t));
    config.steps_per_epoch = flags.steps_per_epoch;
    config.max_epoch = flags.max_epoch;
    config.logdir = flags.logdir;

    std::unique_ptr<SingleCostTrainer> trainer = make_trainer(t);
    // On resume the data continues where the interrupted run was (the input
    // skips to the restored global_step), with the same dropout masks (the
    // checkpoint keeps the random streams' positions).
    if (!launch_example_training(t, config, *trainer)) return 0;
    double acc = 0, err = 0;
    int epoch = 0, err_epoch = 0;
    if (!final_stat(*trainer, flags.logdir, "validation_accuracy", &acc, &epoch)) {
      std::printf("no validation accuracy was recorded\n");
      return 0;
    }
    std::printf("final validation_accuracy (epoch %d, %s/stats.json): %.4f", epoch,
                flags.logdir.c_str(), acc);
    if (final_stat(*trainer, flags.logdir, "validation_error", &err, &err_epoch) && err_epoch == epoch)
      std::printf(" (validation_error %.4f)", err);
    std::printf("\n");
    std::printf("variables checksum%s: %016llx\n", t.horovod() ? str_cat(" (rank ", hvd::rank(), ")").c_str() : "",
                static_cast<unsigned long long>(variables_checksum(*trainer)));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
