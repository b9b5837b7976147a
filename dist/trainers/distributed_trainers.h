// tensorpack's distributed trainers with parameter servers, on Spire's
// messages between MPI ranks (dist/comm/messenger.h) instead of TensorFlow's
// gRPC servers: DistributedTrainerParameterServer and
// DistributedTrainerReplicated, with tensorpack's names and semantics
// (../shared/docs/tensorpack-dist-trainers.md, sections 4 and 5).
//
// Roles by rank, one mpirun command:
//   mpirun -np 3 ./build/examples/mnist_convnet --trainer dist-ps --ps 1
// The first `num_ps` ranks are parameter servers, the others workers;
// worker 0 (rank num_ps) is the chief. Every rank builds the same graph
// (the model's variables must be known everywhere); a server then serves
// until every worker has finished and returns from train() cleanly.
//
// - The trainable variables are sharded over the servers greedily by bytes
//   (each, in the order of the gradients, to the server holding the fewest
//   bytes so far; tensorpack's GreedyLoadBalancingStrategy). A server holds
//   the values of its shard, their optimizer slots and the optimizer's
//   step-wide state (Adam's beta powers: each server advances its own copy
//   alike), and applies updates with the model's optimizer.
// - Each worker averages its towers' gradients locally (on the CPU: the
//   caching device) and sends each server the gradients of its shard, with
//   the current values of what the update reads besides (the learning
//   rate); the server applies every worker's gradients, in rank order, as
//   separate updates (NOT averaged across workers: W workers make W updates
//   per step, as in tensorpack), then sends the fresh values back to every
//   worker. A server applies a step only when every worker has sent it, so
//   the round trip is the barrier that keeps workers in step, every worker
//   reads the same values before its next step, and runs repeat exactly.
// - Initialization: after the chief's restore (session_init), the chief
//   sends every server its state (its shard's variables and slots, and the
//   step-wide values); the servers relay the chief's values to every
//   worker: the other workers wait for the chief, as in tensorpack. Every
//   worker runs the chief's loop (steps per epoch, first and last epoch;
//   MultiProcessTrainer's synchronize_loop, relayed by server 0).
// - Checkpoints (the chief's ModelSaver) hold the global names of
//   SimpleTrainer's: before its epoch callbacks the chief fetches the
//   servers' state (slots, beta powers) into its own copies, so a
//   checkpoint restores into every other trainer, and resume works.
//   Non-trainable variables (BatchNorm's moving averages, global_step, the
//   learning rate) stay on each worker as in tensorpack, but the chief's are
//   saved (tensorpack loses them: they are local there).
// - DistributedTrainerReplicated: each worker's towers keep their own
//   replicas (tower 0's carry the global names: it is where the servers'
//   shadow values arrive; towers k > 0 are local "tower<k>/..."); the
//   servers hold the shadows (global, saved), also of the model variables
//   (BatchNorm statistics); after each update the workers copy the shadows
//   into every tower; the chief copies its model variables to the servers
//   every epoch.
// - A worker that ends training early (StopTraining, a hook's stop) tells
//   the servers; the other workers' next push is answered "stop" (not
//   applied) and they end their loops cleanly too.
// - Failures: a rank whose training fails tells the others (their waits end
//   at once naming it); a rank that dies or is stopped is found by the MPI
//   runtime's heartbeats and named to every rank within seconds (mpirun
//   itself ends the job at once when a process is killed, unless
//   --enable-recovery). A slow rank only makes the others log stall
//   warnings. With a time limit (timeout_seconds), a server waits that long
//   for a worker, a worker 1.5x that (+2 s) for a server, so a stalled
//   worker is named by the server, which tells the others.
// - Deviations and details: every rank builds the whole model (a server's
//   towers are never run, but its devices must exist); the model
//   variables of the replicated trainer are sharded after the trainable
//   ones; the chief's values (the loop) go through server 0 only. A
//   server's update is the optimizer's apply_gradients on its shard, so
//   gradient processors that look at every gradient at once
//   (GlobalNormClip) see one server's shard when there are several servers
//   (tensorpack runs them on the worker). Only the chief fetches the
//   servers' slots: other workers' copies of them are stale (they never
//   save).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm/messenger.h"
#include "dist/trainers/multi_device_trainers.h"
#include "train/multi_process_trainer.h"

