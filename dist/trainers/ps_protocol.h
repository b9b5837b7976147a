// The parameter-server protocol of DistributedTrainerParameterServer and
// DistributedTrainerReplicated (distributed_trainers.h): the messages
// between the workers (ps_worker.h) and the servers (ps_server.h), and what
// both sides of a rank know alike (ps::Cluster).
//
// Every worker sends each server requests (tag kTagRequest: an i64 kind, an
// i64 step, a payload) and waits for the reply (tag kTagReply: an i64
// status, the kind and step it answers, a payload). "Round" requests (sync,
// chief values, push, done) come from every worker; a server handles a
// round when all workers' requests are there, taking the workers in rank
// order. "Single" requests (pull, set-model) come from the chief alone and
// are answered at once: the chief makes them between rounds, so they see
// the state of a finished step.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "dist/comm/messenger.h"
#include "layers/optimizers.h"

namespace spire::ps {

constexpr int kTagRequest = 1;
constexpr int kTagReply = 2;

/// A request's kind.
enum Kind : int64_t {
  kSync = 1,         // round: the shards' signatures; the chief's values (initialization)
  kChiefValues = 2,  // round: the chief's i64 values to every worker (the loop's agreement)
  kPush = 3,         // round: a step's gradients; the reply has the fresh values
  kDone = 4,         // a worker ended training
  kPull = 5,         // single: the server's state (slots, step-wide optimizer state)
  kSetModel = 6,     // single: the chief's model variables (replicated trainer)
};
/// "a gradient push", ... (for messages).
const char* kind_name(int64_t kind);
/// Whether requests of `kind` come from every worker (a round).
bool is_round(int64_t kind);

/// A reply's status: kOk, or kStop (a worker ended training, so this push
/// was not applied and the worker stops too).
constexpr int64_t kOk = 0, kStop = 1;
/// The bytes of a reply before its payload (status, kind, step).
constexpr size_t kReplyHeader = 3 * sizeof(int64_t);

std::vector<char> request(int64_t kind, int64_t step, const std::vector<char>& payload = {});
std::vector<char> reply(int64_t status, int64_t kind, int64_t step, const std::vector<char>& payload = {});

/// "name dtype[shape]" (for messages and shard signatures).
std::string describe(const Output& v);

/// A tensor's bytes (copied to the host first).
void put_raw(dist::MessageWriter& w, const Tensor& t);
/// Bytes read back into a tensor of the dtype and shape of `like`.
Tensor get_raw(dist::MessageReader& r, const Output& like, const std::string& what);

/// Named tensors: a count, then per tensor its name, dtype, dims and bytes.
using Bundle = std::vector<std::pair<std::string, Tensor>>;
void put_bundle(dist::MessageWriter& w, const Bundle& b);
Bundle get_bundle(dist::MessageReader& r, const std::string& what);

/// What one server holds, known alike on every rank.
struct Shard {
  std::vector<Output> vars;        // trainable: pushed and pulled every step, in this order
  std::vector<Output> model_vars;  // replicated: the model variables' shadows
  int64_t bytes = 0;
  /// Its variables (names, dtypes, shapes): every rank must see it alike.
  std::string signature() const;
};

/// What the worker or server of one rank knows of the job: the ranks
/// (servers 0..num_ps-1, workers after them), the messages, the shards and
/// every variable of the graph by name.
struct Cluster {
  std::string kind;  // the trainer's name, for messages
  std::shared_ptr<dist::Messenger> messenger;
  int rank = 0, num_ps = 1, num_workers = 1;
  double timeout_seconds = 0;  // 0: no limit (DistributedOptions::timeout_seconds)
  std::shared_ptr<Optimizer> opt;
  std::vector<Shard> shards;              // one per server
  std::map<std::string, Output> by_name;  // every variable of the graph (set with the session)

  int server_rank(int p) const { return p; }
  int worker_rank(int w) const { return num_ps + w; }
  /// The variable `name`; `what` (the message that named it) in the error
  /// when this rank's graph has none.
  Output variable(const std::string& name, const std::string& what) const;
  /// The optimizer's slots of `v`.
  std::vector<Output> slots_of(const Output& v) const;
};

}  // namespace spire::ps
