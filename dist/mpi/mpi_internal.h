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
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "dist/mpi/mpi_communicator.h"

namespace spire::dist {

/// The runtime's control communicator and what it heard: the failure
/// announcements (mpi_failures.cc), the barrier at exit (mpi_runtime.cc),
/// the heartbeats and the ranks that finished (mpi_heartbeat.cc).
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
  // Ranks that told they reached their exit, and when this rank heard it
  // (mpi_heartbeat.cc's finished_peer drains the notices).
  std::map<int, std::chrono::steady_clock::time_point> finished;
  bool told_finished = false;  // this rank told the others it finished
  int finalize_key = MPI_KEYVAL_INVALID;  // the hook on MPI_COMM_SELF (mpi_heartbeat.cc)
  // The heartbeat thread (mpi_heartbeat.cc) and what it saw: when each
  // watched neighbour's last heartbeat arrived. `beat_mu` guards these and
  // `stop` (never held with `mu` taken after it).
  std::mutex beat_mu;
  std::condition_variable beat_cv;
  bool stop = false;
  std::map<int, std::chrono::steady_clock::time_point> last_beat;
  std::thread heartbeat;
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

/// An error MPI returned (check_mpi): a call of a collective that raises it
/// may leave requests in flight, so the communicator is then unusable
/// (MpiCommunicator marks it broken and keeps the call's buffers).
class MpiError : public Error {
 public:
  explicit MpiError(const std::string& what) : Error(what) {}
};

/// Throws MpiError (a spire::Error) with MPI's text for a failed call, naming
/// this process's rank. Spire's communicators return MPI's errors
/// (use_errors_return) instead of letting MPI abort the job, so an
/// MPI-level error (a broken connection, a peer gone) reaches here.
inline void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  int rank = -1, inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw MpiError(str_cat("MPI: ", what, " failed", rank >= 0 ? str_cat(" on rank ", rank) : std::string(), ": ",
                         std::string(text, static_cast<size_t>(len))));
}

/// Makes MPI return its errors on `comm` (MPI_ERRORS_RETURN) instead of
/// aborting the job (MPI_ERRORS_ARE_FATAL, MPI's default), so check_mpi
/// turns them into spire::Errors and the runtime's failure handling
/// (announce, end every rank) applies. Every communicator Spire makes gets it.
inline void use_errors_return(MPI_Comm comm) {
  check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
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

/// An MPI datatype and count carrying `n` bytes in one message: MPI_CHAR x n
/// when n fits an int (MPI's counts are ints), else one element of a
/// derived type of 1 GiB blocks and the rest, so a message of 2 GiB or more
/// (a large parameter-server shard with its Adam slots) still travels. Its
/// signature is n MPI_CHARs either way: the receiver learns n with
/// MPI_Get_elements_x and reads it with a ByteType of its own. A derived
/// type is freed by the destructor (MPI lets operations in flight finish).
class ByteType {
 public:
  explicit ByteType(uint64_t n) {
    if (n <= static_cast<uint64_t>(INT_MAX)) {
      count_ = static_cast<int>(n);
      return;
    }
    constexpr uint64_t kBlock = uint64_t{1} << 30;
    const uint64_t blocks = n / kBlock, rest = n % kBlock;
    SPIRE_CHECK(blocks <= static_cast<uint64_t>(INT_MAX), "MPI: a message of ", n, " bytes is too large");
    // (Each intermediate type is freed on every path, an error's included.)
    struct Owned {
      MPI_Datatype t = MPI_DATATYPE_NULL;
      ~Owned() {
        if (t != MPI_DATATYPE_NULL) MPI_Type_free(&t);
      }
    } block, body, whole;
    check_mpi(MPI_Type_contiguous(static_cast<int>(kBlock), MPI_CHAR, &block.t), "MPI_Type_contiguous");
    check_mpi(MPI_Type_contiguous(static_cast<int>(blocks), block.t, &body.t), "MPI_Type_contiguous");
    if (rest == 0) {
      std::swap(whole.t, body.t);
    } else {
      int lengths[2] = {1, static_cast<int>(rest)};
      MPI_Aint offsets[2] = {0, static_cast<MPI_Aint>(blocks * kBlock)};
      MPI_Datatype types[2] = {body.t, MPI_CHAR};
      check_mpi(MPI_Type_create_struct(2, lengths, offsets, types, &whole.t), "MPI_Type_create_struct");
    }
    check_mpi(MPI_Type_commit(&whole.t), "MPI_Type_commit");
    type_ = whole.t;
    whole.t = MPI_DATATYPE_NULL;
    count_ = 1;
    derived_ = true;
  }
  ~ByteType() {
    if (derived_) MPI_Type_free(&type_);
  }
  ByteType(const ByteType&) = delete;
  ByteType& operator=(const ByteType&) = delete;
  MPI_Datatype type() const { return type_; }
  int count() const { return count_; }

 private:
  MPI_Datatype type_ = MPI_CHAR;
  int count_ = 0;
  bool derived_ = false;
};

// Tags on the runtime's control communicator (MpiRuntime::Control::comm).
namespace control_tag {
constexpr int kFailure = 1;    // 'F' + why: "this rank failed"; 'D' + text: "that rank is dead"
constexpr int kAck = 2;        // "received your failure"
constexpr int kExiting = 3;    // "after the failure, this rank reached its exit"
constexpr int kHeartbeat = 4;  // "this rank is alive" (to its ring neighbours)
constexpr int kFinished = 5;   // "this rank finished and waits at its exit"
}  // namespace control_tag

/// Sends one byte with `tag` to rank `to` without waiting for it (the
/// control communicator's notices; a send that fails, to a dead rank,
/// leaves no request).
inline void post_byte(MPI_Comm comm, int to, int tag) {
  static const char byte = 1;
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Isend(&byte, 1, MPI_CHAR, to, tag, comm, &req) == MPI_SUCCESS) MPI_Request_free(&req);
}

/// Takes every one-byte message with `tag` waiting on `comm`, calling
/// on_source(sender) for each.
template <typename F>
void take_bytes(MPI_Comm comm, int tag, F&& on_source) {
  for (;;) {
    int flag = 0;
    MPI_Message m;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, tag, comm, &flag, &m, &st) != MPI_SUCCESS || !flag) return;
    char got;
    MPI_Mrecv(&got, 1, MPI_CHAR, &m, MPI_STATUS_IGNORE);
    on_source(st.MPI_SOURCE);
  }
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
