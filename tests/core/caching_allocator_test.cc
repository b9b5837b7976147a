// Tests of the device-independent caching allocator (core/caching_allocator.h)
// on a fake device with a capacity limit: reuse, splitting and merging,
// out-of-memory errors and the retry after releasing the cache, statistics,
// and a randomized run that checks live blocks never overlap and every byte
// returns.
#include "core/caching_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>

#include "tests/support/op_test_util.h"

namespace spire {
namespace {

class FakeDevice : public RawMemory {
 public:
  explicit FakeDevice(size_t capacity) : capacity_(capacity) {}
  ~FakeDevice() override { EXPECT_TRUE(live_.empty()) << live_.size() << " segments leaked"; }
  void* raw_allocate(size_t bytes) override {
    if (used_ + bytes > capacity_) return nullptr;
    void* p = std::malloc(bytes);
    used_ += bytes;
    live_[p] = bytes;
    ++allocs_;
    return p;
  }
  void raw_free(void* p, size_t bytes) override {
    auto it = live_.find(p);
    ASSERT_NE(it, live_.end()) << "freeing an unknown segment";
    EXPECT_EQ(it->second, bytes) << "segment freed with another size than allocated";
    used_ -= it->second;
    live_.erase(it);
    std::free(p);
  }
  std::string describe() const override { return "fake device full"; }
  // Fake events: each records the stream it was recorded on; a test marks
  // streams' work as finished with finish(stream).
  struct Event {
    void* stream;
    uint64_t seq;
  };
  void* record_event(void* stream) override {
    events_.push_back(std::make_unique<Event>(Event{stream, ++queued_[stream]}));
    ++recorded_;
    return events_.back().get();
  }
  bool event_done(void* e) override {
    auto* ev = static_cast<Event*>(e);
    return finished_[ev->stream] >= ev->seq;
  }
  void wait_event(void* e) override {
    auto* ev = static_cast<Event*>(e);
    finished_[ev->stream] = std::max(finished_[ev->stream], ev->seq);  // the host waits: it finishes
    ++waits_;
  }
  void release_event(void*) override { ++released_; }
  void finish(void* stream) { finished_[stream] = queued_[stream]; }
  int recorded() const { return recorded_; }
  int released() const { return released_; }
  int waits() const { return waits_; }
  size_t used() const { return used_; }
  int allocs() const { return allocs_; }

