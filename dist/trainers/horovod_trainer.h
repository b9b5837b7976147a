// HorovodTrainer (tensorpack's name and semantics; Spire's collectives over
// MPI underneath, no Horovod dependency): one process per device, launched
// by mpirun, each building one main training tower; the gradients are
// all-reduced across the ranks in fused buckets, and every rank applies the
// same update, so a step of N ranks x batch b equals one single-process step
// on the N*b batch.
//
// - Rank 0 is the chief: it restores (session_init), runs the chief-only
//   callbacks (ModelSaver, InferenceRunner, summaries) and alone writes the
//   log directory (the base Trainer clears the others' logdir). Global
//   variables are broadcast from rank 0 right after the chief's restore, at
//   the start of training and (BROADCAST_EVERY_EPOCH) at every epoch.
// - Every rank runs rank 0's loop (steps per epoch, starting epoch, max
//   epoch; MultiProcessTrainer's synchronize_loop): AutoResumeTrainConfig
//   decides on rank 0, the others follow (tensorpack issue #1054 cannot
//   happen). launch_train_with_config gives each rank its own shard of the
//   dataflow (ShardData).
// - The collectives get an explicit order (control edges), the order in
//   which their inputs can first exist (dist::order_collectives), so every
//   rank calls them in the same order whatever its hooks fetch, and a
//   gradient bucket never waits for a synchronized BatchNorm's gradient
//   that the backward pass reaches later; before the first step the ranks
//   agree on the list in that order (name, kind, dtype, shape, bucket
//   members): a graph that differs between ranks is an error on every rank
//   naming the first difference. Gradients are packed, in the order the
//   backward pass makes them, into buckets of up to fusion_threshold_bytes
//   (25 MiB; the first up to first_bucket_bytes, 1 MiB), one allreduce per
//   bucket on a lane of its own, which starts as soon as the bucket's
//   gradients exist and overlaps the rest of the backward pass
//   (dist/trainers/gradient_buckets.h). The buckets have a communicator of
//   their own (bucket_communicator_name), with its own order: the backward
//   pass's synchronized-BatchNorm allreduces never wait for a bucket, nor a
//   bucket for them (with one communicator the two would share one chain,
//   and the main lane would stop at each BatchNorm gradient until the
//   bucket before it is all-reduced).
// - Two kinds of traffic: the graph's collectives (the variables' broadcast,
//   the gradient buckets, synchronized BatchNorm) take the training device's
//   tensors and go to communicator() (NCCL with a GPU); the calls outside the
//   graph (the loop's synchronization and stop agreement, the chief's
//   values, DistributedInferenceRunner's sums, the agreement on the
//   collectives before the first step) take host tensors and go to
//   control_communicator(), a CPU communicator: the same object as
//   communicator() on the CPU backends, an MpiCommunicator of its own beside
//   NCCL (whose calls each rank negotiates over MPI first:
//   dist/comm/negotiated_communicator.h).
// - A rank whose training fails tells the others (MpiRuntime::announce_failure):
//   they stop at once with an error naming it; a rank that dies or is
//   stopped is found by the heartbeats and named within seconds; a slow
//   rank only makes the others log stall warnings naming it.
// - BatchNorm(sync_statistics = SyncStatistics::kTowers, tensorpack's
//   "horovod" or "nccl") averages the batch statistics over the ranks.
//   DistributedInferenceRunner validates on every rank's shard and sums the
//   inferencers' counts over the ranks.
//
// Launch: mpirun -np 2 ./build/examples/mnist_convnet --trainer horovod
// (README: OpenMPI's flags for root and for more ranks than cores).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"
#include "train/callbacks/inference.h"
#include "train/multi_process_trainer.h"
#include "train/trainer.h"

