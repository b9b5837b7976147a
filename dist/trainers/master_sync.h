// Masters and their copies, for the trainers that keep copies of a
// variable: which local variable replicates which master (the replicated
// trainers' towers), and the callback that gives every copy its master's
// value before training and at every epoch (HorovodTrainer's broadcast of
// rank 0's variables, SyncMultiGPUTrainerReplicated's copy of tower 0's
// variables to the replicas; tensorpack's BROADCAST_EVERY_EPOCH).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "layers/variables.h"
#include "train/callback.h"

namespace spire {

/// A replica (a local variable "tower<k>/X" of training tower k > 0,
/// optimizer slots included) and its master X.
struct Replica {
  Variable replica;
  Node* master = nullptr;  // null when the graph has no variable X
};

/// Every replica in `g` with its master, in creation order.
std::vector<Replica> replicas_of_masters(Graph& g);

/// A callback running `op()` (the op giving every copy its master's value)
/// through the plain session before training and, with `every_epoch`, at
/// every epoch. `op` is asked each time, so the op may be built after the
/// callbacks are set up; when it gives null there is nothing to run. Not
/// chief-only: every process takes part.
CallbackPtr make_master_sync_callback(std::string name, std::function<Node*()> op, bool every_epoch);

}  // namespace spire
