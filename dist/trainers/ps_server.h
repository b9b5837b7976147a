// The server side of the parameter-server trainers (distributed_trainers.h;
// the messages in ps_protocol.h): server p holds shard p (its variables,
// their optimizer slots, the optimizer's step-wide state), applies every
// worker's gradients in rank order as separate updates, answers each push
// with the fresh values, and serves until every worker has finished.
#pragma once

#include <optional>
#include <vector>

#include "dist/trainers/ps_protocol.h"

namespace spire {
class Session;
}

namespace spire::ps {

class Server {
 public:
  /// `cluster` outlives the server; this rank serves shard cluster.rank.
  explicit Server(const Cluster& cluster);

  /// Builds the server's update of its shard in `g` (placeholders for the
  /// gradients, the model's optimizer applied on the CPU) and collects its
  /// state; `num_trainable` is for the warning when it holds nothing.
  void build(Graph& g, size_t num_trainable);
  /// Serves the workers' requests until every worker has finished.
  void serve(Session& session);
  /// Its state by variable name: the shard's variables, their slots, the
  /// step-wide optimizer state.
  Bundle state_values(Session& session) const;

 private:
  const Shard& mine() const { return c_.shards[static_cast<size_t>(c_.rank)]; }
  void reply_all(int64_t kind, int64_t step, const std::vector<char>& payload);
  void handle_round(int64_t kind, std::vector<std::optional<dist::Message>>& round);

  const Cluster& c_;
  Session* sess_ = nullptr;
  std::vector<Output> placeholders_;  // per shard variable
  Node* apply_ = nullptr;
  std::vector<Output> state_;   // shard variables, slots, step-wide optimizer state
  std::vector<Output> inputs_;  // what the update reads besides (the learning rate)
};

}  // namespace spire::ps
