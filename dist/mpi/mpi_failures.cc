// MpiRuntime's failure announcements (see mpi_runtime.h): a rank that fails
// tells every other rank on the runtime's control communicator, and every
// bounded wait of dist/mpi (mpi_waits.h, the messenger) polls for such an
// announcement, so the others end at once naming the failed rank. The
// runtime's exit (mpi_runtime.cc) reads the same state to end a failed job
// with MPI_Abort.
#include "dist/mpi/mpi_runtime.h"

#if defined(SPIRE_WITH_MPI)

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/logger.h"
#include "dist/mpi/mpi_internal.h"

namespace spire::dist {

using mpi_detail::control_tag::kAck;
using mpi_detail::control_tag::kExiting;
using mpi_detail::control_tag::kFailure;

// Receives every failure announcement waiting on the control communicator,
// acknowledges each and marks the runtime failed; returns the first one
// ever received ("" while none came). The caller holds c.mu.
std::string MpiRuntime::receive_failure() {
  Control& c = *control_;
  for (;;) {
    int flag = 0;
    MPI_Message m;
    MPI_Status st;
    MPI_Improbe(MPI_ANY_SOURCE, kFailure, c.comm, &flag, &m, &st);
    if (!flag) break;
    int len = 0;
    MPI_Get_count(&st, MPI_CHAR, &len);
    std::string text(static_cast<size_t>(len), '\0');
    MPI_Mrecv(text.data(), len, MPI_CHAR, &m, MPI_STATUS_IGNORE);
    // 'F': the sender failed; 'D': the sender saw a rank die (the text names it).
    if (c.peer_failure.empty()) {
      if (!text.empty() && text[0] == 'D') c.peer_failure = text.substr(1);
      else c.peer_failure = str_cat("rank ", st.MPI_SOURCE, " failed: ", text.empty() ? text : text.substr(1));
    }
    c.lowest_announcer = std::min(c.lowest_announcer, st.MPI_SOURCE);
    c.responsive.insert(st.MPI_SOURCE);
    c.failed = true;
    mpi_detail::post_byte(c.comm, st.MPI_SOURCE, kAck);
  }
  return c.peer_failure;
}

bool MpiRuntime::failed() const {
  std::lock_guard<std::mutex> lk(control_->mu);
  return control_->failed;
}

void MpiRuntime::announce_failure(const std::string& why, double ack_timeout_seconds) {
  std::lock_guard<std::mutex> lk(control_->mu);
  control_->failed = true;
  if (control_->announced || !control_->peer_failure.empty()) return;  // said once; or a reaction to another's
  logger::error("rank ", rank_, " failed, telling the other ranks: ", why);
  announce('F', why, ack_timeout_seconds);
}

void MpiRuntime::announce_dead(int peer, const std::string& why) {
  std::lock_guard<std::mutex> lk(control_->mu);
  receive_failure();  // (another's announcement first: one failure is enough)
  if (control_->announced || !control_->peer_failure.empty()) return;
  control_->failed = true;
  control_->peer_failure = str_cat("rank ", peer, " stopped responding: ", why, " (noticed by rank ", rank_, ")");
  logger::error("rank ", rank_, ": ", control_->peer_failure, "; telling the other ranks");
  announce('D', control_->peer_failure, kAckTimeoutSeconds);
}

void MpiRuntime::announce(char kind, const std::string& text, double ack_timeout_seconds) {
  control_->announced = true;
  // Leaked on purpose: MPI may still read it when a rank never receives it.
  const std::string* msg = new std::string(kind + text.substr(0, 4000));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request req = MPI_REQUEST_NULL;  // (a send that fails, to a dead rank, leaves none)
    if (MPI_Isend(msg->data(), static_cast<int>(msg->size()), MPI_CHAR, r, kFailure, control_->comm, &req) ==
        MPI_SUCCESS)
      MPI_Request_free(&req);
  }
  // Wait (bounded) for every rank's acknowledgement: they have then logged
  // the failure. A dead or stalled rank never answers; the sends to it are
  // left (the process is ending).
  using mpi_detail::Clock;
  const auto deadline = Clock::now() + mpi_detail::clock_duration(ack_timeout_seconds);
  // Ranks announcing at the same time (several saw the same missing rank)
  // acknowledge each other's announcements meanwhile.
  int acks = 0;
  while (acks < size_ - 1 && Clock::now() < deadline) {
    receive_failure();
    int flag = 0;
    MPI_Message m;
    MPI_Status st;
    MPI_Improbe(MPI_ANY_SOURCE, kAck, control_->comm, &flag, &m, &st);
    if (flag) {
      char c;
      MPI_Mrecv(&c, 1, MPI_CHAR, &m, MPI_STATUS_IGNORE);
      control_->responsive.insert(st.MPI_SOURCE);
      ++acks;
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

void MpiRuntime::tell_exiting(int to) {
  static const char exiting = 1;
  MPI_Request req;
  if (MPI_Isend(&exiting, 1, MPI_CHAR, to, kExiting, control_->comm, &req) != MPI_SUCCESS) return;
  // One byte goes out eagerly; a dead receiver must not hold this rank up.
  const auto deadline = mpi_detail::Clock::now() + std::chrono::seconds(1);
  int done = 0;
  while (!done && mpi_detail::Clock::now() < deadline) {
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;  // (the request ended in error)
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!done) MPI_Request_free(&req);
}

bool MpiRuntime::wait_for_responsive_ranks_to_exit(double timeout_seconds) {
  using mpi_detail::Clock;
  const auto deadline = Clock::now() + mpi_detail::clock_duration(timeout_seconds);
  std::set<int> exited;
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(control_->mu);
      receive_failure();  // (a late announcer is alive too)
      // A lower rank announced meanwhile (both saw the same missing rank):
      // the ending is that rank's.
      if (control_->lowest_announcer < rank_) return false;
      for (;;) {
        int flag = 0;
        MPI_Message m;
        MPI_Status st;
        MPI_Improbe(MPI_ANY_SOURCE, kExiting, control_->comm, &flag, &m, &st);
        if (!flag) break;
        char c;
        MPI_Mrecv(&c, 1, MPI_CHAR, &m, MPI_STATUS_IGNORE);
        exited.insert(st.MPI_SOURCE);
      }
      if (std::includes(exited.begin(), exited.end(), control_->responsive.begin(),
                        control_->responsive.end()) ||
          Clock::now() >= deadline)
        return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string MpiRuntime::peer_failure() {
  std::lock_guard<std::mutex> lk(control_->mu);
  const bool known = !control_->peer_failure.empty();
  const std::string failure = receive_failure();
  if (!known && !failure.empty()) logger::error("rank ", rank_, ": ", failure);
  return failure;
}

}  // namespace spire::dist

#endif  // SPIRE_WITH_MPI
