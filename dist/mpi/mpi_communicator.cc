// MpiCommunicator (see mpi_communicator.h): construction, the dispatch of
// each collective (the agreement every call starts with, then Spire's
// algorithms of mpi_algorithms.cc or MPI's own collectives), agree(), and
// the factories (make_mpi_communicator, make_process_communicator).
#include "dist/mpi/mpi_communicator.h"

#if defined(SPIRE_WITH_MPI)

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "dist/mpi/mpi_waits.h"
#if defined(SPIRE_WITH_NCCL)
#include "dist/comm/negotiated_communicator.h"
#include "dist/nccl/nccl_communicator.h"
#endif

namespace spire::dist {

using namespace mpi_detail;

namespace {

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

// Throws when an earlier call left the communicator unusable.
void require_usable(const MpiCommunicator::Impl& impl, const std::string& what) {
  if (!impl.broken.empty()) throw_error(what, ": the communicator is unusable: ", impl.broken);
}

// SPIRE_MPI_ALGORITHM's value ("" when unset).
std::string algorithm_variable() {
  const char* v = std::getenv("SPIRE_MPI_ALGORITHM");
  return v ? v : "";
}

}  // namespace

MpiCommunicator::MpiCommunicator(Device device, double timeout_seconds, MpiAlgorithm algorithm,
                                 int64_t segment_bytes, int64_t wire_segment_bytes)
    : devices_{device},
      timeout_seconds_(timeout_seconds),
      algorithm_(algorithm),
      segment_bytes_(segment_bytes),
      wire_segment_bytes_(wire_segment_bytes),
      impl_(std::make_unique<Impl>()) {
  SPIRE_CHECK(segment_bytes > 0, "MpiCommunicator: segment_bytes must be > 0, not ", segment_bytes);
  SPIRE_CHECK(wire_segment_bytes >= 0, "MpiCommunicator: wire_segment_bytes must be >= 0 (0: TCP's eager limit), not ",
              wire_segment_bytes);
  SPIRE_CHECK(device.is_cpu(), "MpiCommunicator: MPI's collectives take CPU tensors; ", device.to_string(),
              " needs NCCL across processes");
  SPIRE_CHECK(timeout_seconds >= 0, "MpiCommunicator: timeout_seconds must be >= 0 (0: no limit), not ",
              timeout_seconds);
  MpiRuntime& rt = MpiRuntime::get();
  impl_->comm = duplicate_world(timeout_seconds, "MpiCommunicator");
  impl_->rank = rt.rank();
  impl_->size = rt.size();
  if (wire_segment_bytes_ == 0) {
    const int64_t eager = rt.tcp_eager_limit() > 0 ? rt.tcp_eager_limit() : int64_t{64} << 10;
    wire_segment_bytes_ = std::max<int64_t>(eager - 1024, 4096);
  }
  impl_->segments =
      plan_segments(rt.hosts(), rt.shared_memory_transport(), impl_->rank, segment_bytes_, wire_segment_bytes_);
  impl_->fold = plan_fold(rt.hosts());
}

int64_t MpiCommunicator::segment_bytes_to(int peer) const {
  SPIRE_CHECK(peer >= 0 && peer < impl_->size, "MpiCommunicator::segment_bytes_to: rank ", peer, " of ",
              impl_->size);
  return impl_->segments.to_peer[static_cast<size_t>(peer)];
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A communicator left with a pending collective (after a timeout) is not freed: freeing
  // it would wait for that collective.
  if (!finalized && impl_->comm != MPI_COMM_NULL && impl_->broken.empty()) MPI_Comm_free(&impl_->comm);
}

std::string MpiCommunicator::name() const {
  const char* kind = algorithm_ == MpiAlgorithm::kAuto                 ? "mpi-auto"
                     : algorithm_ == MpiAlgorithm::kRing               ? "mpi-ring"
                     : algorithm_ == MpiAlgorithm::kRecursiveDoubling ? "mpi-rd"
                     : algorithm_ == MpiAlgorithm::kHalvingDoubling   ? "mpi-hd"
                                                                        : "mpi";
  return str_cat(kind, "(rank ", impl_->rank, " of ", impl_->size, ", ", devices_[0].to_string(), ")");
}
MpiLinkModel MpiCommunicator::link_model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return impl_->model;
}
MpiAlgorithm MpiCommunicator::last_allreduce_algorithm() const {
  std::lock_guard<std::mutex> lock(mu_);
  return impl_->last_allreduce;
}
int MpiCommunicator::rank() const { return impl_->rank; }
int MpiCommunicator::num_ranks() const { return impl_->size; }

