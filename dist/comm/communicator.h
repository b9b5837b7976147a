// Communicator: the interface every collective backend implements (Spire's
// own ring between the devices of one process, dist/comm/in_process_ring.h;
// NCCL between the GPUs of one process or across processes,
// dist/nccl/nccl_communicator.h; MPI across processes,
// dist/mpi/mpi_communicator.h), in the spirit of PyTorch's ProcessGroup.
// A communicator connects `size()` participants: its local participants
// are `devices()` of this process (rank() of num_ranks()); a participant's
// global index is rank() * devices().size() + local index.
//
// A collective is called by every participant with the same CollectiveCall
// (its key identifies the instance: participants of the same instance meet
// by key). A call serves either one local participant (each lane of the
// executor calls for its own device, from its own thread) or all local
// participants at once (a group call: sequential mode, or one thread driving
// several devices, as NCCL's group calls). Results are bit-identical on every
// participant and from run to run (each element is reduced once, in a fixed
// order, then copied), and every wait honours the call's RunContext:
// cancellation and timeout, never a hang. Participants that disagree on the
// collective (kind, reduction, dtype, element count, root) all fail with a
// spire::Error naming the first difference.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/kernel_registry.h"
#include "core/run_context.h"
#include "core/tensor.h"

namespace spire::dist {

/// Thrown by a collective or an agreement on EVERY process when the
/// processes disagree on it (a different dtype, count or list): no process
/// failed, so a distributed trainer does not announce it as one.
class CollectiveMismatch : public DisagreementError {
 public:
  explicit CollectiveMismatch(const std::string& what) : DisagreementError(what) {}
};

/// How values of the participants combine.
enum class ReduceOp { kSum, kMean, kMax, kMin };

/// "sum", "mean", "max", "min".
const char* reduce_op_name(ReduceOp op);
/// Parses "sum", "mean" (also "average"/"avg"), "max", "min"; throws
/// spire::Error naming `what` otherwise.
ReduceOp parse_reduce_op(const std::string& name, const std::string& what);

/// "cpu,cpu:1,cpu:2": the devices of a participant list, comma-separated.
std::string device_list(const std::vector<Device>& devices);

/// What identifies one collective instance (equal on all its participants).
struct CollectiveKey {
  const void* scope = nullptr;  ///< e.g. the session
  uint64_t run = 0;             ///< e.g. the run id
  uint64_t op = 0;              ///< e.g. the node id
  bool operator<(const CollectiveKey& o) const {
    if (scope != o.scope) return scope < o.scope;
    if (run != o.run) return run < o.run;
    return op < o.op;
  }
  bool operator==(const CollectiveKey& o) const {
    return scope == o.scope && run == o.run && op == o.op;
  }
};

/// One collective call as a communicator sees it.
struct CollectiveCall {
  CollectiveKey key;
  /// For error messages (the graph node's name).
  std::string name;
  /// Which collective this is, equal on every participant in every process (a graph
  /// collective's instance key, or its node's name); "" = `name`. Part of the signature the
  /// participants must agree on: a collective issued on one process only cannot pair with a
  /// different one of the same size elsewhere. (It can still pair with the same collective
  /// of the others' next step: the ranks then fail at the first collective that differs,
  /// not at the extra one.)
  std::string identity;
  /// Cancellation and timeout of every wait (null: no cancellation, no limit).
  const RunContext* run = nullptr;
  /// The graph kernel making the call, or null: when its run is traced, a communicator adds
  /// the call's phases there (MpiCommunicator: "<name>.wait", the other ranks arriving and
  /// agreeing; "<name>.transfer", moving and reducing the data, with its algorithm and bytes).
  const KernelContext* kernel = nullptr;
};

/// One local participant's buffers in a call. `output` is allocated by the
/// caller on the participant's device with the result's size (it may be
/// `input` itself for an in-place allreduce or broadcast).
struct Participant {
  int local = 0;
  Tensor input;
  Tensor output;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  /// "ring(cpu,cpu:1)", "nccl(cuda:0,cuda:1)".
  virtual std::string name() const = 0;
  /// This process's participants' devices, in local index order.
  virtual const std::vector<Device>& devices() const = 0;
  /// This process's rank and the number of processes.
  virtual int rank() const { return 0; }
  virtual int num_ranks() const { return 1; }
  /// Participants in all processes.
  int size() const { return num_ranks() * static_cast<int>(devices().size()); }
  /// Global index of local participant `local`.
  int global_index(int local) const {
    return rank() * static_cast<int>(devices().size()) + local;
  }

