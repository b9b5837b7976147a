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
// Streams: the backend that owns it (kernels/cuda) orders every block's
// memory on one stream (the device's compute stream), so a returned block may
// be handed out again at once (stream-ordered reuse). A block that another
// stream also uses (a communication stream reading it) is marked with
// record_stream(); when such a block is freed, an event is recorded on each of
// those streams, and the block returns to the pool only once they have all
// completed (PyTorch's recordStream). The raw device calls and events come
// through RawMemory, so the policy is unit-tested on the CPU with a fake
// device and fake events.
#pragma once

#include <cstddef>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

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
  /// Events for blocks used by other streams (see record_stream). `stream`
  /// is the backend's opaque stream handle; backends whose blocks never meet
  /// another stream keep the defaults.
  /// Records an event after the work queued on `stream` so far.
  virtual void* record_event(void* stream) {
    (void)stream;
    return nullptr;
  }
  /// True once `event` completed (never blocks).
  virtual bool event_done(void* event) {
    (void)event;
    return true;
  }
  /// Blocks the host until `event` completed.
  virtual void wait_event(void* event) { (void)event; }
  /// Returns `event` (completed) to the backend.
  virtual void release_event(void* event) { (void)event; }
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
  /// Returns a pointer obtained from allocate(). A block other streams used
  /// (record_stream) is reused only after their work queued by now.
  void deallocate(void* ptr);
  /// Marks the block at `ptr` (as returned by allocate()) as used by
  /// `stream` too (besides the stream its memory is ordered on). Throws
  /// spire::Error for a pointer it did not hand out.
  void record_stream(void* ptr, void* stream);
  /// Blocks freed but waiting for other streams' events.
  size_t pending_blocks() const;
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
    bool allocated = false;  // also while freed but waiting for events
    bool small = false;
    Block* prev = nullptr;  // neighbours in the same segment
    Block* next = nullptr;
    std::vector<void*> stream_uses;  // other streams using it (distinct)
    int pending_events = 0;          // events to complete before it is free
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
  void free_block(Block* b);       // merges and returns b to its pool; mu_ held
  void process_events(bool wait);  // frees blocks whose events completed; mu_ held

  RawMemory* raw_;
  std::string device_name_;
  mutable std::mutex mu_;
  FreeList small_free_, large_free_;
  std::unordered_map<void*, Block*> live_;  // allocated blocks by pointer
  std::vector<std::pair<void*, Block*>> pending_;  // (event, block) of freed blocks
  size_t segments_ = 0;
  bool caching_ = true;
  MemoryStats stats_;
};

}  // namespace spire
