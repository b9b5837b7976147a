// DistributedTrainerParameterServer and DistributedTrainerReplicated (see
// distributed_trainers.h).
//
// The protocol: every worker sends each server requests (tag kTagRequest;
// an i64 kind, an i64 step, a payload) and waits for the reply (tag
// kTagReply). "Round" requests (sync, loop, push, done) come from every
// worker; a server handles a round when all workers' requests are there,
// taking the workers in rank order. "Single" requests (pull, set-model)
// come from the chief alone and are answered at once: the chief makes them
// between rounds, so they see the state of a finished step.
#include "dist/trainers/distributed_trainers.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/op_registry.h"
#include "core/ops.h"
#include "layers/tower.h"
#include "train/callback.h"
#include "core/logger.h"

namespace spire {

namespace {

constexpr int kTagRequest = 1;
constexpr int kTagReply = 2;

enum Kind : int64_t { kSync = 1, kLoop = 2, kPush = 3, kDone = 4, kPull = 5, kSetModel = 6 };

const char* kind_name(int64_t k) {
  switch (k) {
    case kSync: return "the initial synchronization";
    case kLoop: return "the loop's agreement";
    case kPush: return "a gradient push";
    case kDone: return "the end of training";
    case kPull: return "a state pull";
    case kSetModel: return "a model-variable update";
    default: return "an unknown request";
  }
}

bool is_round(int64_t k) { return k == kSync || k == kLoop || k == kPush; }

// A reply: a status (kOk, or kStop: a worker ended training, so this push
// was not applied and the worker stops too), the kind and step it answers,
// then its payload.
constexpr int64_t kOk = 0, kStop = 1;
constexpr size_t kReplyHeader = 3 * sizeof(int64_t);
std::vector<char> reply(int64_t status, int64_t kind, int64_t step, const std::vector<char>& payload = {}) {
  dist::MessageWriter w;
  w.put_i64(status);
  w.put_i64(kind);
  w.put_i64(step);
  w.put_bytes(payload.data(), payload.size());
  return std::move(w.data());
}

int64_t num_bytes(const Output& v) {
  return v.shape().num_elements() * static_cast<int64_t>(dtype_size(v.dtype()));
}

std::string describe(const Output& v) {
  return str_cat(v.node->name(), " ", dtype_name(v.dtype()), v.shape().to_string());
}

// A tensor's bytes (on the host), then read back into a tensor of the
// expected dtype and shape.
void put_raw(dist::MessageWriter& w, const Tensor& t) {
  const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  w.put_i64(static_cast<int64_t>(h.nbytes()));
  w.put_bytes(h.raw_data(), h.nbytes());
}
Tensor get_raw(dist::MessageReader& r, const Output& like, const std::string& what) {
  Tensor t(like.dtype(), like.shape());
  const int64_t n = r.get_i64();
  SPIRE_CHECK(n == static_cast<int64_t>(t.nbytes()), what, ": ", n, " bytes for ", describe(like), ", expected ",
              t.nbytes());
  std::memcpy(t.raw_data(), r.get_bytes(t.nbytes()), t.nbytes());
  return t;
}

// Named tensors: a count, then per tensor its name, dtype, dims and bytes.
using Bundle = std::vector<std::pair<std::string, Tensor>>;
void put_bundle(dist::MessageWriter& w, const Bundle& b) {
  w.put_i64(static_cast<int64_t>(b.size()));
  for (const auto& [name, t] : b) {
    w.put_string(name);
    w.put_i64(static_cast<int64_t>(t.dtype()));
    w.put_i64(t.shape().rank());
    for (int i = 0; i < t.shape().rank(); ++i) w.put_i64(t.shape().dim(i));
    put_raw(w, t);
  }
}
Bundle get_bundle(dist::MessageReader& r, const std::string& what) {
  Bundle b;
  const int64_t n = r.get_i64();
  for (int64_t i = 0; i < n; ++i) {
    std::string name = r.get_string();
    const auto dt = static_cast<DType>(r.get_i64());
    const int64_t rank = r.get_i64();
    SPIRE_CHECK(rank >= 0 && rank < 64, what, ": a malformed tensor '", name, "'");
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < rank; ++d) dims.push_back(r.get_i64());
    Tensor t(dt, Shape(dims));
    const int64_t nb = r.get_i64();
    SPIRE_CHECK(nb == static_cast<int64_t>(t.nbytes()), what, ": '", name, "' has ", nb, " bytes, expected ",
                t.nbytes());
    std::memcpy(t.raw_data(), r.get_bytes(t.nbytes()), t.nbytes());
    b.emplace_back(std::move(name), std::move(t));
  }
  return b;
}

std::vector<char> request(int64_t kind, int64_t step, const std::vector<char>& payload = {}) {
  dist::MessageWriter w;
  w.put_i64(kind);
  w.put_i64(step);
  w.put_bytes(payload.data(), payload.size());
  return std::move(w.data());
}

// Every Variable node `root` depends on (through data and control inputs).
std::vector<Node*> variables_read_by(Node* root) {
  std::vector<Node*> out, stack{root};
  std::set<Node*> seen{root};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n->op_def().is_variable()) {
      out.push_back(n);
      continue;
    }
    auto visit = [&](Node* m) {
      if (m && seen.insert(m).second) stack.push_back(m);
    };
    for (const Output& in : n->inputs()) visit(in.node);
    for (Node* c : n->control_inputs()) visit(c);
  }
  return out;
}

}  // namespace

