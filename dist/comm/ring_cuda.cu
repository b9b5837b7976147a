// The CUDA half of Spire's in-process ring (see dist/comm/ring_device.h): the
// ring's schedule, waits and validation are the CPU-tested code of
// dist/comm/in_process_ring.cc; this file only queues each unit's work on the
// participant's stream and orders it with pooled CUDA events:
//
// - published(unit) records an event on this participant's stream after the
//   unit's work (unit -1: the inputs are ready, recorded on arrival);
// - after_peer(peer, unit) makes this stream wait for the peer's event of
//   that unit, so no host thread blocks on a GPU;
// - combine() reads the peer's segment directly where peer access is
//   enabled, else copies it into scratch memory first; copy() is a peer copy.
//
// Never run on a GPU in CI (compiled only); bench/gpu_check.sh runs it.
#include <vector>

#include "dist/comm/ring_device.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/launch.h"
#include "kernels/functors.h"

namespace spire::dist {
namespace {

using cuda::CudaContext;
using cuda::DeviceGuard;
using cuda::PooledEvent;

template <typename T, typename Op>
__global__ void combine_kernel(int64_t n, const T* a, const T* b, T* dst, Op op, T divisor, bool divide) {
  SPIRE_GRID_STRIDE_LOOP(i, n) {
    T v = op(a[i], b[i]);
    dst[i] = divide ? v / divisor : v;
  }
}

// f16 / bf16 storage: combined in f32, rounded once (as the CPU ring does).
template <typename Op>
__global__ void combine_half_kernel(int64_t n, const uint16_t* a, const uint16_t* b, uint16_t* dst, Op op,
                                    float divisor, bool divide, bool bf16) {
  const functors::FromHalf<float> load{bf16};
  const functors::ToHalf store{bf16};
  SPIRE_GRID_STRIDE_LOOP(i, n) {
    const float v = op(load(a[i]), load(b[i]));
    dst[i] = store(divide ? v / divisor : v);
  }
}

class CudaRingDevice final : public RingDevice {
 public:
  CudaRingDevice(int device, int64_t units)
      : device_(device), ctx_(cuda::context_for(device)), events_(static_cast<size_t>(units + 1), nullptr) {}
  ~CudaRingDevice() override {
    for (PooledEvent* e : events_)
      if (e) ctx_.events().release(e);
  }

  void combine(ReduceOp op, DType dtype, void* dst, const void* a, const void* b,
               const Device& b_device, int64_t n, int64_t divisor) override {
    DeviceGuard g(device_);
    const void* src = b;
    if (b_device.index != device_ && !cuda::enable_peer_access(device_, b_device.index)) {
      // No direct reads of the peer's memory: stage its segment here first.
      const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
      if (scratch_bytes_ < bytes) {
        scratch_.reset();
        scratch_ = std::make_unique<cuda::Scratch>(ctx_, bytes);
        scratch_bytes_ = bytes;
      }
      SPIRE_CUDA_CHECK(cudaMemcpyPeerAsync(scratch_->data(), device_, b, b_device.index, bytes, ctx_.stream()));
      src = scratch_->data();
    }
    if (dtype == DType::F16 || dtype == DType::BF16) {
      const int blocks = cuda::blocks_for(ctx_, n);
      const auto* x = static_cast<const uint16_t*>(a);
      const auto* y = static_cast<const uint16_t*>(src);
      auto* d = static_cast<uint16_t*>(dst);
      const bool bf = dtype == DType::BF16, divide = divisor > 1;
      const float div = static_cast<float>(divisor);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kMean:
          combine_half_kernel<<<blocks, cuda::kThreads, 0, ctx_.stream()>>>(n, x, y, d, functors::Add{}, div, divide, bf);
          break;
        case ReduceOp::kMax:
          combine_half_kernel<<<blocks, cuda::kThreads, 0, ctx_.stream()>>>(n, x, y, d, functors::Maximum{}, div, false, bf);
          break;
        case ReduceOp::kMin:
          combine_half_kernel<<<blocks, cuda::kThreads, 0, ctx_.stream()>>>(n, x, y, d, functors::Minimum{}, div, false, bf);
          break;
      }
      SPIRE_CUDA_LAUNCH_CHECK();
      return;
    }
    visit_dtype(dtype, "ring allreduce on a GPU", [&](auto zero) {
      using T = decltype(zero);
      if constexpr (std::is_same_v<T, bool>) {
        throw_error("ring allreduce: bool tensors cannot be reduced");
      } else {
        const int blocks = cuda::blocks_for(ctx_, n);
        const T* x = static_cast<const T*>(a);
        const T* y = static_cast<const T*>(src);
        T* d = static_cast<T*>(dst);
        const T div = static_cast<T>(divisor);
        const bool divide = divisor > 1;
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kMean:
            combine_kernel<<<blocks, cuda::kThreads, 0, ctx_.stream()>>>(n, x, y, d, functors::Add{}, div, divide);
            break;
          case ReduceOp::kMax:
            combine_kernel<<<blocks, cuda::kThreads, 0, ctx_.stream()>>>(n, x, y, d, functors::Maximum{}, div, false);
            break;
          case ReduceOp::kMin:
            combine_kernel<<<blocks, cuda::kThreads, 0, ctx_.stream()>>>(n, x, y, d, functors::Minimum{}, div, false);
            break;
        }
        SPIRE_CUDA_LAUNCH_CHECK();
      }
    });
  }

  void copy(void* dst, const void* src, const Device& src_device, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    DeviceGuard g(device_);
    if (src_device.index != device_) cuda::enable_peer_access(device_, src_device.index);
    SPIRE_CUDA_CHECK(cudaMemcpyPeerAsync(dst, device_, src, src_device.index, bytes, ctx_.stream()));
  }

  void after_peer(RingDevice& peer, int64_t unit) override {
    auto& p = static_cast<CudaRingDevice&>(peer);
    PooledEvent* e = p.events_.at(static_cast<size_t>(unit + 1));
    if (e == nullptr) throw_error("internal error: the ring waits for an event its peer never recorded");
    DeviceGuard g(device_);
    SPIRE_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream(), e->event, 0));
  }

  void published(int64_t unit) override {
    PooledEvent*& slot = events_.at(static_cast<size_t>(unit + 1));
    if (slot == nullptr) slot = ctx_.events().acquire();
    DeviceGuard g(device_);
    SPIRE_CUDA_CHECK(cudaEventRecord(slot->event, ctx_.stream()));
  }

 private:
  int device_;
  CudaContext& ctx_;
  std::vector<PooledEvent*> events_;  // index unit + 1 (0: arrival)
  std::unique_ptr<cuda::Scratch> scratch_;
  size_t scratch_bytes_ = 0;
};

}  // namespace

SPIRE_STATIC_INIT(cuda_ring_device) {
  register_ring_device(DeviceType::CUDA, [](const Device& d, int64_t units) -> std::unique_ptr<RingDevice> {
    return std::make_unique<CudaRingDevice>(d.index, units);
  });
}

}  // namespace spire::dist
