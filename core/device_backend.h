// Device backends as core sees them: a table of functions per DeviceType
// (how many devices exist, the per-device context handed to kernels, how to
// wait for a device's queued work, how to copy between two devices of the
// type). Backends outside core (kernels/cuda) register theirs at load time,
// so the executor reaches a GPU without including any CUDA header. The CPU
// needs no entry.
#pragma once

#include <cstddef>
#include <functional>

#include "core/device.h"

namespace spire {

struct DeviceBackend {
  /// Number of usable devices of this type (0 when the driver or the
  /// hardware is absent; never throws).
  std::function<int()> device_count;
  /// The backend's per-device context (e.g. the CUDA stream and library
  /// handles), passed to kernels as KernelContext::device_context().
  std::function<void*(int index)> context;
  /// Makes device `index` current for the calling thread (kernels launch on
  /// the current device); the executor calls it before a step on a device
  /// other than the previous step's.
  std::function<void(int index)> make_current;
  /// Blocks until the work queued on the device has finished; surfaces
  /// asynchronous errors as spire::Error.
  std::function<void(int index)> synchronize;
  /// Copies `bytes` from `src` on device `src_index` to `dst` on device
  /// `dst_index`, ordered after the work queued on both devices.
  std::function<void(void* dst, int dst_index, const void* src, int src_index, size_t bytes)>
      copy_between;
  /// Records an event after the work queued so far on device `index` and
  /// returns it (taken from the backend's pool). The executor records one
  /// after a step whose value another lane reads.
  std::function<void*(int index)> record_event;
  /// Makes device `index`'s queue wait for `event` without blocking the host.
  std::function<void(int index, void* event)> wait_event;
  /// Blocks the host until `event` has completed; surfaces asynchronous
  /// errors as spire::Error.
  std::function<void(void* event)> synchronize_event;
  /// Returns `event` to the pool (it may still be pending).
  std::function<void(void* event)> release_event;
  /// When true, the executor synchronizes the device after every kernel, so
  /// an asynchronous error is reported with the node that caused it (the
  /// CUDA backend sets it from SPIRE_CUDA_SYNC_DEBUG=1).
  bool synchronize_after_kernels = false;
};

/// Registers the backend of a device type (done once at load time).
void register_device_backend(DeviceType type, DeviceBackend backend);
/// The backend of a device type, or null when this build has none.
const DeviceBackend* find_device_backend(DeviceType type);
/// Number of usable devices of `type` (CPU: 1; 0 without a backend or hardware).
int device_count(DeviceType type);
/// Waits for the work queued on `device` (no-op for the CPU).
void synchronize_device(const Device& device);

}  // namespace spire
