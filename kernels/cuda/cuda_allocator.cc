// The CUDA device allocator (one per device, registered for
// DeviceType::CUDA at load time). This first version calls cudaMalloc and
// cudaFree directly; the CUDA backend issue replaces it with a caching,
// stream-ordered allocator behind the same Allocator interface.
#include <map>
#include <memory>
#include <mutex>

#include "core/allocator.h"
#include "kernels/cuda/cuda_check.h"

namespace spire::cuda {
namespace {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    SPIRE_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != device) SPIRE_CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceGuard() {
    if (prev_ != device_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = 0;
  int device_ = 0;
};

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    DeviceGuard g(index_);
    void* p = nullptr;
    SPIRE_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  void deallocate(void* ptr, size_t) override {
    if (!ptr) return;
    DeviceGuard g(index_);
    cudaFree(ptr);  // never throw from a destructor path
  }
  Device device() const override { return Device::cuda(index_); }
  const char* name() const override { return "cuda"; }
  void copy_to_host(void* dst, const void* src, size_t n) const override {
    if (n) SPIRE_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  }
  void copy_from_host(void* dst, const void* src, size_t n) const override {
    if (n) SPIRE_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  }
  void copy_within(void* dst, const void* src, size_t n) const override {
    if (n) SPIRE_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice));
  }

 private:
  int index_;
};

Allocator* cuda_allocator(int index) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<CudaAllocator>> allocators;
  std::lock_guard<std::mutex> lock(mu);
  int count = 0;
  SPIRE_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (index < 0 || index >= count)
    throw_error("device cuda:", index, " does not exist (", count, " CUDA devices visible)");
  auto& a = allocators[index];
  if (!a) a = std::make_unique<CudaAllocator>(index);
  return a.get();
}

}  // namespace

SPIRE_STATIC_INIT(cuda_allocator_factory) {
  register_allocator_factory(DeviceType::CUDA, cuda_allocator);
}

}  // namespace spire::cuda
