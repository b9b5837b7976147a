// The per-device CUDA context: the device's stream, its cuBLAS, cuBLASLt and
// cuDNN handles (created on first use, bound to the stream), typed
// per-device caches for kernels (e.g. cuDNN algorithm choices), and the
// pinned host staging used by transfers. One context per device, created on
// first use by the CUDA backend's device table and destroyed at exit; every
// kernel reaches it through KernelContext::device_context().
//
// Ordering: all work for a device (kernels, library calls, copies) goes on
// the context's compute stream, so the caching allocator may hand a freed
// block to the next allocation at once (stream-ordered reuse). A second,
// communication stream (comm_stream(), for NCCL) overlaps the compute
// stream; the blocks it uses are marked with Tensor::record_stream, so the
// allocator reuses them only after the communication finished. Events come
// from a per-device pool. The host waits only where it needs a value (a
// fetch, a copy to the host).
#pragma once

#include <any>
#include <cstddef>
#include <memory>
#include <mutex>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/cuda/cuda_check.h"

namespace spire::cuda {

class CachingDeviceAllocator;
class PinnedStaging;

/// A pooled CUDA event (timing disabled) and the device it belongs to.
struct PooledEvent {
  cudaEvent_t event = nullptr;
  int device = 0;
};

/// The reusable CUDA events of one device: acquire() takes one from the
/// pool (creating it when the pool is empty), release() gives it back.
/// Re-recording a released event is safe once every wait on it was queued
/// (a stream waits for the record current at the time of its wait call).
class EventPool {
 public:
  explicit EventPool(int device) : device_(device) {}
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  PooledEvent* acquire();
  void release(PooledEvent* e);
  /// Events created so far (in use or pooled).
  size_t created() const;

 private:
  int device_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<PooledEvent>> all_;
  std::vector<PooledEvent*> free_;
};
class CudaContext {
 public:
  explicit CudaContext(int device);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  /// The stream every kernel of this device is launched on.
  cudaStream_t stream() const { return stream_; }
  /// A second stream for communication (created on first use), so
  /// collectives overlap compute; order it with events and mark the blocks
  /// it uses with Tensor::record_stream.
  cudaStream_t comm_stream();
  /// This device's event pool.
  EventPool& events() { return *events_; }
  /// cuBLAS handle bound to stream() (created on first use).
  cublasHandle_t cublas();
  /// cuBLASLt handle (created on first use).
  cublasLtHandle_t cublaslt();
  /// cuDNN handle bound to stream() (created on first use).
  cudnnHandle_t cudnn();
  /// Number of streaming multiprocessors (for grid sizing).
  int sm_count() const { return sm_count_; }
  /// The device's caching allocator.
  CachingDeviceAllocator& allocator() { return *allocator_; }
  /// Pinned host buffers for transfers.
  PinnedStaging& staging() { return *staging_; }

  /// Waits for the work queued on the stream; throws on asynchronous errors.
  void synchronize();

  /// A per-device object of type T (default-constructed on first use) for
  /// kernels' caches; guard it with cache_mutex().
  template <typename T>
  T& cache() {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto& slot = caches_[std::type_index(typeid(T))];
    if (!slot) slot = std::make_shared<T>();
    return *std::static_pointer_cast<T>(slot);
  }
  std::mutex& cache_mutex() { return user_mu_; }

 private:
  int device_;
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  std::unique_ptr<EventPool> events_;
  std::mutex handle_mu_;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::unique_ptr<CachingDeviceAllocator> allocator_;
  std::unique_ptr<PinnedStaging> staging_;
  std::mutex cache_mu_;
  std::mutex user_mu_;
  std::unordered_map<std::type_index, std::shared_ptr<void>> caches_;
};

/// The context of CUDA device `index` (created on first use; throws when the
/// device does not exist).
CudaContext& context_for(int index);

/// Enables peer access from device `from` to device `to` where the hardware
/// allows it (once per ordered pair); returns whether `from` can read and
/// write `to`'s memory directly. Copies between devices work either way.
bool enable_peer_access(int from, int to);

/// True when SPIRE_CUDA_SYNC_DEBUG is set (not "0"): the executor then
/// synchronizes after every GPU kernel so an asynchronous error names the
/// node that caused it (slow; for debugging).
bool sync_debug_enabled();

/// The CUDA context of a kernel running on a CUDA device.
inline CudaContext& context(const KernelContext& ctx) {
  void* p = ctx.device_context();
  if (p == nullptr) ctx.fail("internal error: no CUDA context for a CUDA kernel");
  return *static_cast<CudaContext*>(p);
}

/// Makes `device` current for the calling thread while alive.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  int device_ = 0;
};

/// Device scratch memory from the caching allocator, returned when this
/// object goes away. Safe to drop right after queuing the kernels that use
/// it: reuse is ordered on the same stream.
class Scratch {
 public:
  Scratch(CudaContext& ctx, size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t size() const { return bytes_; }

 private:
  CudaContext& ctx_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace spire::cuda
