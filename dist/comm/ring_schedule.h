// The schedule of Spire's ring allreduce: which chunk each participant
// works on at each step, and how chunks split into pipelined segments.
// Shared by the in-process ring and the MPI ring; pure arithmetic, no
// synchronization.
//
// n participants in ring order 0..n-1; participant p receives from
// p-1 (its predecessor) and sends to p+1 (its successor), indices mod n.
// `count` elements split into n chunks: chunk c has count / n elements,
// plus one for the first count % n chunks. Each chunk splits into
// segments() segments of at most segment_elems elements (trailing
// segments of a short chunk may be empty), so a transfer of one segment
// overlaps the reduction of the previous one.
//
// Reduce-scatter, steps s = 0 .. n-2: participant p reduces chunk
// rs_chunk(p, s) = p + n - 2 - s: its own input combined with its
// predecessor's partial result of the same chunk (the predecessor's input
// at s = 0). After step n-2, participant p holds the fully reduced chunk p.
// Allgather, steps s = 0 .. n-2: participant p copies chunk
// ag_chunk(p, s) = p - 1 - s from its predecessor, which completed it at
// the step before. Every element is reduced exactly once, in the fixed
// ring order starting at participant c+1 (for chunk c), then copied, so all
// participants hold bit-identical results and runs repeat exactly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

namespace spire::dist {

struct RingSchedule {
  int n = 1;
  int64_t count = 0;
  int64_t segment_elems = 1;

  RingSchedule(int participants, int64_t elements, int64_t seg_elems)
      : n(participants), count(elements), segment_elems(std::max<int64_t>(1, seg_elems)) {}

  int mod(int64_t i) const { return static_cast<int>(((i % n) + n) % n); }
  int pred(int p) const { return mod(p - 1); }
  int succ(int p) const { return mod(p + 1); }

  int64_t chunk_size(int c) const { return count / n + (c < count % n ? 1 : 0); }
  int64_t chunk_begin(int c) const { return c * (count / n) + std::min<int64_t>(c, count % n); }
  /// Segments per chunk (of the largest chunk; at least 1).
  int64_t segments() const {
    const int64_t largest = chunk_size(0);
    return std::max<int64_t>(1, (largest + segment_elems - 1) / segment_elems);
  }
  /// Elements [first, second) of segment k of chunk c (empty past the chunk's end).
  std::pair<int64_t, int64_t> segment(int c, int64_t k) const {
    const int64_t b = chunk_begin(c), size = chunk_size(c);
    const int64_t lo = std::min(size, k * segment_elems), hi = std::min(size, (k + 1) * segment_elems);
    return {b + lo, b + hi};
  }

  int rs_chunk(int p, int s) const { return mod(int64_t{p} + n - 2 - s); }
  int ag_chunk(int p, int s) const { return mod(int64_t{p} - 1 - s); }

  /// Units: one segment of one step. Reduce-scatter units come first.
  int64_t rs_unit(int s, int64_t k) const { return s * segments() + k; }
  int64_t ag_unit(int s, int64_t k) const { return (n - 1) * segments() + s * segments() + k; }
  int64_t rs_units() const { return (n - 1) * segments(); }
  int64_t allreduce_units() const { return 2 * rs_units(); }
};

}  // namespace spire::dist
