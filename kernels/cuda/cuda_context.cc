// The CUDA backend's device table: one CudaContext per device (stream,
// library handles, caching allocator, pinned staging), registered with core
// as the DeviceBackend and allocator factory of DeviceType::CUDA.
#include "kernels/cuda/cuda_context.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <map>

#include "core/device_backend.h"
#include "kernels/cuda/cuda_allocator.h"

namespace spire::cuda {

// ---- DeviceGuard -----------------------------------------------------------

DeviceGuard::DeviceGuard(int device) : device_(device) {
  SPIRE_CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != device_) SPIRE_CUDA_CHECK(cudaSetDevice(device_));
}

DeviceGuard::~DeviceGuard() {
  if (prev_ != device_) cudaSetDevice(prev_);
}

// ---- CudaContext -----------------------------------------------------------

// ---- EventPool ---------------------------------------------------------------

EventPool::~EventPool() {
  for (auto& e : all_)
    if (e->event) cudaEventDestroy(e->event);  // never throws at teardown
}

PooledEvent* EventPool::acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!free_.empty()) {
    PooledEvent* e = free_.back();
    free_.pop_back();
    return e;
  }
  auto e = std::make_unique<PooledEvent>();
  e->device = device_;
  DeviceGuard g(device_);
  SPIRE_CUDA_CHECK(cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming));
  all_.push_back(std::move(e));
  return all_.back().get();
}

void EventPool::release(PooledEvent* e) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(e);
}

size_t EventPool::created() const {
  std::lock_guard<std::mutex> lock(mu_);
  return all_.size();
}

// ---- CudaContext -----------------------------------------------------------

CudaContext::CudaContext(int device) : device_(device) {
  DeviceGuard g(device);
  SPIRE_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  SPIRE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  events_ = std::make_unique<EventPool>(device);
  allocator_ = std::make_unique<CachingDeviceAllocator>(*this);
  staging_ = std::make_unique<PinnedStaging>(device);
}

