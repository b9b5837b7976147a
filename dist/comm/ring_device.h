// The device half of Spire's in-process ring: how one participant combines
// and copies segments on its device, and how its device work is ordered
// after a peer's. The ring (dist/comm/in_process_ring.cc) decides what to do and
// when (host progress counters per participant); a RingDevice does it. The
// MPI backend's algorithms (dist/mpi/mpi_algorithms.cc) reduce with the CPU
// RingDevice too: Spire's reductions are the same in one process and
// across processes.
//
// - CPU devices: the work runs on the participant's lane thread as it is
//   issued, so the host counters alone order it (after_peer/published do
//   nothing).
// - CUDA devices (dist/comm/ring_cuda.cu): work is queued on the device's
//   stream; published(unit) records an event per unit, and after_peer()
//   makes this stream wait for the peer's event of that unit, so no host
//   thread ever blocks on a GPU. Before leaving, the ring calls after_peer
//   for every peer's last unit, which orders this stream after the peers'
//   reads of this participant's buffers.
//
// Backends register a factory per device type; the ring asks it for one
// RingDevice per participant and collective instance.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "dist/comm/communicator.h"

namespace spire::dist {

class RingDevice {
 public:
  virtual ~RingDevice() = default;
  /// dst[i] = op(a[i], b[i]) for n elements of `dtype`, then / divisor
  /// when divisor > 1 (the last step of a mean). dst and a are this
  /// participant's; b lives on `b_device` (a peer's). dst may equal a.
  virtual void combine(ReduceOp op, DType dtype, void* dst, const void* a, const void* b,
                       const Device& b_device, int64_t n, int64_t divisor) = 0;
  /// dst (this participant's) = src (on `src_device`), `bytes` bytes.
  virtual void copy(void* dst, const void* src, const Device& src_device, size_t bytes) = 0;
  /// The host saw `peer` complete `unit` (host order): order this device's
  /// later work after it.
  virtual void after_peer(RingDevice& peer, int64_t unit) {
    (void)peer;
    (void)unit;
  }
  /// This participant issued all of `unit`'s work (-1: its inputs are
  /// ready). Called before the unit's progress is published to the peers.
  virtual void published(int64_t unit) { (void)unit; }
};

/// Makes the RingDevice of a participant on `device` for one collective
/// instance of `units` units.
using RingDeviceFactory = std::function<std::unique_ptr<RingDevice>(const Device& device, int64_t units)>;

/// Registers the factory of a device type (CPU is built in; CUDA registers
/// at load time when built).
void register_ring_device(DeviceType type, RingDeviceFactory factory);
/// A RingDevice for `device`; throws spire::Error when its type has none.
std::unique_ptr<RingDevice> make_ring_device(const Device& device, int64_t units);

}  // namespace spire::dist
