// Allocator interface for tensor memory, the 64-byte-aligned CPU allocators
// (one per logical CPU device, each with its own statistics, all drawing on
// one host cache), and the per-device-type allocator lookup. The CUDA
// backend registers its (caching) allocator for DeviceType::CUDA from
// kernels/cuda; core never depends on CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <functional>

#include "core/device.h"

namespace spire {

/// Byte counts of an allocator (all zero for allocators that keep none).
struct MemoryStats {
  size_t in_use = 0;       ///< bytes in blocks handed out and not yet returned
  size_t peak_in_use = 0;  ///< highest in_use since creation or reset_peak()
  size_t reserved = 0;     ///< bytes obtained from the device (in use + cached)
  size_t cached = 0;       ///< reserved but free for reuse (reserved - in_use)
  uint64_t num_allocs = 0;      ///< allocate() calls that returned memory
  uint64_t num_device_allocs = 0;  ///< allocations from the device itself (cudaMalloc)
  uint64_t num_device_frees = 0;
};

/// Memory for tensors on one device. Implementations must be thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// Returns memory for `bytes` bytes (never null for bytes > 0; throws
  /// spire::Error when out of memory). bytes == 0 may return null.
  virtual void* allocate(size_t bytes) = 0;
  /// Returns memory obtained from allocate(bytes).
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
  virtual const char* name() const = 0;
  /// Copies `bytes` from this allocator's memory to host memory.
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) const = 0;
  /// Copies `bytes` from host memory into this allocator's memory.
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) const = 0;
  /// Copies within this allocator's memory.
  virtual void copy_within(void* dst, const void* src, size_t bytes) const = 0;
  /// When on, every new allocation is filled with 0xFF bytes (NaN for
  /// floats, -1 for integers) so tests catch kernels that leave outputs
  /// unwritten. Off by default.
  virtual void set_poison(bool on) { poison_ = on; }
  bool poison() const { return poison_; }
  /// Current statistics (caching allocators; zeros otherwise).
  virtual MemoryStats memory_stats() const { return {}; }
  /// Returns cached, unused memory to the device.
  virtual void empty_cache() {}
  /// Restarts peak_in_use from the current in_use.
  virtual void reset_peak() {}
  /// Marks the block at `ptr` (as returned by allocate()) as used by
  /// `stream` (the backend's opaque stream handle) besides the stream its
  /// memory is ordered on: once freed, it is reused only after the work
  /// queued on `stream` by then. No-op for allocators without streams.
  virtual void record_stream(void* ptr, void* stream) {
    (void)ptr;
    (void)stream;
  }

 protected:
  std::atomic<bool> poison_{false};
};

/// Alignment of every CPU buffer (bytes).
inline constexpr size_t kCpuAlignment = 64;

/// Most logical CPU devices a process may use (cpu:0 .. cpu:kMaxCpuDevices-1).
inline constexpr int kMaxCpuDevices = 256;

/// The 64-byte-aligned allocator of CPU device `index` (default cpu:0).
/// Each CPU device has its own allocator object, device() and statistics
/// (in_use, peak_in_use, num_allocs); all share one host cache of large
/// blocks. Throws spire::Error for an index outside [0, kMaxCpuDevices).
Allocator* cpu_allocator(int index = 0);
/// Host memory outside every device's statistics (a communicator's
/// scratch buffers), from the CPU allocators' host cache with their
/// alignment and huge-page advice (blocks from 2 MiB; see allocator.cc).
/// Never null for bytes > 0; throws spire::Error when out of memory.
void* allocate_host(size_t bytes);
/// Returns memory from allocate_host(bytes).
void deallocate_host(void* ptr, size_t bytes);

/// Frees the large host blocks the CPU allocator keeps for reuse.
void cpu_empty_cache();
/// Bytes currently held in the CPU allocator's cache.
size_t cpu_cached_bytes();

/// Factory giving the allocator of a device (registered per device type).
using AllocatorFactory = std::function<Allocator*(int device_index)>;
/// Registers the allocator factory for a device type (done by backends at
/// load time).
void register_allocator_factory(DeviceType type, AllocatorFactory factory);
/// The allocator of `device`; throws spire::Error when no backend for that
/// device type is built in.
Allocator* get_allocator(const Device& device);

}  // namespace spire
