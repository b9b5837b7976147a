// RunContext: what every kernel of one Session::run shares: the run's id
// (the participants of a collective meet by run id and node), a
// cancellation flag (an error in one lane cancels the waits of every other
// lane, including waits inside collectives), and the deadline of every
// wait. wait_until() is the one blocking wait used by the executor and the
// in-process collectives: it returns when its condition holds, throws
// Cancelled when the run was cancelled, and throws spire::Error naming what
// it waited for when the timeout passes. No wait in a run is unbounded.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/error.h"

namespace spire {

/// Thrown by a wait that stopped because its run was cancelled (another
/// lane failed first). The executor reports that first error instead.
class Cancelled : public Error {
 public:
  explicit Cancelled(const std::string& what) : Error(what) {}
};

/// A run's cancellation flag. Waiters poll it in short slices while blocked
/// (see wait_until), so cancel() needs no list of waiters to wake.
class CancellationToken {
 public:
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  void cancel() { cancelled_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool> cancelled_{false};
};

struct RunContext {
  /// Unique per Session::run within its session (and never 0).
  uint64_t id = 0;
  /// Set when any lane of the run failed.
  CancellationToken* cancellation = nullptr;
  /// Longest a single wait may block (SessionOptions::timeout_seconds);
  /// zero or negative: no limit.
  std::chrono::milliseconds timeout{0};
  /// True when one thread runs every step of the run in order
  /// (SessionOptions::sequential): a kernel must not wait for another node
  /// of the same run, which could only run after it.
  bool one_lane = false;
};

/// How often a blocked wait wakes to look at the cancellation flag.
inline constexpr std::chrono::milliseconds kCancellationPollInterval{10};

/// Waits on `cv` (with `lock` held on its mutex) until `ready()` is true.
/// Throws Cancelled when `run`'s token is cancelled first, and spire::Error
/// "timed out after N s waiting for <what()>" when `run.timeout` passes
/// first. `what` is only called on timeout.
template <typename Ready, typename What>
void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                const RunContext& run, Ready ready, What what) {
  using Clock = std::chrono::steady_clock;
  const bool limited = run.timeout.count() > 0;
  const Clock::time_point deadline = limited ? Clock::now() + run.timeout : Clock::time_point::max();
  while (!ready()) {
    if (run.cancellation && run.cancellation->cancelled())
      throw Cancelled("cancelled: another part of the run failed");
    Clock::time_point now = Clock::now();
    if (limited && now >= deadline)
      throw_error("timed out after ",
                  std::chrono::duration<double>(run.timeout).count(), " s waiting for ", what(),
                  " (SessionOptions::timeout_seconds)");
    Clock::time_point wake = now + kCancellationPollInterval;
    cv.wait_until(lock, wake < deadline ? wake : deadline);
  }
}

}  // namespace spire