CudaContext::~CudaContext() {
  // Never throw from here: errors at teardown are ignored.
  cudaSetDevice(device_);
  if (comm_stream_) cudaStreamSynchronize(comm_stream_);
  if (stream_) cudaStreamSynchronize(stream_);
  caches_.clear();
  staging_.reset();
  allocator_.reset();
  events_.reset();
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
  if (cudnn_) cudnnDestroy(cudnn_);
  if (cublaslt_) cublasLtDestroy(cublaslt_);
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

cudaStream_t CudaContext::comm_stream() {
  std::lock_guard<std::mutex> lock(handle_mu_);
  if (!comm_stream_) {
    DeviceGuard g(device_);
    SPIRE_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
  }
  return comm_stream_;
}

cublasHandle_t CudaContext::cublas() {
  std::lock_guard<std::mutex> lock(handle_mu_);
  if (!cublas_) {
    DeviceGuard g(device_);
    SPIRE_CUBLAS_CHECK(cublasCreate(&cublas_));
    SPIRE_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  }
  return cublas_;
}

cublasLtHandle_t CudaContext::cublaslt() {
  std::lock_guard<std::mutex> lock(handle_mu_);
  if (!cublaslt_) {
    DeviceGuard g(device_);
    SPIRE_CUBLAS_CHECK(cublasLtCreate(&cublaslt_));
  }
  return cublaslt_;
}

cudnnHandle_t CudaContext::cudnn() {
  std::lock_guard<std::mutex> lock(handle_mu_);
  if (!cudnn_) {
    DeviceGuard g(device_);
    SPIRE_CUDNN_CHECK(cudnnCreate(&cudnn_));
    SPIRE_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
  }
  return cudnn_;
}

void CudaContext::synchronize() {
  DeviceGuard g(device_);
  SPIRE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---- Scratch ---------------------------------------------------------------

Scratch::Scratch(CudaContext& ctx, size_t bytes) : ctx_(ctx), bytes_(bytes) {
  if (bytes > 0) ptr_ = ctx_.allocator().allocate(bytes);
}

Scratch::~Scratch() {
  if (ptr_) ctx_.allocator().deallocate(ptr_, bytes_);
}

// ---- the device table ------------------------------------------------------

namespace {

int visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

struct DeviceTable {
  std::mutex mu;
  std::map<int, std::unique_ptr<CudaContext>> contexts;
};

// The table lives until the process ends and is intentionally not
// destroyed at exit: tensors held by static objects may still return memory
// after static destructors run, and the driver releases everything anyway.
DeviceTable& device_table() {
  static DeviceTable* t = new DeviceTable;
  return *t;
}

// Returns a pooled event to its pool when the scope ends (errors included).
struct EventLease {
  PooledEvent* e;
  ~EventLease() { context_for(e->device).events().release(e); }
};

// An event-ordered copy between two devices: the destination stream waits
// for the source's queued work, copies (directly where peer access is
// enabled), and the source stream waits for the copy before it may reuse
// the source block. The events come from the pools and go back at once: the
// waits were queued, so re-recording them later is safe.
void copy_between_devices(void* dst, int di, const void* src, int si, size_t bytes) {
  if (bytes == 0) return;
  CudaContext& s = context_for(si);
  CudaContext& d = context_for(di);
  enable_peer_access(di, si);
  EventLease src_ready{s.events().acquire()}, copied{d.events().acquire()};
  {
    DeviceGuard g(si);
    SPIRE_CUDA_CHECK(cudaEventRecord(src_ready.e->event, s.stream()));
  }
  DeviceGuard g(di);
  SPIRE_CUDA_CHECK(cudaStreamWaitEvent(d.stream(), src_ready.e->event, 0));
  SPIRE_CUDA_CHECK(cudaMemcpyPeerAsync(dst, di, src, si, bytes, d.stream()));
  SPIRE_CUDA_CHECK(cudaEventRecord(copied.e->event, d.stream()));
  SPIRE_CUDA_CHECK(cudaStreamWaitEvent(s.stream(), copied.e->event, 0));
}

struct PeerTable {
  std::mutex mu;
  std::map<std::pair<int, int>, bool> enabled;
};

PeerTable& peer_table() {
  static PeerTable* t = new PeerTable;  // lives until exit, as the device table
  return *t;
}

}  // namespace

bool enable_peer_access(int from, int to) {
  if (from == to) return true;
  auto& t = peer_table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.enabled.find({from, to});
  if (it != t.enabled.end()) return it->second;
  int can = 0;
  SPIRE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
  bool ok = false;
  if (can) {
    DeviceGuard g(from);
    cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
    // Already enabled is fine; any other failure means copies go through
    // the driver instead (remembered, and the thread's error cleared).
    ok = err == cudaSuccess || err == cudaErrorPeerAccessAlreadyEnabled;
    if (err != cudaSuccess) cudaGetLastError();
  }
  t.enabled[{from, to}] = ok;
  return ok;
}

bool sync_debug_enabled() {
  const char* e = std::getenv("SPIRE_CUDA_SYNC_DEBUG");
  return e != nullptr && *e != '\0' && std::string(e) != "0";
}

CudaContext& context_for(int index) {
  auto& t = device_table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto& c = t.contexts[index];
  if (!c) {
    int n = visible_devices();
    if (index < 0 || index >= n) {
      t.contexts.erase(index);
      throw_error("device cuda:", index, " does not exist (", n, " CUDA device",
                  n == 1 ? "" : "s", " visible)");
    }
    c = std::make_unique<CudaContext>(index);
  }
  return *c;
}

SPIRE_STATIC_INIT(cuda_device_backend) {
  DeviceBackend b;
  b.device_count = visible_devices;
  b.context = [](int i) -> void* { return &context_for(i); };
  b.synchronize = [](int i) { context_for(i).synchronize(); };
  b.make_current = [](int i) {
    int cur = -1;
    SPIRE_CUDA_CHECK(cudaGetDevice(&cur));
    if (cur != i) SPIRE_CUDA_CHECK(cudaSetDevice(i));
  };
  b.copy_between = copy_between_devices;
  b.record_event = [](int i) -> void* {
    CudaContext& c = context_for(i);
    PooledEvent* e = c.events().acquire();
    DeviceGuard g(i);
    cudaError_t err = cudaEventRecord(e->event, c.stream());
    if (err != cudaSuccess) {
      c.events().release(e);
      SPIRE_CUDA_CHECK(err);
    }
    return e;
  };
  b.wait_event = [](int i, void* e) {
    DeviceGuard g(i);
    SPIRE_CUDA_CHECK(cudaStreamWaitEvent(context_for(i).stream(), static_cast<PooledEvent*>(e)->event, 0));
  };
  b.synchronize_event = [](void* e) {
    SPIRE_CUDA_CHECK(cudaEventSynchronize(static_cast<PooledEvent*>(e)->event));
  };
  b.release_event = [](void* e) {
    auto* pe = static_cast<PooledEvent*>(e);
    context_for(pe->device).events().release(pe);
  };
  b.synchronize_after_kernels = sync_debug_enabled();
  register_device_backend(DeviceType::CUDA, std::move(b));
  register_allocator_factory(DeviceType::CUDA,
                             [](int i) -> Allocator* { return &context_for(i).allocator(); });
}

// ---- CachingDeviceAllocator --------------------------------------------------

CachingDeviceAllocator::CachingDeviceAllocator(CudaContext& ctx)
    : ctx_(ctx), cache_(this, Device::cuda(ctx.device()).to_string()) {
  // SPIRE_CUDA_NO_CACHING=1: one cudaMalloc per buffer, freed at once, so
  // compute-sanitizer sees every buffer's bounds (slow; for checking only).
  const char* e = std::getenv("SPIRE_CUDA_NO_CACHING");
  if (e != nullptr && *e != '\0' && std::string(e) != "0") cache_.set_caching(false);
}

CachingDeviceAllocator::~CachingDeviceAllocator() = default;

Device CachingDeviceAllocator::device() const { return Device::cuda(ctx_.device()); }

void* CachingDeviceAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = cache_.allocate(bytes);
  if (poison_) {
    DeviceGuard g(ctx_.device());
    SPIRE_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes, ctx_.stream()));
  }
  return p;
}

