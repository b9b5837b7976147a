// MpiRuntime's liveness (see mpi_runtime.h, MpiLiveness): the heartbeat
// thread that tells a dead or stopped rank from a slow one, and the notices
// of ranks that reached their exit. Both travel on the runtime's control
// communicator; a dead rank is announced through mpi_failures.cc, which
// every bounded wait of dist/mpi already polls.
#include "dist/mpi/mpi_runtime.h"

#if defined(SPIRE_WITH_MPI)

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <set>

#include "core/logger.h"
#include "dist/mpi/mpi_internal.h"

namespace spire::dist {

using mpi_detail::Clock;
using mpi_detail::clock_duration;
using mpi_detail::post_byte;
using mpi_detail::take_bytes;
using mpi_detail::seconds;
using mpi_detail::control_tag::kFinished;
using mpi_detail::control_tag::kHeartbeat;

namespace {

// A non-negative number of seconds from environment variable `name` (read
// by `getenv`, or std::getenv when null), or `fallback` when it is unset or
// empty.
double seconds_from_env(const std::function<const char*(const char*)>& getenv, const char* name, double fallback) {
  const char* text = getenv ? getenv(name) : std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  SPIRE_CHECK(end != text && *end == '\0' && errno == 0 && std::isfinite(v) && v >= 0 && v <= 1e6,
              "MPI runtime: ", name, "='", text, "' is not a number of seconds in [0, 1e6]");
  return v;
}

// MPI_Finalize deletes MPI_COMM_SELF's attributes first, while MPI still
// works: the heartbeat thread of a program that finalizes MPI itself stops
// there, before MPI goes away under it, after telling the others that this
// rank finished.
int stop_heartbeat_at_finalize(MPI_Comm, int, void*, void* runtime) {
  static_cast<MpiRuntime*>(runtime)->finalizing();
  return MPI_SUCCESS;
}

}  // namespace

MpiLiveness MpiLiveness::from_env(const std::function<const char*(const char*)>& getenv) {
  MpiLiveness l;
  l.heartbeat_seconds = seconds_from_env(getenv, "SPIRE_MPI_HEARTBEAT_SECONDS", l.heartbeat_seconds);
  l.dead_after_seconds = seconds_from_env(getenv, "SPIRE_MPI_DEAD_AFTER_SECONDS", l.dead_after_seconds);
  l.stall_check_seconds = seconds_from_env(getenv, "SPIRE_STALL_CHECK_SECONDS", l.stall_check_seconds);
  SPIRE_CHECK(l.heartbeat_seconds > 0, "MPI runtime: SPIRE_MPI_HEARTBEAT_SECONDS must be > 0");
  SPIRE_CHECK(l.dead_after_seconds == 0 || l.dead_after_seconds >= 4 * l.heartbeat_seconds,
              "MPI runtime: SPIRE_MPI_DEAD_AFTER_SECONDS (", l.dead_after_seconds,
              ") must be 0 (never) or at least 4 heartbeats (SPIRE_MPI_HEARTBEAT_SECONDS = ", l.heartbeat_seconds,
              ")");
  return l;
}

void MpiRuntime::start_heartbeat() {
  if (size_ < 2) return;
  // The hook must exist before the thread: without it the thread could
  // call MPI after a program's own MPI_Finalize. (A rank that does not judge,
  // dead_after_seconds = 0, still beats: its neighbours may judge.)
  int key = MPI_KEYVAL_INVALID;
  if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, stop_heartbeat_at_finalize, &key, this) != MPI_SUCCESS ||
      MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr) != MPI_SUCCESS) {
    logger::warn("rank ", rank_, ": MPI refused the hook at MPI_Finalize; no heartbeats: a dead or stopped rank "
                 "is not detected");
    return;
  }
  control_->finalize_key = key;
  const Clock::time_point now = Clock::now();
  for (int peer : {(rank_ + size_ - 1) % size_, (rank_ + 1) % size_}) control_->last_beat[peer] = now;
  control_->heartbeat = std::thread([this] { heartbeat_loop(); });
}

void MpiRuntime::finalizing() {
  if (!failed()) tell_finished();
  stop_heartbeat();
}

void MpiRuntime::forget_finalize_hook() {
  if (control_->finalize_key == MPI_KEYVAL_INVALID) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    // (Deleting the attribute calls the hook once more: it finds the thread stopped.)
    MPI_Comm_delete_attr(MPI_COMM_SELF, control_->finalize_key);
    MPI_Comm_free_keyval(&control_->finalize_key);
  }
  control_->finalize_key = MPI_KEYVAL_INVALID;
}

