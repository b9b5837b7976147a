// MpiLinkModel: the cost model by which MpiCommunicator (mpi_communicator.h)
// chooses an allreduce's algorithm under MpiAlgorithm::kAuto
// (mpi_algorithms.h). A communicator measures it once, at its first kAuto
// allreduce (mpi_link_model.cc), and rank 0's numbers go to every rank, so
// all ranks choose alike; the model itself is plain arithmetic, for tests
// and the benchmarks to evaluate too.
//
// mpi.h stays out of this header: programs include it without MPI's flags.
#pragma once

#include <cstdint>
#include <vector>

#include "dist/mpi/mpi_algorithms.h"

namespace spire::dist {

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

}  // namespace spire::dist