void CachingDeviceAllocator::deallocate(void* ptr, size_t) {
  if (ptr == nullptr) return;
  try {
    cache_.deallocate(ptr);
  } catch (...) {
    // Reached from destructors; a foreign pointer is a bug, but never throw here.
  }
}

void CachingDeviceAllocator::record_stream(void* ptr, void* stream) {
  if (ptr == nullptr || stream == nullptr || stream == ctx_.stream()) return;  // its own stream orders it
  cache_.record_stream(ptr, stream);
}

void* CachingDeviceAllocator::record_event(void* stream) {
  PooledEvent* e = ctx_.events().acquire();
  DeviceGuard g(ctx_.device());
  cudaError_t err = cudaEventRecord(e->event, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) {
    ctx_.events().release(e);
    SPIRE_CUDA_CHECK(err);
  }
  return e;
}

bool CachingDeviceAllocator::event_done(void* event) {
  cudaError_t q = cudaEventQuery(static_cast<PooledEvent*>(event)->event);
  if (q == cudaSuccess) return true;
  if (q == cudaErrorNotReady) {
    cudaGetLastError();  // not a failure (see PinnedStaging::free_chunk)
    return false;
  }
  SPIRE_CUDA_CHECK(q);
  return false;
}

void CachingDeviceAllocator::wait_event(void* event) {
  SPIRE_CUDA_CHECK(cudaEventSynchronize(static_cast<PooledEvent*>(event)->event));
}

void CachingDeviceAllocator::release_event(void* event) {
  ctx_.events().release(static_cast<PooledEvent*>(event));
}

void CachingDeviceAllocator::empty_cache() {
  DeviceGuard g(ctx_.device());
  SPIRE_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  cache_.empty_cache();
}

void* CachingDeviceAllocator::raw_allocate(size_t bytes) {
  DeviceGuard g(ctx_.device());
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: out of memory is reported by the caller
    return nullptr;
  }
  SPIRE_CUDA_CHECK(err);
  return p;
}