void MpiRuntime::stop_heartbeat() {
  Control& c = *control_;
  {
    std::lock_guard<std::mutex> lk(c.beat_mu);
    c.stop = true;
  }
  c.beat_cv.notify_all();
  if (c.heartbeat.joinable() && c.heartbeat.get_id() != std::this_thread::get_id()) c.heartbeat.join();
}

std::set<int> MpiRuntime::finished_ranks() {
  std::lock_guard<std::mutex> lk(control_->mu);
  receive_finished();
  std::set<int> out;
  for (const auto& [r, when] : control_->finished) out.insert(r);
  return out;
}

void MpiRuntime::heartbeat_loop() {
  Control& c = *control_;
  const Clock::duration every = clock_duration(liveness_.heartbeat_seconds);
  const bool judge = liveness_.dead_after_seconds > 0;
  const Clock::duration dead_after = clock_duration(liveness_.dead_after_seconds);
  Clock::time_point last_round = Clock::now();
  std::unique_lock<std::mutex> lk(c.beat_mu);
  while (!c.stop) {
    for (const auto& [peer, last] : c.last_beat) {
      (void)last;
      post_byte(c.comm, peer, kHeartbeat);
    }
    // Every heartbeat that arrived (from a neighbour that was stopped and
    // continued, a burst), before judging; a beat counts from when it is
    // taken, so one sent just before a suspension of the whole job counts
    // as fresh when the job resumes.
    take_bytes(c.comm, kHeartbeat, [&](int from) { c.last_beat[from] = Clock::now(); });
    const Clock::time_point now = Clock::now();
    // This thread itself did not run for a while (the whole job suspended
    // and resumed, a VM paused, swapping): the neighbours' silence is this
    // rank's own, so they start afresh rather than being judged.
    if (now - last_round > 4 * every)
      for (auto& [peer, last] : c.last_beat) last = now;
    last_round = now;
    int dead = -1;
    double silent = 0;
    if (judge)
      for (const auto& [peer, last] : c.last_beat)
        if (now - last >= dead_after) {
          dead = peer;
          silent = seconds(now - last);
          break;
        }
    if (dead >= 0) {
      lk.unlock();  // (announcing waits for acknowledgements; the beats' state is not needed)
      // A rank that reached its exit (and told so) may have stopped beating:
      // a program's own MPI_Finalize stops the thread and waits there.
      const bool finished = finished_ranks().count(dead) > 0;
      if (!finished)
        announce_dead(dead, str_cat("no heartbeat for ", silent, " s (killed, stopped, or its host is unreachable; "
                                    "SPIRE_MPI_DEAD_AFTER_SECONDS = ", liveness_.dead_after_seconds, ")"));
      lk.lock();
      if (finished) c.last_beat.erase(dead);  // (no longer watched; nor beaten to)
      else c.stop = true;  // (the job is ending: one announcement is enough)
    }
    c.beat_cv.wait_for(lk, every, [&] { return c.stop; });
  }
}

void MpiRuntime::tell_finished() {
  {
    std::lock_guard<std::mutex> lk(control_->mu);
    if (control_->told_finished || size_ < 2) return;
    control_->told_finished = true;
  }
  for (int r = 0; r < size_; ++r)
    if (r != rank_) post_byte(control_->comm, r, kFinished);
}

void MpiRuntime::receive_finished() {
  Control& c = *control_;
  take_bytes(c.comm, kFinished, [&](int from) { c.finished.emplace(from, Clock::now()); });
}

std::string MpiRuntime::finished_peer(double grace_seconds, const std::function<bool(int)>& needed) {
  std::lock_guard<std::mutex> lk(control_->mu);
  receive_finished();
  const Clock::time_point now = Clock::now();
  for (const auto& [r, when] : control_->finished)
    if (needed(r) && now - when >= clock_duration(grace_seconds))
      return str_cat("rank ", r, " finished (its notice that it reached its exit came ",
                     static_cast<int64_t>(seconds(now - when)), " s ago) and will not answer");
  return std::string();
}

std::string MpiRuntime::finished_peer(double grace_seconds, int rank) {
  return finished_peer(grace_seconds, [rank](int r) { return rank < 0 || r == rank; });
}

}  // namespace spire::dist

#endif  // SPIRE_WITH_MPI
