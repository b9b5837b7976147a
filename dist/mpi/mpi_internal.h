// Internal to dist/mpi: what the MPI backend's .cc files share. Not for
// programs: it includes mpi.h, and programs include Spire's public headers
// without MPI's flags (the public headers of dist/mpi never include it).
// Compiled only with SPIRE_WITH_MPI.
//
// It holds the MPI error check and datatype mapping, the clock of the
// bounded waits, the state behind the public classes (MpiRuntime::Control:
// the control communicator of mpi_runtime.cc and mpi_failures.cc;
// MpiCommunicator::Impl: a communicator's MPI state, shared by
// mpi_communicator.cc, mpi_algorithms.cc and mpi_link_model.cc), the
// message tags on a communicator, and the algorithms and the link
// measurement as functions of a communicator's state, which
// MpiCommunicator's dispatch (mpi_communicator.cc) calls. The bounded waits
// themselves are in mpi_waits.h.
#pragma once

#if !defined(SPIRE_WITH_MPI)
#error "dist/mpi/mpi_internal.h is internal to the MPI backend (builds with SPIRE_WITH_MPI)"
#endif

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "dist/mpi/mpi_communicator.h"

namespace spire::dist {

/// The runtime's control communicator and what it heard: the failure
/// announcements (mpi_failures.cc) and the barrier at exit (mpi_runtime.cc).
struct MpiRuntime::Control {
  MPI_Comm comm = MPI_COMM_NULL;  // failure announcements and the barrier at exit only
  mutable std::mutex mu;
  bool failed = false;
  bool announced = false;
  std::string peer_failure;  // "rank R failed: why": the first announcement received
  int lowest_announcer = INT_MAX;  // the lowest rank whose announcement was received
  // Ranks known to be alive after a failure: they acknowledged this rank's
  // announcement or announced one themselves. The rank that ends the job
  // waits (bounded) for each of them to reach its exit first.
  std::set<int> responsive;
};

/// One communicator's MPI state (MpiCommunicator's mutex guards it).
struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int tag = 0;  // this call's message tag (every rank counts calls alike)
  int rank = 0, size = 1;
  std::string broken;  // why the communicator is unusable ("" when it is fine)
  // Buffers of a collective abandoned while MPI may still write them: kept
  // for the communicator's lifetime (and the communicator is not freed).
  std::vector<std::shared_ptr<void>> abandoned_buffers;
  std::vector<Tensor> abandoned_tensors;
  MpiLinkModel model;  // measured at the first kAuto allreduce
  std::unordered_map<int64_t, MpiAlgorithm> choices;  // model.choose() per allreduce size
  // Scratch buffers reused by every call (fresh ones would cost page faults
  // and zeroing on every call); grown as needed.
  std::shared_ptr<char> scratch[2];
  size_t scratch_bytes[2] = {0, 0};
  MpiAlgorithm last_allreduce = MpiAlgorithm::kAuto;
  SegmentPlan segments;  // the pipelined algorithms' segment bytes (see plan_segments)
  FoldPlan fold;         // the recursive algorithms' fold (see plan_fold)
};

namespace mpi_detail {

using Clock = std::chrono::steady_clock;

inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
/// `seconds` as the clock's duration (a time limit given in seconds).
inline Clock::duration clock_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

/// Throws spire::Error with MPI's text for a failed call.
inline void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw_error("MPI: ", what, " failed: ", std::string(text, static_cast<size_t>(len)));
}

/// The MPI datatype that moves `dt`'s elements; throws naming `what` for a
/// dtype MPI's collectives do not take.
inline MPI_Datatype mpi_type(DType dt, const std::string& what) {
  switch (dt) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::Bool: return MPI_C_BOOL;
    case DType::F16:
    case DType::BF16: return MPI_UINT16_T;  // moved as bits; Spire's algorithms reduce them
    default: break;
  }
  throw_error(what, ": MPI collectives take f32, f64, i32, i64, bool, f16 or bf16 tensors, not ", dtype_name(dt));
}

/// `n` as the int count of one MPI call; throws naming `what` when it does not fit.
inline int as_int_count(int64_t n, const std::string& what) {
  if (n > INT_MAX) throw_error(what, ": ", n, " elements is more than one MPI call takes (", INT_MAX, ")");
  return static_cast<int>(n);
}

// Tags on a communicator: the algorithms' data cycles below kTagAgree
// (next_data_tag); MPI guarantees tags up to 32767.
constexpr int kDataTags = 32000;
constexpr int kTagAgree = 32001;      // a rank's side of an agreement, to rank 0
constexpr int kTagVerdict = 32002;    // rank 0's verdict, to every rank
constexpr int kTagCalibrate = 32003;  // the link model's ping-pong (and + 1: its result)

/// The data tag of a new call of the algorithms (every rank counts calls alike).
inline int next_data_tag(MpiCommunicator::Impl& impl) {
  impl.tag = (impl.tag + 1) % kDataTags;
  return impl.tag;
}

class CallWaits;  // mpi_waits.h

// The algorithms (mpi_algorithms.cc) on one rank's participant `p`, every
// wait through `waits`; `sig` has been agreed by every rank.
/// Spire's ring: reduce-scatter then allgather for allreduce, either half
/// alone, and a pipelined chain from `root` for broadcast.
void ring_collective(MpiCommunicator::Impl& impl, CallWaits& waits, CollectiveKind kind,
                     const CollectiveSignature& sig, Participant& p, ReduceOp op, int root);
/// Allreduce by recursive doubling, or by halving-doubling (`halving`).
void recursive_doubling(MpiCommunicator::Impl& impl, CallWaits& waits, const CollectiveSignature& sig,
                        Participant& p, ReduceOp op, bool halving);
/// Measures impl.model (mpi_link_model.cc; collective: every rank calls it
/// at the same allreduce).
void measure_links(MpiCommunicator::Impl& impl, CallWaits& waits);

}  // namespace mpi_detail
}  // namespace spire::dist