// What one server holds, known alike on every rank.
struct DistributedTrainerBase::Shard {
  std::vector<Output> vars;        // trainable: pushed and pulled every step, in this order
  std::vector<Output> model_vars;  // replicated: the model variables' shadows
  int64_t bytes = 0;
  std::string signature() const {
    std::string s;
    for (const Output& v : vars) s += describe(v) + ";";
    s += "|";
    for (const Output& v : model_vars) s += describe(v) + ";";
    return s;
  }
};

class DistributedTrainerBase::Impl {
 public:
  using Message = dist::Message;
  explicit Impl(DistributedTrainerBase& t) : t(t) {}
  DistributedTrainerBase& t;
  std::shared_ptr<dist::Messenger> m;
  std::shared_ptr<Optimizer> opt;
  std::vector<Shard> shards;  // one per server
  std::map<std::string, Output> by_name;  // every variable of the graph
  // Worker:
  std::vector<Output> grads;                 // averaged over the towers, per shard variable
  std::map<std::string, std::vector<Output>> replicas;  // global name -> towers k > 0's copies
  std::vector<std::vector<std::string>> input_names;  // per server: what its update reads besides
  // Server:
  std::vector<Output> placeholders;  // per shard variable
  Node* apply = nullptr;
  std::vector<Output> state;   // shard variables, slots, step-wide optimizer state
  std::vector<Output> inputs;  // what the update reads besides (the learning rate)

  const std::string& kind() const { return t.kind_; }
  double timeout() const { return t.options_.timeout_seconds; }
  int server_rank(int p) const { return p; }
  Session& sess() const { return t.session(); }

  Output variable(const std::string& name, const std::string& what) const {
    auto it = by_name.find(name);
    SPIRE_CHECK(it != by_name.end(), kind(), ": ", what, " names variable '", name,
                "', which this rank's graph does not have (the ranks built different models?)");
    return it->second;
  }

  std::vector<Output> slots_of(const Output& v) const {
    std::vector<Output> out;
    for (const std::string& s : opt->get_slot_names()) {
      Output slot = opt->get_slot(v, s);
      if (slot.node) out.push_back(slot);
    }
    return out;
  }

  // Sets `values` into this rank's variables; replicas follow when
  // `to_replicas` (replicated trainer).
  void set_all(const Bundle& values, bool to_replicas, const std::string& what) {
    for (const auto& [name, value] : values) {
      const Output v = variable(name, what);
      sess().set_variable_value(v.node, value);
      if (!to_replicas) continue;
      auto it = replicas.find(name);
      if (it != replicas.end())
        for (const Output& r : it->second) sess().set_variable_value(r.node, value);
    }
  }

  // A worker waits longer than a server: when a worker stalls, the server
  // (which knows who is missing) reports first and names it.
  double worker_timeout() const { return 1.5 * timeout() + 2; }

