// Collectives across processes over MPI (builds with SPIRE_MPI; the macro
// SPIRE_WITH_MPI is then defined). MpiRuntime is the process's MPI
// runtime; MpiCommunicator puts collectives across ranks behind the
// Communicator interface, one participant per rank: Spire's ring over MPI
// point-to-point by default, or MPI's own collectives (MPI_Iallreduce and
// friends: the reference and fallback). Every call first checks that all
// ranks make the same call (kind, dtype, count, reduction, root): rank 0
// coordinates, as Horovod's controller does, so a mismatch is a
// spire::Error on every rank naming the first rank that differs, and a rank
// that never arrives (failed, exited, stalled) is named on every other rank
// after the timeout, never a hang. Every wait polls with the run's
// cancellation, the timeout, and the failure announcements of other ranks
// (MpiRuntime::announce_failure), so a rank that raises ends the others at
// once. NCCL across processes comes next behind the same interface.
//
// mpi.h stays out of this header: programs include it without MPI's flags.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"

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
  void announce_failure(const std::string& why, double ack_timeout_seconds = 5);
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
  struct Control;
  std::unique_ptr<Control> control_;
  bool initialized_here_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::vector<int> host_of_;
  bool shared_memory_transport_ = true;
  int64_t tcp_eager_limit_ = 0;
};

/// How MpiCommunicator moves an allreduce's data:
/// - kAuto (the default): Spire's algorithms chosen per call by the
///   alpha-beta model of MpiLinkModel (measured at the first allreduce):
///   recursive doubling for small messages (latency-bound: log2(n) steps),
///   halving-doubling for mid sizes (the ring's bytes in fewer steps),
///   the ring for large ones (bandwidth-optimal) on one host; across
///   hosts joined by a slower network, halving-doubling also for large
///   ones (see MpiLinkModel).
/// - kRing: Spire's ring over MPI point-to-point (reduce-scatter then
///   allgather in dist/comm/ring_schedule.h's order, chunks split into
///   pipelined segments).
/// - kRecursiveDoubling: log2(n) pairwise exchanges of the whole buffer
///   (ranks beyond the largest power of two fold into a partner first),
///   in segments, each reduced as it arrives.
/// - kHalvingDoubling: Rabenseifner's reduce-scatter by recursive halving
///   then allgather by recursive doubling: the ring's bytes in 2 log2(n)
///   steps instead of 2(n-1) (the same folding); partners at distance 1
///   first, so the largest exchanges stay on a host when ranks are placed
///   host by host; in segments, each reduced as it arrives.
/// - kMpi: MPI's own collectives (the reference and fallback).
/// Out of place, recursive doubling and halving-doubling read the input
/// where it lies (no copy of it into the output first).
/// Spire's algorithms reduce in one fixed tree per call, so every rank's
/// result is bit-identical and runs repeat exactly. Reduce-scatter,
/// allgather (ring) and broadcast (a pipelined chain) are the same in all
/// but kMpi.
enum class MpiAlgorithm { kAuto, kRing, kRecursiveDoubling, kHalvingDoubling, kMpi };

/// "auto", "ring", "recursive-doubling", "halving-doubling", "mpi".
const char* mpi_algorithm_name(MpiAlgorithm a);