namespace spire {

/// Horovod's process queries (hvd.rank() and friends) for user code: this
/// process's rank in the MPI job, its rank on its host, and the counts.
/// Without MPI (SPIRE_MPI=OFF) or outside mpirun: rank 0 of 1.
namespace hvd {
int rank();
int local_rank();
int size();
int local_size();
}  // namespace hvd

/// How HorovodTrainer compresses the gradients for their allreduce
/// (Horovod's hvd.Compression).
enum class HorovodCompression {
  kNone,
  /// Floating gradients are cast to f16 for the allreduce (half the bytes;
  /// summed in f16, each addition rounded to f16, by Spire's algorithms or
  /// NCCL: MPI's own collectives cannot reduce f16) and back to their dtype.
  kFp16,
};
/// "none" ("" too) or "fp16"; throws spire::Error listing them for any other.
HorovodCompression parse_horovod_compression(const std::string& name);
/// "none", "fp16".
const char* horovod_compression_name(HorovodCompression compression);

/// The collectives across HorovodTrainer's processes (HorovodOptions::backend).
enum class HorovodBackend {
  /// The algorithm SPIRE_MPI_ALGORITHM names (default auto).
  kDefault,
  /// Spire's recursive doubling, halving-doubling or ring by the measured
  /// link model.
  kAuto,
  kRing,
  kRecursiveDoubling,
  kHalvingDoubling,
  /// MPI's own collectives.
  kMpi,
  /// NCCL across the processes on HorovodOptions::device, a GPU.
  kNccl,
};
/// "default" ("" too), "auto", "ring", "recursive-doubling" ("rd"),
/// "halving-doubling" ("hd"), "mpi", "nccl"; throws spire::Error listing
/// them for any other.
HorovodBackend parse_horovod_backend(const std::string& name);
/// "default", "auto", "ring", "recursive-doubling", "halving-doubling", "mpi", "nccl".
const char* horovod_backend_name(HorovodBackend backend);

struct HorovodOptions {
  /// Average the gradients over the ranks (else sum them).
  bool average = true;
  HorovodCompression compression = HorovodCompression::kNone;
  /// Gradients are packed, in the order the backward pass makes them
  /// (dist::ready_levels), into buckets of at most this many bytes (one
  /// allreduce each, started as soon as its gradients exist; a larger
  /// gradient gets its own); 0: one allreduce per gradient. Horovod fuses
  /// what is ready each cycle up to HOROVOD_FUSION_THRESHOLD (128 MiB); a
  /// define-and-run graph fixes the buckets when it is built, so the cap is
  /// PyTorch DDP's bucket_cap_mb (25 MiB), never exceeded (DDP closes a
  /// bucket once past it): ResNet-50's 97.5 MiB of gradients make 6
  /// buckets (0.004, 24.9, 17.0, 24.0, 23.3 and 8.3 MiB; the first is the
  /// classifier's bias alone, its 7.8 MiB weight does not fit 1 MiB), where
  /// 128 MiB made one that started after the whole backward pass.
  int64_t fusion_threshold_bytes = int64_t{25} << 20;
  /// The first bucket's cap (PyTorch DDP's 1 MiB first bucket); -1, or
  /// more than fusion_threshold_bytes: fusion_threshold_bytes.
  int64_t first_bucket_bytes = int64_t{1} << 20;
  /// Run each bucket's allreduce on a lane of its own (CollectiveOptions::
  /// overlap), so it starts as soon as its gradients exist and overlaps the
  /// rest of the backward pass.
  bool overlap = true;
  /// How long a collective outside a session run (the per-step stop
  /// agreement, broadcasts and sums for callbacks) may wait for the other
  /// ranks before it fails naming the missing ones (MpiCommunicator's
  /// timeout; the graph's collectives use SessionOptions::timeout_seconds);
  /// 0 (the default): no limit. A rank that fails, dies or is stopped ends
  /// every wait within seconds all the same (MPI's heartbeats: MpiLiveness
  /// in dist/mpi/mpi_runtime.h); one that is only slow (the chief validating
  /// or saving) makes the others log a stall warning every
  /// SPIRE_STALL_CHECK_SECONDS (60), as Horovod's stall inspector does.
  double timeout_seconds = 0;
  /// The collectives across the processes when `communicator` is null.
  HorovodBackend backend = HorovodBackend::kDefault;
  /// The communicator across the processes (one participant each), or null
  /// for `backend`'s.
  std::shared_ptr<dist::Communicator> communicator;
  /// The CPU communicator for the calls outside the graph (host tensors) and the agreement
  /// before the first step, across the same processes, or null: `communicator` (or
  /// `backend`'s) itself where it is on the CPU, else a new MpiCommunicator.
  std::shared_ptr<dist::Communicator> control_communicator;
  /// This rank's training device (CPU: MPI's collectives take host tensors).
  Device device = Device::cpu();
};

/// tensorpack's HorovodTrainer(average, compression).
class HorovodTrainer : public SingleCostTrainer, public MultiProcessTrainer {
 public:
  explicit HorovodTrainer(bool average = true, HorovodCompression compression = HorovodCompression::kNone);
  explicit HorovodTrainer(HorovodOptions options);
  ~HorovodTrainer() override;

