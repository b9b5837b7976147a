// Data-parallel trainers over the devices of one process (tensorpack's
// train/trainers.py and graph_builder/training.py, with tensorpack's names
// and semantics): one training tower per device, each taking its own full
// batch from the input source (total batch = batch x towers).
//
// - SyncMultiGPUTrainerReplicated: every device keeps its own copy of the
//   variables (tower 0 the masters under their single-device names, tower
//   k > 0 local replicas "tower<k>/..."); the towers' gradients are
//   all-reduced (Spire's ring by default) and every tower applies the same
//   update to its copy, so a step equals one single-device step on the whole
//   batch. Masters are copied to the replicas after the chief's restore and
//   every epoch.
// - SyncMultiGPUTrainerParameterServer: the towers share one copy of each
//   variable, placed on the least-loaded device (or cpu:0); each gradient is
//   averaged on its variable's device and applied once.
// - AsyncMultiGPUTrainer: shared variables; each tower applies its own
//   gradients with no synchronization between towers.
//
// Devices are GPUs ("cuda:0", "gpu:1") or virtual CPU devices ("cpu:0",
// "cpu:1"; the default session gets as many CPU devices as the towers use),
// so every trainer runs and is tested without a GPU. Checkpoints hold only
// the global (master) variables, so they restore into SimpleTrainer and back.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace spire {

/// Parses a comma-separated device list ("cpu:0,cpu:1", "gpu:0,gpu:1");
/// throws spire::Error for an empty list, a bad name or a repeated device.
std::vector<Device> parse_device_list(const std::string& list);

/// What the data-parallel trainers share (tensorpack's DataParallelBuilder):
/// the device list, one TowerContext "tower<k>" per device, the check that
/// every tower returned gradients for the same variables, the session's CPU
/// devices, and the cross-tower average that synchronized BatchNorm uses.
class DataParallelTrainer : public SingleCostTrainer {
 public:
  /// The towers' devices, in tower order.
  std::vector<Device> tower_devices() const override { return devices_; }
  /// SessionOptions{} with num_cpu_devices covering every CPU tower device.
  SessionOptions default_session_options() const override;

 protected:
  /// Checks `devices` (not empty, no repeats, CUDA devices present in this
  /// build and machine); `kind` names the trainer in errors.
  DataParallelTrainer(std::vector<Device> devices, std::string kind);

  /// Fails when a tower's CPU device is not one of the session's.
  void on_session_created(Session& session) override;

  /// Builds training tower k = 0..K-1 ("tower<k>", on devices[k]) and
  /// returns its gradients. With `replicated`, tower k > 0 owns its
  /// variables under variable scope "tower<k>" as local variables; else the
  /// towers share tower 0's, created under `placement` when given. Throws
  /// when the towers' gradient lists differ (naming each tower's unmatched
  /// variables), and when a collective instance lacks a tower.
  std::vector<GradsAndVars> build_towers(InputSource& input, Optimizer& opt, bool replicated,
                                         VariablePlacement placement = nullptr);
  /// Least-loaded placement by element count over the towers' devices
  /// (tensorpack's LeastLoadedDeviceSetter); a fresh load count per call.
  VariablePlacement least_loaded_placement() const;

  std::vector<Device> devices_;
  std::string kind_;
};

/// How SyncMultiGPUTrainerReplicated all-reduces the towers' gradients
/// (tensorpack's `mode`).
enum class ReplicatedMode {
  /// Spire's ring (the default; tensorpack's "collective" is an alias).
  kRing,
  /// NCCL (GPUs, builds with NCCL).
  kNccl,
  /// tensorpack's naive add-n: the r-th variable counted from the last
  /// summed on cpu:0 ...
  kCpu,
  /// ... or on devices[r % K].
  kGpu,
  /// 8 devices: tensorpack's packing into 8 chunks summed in two groups of
  /// 4 (other counts warn and use the ring).
  kHierarchical,
};
/// The mode of a name: "ring" ("" and tensorpack's "collective" too),
/// "nccl", "cpu", "gpu", "hierarchical"; throws spire::Error listing the
/// spellings for any other.
ReplicatedMode parse_replicated_mode(const std::string& name);
/// "ring", "nccl", "cpu", "gpu", "hierarchical".
const char* replicated_mode_name(ReplicatedMode mode);

