// MpiRuntime: the process's MPI runtime (builds with SPIRE_MPI; the macro
// SPIRE_WITH_MPI is then defined), under every MPI communicator and
// messenger of dist/mpi: it initializes MPI, tells where each rank runs
// (hosts, local ranks, what MPI's transports allow), carries the failure
// announcements between ranks on a control communicator of its own (so a
// rank that raises ends every other rank's wait at once), and ends the job
// at exit: MPI_Finalize when every rank ended well, MPI_Abort when one
// failed. Initialization and exit are in mpi_runtime.cc, the failure
// announcements in mpi_failures.cc.
//
// mpi.h stays out of this header: programs include it without MPI's flags.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace spire::dist {

/// The process's MPI runtime. MPI may be initialized once per process, so
/// this is the one process-wide object of dist/: get() initializes MPI
/// (MPI_THREAD_MULTIPLE: collectives run on the executor's lane threads)
/// on first use, or adopts an MPI the program initialized itself, and
/// finalizes it at exit when it initialized it. Throws spire::Error when MPI
/// cannot give the thread level Spire needs.
class MpiRuntime {
 public:
  static MpiRuntime& get();
  /// Rank in MPI_COMM_WORLD and the number of ranks.
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Rank among the ranks on this host and their number (Horovod's local_rank/local_size).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  /// The host of `rank` (the lowest world rank on its host): ranks on one
  /// host share memory.
  int host_of(int rank) const { return host_of_.at(static_cast<size_t>(rank)); }
  const std::vector<int>& hosts() const { return host_of_; }  ///< host_of() of every rank
  /// What MPI's transports tell through MPI_T (OpenMPI's control
  /// variables; empty or 0 where the MPI has no such variable):
  /// whether ranks of one host may use a shared-memory transport (false
  /// when the `btl` selection leaves out vader/sm, e.g. `--mca btl
  /// tcp,self`), and TCP's eager limit (btl_tcp_eager_limit, bytes with the
  /// headers: larger messages wait for the receiver's reply first).
  bool shared_memory_transport() const { return shared_memory_transport_; }
  int64_t tcp_eager_limit() const { return tcp_eager_limit_; }

  /// Tells every other rank that this rank failed (`why`: the error), so
  /// their waits end at once with a spire::Error naming this rank. Waits
  /// (bounded by `ack_timeout_seconds`) for the ranks to acknowledge, so
  /// their errors are reported before the job ends. Marks the runtime failed.
  void announce_failure(const std::string& why, double ack_timeout_seconds = kAckTimeoutSeconds);
  /// The default bound of announce_failure's wait for acknowledgements.
  static constexpr double kAckTimeoutSeconds = 5;
  /// "" while no other rank announced a failure; then "rank R failed: why"
  /// (from then on; the runtime is marked failed). Non-blocking: every
  /// communicator wait polls it.
  std::string peer_failure();
  /// True after a failure was announced or received. A failed runtime ends
  /// the process with MPI_Abort at exit instead of MPI_Finalize (which
  /// would wait forever for a dead or stalled rank), so mpirun ends every
  /// rank and exits non-zero: no process is left behind. A rank that ends
  /// well waits at exit for the others in a barrier that hears their
  /// failures (a failure then ends it the same way; not when the program
  /// initialized MPI itself: it then calls MPI_Finalize).
  bool failed() const;
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

 private:
  MpiRuntime();
  std::string receive_failure();
  /// At exit of a rank that did not fail: a barrier with the other ranks
  /// that listens for their failures; false when one failed meanwhile.
  bool wait_for_peers_at_exit();
  /// At exit of a failed job, a rank that leaves the ending to rank `to`
  /// tells it so (this rank has done all it had to: printed its error).
  void tell_exiting(int to);
  /// At exit of a failed job, the rank that ends it waits until every rank
  /// known to be alive said it reached its exit, at most `timeout_seconds`
  /// (a dead or stalled rank never says so), so MPI_Abort cuts no rank
  /// short of reporting its error. False when a lower rank's announcement
  /// arrived meanwhile: the ending is then that rank's.
  bool wait_for_responsive_ranks_to_exit(double timeout_seconds);
  struct Control;  // the control communicator and what it heard (mpi_internal.h)
  std::unique_ptr<Control> control_;
  bool initialized_here_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::vector<int> host_of_;
  bool shared_memory_transport_ = true;
  int64_t tcp_eager_limit_ = 0;
};

}  // namespace spire::dist