namespace spire {

struct DistributedOptions {
  /// The number of parameter servers: ranks 0..num_ps-1 (at least one
  /// rank must be left for a worker).
  int num_ps = 1;
  /// How long any wait for another rank may last before it fails naming
  /// the rank; 0 (the default): no limit. A rank that fails, dies or is
  /// stopped ends every wait within seconds all the same (MPI's heartbeats,
  /// dist/mpi/mpi_runtime.h's MpiLiveness); one that is only slow (the
  /// chief validating and saving while the servers wait) makes the waits
  /// log a stall warning every SPIRE_STALL_CHECK_SECONDS (60).
  double timeout_seconds = 0;
  /// The ranks' messages; null: the MPI job's (make_mpi_messenger()).
  std::shared_ptr<dist::Messenger> messenger;
};

namespace ps {
struct Cluster;
class Server;
class Worker;
}  // namespace ps

/// What both distributed trainers share: roles, sharding, and the hooks
/// through which the base Trainer runs a server (ps_server.h) or a worker
/// (ps_worker.h); the messages between them are in ps_protocol.h.
class DistributedTrainerBase : public DataParallelTrainer, public MultiProcessTrainer {
 public:
  ~DistributedTrainerBase() override;
  bool is_ps() const { return rank_ < options_.num_ps; }
  int rank() const { return rank_; }
  int num_ps() const { return options_.num_ps; }
  int num_workers() const { return size_ - options_.num_ps; }
  /// This worker's index (0 = the chief); -1 on a server.
  int worker_index() const { return is_ps() ? -1 : rank_ - options_.num_ps; }
  /// Each worker reads its own shard of the data.
  std::pair<int, int> data_shard() const override;
  /// The server rank holding each sharded variable (after setup_graph).
  const std::map<std::string, int>& variable_servers() const { return server_of_; }
  /// On a server, after train(): its state by variable name (for tests).
  std::map<std::string, Tensor> server_state() const;
  /// On a worker during training (e.g. from a callback): fetches every
  /// server's state (slots, step-wide optimizer state) into this worker's
  /// copies. The chief does it before its epoch callbacks; a saver
  /// triggered within an epoch should call it first. An error after
  /// training (the servers have ended).
  void pull_server_state();
  /// "<kind>: rank R (parameter server P | worker W)".
  std::string process_name() const override;
  int process_rank() const override { return rank_; }

 protected:
  DistributedTrainerBase(std::vector<Device> devices, DistributedOptions options, std::string kind,
                         bool replicated);
  std::vector<CallbackPtr> _setup_graph(InputSource& input, GetOptFn get_opt_fn) override;
  /// The chief's values through server 0 (a worker's; MultiProcessTrainer::
  /// broadcast_from_chief).
  std::vector<int64_t> chief_values(const std::vector<int64_t>& values, const std::string& what) override;
  void after_session_init(Session& session) override;
  bool run_service() override;
  void on_main_loop_finished() override;
  void on_failure(const std::exception& error) override;
  void run_step() override;

 private:
  DistributedOptions options_;
  bool replicated_;
  int rank_ = 0, size_ = 1;
  bool finished_ = false;
  std::map<std::string, int> server_of_;
  std::unique_ptr<ps::Cluster> cluster_;
  std::unique_ptr<ps::Server> server_;  // on a server
  std::unique_ptr<ps::Worker> worker_;  // on a worker
};

/// tensorpack's DistributedTrainerParameterServer(gpus, server): the
/// towers of a worker share one copy of the variables (the cached reads of
/// the servers' values, refreshed after every step).
class DistributedTrainerParameterServer : public DistributedTrainerBase {
 public:
  explicit DistributedTrainerParameterServer(std::vector<Device> devices, DistributedOptions options = {});
};

/// tensorpack's DistributedTrainerReplicated(gpus, server): per-tower
/// replicas on every worker, shadows on the servers.
class DistributedTrainerReplicated : public DistributedTrainerBase {
 public:
  explicit DistributedTrainerReplicated(std::vector<Device> devices, DistributedOptions options = {});
};

}  // namespace spire