  // The reply of server p to `kind_id` (its header checked, then skipped
  // by the caller's reader); *stop is set when the server says to stop.
  Message wait_reply(int p, int64_t kind_id, int64_t step, bool* stop = nullptr) {
    std::optional<dist::Message> msg = m->receive(server_rank(p), kTagReply, worker_timeout());
    if (msg) {
      dist::MessageReader r(msg->data, str_cat(kind(), ": a reply of server rank ", p));
      const int64_t status = r.get_i64(), k = r.get_i64(), s = r.get_i64();
      SPIRE_CHECK(k == kind_id && (k != kPush || s == step), kind(), ": rank ", t.rank_, " expected server rank ",
                  p, "'s answer to ", kind_name(kind_id), " (step ", step, "), got its answer to ", kind_name(k),
                  " (step ", s, "): the ranks are out of step");
      SPIRE_CHECK(status == kOk || (status == kStop && stop), kind(), ": server rank ", p, " refused ",
                  kind_name(kind_id), " of rank ", t.rank_, " (status ", status, ")");
      if (stop) *stop = status == kStop;
      return std::move(*msg);
    }
    throw_error(kind(), ": rank ", t.rank_, " (worker ", t.worker_index(), ") waited ", worker_timeout(),
                " s for parameter server rank ", server_rank(p), " to answer ", kind_name(kind_id),
                kind_id == kPush ? str_cat(" of step ", step) : std::string(),
                "; the server or another worker failed, stalled, or is still in a longer epoch-end "
                "callback (raise DistributedOptions::timeout_seconds)");
  }

  // ---- worker side ----

  // The chief's values for server p: every global variable but the other
  // servers' shards (and their slots).
  Bundle chief_values_for(int p) {
    std::set<std::string> elsewhere;
    for (size_t q = 0; q < shards.size(); ++q) {
      if (static_cast<int>(q) == p) continue;
      for (const Output& v : shards[q].vars) {
        elsewhere.insert(v.node->name());
        for (const Output& s : slots_of(v)) elsewhere.insert(s.node->name());
      }
      for (const Output& v : shards[q].model_vars) elsewhere.insert(v.node->name());
    }
    Bundle b;
    for (const Output& v : global_variables("", &t.graph()))
      if (!elsewhere.count(v.node->name())) b.emplace_back(v.node->name(), sess().variable_value(v.node));
    return b;
  }

  void sync_with_servers() {
    const bool chief = t.is_chief();
    for (int p = 0; p < t.num_ps(); ++p) {
      dist::MessageWriter w;
      w.put_string(shards[static_cast<size_t>(p)].signature());
      w.put_i64(chief ? 1 : 0);
      if (chief) put_bundle(w, chief_values_for(p));
      m->send(server_rank(p), kTagRequest, request(kSync, 0, w.data()));
    }
    input_names.assign(static_cast<size_t>(t.num_ps()), {});
    for (int p = 0; p < t.num_ps(); ++p) {
      Message reply = wait_reply(p, kSync, 0);
      dist::MessageReader r(reply.data, str_cat(kind(), ": the synchronization reply of server rank ", p));
      r.get_bytes(kReplyHeader);
      const int64_t n = r.get_i64();
      for (int64_t i = 0; i < n; ++i) input_names[static_cast<size_t>(p)].push_back(r.get_string());
      set_all(get_bundle(r, "the chief's values"), /*to_replicas=*/true, "the chief's values");
    }
  }

  void push_and_pull(const std::vector<Tensor>& grad_values, int64_t step) {
    // Each server's shard, with the values its update reads besides.
    size_t at = 0;
    for (int p = 0; p < t.num_ps(); ++p) {
      const Shard& s = shards[static_cast<size_t>(p)];
      dist::MessageWriter w;
      w.put_i64(kPush);
      w.put_i64(step);
      for (const std::string& name : input_names[static_cast<size_t>(p)])
        put_raw(w, sess().variable_value(variable(name, "a server's update").node));
      for (size_t i = 0; i < s.vars.size(); ++i) put_raw(w, grad_values[at + i]);
      at += s.vars.size();
      m->send(server_rank(p), kTagRequest, std::move(w.data()));
    }
    // Every server answers (values, or stop when a worker ended training:
    // then no server applied this step); all answers are read first.
    std::vector<Message> replies;
    bool stop = false;
    for (int p = 0; p < t.num_ps(); ++p) {
      bool s = false;
      replies.push_back(wait_reply(p, kPush, step, &s));
      stop = stop || s;
    }
    if (stop)
      throw StopTraining(str_cat("another worker ended training; rank ", t.rank_, " stops before step ", step));
    for (int p = 0; p < t.num_ps(); ++p) {
      const Shard& s = shards[static_cast<size_t>(p)];
      dist::MessageReader r(replies[static_cast<size_t>(p)].data,
                            str_cat(kind(), ": server rank ", p, "'s values after step ", step));
      r.get_bytes(kReplyHeader);
      for (const Output& v : s.vars) {
        Tensor value = get_raw(r, v, "the values after a step");
        sess().set_variable_value(v.node, value);
        auto it = replicas.find(v.node->name());
        if (it != replicas.end())
          for (const Output& rep : it->second) sess().set_variable_value(rep.node, value);
      }
    }
  }

