// Internal to dist/mpi (it includes mpi.h; see mpi_internal.h): the waits
// of the MPI backend. No wait of a communicator or messenger blocks in MPI:
// each polls its request with the other ranks' failure announcements
// (MpiRuntime::peer_failure, mpi_failures.cc; a rank the heartbeats found
// dead is announced the same way), the ranks that reached their exit
// (MpiRuntime::finished_peer), its time limit where it has one, and a
// collective's also with the run's cancellation, so a rank that fails,
// dies, stops or exits is named on every other rank instead of hanging it,
// while a slow rank only makes the waits for it log stall warnings. What a
// wait that ends early leaves behind (a request MPI cannot withdraw, and
// the buffers it may still write) is kept alive, never freed under MPI's
// feet.
//
// - duplicate_world: a communicator's or messenger's own duplicate of
//   MPI_COMM_WORLD, made with a bounded wait;
// - CallWaits: one collective call's waits, and rank 0's coordination of
//   the agreement every call starts with (MpiCommunicator::run, agree);
// - keep_forever: a buffer kept for the rest of the process;
// - pause_between_polls: how long a wait pauses between its polls (the
//   collectives' and the messenger's).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/run_context.h"
#include "dist/mpi/mpi_internal.h"

namespace spire::dist::mpi_detail {

/// Keeps a buffer MPI may still write (an abandoned receive or send) alive
/// for the rest of the process (reachable, so not reported as a leak).
void keep_forever(std::vector<char>&& b);

/// A duplicate of MPI_COMM_WORLD for `who` (a communicator or messenger of
/// its own: no message of others can match its calls). The duplicate is
/// collective, so it is polled: a rank that never comes ends the wait
/// after `timeout_seconds` (<= 0: no limit, stall warnings only) with an
/// error, and a failure another rank announces (or a dead or finished
/// rank) ends it at once, naming that rank; a blocking MPI_Comm_dup would
/// wait forever. On an error the pending duplicate is left to MPI, with the
/// handle it may still write kept alive for the rest of the process (MPI
/// cannot withdraw it); MPI_COMM_WORLD's collectives are then out of step
/// with a late rank's, so the job should end, as the error says.
MPI_Comm duplicate_world(double timeout_seconds, const std::string& who);

/// The pause between two polls of a wait that began `waited` ago: none for
/// the first 20 us, then a yield of the core until `yield_until`, then
/// 50 us sleeps. (MPI's TCP transport moves data only inside MPI calls, so
/// a wait that pauses early adds the pause to a message's latency.)
inline void pause_between_polls(Clock::duration waited, Clock::duration yield_until) {
  if (waited < std::chrono::microseconds(20)) return;
  if (waited < yield_until) std::this_thread::yield();
  else std::this_thread::sleep_for(std::chrono::microseconds(50));
}

/// One call's waits: every poll honours the run's cancellation, the call's
/// time limit and the other ranks' failure announcements; whatever ends a
/// wait early leaves the communicator broken, keeping the call's buffers
/// alive (MPI cannot withdraw a started operation).
class CallWaits {
 public:
  /// A limit that never passes.
  static constexpr Clock::duration kNoLimit = Clock::duration::max();
  /// How long after a rank said it reached its exit a wait that still
  /// needs it fails: what that rank sent before it finished arrives by then.
  static constexpr double kFinishedGraceSeconds = 3;
  /// `seconds` as a wait's limit: kNoLimit for <= 0 (no limit), and for
  /// 1e9 s and more (infinity: no time point that far ahead exists).
  static Clock::duration limit_of(double seconds) {
    return seconds > 0 && seconds < 1e9 ? clock_duration(seconds) : kNoLimit;
  }
  /// `what` names the call in errors; `rc` (may be null) gives the
  /// cancellation; `parts` (may be null) are the call's tensors, kept with
  /// its buffers when the call is abandoned.
  CallWaits(MpiCommunicator::Impl& impl, std::string what, const RunContext* rc, Clock::duration limit,
            std::vector<Participant>* parts)
      : impl_(impl), what_(std::move(what)), rc_(rc), limit_(limit), parts_(parts) {}
  const std::string& what() const { return what_; }
  Clock::duration limit() const { return limit_; }

  /// Keeps `b` alive as long as the communicator if the call is abandoned.
  void keep(std::shared_ptr<void> b) { keep_.push_back(std::move(b)); }

  /// Marks the communicator broken (`why`) and keeps the call's buffers.
  void abandon(const std::string& why);

