// The server side of the parameter-server trainers (see ps_server.h).
#include "dist/trainers/ps_server.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/logger.h"
#include "core/op_registry.h"
#include "core/ops.h"
#include "core/session.h"
#include "layers/variables.h"

namespace spire::ps {

namespace {

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

Server::Server(const Cluster& cluster) : c_(cluster) {}

void Server::build(Graph& g, size_t num_trainable) {
  std::set<const Node*> before;
  for (const Variable& v : all_variables(&g)) before.insert(v.node());
  GradsAndVars pairs;
  {
    DeviceScope cpu(g, Device::cpu());
    NameScope ns(g, "server_update/");
    for (const Output& v : mine().vars) {
      placeholders_.push_back(ops::placeholder(v.dtype(), v.shape(), "grad"));
      pairs.push_back({placeholders_.back(), v});
    }
    if (!pairs.empty()) apply_ = c_.opt->apply_gradients(pairs, {}, "apply");
  }
  if (pairs.empty())
    logger::warn(c_.kind, ": parameter server rank ", c_.rank, " holds no variable (", num_trainable,
                 " trainable variables for ", c_.num_ps, " servers)");
  std::set<const Node*> in_state;
  auto add_state = [&](const Output& v) {
    if (in_state.insert(v.node).second) state_.push_back(v);
  };
  for (const Output& v : mine().vars) {
    add_state(v);
    for (const Output& s : c_.slots_of(v)) add_state(s);
  }
  for (const Output& v : mine().model_vars) add_state(v);
  for (const Variable& v : all_variables(&g))
    if (!before.count(v.node())) add_state(v.value);  // e.g. Adam's beta powers
  if (apply_)
    for (Node* v : variables_read_by(apply_))
      if (!in_state.count(v)) inputs_.push_back(Output{v, 0});
  std::sort(inputs_.begin(), inputs_.end(),
            [](const Output& a, const Output& b) { return a.node->name() < b.node->name(); });
}

Bundle Server::state_values(Session& session) const {
  Bundle b;
  for (const Output& v : state_) b.emplace_back(v.node->name(), session.variable_value(v.node));
  return b;
}

void Server::reply_all(int64_t kind, int64_t step, const std::vector<char>& payload) {
  const std::vector<char> data = reply(kOk, kind, step, payload);
  for (int w = 0; w < c_.num_workers; ++w) c_.messenger->send(c_.worker_rank(w), kTagReply, data);
}

void Server::serve(Session& session) {
  sess_ = &session;
  const int W = c_.num_workers;
  const int me = c_.rank;
  std::vector<std::optional<dist::Message>> round(static_cast<size_t>(W));
  int arrived = 0;
  int64_t round_kind = 0;
  std::set<int> done;  // workers that ended training
  logger::info(c_.kind, ": parameter server rank ", me, " serves ", mine().vars.size(), " variables (",
               mine().bytes, " bytes) to ", W, " worker(s)");
  for (;;) {
    // The workers it waits for: those that neither sent this round's request nor
    // ended training (a finished worker is not missing).
    auto waited_for = [&](std::string* finished) {
      std::string who;
      for (int w = 0; w < W; ++w) {
        std::string& list = done.count(w) ? *finished : who;
        if (done.count(w) || !round[static_cast<size_t>(w)])
          list += str_cat(list.empty() ? "" : ", ", c_.worker_rank(w));
      }
      return who;
    };
    auto waiting_for = [&] {
      return done.empty() ? std::string(arrived ? kind_name(round_kind) : "a request")
                          : std::string("the end of training");
    };
    std::optional<dist::Message> msg =
        c_.messenger->receive_watched(-1, kTagRequest, c_.timeout_seconds, [&] {
          std::string finished;
          const std::string who = waited_for(&finished);
          return str_cat(c_.kind, "'s parameter server rank ", me, " to get ", waiting_for(), " from rank(s) ", who);
        },
        [&] {  // (a worker that ended without saying so never sends again)
          std::vector<int> ranks;
          for (int w = 0; w < W; ++w)
            if (!done.count(w) && !round[static_cast<size_t>(w)]) ranks.push_back(c_.worker_rank(w));
          return ranks;
        });
    if (!msg) {
      std::string finished;
      const std::string who = waited_for(&finished);
      const double t = c_.timeout_seconds;
      throw_error(c_.kind, ": parameter server rank ", me,
                  arrived ? str_cat(" waited ", t, " s for ", waiting_for(), " from rank(s) ", who,
                                    " (the other workers sent theirs)")
                          : str_cat(done.empty() ? " heard from no worker within " : " got no request within ", t,
                                    " s (waiting for ", waiting_for(), " from rank(s) ", who, ")"),
                  finished.empty() ? std::string() : str_cat("; rank(s) ", finished, " finished training"),
                  "; a worker stalled, or is in an epoch-end callback longer than the limit (raise "
                  "DistributedOptions::timeout_seconds, or 0: no limit)");
    }
    const int w = msg->source - c_.num_ps;
    SPIRE_CHECK(w >= 0 && w < W, c_.kind, ": parameter server rank ", me, " got a request from rank ",
                msg->source, ", another server");
    dist::MessageReader r(msg->data, str_cat(c_.kind, ": a request from rank ", msg->source));
    const int64_t k = r.get_i64();
    if (k == kPull) {
      dist::MessageWriter out;
      put_bundle(out, state_values(*sess_));
      c_.messenger->send(msg->source, kTagReply, reply(kOk, kPull, 0, out.data()));
      continue;
    }
    if (k == kSetModel) {
      r.get_i64();
      const Bundle b = get_bundle(r, "the chief's model variables");
      for (const auto& [name, value] : b) {
        const Output v = c_.variable(name, "the chief's model variables");
        SPIRE_CHECK(std::any_of(mine().model_vars.begin(), mine().model_vars.end(),
                                [&](const Output& x) { return x.node == v.node; }),
                    c_.kind, ": the chief sent model variable '", name, "' to parameter server rank ", me,
                    ", which does not hold it");
        sess_->set_variable_value(v.node, value);
      }
      c_.messenger->send(msg->source, kTagReply, reply(kOk, kSetModel, 0));
      continue;
    }
    if (k == kDone) {
      // A worker ended training (its loop ended, or StopTraining): the
      // others stop too. Their pushes of the step it did not make are
      // answered "stop" (not applied); the server ends when all are done.
      done.insert(w);
      if (arrived > 0) {
        SPIRE_CHECK(round_kind == kPush, c_.kind, ": rank ", msg->source, " ended training while the other ",
                    "workers were in ", kind_name(round_kind), " (the workers are out of step)");
        for (int q = 0; q < W; ++q) {
          auto& pending = round[static_cast<size_t>(q)];
          if (!pending) continue;
          dist::MessageReader pr(pending->data, "a push");
          pr.get_i64();
          c_.messenger->send(pending->source, kTagReply, reply(kStop, kPush, pr.get_i64()));
          pending.reset();
        }
        arrived = 0;
      }
      if (static_cast<int>(done.size()) == W) break;
      continue;
    }
    if (!done.empty()) {
      SPIRE_CHECK(k == kPush, c_.kind, ": rank ", msg->source, " sent ", kind_name(k),
                  " after another worker ended training (the workers are out of step)");
      c_.messenger->send(msg->source, kTagReply, reply(kStop, kPush, r.get_i64()));
      continue;
    }
    SPIRE_CHECK(is_round(k), c_.kind, ": parameter server rank ", me, " got an unknown request (", k,
                ") from rank ", msg->source);
    SPIRE_CHECK(!round[static_cast<size_t>(w)], c_.kind, ": rank ", msg->source, " sent ", kind_name(k),
                " before the other workers finished ", kind_name(round_kind));
    if (arrived > 0 && k != round_kind)
      throw_error(c_.kind, ": the workers are out of step at parameter server rank ", me, ": rank ",
                  msg->source, " sent ", kind_name(k), " while another worker sent ", kind_name(round_kind));
    round_kind = k;
    round[static_cast<size_t>(w)] = std::move(msg);
    if (++arrived < W) continue;
    handle_round(round_kind, round);
    for (auto& x : round) x.reset();
    arrived = 0;
  }
  logger::info(c_.kind, ": parameter server rank ", me, ": every worker finished; the server exits");
}

void Server::handle_round(int64_t k, std::vector<std::optional<dist::Message>>& round) {
  const int me = c_.rank;
  const int W = c_.num_workers;
  auto reader = [&](int w) {
    dist::MessageReader r(round[static_cast<size_t>(w)]->data,
                          str_cat(c_.kind, ": ", kind_name(k), " from rank ", c_.worker_rank(w)));
    r.get_i64();
    return r;
  };
  if (k == kSync) {
    // Every worker must see this server's shard alike; the chief's
    // values set the state, and go to every worker.
    const std::string sig = mine().signature();
    Bundle chief_values;
    for (int w = 0; w < W; ++w) {
      dist::MessageReader r = reader(w);
      r.get_i64();
      const std::string theirs = r.get_string();
      if (theirs != sig)
        throw_error(c_.kind, ": rank ", c_.worker_rank(w), " sees the shard of parameter server rank ", me,
                    " as [", theirs, "], the server as [", sig, "]: the ranks built different models");
      if (r.get_i64() == 1) chief_values = get_bundle(r, "the chief's values");
    }
    std::set<std::string> sent;
    for (const auto& [name, value] : chief_values) {
      sent.insert(name);
      auto it = c_.by_name.find(name);
      if (it != c_.by_name.end()) sess_->set_variable_value(it->second.node, value);
    }
    for (const Output& v : state_)
      SPIRE_CHECK(sent.count(v.node->name()), c_.kind, ": the chief sent no value for '", v.node->name(),
                  "', held by parameter server rank ", me, " (the ranks built different models?)");
    dist::MessageWriter out;
    out.put_i64(static_cast<int64_t>(inputs_.size()));
    for (const Output& v : inputs_) out.put_string(v.node->name());
    put_bundle(out, chief_values);
    reply_all(kSync, 0, out.data());
    return;
  }
  if (k == kChiefValues) {
    dist::MessageReader r = reader(0);  // the chief's
    r.get_i64();
    const int64_t n = r.get_i64();
    SPIRE_CHECK(n >= 0 && n < (int64_t{1} << 20), c_.kind, ": a malformed request of rank ", c_.worker_rank(0));
    dist::MessageWriter out;
    out.put_i64(n);
    for (int64_t i = 0; i < n; ++i) out.put_i64(r.get_i64());
    reply_all(kChiefValues, 0, out.data());
    return;
  }
  // kPush: every worker's gradients (of the same step), applied as its
  // own update, in rank order.
  int64_t first_step = 0;
  for (int w = 0; w < W; ++w) {
    dist::MessageReader r = reader(w);
    const int64_t step = r.get_i64();
    if (w == 0) first_step = step;
    SPIRE_CHECK(step == first_step, c_.kind, ": rank ", c_.worker_rank(w), " pushed step ", step, " while rank ",
                c_.num_ps, " pushed step ", first_step, " (the workers are out of step)");
    const std::string what = str_cat("rank ", c_.worker_rank(w), "'s push of step ", step);
    for (const Output& v : inputs_) sess_->set_variable_value(v.node, get_raw(r, v, what));
    FeedDict feeds;
    for (const Output& ph : placeholders_) feeds.emplace_back(ph, get_raw(r, ph, what));
    SPIRE_CHECK(r.at_end(), c_.kind, ": ", what, " has extra bytes");
    if (apply_) sess_->run_without_hooks({}, feeds, {apply_});
  }
  dist::MessageWriter out;
  for (const Output& v : mine().vars) put_raw(out, sess_->variable_value(v.node));
  reply_all(kPush, first_step, out.data());
}

}  // namespace spire::ps
