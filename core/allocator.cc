#include "core/allocator.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"

namespace spire {

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    if (!p) throw_error("CPU allocator: out of memory allocating ", bytes, " bytes");
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
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
};

struct FactoryTable {
  std::mutex mu;
  std::map<DeviceType, AllocatorFactory> factories;
};

FactoryTable& factory_table() {
  static FactoryTable t;
  return t;
}

}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator a;
  return &a;
}

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
