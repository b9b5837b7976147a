// CachingAllocator: the device-independent part of a caching allocator for
// device memory (the policy of PyTorch's CUDA caching allocator, reduced):
// requests are rounded to 512 bytes; small requests (<= 1 MiB) are carved
// from 2 MiB segments, large ones from segments of at least 20 MiB (or
// their own rounded size); a free block is found best-fit in a size-ordered
// free list per pool, split when the remainder is worth keeping, and merged
// with free neighbours of its segment when returned. When the device
// refuses memory, cached segments are released and the request is retried
// once; then out-of-memory is a spire::Error naming the request, the
// statistics and the device's own report.
//
// It knows nothing of streams: the backend that owns it (kernels/cuda) runs
// all work of a device on one stream, so a returned block may be handed out
// again at once (stream-ordered reuse). The raw device calls come through
// RawMemory, so the policy is unit-tested on the CPU with a fake device.
#pragma once

#include <cstddef>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "core/allocator.h"

namespace spire {

/// The device's own allocation calls.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  /// Memory for `bytes` bytes, or null when the device has none left.
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_free(void* ptr, size_t bytes) = 0;
  /// A short report for out-of-memory errors (e.g. the device's free/total).
  virtual std::string describe() const { return {}; }
};

class CachingAllocator {
 public:
  /// Requests are rounded up to a multiple of this.
  static constexpr size_t kRound = 512;
  /// Requests up to this size come from the small pool.
  static constexpr size_t kSmallLimit = size_t{1} << 20;
  /// Segment size of the small pool.
  static constexpr size_t kSmallSegment = size_t{2} << 20;
  /// Minimum segment size of the large pool (requests below kLargeExact).
  static constexpr size_t kLargeSegment = size_t{20} << 20;
  static constexpr size_t kLargeExact = size_t{10} << 20;

  /// `device_name` appears in error messages ("cuda:0").
  CachingAllocator(RawMemory* raw, std::string device_name);
  /// Returns every segment to the device.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// Memory for `bytes` (> 0) bytes; throws spire::Error when out of memory.
  void* allocate(size_t bytes);
  /// Returns a pointer obtained from allocate().
  void deallocate(void* ptr);
  /// Returns whole free segments to the device.
  void empty_cache();
  MemoryStats stats() const;
  void reset_peak();
  /// Number of segments held from the device.
  size_t num_segments() const;
  /// With caching off, every request gets its own device allocation of its
  /// rounded size, returned to the device when freed (so tools such as
  /// compute-sanitizer see each buffer's bounds); statistics stay exact.
  /// On by default; change it only while nothing is allocated.
  void set_caching(bool on);
  bool caching() const { return caching_; }

  /// Rounded size of a request (what in_use counts).
  static size_t round_size(size_t bytes);

 private:
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    bool allocated = false;
    bool small = false;
    Block* prev = nullptr;  // neighbours in the same segment
    Block* next = nullptr;
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using FreeList = std::set<Block*, BySize>;

  FreeList& pool(bool small) { return small ? small_free_ : large_free_; }
  Block* find_free(bool small, size_t size);
  Block* new_segment(bool small, size_t size);
  size_t release_free_segments();  // returns bytes released; mu_ held

  RawMemory* raw_;
  std::string device_name_;
  mutable std::mutex mu_;
  FreeList small_free_, large_free_;
  std::unordered_map<void*, Block*> live_;  // allocated blocks by pointer
  size_t segments_ = 0;
  bool caching_ = true;
  MemoryStats stats_;
};

}  // namespace spire
