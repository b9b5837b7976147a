// Gradient bucketing, shared by every trainer that packs gradients (or
// variables) for their transfer:
// - fusion_buckets and apply_packed: HorovodTrainer's fused allreduce of the
//   gradients (Horovod's tensor fusion) and its broadcast of the global
//   variables;
// - LeastLoadedBins: the parameter-server trainers' sharding of the
//   variables over the servers by bytes (tensorpack's
//   GreedyLoadBalancingStrategy) and the multi-device trainers' placement of
//   shared variables over the towers' devices by elements (tensorpack's
//   LeastLoadedDeviceSetter);
// - pack_flat and unpack_flat: tensors as one 1-D tensor and back
//   (HorovodTrainer's buckets, SyncMultiGPUTrainerReplicated's hierarchical
//   all-reduce in chunks).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/graph.h"

namespace spire {

/// Groups of indices into a list of tensors, in the order they are visited.
using Buckets = std::vector<std::vector<size_t>>;

/// Horovod's fusion buckets: `xs` visited in `order`; consecutive tensors
/// of one dtype share a bucket of at most `threshold_bytes` bytes (a larger
/// tensor gets a bucket of its own; a tensor of unknown shape gets its own
/// and is never packed; threshold 0: one bucket per tensor). The first
/// bucket holds at most `first_bucket_bytes` (-1, or more than the
/// threshold: `threshold_bytes`), as
/// PyTorch DDP's first bucket is small so that the first allreduce starts
/// early in the backward pass.
Buckets fusion_buckets(const std::vector<Output>& xs, const std::vector<size_t>& order, int64_t threshold_bytes,
                       int64_t first_bucket_bytes = -1);

/// Greedy load balancing: each item goes to the bin with the least load so
/// far (the first such bin on ties), which then carries the item's load.
class LeastLoadedBins {
 public:
  explicit LeastLoadedBins(size_t num_bins);
  /// Puts an item of `load` into the least loaded bin; returns that bin.
  size_t add(int64_t load);
  int64_t load(size_t bin) const { return loads_.at(bin); }
  size_t size() const { return loads_.size(); }

 private:
  std::vector<int64_t> loads_;
};

/// The tensors (of one dtype, fully defined shapes) flattened and
/// concatenated into one 1-D tensor named `name`.
Output pack_flat(const std::vector<Output>& xs, const std::string& name = "pack");
/// The inverse of pack_flat: `flat` split (the Split named `name`) into
/// tensors of `shapes`, in order.
std::vector<Output> unpack_flat(const Output& flat, const std::vector<Shape>& shapes,
                                const std::string& name = "unpack");
/// One call of `fn` for a whole bucket: `xs` packed (unless there is one),
/// `fn` applied to the packed tensor, the result unpacked like `xs`.
std::vector<Output> apply_packed(const std::vector<Output>& xs, const std::function<Output(const Output&)>& fn);

}  // namespace spire