  void pull_state() {
    for (int p = 0; p < t.num_ps(); ++p) m->send(server_rank(p), kTagRequest, request(kPull, 0));
    for (int p = 0; p < t.num_ps(); ++p) {
      Message reply = wait_reply(p, kPull, 0);
      dist::MessageReader r(reply.data, str_cat(kind(), ": server rank ", p, "'s state"));
      r.get_bytes(kReplyHeader);
      set_all(get_bundle(r, "a server's state"), /*to_replicas=*/false, "a server's state");
    }
  }

  void push_model_variables() {
    for (int p = 0; p < t.num_ps(); ++p) {
      Bundle b;
      for (const Output& v : shards[static_cast<size_t>(p)].model_vars)
        b.emplace_back(v.node->name(), sess().variable_value(v.node));
      dist::MessageWriter w;
      put_bundle(w, b);
      m->send(server_rank(p), kTagRequest, request(kSetModel, 0, w.data()));
    }
    for (int p = 0; p < t.num_ps(); ++p) wait_reply(p, kSetModel, 0);
  }

  // ---- server side ----

  Bundle state_values() const {
    Bundle b;
    for (const Output& v : state) b.emplace_back(v.node->name(), sess().variable_value(v.node));
    return b;
  }

  void reply_all(int64_t k, int64_t step, const std::vector<char>& payload) {
    const std::vector<char> data = reply(kOk, k, step, payload);
    for (int w = 0; w < t.num_workers(); ++w) m->send(t.num_ps() + w, kTagReply, data);
  }

