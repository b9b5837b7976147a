// ThreadPool implementation (see core/thread_pool.h): one job at a time,
// chunks claimed through an atomic counter by the caller and the workers.
#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/error.h"

namespace spire {

namespace {

// How long a worker polls for the next loop, and the caller for the workers still in its
// loop, before sleeping on the condition variable. A sleeping thread takes tens of
// microseconds to wake (more in a VM), as long as a whole small kernel; OpenMP runtimes
// spin for the same reason.
constexpr auto kSpin = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Polls done() until it holds (true) or kSpin has passed (false).
template <typename Done>
bool spin_until(const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

// The CPUs this process may run on (its affinity mask: taskset, a container's cpuset).
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Whether a pool of `threads` polls: SPIRE_THREAD_POLL=0 never, =1 or unset when every thread
// has a CPU of its own (with more, a polling thread takes the CPU the thread it waits for needs).
bool pool_polls(int threads) {
  const char* v = std::getenv("SPIRE_THREAD_POLL");
  if (v != nullptr && *v != '\0') {
    const std::string s(v);
    if (s == "0") return false;
    if (s != "1") throw_error("ThreadPool: environment variable SPIRE_THREAD_POLL='", s, "' must be 0 or 1");
  }
  return threads <= usable_cpus();
}

}  // namespace

struct ThreadPool::Job {
  const RangeFn* fn = nullptr;
  int64_t n = 0;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};
  std::mutex error_mu;
  std::exception_ptr error;
};

ThreadPool::ThreadPool(int num_threads) {
  SPIRE_CHECK(num_threads >= 0, "ThreadPool: num_threads must be >= 0 (0 = hardware "
              "concurrency), got ", num_threads);
  if (num_threads == 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = num_threads;
  spin_ = pool_polls(num_threads_);
  workers_.reserve(static_cast<size_t>(num_threads_ - 1));
  try {
    for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    posted_.fetch_add(1, std::memory_order_release);  // ends the workers' polling at once
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int64_t ThreadPool::num_chunks(int64_t n, int64_t grain) const {
  if (n <= 0) return 0;
  grain = std::max<int64_t>(grain, 1);
  return std::max<int64_t>(1, std::min<int64_t>(num_threads_, n / grain));
}

void ThreadPool::run_chunks(Job& job) {
  for (;;) {
    const int64_t c = job.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= job.chunks) return;
    try {
      (*job.fn)(chunk_begin(job.n, job.chunks, c), chunk_begin(job.n, job.chunks, c + 1));
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.error_mu);
      if (!job.error) job.error = std::current_exception();
      job.next.store(job.chunks, std::memory_order_relaxed);  // skip the rest
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (spin_ && !stop_ && generation_ == seen) {
      lock.unlock();
      spin_until([&] { return posted_.load(std::memory_order_acquire) != seen; });
      lock.lock();
    }
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    Job* job = job_;
    if (job == nullptr) continue;  // woke after the job finished
    active_.fetch_add(1, std::memory_order_relaxed);
    lock.unlock();
    run_chunks(*job);
    lock.lock();
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_cv_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const RangeFn& fn) {
  if (n <= 0) return;
  const int64_t chunks = num_chunks(n, grain);
  if (chunks <= 1 || busy_.exchange(true, std::memory_order_acquire)) {
    fn(0, n);  // single chunk, no workers, or nested / concurrent use: inline
    return;
  }
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunks = chunks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    ++generation_;
    posted_.store(generation_, std::memory_order_release);
  }
  work_cv_.notify_all();
  run_chunks(job);
  {
    std::unique_lock<std::mutex> lock(mu_);
    job_ = nullptr;  // late workers skip it; those inside are counted by active_
  }
  // Workers still inside finish their chunks; wait for them to leave the job.
  if (!spin_ || !spin_until([&] { return active_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return active_.load(std::memory_order_acquire) == 0; });
  }
  busy_.store(false, std::memory_order_release);
  if (job.error) std::rethrow_exception(job.error);
}

// ---- LaneThreads -------------------------------------------------------------

struct LaneThreads::Batch {
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = 0;  // guarded by mu
  std::exception_ptr error;  // guarded by mu
  void finish(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (e && !error) error = e;
    --remaining;
    cv.notify_all();  // under the lock: the batch may be destroyed once it is released
  }
};

struct LaneThreads::Worker {
  std::thread thread;
  std::condition_variable cv;
  const std::function<void()>* task = nullptr;  // guarded by LaneThreads::mu_
  Batch* batch = nullptr;                       // guarded by LaneThreads::mu_
  bool stop = false;                            // guarded by LaneThreads::mu_
};

LaneThreads::LaneThreads() = default;

LaneThreads::~LaneThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : workers_) {
      w->stop = true;
      w->cv.notify_one();
    }
  }
  for (auto& w : workers_) w->thread.join();
}

int LaneThreads::num_workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(workers_.size());
}

void LaneThreads::worker_loop(Worker* w) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    w->cv.wait(lock, [&] { return w->stop || w->task != nullptr; });
    if (w->task == nullptr) return;  // stopping
    const std::function<void()>* task = w->task;
    Batch* batch = w->batch;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*task)();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    w->task = nullptr;
    w->batch = nullptr;
    idle_.push_back(w);  // idle before the batch ends, so the next batch finds it
    lock.unlock();
    batch->finish(error);
    lock.lock();
  }
}

void LaneThreads::run(const std::vector<std::function<void()>>& tasks) {
  if (tasks.empty()) return;
  Batch batch;
  batch.remaining = tasks.size() - 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Start the missing workers before handing out any task: if starting a
    // thread fails, nothing of this batch runs and the error reaches the caller.
    while (idle_.size() < tasks.size() - 1) {
      workers_.push_back(std::make_unique<Worker>());
      Worker* w = workers_.back().get();
      try {
        w->thread = std::thread([this, w] { worker_loop(w); });
      } catch (const std::exception& e) {
        workers_.pop_back();
        throw_error("could not start a lane thread (", workers_.size(), " running): ", e.what());
      }
      idle_.push_back(w);
    }
    for (size_t i = 1; i < tasks.size(); ++i) {
      Worker* w = idle_.back();
      idle_.pop_back();
      w->task = &tasks[i];
      w->batch = &batch;
      w->cv.notify_one();
    }
  }
  std::exception_ptr first;
  try {
    tasks[0]();
  } catch (...) {
    first = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(batch.mu);
  // No timeout here: every wait inside a lane is bounded (see RunContext),
  // so each task returns.
  batch.cv.wait(lock, [&] { return batch.remaining == 0; });
  if (first) std::rethrow_exception(first);
  if (batch.error) std::rethrow_exception(batch.error);
}

}  // namespace spire
