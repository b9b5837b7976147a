// The worker side of the parameter-server trainers (see ps_worker.h).
#include "dist/trainers/ps_worker.h"

#include <optional>
#include <set>

#include "core/error.h"
#include "core/ops.h"
#include "core/session.h"
#include "dist/trainers/master_sync.h"
#include "train/callback.h"

namespace spire::ps {

Worker::Worker(const Cluster& cluster, bool chief) : c_(cluster), chief_(chief) {}

Node* Worker::build(Graph& g, const std::vector<GradsAndVars>& grads) {
  const size_t K = grads.size(), n = grads[0].size();
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
  std::map<const Node*, size_t> index_of;
  for (size_t i = 0; i < n; ++i) index_of[grads[0][i].second.node] = i;
  for (const Shard& s : c_.shards)
    for (const Output& v : s.vars) grads_.push_back(avg[index_of.at(v.node)]);
  GradsAndVars all;
  for (size_t i = 0; i < n; ++i) all.push_back({avg[i], grads[0][i].second});
  {
    NameScope ns(g, "server_update/");
    c_.opt->apply_gradients(all, {}, "unused");
  }
  std::vector<Node*> deps;
  for (const Output& x : grads_) deps.push_back(x.node);
  return ops::group(deps, "train_op", &g);
}

void Worker::set_value(const Output& v, const Tensor& value, bool to_replicas) {
  sess_->set_variable_value(v.node, value);
  if (!to_replicas) return;
  auto it = replicas_.find(v.node->name());
  if (it != replicas_.end())
    for (const Output& r : it->second) sess_->set_variable_value(r.node, value);
}

void Worker::set_all(const Bundle& values, bool to_replicas, const std::string& what) {
  for (const auto& [name, value] : values) set_value(c_.variable(name, what), value, to_replicas);
}

dist::Message Worker::wait_reply(int p, int64_t kind, int64_t step, bool* stop) {
  std::optional<dist::Message> msg = c_.messenger->receive_watched(c_.server_rank(p), kTagReply, timeout(), [&] {
    return str_cat(c_.kind, "'s worker rank ", c_.rank, " to get parameter server rank ", c_.server_rank(p),
                   "'s answer to ", kind_name(kind), kind == kPush ? str_cat(" of step ", step) : std::string());
  });
  if (msg) {
    dist::MessageReader r(msg->data, str_cat(c_.kind, ": a reply of server rank ", p));
    const int64_t status = r.get_i64(), k = r.get_i64(), s = r.get_i64();
    SPIRE_CHECK(k == kind && (k != kPush || s == step), c_.kind, ": rank ", c_.rank, " expected server rank ", p,
                "'s answer to ", kind_name(kind), " (step ", step, "), got its answer to ", kind_name(k), " (step ",
                s, "): the ranks are out of step");
    SPIRE_CHECK(status == kOk || (status == kStop && stop), c_.kind, ": server rank ", p, " refused ",
                kind_name(kind), " of rank ", c_.rank, " (status ", status, ")");
    if (stop) *stop = status == kStop;
    return std::move(*msg);
  }
  throw_error(c_.kind, ": rank ", c_.rank, " (worker ", c_.rank - c_.num_ps, ") waited ", timeout(),
              " s for parameter server rank ", c_.server_rank(p), " to answer ", kind_name(kind),
              kind == kPush ? str_cat(" of step ", step) : std::string(),
              "; the server or another worker stalled, or is in an epoch-end callback longer than the limit "
              "(raise DistributedOptions::timeout_seconds, or 0: no limit)");
}

Bundle Worker::chief_values_for(int p, Graph& g) const {
  std::set<std::string> elsewhere;
  for (size_t q = 0; q < c_.shards.size(); ++q) {
    if (static_cast<int>(q) == p) continue;
    for (const Output& v : c_.shards[q].vars) {
      elsewhere.insert(v.node->name());
      for (const Output& s : c_.slots_of(v)) elsewhere.insert(s.node->name());
    }
    for (const Output& v : c_.shards[q].model_vars) elsewhere.insert(v.node->name());
  }
  Bundle b;
  for (const Output& v : global_variables("", &g))
    if (!elsewhere.count(v.node->name())) b.emplace_back(v.node->name(), sess_->variable_value(v.node));
  return b;
}

void Worker::start(Session& session, Graph& g, bool replicated) {
  sess_ = &session;
  if (replicated)
    for (const Replica& r : replicas_of_masters(g))
      if (r.master) replicas_[r.master->name()].push_back(r.replica.value);
  for (int p = 0; p < c_.num_ps; ++p) {
    dist::MessageWriter w;
    w.put_string(c_.shards[static_cast<size_t>(p)].signature());
    w.put_i64(chief_ ? 1 : 0);
    if (chief_) put_bundle(w, chief_values_for(p, g));
    c_.messenger->send(c_.server_rank(p), kTagRequest, request(kSync, 0, w.data()));
  }
  input_names_.assign(static_cast<size_t>(c_.num_ps), {});
  for (int p = 0; p < c_.num_ps; ++p) {
    dist::Message reply = wait_reply(p, kSync, 0);
    dist::MessageReader r(reply.data, str_cat(c_.kind, ": the synchronization reply of server rank ", p));
    r.get_bytes(kReplyHeader);
    const int64_t n = r.get_i64();
    SPIRE_CHECK(n >= 0 && static_cast<uint64_t>(n) <= r.remaining() / 8, c_.kind,
                ": the synchronization reply of server rank ", p, " is malformed (", n, " input names in ",
                r.remaining(), " bytes)");
    for (int64_t i = 0; i < n; ++i) input_names_[static_cast<size_t>(p)].push_back(r.get_string());
    set_all(get_bundle(r, "the chief's values"), /*to_replicas=*/true, "the chief's values");
  }
}

void Worker::push_and_pull(const std::vector<Tensor>& grad_values, int64_t step) {
  // Each server's shard, with the values its update reads besides.
  size_t at = 0;
  for (int p = 0; p < c_.num_ps; ++p) {
    const Shard& s = c_.shards[static_cast<size_t>(p)];
    dist::MessageWriter w;
    w.put_i64(kPush);
    w.put_i64(step);
    for (const std::string& name : input_names_[static_cast<size_t>(p)])
      put_raw(w, sess_->variable_value(c_.variable(name, "a server's update").node));
    for (size_t i = 0; i < s.vars.size(); ++i) put_raw(w, grad_values[at + i]);
    at += s.vars.size();
    c_.messenger->send(c_.server_rank(p), kTagRequest, std::move(w.data()));
  }
  // Every server answers (values, or stop when a worker ended training:
  // then no server applied this step); all answers are read first.
  std::vector<dist::Message> replies;
  bool stop = false;
  for (int p = 0; p < c_.num_ps; ++p) {
    bool s = false;
    replies.push_back(wait_reply(p, kPush, step, &s));
    stop = stop || s;
  }
  if (stop) throw StopTraining(str_cat("another worker ended training; rank ", c_.rank, " stops before step ", step));
  for (int p = 0; p < c_.num_ps; ++p) {
    dist::MessageReader r(replies[static_cast<size_t>(p)].data,
                          str_cat(c_.kind, ": server rank ", p, "'s values after step ", step));
    r.get_bytes(kReplyHeader);
    for (const Output& v : c_.shards[static_cast<size_t>(p)].vars)
      set_value(v, get_raw(r, v, "the values after a step"), /*to_replicas=*/true);
  }
}

std::vector<int64_t> Worker::chief_values(const std::vector<int64_t>& values, const std::string& what) {
  // A round at server 0: it answers every worker with the chief's values.
  dist::MessageWriter w;
  w.put_i64(static_cast<int64_t>(values.size()));
  for (int64_t v : values) w.put_i64(v);
  c_.messenger->send(c_.server_rank(0), kTagRequest, request(kChiefValues, 0, w.data()));
  dist::Message reply = wait_reply(0, kChiefValues, 0);
  dist::MessageReader r(reply.data, str_cat(c_.kind, ": the chief's values (", what, ")"));
  r.get_bytes(kReplyHeader);
  const int64_t n = r.get_i64();  // (checked against the message before allocating)
  SPIRE_CHECK(n >= 0 && static_cast<uint64_t>(n) <= r.remaining() / 8, c_.kind, ": the chief's values (", what,
              ") from server rank 0 are malformed (", n, " values in ", r.remaining(), " bytes)");
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t& v : out) v = r.get_i64();
  return out;
}

