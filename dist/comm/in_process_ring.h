// InProcessRing: Spire's own ring between the devices of one process (CPU
// devices or GPUs), the default communicator of the collective ops.
//
// Allreduce is a reduce-scatter followed by an allgather around the ring
// (dist/comm/ring_schedule.h), chunked and pipelined: each participant works on
// one segment at a time and publishes its progress, so its successor reduces
// segment k while it already works on segment k+1. Each participant's share
// of the work runs in its own call (on its device's lane when called by the
// executor), reading its predecessor's buffers directly (shared memory; peer
// reads or copies on GPUs). Reduce-scatter is the first half alone;
// broadcast and allgather copy straight from the source participants'
// inputs. Any element count works, including 0 and counts not divisible by
// the number of participants.
//
// Synchronization: per instance, one progress counter per participant
// (arrived, then units done); a participant waits for its predecessor's unit
// before reading it and for its successor's before overwriting what the
// successor still reads; all leave together once every participant is done,
// so no buffer is released while a peer reads it. A group call (all
// participants in one call) runs the same units step by step and never
// waits. Waits spin briefly, then block, honouring the run's cancellation
// and timeout; a participant that fails (timeout, mismatched call) makes the
// others fail with the same message.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"

namespace spire::dist {

struct RingOptions {
  /// Bytes per pipelined segment.
  size_t segment_bytes = size_t{256} << 10;
};

class InProcessRing final : public DispatchingCommunicator {
 public:
  /// Throws spire::Error for an empty or repeated device list, or devices of
  /// different types.
  explicit InProcessRing(std::vector<Device> devices, RingOptions options = {});
  ~InProcessRing() override;

  std::string name() const override;
  const std::vector<Device>& devices() const override { return devices_; }

  /// Collective instances currently open (for tests: 0 between runs).
  size_t open_instances() const;

 private:
  struct Instance;
  using Kind = CollectiveKind;
  void run(Kind kind, const CollectiveCall& call, std::vector<Participant>& parts, ReduceOp op,
           int root) override;
  std::shared_ptr<Instance> join(const CollectiveCall& call, Kind kind, ReduceOp op, int root,
                                 const std::vector<Participant>& parts);
  void leave(const CollectiveCall& call, const std::shared_ptr<Instance>& inst, int participants);
  void close_if_done(const CollectiveKey& key, const std::shared_ptr<Instance>& inst);  // mu_ held
  static constexpr size_t kMaxFailedInstances = 64;

  std::vector<Device> devices_;
  RingOptions options_;
  mutable std::mutex mu_;
  std::map<CollectiveKey, std::shared_ptr<Instance>> instances_;
  std::deque<CollectiveKey> failed_;  // failed instances kept for late participants
};

}  // namespace spire::dist