void CachingDeviceAllocator::raw_free(void* ptr, size_t) {
  DeviceGuard g(ctx_.device());
  // Blocks freed in stream order may still be read by queued work: wait for
  // the stream first (only empty_cache and out-of-memory retries get here).
  cudaStreamSynchronize(ctx_.stream());
  cudaFree(ptr);
}

std::string CachingDeviceAllocator::describe() const {
  size_t free_b = 0, total = 0;
  DeviceGuard g(ctx_.device());
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return str_cat(free_b >> 20, " MiB free of ", total >> 20, " MiB");
}

void CachingDeviceAllocator::copy_to_host(void* dst, const void* src, size_t n) const {
  if (n) ctx_.staging().download(dst, src, n, ctx_.stream());
}

void CachingDeviceAllocator::copy_from_host(void* dst, const void* src, size_t n) const {
  if (n) ctx_.staging().upload(dst, src, n, ctx_.stream());
}

void CachingDeviceAllocator::copy_within(void* dst, const void* src, size_t n) const {
  if (n == 0) return;
  DeviceGuard g(ctx_.device());
  SPIRE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, ctx_.stream()));
}

// ---- PinnedStaging -------------------------------------------------------------

PinnedStaging::~PinnedStaging() {
  for (Chunk& c : chunks_) {
    if (c.done) {
      cudaEventSynchronize(c.done);
      cudaEventDestroy(c.done);
    }
    if (c.ptr) cudaFreeHost(c.ptr);
  }
}

PinnedStaging::Chunk& PinnedStaging::free_chunk() {
  for (Chunk& c : chunks_) {
    if (!c.pending) return c;
    cudaError_t q = cudaEventQuery(c.done);
    if (q == cudaSuccess) {
      c.pending = false;
      return c;
    }
    // cudaErrorNotReady is not a failure, but the runtime records it as the thread's last
    // error; clear it, or the next SPIRE_CUDA_LAUNCH_CHECK (cudaGetLastError) would report
    // it against an unrelated kernel (PyTorch's caching allocator clears it the same way).
    if (q == cudaErrorNotReady) cudaGetLastError();
    else SPIRE_CUDA_CHECK(q);
  }
  if (static_cast<int>(chunks_.size()) < kMaxChunks) {
    Chunk c;
    SPIRE_CUDA_CHECK(cudaHostAlloc(&c.ptr, kChunk, cudaHostAllocDefault));
    SPIRE_CUDA_CHECK(cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming));
    chunks_.push_back(c);
    return chunks_.back();
  }
  Chunk& c = chunks_[next_++ % chunks_.size()];
  SPIRE_CUDA_CHECK(cudaEventSynchronize(c.done));
  c.pending = false;
  return c;
}

void PinnedStaging::upload(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  DeviceGuard g(device_);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t off = 0; off < bytes; off += kChunk) {
    size_t n = std::min(kChunk, bytes - off);
    Chunk& c = free_chunk();
    std::memcpy(c.ptr, static_cast<const char*>(src) + off, n);
    SPIRE_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + off, c.ptr, n,
                                     cudaMemcpyHostToDevice, stream));
    SPIRE_CUDA_CHECK(cudaEventRecord(c.done, stream));
    c.pending = true;
  }
}

void PinnedStaging::download(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  DeviceGuard g(device_);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t off = 0; off < bytes; off += kChunk) {
    size_t n = std::min(kChunk, bytes - off);
    Chunk& c = free_chunk();
    SPIRE_CUDA_CHECK(cudaMemcpyAsync(c.ptr, static_cast<const char*>(src) + off, n,
                                     cudaMemcpyDeviceToHost, stream));
    SPIRE_CUDA_CHECK(cudaEventRecord(c.done, stream));
    SPIRE_CUDA_CHECK(cudaEventSynchronize(c.done));  // the host needs the bytes now
    std::memcpy(static_cast<char*>(dst) + off, c.ptr, n);
  }
}

}  // namespace spire::cuda
