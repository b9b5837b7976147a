// The bounded waits of the MPI backend (see mpi_waits.h).
#include "dist/mpi/mpi_communicator.h"

#if defined(SPIRE_WITH_MPI)

#include "dist/mpi/mpi_waits.h"

#include <optional>
#include <utility>

#include "core/logger.h"

namespace spire::dist::mpi_detail {

namespace {
// Clears a CallWaits' needed ranks when the agreement's wait ends (also by an error).
struct NeedsReset {
  explicit NeedsReset(std::function<bool(int)>& n) : needs(n) {}
  ~NeedsReset() { needs = nullptr; }
  std::function<bool(int)>& needs;
};
}  // namespace

void keep_forever(std::vector<char>&& b) {
  static std::mutex mu;
  static auto* kept = new std::vector<std::vector<char>>();
  std::lock_guard<std::mutex> lk(mu);
  kept->push_back(std::move(b));
}

MPI_Comm duplicate_world(double timeout_seconds, const std::string& who) {
  MpiRuntime& rt = MpiRuntime::get();
  // The handle's storage: a heap buffer that keep_forever() takes on an error.
  std::vector<char> storage(sizeof(MPI_Comm));
  MPI_Comm* comm = new (storage.data()) MPI_Comm(MPI_COMM_NULL);
  struct Abandon {
    std::vector<char>& storage;
    bool pending = true;
    ~Abandon() {
      if (pending) keep_forever(std::move(storage));
    }
  } abandon_on_error{storage};
  MPI_Request req;
  check_mpi(MPI_Comm_idup(MPI_COMM_WORLD, comm, &req), "MPI_Comm_idup");
  const Clock::time_point start = Clock::now();
  const Clock::duration limit = CallWaits::limit_of(timeout_seconds);
  const Clock::time_point deadline = limit >= CallWaits::kNoLimit ? Clock::time_point::max() : start + limit;
  const double stall_check = rt.liveness().stall_check_seconds;
  Clock::time_point next_warning = stall_check > 0 ? start + clock_duration(stall_check) : Clock::time_point::max();
  for (int polls = 0;; ++polls) {
    int done = 0;
    check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) {
      abandon_on_error.pending = false;
      use_errors_return(*comm);
      return *comm;
    }
    if (polls % 64 == 0) {
      std::string failure = rt.peer_failure();
      if (failure.empty()) failure = rt.finished_peer(CallWaits::kFinishedGraceSeconds);
      if (!failure.empty())
        throw_error(who, ": rank ", rt.rank(), " was creating its communicator with the others (MPI_Comm_idup): ",
                    failure);
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline)
      throw_error(who, ": rank ", rt.rank(), " waited ", timeout_seconds, " s for the other ranks to create "
                  "theirs (MPI_Comm_idup): a rank stalled or does not make one");
    if (now >= next_warning) {
      logger::warn("rank ", rt.rank(), ": ", who, " has waited ", static_cast<int64_t>(seconds(now - start)),
                   " s for the other ranks to create theirs (MPI_Comm_idup); no rank has failed, died or "
                   "finished, so it goes on waiting");
      next_warning = now + clock_duration(stall_check);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void CallWaits::abandon(const std::string& why) {
  impl_.broken = why;
  for (auto& b : keep_) impl_.abandoned_buffers.push_back(b);
  if (parts_)
    for (const Participant& q : *parts_) {
      impl_.abandoned_tensors.push_back(q.input);
      impl_.abandoned_tensors.push_back(q.output);
    }
}

void CallWaits::wait(MPI_Request& req, const std::string& stage) {
  poll([&] {
         int done = 0;
         check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
         return done != 0;
       },
       limit_, [&] { return stage; });
}

void CallWaits::stall_warning(Clock::duration waited, const std::string& whom) const {
  logger::warn("rank ", impl_.rank, ": ", what_, " has waited ", static_cast<int64_t>(seconds(waited)),
               " s for ", whom, "; no rank has failed, died (", MpiRuntime::get().liveness().dead_after_seconds,
               " s without heartbeats) or finished, so it goes on waiting",
               limit_ >= kNoLimit ? std::string(" (no time limit)")
               : str_cat(" (up to its limit of ", seconds(limit_), " s)"),
               "; a chief-only callback or a rank that skipped a collective are the usual causes");
}

std::string CallWaits::coordinate(const std::string& mine,
                                  const std::function<std::string(const std::vector<std::string>&)>& judge) {
  const int n = impl_.size;
  if (n == 1) return judge({mine});
  MPI_Comm comm = impl_.comm;
  if (impl_.rank != 0) {
    auto out = std::make_shared<std::string>(mine);
    keep(out);
    MPI_Request sreq;
    check_mpi(MPI_Isend(out->data(), static_cast<int>(out->size()), MPI_CHAR, 0, kTagAgree, comm, &sreq),
              "MPI_Isend");
    MPI_Message msg;
    MPI_Status st;
    needs_ = [](int r) { return r == 0; };
    const NeedsReset reset{needs_};
    // (Rank 0 names a missing rank after the limit: twice that and more is rank 0's own silence.)
    const Clock::duration verdict_limit = limit_ >= kNoLimit ? kNoLimit : 2 * limit_ + std::chrono::seconds(1);
    poll([&] {
           int flag = 0;
           check_mpi(MPI_Improbe(0, kTagVerdict, comm, &flag, &msg, &st), "MPI_Improbe");
           return flag != 0;
         },
         verdict_limit, [] { return std::string("rank 0 (the coordinator) to hear from every rank and answer"); });
    int len = 0;
    MPI_Get_count(&st, MPI_CHAR, &len);
    std::string verdict(static_cast<size_t>(len), '\0');
    check_mpi(MPI_Mrecv(verdict.data(), len, MPI_CHAR, &msg, MPI_STATUS_IGNORE), "MPI_Mrecv");
    wait(sreq, "rank 0 to take this rank's side of the agreement");
    if (!verdict.empty() && verdict[0] == 'F') abandon(verdict.substr(1));
    return verdict.empty() ? verdict : verdict.substr(1);
  }
  std::vector<std::string> all(static_cast<size_t>(n));
  std::vector<char> arrived(static_cast<size_t>(n), 0);
  all[0] = mine;
  arrived[0] = 1;
  int missing = n - 1;
  needs_ = [&arrived](int r) { return !arrived[static_cast<size_t>(r)]; };
  std::optional<NeedsReset> reset(std::in_place, needs_);
  auto missing_ranks = [&] {
    std::string who;
    for (int r = 1; r < n; ++r)
      if (!arrived[static_cast<size_t>(r)]) who += str_cat(who.empty() ? "" : ", ", r);
    return who;
  };
  poll([&] {
         for (int r = 1; r < n; ++r) {
           if (arrived[static_cast<size_t>(r)]) continue;
           int flag = 0;
           MPI_Message msg;
           MPI_Status st;
           check_mpi(MPI_Improbe(r, kTagAgree, comm, &flag, &msg, &st), "MPI_Improbe");
           if (!flag) continue;
           int len = 0;
           MPI_Get_count(&st, MPI_CHAR, &len);
           std::string& s = all[static_cast<size_t>(r)];
           s.assign(static_cast<size_t>(len), '\0');
           check_mpi(MPI_Mrecv(s.data(), len, MPI_CHAR, &msg, MPI_STATUS_IGNORE), "MPI_Mrecv");
           arrived[static_cast<size_t>(r)] = 1;
           --missing;
         }
         return missing == 0;
       },
       limit_, [&] { return str_cat(missing == 1 ? "rank " : "ranks ", missing_ranks(), " to make this call"); },
       /*throw_on_timeout=*/false);
  reset.reset();
  // 'F': a failure (the communicator breaks everywhere); 'M': a mismatch; "": agreed.
  std::string verdict;
  if (missing) {
    verdict = str_cat("F", missing == 1 ? "rank " : "ranks ", missing_ranks(), " did not arrive within ",
                      seconds(limit_), " s (stalled, or called a different collective)");
  } else {
    const std::string diff = judge(all);
    if (!diff.empty()) verdict = "M" + diff;
  }
  auto text = std::make_shared<std::string>(verdict);
  keep(text);
  std::vector<MPI_Request> sends(static_cast<size_t>(n), MPI_REQUEST_NULL);
  for (int r = 1; r < n; ++r)
    check_mpi(MPI_Isend(text->data(), static_cast<int>(text->size()), MPI_CHAR, r, kTagVerdict, comm,
                        &sends[static_cast<size_t>(r)]),
              "MPI_Isend");
  for (int r = 1; r < n; ++r) {
    if (arrived[static_cast<size_t>(r)]) wait(sends[static_cast<size_t>(r)], str_cat("rank ", r, " to take the verdict"));
    else MPI_Request_free(&sends[static_cast<size_t>(r)]);
  }
  if (missing) abandon(verdict.substr(1));
  return verdict.empty() ? verdict : verdict.substr(1);
}

void CallWaits::require_agreement(const std::string& mine,
                                  const std::function<std::string(const std::vector<std::string>&)>& judge) {
  const std::string verdict = coordinate(mine, judge);
  if (verdict.empty()) return;
  if (impl_.broken.empty()) throw CollectiveMismatch(str_cat(what_, ": ", verdict));
  throw_error(what_, ": ", verdict);
}

}  // namespace spire::dist::mpi_detail

#endif  // SPIRE_WITH_MPI