/// tensorpack's SyncMultiGPUTrainerReplicated(gpus, average, mode).
class SyncMultiGPUTrainerReplicated : public DataParallelTrainer {
 public:
  explicit SyncMultiGPUTrainerReplicated(std::vector<Device> devices, bool average = true,
                                         ReplicatedMode mode = ReplicatedMode::kRing);
  /// The mode in use (after the fallback of kHierarchical to the ring).
  ReplicatedMode mode() const { return mode_; }
  /// Copy the masters to the replicas at every epoch as well (tensorpack's
  /// BROADCAST_EVERY_EPOCH; read when the graph is set up).
  bool BROADCAST_EVERY_EPOCH = true;
  /// The op copying every master (trainable or not, optimizer slots
  /// included) to its replicas (valid after setup_graph).
  Node* sync_variables_op() const { return sync_op_; }
  std::string variable_scope_on(const Device& device) const override;

 protected:
  std::vector<CallbackPtr> _setup_graph(InputSource& input, GetOptFn get_opt_fn) override;

 private:
  std::vector<std::vector<Output>> reduce(const std::vector<GradsAndVars>& grads);
  std::vector<std::vector<Output>> reduce_hierarchical(const std::vector<GradsAndVars>& grads);
  Node* build_sync_op();
  bool average_;
  ReplicatedMode mode_;
  Node* sync_op_ = nullptr;
};

/// Where SyncMultiGPUTrainerParameterServer keeps the variables
/// (tensorpack's `ps_device`).
enum class PsDevice {
  /// tensorpack's default: kGpu for up to 2 towers, else kCpu.
  kAuto,
  /// Every variable on cpu:0.
  kCpu,
  /// Each variable on the least-loaded tower device.
  kGpu,
};
/// The placement of a name: "cpu", "gpu" ("devices" too), "auto" (""
/// too); throws spire::Error listing them for any other.
PsDevice parse_ps_device(const std::string& name);
/// "auto", "cpu", "gpu".
const char* ps_device_name(PsDevice device);

/// tensorpack's SyncMultiGPUTrainerParameterServer(gpus, ps_device).
/// Gradients are always averaged.
class SyncMultiGPUTrainerParameterServer : public DataParallelTrainer {
 public:
  explicit SyncMultiGPUTrainerParameterServer(std::vector<Device> devices, PsDevice ps_device = PsDevice::kAuto);
  /// kCpu or kGpu (kAuto resolved).
  PsDevice ps_device() const { return ps_device_; }

 protected:
  std::vector<CallbackPtr> _setup_graph(InputSource& input, GetOptFn get_opt_fn) override;

 private:
  PsDevice ps_device_;
};

/// tensorpack's AsyncMultiGPUTrainer(gpus, scale_gradient): shared
/// variables placed as in parameter-server mode (cpu:0 from 4 towers,
/// else least-loaded); each tower applies its own gradients (times 1/K with
/// scale_gradient) as soon as they exist, without waiting for the other
/// towers: K optimizer updates per step (so step-wide optimizer state such
/// as Adam's beta powers advances K times, as K independent updates
/// should). With one device it builds exactly what SimpleTrainer builds.
class AsyncMultiGPUTrainer : public DataParallelTrainer {
 public:
  explicit AsyncMultiGPUTrainer(std::vector<Device> devices, bool scale_gradient = true);

 protected:
  std::vector<CallbackPtr> _setup_graph(InputSource& input, GetOptFn get_opt_fn) override;

 private:
  bool scale_gradient_;
};

/// tensorpack's SyncMultiGPUTrainer(gpus): "a default multi-GPU trainer":
/// SyncMultiGPUTrainerParameterServer(devices, PsDevice::kCpu).
std::unique_ptr<SingleCostTrainer> SyncMultiGPUTrainer(std::vector<Device> devices);

}  // namespace spire
