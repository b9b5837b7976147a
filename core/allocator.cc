#include "core/allocator.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace spire {

namespace {

// 64-byte-aligned host memory. Large blocks (>= 256 KiB) are cached by
// exact page-rounded size and reused, so a graph that allocates the same big
// intermediates every run does not pay mmap/munmap and page faults each time
// (glibc serves such sizes with fresh mmaps). At most kMaxCached bytes are
// kept; empty_cache() releases them.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kCacheMin = size_t{256} << 10;
  static constexpr size_t kMaxCached = size_t{1} << 30;

  ~CpuAllocator() override { empty_cache(); }

  void* allocate(size_t bytes) override {
    void* p = allocate_impl(bytes);
    if (p && poison_) std::memset(p, 0xFF, bytes);
    return p;
  }
  void* allocate_impl(size_t bytes) {
    if (bytes == 0) return nullptr;
    size_t rounded = round(bytes);
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(rounded);
      if (it != cache_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= rounded;
        return p;
      }
    }
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    if (!p) throw_error("CPU allocator: out of memory allocating ", bytes, " bytes");
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    if (!ptr) return;
    size_t rounded = round(bytes);
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + rounded <= kMaxCached) {
        cache_[rounded].push_back(ptr);
        cached_bytes_ += rounded;
        return;
      }
    }
    std::free(ptr);
  }
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& kv : cache_)
      for (void* p : kv.second) std::free(p);
    cache_.clear();
    cached_bytes_ = 0;
  }
  size_t cached_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_bytes_;
  }
  Device device() const override { return Device::cpu(); }
  const char* name() const override { return "cpu"; }
  void copy_to_host(void* dst, const void* src, size_t n) const override {
    if (n) std::memcpy(dst, src, n);
  }
  void copy_from_host(void* dst, const void* src, size_t n) const override {
    if (n) std::memcpy(dst, src, n);
  }
  void copy_within(void* dst, const void* src, size_t n) const override {
    if (n) std::memcpy(dst, src, n);
  }

 private:
  static size_t round(size_t bytes) {
    size_t unit = bytes >= kCacheMin ? 4096 : kCpuAlignment;
    return (bytes + unit - 1) / unit * unit;
  }
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> cache_;
  size_t cached_bytes_ = 0;
};

CpuAllocator& cpu_allocator_impl() {
  static CpuAllocator a;
  return a;
}

struct FactoryTable {
  std::mutex mu;
  std::map<DeviceType, AllocatorFactory> factories;
};

FactoryTable& factory_table() {
  static FactoryTable t;
  return t;
}

}  // namespace

Allocator* cpu_allocator() { return &cpu_allocator_impl(); }

void cpu_empty_cache() { cpu_allocator_impl().empty_cache(); }

size_t cpu_cached_bytes() { return cpu_allocator_impl().cached_bytes(); }

void register_allocator_factory(DeviceType type, AllocatorFactory factory) {
  auto& t = factory_table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.factories[type] = std::move(factory);
}

Allocator* get_allocator(const Device& device) {
  if (device.is_cpu()) return cpu_allocator();
  auto& t = factory_table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.factories.find(device.type);
  if (it == t.factories.end())
    throw_error("no allocator for device ", device.to_string(),
                ": this build of Spire has no backend for it (configure with SPIRE_CUDA=ON)");
  return it->second(device.index);
}

}  // namespace spire