void MpiCommunicator::run(CollectiveKind kind, const CollectiveCall& call,
                          std::vector<Participant>& parts, ReduceOp op, int root) {
  const std::string what = str_cat(collective_kind_name(kind), " '", call.name, "' on ", name());
  std::lock_guard<std::mutex> lock(mu_);
  require_usable(*impl_, what);
  if (kind != CollectiveKind::kBarrier) {
    std::string problem = participants_problem(*this, parts);
    if (!problem.empty()) throw_error(what, ": ", problem);
  }
  std::string problem;
  CollectiveSignature sig =
      local_signature(kind, call, op, root, impl_->size, devices_, parts, &problem);
  if (!problem.empty()) throw_error(what, ": ", problem);

  const RunContext* rc = call.run;
  const auto limit = rc && rc->timeout.count() > 0
                         ? std::chrono::duration_cast<Clock::duration>(rc->timeout)
                         : CallWaits::limit_of(timeout_seconds_);
  CallWaits waits(*impl_, what, rc, limit, &parts);
  auto wait = [&](MPI_Request& req, const std::string& stage) { waits.wait(req, stage); };
  auto run_call = [&] {
    // Trace events of a traced graph run: the wait for the other ranks (the agreement below),
    // then the transfer, recorded when the call ends (also by an error).
    const KernelContext* traced = call.kernel && call.kernel->tracing() ? call.kernel : nullptr;
    const int64_t wait_start = traced ? traced->trace_now_ns() : 0;
    int64_t transfer_start = 0;
    MpiAlgorithm traced_algorithm = algorithm_;
    struct TransferEvent {
      const KernelContext* k;
      const CollectiveCall& call;
      const int64_t& start;
      const MpiAlgorithm& algorithm;
      int64_t bytes;
      ~TransferEvent() {
        if (!k || start == 0) return;
        k->trace_event(call.name + ".transfer", "collective", start, k->trace_now_ns(),
                       {{"algorithm", mpi_algorithm_name(algorithm)}, {"bytes", std::to_string(bytes)}});
      }
    } transfer_event{traced, call, transfer_start, traced_algorithm,
                     sig.count * static_cast<int64_t>(kind == CollectiveKind::kBarrier ? 0 : dtype_size(sig.dtype))};

    // Rank 0 checks every rank's signature: a mismatch fails everywhere,
    // naming the first rank that differs from rank 0; a rank that never
    // comes is named after the timeout.
    {
      waits.require_agreement(encode_signature(sig), [&](const std::vector<std::string>& all) {
        auto sig_of = [&](int r) {
          CollectiveSignature x;
          if (!decode_signature(all[static_cast<size_t>(r)], &x)) x.identity = "(unreadable signature)";
          return x;
        };
        const CollectiveSignature first = sig_of(0);
        for (int r = 1; r < static_cast<int>(all.size()); ++r) {
          std::string diff = signature_difference(sig_of(r), first, 0);
          if (!diff.empty()) {
            // "participant 0" in the shared wording is rank 0 here.
            const std::string from = "participant 0";
            size_t at = diff.find(from);
            if (at != std::string::npos) diff.replace(at, from.size(), "rank 0");
            return str_cat("ranks disagree: rank ", r, " ", diff);
          }
        }
        return std::string();
      });
    }

    if (traced) {
      transfer_start = traced->trace_now_ns();
      traced->trace_event(call.name + ".wait", "collective", wait_start, transfer_start,
                          {{"waits_for", "the other ranks to arrive and agree"}});
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
    MpiAlgorithm algorithm = algorithm_;
    if (kind == CollectiveKind::kAllReduce && impl_->size > 1) {
      if (algorithm == MpiAlgorithm::kAuto) {
        if (!impl_->model.measured) measure_links(*impl_, waits);
        // (Sizes repeat call after call, a trainer's buckets step after step:
        // the choice is kept per size; the model's steps are O(n log n).)
        const int64_t bytes = sig.count * static_cast<int64_t>(dtype_size(sig.dtype));
        auto it = impl_->choices.find(bytes);
        if (it == impl_->choices.end()) {
          if (impl_->choices.size() >= 4096) impl_->choices.clear();
          it = impl_->choices.emplace(bytes, impl_->model.choose(impl_->size, bytes)).first;
        }
        algorithm = it->second;
      }
      impl_->last_allreduce = algorithm;
      traced_algorithm = algorithm;
    } else if (algorithm != MpiAlgorithm::kMpi) {
      algorithm = MpiAlgorithm::kRing;  // the other collectives: ring and chain
      traced_algorithm = algorithm;
    }
    if ((algorithm == MpiAlgorithm::kRecursiveDoubling || algorithm == MpiAlgorithm::kHalvingDoubling) &&
        impl_->size > 1) {
      recursive_doubling(*impl_, waits, sig, p, op, algorithm == MpiAlgorithm::kHalvingDoubling);
      return;
    }
    if (algorithm == MpiAlgorithm::kRing && impl_->size > 1) {
      ring_collective(*impl_, waits, kind, sig, p, op, root);
      return;
    }
    if ((sig.dtype == DType::F16 || sig.dtype == DType::BF16) &&
        (kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter))
      throw_error(what, ": MPI's own collectives cannot reduce ", dtype_name(sig.dtype),
                  " tensors; Spire's algorithms can (SPIRE_MPI_ALGORITHM=auto, ring or recursive-doubling)");
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
  };
  // An error MPI returned may leave requests of this call in flight: the communicator is then
  // unusable, and the call's buffers are kept (as for a timeout).
  try {
    run_call();
  } catch (const MpiError& e) {
    if (impl_->broken.empty()) waits.abandon(str_cat(what, " failed: ", e.what()));
    throw;
  }
}

namespace {
void agree_call(CallWaits& waits, const std::string& mine);
}  // namespace

void MpiCommunicator::agree(const std::string& what, const std::vector<std::string>& items) {
  const std::string full = str_cat(what, " on ", name());
  std::lock_guard<std::mutex> lock(mu_);
  require_usable(*impl_, full);
  std::string mine;
  for (const std::string& it : items) {
    std::string clean = it;
    std::replace(clean.begin(), clean.end(), '\n', ' ');
    mine += clean;
    mine += '\n';
  }
  CallWaits waits(*impl_, full, nullptr, CallWaits::limit_of(timeout_seconds_), nullptr);
  try {
    agree_call(waits, mine);
  } catch (const MpiError& e) {  // (requests may be in flight: see run)
    if (impl_->broken.empty()) waits.abandon(str_cat(full, " failed: ", e.what()));
    throw;
  }
}

namespace {
// The agreement's exchange: rank 0 compares every rank's list and names the first difference.
void agree_call(CallWaits& waits, const std::string& mine) {
  waits.require_agreement(mine, [&](const std::vector<std::string>& all) {
    auto split = [](const std::string& s) {
      std::vector<std::string> v;
      size_t at = 0;
      while (at < s.size()) {
        size_t nl = s.find('\n', at);
        v.push_back(s.substr(at, nl - at));
        at = nl + 1;
      }
      return v;
    };
    const std::vector<std::string> first = split(all[0]);
    for (size_t r = 1; r < all.size(); ++r) {
      if (all[r] == all[0]) continue;
      const std::vector<std::string> other = split(all[r]);
      size_t k = 0;
      while (k < first.size() && k < other.size() && first[k] == other[k]) ++k;
      auto item = [](const std::vector<std::string>& v, size_t k) {
        return k < v.size() ? str_cat("'", v[k], "'") : std::string("nothing");
      };
      return str_cat("ranks disagree: rank ", r, " has ", other.size(), " items where rank 0 has ", first.size(),
                     "; the first difference is item ", k, ": rank ", r, " has ", item(other, k),
                     " where rank 0 has ", item(first, k));
    }
    return std::string();
  });
}

// The algorithm of a name ("" is auto), or nullopt for an unknown name.
std::optional<MpiAlgorithm> mpi_algorithm_named(const std::string& name) {
  if (name.empty() || name == "auto") return MpiAlgorithm::kAuto;
  if (name == "ring") return MpiAlgorithm::kRing;
  if (name == "recursive-doubling" || name == "rd") return MpiAlgorithm::kRecursiveDoubling;
  if (name == "halving-doubling" || name == "hd") return MpiAlgorithm::kHalvingDoubling;
  if (name == "mpi") return MpiAlgorithm::kMpi;
  return std::nullopt;
}
}  // namespace

MpiAlgorithm mpi_algorithm_from_env() {
  const std::string name = algorithm_variable();
  if (auto a = mpi_algorithm_named(name)) return *a;
  throw_error("SPIRE_MPI_ALGORITHM='", name, "': expected \"auto\" (the default: Spire's recursive doubling, "
              "halving-doubling or ring by the measured link model), \"ring\", \"recursive-doubling\", "
              "\"halving-doubling\" or \"mpi\" (MPI's own collectives)");
}

std::shared_ptr<MpiCommunicator> make_mpi_communicator(Device device, double timeout_seconds) {
  return std::make_shared<MpiCommunicator>(device, timeout_seconds, mpi_algorithm_from_env());
}

std::shared_ptr<Communicator> make_process_communicator(const std::string& backend, const Device& gpu,
                                                        double timeout_seconds) {
  const std::string name = backend.empty() ? algorithm_variable() : backend;
  if (name != "nccl") {
    const std::optional<MpiAlgorithm> a = mpi_algorithm_named(name);
    if (!a)
      throw_error("backend '", name, "' (", backend.empty() ? "SPIRE_MPI_ALGORITHM" : "the trainer's backend",
                  "): expected auto, ring, recursive-doubling, halving-doubling, mpi or nccl");
    return std::make_shared<MpiCommunicator>(Device::cpu(), timeout_seconds, *a);
  }
#if defined(SPIRE_WITH_NCCL)
  SPIRE_CHECK(gpu.is_cuda(), "backend 'nccl' needs a GPU for this rank, got ", gpu.to_string());
  // Rank 0's unique id, to every rank over MPI (as 16 x i64), over the MPI communicator that
  // then negotiates each of NCCL's calls (NCCL checks nothing itself).
  auto mpi = std::make_shared<MpiCommunicator>(Device::cpu(), timeout_seconds, MpiAlgorithm::kRing);
  Tensor bytes(DType::I64, Shape{16});
  NcclUniqueId id{};
  if (mpi->rank() == 0) id = nccl_unique_id();
  std::memcpy(bytes.raw_data(), id.data(), id.size());
  std::vector<Participant> parts{{0, bytes, bytes}};
  CollectiveCall call;
  call.name = "nccl unique id";
  mpi->broadcast(call, parts, 0);
  std::memcpy(id.data(), bytes.raw_data(), id.size());
  NcclProcessOptions options;
  options.timeout_seconds = timeout_seconds;
  // A rank that failed, died (heartbeats) or finished: agreeing to a call in the negotiation
  // is not running its kernel (a rank may fail locally after it and exit).
  options.peer_failure = [] {
    std::string why = MpiRuntime::get().peer_failure();
    return why.empty() ? MpiRuntime::get().finished_peer(CallWaits::kFinishedGraceSeconds) : why;
  };
  options.stall_check_seconds = MpiRuntime::get().liveness().stall_check_seconds;
  auto nccl = std::make_shared<NcclCommunicator>(gpu, mpi->rank(), mpi->num_ranks(), id, std::move(options));
  return std::make_shared<NegotiatedCommunicator>(std::move(nccl), std::move(mpi));
#else
  (void)gpu;
  throw_error("backend 'nccl': this Spire was built without NCCL (SPIRE_CUDA with NCCL installed)");
#endif
}

}  // namespace spire::dist

#endif  // SPIRE_WITH_MPI