  void serve() {
    const int W = t.num_workers();
    const int me = t.rank_;
    const Shard& mine = shards[static_cast<size_t>(me)];
    std::vector<std::optional<Message>> round(static_cast<size_t>(W));
    int arrived = 0;
    int64_t round_kind = 0;
    std::set<int> done;  // workers that ended training
    logger::info(kind(), ": parameter server rank ", me, " serves ", mine.vars.size(), " variables (",
                 mine.bytes, " bytes) to ", W, " worker(s)");
    for (;;) {
      std::optional<Message> msg = m->receive(-1, kTagRequest, timeout());
      if (!msg) {
        std::string who;
        for (int w = 0; w < W; ++w)
          if (!round[static_cast<size_t>(w)]) who += str_cat(who.empty() ? "" : ", ", t.num_ps() + w);
        throw_error(kind(), ": parameter server rank ", me,
                    arrived ? str_cat(" waited ", timeout(), " s for ", kind_name(round_kind), " from rank(s) ", who,
                                      " (the other workers sent theirs)")
                            : str_cat(" heard from no worker within ", timeout(), " s (waiting for rank(s) ", who, ")"),
                    "; a worker failed, stalled, or is in a longer epoch-end callback (raise "
                    "DistributedOptions::timeout_seconds)");
      }
      const int w = msg->source - t.num_ps();
      SPIRE_CHECK(w >= 0 && w < W, kind(), ": parameter server rank ", me, " got a request from rank ",
                  msg->source, ", another server");
      dist::MessageReader r(msg->data, str_cat(kind(), ": a request from rank ", msg->source));
      const int64_t k = r.get_i64();
      if (k == kPull) {
        dist::MessageWriter out;
        put_bundle(out, state_values());
        m->send(msg->source, kTagReply, reply(kOk, kPull, 0, out.data()));
        continue;
      }
      if (k == kSetModel) {
        r.get_i64();
        const Bundle b = get_bundle(r, "the chief's model variables");
        for (const auto& [name, value] : b) {
          const Output v = variable(name, "the chief's model variables");
          SPIRE_CHECK(std::any_of(mine.model_vars.begin(), mine.model_vars.end(),
                                  [&](const Output& x) { return x.node == v.node; }),
                      kind(), ": the chief sent model variable '", name, "' to parameter server rank ", me,
                      ", which does not hold it");
          sess().set_variable_value(v.node, value);
        }
        m->send(msg->source, kTagReply, reply(kOk, kSetModel, 0));
        continue;
      }
      if (k == kDone) {
        // A worker ended training (its loop ended, or StopTraining): the
        // others stop too. Their pushes of the step it did not make are
        // answered "stop" (not applied); the server ends when all are done.
        done.insert(w);
        if (arrived > 0) {
          SPIRE_CHECK(round_kind == kPush, kind(), ": rank ", msg->source, " ended training while the other ",
                      "workers were in ", kind_name(round_kind), " (the workers are out of step)");
          for (int q = 0; q < W; ++q) {
            auto& pending = round[static_cast<size_t>(q)];
            if (!pending) continue;
            dist::MessageReader pr(pending->data, "a push");
            pr.get_i64();
            m->send(pending->source, kTagReply, reply(kStop, kPush, pr.get_i64()));
            pending.reset();
          }
          arrived = 0;
        }
        if (static_cast<int>(done.size()) == W) break;
        continue;
      }
      if (!done.empty()) {
        SPIRE_CHECK(k == kPush, kind(), ": rank ", msg->source, " sent ", kind_name(k),
                    " after another worker ended training (the workers are out of step)");
        m->send(msg->source, kTagReply, reply(kStop, kPush, r.get_i64()));
        continue;
      }
      SPIRE_CHECK(is_round(k), kind(), ": parameter server rank ", me, " got an unknown request (", k,
                  ") from rank ", msg->source);
      SPIRE_CHECK(!round[static_cast<size_t>(w)], kind(), ": rank ", msg->source, " sent ", kind_name(k),
                  " before the other workers finished ", kind_name(round_kind));
      if (arrived > 0 && k != round_kind)
        throw_error(kind(), ": the workers are out of step at parameter server rank ", me, ": rank ",
                    msg->source, " sent ", kind_name(k), " while another worker sent ", kind_name(round_kind));
      round_kind = k;
      round[static_cast<size_t>(w)] = std::move(msg);
      if (++arrived < W) continue;
      handle_round(round_kind, round);
      for (auto& x : round) x.reset();
      arrived = 0;
    }
    logger::info(kind(), ": parameter server rank ", me, ": every worker finished; the server exits");
  }

