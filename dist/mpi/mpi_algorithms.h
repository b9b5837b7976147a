// The algorithms MpiCommunicator (mpi_communicator.h) moves data with:
// their names (MpiAlgorithm), and the plans every rank computes alike before
// running them: the segments of the pipelined messages (plan_segments) and
// which ranks fold when the rank count is not a power of two (plan_fold).
// The algorithms themselves (Spire's ring, recursive doubling,
// halving-doubling, the broadcast chain, over MPI point-to-point) are in
// mpi_algorithms.cc; which one an allreduce takes under kAuto is the link
// model's choice (mpi_link_model.h).
//
// mpi.h stays out of this header: programs include it without MPI's flags.
#pragma once

#include <cstdint>
#include <vector>

namespace spire::dist {

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
/// Rank `me`'s plan; throws spire::Error for a rank outside host_of or a
/// segment size that is not > 0.
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
/// The plan of ranks on hosts `host_of` (a host is named by any int, e.g.
/// MpiRuntime::hosts()); throws spire::Error for no ranks.
FoldPlan plan_fold(const std::vector<int>& host_of);

}  // namespace spire::dist
