// Messenger: tagged point-to-point messages between the ranks of a job, the
// transport of Spire's parameter servers (dist/trainers/distributed_trainers.h). A
// request-reply service needs what collectives do not give: a server
// answering whichever worker asks, in arrival order. Two implementations:
// - make_mpi_messenger() (dist/mpi/mpi_messenger.cc): the ranks of the MPI
//   job, on a duplicate of MPI_COMM_WORLD (its traffic never mixes with
//   the program's or the collectives'); failures travel by MpiRuntime's
//   announcements, so a rank that fails ends every other rank's wait.
// - LocalMessageHub: N endpoints in one process (threads as ranks), for
//   tests without mpirun, including ThreadSanitizer's.
// Messages from one rank to another arrive in the order they were sent;
// every wait is bounded and ends early when another rank announced a
// failure.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spire::dist {

/// One received message.
struct Message {
  int source = -1;
  int tag = 0;
  std::vector<char> data;
};

class Messenger {
 public:
  virtual ~Messenger();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi" or "local" (for messages).
  virtual std::string name() const = 0;
  /// Sends `data` to rank `to` with `tag` (>= 0) without waiting for it to
  /// be received. Throws spire::Error for a bad rank or tag.
  virtual void send(int to, int tag, std::vector<char> data) = 0;
  /// The first message from `from` (-1: any rank) with `tag` (-1: any)
  /// within `timeout_seconds` (<= 0: no limit), or nullopt when none came
  /// (the caller names what it waited for). Throws spire::Error ("rank R
  /// failed: why") as soon as another rank announced a failure (MPI: or
  /// died, or, for a given `from`, finished without sending).
  virtual std::optional<Message> receive(int from, int tag, double timeout_seconds) = 0;
  /// Tells every other rank that this one failed (`why`): their waits end
  /// with an error naming this rank.
  virtual void announce_failure(const std::string& why) = 0;
  /// How often a long wait logs a stall warning (receive_watched): MPI's
  /// MpiLiveness::stall_check_seconds (SPIRE_STALL_CHECK_SECONDS, 60 s by
  /// default), 60 s in-process; 0: never.
  virtual double stall_check_seconds() const { return 60; }

  /// receive() for up to `timeout_seconds` (<= 0: no limit), logging a
  /// stall warning naming waiting_for() every stall_check_seconds() while
  /// nothing comes (Horovod's stall inspector): a peer that is slow but
  /// alive delays the wait, one that failed or died ends it with the
  /// error receive() throws. nullopt when the limit passed.
  /// `needed` (may be null) lists the ranks the wait is for: one that
  /// finished meanwhile (peer_finished) ends it with an error naming it.
  std::optional<Message> receive_watched(int from, int tag, double timeout_seconds,
                                         const std::function<std::string()>& waiting_for,
                                         const std::function<std::vector<int>()>& needed = nullptr);
  /// "" unless rank `rank` reached its exit a few seconds ago or more (MPI:
  /// MpiRuntime::finished_peer); then why it will not send again.
  virtual std::string peer_finished(int rank) {
    (void)rank;
    return std::string();
  }
};

/// N ranks inside one process: endpoint(r) is rank r's Messenger (owned by
/// the hub; use it from one thread at a time).
class LocalMessageHub {
 public:
  explicit LocalMessageHub(int size);
  ~LocalMessageHub();
  int size() const { return static_cast<int>(endpoints_.size()); }
  std::shared_ptr<Messenger> endpoint(int rank) const;

  /// (Implementation detail: one mailbox per rank.)
  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
  std::vector<std::shared_ptr<Messenger>> endpoints_;
};

/// The ranks of the MPI job (builds with SPIRE_MPI; throws spire::Error
/// otherwise). Every rank must create it at the same point: it duplicates
/// MPI_COMM_WORLD, a collective call, waiting at most `timeout_seconds`
/// for the other ranks (<= 0: no limit; it ends early when one announced a
/// failure, died or finished). A receive from a given rank fails when that
/// rank finished (reached its exit) without sending the message.
std::shared_ptr<Messenger> make_mpi_messenger(double timeout_seconds = 0);

/// Small helpers to pack and unpack a message: integers and byte strings
/// appended in order, read back in the same order (a short or malformed
/// message is a spire::Error naming `what`).
class MessageWriter {
 public:
  void put_i64(int64_t v);
  void put_bytes(const void* p, size_t n);
  void put_string(const std::string& s);
  std::vector<char>& data() { return data_; }

 private:
  std::vector<char> data_;
};

class MessageReader {
 public:
  MessageReader(const std::vector<char>& data, std::string what) : data_(data), what_(std::move(what)) {}
  int64_t get_i64();
  /// The next `n` bytes (a pointer into the message).
  const char* get_bytes(size_t n);
  std::string get_string();
  bool at_end() const { return at_ == data_.size(); }
  /// Bytes not read yet.
  size_t remaining() const { return data_.size() - at_; }

 private:
  const std::vector<char>& data_;
  std::string what_;
  size_t at_ = 0;
};

}  // namespace spire::dist
