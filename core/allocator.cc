#include "core/allocator.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"

namespace spire {

namespace {

// 64-byte-aligned host memory shared by every CPU device. Large blocks
// (>= 256 KiB) are cached by exact page-rounded size and reused, so a graph
// that allocates the same big intermediates every run does not pay
// mmap/munmap and page faults each time (glibc serves such sizes with fresh
// mmaps). The cache keeps at most max(1 GiB, the peak of the bytes in use)
// (a training step's working set: what one step frees, the next takes back;
// with a fixed 1 GiB a ResNet-50 step faulted ~37,600 pages back in every
// step), or SPIRE_CPU_CACHE_MIB from the environment; empty_cache()
// releases them.
// Blocks from kHugeMin (2 MiB) are 2 MiB-aligned and, on Linux, advised
// for transparent huge pages (MADV_HUGEPAGE; Debian's default policy
// gives them only to advised memory), as PyTorch's CPU allocator does
// with THP_MEM_ALLOC_ENABLE: fewer TLB misses for the large buffers that
// collectives stream through (under a hypervisor a miss walks two page
// tables; bench/README.md has the measurement). SPIRE_CPU_HUGE_PAGES=0 in
// the environment turns it off.
class HostMemory {
 public:
  static constexpr size_t kCacheMin = size_t{256} << 10;
  static constexpr size_t kMinCacheLimit = size_t{1} << 30;
  static constexpr size_t kHugeMin = size_t{2} << 20;

  void* allocate(size_t bytes) {
    if (bytes == 0) return nullptr;
    size_t rounded = round(bytes);
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mu_);
      in_use_ += rounded;
      peak_in_use_ = std::max(peak_in_use_, in_use_);
      auto it = cache_.find(rounded);
      if (it != cache_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= rounded;
        return p;
      }
    }
    const bool huge = rounded >= kHugeMin && huge_pages_;
    // posix_memalign, not aligned_alloc: C11 asks aligned_alloc for a size
    // that is a multiple of the alignment (AddressSanitizer enforces it), and
    // a 2 MiB-aligned block here is only rounded to 4 KiB.
    void* p = nullptr;
    if (posix_memalign(&p, huge ? kHugeMin : kCpuAlignment, rounded) != 0 || !p) {
      if (rounded >= kCacheMin) {
        std::lock_guard<std::mutex> lock(mu_);
        in_use_ -= rounded;
      }
      throw_error("CPU allocator: out of memory allocating ", bytes, " bytes");
    }
#if defined(MADV_HUGEPAGE)
    // Advice only: where the kernel has no huge pages to give, 4 KiB pages serve.
    if (huge) madvise(p, rounded / 4096 * 4096, MADV_HUGEPAGE);
#endif
    return p;
  }
  void deallocate(void* ptr, size_t bytes) {
    if (!ptr) return;
    size_t rounded = round(bytes);
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mu_);
      in_use_ -= rounded;
      if (cached_bytes_ + rounded <= cache_limit()) {
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
  /// The most bytes the cache keeps now (mu_ held).
  size_t cache_limit() const {
    return fixed_limit_ != kAuto ? fixed_limit_ : std::max(kMinCacheLimit, peak_in_use_);
  }
  static size_t round(size_t bytes) {
    size_t unit = bytes >= kCacheMin ? 4096 : kCpuAlignment;
    return (bytes + unit - 1) / unit * unit;
  }

 private:
  static bool huge_pages_from_environment() {
    const char* v = std::getenv("SPIRE_CPU_HUGE_PAGES");
    return v == nullptr || std::string(v) != "0";
  }

  // SPIRE_CPU_CACHE_MIB: a fixed limit in MiB (0: no cache); unset: kAuto.
  static constexpr size_t kAuto = ~size_t{0};
  static size_t cache_limit_from_environment() {
    const char* v = std::getenv("SPIRE_CPU_CACHE_MIB");
    if (v == nullptr || *v == '\0') return kAuto;
    char* end = nullptr;
    const unsigned long long mib = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0')
      throw_error("SPIRE_CPU_CACHE_MIB must be a whole number of MiB, got '", v, "'");
    return static_cast<size_t>(mib) << 20;
  }

  const bool huge_pages_ = huge_pages_from_environment();
  const size_t fixed_limit_ = cache_limit_from_environment();
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> cache_;
  size_t cached_bytes_ = 0;
  // Bytes of cacheable-size blocks handed out and not returned, and their peak.
  size_t in_use_ = 0;
  size_t peak_in_use_ = 0;
};

// Never destroyed: tensors held by static objects may return memory during exit.
HostMemory& host_memory() {
  static HostMemory* m = new HostMemory;
  return *m;
}

// The allocator of one logical CPU device: host memory with this device's
// identity and statistics (bytes counted at their rounded size).
class CpuDeviceAllocator final : public Allocator {
 public:
  explicit CpuDeviceAllocator(int index) : index_(index), name_(Device::cpu(index).to_string()) {}

