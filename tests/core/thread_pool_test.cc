// Tests of ThreadPool (core/thread_pool.h): every index covered exactly once
// for many (n, grain, threads), chunk boundaries, exceptions rethrown in the
// caller, nested and zero-size calls, concurrent callers, destructor joins,
// and the Session / KernelContext wiring of SessionOptions::num_threads.
#include "core/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "spire.h"

namespace spire {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {1, 2, 3, 5, 17, 100, 1000, 4097}) {
      for (int64_t grain : {0, 1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> calls{0};
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LE(0, b);
          ASSERT_LT(b, e);
          ASSERT_LE(e, n);
          ++calls;
          for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
        EXPECT_EQ(calls.load(), pool.num_chunks(n, grain)) << "n=" << n << " grain=" << grain;
        EXPECT_LE(calls.load(), threads);
      }
    }
  }
}

TEST(ThreadPoolTest, ChunksAreBalancedAndRespectGrain) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.num_chunks(0, 1), 0);
  EXPECT_EQ(pool.num_chunks(10, 100), 1);
  EXPECT_EQ(pool.num_chunks(200, 100), 2);
  EXPECT_EQ(pool.num_chunks(1000, 1), 3);
  EXPECT_EQ(ThreadPool::chunk_begin(10, 3, 0), 0);
  EXPECT_EQ(ThreadPool::chunk_begin(10, 3, 1), 3);
  EXPECT_EQ(ThreadPool::chunk_begin(10, 3, 2), 6);
  EXPECT_EQ(ThreadPool::chunk_begin(10, 3, 3), 10);
}

TEST(ThreadPoolTest, UsesSeveralThreads) {
  ThreadPool pool(2);
  std::atomic<int> inside{0}, max_inside{0};
  // Each chunk waits (bounded) for the other one to start, so two threads must run.
  pool.parallel_for(2, 1, [&](int64_t, int64_t) {
    int now = ++inside;
    int prev = max_inside.load();
    while (now > prev && !max_inside.compare_exchange_weak(prev, now)) {
    }
    for (int spin = 0; spin < 2000 && max_inside.load() < 2; ++spin)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    --inside;
  });
  EXPECT_EQ(max_inside.load(), 2);
}

TEST(ThreadPoolTest, ZeroAndNegativeSizesDoNothing) {
  ThreadPool pool(3);
  int calls = 0;
  pool.parallel_for(0, 1, [&](int64_t, int64_t) { ++calls; });
  pool.parallel_for(-5, 1, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPoolTest, SingleThreadRunsInlineAsOneCall) {
  ThreadPool pool(1);
  const auto caller = std::this_thread::get_id();
  std::vector<std::pair<int64_t, int64_t>> ranges;
  pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    ranges.emplace_back(b, e);
  });
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0], std::make_pair(int64_t{0}, int64_t{1000}));
}

TEST(ThreadPoolTest, ExceptionsPropagateToCaller) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 20; ++rep) {
    EXPECT_THROW(pool.parallel_for(300, 1,
                                   [&](int64_t b, int64_t) {
                                     if (b >= 100) throw std::runtime_error("chunk failed");
                                   }),
                 std::runtime_error);
    // spire::Error keeps its type and message.
    try {
      pool.parallel_for(300, 1, [&](int64_t, int64_t) { throw_error("bad chunk ", 7); });
      FAIL() << "expected an exception";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad chunk 7"), std::string::npos);
    }
  }
  // The pool stays usable afterwards.
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPoolTest, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(100 * 50);
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int inner_calls = 0;
      pool.parallel_for(50, 1, [&](int64_t ib, int64_t ie) {
        ++inner_calls;
        for (int64_t j = ib; j < ie; ++j) ++hits[static_cast<size_t>(i * 50 + j)];
      });
      EXPECT_EQ(inner_calls, 1);  // the pool is busy: one inline call
    }
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPoolTest, ConcurrentCallersAllComplete) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep)
        pool.parallel_for(64, 1, [&](int64_t b, int64_t e) { total += e - b; });
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 4 * 200 * 64);
}

// Workers poll between loops and the caller polls for them, then both sleep: loops that
// follow each other closely and loops after a long gap must all return only once every
// chunk has run.
TEST(ThreadPoolTest, LoopsReturnAfterEveryChunkWhetherWorkersPolledOrSlept) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 3000; ++rep) {
    std::atomic<int64_t> done{0};
    pool.parallel_for(4, 1, [&](int64_t b, int64_t e) {
      volatile double s = 0;
      for (int i = 0; i < (rep % 7) * 200; ++i) s = s + i;  // chunks of different lengths
      done += e - b;
    });
    ASSERT_EQ(done.load(), 4) << "rep " << rep;
    if (rep % 500 == 499) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // > the poll
  }
}

TEST(ThreadPoolTest, PollsOnlyWhenEveryThreadHasACpuAndTheEnvironmentAllows) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cpus = CPU_COUNT(&set);
  EXPECT_TRUE(ThreadPool(cpus).polls());
  EXPECT_FALSE(ThreadPool(cpus + 1).polls());
  ASSERT_EQ(setenv("SPIRE_THREAD_POLL", "0", 1), 0);
  EXPECT_FALSE(ThreadPool(1).polls());
  ASSERT_EQ(setenv("SPIRE_THREAD_POLL", "yes", 1), 0);
  EXPECT_THROW(ThreadPool(1), Error);
  ASSERT_EQ(setenv("SPIRE_THREAD_POLL", "1", 1), 0);
  EXPECT_TRUE(ThreadPool(1).polls());
  unsetenv("SPIRE_THREAD_POLL");
}

