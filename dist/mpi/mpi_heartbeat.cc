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

#include "core/logger.h"
#include "dist/mpi/mpi_internal.h"

namespace spire::dist {

using mpi_detail::Clock;
using mpi_detail::clock_duration;
using mpi_detail::seconds;
using mpi_detail::control_tag::kFinished;
using mpi_detail::control_tag::kHeartbeat;

namespace {

// A non-negative number of seconds from environment variable `name`, or
// `fallback` when it is unset or empty.
double seconds_from_env(const char* name, double fallback) {
  const char* text = std::getenv(name);
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

MpiLiveness MpiLiveness::from_env() {
  MpiLiveness l;
  l.heartbeat_seconds = seconds_from_env("SPIRE_MPI_HEARTBEAT_SECONDS", l.heartbeat_seconds);
  l.dead_after_seconds = seconds_from_env("SPIRE_MPI_DEAD_AFTER_SECONDS", l.dead_after_seconds);
  l.stall_check_seconds = seconds_from_env("SPIRE_STALL_CHECK_SECONDS", l.stall_check_seconds);
  SPIRE_CHECK(l.heartbeat_seconds > 0, "MPI runtime: SPIRE_MPI_HEARTBEAT_SECONDS must be > 0");
  SPIRE_CHECK(l.dead_after_seconds == 0 || l.dead_after_seconds >= 4 * l.heartbeat_seconds,
              "MPI runtime: SPIRE_MPI_DEAD_AFTER_SECONDS (", l.dead_after_seconds,
              ") must be 0 (never) or at least 4 heartbeats (SPIRE_MPI_HEARTBEAT_SECONDS = ", l.heartbeat_seconds,
              ")");
  return l;
}

void MpiRuntime::start_heartbeat() {
  if (size_ < 2 || liveness_.dead_after_seconds <= 0) return;
  int key = MPI_KEYVAL_INVALID;
  if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, stop_heartbeat_at_finalize, &key, this) == MPI_SUCCESS)
    MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr);
  const Clock::time_point now = Clock::now();
  for (int peer : {(rank_ + size_ - 1) % size_, (rank_ + 1) % size_}) control_->last_beat[peer] = now;
  control_->heartbeat = std::thread([this] { heartbeat_loop(); });
}

void MpiRuntime::finalizing() {
  if (!failed()) tell_finished();
  stop_heartbeat();
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

void MpiRuntime::heartbeat_loop() {
  Control& c = *control_;
  const Clock::duration every = clock_duration(liveness_.heartbeat_seconds);
  const Clock::duration dead_after = clock_duration(liveness_.dead_after_seconds);
  static const char beat = 1;
  std::unique_lock<std::mutex> lk(c.beat_mu);
  while (!c.stop) {
    for (const auto& [peer, last] : c.last_beat) {
      (void)last;
      MPI_Request req = MPI_REQUEST_NULL;  // (a send to a dead rank may fail: it leaves none)
      if (MPI_Isend(&beat, 1, MPI_CHAR, peer, kHeartbeat, c.comm, &req) == MPI_SUCCESS) MPI_Request_free(&req);
    }
    // Every heartbeat that arrived (from a neighbour that was stopped and
    // continued, a burst), before judging: a rank whose own thread did not
    // run for a while must not take its neighbours for dead.
    for (;;) {
      int flag = 0;
      MPI_Message m;
      MPI_Status st;
      if (MPI_Improbe(MPI_ANY_SOURCE, kHeartbeat, c.comm, &flag, &m, &st) != MPI_SUCCESS || !flag) break;
      char got;
      MPI_Mrecv(&got, 1, MPI_CHAR, &m, MPI_STATUS_IGNORE);
      c.last_beat[st.MPI_SOURCE] = Clock::now();
    }
    const Clock::time_point now = Clock::now();
    for (const auto& [peer, last] : c.last_beat) {
      if (now - last < dead_after) continue;
      const int dead = peer;
      const double silent = seconds(now - last);
      lk.unlock();  // (announcing waits for acknowledgements; the beats' state is not needed)
      // A rank that reached its exit has stopped beating only if it also
      // stopped its thread: that happens after the barrier at exit, which
      // this rank would have left too. Report it all the same.
      announce_dead(dead, str_cat("no heartbeat for ", silent, " s (killed, stopped, or its host is unreachable; "
                                  "SPIRE_MPI_DEAD_AFTER_SECONDS = ", liveness_.dead_after_seconds, ")"));
      lk.lock();
      c.stop = true;  // (the job is ending: one announcement is enough)
      break;
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
  static const char finished = 1;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Isend(&finished, 1, MPI_CHAR, r, kFinished, control_->comm, &req) == MPI_SUCCESS)
      MPI_Request_free(&req);
  }
}

std::string MpiRuntime::finished_peer(double grace_seconds, int rank) {
  std::lock_guard<std::mutex> lk(control_->mu);
  Control& c = *control_;
  for (;;) {
    int flag = 0;
    MPI_Message m;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, kFinished, c.comm, &flag, &m, &st) != MPI_SUCCESS || !flag) break;
    char got;
    MPI_Mrecv(&got, 1, MPI_CHAR, &m, MPI_STATUS_IGNORE);
    c.finished.emplace(st.MPI_SOURCE, Clock::now());
  }
  const Clock::time_point now = Clock::now();
  for (const auto& [r, when] : c.finished)
    if ((rank < 0 || r == rank) && now - when >= clock_duration(grace_seconds))
      return str_cat("rank ", r, " finished (reached its exit ", static_cast<int64_t>(seconds(now - when)),
                     " s ago) and will not answer");
  return std::string();
}

}  // namespace spire::dist

#endif  // SPIRE_WITH_MPI