  void* allocate(size_t bytes) override {
    void* p = host_memory().allocate(bytes);
    if (p == nullptr) return p;
    if (poison_) std::memset(p, 0xFF, bytes);
    const size_t r = HostMemory::round(bytes);
    const size_t now = in_use_.fetch_add(r, std::memory_order_relaxed) + r;
    size_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    num_allocs_.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    if (!ptr) return;
    in_use_.fetch_sub(HostMemory::round(bytes), std::memory_order_relaxed);
    host_memory().deallocate(ptr, bytes);
  }
  Device device() const override { return Device::cpu(index_); }
  const char* name() const override { return name_.c_str(); }
  void copy_to_host(void* dst, const void* src, size_t n) const override {
    if (n) std::memcpy(dst, src, n);
  }
  void copy_from_host(void* dst, const void* src, size_t n) const override {
    if (n) std::memcpy(dst, src, n);
  }
  void copy_within(void* dst, const void* src, size_t n) const override {
    if (n) std::memcpy(dst, src, n);
  }
  MemoryStats memory_stats() const override {
    MemoryStats s;
    s.in_use = in_use_.load(std::memory_order_relaxed);
    s.peak_in_use = peak_.load(std::memory_order_relaxed);
    s.reserved = s.in_use;  // the shared host cache is not any one device's
    s.num_allocs = num_allocs_.load(std::memory_order_relaxed);
    return s;
  }
  void empty_cache() override { host_memory().empty_cache(); }
  void reset_peak() override { peak_.store(in_use_.load(std::memory_order_relaxed)); }

 private:
  int index_;
  std::string name_;
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
  std::atomic<uint64_t> num_allocs_{0};
};

// One allocator per CPU device index, created on first use and never
// destroyed (tensors in static objects may free memory during exit).
struct CpuDeviceTable {
  std::mutex mu;
  std::atomic<CpuDeviceAllocator*> devices[kMaxCpuDevices] = {};
};

CpuDeviceTable& cpu_device_table() {
  static CpuDeviceTable* t = new CpuDeviceTable;
  return *t;
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

Allocator* cpu_allocator(int index) {
  if (index < 0 || index >= kMaxCpuDevices)
    throw_error("no CPU device cpu:", index, ": Spire supports cpu:0 to cpu:", kMaxCpuDevices - 1);
  auto& t = cpu_device_table();
  CpuDeviceAllocator* a = t.devices[index].load(std::memory_order_acquire);
  if (a != nullptr) return a;
  std::lock_guard<std::mutex> lock(t.mu);
  a = t.devices[index].load(std::memory_order_relaxed);
  if (a == nullptr) {
    a = new CpuDeviceAllocator(index);
    t.devices[index].store(a, std::memory_order_release);
  }
  return a;
}

void* allocate_host(size_t bytes) { return host_memory().allocate(bytes); }

void deallocate_host(void* ptr, size_t bytes) { host_memory().deallocate(ptr, bytes); }

void cpu_empty_cache() { host_memory().empty_cache(); }

size_t cpu_cached_bytes() { return host_memory().cached_bytes(); }

void register_allocator_factory(DeviceType type, AllocatorFactory factory) {
  auto& t = factory_table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.factories[type] = std::move(factory);
}

Allocator* get_allocator(const Device& device) {
  if (device.is_cpu()) return cpu_allocator(device.index);
  auto& t = factory_table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.factories.find(device.type);
  if (it == t.factories.end())
    throw_error("no allocator for device ", device.to_string(),
                ": this build of Spire has no backend for it (configure with SPIRE_CUDA=ON)");
  return it->second(device.index);
}

}  // namespace spire