 private:
  size_t capacity_;
  size_t used_ = 0;
  int allocs_ = 0;
  std::map<void*, size_t> live_;
  std::vector<std::unique_ptr<Event>> events_;
  std::map<void*, uint64_t> queued_, finished_;
  int recorded_ = 0, released_ = 0, waits_ = 0;
};

constexpr size_t MiB = size_t{1} << 20;

TEST(CachingAllocator, ReusesAFreedBlockWithoutAskingTheDevice) {
  FakeDevice dev(1024 * MiB);
  CachingAllocator a(&dev, "fake:0");
  void* p = a.allocate(3000);
  a.deallocate(p);
  int before = dev.allocs();
  void* q = a.allocate(2900);  // same rounded size
  EXPECT_EQ(q, p);
  EXPECT_EQ(dev.allocs(), before);
  a.deallocate(q);
}

TEST(CachingAllocator, ABlockAnotherStreamUsesWaitsForThatStreamBeforeReuse) {
  FakeDevice dev(1024 * MiB);
  CachingAllocator a(&dev, "fake:0");
  int comm_stream = 0, other_stream = 0;  // their addresses are the fake stream handles
  void* p = a.allocate(3000);
  a.record_stream(p, &comm_stream);
  a.record_stream(p, &comm_stream);  // recorded once
  a.deallocate(p);
  EXPECT_EQ(dev.recorded(), 1);
  EXPECT_EQ(a.pending_blocks(), 1u);
  EXPECT_EQ(a.stats().in_use, 0u);
  // The comm stream has not finished: the next request of that size gets other memory.
  void* q = a.allocate(3000);
  EXPECT_NE(q, p);
  EXPECT_EQ(a.pending_blocks(), 1u);
  EXPECT_EQ(dev.waits(), 0) << "the host must not wait while the device has memory";
  dev.finish(&comm_stream);
  void* r = a.allocate(3000);  // now the old block is free again
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.pending_blocks(), 0u);
  EXPECT_EQ(dev.released(), 1);
  // Two streams: free only when both finished.
  a.record_stream(r, &comm_stream);
  a.record_stream(r, &other_stream);
  a.deallocate(r);
  dev.finish(&comm_stream);
  void* s1 = a.allocate(3000);
  EXPECT_NE(s1, p) << "reused before the second stream finished";
  dev.finish(&other_stream);
  void* s2 = a.allocate(3000);
  EXPECT_EQ(s2, p);
  // Work queued on the stream after the free does not hold the block back.
  a.record_stream(s2, &comm_stream);
  a.deallocate(s2);
  dev.record_event(&comm_stream);  // later work on the comm stream
  dev.finish(&comm_stream);
  EXPECT_EQ(a.allocate(3000), p);
  a.deallocate(p);
  a.deallocate(q);
  a.deallocate(s1);
  EXPECT_EQ(a.stats().in_use, 0u);
  EXPECT_THROW(a.record_stream(reinterpret_cast<void*>(0x1234), &comm_stream), Error);
}

TEST(CachingAllocator, PendingBlocksAreWaitedForWhenMemoryRunsOutAndAtTheEnd) {
  FakeDevice dev(40 * MiB);
  int stream = 0;
  {
    CachingAllocator a(&dev, "fake:0");
    void* big = a.allocate(30 * MiB);
    a.record_stream(big, &stream);
    a.deallocate(big);
    // Only the pending block's memory could serve this: the device is full, so the
    // allocator waits for its event (and not before the device refused memory).
    void* again = a.allocate(30 * MiB);
    EXPECT_EQ(again, big);
    EXPECT_EQ(dev.waits(), 1);
    a.record_stream(again, &stream);
    a.deallocate(again);
    EXPECT_EQ(a.pending_blocks(), 1u);
  }  // the destructor waits for it and returns every segment (FakeDevice checks)
  EXPECT_EQ(dev.used(), 0u);
}

TEST(CachingAllocator, SmallRequestsShareASegmentAndMergeBack) {
  FakeDevice dev(1024 * MiB);
  CachingAllocator a(&dev, "fake:0");
  void* p1 = a.allocate(1000);
  void* p2 = a.allocate(1000);
  void* p3 = a.allocate(100 * 1024);
  EXPECT_EQ(a.num_segments(), 1u);
  EXPECT_EQ(dev.used(), CachingAllocator::kSmallSegment);
  EXPECT_EQ(static_cast<char*>(p2) - static_cast<char*>(p1), 1024);
  EXPECT_EQ(a.stats().in_use, 1024u + 1024u + 100u * 1024u);
  a.deallocate(p1);
  a.deallocate(p3);
  a.deallocate(p2);  // merges with both neighbours: the segment is whole again
  EXPECT_EQ(a.stats().in_use, 0u);
  // A request of almost the whole segment fits without a new segment.
  void* big = a.allocate(CachingAllocator::kSmallLimit);
  EXPECT_EQ(big, p1);
  EXPECT_EQ(a.num_segments(), 1u);
  a.deallocate(big);
}

TEST(CachingAllocator, LargeRequestsSplitLargeSegments) {
  FakeDevice dev(1024 * MiB);
  CachingAllocator a(&dev, "fake:0");
  void* p = a.allocate(3 * MiB);  // from a 20 MiB segment
  void* q = a.allocate(5 * MiB);  // fits in the remainder
  EXPECT_EQ(a.num_segments(), 1u);
  EXPECT_EQ(static_cast<char*>(q) - static_cast<char*>(p), static_cast<long>(3 * MiB));
  void* huge = a.allocate(64 * MiB + 1);  // its own segment, rounded to 2 MiB
  EXPECT_EQ(a.num_segments(), 2u);
  EXPECT_EQ(a.stats().reserved, 20 * MiB + 66 * MiB);
  a.deallocate(p);
  a.deallocate(q);
  a.deallocate(huge);
  EXPECT_EQ(a.stats().cached, a.stats().reserved);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(dev.used(), 0u);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheThenGivesAClearError) {
  FakeDevice dev(40 * MiB);
  CachingAllocator a(&dev, "fake:0");
  void* p = a.allocate(30 * MiB);
  a.deallocate(p);  // cached: 30 MiB reserved, none in use
  // 36 MiB does not fit beside the cached 30 MiB, but does after the cache is released.
  void* q = a.allocate(36 * MiB);
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(a.stats().reserved, 36 * MiB);
  testing::expect_error([&] { a.allocate(8 * MiB); },
                        {"out of memory on fake:0", "tried to allocate 8 MiB", "36 MiB in use",
                         "fake device full"});
  a.deallocate(q);
}

TEST(CachingAllocator, StatisticsTrackPeakAndCounts) {
  FakeDevice dev(1024 * MiB);
  CachingAllocator a(&dev, "fake:0");
  void* p = a.allocate(2 * MiB);
  void* q = a.allocate(2 * MiB);
  a.deallocate(p);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.in_use, 2 * MiB);
  EXPECT_EQ(s.peak_in_use, 4 * MiB);
  EXPECT_EQ(s.num_allocs, 2u);
  EXPECT_EQ(s.cached, s.reserved - s.in_use);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_in_use, 2 * MiB);
  a.deallocate(q);
  testing::expect_error([&] { a.deallocate(reinterpret_cast<void*>(0x1234)); },
                        {"did not hand out"});
}