  void handle_round(int64_t k, std::vector<std::optional<Message>>& round) {
    const int me = t.rank_;
    const Shard& mine = shards[static_cast<size_t>(me)];
    const int W = t.num_workers();
    auto reader = [&](int w) {
      dist::MessageReader r(round[static_cast<size_t>(w)]->data,
                            str_cat(kind(), ": ", kind_name(k), " from rank ", t.num_ps() + w));
      r.get_i64();
      return r;
    };
    if (k == kSync) {
      // Every worker must see this server's shard alike; the chief's
      // values set the state, and go to every worker.
      const std::string sig = mine.signature();
      Bundle chief_values;
      for (int w = 0; w < W; ++w) {
        dist::MessageReader r = reader(w);
        r.get_i64();
        const std::string theirs = r.get_string();
        if (theirs != sig)
          throw_error(kind(), ": rank ", t.num_ps() + w, " sees the shard of parameter server rank ", me,
                      " as [", theirs, "], the server as [", sig, "]: the ranks built different models");
        if (r.get_i64() == 1) chief_values = get_bundle(r, "the chief's values");
      }
      std::set<std::string> sent;
      for (const auto& [name, value] : chief_values) {
        sent.insert(name);
        auto it = by_name.find(name);
        if (it != by_name.end()) sess().set_variable_value(it->second.node, value);
      }
      for (const Output& v : state)
        SPIRE_CHECK(sent.count(v.node->name()), kind(), ": the chief sent no value for '", v.node->name(),
                    "', held by parameter server rank ", me, " (the ranks built different models?)");
      dist::MessageWriter out;
      out.put_i64(static_cast<int64_t>(inputs.size()));
      for (const Output& v : inputs) out.put_string(v.node->name());
      put_bundle(out, chief_values);
      reply_all(kSync, 0, out.data());
      return;
    }
    if (k == kLoop) {
      dist::MessageReader r = reader(0);  // the chief's
      r.get_i64();
      dist::MessageWriter out;
      for (int i = 0; i < 3; ++i) out.put_i64(r.get_i64());
      reply_all(kLoop, 0, out.data());
      return;
    }
    // kPush: every worker's gradients (of the same step), applied as its
    // own update, in rank order.
    int64_t first_step = 0;
    for (int w = 0; w < W; ++w) {
      dist::MessageReader r = reader(w);
      const int64_t step = r.get_i64();
      if (w == 0) first_step = step;
      SPIRE_CHECK(step == first_step, kind(), ": rank ", t.num_ps() + w, " pushed step ", step, " while rank ",
                  t.num_ps(), " pushed step ", first_step, " (the workers are out of step)");
      const std::string what = str_cat("rank ", t.num_ps() + w, "'s push of step ", step);
      for (const Output& v : inputs) sess().set_variable_value(v.node, get_raw(r, v, what));
      FeedDict feeds;
      for (const Output& ph : placeholders) feeds.emplace_back(ph, get_raw(r, ph, what));
      SPIRE_CHECK(r.at_end(), kind(), ": ", what, " has extra bytes");
      if (apply) sess().run_without_hooks({}, feeds, {apply});
    }
    dist::MessageWriter out;
    for (const Output& v : mine.vars) put_raw(out, sess().variable_value(v.node));
    reply_all(kPush, first_step, out.data());
  }
};

// ---- DistributedTrainerBase ---------------------------------------------------------------

namespace {

// Fetches the servers' state into the chief's copies before the epoch's
// other callbacks (ModelSaver, InferenceRunner); the replicated trainer's
// chief first sends its model variables to the servers.
class SyncWithParameterServers : public Callback {
 public:
  SyncWithParameterServers(std::function<void()> run) : run_(std::move(run)) {}
  std::string name() const override { return "SyncWithParameterServers"; }

 protected:
  void _trigger() override { run_(); }

 private:
  std::function<void()> run_;
};

}  // namespace

DistributedTrainerBase::DistributedTrainerBase(std::vector<Device> devices, DistributedOptions options,
                                               std::string kind, bool replicated)
    : DataParallelTrainer(std::move(devices), std::move(kind)),
      impl_(std::make_unique<Impl>(*this)),
      options_(std::move(options)),
      replicated_(replicated) {
  impl_->m = options_.messenger ? options_.messenger : dist::make_mpi_messenger(options_.timeout_seconds);
  rank_ = impl_->m->rank();
  size_ = impl_->m->size();
  SPIRE_CHECK(options_.num_ps >= 1, kind_, ": num_ps must be >= 1, got ", options_.num_ps);
  SPIRE_CHECK(options_.num_ps < size_, kind_, ": ", options_.num_ps, " parameter server(s) leave no worker among ",
              size_, " rank(s); run more ranks (mpirun -np N) or fewer servers");
  SPIRE_CHECK(options_.timeout_seconds > 0, kind_, ": timeout_seconds must be > 0");
  is_chief_ = rank_ == options_.num_ps;
  logger::info(kind_, ": rank ", rank_, " of ", size_, " is ",
               is_ps() ? str_cat("parameter server ", rank_)
                       : str_cat("worker ", worker_index(), is_chief_ ? " (the chief)" : ""),
               " (", options_.num_ps, " server(s), ", num_workers(), " worker(s); messages over ",
               impl_->m->name(), ")");
}

DistributedTrainerBase::~DistributedTrainerBase() = default;

std::pair<int, int> DistributedTrainerBase::data_shard() const {
  if (is_ps()) return {0, 1};
  return {worker_index(), num_workers()};
}