void Worker::pull_state() {
  for (int p = 0; p < c_.num_ps; ++p) c_.messenger->send(c_.server_rank(p), kTagRequest, request(kPull, 0));
  for (int p = 0; p < c_.num_ps; ++p) {
    dist::Message reply = wait_reply(p, kPull, 0);
    dist::MessageReader r(reply.data, str_cat(c_.kind, ": server rank ", p, "'s state"));
    r.get_bytes(kReplyHeader);
    set_all(get_bundle(r, "a server's state"), /*to_replicas=*/false, "a server's state");
  }
}

void Worker::push_model_variables() {
  for (int p = 0; p < c_.num_ps; ++p) {
    Bundle b;
    for (const Output& v : c_.shards[static_cast<size_t>(p)].model_vars)
      b.emplace_back(v.node->name(), sess_->variable_value(v.node));
    dist::MessageWriter w;
    put_bundle(w, b);
    c_.messenger->send(c_.server_rank(p), kTagRequest, request(kSetModel, 0, w.data()));
  }
  for (int p = 0; p < c_.num_ps; ++p) wait_reply(p, kSetModel, 0);
}

void Worker::finish(int64_t step) {
  for (int p = 0; p < c_.num_ps; ++p) c_.messenger->send(c_.server_rank(p), kTagRequest, request(kDone, step));
}

}  // namespace spire::ps