  /// output = op over every participant's input (same element count on all).
  virtual void allreduce(const CollectiveCall& call, std::vector<Participant>& parts,
                         ReduceOp op) = 0;
  /// output = the input of global participant `root` (same element count on all).
  virtual void broadcast(const CollectiveCall& call, std::vector<Participant>& parts,
                         int root) = 0;
  /// output (size() x n elements) = the n-element inputs of all participants
  /// in global order.
  virtual void allgather(const CollectiveCall& call, std::vector<Participant>& parts) = 0;
  /// output (n elements) = block `global index` of op over the inputs
  /// (size() x n elements each).
  virtual void reduce_scatter(const CollectiveCall& call, std::vector<Participant>& parts,
                              ReduceOp op) = 0;
  /// Returns once every participant has called (parts' tensors unused).
  virtual void barrier(const CollectiveCall& call, std::vector<Participant>& parts) = 0;
  /// Checks that every process passes the same `items` (e.g. the
  /// collectives each will run); throws spire::Error on every process
  /// naming `what` and the first difference. One process (the default):
  /// nothing to compare.
  virtual void agree(const std::string& what, const std::vector<std::string>& items) {
    (void)what, (void)items;
  }
};

/// What is wrong with the `parts` of a call to `comm` (no participant, a
/// local index out of range or repeated, a tensor on another device than
/// its participant's), or "" when nothing is.
std::string participants_problem(const Communicator& comm, const std::vector<Participant>& parts);

// ---- what implementations share: validating a call ------------------------------

enum class CollectiveKind { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kBarrier };
/// "allreduce", "broadcast", "allgather", "reduce_scatter", "barrier".
const char* collective_kind_name(CollectiveKind kind);

/// What every participant of one collective instance must agree on.
struct CollectiveSignature {
  CollectiveKind kind = CollectiveKind::kBarrier;
  std::string identity;          ///< CollectiveCall::identity (or its name)
  ReduceOp op = ReduceOp::kSum;  ///< allreduce, reduce_scatter
  int root = 0;                  ///< broadcast
  DType dtype = DType::F32;      ///< not for barrier
  int64_t count = 0;             ///< elements of each input (not for barrier)
  std::vector<int64_t> shape;    ///< dims of the first local participant's input (not for barrier)
};

/// The identity a call's participants agree on: call.identity, or call.name when empty.
inline const std::string& collective_identity(const CollectiveCall& call) {
  return call.identity.empty() ? call.name : call.identity;
}

/// `sig` as bytes (for an agreement between processes) and back; decode returns false for
/// bytes that are not an encoded signature.
std::string encode_signature(const CollectiveSignature& sig);
bool decode_signature(const std::string& bytes, CollectiveSignature* sig);

/// The signature of one call's local participants, or in `problem` what is
/// wrong with the call itself (undefined tensors, an output of the wrong
/// size for the kind, participants of one call that differ, a root that is
/// not a participant, a reduction of bool tensors). `size` is the
/// communicator's size(); `parts` must have passed participants_problem.
CollectiveSignature local_signature(CollectiveKind kind, const CollectiveCall& call, ReduceOp op,
                                    int root, int size, const std::vector<Device>& devices,
                                    const std::vector<Participant>& parts, std::string* problem);

/// "" when `mine` agrees with `first`, else the first difference, e.g.
/// "passed f64 where participant 0 passed f32", or "called allreduce 'bn/mean' where
/// participant 0 called allreduce 'bucket_2'" (identity first, then dtype, shape, count).
std::string signature_difference(const CollectiveSignature& mine, const CollectiveSignature& first,
                                 int first_participant);

/// A Communicator that serves its five collectives with one function of
/// their kind, as Spire's backends do (InProcessRing, NcclCommunicator,
/// MpiCommunicator: they validate, meet and dispatch every kind alike): an
/// implementation overrides run(), which each collective calls with its
/// kind, its reduction (kSum where it has none) and its root (0 where it has
/// none).
class DispatchingCommunicator : public Communicator {
 public:
  void allreduce(const CollectiveCall& call, std::vector<Participant>& parts, ReduceOp op) override {
    run(CollectiveKind::kAllReduce, call, parts, op, 0);
  }
  void broadcast(const CollectiveCall& call, std::vector<Participant>& parts, int root) override {
    run(CollectiveKind::kBroadcast, call, parts, ReduceOp::kSum, root);
  }
  void allgather(const CollectiveCall& call, std::vector<Participant>& parts) override {
    run(CollectiveKind::kAllGather, call, parts, ReduceOp::kSum, 0);
  }
  void reduce_scatter(const CollectiveCall& call, std::vector<Participant>& parts, ReduceOp op) override {
    run(CollectiveKind::kReduceScatter, call, parts, op, 0);
  }
  void barrier(const CollectiveCall& call, std::vector<Participant>& parts) override {
    run(CollectiveKind::kBarrier, call, parts, ReduceOp::kSum, 0);
  }

 protected:
  /// The collective of `kind` (see the five above).
  virtual void run(CollectiveKind kind, const CollectiveCall& call, std::vector<Participant>& parts,
                   ReduceOp op, int root) = 0;
};

}  // namespace spire::dist