std::vector<CallbackPtr> DistributedTrainerBase::_setup_graph(InputSource& input, GetOptFn get_opt_fn) {
  Impl& I = *impl_;
  I.opt = get_opt_fn();
  SPIRE_CHECK(I.opt, kind_, ": get_opt_fn returned null");
  if (!is_chief_ && !logdir().empty()) {
    logger::info(kind_, ": rank ", rank_, " does not write the log directory ", logdir(), " (the chief does)");
    set_logdir("");
  }
  Graph& g = graph();
  const std::vector<GradsAndVars> grads = build_towers(input, *I.opt, replicated_);
  const size_t K = grads.size(), n = grads[0].size();

  // Shards: the trainable variables (tower 0's: the global names), then
  // the replicated trainer's model variables, each to the server with the
  // fewest bytes so far.
  I.shards.assign(static_cast<size_t>(options_.num_ps), Shard{});
  auto place = [&](const Output& v, bool model) {
    size_t best = 0;
    for (size_t p = 1; p < I.shards.size(); ++p)
      if (I.shards[p].bytes < I.shards[best].bytes) best = p;
    (model ? I.shards[best].model_vars : I.shards[best].vars).push_back(v);
    I.shards[best].bytes += num_bytes(v);
    server_of_[v.node->name()] = static_cast<int>(best);
  };
  std::vector<size_t> var_index;  // shard order -> index into grads[0]
  for (size_t i = 0; i < n; ++i) place(grads[0][i].second, false);
  if (replicated_)
    for (const Output& v : model_variables("", &g))
      if (!is_local_variable(v) && !variable_of(v).trainable) place(v, true);
  std::map<const Node*, size_t> index_of;
  for (size_t i = 0; i < n; ++i) index_of[grads[0][i].second.node] = i;

  std::vector<CallbackPtr> callbacks;
  if (!is_ps()) {
    // The towers' gradients averaged on the CPU (the caching device), in
    // the servers' order.
    std::vector<Output> avg(n);
    {
      DeviceScope cpu(g, Device::cpu());
      NameScope ns(g, "AggregateGrads/");
      for (size_t i = 0; i < n; ++i) {
        std::vector<Output> xs;
        for (size_t k = 0; k < K; ++k) xs.push_back(grads[k][i].first);
        avg[i] = K == 1 ? ops::identity(xs[0], "grad")
                        : ops::mul(ops::add_n(xs, "add_n"), ops::scalar_like(1.0 / static_cast<double>(K), xs[0]));
      }
    }
    for (const Shard& s : I.shards)
      for (const Output& v : s.vars) I.grads.push_back(avg[index_of.at(v.node)]);
    // The update the servers run, built here only for its variables (the
    // optimizer's slots and step-wide state, saved by the chief under
    // SimpleTrainer's names); never run on a worker.
    GradsAndVars all;
    for (size_t i = 0; i < n; ++i) all.push_back({avg[i], grads[0][i].second});
    {
      NameScope ns(g, "server_update/");
      I.opt->apply_gradients(all, {}, "unused");
    }
    std::vector<Node*> deps;
    for (const Output& x : I.grads) deps.push_back(x.node);
    train_op = ops::group(deps, "train_op", &g);
    if (is_chief_) {
      Impl* impl = impl_.get();
      const bool rep = replicated_;
      callbacks.push_back(std::make_shared<SyncWithParameterServers>([impl, rep] {
        if (rep) impl->push_model_variables();
        impl->pull_state();
      }));
    }
  } else {
    // This server's update: placeholders for its shard's gradients.
    const Shard& mine = I.shards[static_cast<size_t>(rank_)];
    std::set<const Node*> before;
    for (const Variable& v : all_variables(&g)) before.insert(v.node());
    GradsAndVars pairs;
    {
      DeviceScope cpu(g, Device::cpu());
      NameScope ns(g, "server_update/");
      for (const Output& v : mine.vars) {
        I.placeholders.push_back(ops::placeholder(v.dtype(), v.shape(), "grad"));
        pairs.push_back({I.placeholders.back(), v});
      }
      if (!pairs.empty()) I.apply = I.opt->apply_gradients(pairs, {}, "apply");
    }
    if (pairs.empty())
      logger::warn(kind_, ": parameter server rank ", rank_, " holds no variable (", n,
                   " trainable variables for ", options_.num_ps, " servers)");
    std::set<const Node*> in_state;
    auto add_state = [&](const Output& v) {
      if (in_state.insert(v.node).second) I.state.push_back(v);
    };
    for (const Output& v : mine.vars) {
      add_state(v);
      for (const Output& s : I.slots_of(v)) add_state(s);
    }
    for (const Output& v : mine.model_vars) add_state(v);
    for (const Variable& v : all_variables(&g))
      if (!before.count(v.node())) add_state(v.value);  // e.g. Adam's beta powers
    if (I.apply)
      for (Node* v : variables_read_by(I.apply))
        if (!in_state.count(v)) I.inputs.push_back(Output{v, 0});
    std::sort(I.inputs.begin(), I.inputs.end(),
              [](const Output& a, const Output& b) { return a.node->name() < b.node->name(); });
  }
  optimizer_ = I.opt;
  return callbacks;
}

