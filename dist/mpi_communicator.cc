// MpiRuntime and MpiCommunicator (see mpi_communicator.h).
#include "dist/mpi_communicator.h"

#if defined(SPIRE_WITH_MPI)

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/run_context.h"
#include "dist/ring_device.h"
#include "dist/ring_schedule.h"

namespace spire::dist {

namespace {

// Throws spire::Error with MPI's text for a failed call.
void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw_error("MPI: ", what, " failed: ", std::string(text, static_cast<size_t>(len)));
}

MPI_Datatype mpi_type(DType dt, const std::string& what) {
  switch (dt) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::Bool: return MPI_C_BOOL;
    default: break;
  }
  throw_error(what, ": MPI collectives take f32, f64, i32, i64 or bool tensors, not ", dtype_name(dt));
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return MPI_SUM;
}

// t /= n in place (the mean after an MPI_SUM), in t's dtype, as the ring does.
void divide(Tensor& t, int n) {
  visit_dtype(t.dtype(), "mpi mean", [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>) {
      T* p = t.data<T>();
      const T d = static_cast<T>(n);
      for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = p[i] / d;
    }
  });
}

int as_int_count(int64_t n, const std::string& what) {
  if (n > INT_MAX) throw_error(what, ": ", n, " elements is more than one MPI call takes (", INT_MAX, ")");
  return static_cast<int>(n);
}

}  // namespace

// ---- MpiRuntime -----------------------------------------------------------------------

MpiRuntime& MpiRuntime::get() {
  static MpiRuntime runtime;
  return runtime;
}

MpiRuntime::MpiRuntime() {
  int inited = 0;
  check_mpi(MPI_Initialized(&inited), "MPI_Initialized");
  int provided = 0;
  if (!inited) {
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    initialized_here_ = true;
  } else {
    check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  if (provided < MPI_THREAD_MULTIPLE)
    throw_error("MPI: Spire's collectives run on the executor's threads and need "
                "MPI_THREAD_MULTIPLE; this MPI provides level ", provided,
                initialized_here_ ? "" : " (initialize MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE))");
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  MPI_Comm local;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
            "MPI_Comm_split_type");
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (initialized_here_ && !finalized) MPI_Finalize();
}

// ---- MpiCommunicator --------------------------------------------------------------------

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int tag = 0;  // this call's message tag (every rank counts calls alike)
  int rank = 0, size = 1;
  std::string broken;  // why the communicator is unusable ("" when it is fine)
  // Buffers of a collective abandoned while MPI may still write them: kept
  // for the communicator's lifetime (and the communicator is not freed).
  std::vector<std::shared_ptr<void>> abandoned_buffers;
  std::vector<Tensor> abandoned_tensors;
};

MpiCommunicator::MpiCommunicator(Device device, double timeout_seconds, MpiAlgorithm algorithm,
                                 int64_t segment_bytes)
    : devices_{device},
      timeout_seconds_(timeout_seconds),
      algorithm_(algorithm),
      segment_bytes_(segment_bytes),
      impl_(std::make_unique<Impl>()) {
  SPIRE_CHECK(segment_bytes > 0, "MpiCommunicator: segment_bytes must be > 0");
  SPIRE_CHECK(device.is_cpu(), "MpiCommunicator: MPI's collectives take CPU tensors; ", device.to_string(),
              " needs NCCL across processes");
  SPIRE_CHECK(timeout_seconds > 0, "MpiCommunicator: timeout_seconds must be > 0");
  MpiRuntime& rt = MpiRuntime::get();
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm), "MPI_Comm_dup");
  impl_->rank = rt.rank();
  impl_->size = rt.size();
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A communicator left with a pending collective (after a timeout) is not freed: freeing
  // it would wait for that collective.
  if (!finalized && impl_->comm != MPI_COMM_NULL && impl_->broken.empty()) MPI_Comm_free(&impl_->comm);
}

std::string MpiCommunicator::name() const {
  return str_cat(algorithm_ == MpiAlgorithm::kRing ? "mpi-ring" : "mpi", "(rank ", impl_->rank, " of ",
                 impl_->size, ", ", devices_[0].to_string(), ")");
}
int MpiCommunicator::rank() const { return impl_->rank; }
int MpiCommunicator::num_ranks() const { return impl_->size; }

