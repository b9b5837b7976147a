// The CUDA backend's memory: CachingDeviceAllocator (the Allocator of one
// CUDA device: core's CachingAllocator policy over cudaMalloc/cudaFree, with
// copies ordered on the device's stream, and blocks other streams use kept
// until their pooled events complete) and PinnedStaging (page-locked host
// buffers through which feeds and fetches travel, reused once the copy that
// used them has finished, tracked with CUDA events).
#pragma once

#include <mutex>
#include <vector>

#include "core/caching_allocator.h"
#include "kernels/cuda/cuda_check.h"

namespace spire::cuda {

class CudaContext;

class CachingDeviceAllocator final : public Allocator, private RawMemory {
 public:
  explicit CachingDeviceAllocator(CudaContext& ctx);
  ~CachingDeviceAllocator() override;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override;
  const char* name() const override { return "cuda_caching"; }
  /// Waits for the stream (the host needs the bytes).
  void copy_to_host(void* host_dst, const void* src, size_t bytes) const override;
  /// Returns once the bytes are staged; the copy itself is queued.
  void copy_from_host(void* dst, const void* host_src, size_t bytes) const override;
  void copy_within(void* dst, const void* src, size_t bytes) const override;
  MemoryStats memory_stats() const override { return cache_.stats(); }
  void empty_cache() override;
  void reset_peak() override { cache_.reset_peak(); }
  /// A block another stream (e.g. the communication stream) uses is reused
  /// only after that stream's work queued by the time it is freed.
  void record_stream(void* ptr, void* stream) override;

 private:
  void* raw_allocate(size_t bytes) override;
  void raw_free(void* ptr, size_t bytes) override;
  std::string describe() const override;
  void* record_event(void* stream) override;
  bool event_done(void* event) override;
  void wait_event(void* event) override;
  void release_event(void* event) override;

  CudaContext& ctx_;
  CachingAllocator cache_;
};

class PinnedStaging {
 public:
  /// Size of one pinned chunk; larger transfers go through several.
  static constexpr size_t kChunk = size_t{4} << 20;
  /// Chunks kept at most (a transfer waits for the oldest when all are busy).
  static constexpr int kMaxChunks = 8;

  explicit PinnedStaging(int device) : device_(device) {}
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  /// host -> device on `stream` through pinned chunks; returns without
  /// waiting for the copy (each chunk is reused after its event fires).
  void upload(void* dst, const void* src, size_t bytes, cudaStream_t stream);
  /// device -> host on `stream` through pinned chunks; returns when the
  /// bytes are in `dst` (waits for the work queued before on the stream).
  void download(void* dst, const void* src, size_t bytes, cudaStream_t stream);

 private:
  struct Chunk {
    void* ptr = nullptr;
    cudaEvent_t done = nullptr;
    bool pending = false;
  };
  Chunk& free_chunk();  // mu_ held

  int device_;
  std::mutex mu_;
  std::vector<Chunk> chunks_;
  size_t next_ = 0;  // round-robin start for waiting
};

}  // namespace spire::cuda