void DistributedTrainerBase::after_session_init(Session& session) {
  (void)session;
  // Every variable by name, now that the callbacks made theirs (global_step).
  Impl& I = *impl_;
  Graph& g = graph();
  for (const Variable& v : all_variables(&g)) I.by_name[v.name()] = v.value;
  if (replicated_)
    for (const Variable& v : all_variables(&g)) {
      if (!is_local_variable(v.value)) continue;
      const std::string global = strip_tower_prefix(v.name());
      if (global != v.name() && I.by_name.count(global)) I.replicas[global].push_back(v.value);
    }
  if (!is_ps()) I.sync_with_servers();
}

void DistributedTrainerBase::synchronize_loop(int64_t& steps_per_epoch, int& starting_epoch, int& max_epoch) {
  if (is_ps()) return;
  dist::MessageWriter w;
  w.put_i64(steps_per_epoch);
  w.put_i64(starting_epoch);
  w.put_i64(max_epoch);
  impl_->m->send(0, kTagRequest, request(kLoop, 0, w.data()));
  dist::Message reply = impl_->wait_reply(0, kLoop, 0);
  dist::MessageReader r(reply.data, kind_ + ": the chief's loop");
  r.get_bytes(kReplyHeader);
  const int64_t s = r.get_i64(), a = r.get_i64(), b = r.get_i64();
  if (s != steps_per_epoch || a != starting_epoch || b != max_epoch)
    logger::info(kind_, ": rank ", rank_, " runs the chief's loop: steps_per_epoch ", s, ", epochs ", a, "..", b,
                 " (it was given ", steps_per_epoch, ", ", starting_epoch, "..", max_epoch, ")");
  steps_per_epoch = s;
  starting_epoch = static_cast<int>(a);
  max_epoch = static_cast<int>(b);
}

bool DistributedTrainerBase::run_service() {
  if (!is_ps()) return false;
  impl_->serve();
  return true;
}

void DistributedTrainerBase::on_main_loop_finished() {
  finished_ = true;
  if (is_ps()) return;
  for (int p = 0; p < num_ps(); ++p) impl_->m->send(p, kTagRequest, request(kDone, global_step()));
}

void DistributedTrainerBase::on_failure(const std::exception& error) {
  finished_ = true;
  impl_->m->announce_failure(error.what());
}

void DistributedTrainerBase::run_step() {
  std::vector<Tensor> g = hooked_sess().run(impl_->grads);
  impl_->push_and_pull(g, global_step());
}

std::map<std::string, Tensor> DistributedTrainerBase::server_state() const {
  SPIRE_CHECK(is_ps(), kind_, ": server_state() is a server's (rank ", rank_, " is a worker)");
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : impl_->state_values()) out[name] = t;
  return out;
}

void DistributedTrainerBase::pull_server_state() {
  SPIRE_CHECK(!is_ps(), kind_, ": pull_server_state() is a worker's (rank ", rank_, " is a server)");
  SPIRE_CHECK(!finished_, kind_, ": pull_server_state() after training: the servers have ended");
  impl_->pull_state();
}

DistributedTrainerParameterServer::DistributedTrainerParameterServer(std::vector<Device> devices,
                                                                     DistributedOptions options)
    : DistributedTrainerBase(std::move(devices), std::move(options), "DistributedTrainerParameterServer",
                             /*replicated=*/false) {}

DistributedTrainerReplicated::DistributedTrainerReplicated(std::vector<Device> devices, DistributedOptions options)
    : DistributedTrainerBase(std::move(devices), std::move(options), "DistributedTrainerReplicated",
                             /*replicated=*/true) {}

}  // namespace spire
