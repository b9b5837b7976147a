// Messenger helpers and LocalMessageHub (see messenger.h); the MPI messenger
// is in dist/mpi/mpi_messenger.cc (its stub without MPI is here, at the end).
#include "dist/comm/messenger.h"

#include <chrono>
#include <condition_variable>
#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>

#include "core/error.h"
#include "core/logger.h"

namespace spire::dist {

Messenger::~Messenger() = default;

std::optional<Message> Messenger::receive_watched(int from, int tag, double timeout_seconds,
                                                  const std::function<std::string()>& waiting_for,
                                                  const std::function<std::vector<int>()>& needed) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  auto waited = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  const double warn_every = stall_check_seconds();
  double next_warning = warn_every > 0 ? warn_every : 1e300;
  for (;;) {
    // The next piece of the wait: up to the next warning (or, to look at the
    // needed ranks, a second), or to the limit.
    double piece = std::max(0.001, std::min(needed ? 1.0 : 3600.0, next_warning - waited()));
    if (timeout_seconds > 0) {
      const double left = timeout_seconds - waited();
      if (left <= 0) return std::nullopt;
      piece = std::min(piece, left);
    }
    if (std::optional<Message> m = receive(from, tag, piece)) return m;
    if (needed)
      for (int r : needed()) {
        const std::string why = peer_finished(r);
        if (!why.empty()) throw_error("rank ", rank(), " waits for ", waiting_for(), ", but ", why);
      }
    const double w = waited();
    if (w >= next_warning && (timeout_seconds <= 0 || w < timeout_seconds)) {
      logger::warn("rank ", rank(), " has waited ", static_cast<int64_t>(w), " s for ", waiting_for(),
                   "; no rank failed or died, so it goes on waiting",
                   timeout_seconds > 0 ? str_cat(" (up to ", timeout_seconds, " s)") : std::string(" (no time limit)"));
      next_warning = w + warn_every;
    }
  }
}

// ---- MessageWriter / MessageReader ------------------------------------------------------

void MessageWriter::put_i64(int64_t v) { put_bytes(&v, sizeof v); }
void MessageWriter::put_bytes(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  data_.insert(data_.end(), c, c + n);
}
void MessageWriter::put_string(const std::string& s) {
  put_i64(static_cast<int64_t>(s.size()));
  put_bytes(s.data(), s.size());
}

const char* MessageReader::get_bytes(size_t n) {
  SPIRE_CHECK(n <= data_.size() - at_, what_, ": a malformed message (", data_.size(), " bytes; wanted ", n,
              " more at byte ", at_, ")");
  const char* p = data_.data() + at_;
  at_ += n;
  return p;
}
int64_t MessageReader::get_i64() {
  int64_t v;
  std::memcpy(&v, get_bytes(sizeof v), sizeof v);
  return v;
}
std::string MessageReader::get_string() {
  const int64_t n = get_i64();
  SPIRE_CHECK(n >= 0, what_, ": a malformed message (a string of length ", n, ")");
  const char* p = get_bytes(static_cast<size_t>(n));
  return std::string(p, static_cast<size_t>(n));
}

// ---- LocalMessageHub ----------------------------------------------------------------------

struct LocalMessageHub::Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::deque<Message>> boxes;  // per destination rank
  std::string failure;                      // "rank R failed: why" (the first)
};

namespace {

class LocalEndpoint : public Messenger {
 public:
  LocalEndpoint(std::shared_ptr<LocalMessageHub::Shared> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(s_->boxes.size()); }
  std::string name() const override { return "local"; }

  void send(int to, int tag, std::vector<char> data) override {
    SPIRE_CHECK(to >= 0 && to < size() && to != rank_, "LocalMessageHub: rank ", rank_,
                " cannot send to rank ", to, " of ", size());
    SPIRE_CHECK(tag >= 0, "LocalMessageHub: tag must be >= 0, got ", tag);
    {
      std::lock_guard<std::mutex> lk(s_->mu);
      s_->boxes[static_cast<size_t>(to)].push_back(Message{rank_, tag, std::move(data)});
    }
    s_->cv.notify_all();
  }

  std::optional<Message> receive(int from, int tag, double timeout_seconds) override {
    const bool limited = timeout_seconds > 0 && timeout_seconds < 1e9;  // (else no limit)
    const auto deadline = limited ? std::chrono::steady_clock::now() +
                                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                            std::chrono::duration<double>(timeout_seconds))
                                  : std::chrono::steady_clock::time_point::max();
    std::unique_lock<std::mutex> lk(s_->mu);
    auto& box = s_->boxes[static_cast<size_t>(rank_)];
    // The first waiting message that matches, taken out of the box.
    auto take = [&]() -> std::optional<Message> {
      for (auto it = box.begin(); it != box.end(); ++it)
        if ((from < 0 || it->source == from) && (tag < 0 || it->tag == tag)) {
          Message m = std::move(*it);
          box.erase(it);
          return m;
        }
      return std::nullopt;
    };
    // Another rank's failure ends the wait (not the one this rank announced).
    auto check_failure = [&] {
      if (!s_->failure.empty() && failed_by_ != s_->failure) throw_error("rank ", rank_, ": ", s_->failure);
    };
    for (;;) {
      check_failure();
      if (std::optional<Message> m = take()) return m;
      if (!limited) {
        s_->cv.wait(lk);  // (a send or a failure notifies)
        continue;
      }
      if (s_->cv.wait_until(lk, deadline) == std::cv_status::timeout) {
        // One last look (a message or failure may have come with the timeout).
        if (std::optional<Message> m = take()) return m;
        check_failure();
        return std::nullopt;
      }
    }
  }

  void announce_failure(const std::string& why) override {
    {
      std::lock_guard<std::mutex> lk(s_->mu);
      if (!s_->failure.empty()) return;
      s_->failure = str_cat("rank ", rank_, " failed: ", why);
      failed_by_ = s_->failure;
    }
    s_->cv.notify_all();
  }

 private:
  std::shared_ptr<LocalMessageHub::Shared> s_;
  int rank_;
  std::string failed_by_;  // the failure this rank announced (its own waits ignore it)
};

}  // namespace

LocalMessageHub::LocalMessageHub(int size) : shared_(std::make_shared<Shared>()) {
  SPIRE_CHECK(size >= 1, "LocalMessageHub: size must be >= 1, got ", size);
  shared_->boxes.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) endpoints_.push_back(std::make_shared<LocalEndpoint>(shared_, r));
}
LocalMessageHub::~LocalMessageHub() = default;

std::shared_ptr<Messenger> LocalMessageHub::endpoint(int rank) const {
  SPIRE_CHECK(rank >= 0 && rank < size(), "LocalMessageHub: no rank ", rank, " of ", size());
  return endpoints_[static_cast<size_t>(rank)];
}

#if !defined(SPIRE_WITH_MPI)
std::shared_ptr<Messenger> make_mpi_messenger(double) {
  throw_error("make_mpi_messenger: this Spire was built without MPI (SPIRE_MPI=OFF)");
}
#endif

}  // namespace spire::dist
