// The worker side of the parameter-server trainers (distributed_trainers.h;
// the messages in ps_protocol.h): a worker averages its towers' gradients,
// pushes each server the gradients of its shard, waits for the fresh values
// and sets them (and their replicas); the chief also initializes the
// servers, fetches their state before its epoch callbacks and (replicated
// trainer) sends them its model variables.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dist/trainers/ps_protocol.h"
#include "layers/optimizers.h"

namespace spire {
class Session;
}

namespace spire::ps {

class Worker {
 public:
  /// `cluster` outlives the worker; `chief`: worker 0.
  Worker(const Cluster& cluster, bool chief);

  /// Builds the worker's graph from the towers' gradients (tower 0's
  /// variables carry the global names): each gradient averaged over the
  /// towers on the CPU (the caching device), in the servers' order; and the
  /// update the servers run, built here only for its variables (the
  /// optimizer's slots and step-wide state, saved by the chief under
  /// SimpleTrainer's names) and never run. Returns train_op (the averages).
  Node* build(Graph& g, const std::vector<GradsAndVars>& grads);
  /// The averaged gradients run_step fetches, in the servers' order.
  const std::vector<Output>& gradients() const { return grads_; }

  /// After the chief's restore: every replica (the replicated trainer's
  /// towers k > 0) is found, the servers get the chief's values (their
  /// shards' state) and every worker takes them.
  void start(Session& session, Graph& g, bool replicated);
  /// One step: `grad_values` (of gradients()) to the servers, the fresh
  /// values back into this worker's variables. Throws StopTraining when
  /// another worker ended training.
  void push_and_pull(const std::vector<Tensor>& grad_values, int64_t step);
  /// The chief's `values` on every worker (through server 0).
  std::vector<int64_t> chief_values(const std::vector<int64_t>& values, const std::string& what);
  /// Fetches every server's state (slots, step-wide state) into this
  /// worker's copies.
  void pull_state();
  /// Sends the servers the chief's model variables (replicated trainer).
  void push_model_variables();
  /// Tells every server that this worker ended training after `step`.
  void finish(int64_t step);

 private:
  /// The reply of server p to `kind` (its header checked, then skipped by
  /// the caller's reader); *stop is set when the server says to stop.
  dist::Message wait_reply(int p, int64_t kind, int64_t step, bool* stop = nullptr);
  /// A worker waits longer than a server: when a worker stalls, the server
  /// (which knows who is missing) reports first and names it.
  double timeout() const { return c_.timeout_seconds > 0 ? 1.5 * c_.timeout_seconds + 2 : 0; }
  /// The chief's values for server p: every global variable but the other
  /// servers' shards (and their slots).
  Bundle chief_values_for(int p, Graph& g) const;
  /// Sets `value` into variable `v` and, with `to_replicas`, its replicas.
  void set_value(const Output& v, const Tensor& value, bool to_replicas);
  void set_all(const Bundle& values, bool to_replicas, const std::string& what);

  const Cluster& c_;
  bool chief_;
  Session* sess_ = nullptr;
  std::vector<Output> grads_;                            // averaged over the towers, per shard variable
  std::map<std::string, std::vector<Output>> replicas_;  // global name -> towers k > 0's copies
  std::vector<std::vector<std::string>> input_names_;    // per server: what its update reads besides
};

}  // namespace spire::ps
