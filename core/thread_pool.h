// ThreadPool: a fixed set of worker threads that runs parallel_for loops for
// the CPU kernels. A Session owns one per CPU device (its share of
// SessionOptions::num_threads) and hands it to kernels through
// KernelContext; there is no process-wide pool. LaneThreads (below) runs
// the executor's lanes, one host thread each.
//
// parallel_for(n, grain, fn) splits [0, n) into at most num_threads()
// contiguous chunks of at least `grain` indices (boundaries depend only on n,
// grain and num_threads(), so kernels that combine per-chunk results stay
// deterministic for a given thread count), runs them on the workers and the
// calling thread, and returns when all are done. The first exception thrown
// by a chunk is rethrown in the caller (remaining unstarted chunks are
// skipped). A call made while the pool is already running a loop (a nested
// call from inside a chunk, or a second thread sharing the session) runs
// inline on its caller as fn(0, n). With num_threads() == 1 there are no
// workers and every call is the inline fn(0, n).
//
// Waiting: a worker polls for the next loop, and the caller for workers
// still in its loop, for up to 200 us before sleeping on a condition
// variable (waking a sleeping thread costs about as much as a small kernel).
// Pools with more threads than the process may use CPUs (its affinity mask)
// never poll, nor any pool with SPIRE_THREAD_POLL=0 in the environment.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace spire {

class ThreadPool {
 public:
  using RangeFn = std::function<void(int64_t begin, int64_t end)>;

  /// `num_threads` counts the calling thread: num_threads - 1 workers are
  /// started. 0 means std::thread::hardware_concurrency(). Throws
  /// spire::Error for a negative count.
  explicit ThreadPool(int num_threads);
  /// Stops and joins the workers.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads a loop may use (workers + the caller), >= 1.
  int num_threads() const { return num_threads_; }
  /// Whether waiting threads poll before sleeping (see the file comment).
  bool polls() const { return spin_; }

  /// Runs fn over [0, n) split into chunks (see the file comment). n <= 0
  /// does nothing; grain < 1 counts as 1.
  void parallel_for(int64_t n, int64_t grain, const RangeFn& fn);

  /// The number of chunks parallel_for(n, grain, ...) uses.
  int64_t num_chunks(int64_t n, int64_t grain) const;
  /// Chunk c of n indices split into `chunks` near-equal parts: [begin, end).
  static int64_t chunk_begin(int64_t n, int64_t chunks, int64_t c) { return n * c / chunks; }

 private:
  struct Job;
  void worker_loop();
  void run_chunks(Job& job);

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // workers wait for a job or stop
  std::condition_variable done_cv_;  // the caller waits for workers to leave the job
  Job* job_ = nullptr;               // guarded by mu_
  uint64_t generation_ = 0;          // guarded by mu_; bumped per job
  std::atomic<uint64_t> posted_{0};  // generation_, for workers polling without the lock
  std::atomic<int> active_{0};       // changed under mu_; workers inside job_
  bool spin_ = false;                // poll before sleeping (see polls())
  bool stop_ = false;                // guarded by mu_
  std::atomic<bool> busy_{false};    // a loop is running (nested calls run inline)
};

/// Runs batches of tasks at the same time, each on its own thread (the
/// executor's lanes, one per device): run(tasks) runs tasks[0] on the
/// calling thread and every other task on an idle worker, starting workers
/// on demand and reusing them in later batches, and returns when every task
/// has finished. Concurrent run() calls get disjoint workers, so the tasks
/// of a batch may wait for each other without deadlock. A task's exception
/// is rethrown by run() (the first one, after all tasks finished).
class LaneThreads {
 public:
  LaneThreads();
  /// Joins the workers (no run() may be in progress).
  ~LaneThreads();
  LaneThreads(const LaneThreads&) = delete;
  LaneThreads& operator=(const LaneThreads&) = delete;

  void run(const std::vector<std::function<void()>>& tasks);
  /// Workers started so far.
  int num_workers() const;

 private:
  struct Batch;
  struct Worker;
  void worker_loop(Worker* w);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;  // guarded by mu_
  std::vector<Worker*> idle_;                     // guarded by mu_
};

}  // namespace spire