/// The alpha-beta-gamma cost model of an allreduce (Hockney's alpha-beta
/// for the links, plus the reduction's time): a message of m bytes takes
/// alpha + m * beta seconds, reducing m bytes m * gamma. MpiCommunicator
/// measures it at its first kAuto allreduce (a ping-pong of 8-byte and
/// 1 MiB messages between rank 0 and the last rank on another host than
/// rank 0, or the last rank when all share one: link_peer; where ranks
/// span hosts and rank 0 shares its host, a second ping-pong inside rank
/// 0's host; rank 0 times its own reduction; every rank runs small
/// allreduces for a step's latency with all ranks at work) and gives rank
/// 0's numbers to every rank, so all ranks choose alike.
///
/// With `host_of` (the ranks' hosts, MpiRuntime::hosts()) the model knows
/// where each step's messages go, as the simulator bench/scaling_sim.py
/// places its exchanges: a pair on one host takes the link inside it
/// (host_alpha, host_beta), a pair across hosts the link between them,
/// and the messages that leave (or reach) one host in a step share its
/// link (its network interface). So on hosts joined by a slow wire, with
/// ranks placed host by host (L per host, a power of two), halving-
/// doubling (whose largest exchanges stay inside a host; 2m(1 - L/n) bytes
/// leave each host) wins over the ring (2m(n-1)/n through each host's
/// link) where the wire bounds both. Without `host_of` every pair takes
/// alpha/beta and the times are the closed forms below.
struct MpiLinkModel {
  /// Seconds per message: link_alpha plus what a step with every rank at
  /// work costs beyond the ping-pongs' latencies (step_alpha against the
  /// mean of its steps' link latencies; with one link, the larger of
  /// link_alpha and step_alpha).
  double alpha = 0;
  double link_alpha = 0;  ///< the ping-pong's one-way latency
  int link_peer = 0;      ///< the rank rank 0 measured alpha/beta with
  /// A step of a collective with every rank at work (the median 8-byte
  /// recursive-doubling allreduce over its steps): more than link_alpha
  /// where ranks share cores or a transport needs every rank's progress.
  double step_alpha = 0;
  double beta = 0;   ///< seconds per byte sent
  double gamma = 0;  ///< seconds per byte reduced
  /// The link inside a host, measured where the ranks span hosts and rank
  /// 0 shares its host (host_alpha: its ping-pong plus the same step
  /// excess as alpha); host_beta 0: pairs inside a host take alpha/beta.
  double host_alpha = 0, host_beta = 0;
  /// The host of each rank (empty: one link between every pair).
  std::vector<int> host_of;
  bool measured = false;
  /// 2(n-1) steps of n-th parts: 2(n-1) * (alpha + m/n * beta) (the
  /// reductions overlap the pipelined transfers). (These closed forms are
  /// without host_of; with it, each step is its slowest message's time.)
  double ring_allreduce_seconds(int n, int64_t bytes) const;
  /// log2(p) full exchanges and reductions (p: the largest power of two
  /// <= n), plus a fold and a copy-back when n is not a power of two:
  /// steps * (alpha + m * beta) + reductions * m * gamma.
  double recursive_doubling_seconds(int n, int64_t bytes) const;
  /// 2 log2(p) steps moving the ring's bytes: 2 log2(p) alpha +
  /// 2(p-1)/p m beta + (p-1)/p m gamma, plus the fold when p != n.
  double halving_doubling_seconds(int n, int64_t bytes) const;
  /// The fastest of the three for an allreduce of `bytes` on `n` ranks.
  /// (With host_of, each time above is the sum over steps of the slowest
  /// pair's time, its link's bytes scaled by the messages sharing it.)
  /// Throws spire::Error when host_of is neither empty nor n long.
  MpiAlgorithm choose(int n, int64_t bytes) const;
};

/// The segments of MpiCommunicator's pipelined algorithms, as rank `me`
/// sends and receives them (see MpiCommunicator's constructor): to_peer[r]
/// for an exchange with rank r (`segment_bytes` when r shares me's host,
/// host_of[r] == host_of[me], and `shared_memory` says the transport is
/// there; else `wire_segment_bytes`), ring for the ring and
/// the broadcast chain (the wire's when any link r -> r+1 of the ring
/// crosses hosts). Both ends of a link compute the same size, so a message
/// is received in the pieces it was sent in.
struct SegmentPlan {
  std::vector<int64_t> to_peer;
  int64_t ring = 0;
};
SegmentPlan plan_segments(const std::vector<int>& host_of, bool shared_memory, int me, int64_t segment_bytes,
                          int64_t wire_segment_bytes);

/// Which ranks recursive doubling and halving-doubling fold when the rank
/// count n (host_of's size) is not a power of two: n - p pairs (p: the
/// largest power of two <= n), the higher rank of each sending its buffer
/// to the lower and getting the result back, and the p ranks that take
/// part, in the algorithm's order. Pairs are taken inside hosts where they
/// can be (each from the host with the most ranks still taking part, the
/// host of the lowest rank first on a tie; from the front of its ranks),
/// then across hosts (the ranks left, host by host); the ranks that take
/// part are listed host by host (hosts in order of their lowest rank), so
/// that the short-distance exchanges stay inside hosts where the hosts'
/// counts allow (powers of two): 2 hosts x 3 ranks
/// fold 1 into 0 and 4 into 3, and exchange 0-2 and 3-5, then across.
/// On one host (host_of all equal): ranks 2i+1 fold into 2i. Every rank
/// computes the same plan from the same host_of.
struct FoldPlan {
  std::vector<int> ranks;    ///< the p ranks that take part, in the algorithm's order
  std::vector<int> partner;  ///< per rank: its fold partner, or -1 (of a pair, the higher rank sends)
};
FoldPlan plan_fold(const std::vector<int>& host_of);