TEST(CachingAllocator, WithoutCachingEveryBufferIsItsOwnDeviceAllocation) {
  FakeDevice dev(1024 * MiB);
  CachingAllocator a(&dev, "fake:0");
  a.set_caching(false);
  void* p = a.allocate(1000);
  void* q = a.allocate(3 * MiB);
  EXPECT_EQ(dev.allocs(), 2);
  EXPECT_EQ(dev.used(), 1024u + 3 * MiB);  // rounded sizes, no segment slack
  EXPECT_EQ(a.stats().in_use, 1024u + 3 * MiB);
  a.deallocate(p);
  EXPECT_EQ(dev.used(), 3 * MiB);  // returned at once
  void* r = a.allocate(1000);
  EXPECT_EQ(dev.allocs(), 3);  // not reused from a cache
  a.deallocate(q);
  a.deallocate(r);
  EXPECT_EQ(dev.used(), 0u);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.reserved, 0u);
  EXPECT_EQ(s.num_device_frees, 3u);
}

TEST(CachingAllocator, RandomWorkloadNeverOverlapsAndReturnsEveryByte) {
  FakeDevice dev(512 * MiB);
  CachingAllocator a(&dev, "fake:0");
  std::mt19937_64 rng(7);
  std::map<char*, size_t> live;  // ptr -> requested size
  auto check_disjoint = [&] {
    char* end = nullptr;
    for (auto& [p, n] : live) {
      ASSERT_TRUE(end == nullptr || p >= end) << "overlapping live blocks";
      end = p + n;
    }
  };
  for (int step = 0; step < 20000; ++step) {
    bool alloc = live.empty() || (rng() % 100) < 55;
    if (alloc && live.size() < 100) {
      size_t n = (rng() % 8 == 0) ? 1 + rng() % (8 * MiB) : 1 + rng() % 70000;
      char* p = static_cast<char*>(a.allocate(n));
      p[0] = 1;
      p[n - 1] = 2;  // the memory is really there (ASan checks this build)
      live[p] = n;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      a.deallocate(it->first);
      live.erase(it);
    }
    if (step % 1000 == 0) check_disjoint();
  }
  check_disjoint();
  size_t expect = 0;
  for (auto& kv : live) expect += CachingAllocator::round_size(kv.second);
  // in_use counts whole blocks: a block is not split when the remainder
  // would be too small to keep (< 512 bytes small, <= 1 MiB large).
  EXPECT_GE(a.stats().in_use, expect);
  EXPECT_LE(a.stats().in_use, expect + live.size() * CachingAllocator::kSmallLimit);
  for (auto& kv : live) a.deallocate(kv.first);
  EXPECT_EQ(a.stats().in_use, 0u);
  a.empty_cache();
  EXPECT_EQ(dev.used(), 0u);
}

}  // namespace
}  // namespace spire
