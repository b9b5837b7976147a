// MpiCommunicator: collectives across processes over MPI (builds with
// SPIRE_MPI; the macro SPIRE_WITH_MPI is then defined), behind the
// Communicator interface, one participant per rank: Spire's algorithms over
// MPI point-to-point by default, or MPI's own collectives (MPI_Iallreduce
// and friends: the reference and fallback). Every call first checks that all
// ranks make the same call (kind, dtype, count, reduction, root): rank 0
// coordinates, as Horovod's controller does, so a mismatch is a
// spire::Error on every rank naming the first rank that differs. Every wait
// polls with the run's cancellation, the failure announcements of other
// ranks (MpiRuntime::announce_failure), the ranks the runtime's heartbeats
// found dead and those that reached their exit, so a rank that raises, dies,
// stops or exits ends the others' waits within seconds, naming it, never a
// hang; a rank that is only slow (alive: its heartbeats arrive) makes the
// waits for it log stall warnings naming it, and they fail only at the
// time limit, where one is set. For GPUs, make_process_communicator's backend "nccl" gives NCCL
// across the processes (NcclCommunicator, one GPU per rank) behind the same
// interface, with MPI handing NCCL's unique id to every rank.
//
// The MPI backend, file by file (dist/mpi/):
// - mpi_runtime.h: MpiRuntime, the process's MPI (initialization and exit:
//   mpi_runtime.cc; the failure announcements: mpi_failures.cc);
// - mpi_algorithms.h: the algorithms (MpiAlgorithm) and their plans;
// - mpi_link_model.h: the cost model kAuto chooses an algorithm by;
// - this header: the communicator and its factories;
// - mpi_messenger.cc: the message transport (make_mpi_messenger of
//   dist/comm/messenger.h);
// - mpi_internal.h, mpi_waits.h: private to the backend's .cc files (they
//   include mpi.h): shared state and helpers, and the bounded waits.
// This header includes the public ones: a program needs only it.
//
// mpi.h stays out of this header: programs include it without MPI's flags.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"
#include "dist/mpi/mpi_algorithms.h"
#include "dist/mpi/mpi_link_model.h"
#include "dist/mpi/mpi_runtime.h"

namespace spire::dist {

/// Collectives across ranks behind Communicator: this rank's one participant on
/// `device` (a CPU device), size() = the number of ranks of the world
/// communicator (duplicated, so Spire's traffic never mixes with the
/// program's). Calls are serialized per communicator (MPI needs the same
/// order of collectives on every rank; the per-call agreement check turns a
/// different order into an error). A wait ends with an error naming the
/// collective and this rank when another rank failed, died or finished,
/// after the run's timeout (or `timeout_seconds` when the call has no run;
/// 0: no limit, the default: a slow rank only causes stall warnings), or
/// when the run is cancelled; the communicator is unusable afterwards (MPI
/// cannot cancel a collective), and later calls fail at once.
class MpiCommunicator : public DispatchingCommunicator {
 public:
  /// The pipelined algorithms (ring, recursive doubling, halving-doubling,
  /// the broadcast chain) move messages of at most `segment_bytes` between
  /// ranks of one host (shared memory: large segments, few handshakes) and
  /// of at most `wire_segment_bytes` between hosts, and everywhere when
  /// MPI's shared-memory transport is left out. A message over TCP larger
  /// than the eager limit waits for the receiver's reply, and in an
  /// exchange both ways that reply queues behind the receiver's own data on
  /// the socket, so the two directions no longer overlap (bench/README.md
  /// has the measurements). 0 (the default) sizes them to travel eagerly:
  /// TCP's eager limit (MpiRuntime::tcp_eager_limit(), 64 KiB unless set)
  /// less 1 KiB for the headers. The ring and the broadcast
  /// chain use one size on all their links: the wire's when any link of
  /// the ring crosses hosts (the slowest link sets their pace).
  /// Construction is collective (every rank makes its communicators in the
  /// same order); a rank that does not come within `timeout_seconds`, or
  /// that announced a failure (or died, or finished), makes it throw
  /// instead of wait forever.
  explicit MpiCommunicator(Device device = Device::cpu(), double timeout_seconds = 0,
                           MpiAlgorithm algorithm = MpiAlgorithm::kAuto,
                           int64_t segment_bytes = 256 << 10, int64_t wire_segment_bytes = 0);
  /// The segment bytes of messages between this rank and `peer`.
  int64_t segment_bytes_to(int peer) const;
  MpiAlgorithm algorithm() const { return algorithm_; }
  /// The link model kAuto chooses with (measured = false before the first
  /// allreduce that needed it).
  MpiLinkModel link_model() const;
  /// The algorithm the last allreduce used (for kAuto, the one the link
  /// model chose: kRing, kRecursiveDoubling or kHalvingDoubling; for tests
  /// and benchmarks).
  MpiAlgorithm last_allreduce_algorithm() const;
  ~MpiCommunicator() override;
  std::string name() const override;
  const std::vector<Device>& devices() const override { return devices_; }
  int rank() const override;
  int num_ranks() const override;

  /// Checks that every rank passes the same `items` (e.g. the collectives
  /// a trainer's step will run, "name: kind dtype[shape]"), through rank 0:
  /// a difference throws on EVERY rank a spire::Error naming `what`, the
  /// first rank that differs, the first differing position and both items;
  /// a rank that does not arrive within the timeout is named the same way.
  void agree(const std::string& what, const std::vector<std::string>& items) override;

  /// (Implementation detail: the communicator's MPI state, in dist/mpi/mpi_internal.h.)
  struct Impl;

 private:
  void run(CollectiveKind kind, const CollectiveCall& call, std::vector<Participant>& parts,
           ReduceOp op, int root) override;
  std::vector<Device> devices_;
  double timeout_seconds_;
  MpiAlgorithm algorithm_;
  int64_t segment_bytes_, wire_segment_bytes_;
  std::unique_ptr<Impl> impl_;
  mutable std::mutex mu_;
};

/// The algorithm named by the environment variable SPIRE_MPI_ALGORITHM
/// ("auto", the default when unset or empty, "ring", "recursive-doubling"
/// or "rd", "halving-doubling" or "hd", "mpi"); throws spire::Error naming
/// the variable for any other value.
MpiAlgorithm mpi_algorithm_from_env();

/// An MpiCommunicator on `device` with the algorithm of
/// mpi_algorithm_from_env(): how trainers make theirs, so a job switches
/// to MPI's collectives with SPIRE_MPI_ALGORITHM=mpi and no code change.
std::shared_ptr<MpiCommunicator> make_mpi_communicator(Device device = Device::cpu(),
                                                       double timeout_seconds = 0);

/// The communicator of this process's participant across the MPI job, by
/// backend name: "auto", "ring", "recursive-doubling" (or "rd"),
/// "halving-doubling" (or "hd") and "mpi" give an MpiCommunicator with that
/// algorithm on the CPU; "nccl" gives NCCL across the processes on `gpu`
/// (rank 0 makes NCCL's unique id, MPI gives it to every rank; builds with
/// NCCL), wrapped in a NegotiatedCommunicator whose MPI controller checks
/// each call's signature on every rank first, and whose waits hear the
/// other ranks' failure announcements; "" takes the name from
/// SPIRE_MPI_ALGORITHM (default "auto"). Every rank must call it (NCCL's
/// initialization waits for all). Throws spire::Error naming the backend
/// for an unknown name, "nccl" without NCCL or without a GPU.
std::shared_ptr<Communicator> make_process_communicator(const std::string& backend, const Device& gpu,
                                                        double timeout_seconds = 0);

}  // namespace spire::dist
