// NcclCommunicator: NCCL between the GPUs of one process (ncclCommInitAll),
// or one GPU per process across processes (ncclCommInitRank, the unique id
// handed to every rank by the caller, e.g. over MPI:
// dist/mpi/mpi_communicator.h's make_process_communicator), behind the
// Communicator interface. Built when SPIRE_CUDA finds NCCL.
//
// Each call's participants meet by key (as in Spire's ring, with the same
// validation: every participant fails with the first difference); the last
// one to arrive issues one NCCL group call (ncclGroupStart/End) for all
// local participants (one group at a time per communicator), the others wait
// for it with the run's cancellation and timeout. The work goes on each
// device's communication stream (across processes: a stream of the
// communicator's own), ordered after its compute stream by a
// pooled event, and the compute stream waits for it before its later work
// (the outputs' readers, and the frees the caching allocator orders on that
// stream).
//
// Across processes, NCCL itself checks nothing and never gives up: a rank
// that died or issued another collective leaves the others' kernels
// spinning. So the cross-process communicator is non-blocking
// (ncclConfig_t::blocking = 0) and every wait polls: its initialization,
// and each call until its work on the GPU completed (a pooled event on the
// communication stream), with ncclCommGetAsyncError, the run's cancellation
// and timeout (NcclProcessOptions::timeout_seconds for a call without a
// run), and NcclProcessOptions::peer_failure (make_process_communicator:
// MpiRuntime's failure announcements). On an error or an abandoned wait it
// calls ncclCommAbort and marks the communicator broken: later calls fail
// at once naming why. (The calling lane waits for the transfer; the
// executor's other lanes go on.) Destruction finalizes it within the same
// bound (ncclCommFinalize, polled), else aborts it. The per-call identity check across
// processes is NegotiatedCommunicator's (dist/comm/negotiated_communicator.h),
// which make_process_communicator("nccl") wraps around this. Never run on a
// GPU in CI (compiled only).
#pragma once

#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"

namespace spire::dist {

/// The unique id that names one NCCL communicator across processes
/// (ncclUniqueId's 128 bytes).
using NcclUniqueId = std::array<char, 128>;
/// A new unique id (ncclGetUniqueId); one process makes it and gives it to the others.
NcclUniqueId nccl_unique_id();

/// How a cross-process NcclCommunicator bounds its waits (also one of a single process made
/// by the process constructor).
struct NcclProcessOptions {
  /// Longest wait for NCCL's initialization, and for a call whose run sets no timeout; 0:
  /// no limit (`peer_failure`, which MpiRuntime's heartbeats feed, ends a wait for a dead rank).
  double timeout_seconds = 0;
  /// A wait logs a stall warning this often (MpiLiveness::stall_check_seconds; 0: never).
  double stall_check_seconds = 60;
  /// Polled by every wait: a non-empty answer (e.g. MpiRuntime::peer_failure()'s "rank 2
  /// failed: ...") ends it, and the communicator is aborted. Null: nothing to poll.
  std::function<std::string()> peer_failure;
};

class NcclCommunicator final : public DispatchingCommunicator {
 public:
  /// One NCCL communicator per device (all CUDA devices of this process,
  /// each once). Throws spire::Error with NCCL's message on failure.
  explicit NcclCommunicator(std::vector<Device> devices);
  /// This process's one GPU `device` as rank `rank` of `nranks` processes
  /// that all pass the same `id` (ncclCommInitRank, which waits for every
  /// rank, polled as `options` bound). Throws spire::Error naming NCCL's error, the
  /// timeout or the peer's failure; the half-made communicator is aborted.
  NcclCommunicator(Device device, int rank, int nranks, const NcclUniqueId& id,
                   NcclProcessOptions options = {});
  ~NcclCommunicator() override;

  std::string name() const override;
  const std::vector<Device>& devices() const override { return devices_; }
  int rank() const override { return rank_; }
  int num_ranks() const override { return nranks_; }
  /// "" while usable; after an NCCL error or an abandoned wait (the communicator was
  /// aborted), why.
  std::string broken() const;

 private:
  struct Pending;
  struct Comms;
  void run(CollectiveKind kind, const CollectiveCall& call, std::vector<Participant>& parts,
           ReduceOp op, int root) override;
  /// Issues one group call for `all`; across processes, waits for its completion too.
  /// `where` names the call in errors; `run` bounds the waits (null: options_.timeout_seconds).
  void issue(const CollectiveSignature& sig, std::vector<Participant>& all, const RunContext* run,
             const std::string& where);
  /// Polls until `done()` says the work is done: throws spire::Error when it reports an
  /// error, NCCL reports an asynchronous error, `run`'s timeout (or options_'s) passes or a
  /// peer failed, and Cancelled when `run` is cancelled. Abandoning is the caller's (abort).
  void poll(const RunContext* run, const std::string& what, const std::function<std::string(bool*)>& done);
  /// ncclCommAbort on every NCCL communicator; later calls fail with `why`. With issue_mu_ held.
  void abort(const std::string& why);

  std::vector<Device> devices_;
  int rank_ = 0, nranks_ = 1;
  NcclProcessOptions options_;
  std::unique_ptr<Comms> comms_;
  bool across_processes_ = false;  // made by the process constructor (polled waits)
  std::mutex issue_mu_;  // one NCCL group at a time; guards comms_ once made
  mutable std::mutex broken_mu_;  // guards broken_ (taken inside issue_mu_ or alone)
  std::string broken_;
  std::mutex mu_;        // guards pending_, failed_ and the Pending entries
  std::map<CollectiveKey, std::shared_ptr<Pending>> pending_;
  std::deque<CollectiveKey> failed_;
};

}  // namespace spire::dist