TEST(ThreadPoolTest, DestructorJoinsWorkers) {
  for (int rep = 0; rep < 50; ++rep) {
    std::atomic<int> done{0};
    {
      ThreadPool pool(4);
      pool.parallel_for(8, 1, [&](int64_t b, int64_t e) { done += static_cast<int>(e - b); });
    }  // joins here; a hang or a crash fails the test
    EXPECT_EQ(done.load(), 8);
  }
  ThreadPool idle(3);  // destroyed without ever running a loop
}

TEST(ThreadPoolTest, ZeroMeansHardwareConcurrencyAndNegativeFails) {
  ThreadPool pool(0);
  EXPECT_GE(pool.num_threads(), 1);
  EXPECT_THROW(ThreadPool(-1), Error);
}

TEST(ThreadPoolTest, SessionGivesKernelsItsPool) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {4}, "x");
  Output y = ops::neg(x);
  SessionOptions opts;
  opts.num_threads = 3;
  Session s(g, opts);
  EXPECT_EQ(s.thread_pool().num_threads(), 3);
  auto out = s.run({y}, {{x, Tensor::from_vector<float>({4}, {1, 2, 3, 4})}});
  EXPECT_FLOAT_EQ(out[0].data<float>()[3], -4.f);
  Session single(g);
  EXPECT_EQ(single.thread_pool().num_threads(), 1);
}

TEST(ThreadPoolTest, KernelContextParallelForWithoutPoolRunsInline) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {4}, "x");
  KernelContext ctx(*x.node, Device::cpu(), nullptr, nullptr, nullptr);
  EXPECT_EQ(ctx.thread_pool(), nullptr);
  EXPECT_EQ(ctx.num_threads(), 1);
  int calls = 0;
  ctx.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 100);
  });
  EXPECT_EQ(calls, 1);
  ThreadPool pool(2);
  KernelContext pctx(*x.node, Device::cpu(), nullptr, nullptr, nullptr, nullptr, &pool);
  EXPECT_EQ(pctx.num_threads(), 2);
  std::atomic<int64_t> covered{0};
  pctx.parallel_for(100, 1, [&](int64_t b, int64_t e) { covered += e - b; });
  EXPECT_EQ(covered.load(), 100);
}

}  // namespace
}  // namespace spire

#include <condition_variable>

namespace spire {
namespace {

// Each task waits (bounded) until all tasks of its batch have started: a
// batch only completes when its tasks run at the same time.
struct Barrier {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  bool arrive_and_wait(int n) {
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    cv.notify_all();
    return cv.wait_for(lock, std::chrono::seconds(20), [&] { return arrived >= n; });
  }
};

TEST(LaneThreads, TasksOfABatchRunAtTheSameTimeAndWorkersAreReused) {
  LaneThreads lanes;
  for (int n : {1, 2, 5}) {
    for (int rep = 0; rep < 20; ++rep) {
      Barrier b;
      std::atomic<int> ok{0};
      std::vector<std::function<void()>> tasks;
      for (int i = 0; i < n; ++i)
        tasks.push_back([&] {
          if (b.arrive_and_wait(n)) ++ok;
        });
      lanes.run(tasks);
      ASSERT_EQ(ok.load(), n) << "tasks did not run concurrently";
    }
  }
  EXPECT_EQ(lanes.num_workers(), 4) << "the largest batch needed 4 workers besides the caller";
}

TEST(LaneThreads, ConcurrentBatchesGetDisjointWorkers) {
  // Two callers, each with a batch whose tasks wait for each other: shared
  // workers would deadlock; the barriers would then time out and fail.
  LaneThreads lanes;
  std::atomic<int> failures{0};
  auto caller = [&] {
    for (int rep = 0; rep < 30; ++rep) {
      Barrier b;
      std::vector<std::function<void()>> tasks(3, [&] {
        if (!b.arrive_and_wait(3)) ++failures;
      });
      lanes.run(tasks);
    }
  };
  std::thread t1(caller), t2(caller);
  t1.join();
  t2.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(lanes.num_workers(), 4);
}

TEST(LaneThreads, TheFirstExceptionIsRethrownAfterAllTasksFinished) {
  LaneThreads lanes;
  std::atomic<int> finished{0};
  std::vector<std::function<void()>> tasks{
      [&] { ++finished; },
      [&] {
        ++finished;
        throw Error("lane 1 failed");
      },
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        ++finished;
      }};
  EXPECT_THROW(
      {
        try {
          lanes.run(tasks);
        } catch (const Error& e) {
          EXPECT_STREQ(e.what(), "lane 1 failed");
          throw;
        }
      },
      Error);
  EXPECT_EQ(finished.load(), 3) << "run returned before every task finished";
  lanes.run({[] {}, [] {}});  // still usable
}

}  // namespace
}  // namespace spire