/// Collectives across ranks behind Communicator: this rank's one participant on
/// `device` (a CPU device), size() = the number of ranks of the world
/// communicator (duplicated, so Spire's traffic never mixes with the
/// program's). Calls are serialized per communicator (MPI needs the same
/// order of collectives on every rank; the per-call agreement check turns a
/// different order into an error). A wait ends with an error naming the
/// collective and this rank after the run's timeout (or `timeout_seconds`
/// when the call has no run), or when the run is cancelled; the
/// communicator is unusable afterwards (MPI cannot cancel a collective),
/// and later calls fail at once.
class MpiCommunicator : public Communicator {
 public:
  /// The pipelined algorithms (ring, recursive doubling, halving-doubling,
  /// the broadcast chain) move messages of at most `segment_bytes` between
  /// ranks of one host (shared memory: large segments, few handshakes) and
  /// of at most `wire_segment_bytes` between hosts, and everywhere when
  /// MPI's shared-memory transport is left out. A message over TCP larger than
  /// the eager limit waits for the receiver's reply, and in an exchange
  /// both ways that reply queues behind the receiver's own data on the
  /// socket: a 2-rank ring over a 1 Gbit/s link took 3 transfer times of
  /// n/2 instead of 2 (bench/README.md). 0 (the default) sizes them to
  /// travel eagerly: TCP's eager limit (MpiRuntime::tcp_eager_limit(), 64
  /// KiB unless set) less 1 KiB for the headers. The ring and the broadcast
  /// chain use one size on all their links: the wire's when any link of
  /// the ring crosses hosts (the slowest link sets their pace).
  /// Construction is collective (every rank makes its communicators in the
  /// same order); a rank that does not come within `timeout_seconds`, or
  /// that announced a failure, makes it throw instead of wait forever.
  explicit MpiCommunicator(Device device = Device::cpu(), double timeout_seconds = 60,
                           MpiAlgorithm algorithm = MpiAlgorithm::kAuto,
                           int64_t segment_bytes = 256 << 10, int64_t wire_segment_bytes = 0);
  /// The segment bytes of messages between this rank and `peer`.
  int64_t segment_bytes_to(int peer) const;
  MpiAlgorithm algorithm() const { return algorithm_; }
  /// The link model kAuto chooses with (measured = false before the first
  /// allreduce that needed it).
  MpiLinkModel link_model() const;
  /// The algorithm the last allreduce used (kRing or kRecursiveDoubling for
  /// kAuto; for tests and benchmarks).
  MpiAlgorithm last_allreduce_algorithm() const;
  ~MpiCommunicator() override;
  std::string name() const override;
  const std::vector<Device>& devices() const override { return devices_; }
  int rank() const override;
  int num_ranks() const override;

  void allreduce(const CollectiveCall& call, std::vector<Participant>& parts, ReduceOp op) override;
  void broadcast(const CollectiveCall& call, std::vector<Participant>& parts, int root) override;
  void allgather(const CollectiveCall& call, std::vector<Participant>& parts) override;
  void reduce_scatter(const CollectiveCall& call, std::vector<Participant>& parts,
                      ReduceOp op) override;
  void barrier(const CollectiveCall& call, std::vector<Participant>& parts) override;

  /// Checks that every rank passes the same `items` (e.g. the collectives
  /// a trainer's step will run, "name: kind dtype[shape]"), through rank 0:
  /// a difference throws on EVERY rank a spire::Error naming `what`, the
  /// first rank that differs, the first differing position and both items;
  /// a rank that does not arrive within the timeout is named the same way.
  void agree(const std::string& what, const std::vector<std::string>& items) override;

 /// (Implementation detail.)
  struct Impl;

 private:
  // (void*: the call's waits, a type of the .cc.)
  void measure_links(void* waits);
  void recursive_doubling(void* waits, const CollectiveSignature& sig, Participant& p, ReduceOp op,
                          bool halving);
  void ring_collective(void* waits, CollectiveKind kind, const CollectiveSignature& sig, Participant& p,
                       ReduceOp op, int root);
  void run(CollectiveKind kind, const CollectiveCall& call, std::vector<Participant>& parts,
           ReduceOp op, int root);
  std::vector<Device> devices_;
  double timeout_seconds_;
  MpiAlgorithm algorithm_;
  int64_t segment_bytes_, wire_segment_bytes_;
  std::unique_ptr<Impl> impl_;
  mutable std::mutex mu_;
};

/// The algorithm named by the environment variable SPIRE_MPI_ALGORITHM
/// ("auto", the default when unset or empty, "ring", "recursive-doubling",
/// "halving-doubling" or "mpi"); throws spire::Error naming the variable
/// for any other value.
MpiAlgorithm mpi_algorithm_from_env();

/// An MpiCommunicator on `device` with the algorithm of
/// mpi_algorithm_from_env(): how trainers make theirs, so a job switches
/// to MPI's collectives with SPIRE_MPI_ALGORITHM=mpi and no code change.
std::shared_ptr<MpiCommunicator> make_mpi_communicator(Device device = Device::cpu(),
                                                       double timeout_seconds = 60);

/// The communicator of this process's participant across the MPI job, by
/// backend name: "auto", "ring", "recursive-doubling" (or "rd") and "mpi"
/// give an MpiCommunicator with that algorithm on the CPU; "nccl" gives
/// NCCL across the processes on `gpu` (rank 0 makes NCCL's unique id, MPI
/// gives it to every rank; builds with NCCL); "" takes the name from
/// SPIRE_MPI_ALGORITHM (default "auto"). Every rank must call it (NCCL's
/// initialization waits for all). Throws spire::Error naming the backend
/// for an unknown name, "nccl" without NCCL or without a GPU.
std::shared_ptr<Communicator> make_process_communicator(const std::string& backend, const Device& gpu,
                                                        double timeout_seconds = 60);

}  // namespace spire::dist
