// MpiCommunicator's algorithms over MPI point-to-point (see mpi_algorithms.h):
// their names and plans, then Spire's ring (with the broadcast chain), then
// recursive doubling and halving-doubling, each a function of the
// communicator's state (mpi_internal.h) that MpiCommunicator::run calls
// once every rank agreed on the call.
#include "dist/mpi/mpi_algorithms.h"

#if defined(SPIRE_WITH_MPI)

#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "core/allocator.h"
#include "dist/comm/ring_device.h"
#include "dist/comm/ring_schedule.h"
#include "dist/mpi/mpi_waits.h"

namespace spire::dist {

const char* mpi_algorithm_name(MpiAlgorithm a) {
  switch (a) {
    case MpiAlgorithm::kAuto: return "auto";
    case MpiAlgorithm::kRing: return "ring";
    case MpiAlgorithm::kRecursiveDoubling: return "recursive-doubling";
    case MpiAlgorithm::kHalvingDoubling: return "halving-doubling";
    case MpiAlgorithm::kMpi: return "mpi";
  }
  return "?";
}

SegmentPlan plan_segments(const std::vector<int>& host_of, bool shared_memory, int me, int64_t segment_bytes,
                          int64_t wire_segment_bytes) {
  const int n = static_cast<int>(host_of.size());
  SPIRE_CHECK(me >= 0 && me < n, "plan_segments: rank ", me, " of ", n);
  SPIRE_CHECK(segment_bytes > 0 && wire_segment_bytes > 0, "plan_segments: segment bytes ", segment_bytes,
              " and ", wire_segment_bytes, " must be > 0");
  auto same_host = [&](int a, int b) {
    return shared_memory && host_of[static_cast<size_t>(a)] == host_of[static_cast<size_t>(b)];
  };
  SegmentPlan plan;
  plan.to_peer.resize(static_cast<size_t>(n));
  plan.ring = segment_bytes;
  for (int r = 0; r < n; ++r) {
    plan.to_peer[static_cast<size_t>(r)] = same_host(me, r) ? segment_bytes : wire_segment_bytes;
    if (!same_host(r, (r + 1) % n)) plan.ring = std::min(plan.ring, wire_segment_bytes);
  }
  return plan;
}

FoldPlan plan_fold(const std::vector<int>& host_of) {
  const int n = static_cast<int>(host_of.size());
  SPIRE_CHECK(n >= 1, "plan_fold: no ranks");
  int p = 1;
  while (p * 2 <= n) p *= 2;
  // The hosts in order of their lowest rank, each with its ranks in order.
  std::vector<std::vector<int>> hosts;
  std::unordered_map<int, size_t> index;
  for (int r = 0; r < n; ++r) {
    auto [it, fresh] = index.emplace(host_of[static_cast<size_t>(r)], hosts.size());
    if (fresh) hosts.emplace_back();
    hosts[it->second].push_back(r);
  }
  FoldPlan plan;
  plan.partner.assign(static_cast<size_t>(n), -1);
  auto pair = [&](int a, int b) {
    plan.partner[static_cast<size_t>(a)] = b;
    plan.partner[static_cast<size_t>(b)] = a;
  };
  std::vector<size_t> next(hosts.size(), 0);  // each host's first rank not in a pair
  std::vector<size_t> taking(hosts.size());   // each host's ranks that still take part
  for (size_t h = 0; h < hosts.size(); ++h) taking[h] = hosts[h].size();
  int pairs = 0;
  for (; pairs < n - p; ++pairs) {
    size_t best = hosts.size();
    for (size_t h = 0; h < hosts.size(); ++h)
      if (hosts[h].size() - next[h] >= 2 && (best == hosts.size() || taking[h] > taking[best])) best = h;
    if (best == hosts.size()) break;
    pair(hosts[best][next[best]], hosts[best][next[best] + 1]);
    next[best] += 2;
    --taking[best];
  }
  std::vector<int> rest;  // at most one per host now
  for (size_t h = 0; h < hosts.size(); ++h)
    for (size_t i = next[h]; i < hosts[h].size(); ++i) rest.push_back(hosts[h][i]);
  for (size_t i = 0; pairs < n - p; ++pairs, i += 2) pair(rest[i], rest[i + 1]);
  for (const std::vector<int>& ranks : hosts)
    for (int r : ranks) {
      const int q = plan.partner[static_cast<size_t>(r)];
      if (q < 0 || q > r) plan.ranks.push_back(r);  // not folded, or the receiving end of a pair
    }
  return plan;
}

namespace mpi_detail {

namespace {
// Scratch buffer `slot` of `impl` with at least `bytes` bytes; kept alive
// with the call's buffers should the call be abandoned.
char* scratch(MpiCommunicator::Impl& impl, CallWaits& waits, int slot, int64_t bytes) {
  auto& b = impl.scratch[slot];
  const size_t want = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  if (!b || impl.scratch_bytes[slot] < want) {
    // Host memory with the CPU allocator's huge-page advice (the transfers
    // land here: see core/allocator.cc).
    b = std::shared_ptr<char>(static_cast<char*>(allocate_host(want)), [want](char* p) { deallocate_host(p, want); });
    impl.scratch_bytes[slot] = want;
  }
  waits.keep(b);
  return b.get();
}

// One pipelined step of the ring, halving-doubling and recursive
// doubling: every segment's receive from `from` (nrecv of them:
// recv_range(k) = [lo, hi) elements, landing at recv_at(lo)) and send to
// `to` (send_range(k), from send_base) is posted at once; then each receive is waited for in order and
// on_segment(lo, hi) runs as it arrives (a segment's reduction overlaps the
// next one's transfer); then the sends. `send_first`: segment k's send is
// done before on_segment(k) runs (it writes what that send reads).
template <typename RecvRange, typename RecvAt, typename SendRange, typename OnSegment>
void pipelined_step(CallWaits& waits, MPI_Comm comm, MPI_Datatype type, int tag, int64_t es, int from,
                    int64_t nrecv, RecvRange recv_range, RecvAt recv_at, int to, int64_t nsend,
                    SendRange send_range, const char* send_base, OnSegment on_segment, const std::string& stage,
                    bool send_first = false) {
  std::vector<MPI_Request> recvs(static_cast<size_t>(nrecv)), sends(static_cast<size_t>(nsend));
  for (int64_t k = 0; k < nrecv; ++k) {
    auto [lo, hi] = recv_range(k);
    check_mpi(MPI_Irecv(recv_at(lo), static_cast<int>(hi - lo), type, from, tag, comm, &recvs[static_cast<size_t>(k)]),
              "MPI_Irecv");
  }
  for (int64_t k = 0; k < nsend; ++k) {
    auto [lo, hi] = send_range(k);
    check_mpi(MPI_Isend(send_base + lo * es, static_cast<int>(hi - lo), type, to, tag, comm,
                        &sends[static_cast<size_t>(k)]),
              "MPI_Isend");
  }
  for (int64_t k = 0; k < nrecv; ++k) {
    waits.wait(recvs[static_cast<size_t>(k)], stage);
    if (send_first && k < nsend) waits.wait(sends[static_cast<size_t>(k)], stage);
    auto [lo, hi] = recv_range(k);
    if (hi > lo) on_segment(lo, hi);
  }
  for (int64_t k = 0; k < nsend; ++k) waits.wait(sends[static_cast<size_t>(k)], stage);
}
}  // namespace

void ring_collective(MpiCommunicator::Impl& impl, CallWaits& waits, CollectiveKind kind,
                     const CollectiveSignature& sig, Participant& p, ReduceOp op, int root) {
  auto wait = [&](MPI_Request& req, const std::string& stage) { waits.wait(req, stage); };
  const MPI_Datatype type = mpi_type(sig.dtype, waits.what());
  as_int_count(sig.count, waits.what());
  // Spire's ring over point-to-point messages (see dist/comm/ring_schedule.h).
  const int n = impl.size, me = impl.rank;
  const int succ = (me + 1) % n, pred = (me + n - 1) % n;
  const int64_t es = static_cast<int64_t>(dtype_size(sig.dtype));
  const int64_t seg = std::max<int64_t>(1, impl.segments.ring / es);
  const int tag = next_data_tag(impl);
  std::unique_ptr<RingDevice> dev = make_ring_device(Device::cpu(), 0);
  // One step: segments of chunk `send_chunk` of `src` go to the successor
  // while those of `recv_chunk` arrive from the predecessor at
  // recv_at(first element); on_segment(lo, hi) runs as each arrives (the
  // reduction of one segment overlaps the transfer of the next).
  auto step = [&](const RingSchedule& rs, int send_chunk, const char* src, int recv_chunk,
                  auto recv_at, auto on_segment, const std::string& stage) {
    pipelined_step(waits, impl.comm, type, tag, es, pred, rs.segments(),
                   [&](int64_t k) { return rs.segment(recv_chunk, k); }, recv_at, succ, rs.segments(),
                   [&](int64_t k) { return rs.segment(send_chunk, k); }, src, on_segment, stage);
  };
  // Reduce-scatter over `total` elements of `in` into `work` (which then
  // holds chunk `me` fully reduced; / n at the last step of a mean).
  auto reduce_scatter_phase = [&](const char* in, char* work, int64_t total) {
    RingSchedule rs(n, total, seg);
    char* temp = scratch(impl, waits, 0, rs.chunk_size(0) * es);
    for (int s = 0; s < n - 1; ++s) {
      const int rc = rs.rs_chunk(me, s);
      const int64_t cb = rs.chunk_begin(rc);
      const int64_t divisor = (s == n - 2 && op == ReduceOp::kMean) ? n : 1;
      step(rs, rs.mod(int64_t{me} + n - 1 - s), s == 0 ? in : work, rc,
           [&](int64_t lo) { return temp + (lo - cb) * es; },
           [&](int64_t lo, int64_t hi) {
             dev->combine(op, sig.dtype, work + lo * es, in + lo * es, temp + (lo - cb) * es,
                          Device::cpu(), hi - lo, divisor);
           },
           str_cat("rank ", pred, " in the ring's reduce-scatter"));
    }
  };
  // Allgather: chunk c of `buf` comes from the rank that holds it.
  auto allgather_phase = [&](char* buf, int64_t total) {
    RingSchedule rs(n, total, seg);
    for (int s = 0; s < n - 1; ++s)
      step(rs, rs.mod(int64_t{me} - s), buf, rs.ag_chunk(me, s),
           [&](int64_t lo) { return buf + lo * es; }, [](int64_t, int64_t) {},
           str_cat("rank ", pred, " in the ring's allgather"));
  };
  char* out = static_cast<char*>(p.output.raw_data());
  const char* in = static_cast<const char*>(p.input.raw_data());
  switch (kind) {
    case CollectiveKind::kAllReduce: {
      // The output may be the input: reduce from a copy of the input then.
      if (out == in && sig.count) {
        char* copy = scratch(impl, waits, 1, sig.count * es);
        std::memcpy(copy, in, static_cast<size_t>(sig.count * es));
        in = copy;
      }
      reduce_scatter_phase(in, out, sig.count);
      allgather_phase(out, sig.count);
      break;
    }
    case CollectiveKind::kReduceScatter: {
      char* work = scratch(impl, waits, 1, sig.count * es);
      reduce_scatter_phase(in, work, sig.count);
      const int64_t block = sig.count / n;
      if (block) std::memcpy(out, work + me * block * es, static_cast<size_t>(block * es));
      break;
    }
    case CollectiveKind::kAllGather: {
      if (sig.count) std::memcpy(out + me * sig.count * es, in, static_cast<size_t>(sig.count * es));
      allgather_phase(out, sig.count * n);
      break;
    }
    case CollectiveKind::kBroadcast: {
      // A pipelined chain along the ring from the root.
      if (me == root && out != in && sig.count) std::memcpy(out, in, static_cast<size_t>(sig.count * es));
      const int pos = (me - root + n) % n;
      RingSchedule rs(1, sig.count, seg);  // one chunk: the whole tensor in segments
      const int64_t S = rs.segments();
      std::vector<MPI_Request> recvs(static_cast<size_t>(S)), sends(static_cast<size_t>(S));
      if (pos > 0)
        for (int64_t k = 0; k < S; ++k) {
          auto [lo, hi] = rs.segment(0, k);
          check_mpi(MPI_Irecv(out + lo * es, static_cast<int>(hi - lo), type, pred, tag, impl.comm,
                              &recvs[static_cast<size_t>(k)]), "MPI_Irecv");
        }
      for (int64_t k = 0; k < S; ++k) {
        auto [lo, hi] = rs.segment(0, k);
        if (pos > 0) wait(recvs[static_cast<size_t>(k)], str_cat("rank ", pred, " in the broadcast chain"));
        if (pos < n - 1)
          check_mpi(MPI_Isend(out + lo * es, static_cast<int>(hi - lo), type, succ, tag, impl.comm,
                              &sends[static_cast<size_t>(k)]), "MPI_Isend");
      }
      if (pos < n - 1)
        for (int64_t k = 0; k < S; ++k) wait(sends[static_cast<size_t>(k)], str_cat("rank ", succ, " in the broadcast chain"));
      break;
    }
    case CollectiveKind::kBarrier:
      break;
  }
}

void recursive_doubling(MpiCommunicator::Impl& impl, CallWaits& waits, const CollectiveSignature& sig,
                        Participant& p, ReduceOp op, bool halving) {
  const int n = impl.size, me = impl.rank;
  MPI_Comm comm = impl.comm;
  const MPI_Datatype type = mpi_type(sig.dtype, waits.what());
  as_int_count(sig.count, waits.what());
  const int64_t es = static_cast<int64_t>(dtype_size(sig.dtype));
  const int tag = next_data_tag(impl);
  const char* algo = halving ? "halving-doubling" : "recursive doubling";
  char* out = static_cast<char*>(p.output.raw_data());
  const char* in = static_cast<const char*>(p.input.raw_data());
  if (sig.count == 0) return;
  // The partial sum so far: the input until the first reduction writes the
  // output (an out-of-place call reads its input where it lies, with no
  // copy of it first: one pass over the buffer less).
  const char* sum = in;
  char* tmp = scratch(impl, waits, 0, sig.count * es);
  std::unique_ptr<RingDevice> dev = make_ring_device(Device::cpu(), 0);
  // Ranks beyond the largest power of two fold into a partner (inside
  // their host where they can: plan_fold) and get the result back.
  const FoldPlan& fold = impl.fold;
  const int pow2 = static_cast<int>(fold.ranks.size());
  const int partner = fold.partner[static_cast<size_t>(me)];
  // Elements [lo, hi) of `buf` to or from `peer`.
  auto send = [&](int peer, const char* buf, int64_t lo, int64_t hi) {
    MPI_Request req;
    check_mpi(MPI_Isend(buf + lo * es, static_cast<int>(hi - lo), type, peer, tag, comm, &req), "MPI_Isend");
    return req;
  };
  auto recv = [&](int peer, char* buf, int64_t lo, int64_t hi) {
    MPI_Request req;
    check_mpi(MPI_Irecv(buf + lo * es, static_cast<int>(hi - lo), type, peer, tag, comm, &req), "MPI_Irecv");
    return req;
  };
  // The exchanges go in segments, as the ring's steps do: each received
  // segment is reduced (on_segment) as it arrives, while the next is in
  // flight and while it is in cache; no message is larger than a segment
  // (over TCP a large one waits for the receiver's reply behind the
  // partner's data: see MpiCommunicator's constructor).
  auto segmented_exchange = [&](int peer, int64_t send_lo, int64_t send_hi, char* into, int64_t recv_lo,
                                int64_t recv_hi, auto on_segment, bool send_first = false) {
    const int64_t seg = std::max<int64_t>(1, impl.segments.to_peer[static_cast<size_t>(peer)] / es);
    auto pieces = [&](int64_t lo, int64_t hi) {
      return std::make_pair(std::max<int64_t>(1, (hi - lo + seg - 1) / seg), [=](int64_t k) {
        return std::make_pair(lo + k * seg, std::min(hi, lo + (k + 1) * seg));
      });
    };
    auto [nrecv, recv_range] = pieces(recv_lo, recv_hi);
    auto [nsend, send_range] = pieces(send_lo, send_hi);
    pipelined_step(waits, comm, type, tag, es, peer, nrecv, recv_range, [&](int64_t lo) { return into + lo * es; },
                   peer, nsend, send_range, sum, on_segment, str_cat("rank ", peer, " in ", algo), send_first);
  };

  const int64_t last_divisor = op == ReduceOp::kMean ? n : 1;
  const int64_t all = sig.count;
  // This rank's place among the pow2 participants, or -1 for a folded rank.
  const auto place = std::find(fold.ranks.begin(), fold.ranks.end(), me);
  const int vrank = place == fold.ranks.end() ? -1 : static_cast<int>(place - fold.ranks.begin());
  // The fold's whole-buffer messages: the higher rank of a pair sends its
  // input to the lower and receives the result from it at the end.
  const bool folds = partner >= 0 && partner < me, receives_fold = partner > me;
  auto fold_message = [&](MPI_Request r) { waits.wait(r, str_cat("rank ", partner, " in ", algo)); };
  if (folds) {
    fold_message(send(partner, sum, 0, all));
  } else if (receives_fold) {
    fold_message(recv(partner, tmp, 0, all));
    // A fold means pow2 >= 2, so at least one exchange follows: the mean
    // divides in the last one, not here.
    dev->combine(op, sig.dtype, out, sum, tmp, Device::cpu(), all, 1);
    sum = out;
  }
  auto real = [&](int v) { return fold.ranks[static_cast<size_t>(v)]; };
  // a + b is b + a in IEEE arithmetic (max and min too): both partners get
  // the same bits, and every element one reduction tree on every rank.
  if (vrank >= 0 && !halving) {
    for (int mask = 1; mask < pow2; mask <<= 1) {
      const int peer = real(vrank ^ mask);
      // In segments, each reduced as it arrives (in cache, while the next
      // one is in flight); once the sum is the output, a segment is reduced
      // after its own send is done (the sent and received ranges are the
      // same). Over TCP the whole buffer in one message would wait for the
      // reply behind the partner's data; on shared memory one message
      // reduced afterwards is no faster than the segments.
      const int64_t divisor = mask * 2 == pow2 ? last_divisor : 1;
      segmented_exchange(
          peer, 0, all, tmp, 0, all,
          [&](int64_t a, int64_t b) {
            dev->combine(op, sig.dtype, out + a * es, sum + a * es, tmp + a * es, Device::cpu(), b - a, divisor);
          },
          sum == out);
      sum = out;
    }
  } else if (vrank >= 0) {
    // Reduce-scatter by recursive halving: at each level keep one half of
    // the range (the lower for the partner with the bit clear), send the
    // other, and reduce the kept half with the partner's copy of it.
    // The partners' distance doubles (1, 2, 4, ...): with ranks placed host
    // by host, the largest exchanges go between ranks of one host and only
    // the smaller ones cross hosts (half the bytes across hosts of the other
    // order, and 2/3 of the ring's).
    std::vector<std::array<int64_t, 2>> ranges;  // the range before each level's split
    int64_t lo = 0, hi = all;
    for (int mask = 1; mask < pow2; mask <<= 1) {
      ranges.push_back({lo, hi});
      const int peer = real(vrank ^ mask);
      const int64_t mid = lo + (hi - lo) / 2;
      const bool lower = (vrank & mask) == 0;
      const int64_t keep_lo = lower ? lo : mid, keep_hi = lower ? mid : hi;
      const int64_t give_lo = lower ? mid : lo, give_hi = lower ? hi : mid;
      const int64_t divisor = mask * 2 == pow2 ? last_divisor : 1;
      // (The kept half is written while the given half is still being
      // sent from `sum`: disjoint ranges.)
      segmented_exchange(peer, give_lo, give_hi, tmp, keep_lo, keep_hi, [&](int64_t a, int64_t b) {
        dev->combine(op, sig.dtype, out + a * es, sum + a * es, tmp + a * es, Device::cpu(), b - a, divisor);
      });
      sum = out;
      lo = keep_lo, hi = keep_hi;
    }
    // Allgather by recursive doubling, the levels in reverse: each partner
    // sends the half it holds of the level's range.
    int level = static_cast<int>(ranges.size()) - 1;
    for (int mask = pow2 / 2; mask >= 1; mask >>= 1, --level) {
      const int peer = real(vrank ^ mask);
      const auto [rlo, rhi] = ranges[static_cast<size_t>(level)];
      const int64_t other_lo = lo == rlo ? hi : rlo, other_hi = lo == rlo ? rhi : lo;
      segmented_exchange(peer, lo, hi, out, other_lo, other_hi, [](int64_t, int64_t) {});
      lo = rlo, hi = rhi;
    }
  }
  // No level ran (one rank): the output is the input.
  if (vrank >= 0 && sum != out) std::memcpy(out, sum, static_cast<size_t>(all * es));
  if (folds) fold_message(recv(partner, out, 0, all));
  else if (receives_fold) fold_message(send(partner, out, 0, all));
}

}  // namespace mpi_detail
}  // namespace spire::dist

#endif  // SPIRE_WITH_MPI
