// The message transport over MPI: MpiMessenger, the Messenger of
// dist/comm/messenger.h on the ranks of the MPI job (make_mpi_messenger,
// declared there), which Spire's parameter servers talk through. Builds with
// SPIRE_MPI; without it, dist/comm/messenger.cc's make_mpi_messenger throws.
#include "dist/comm/messenger.h"

#if defined(SPIRE_WITH_MPI)

#include <chrono>
#include <optional>
#include <thread>
#include <utility>

#include "dist/mpi/mpi_waits.h"

namespace spire::dist {

using mpi_detail::ByteType;
using mpi_detail::CallWaits;
using mpi_detail::check_mpi;
using mpi_detail::Clock;
using mpi_detail::clock_duration;
using mpi_detail::duplicate_world;
using mpi_detail::keep_forever;
using mpi_detail::pause_between_polls;

namespace {

// Point-to-point messages on a duplicate of MPI_COMM_WORLD. Sends are
// MPI_Isend of a buffer the messenger keeps until MPI is done with it;
// receives probe (MPI_Improbe) then receive into a buffer of the message's
// size (MPI_Imrecv), polling the failure announcements and the time limit.
class MpiMessenger : public Messenger {
 public:
  explicit MpiMessenger(double timeout_seconds) {
    MpiRuntime& rt = MpiRuntime::get();
    rank_ = rt.rank();
    size_ = rt.size();
    comm_ = duplicate_world(timeout_seconds, "MPI messenger");
  }
  ~MpiMessenger() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // Sends still in flight after a second are left (their peer failed or
    // exited; the process is ending), as is the communicator then.
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    while (!pending_.empty() && Clock::now() < deadline) {
      complete_sends(/*may_throw=*/false);  // (nothing may throw here)
      if (!pending_.empty()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    // (MPI_Comm_free is collective in the standard, but OpenMPI frees the
    // duplicate locally; a rank with sends still pending leaves it.)
    if (pending_.empty()) MPI_Comm_free(&comm_);
    else
      for (auto& p : pending_) {
        MPI_Request_free(&p.req);
        keep_forever(std::move(*p.buf));
      }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  void send(int to, int tag, std::vector<char> data) override {
    SPIRE_CHECK(to >= 0 && to < size_ && to != rank_, "MPI messenger: rank ", rank_, " cannot send to rank ",
                to, " of ", size_);
    SPIRE_CHECK(tag >= 0 && tag < 32767, "MPI messenger: tag must be in [0, 32767), got ", tag);
    complete_sends();
    Pending p;
    p.buf = std::make_unique<std::vector<char>>(std::move(data));
    const ByteType bytes(p.buf->size());  // (2 GiB and more: a derived type)
    check_mpi(MPI_Isend(p.buf->data(), bytes.count(), bytes.type(), to, tag, comm_, &p.req), "MPI_Isend");
    pending_.push_back(std::move(p));
  }

  std::optional<Message> receive(int from, int tag, double timeout_seconds) override {
    const Clock::time_point start = Clock::now();
    const Clock::duration limit = CallWaits::limit_of(timeout_seconds);
    const Clock::time_point deadline = limit >= CallWaits::kNoLimit ? Clock::time_point::max() : start + limit;
    MPI_Message msg;
    MPI_Status st;
    for (int polls = 0;; ++polls) {
      int flag = 0;
      check_mpi(MPI_Improbe(from < 0 ? MPI_ANY_SOURCE : from, tag < 0 ? MPI_ANY_TAG : tag, comm_, &flag, &msg, &st),
                "MPI_Improbe");
      if (flag) break;
      complete_sends();
      if (polls % 64 == 0) check_failures(from);
      const Clock::time_point now = Clock::now();
      if (now >= deadline) return std::nullopt;
      // A server waits a whole step between requests, and shares the cores
      // with the workers: after a short spin it sleeps between polls.
      pause_between_polls(now - start, std::chrono::milliseconds(2));
    }
    MPI_Count len = 0;  // (MPI_Get_count's int cannot hold 2 GiB)
    check_mpi(MPI_Get_elements_x(&st, MPI_CHAR, &len), "MPI_Get_elements_x");
    // (A matched message that is never received holds its sender up; an error here ends
    // the job: the failure is announced and every rank stops.)
    SPIRE_CHECK(len >= 0, "MPI messenger: rank ", rank_, " got a message of unknown size from rank ", st.MPI_SOURCE);
    Message m;
    m.source = st.MPI_SOURCE;
    m.tag = st.MPI_TAG;
    try {
      m.data.resize(static_cast<size_t>(len));
    } catch (const std::bad_alloc&) {
      throw_error("MPI messenger: rank ", rank_, " cannot hold a ", len, "-byte message from rank ", m.source,
                  " (out of memory)");
    }
    MPI_Request req;
    {
      const ByteType bytes(static_cast<uint64_t>(len));
      check_mpi(MPI_Imrecv(m.data.data(), bytes.count(), bytes.type(), &msg, &req), "MPI_Imrecv");
    }
    for (int polls = 0;; ++polls) {
      int done = 0;
      check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return m;
      try {
        complete_sends();
        if (polls % 64 == 0) check_failures(-1);  // (the sender may have finished: its message is under way)
      } catch (...) {
        keep_forever(std::move(m.data));  // MPI may still write it
        throw;
      }
      // The message's data is on its way: its sender is polling too. The
      // time limit is for the message to come, not for its transfer (a
      // large shard over TCP takes what it takes; receive_watched passes
      // pieces of its wait as limits): a sender that dies meanwhile is
      // named by the heartbeats or mpirun.
      std::this_thread::yield();
    }
  }

  void announce_failure(const std::string& why) override { MpiRuntime::get().announce_failure(why); }
  double stall_check_seconds() const override { return MpiRuntime::get().liveness().stall_check_seconds; }
  std::string peer_finished(int rank) override {
    return MpiRuntime::get().finished_peer(CallWaits::kFinishedGraceSeconds, rank);
  }

 private:
  struct Pending {
    MPI_Request req = MPI_REQUEST_NULL;
    std::unique_ptr<std::vector<char>> buf;
  };
  // Drops the sends MPI is done with. An MPI error throws, unless
  // !may_throw (the destructor): the send is then kept as pending.
  void complete_sends(bool may_throw = true) {
    for (size_t i = 0; i < pending_.size();) {
      int done = 0;
      const int rc = MPI_Test(&pending_[i].req, &done, MPI_STATUS_IGNORE);
      if (may_throw) check_mpi(rc, "MPI_Test");
      if (rc == MPI_SUCCESS && done) {
        pending_[i] = std::move(pending_.back());
        pending_.pop_back();
      } else {
        ++i;
      }
    }
  }
  // Another rank's failure or death, or the end of rank `from` (-1: none
  // in particular: a server hears from whichever worker asks) while this
  // rank waits for its message.
  void check_failures(int from) {
    MpiRuntime& rt = MpiRuntime::get();
    const std::string failure = rt.peer_failure();
    if (!failure.empty()) throw_error("rank ", rank_, ": ", failure);
    if (from < 0) return;
    const std::string finished = rt.finished_peer(CallWaits::kFinishedGraceSeconds, from);
    if (!finished.empty())
      throw_error("MPI messenger: rank ", rank_, " waits for a message from rank ", from, ", but ", finished);
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<Pending> pending_;
};

}  // namespace

std::shared_ptr<Messenger> make_mpi_messenger(double timeout_seconds) {
  return std::make_shared<MpiMessenger>(timeout_seconds);
}

}  // namespace spire::dist

#endif  // SPIRE_WITH_MPI
