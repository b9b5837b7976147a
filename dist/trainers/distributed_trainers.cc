// DistributedTrainerParameterServer and DistributedTrainerReplicated (see
// distributed_trainers.h): roles, the sharding of the variables over the
// servers, and the Trainer hooks, each handed to this rank's server
// (ps_server.h) or worker (ps_worker.h).
#include "dist/trainers/distributed_trainers.h"

#include "core/logger.h"
#include "dist/trainers/gradient_buckets.h"
#include "dist/trainers/ps_protocol.h"
#include "dist/trainers/ps_server.h"
#include "dist/trainers/ps_worker.h"
#include "train/callback.h"

namespace spire {

namespace {

// Fetches the servers' state into the chief's copies before the epoch's
// other callbacks (ModelSaver, InferenceRunner); the replicated trainer's
// chief first sends its model variables to the servers.
class SyncWithParameterServers : public Callback {
 public:
  explicit SyncWithParameterServers(std::function<void()> run) : run_(std::move(run)) {}
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
      options_(std::move(options)),
      replicated_(replicated),
      cluster_(std::make_unique<ps::Cluster>()) {
  ps::Cluster& c = *cluster_;
  c.messenger = options_.messenger ? options_.messenger : dist::make_mpi_messenger(options_.timeout_seconds);
  rank_ = c.messenger->rank();
  size_ = c.messenger->size();
  SPIRE_CHECK(options_.num_ps >= 1, kind_, ": num_ps must be >= 1, got ", options_.num_ps);
  SPIRE_CHECK(options_.num_ps < size_, kind_, ": ", options_.num_ps, " parameter server(s) leave no worker among ",
              size_, " rank(s); run more ranks (mpirun -np N) or fewer servers");
  SPIRE_CHECK(options_.timeout_seconds >= 0, kind_, ": timeout_seconds must be >= 0 (0: no limit), not ",
              options_.timeout_seconds);
  c.kind = kind_;
  c.rank = rank_;
  c.num_ps = options_.num_ps;
  c.num_workers = num_workers();
  c.timeout_seconds = options_.timeout_seconds;
  is_chief_ = rank_ == options_.num_ps;
  logger::info(kind_, ": rank ", rank_, " of ", size_, " is ",
               is_ps() ? str_cat("parameter server ", rank_)
                       : str_cat("worker ", worker_index(), is_chief_ ? " (the chief)" : ""),
               " (", options_.num_ps, " server(s), ", num_workers(), " worker(s); messages over ",
               c.messenger->name(), ")");
}

DistributedTrainerBase::~DistributedTrainerBase() = default;

std::string DistributedTrainerBase::process_name() const {
  return str_cat(kind_, ": rank ", rank_, " (",
                 is_ps() ? str_cat("parameter server ", rank_) : str_cat("worker ", worker_index()), ")");
}

std::pair<int, int> DistributedTrainerBase::data_shard() const {
  if (is_ps()) return {0, 1};
  return {worker_index(), num_workers()};
}

std::vector<CallbackPtr> DistributedTrainerBase::_setup_graph(InputSource& input, GetOptFn get_opt_fn) {
  ps::Cluster& c = *cluster_;
  c.opt = get_opt_fn();
  SPIRE_CHECK(c.opt, kind_, ": get_opt_fn returned null");
  Graph& g = graph();
  const std::vector<GradsAndVars> grads = build_towers(input, *c.opt, replicated_);
  const size_t n = grads[0].size();

  // Shards: the trainable variables (tower 0's: the global names), then
  // the replicated trainer's model variables, each to the server with the
  // fewest bytes so far (tensorpack's GreedyLoadBalancingStrategy).
  c.shards.assign(static_cast<size_t>(options_.num_ps), ps::Shard{});
  LeastLoadedBins servers(c.shards.size());
  auto place = [&](const Output& v, bool model) {
    const size_t p = servers.add(static_cast<int64_t>(v.shape().num_bytes(dtype_size(v.dtype()))));
    (model ? c.shards[p].model_vars : c.shards[p].vars).push_back(v);
    c.shards[p].bytes = servers.load(p);
    server_of_[v.node->name()] = static_cast<int>(p);
  };
  for (size_t i = 0; i < n; ++i) place(grads[0][i].second, false);
  if (replicated_)
    for (const Output& v : model_variables("", &g))
      if (!is_local_variable(v) && !variable_of(v).trainable) place(v, true);

  std::vector<CallbackPtr> callbacks;
  if (is_ps()) {
    server_ = std::make_unique<ps::Server>(c);
    server_->build(g, n);
  } else {
    worker_ = std::make_unique<ps::Worker>(c, is_chief_);
    train_op = worker_->build(g, grads);
    if (is_chief_) {
      ps::Worker* w = worker_.get();
      const bool rep = replicated_;
      callbacks.push_back(std::make_shared<SyncWithParameterServers>([w, rep] {
        if (rep) w->push_model_variables();
        w->pull_state();
      }));
    }
  }
  optimizer_ = c.opt;
  return callbacks;
}

void DistributedTrainerBase::after_session_init(Session& session) {
  // Every variable by name, now that the callbacks made theirs (global_step).
  for (const Variable& v : all_variables(&graph())) cluster_->by_name[v.name()] = v.value;
  if (worker_) worker_->start(session, graph(), replicated_);
}

std::vector<int64_t> DistributedTrainerBase::chief_values(const std::vector<int64_t>& values,
                                                          const std::string& what) {
  SPIRE_CHECK(worker_, kind_, ": ", what, ": the chief's values go to the workers (rank ", rank_, " is a server)");
  return worker_->chief_values(values, what);
}

bool DistributedTrainerBase::run_service() {
  if (!server_) return false;
  server_->serve(session());
  return true;
}

void DistributedTrainerBase::on_main_loop_finished() {
  finished_ = true;
  if (worker_) worker_->finish(global_step());
}

void DistributedTrainerBase::on_failure(const std::exception& error) {
  finished_ = true;
  cluster_->messenger->announce_failure(error.what());
}

void DistributedTrainerBase::run_step() {
  std::vector<Tensor> g = hooked_sess().run(worker_->gradients());
  worker_->push_and_pull(g, global_step());
}

std::map<std::string, Tensor> DistributedTrainerBase::server_state() const {
  SPIRE_CHECK(is_ps(), kind_, ": server_state() is a server's (rank ", rank_, " is a worker)");
  std::map<std::string, Tensor> out;
  if (server_)
    for (auto& [name, t] : server_->state_values(session())) out[name] = t;
  return out;
}

void DistributedTrainerBase::pull_server_state() {
  SPIRE_CHECK(!is_ps(), kind_, ": pull_server_state() is a worker's (rank ", rank_, " is a server)");
  SPIRE_CHECK(!finished_, kind_, ": pull_server_state() after training: the servers have ended");
  SPIRE_CHECK(worker_, kind_, ": pull_server_state() before setup_graph");
  worker_->pull_state();
}

DistributedTrainerParameterServer::DistributedTrainerParameterServer(std::vector<Device> devices,
                                                                     DistributedOptions options)
    : DistributedTrainerBase(std::move(devices), std::move(options), "DistributedTrainerParameterServer",
                             /*replicated=*/false) {}

DistributedTrainerReplicated::DistributedTrainerReplicated(std::vector<Device> devices, DistributedOptions options)
    : DistributedTrainerBase(std::move(devices), std::move(options), "DistributedTrainerReplicated",
                             /*replicated=*/true) {}

}  // namespace spire
