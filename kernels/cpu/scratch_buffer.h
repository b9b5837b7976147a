// ScratchBuffer: per-thread, 64-byte-aligned scratch memory for the CPU kernels that need a
// work area of their own per call (the GEMMs' packed blocks, the direct convolution's padded
// strip). It grows on demand and is reused by later calls on the same thread, so a hot loop
// allocates nothing; each thread keeps its largest buffer until it exits. Kernels hold one
// per purpose as a thread_local: a ThreadPool's threads run one loop at a time, and a nested
// parallel_for runs inline, so no two users of one buffer overlap on a thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

namespace spire::cpu {

class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { release(); }

  /// Room for `count` elements of T (contents unspecified), valid until the next get().
  template <class T>
  T* get(int64_t count) {
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    if (bytes > capacity_) {
      release();
      data_ = ::operator new(bytes, std::align_val_t{kAlign});
      capacity_ = bytes;
    }
    return static_cast<T*>(data_);
  }

 private:
  static constexpr size_t kAlign = 64;
  void release() {
    if (data_ != nullptr) ::operator delete(data_, std::align_val_t{kAlign});
    data_ = nullptr;
    capacity_ = 0;
  }
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace spire::cpu
