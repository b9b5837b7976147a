#include "core/caching_allocator.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/error.h"

namespace spire {
namespace {

std::string mib(size_t bytes) {
  return str_cat(static_cast<double>(bytes) / (1024.0 * 1024.0), " MiB");
}

}  // namespace

CachingAllocator::CachingAllocator(RawMemory* raw, std::string device_name)
    : raw_(raw), device_name_(std::move(device_name)) {}

CachingAllocator::~CachingAllocator() {
  // Blocks waiting for other streams: wait for their events, then free them.
  if (!pending_.empty()) process_events(true);
  // Free every segment: walk segment heads among free and live blocks.
  std::set<Block*> heads;
  auto collect = [&](Block* b) {
    while (b->prev) b = b->prev;
    heads.insert(b);
  };
  for (Block* b : small_free_) collect(b);
  for (Block* b : large_free_) collect(b);
  for (auto& kv : live_) collect(kv.second);
  for (Block* head : heads) {
    size_t total = 0;
    for (Block* b = head; b;) {
      total += b->size;
      Block* n = b->next;
      if (b != head) delete b;
      b = n;
    }
    raw_->raw_free(head->ptr, total);
    delete head;
  }
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes < kRound) return kRound;
  return (bytes + kRound - 1) / kRound * kRound;
}

CachingAllocator::Block* CachingAllocator::find_free(bool small, size_t size) {
  FreeList& fl = pool(small);
  Block key;
  key.size = size;
  key.ptr = nullptr;
  auto it = fl.lower_bound(&key);
  if (it == fl.end()) return nullptr;
  Block* b = *it;
  fl.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(bool small, size_t size) {
  size_t seg = !caching_ ? size
               : small    ? kSmallSegment
               : size < kLargeExact ? kLargeSegment
                                    : (size + kSmallSegment - 1) / kSmallSegment * kSmallSegment;
  void* p = raw_->raw_allocate(seg);
  if (p == nullptr) {
    release_free_segments();
    p = raw_->raw_allocate(seg);
  }
  if (p == nullptr) return nullptr;
  ++segments_;
  ++stats_.num_device_allocs;
  stats_.reserved += seg;
  Block* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = seg;
  b->small = small;
  return b;
}

void* CachingAllocator::allocate(size_t bytes) {
  SPIRE_CHECK(bytes > 0, "CachingAllocator::allocate: zero bytes requested");
  size_t size = round_size(bytes);
  bool small = size <= kSmallLimit;
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.empty()) process_events(false);  // reclaim what other streams finished with
  Block* b = caching_ ? find_free(small, size) : nullptr;
  if (b == nullptr) b = new_segment(small, size);
  if (b == nullptr && !pending_.empty()) {
    // Out of device memory: only now wait for the blocks other streams still
    // use, and reuse them.
    process_events(true);
    if (caching_) b = find_free(small, size);
    if (b == nullptr) b = new_segment(small, size);
  }
  if (b == nullptr)
    throw_error("out of memory on ", device_name_, ": tried to allocate ", mib(size), " (", bytes,
                " bytes); ", mib(stats_.in_use), " in use by tensors, ", mib(stats_.reserved),
                " reserved by Spire (", mib(stats_.reserved - stats_.in_use), " cached, already ",
                "returned to the device before this error)",
                raw_->describe().empty() ? "" : "; device reports ", raw_->describe());
  // Split when the remainder is worth keeping as a free block.
  size_t remaining = b->size - size;
  if (remaining >= (small ? kRound : kSmallLimit + 1)) {
    Block* rest = new Block;
    rest->ptr = b->ptr + size;
    rest->size = remaining;
    rest->small = small;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool(small).insert(rest);
  }
  b->allocated = true;
  live_[b->ptr] = b;
  stats_.in_use += b->size;
  stats_.cached = stats_.reserved - stats_.in_use;
  if (stats_.in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.in_use;
  ++stats_.num_allocs;
  return b->ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end())
    throw_error("CachingAllocator on ", device_name_, ": freeing a pointer it did not hand out");
  Block* b = it->second;
  live_.erase(it);
  stats_.in_use -= b->size;
  if (!b->stream_uses.empty()) {
    // Other streams may still read or write it: free once their work queued by now is done.
    for (void* stream : b->stream_uses) {
      pending_.emplace_back(raw_->record_event(stream), b);
      ++b->pending_events;
    }
    b->stream_uses.clear();
    stats_.cached = stats_.reserved - stats_.in_use;
    return;
  }
  free_block(b);
  stats_.cached = stats_.reserved - stats_.in_use;
}

void CachingAllocator::record_stream(void* ptr, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end())
    throw_error("CachingAllocator on ", device_name_, ": record_stream on a pointer it did not hand out");
  auto& uses = it->second->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

size_t CachingAllocator::pending_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<const Block*> blocks;
  for (const auto& entry : pending_) blocks.insert(entry.second);
  return blocks.size();
}

void CachingAllocator::process_events(bool wait) {
  std::vector<std::pair<void*, Block*>> still;
  size_t k = 0;
  try {
    for (; k < pending_.size(); ++k) {
      auto [event, b] = pending_[k];
      if (wait) raw_->wait_event(event);
      else if (!raw_->event_done(event)) {
        still.emplace_back(event, b);
        continue;
      }
      raw_->release_event(event);
      if (--b->pending_events == 0) free_block(b);
    }
  } catch (...) {
    // The device reported an error: keep every entry not processed yet.
    still.insert(still.end(), pending_.begin() + static_cast<long>(k), pending_.end());
    pending_.swap(still);
    stats_.cached = stats_.reserved - stats_.in_use;
    throw;
  }
  pending_.swap(still);
  stats_.cached = stats_.reserved - stats_.in_use;
}

void CachingAllocator::free_block(Block* b) {
  b->allocated = false;
  FreeList& fl = pool(b->small);
  // Merge with free neighbours of the same segment.
  if (b->prev && !b->prev->allocated) {
    Block* p = b->prev;
    fl.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (b->next && !b->next->allocated) {
    Block* n = b->next;
    fl.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  fl.insert(b);
  if (!caching_) release_free_segments();
}

void CachingAllocator::set_caching(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  caching_ = on;
  if (!on) release_free_segments();
}

size_t CachingAllocator::release_free_segments() {
  size_t released = 0;
  for (FreeList* fl : {&small_free_, &large_free_}) {
    for (auto it = fl->begin(); it != fl->end();) {
      Block* b = *it;
      if (b->prev == nullptr && b->next == nullptr) {  // a whole free segment
        raw_->raw_free(b->ptr, b->size);
        released += b->size;
        stats_.reserved -= b->size;
        ++stats_.num_device_frees;
        --segments_;
        delete b;
        it = fl->erase(it);
      } else {
        ++it;
      }
    }
  }
  stats_.cached = stats_.reserved - stats_.in_use;
  return released;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.empty()) process_events(true);
  release_free_segments();
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_in_use = stats_.in_use;
}

size_t CachingAllocator::num_segments() const {
  std::lock_guard<std::mutex> lock(mu_);
  return segments_;
}

}  // namespace spire