  /// Polls done() until it returns true; false when `limit` passed (only
  /// with throw_on_timeout = false; kNoLimit: never). Throws on
  /// cancellation, on another rank's failure (a dead rank is one: the
  /// heartbeats, mpi_heartbeat.cc), when a rank the agreement still waits
  /// for finished (reached its exit) more than kFinishedGraceSeconds ago,
  /// and on timeout. waiting_for() says what the wait is for ("rank 2 in the
  /// ring"): the timeout's error and the stall warnings logged every
  /// MpiLiveness::stall_check_seconds name it.
  template <typename Done, typename Text>
  bool poll(Done&& done, Clock::duration limit, Text&& waiting_for, bool throw_on_timeout = true) {
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = limit >= kNoLimit ? Clock::time_point::max() : start + limit;
    const MpiLiveness& live = MpiRuntime::get().liveness();
    const Clock::duration stall_every =
        live.stall_check_seconds > 0 ? clock_duration(live.stall_check_seconds) : kNoLimit;
    Clock::time_point next_warning = stall_every >= kNoLimit ? Clock::time_point::max() : start + stall_every;
    // Latency matters (a step of recursive doubling is one message), and
    // MPI's TCP transport moves data only inside MPI calls: poll without
    // pause for 20 us, then yielding the core between polls until a second
    // has passed, then every 50 us (pause_between_polls). The hard spin is
    // bounded in time, not in polls: a poll over TCP costs microseconds, so
    // a count of polls would spin for longer than a small message takes,
    // and ranks sharing a core need the core back. Yielding from the start,
    // or sleeping within the first second, slows small messages (every step
    // of a small allreduce waits out a pause).
    for (int spins = 0;; ++spins) {
      if (done()) return true;
      if (rc_ && rc_->cancellation && rc_->cancellation->cancelled()) {
        abandon(str_cat(what_, " was abandoned by a cancelled run"));
        throw Cancelled(str_cat(what_, ": cancelled while waiting for the other ranks"));
      }
      if (spins % 64 == 0) check_peers(waiting_for);
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        if (!throw_on_timeout) return false;
        const std::string text = str_cat("timed out after ", seconds(limit), " s waiting for ", waiting_for(),
                                         "; a rank may be stalled or have called a different collective");
        abandon(str_cat(what_, ": ", text));
        throw_error(what_, ": ", text);
      }
      if (now >= next_warning) {
        stall_warning(now - start, waiting_for());
        next_warning = now + stall_every;
      }
      pause_between_polls(now - start, std::chrono::seconds(1));
    }
  }

  /// Waits for `req`; `stage` says what for (and whom) in the timeout's error.
  void wait(MPI_Request& req, const std::string& stage);

  /// Rank 0 coordinates: every rank sends `mine` to rank 0, which calls
  /// judge(all ranks' strings) for the verdict ("" = agreed) and sends it
  /// to every rank; every rank returns it. A rank missing at rank 0 after
  /// the limit makes the verdict name it (and breaks the communicator on
  /// every rank that hears it); a rank 0 that does not answer within twice
  /// the limit is named by the others.
  std::string coordinate(const std::string& mine,
                         const std::function<std::string(const std::vector<std::string>&)>& judge);
  /// coordinate(), then the verdict thrown on every rank, naming the call,
  /// when it is not "": CollectiveMismatch when the ranks disagree (the
  /// communicator stays usable), spire::Error when a rank is missing (the
  /// communicator is broken).
  void require_agreement(const std::string& mine,
                         const std::function<std::string(const std::vector<std::string>&)>& judge);

 private:
  /// Throws (abandoning the call) when another rank failed or died, or
  /// finished while this wait goes on.
  template <typename Text>
  void check_peers(Text&& waiting_for) {
    MpiRuntime& rt = MpiRuntime::get();
    std::string failure = rt.peer_failure();
    if (failure.empty() && needs_) {
      const std::string finished = rt.finished_peer(kFinishedGraceSeconds, needs_);
      if (!finished.empty()) failure = str_cat(finished, " (this rank waits for ", waiting_for(), ")");
    }
    if (failure.empty()) return;
    abandon(failure);
    throw_error(what_, ": ", failure);
  }
  /// Logs that this call has waited `waited` for `whom` (the ranks answer
  /// heartbeats: slow, not dead).
  void stall_warning(Clock::duration waited, const std::string& whom) const;
  MpiCommunicator::Impl& impl_;
  // The ranks whose end (reached their exit) ends the wait: those not yet
  // arrived at an agreement (coordinate). Null elsewhere: once every rank
  // agreed to a call, a rank that finished has sent what the call needs of it.
  std::function<bool(int)> needs_;
  std::string what_;
  const RunContext* rc_;
  Clock::duration limit_;
  std::vector<Participant>* parts_;
  std::vector<std::shared_ptr<void>> keep_;
};

}  // namespace spire::dist::mpi_detail