void MpiCommunicator::allreduce(const CollectiveCall& call, std::vector<Participant>& parts,
                                ReduceOp op) {
  run(CollectiveKind::kAllReduce, call, parts, op, 0);
}
void MpiCommunicator::broadcast(const CollectiveCall& call, std::vector<Participant>& parts, int root) {
  run(CollectiveKind::kBroadcast, call, parts, ReduceOp::kSum, root);
}
void MpiCommunicator::allgather(const CollectiveCall& call, std::vector<Participant>& parts) {
  run(CollectiveKind::kAllGather, call, parts, ReduceOp::kSum, 0);
}
void MpiCommunicator::reduce_scatter(const CollectiveCall& call, std::vector<Participant>& parts,
                                     ReduceOp op) {
  run(CollectiveKind::kReduceScatter, call, parts, op, 0);
}
void MpiCommunicator::barrier(const CollectiveCall& call, std::vector<Participant>& parts) {
  run(CollectiveKind::kBarrier, call, parts, ReduceOp::kSum, 0);
}

void MpiCommunicator::run(CollectiveKind kind, const CollectiveCall& call,
                          std::vector<Participant>& parts, ReduceOp op, int root) {
  const std::string what = str_cat(collective_kind_name(kind), " '", call.name, "' on ", name());
  std::lock_guard<std::mutex> lock(mu_);
  if (!impl_->broken.empty()) throw_error(what, ": the communicator is unusable: ", impl_->broken);
  if (kind != CollectiveKind::kBarrier) {
    std::string problem = participants_problem(*this, parts);
    if (!problem.empty()) throw_error(what, ": ", problem);
  }
  std::string problem;
  CollectiveSignature sig = local_signature(kind, op, root, impl_->size, devices_, parts, &problem);
  if (!problem.empty()) throw_error(what, ": ", problem);

  using Clock = std::chrono::steady_clock;
  const RunContext* rc = call.run;
  const auto limit = rc && rc->timeout.count() > 0
                         ? std::chrono::duration_cast<Clock::duration>(rc->timeout)
                         : std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(timeout_seconds_));
  // The agreement's buffers live on the heap: an abandoned collective keeps them.
  auto mine = std::make_shared<std::vector<int64_t>>(5);
  auto all = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(5 * impl_->size));
  // Polls `req` until it completes; a cancelled run or the timeout leaves the
  // communicator broken (the collective cannot be withdrawn from MPI, so its
  // buffers are kept alive for as long as the communicator exists).
  std::vector<std::shared_ptr<void>> keep;  // the ring's work buffers
  auto abandon = [&](const std::string& why) {
    impl_->broken = why;
    impl_->abandoned_buffers.push_back(mine);
    impl_->abandoned_buffers.push_back(all);
    for (auto& b : keep) impl_->abandoned_buffers.push_back(b);
    for (const Participant& q : parts) {
      impl_->abandoned_tensors.push_back(q.input);
      impl_->abandoned_tensors.push_back(q.output);
    }
  };
  auto wait = [&](MPI_Request& req, const char* stage) {
    const Clock::time_point deadline = Clock::now() + limit;
    for (int spins = 0;; ++spins) {
      int done = 0;
      check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      if (rc && rc->cancellation && rc->cancellation->cancelled()) {
        abandon(str_cat(what, " was abandoned by a cancelled run"));
        throw Cancelled(str_cat(what, ": cancelled while waiting for the other ranks"));
      }
      if (Clock::now() >= deadline) {
        abandon(str_cat(what, " timed out"));
        throw_error(what, ": timed out after ", std::chrono::duration<double>(limit).count(),
                    " s waiting for the other ranks (", stage,
                    "); a rank may have failed, stalled, or called a different collective");
      }
      if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  };

  // Every rank checks every rank's signature: a mismatch fails everywhere,
  // naming the first rank that differs from rank 0.
  {
    *mine = {static_cast<int64_t>(sig.kind), static_cast<int64_t>(sig.op), sig.root,
             static_cast<int64_t>(sig.dtype), sig.count};
    MPI_Request req;
    check_mpi(MPI_Iallgather(mine->data(), 5, MPI_INT64_T, all->data(), 5, MPI_INT64_T, impl_->comm, &req),
              "MPI_Iallgather");
    wait(req, "the agreement on the call");
    auto sig_of = [&](int r) {
      const int64_t* s = &(*all)[static_cast<size_t>(5 * r)];
      CollectiveSignature x;
      x.kind = static_cast<CollectiveKind>(s[0]);
      x.op = static_cast<ReduceOp>(s[1]);
      x.root = static_cast<int>(s[2]);
      x.dtype = static_cast<DType>(s[3]);
      x.count = s[4];
      return x;
    };
    const CollectiveSignature first = sig_of(0);
    for (int r = 1; r < impl_->size; ++r) {
      std::string diff = signature_difference(sig_of(r), first, 0);
      if (!diff.empty()) {
        // "participant 0" in the shared wording is rank 0 here.
        const std::string from = "participant 0";
        size_t at = diff.find(from);
        if (at != std::string::npos) diff.replace(at, from.size(), "rank 0");
        throw_error(what, ": ranks disagree: rank ", r, " ", diff);
      }
    }
  }

  MPI_Request req;
  if (kind == CollectiveKind::kBarrier) {
    check_mpi(MPI_Ibarrier(impl_->comm, &req), "MPI_Ibarrier");
    wait(req, "the barrier");
    return;
  }
  Participant& p = parts.at(0);
  const MPI_Datatype type = mpi_type(sig.dtype, what);
  const int count = as_int_count(sig.count, what);
  if (algorithm_ == MpiAlgorithm::kRing && impl_->size > 1) {
    // Spire's ring over point-to-point messages (see dist/ring_schedule.h).
    const int n = impl_->size, me = impl_->rank;
    const int succ = (me + 1) % n, pred = (me + n - 1) % n;
    const int64_t es = static_cast<int64_t>(dtype_size(sig.dtype));
    const int64_t seg = std::max<int64_t>(1, segment_bytes_ / es);
    impl_->tag = (impl_->tag + 1) % 32000;  // MPI guarantees tags up to 32767
    const int tag = impl_->tag;
    std::unique_ptr<RingDevice> dev = make_ring_device(Device::cpu(), 0);
    auto new_buffer = [&](int64_t elems) {
      auto b = std::make_shared<std::vector<char>>(static_cast<size_t>(std::max<int64_t>(elems, 1) * es));
      keep.push_back(b);
      return b->data();
    };
    // One step: segments of chunk `send_chunk` of `src` go to the successor
    // while those of `recv_chunk` arrive from the predecessor at
    // recv_at(first element); on_segment(lo, hi) runs as each arrives (the
    // reduction of one segment overlaps the transfer of the next).
    auto step = [&](const RingSchedule& rs, int send_chunk, const char* src, int recv_chunk,
                    auto recv_at, auto on_segment, const char* stage) {
      const int64_t S = rs.segments();
      std::vector<MPI_Request> recvs(static_cast<size_t>(S)), sends(static_cast<size_t>(S));
      for (int64_t k = 0; k < S; ++k) {
        auto [rlo, rhi] = rs.segment(recv_chunk, k);
        check_mpi(MPI_Irecv(recv_at(rlo), static_cast<int>(rhi - rlo), type, pred, tag, impl_->comm,
                            &recvs[static_cast<size_t>(k)]), "MPI_Irecv");
      }
      for (int64_t k = 0; k < S; ++k) {
        auto [slo, shi] = rs.segment(send_chunk, k);
        check_mpi(MPI_Isend(src + slo * es, static_cast<int>(shi - slo), type, succ, tag, impl_->comm,
                            &sends[static_cast<size_t>(k)]), "MPI_Isend");
      }
      for (int64_t k = 0; k < S; ++k) {
        wait(recvs[static_cast<size_t>(k)], stage);
        auto [rlo, rhi] = rs.segment(recv_chunk, k);
        on_segment(rlo, rhi);
      }
      for (int64_t k = 0; k < S; ++k) wait(sends[static_cast<size_t>(k)], stage);
    };
    // Reduce-scatter over `total` elements of `in` into `work` (which then
    // holds chunk `me` fully reduced; / n at the last step of a mean).
    auto reduce_scatter_phase = [&](const char* in, char* work, int64_t total) {
      RingSchedule rs(n, total, seg);
      char* temp = new_buffer(rs.chunk_size(0));
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
             "the ring's reduce-scatter");
      }
    };
    // Allgather: chunk c of `buf` comes from the rank that holds it.
    auto allgather_phase = [&](char* buf, int64_t total) {
      RingSchedule rs(n, total, seg);
      for (int s = 0; s < n - 1; ++s)
        step(rs, rs.mod(int64_t{me} - s), buf, rs.ag_chunk(me, s),
             [&](int64_t lo) { return buf + lo * es; }, [](int64_t, int64_t) {},
             "the ring's allgather");
    };
    char* out = static_cast<char*>(p.output.raw_data());
    const char* in = static_cast<const char*>(p.input.raw_data());
    switch (kind) {
      case CollectiveKind::kAllReduce: {
        // The output may be the input: reduce from a copy of the input then.
        if (out == in && sig.count) {
          char* copy = new_buffer(sig.count);
          std::memcpy(copy, in, static_cast<size_t>(sig.count * es));
          in = copy;
        }
        reduce_scatter_phase(in, out, sig.count);
        allgather_phase(out, sig.count);
        break;
      }
      case CollectiveKind::kReduceScatter: {
        char* work = new_buffer(sig.count);
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
            check_mpi(MPI_Irecv(out + lo * es, static_cast<int>(hi - lo), type, pred, tag, impl_->comm,
                                &recvs[static_cast<size_t>(k)]), "MPI_Irecv");
          }
        for (int64_t k = 0; k < S; ++k) {
          auto [lo, hi] = rs.segment(0, k);
          if (pos > 0) wait(recvs[static_cast<size_t>(k)], "the broadcast chain");
          if (pos < n - 1)
            check_mpi(MPI_Isend(out + lo * es, static_cast<int>(hi - lo), type, succ, tag, impl_->comm,
                                &sends[static_cast<size_t>(k)]), "MPI_Isend");
        }
        if (pos < n - 1)
          for (int64_t k = 0; k < S; ++k) wait(sends[static_cast<size_t>(k)], "the broadcast chain");
        break;
      }
      case CollectiveKind::kBarrier:
        break;
    }
    return;
  }
  switch (kind) {
    case CollectiveKind::kAllReduce: {
      if (p.output.raw_data() != p.input.raw_data() && p.input.nbytes())
        std::memcpy(p.output.raw_data(), p.input.raw_data(), p.input.nbytes());
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, p.output.raw_data(), count, type, mpi_op(op), impl_->comm, &req),
                "MPI_Iallreduce");
      wait(req, "the allreduce");
      if (op == ReduceOp::kMean) divide(p.output, impl_->size);
      break;
    }
    case CollectiveKind::kBroadcast: {
      if (impl_->rank == root && p.output.raw_data() != p.input.raw_data() && p.input.nbytes())
        std::memcpy(p.output.raw_data(), p.input.raw_data(), p.input.nbytes());
      check_mpi(MPI_Ibcast(p.output.raw_data(), count, type, root, impl_->comm, &req), "MPI_Ibcast");
      wait(req, "the broadcast");
      break;
    }
    case CollectiveKind::kAllGather: {
      check_mpi(MPI_Iallgather(p.input.raw_data(), count, type, p.output.raw_data(), count, type,
                               impl_->comm, &req),
                "MPI_Iallgather");
      wait(req, "the allgather");
      break;
    }
    case CollectiveKind::kReduceScatter: {
      check_mpi(MPI_Ireduce_scatter_block(p.input.raw_data(), p.output.raw_data(), count / impl_->size,
                                          type, mpi_op(op), impl_->comm, &req),
                "MPI_Ireduce_scatter_block");
      wait(req, "the reduce-scatter");
      if (op == ReduceOp::kMean) divide(p.output, impl_->size);
      break;
    }
    case CollectiveKind::kBarrier:
      break;
  }
}

MpiAlgorithm mpi_algorithm_from_env() {
  const char* v = std::getenv("SPIRE_MPI_ALGORITHM");
  const std::string name = v ? v : "";
  if (name.empty() || name == "ring") return MpiAlgorithm::kRing;
  if (name == "mpi") return MpiAlgorithm::kMpi;
  throw_error("SPIRE_MPI_ALGORITHM='", name, "': expected \"ring\" (Spire's ring, the default) or "
              "\"mpi\" (MPI's own collectives)");
}

std::shared_ptr<MpiCommunicator> make_mpi_communicator(Device device, double timeout_seconds) {
  return std::make_shared<MpiCommunicator>(device, timeout_seconds, mpi_algorithm_from_env());
}

}  // namespace spire::dist

#endif  // SPIRE_WITH_MPI
