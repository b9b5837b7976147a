// MpiRuntime: the process's MPI runtime (builds with SPIRE_MPI; the macro
// SPIRE_WITH_MPI is then defined), under every MPI communicator and
// messenger of dist/mpi: it initializes MPI, tells where each rank runs
// (hosts, local ranks, what MPI's transports allow), carries the failure
// announcements between ranks on a control communicator of its own (so a
// rank that raises ends every other rank's wait at once), tells a dead or
// stopped rank from a slow one by heartbeats on that communicator (a dead
// one is announced like a failure; a slow one only makes the waits for it
// log stall warnings), and ends the job at exit: MPI_Finalize when every
// rank ended well, MPI_Abort when one failed. Initialization and exit are in
// mpi_runtime.cc, the failure announcements in mpi_failures.cc, the
// heartbeats and the ranks that finished in mpi_heartbeat.cc.
//
// mpi.h stays out of this header: programs include it without MPI's flags.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace spire::dist {

/// How the MPI runtime tells a dead rank from a slow one (read from the
/// environment when the runtime starts; Horovod's stall inspector has the
/// same two times). Every rank sends a heartbeat to its two ring neighbours
/// every `heartbeat_seconds` from a thread of its own, whatever its main
/// threads do; a neighbour silent for `dead_after_seconds` is dead (killed,
/// stopped, its host gone) and is announced to every rank as a failure, so
/// every wait ends naming it. A wait for a rank that still beats only logs
/// a stall warning every `stall_check_seconds`, naming what it waits for
/// and whom, and fails only at its own time limit where it has one
/// (HorovodOptions::timeout_seconds and the like: none by default).
struct MpiLiveness {
  double heartbeat_seconds = 0.5;    ///< SPIRE_MPI_HEARTBEAT_SECONDS (> 0)
  double dead_after_seconds = 10;    ///< SPIRE_MPI_DEAD_AFTER_SECONDS (0: this rank judges none; it still beats)
  double stall_check_seconds = 60;   ///< SPIRE_STALL_CHECK_SECONDS (Horovod's; 0: no warnings)
  /// The settings the environment gives (unset or empty: the defaults);
  /// throws spire::Error naming the variable for a value that is not a
  /// number in range, or a dead-after time shorter than 4 heartbeats.
  /// `getenv` reads a variable (null: unset; tests pass their own).
  static MpiLiveness from_env(const std::function<const char*(const char*)>& getenv = nullptr);
};

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
  /// The liveness settings this runtime runs with.
  const MpiLiveness& liveness() const { return liveness_; }
  /// "" unless another rank reached its exit (returned from main, or
  /// finished its work and waits for the others there) at least
  /// `grace_seconds` ago: then "rank R finished (reached its exit N s
  /// ago) ..." for the lowest such rank (`rank` >= 0: that rank only). A
  /// rank at its exit never calls a collective or sends again, so a wait
  /// for one that it has not answered by then never ends. Non-blocking.
  std::string finished_peer(double grace_seconds, int rank = -1);
  /// finished_peer() of the ranks for which needed(rank) is true.
  std::string finished_peer(double grace_seconds, const std::function<bool(int)>& needed);
  /// True after a failure was announced or received. A failed runtime ends
  /// the process with MPI_Abort at exit instead of MPI_Finalize (which
  /// would wait forever for a dead or stalled rank), so mpirun ends every
  /// rank and exits non-zero: no process is left behind. A rank that ends
  /// well waits at exit for the others in a barrier that hears their
  /// failures (a failure then ends it the same way; not when the program
  /// initialized MPI itself: it then calls MPI_Finalize).
  bool failed() const;
  /// Stops this rank's heartbeats (idempotent): done at exit.
  void stop_heartbeat();
  /// At the start of MPI_Finalize (a hook on MPI_COMM_SELF, also when the
  /// program finalizes MPI itself): tells the others this rank finished,
  /// unless it failed, and stops the heartbeats.
  void finalizing();
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
  /// Tells every other rank that `peer` stopped answering heartbeats
  /// (`why`): like announce_failure, but naming `peer` (this rank is fine).
  void announce_dead(int peer, const std::string& why);
  /// Tells the failure to every other rank on the control communicator
  /// ('F' + why: this rank failed; 'D' + text: a peer is dead) and waits,
  /// bounded, for their acknowledgements. The caller holds the control mutex.
  void announce(char kind, const std::string& text, double ack_timeout_seconds);
  /// The heartbeat thread (mpi_heartbeat.cc): started when the runtime is
  /// made (more than one rank and dead_after_seconds > 0), stopped before
  /// MPI_Finalize (also a program's: a hook on MPI_COMM_SELF).
  void start_heartbeat();
  void heartbeat_loop();
  /// At exit: tells every other rank that this one finished.
  void tell_finished();
  /// Takes the other ranks' notices that they finished (the caller holds
  /// the control mutex); finished_ranks() takes it and lists them.
  void receive_finished();
  std::set<int> finished_ranks();
  /// Removes the hook on MPI_COMM_SELF (a runtime destroyed before a
  /// program's own MPI_Finalize must not be called from it).
  void forget_finalize_hook();
  struct Control;  // the control communicator and what it heard (mpi_internal.h)
  std::unique_ptr<Control> control_;
  MpiLiveness liveness_;

  bool initialized_here_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::vector<int> host_of_;
  bool shared_memory_transport_ = true;
  int64_t tcp_eager_limit_ = 0;
};

}  // namespace spire::dist