  int rank() const;
  int local_rank() const;
  int size() const;
  /// Broadcast the global variables from rank 0 at every epoch too
  /// (tensorpack's BROADCAST_EVERY_EPOCH; read when the graph is set up).
  bool BROADCAST_EVERY_EPOCH = true;

  std::vector<Device> tower_devices() const override { return {options_.device}; }
  /// {rank, size}: each rank trains on its own shard of the data.
  std::pair<int, int> data_shard() const override { return {rank(), size()}; }
  /// The graph collectives' communicator (the training device's tensors).
  const dist::Communicator& communicator() const { return *comm_; }
  /// The outside-graph calls' communicator (host tensors; communicator() itself on the CPU).
  const dist::Communicator& control_communicator() const { return *control_; }
  /// The session resource name of the communicator in the collective nodes.
  static const char* communicator_name() { return "horovod"; }
  /// The session resource name of the gradient buckets' own communicator (a
  /// second one across the same processes, made when HorovodOptions has no
  /// `communicator`; otherwise the buckets use communicator_name()'s).
  static const char* bucket_communicator_name() { return "horovod_buckets"; }
  /// The gradient allreduce nodes, one per bucket, in the order the ranks call them (after setup).
  const std::vector<Node*>& gradient_collectives() const { return grad_collectives_; }
  /// The op assigning every global variable its value on rank 0 (built
  /// when the session is created).
  Node* broadcast_op() const { return broadcast_op_; }
  /// Sums `values` over the ranks (outside the graph; for callbacks such as
  /// DistributedInferenceRunner). Every rank must call it, in the same order.
  std::vector<double> allreduce_sum(const std::vector<double>& values, const std::string& what);
  /// "HorovodTrainer: rank R".
  std::string process_name() const override;
  int process_rank() const override { return rank(); }
  /// A StopTraining on any rank stops every rank at the next boundary: the ranks' flags are
  /// combined (max) by one small allreduce per step.
  bool agree_to_stop(bool stopping) override;

 protected:
  std::vector<CallbackPtr> _setup_graph(InputSource& input, GetOptFn get_opt_fn) override;
  void on_session_created(Session& session) override;
  /// Rank 0's values, broadcast outside the graph (MultiProcessTrainer::
  /// broadcast_from_chief).
  std::vector<int64_t> chief_values(const std::vector<int64_t>& values, const std::string& what) override;
  void after_session_init(Session& session) override;
  void on_failure(const std::exception& error) override;

 private:
  Node* build_broadcast_op();
  void agree_on_collectives();
  /// A call of an outside-graph collective, keyed by its count.
  dist::CollectiveCall next_call(const std::string& what);
  HorovodOptions options_;
  std::shared_ptr<dist::Communicator> comm_;
  std::shared_ptr<dist::Communicator> bucket_comm_;  // null: the buckets use comm_
  std::shared_ptr<dist::Communicator> control_;      // host tensors: comm_ itself on the CPU
  std::vector<Node*> grad_collectives_;
  std::map<const Node*, std::string> bucket_members_;  // gradient bucket -> its variables
  std::vector<Node*> call_order_;  // the collectives in the order every rank calls them
  Node* broadcast_op_ = nullptr;
  uint64_t calls_ = 0;  // outside-graph collectives so far (their keys)
};

/// An InferenceRunner for HorovodTrainer that is not chief-only: every rank
/// runs its shard of `dataflow` (ShardData(rank, size), no datapoint
/// dropped), then the inferencers' accumulators are summed over the ranks,
/// so every rank reports the statistics of the whole dataflow (the
/// distributed validation of tensorpack's ResNet-Horovod example).
/// Inferencers must support accumulators() (ScalarStats, ClassificationError).
class DistributedInferenceRunner : public InferenceRunner {
 public:
  DistributedInferenceRunner(std::shared_ptr<DataFlow> dataflow, std::vector<InferencerPtr> inferencers,
                             int rank, int size, std::string tower_name = "InferenceTower");

 protected:
  void _setup_graph() override;
  void combine_inferencers(std::vector<InferencerPtr>& inferencers) override;

 private:
  HorovodTrainer* trainer_ = nullptr;
};

}  // namespace spire
