// HorovodTrainer and DistributedInferenceRunner (see horovod_trainer.h).
#include "dist/trainers/horovod_trainer.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "core/enum_names.h"
#include "core/ops.h"
#include "dist/ops/collective_ops.h"
#include "dist/mpi/mpi_communicator.h"
#include "dist/mpi/mpi_runtime.h"
#include "dist/trainers/gradient_buckets.h"
#include "dist/trainers/master_sync.h"
#include "layers/tower.h"
#include "layers/variables.h"
#include "train/dataflow.h"
#include "core/logger.h"

namespace spire {

// ---- hvd:: ------------------------------------------------------------------------------

namespace hvd {
#if defined(SPIRE_WITH_MPI)
int rank() { return dist::MpiRuntime::get().rank(); }
int local_rank() { return dist::MpiRuntime::get().local_rank(); }
int size() { return dist::MpiRuntime::get().size(); }
int local_size() { return dist::MpiRuntime::get().local_size(); }
#else
int rank() { return 0; }
int local_rank() { return 0; }
int size() { return 1; }
int local_size() { return 1; }
#endif
}  // namespace hvd

namespace {

const char* const kKind = "HorovodTrainer";

const EnumSpelling<HorovodCompression> kCompressions[] = {
    {"none", HorovodCompression::kNone},
    {"fp16", HorovodCompression::kFp16},
    {"", HorovodCompression::kNone},
};
const EnumSpelling<HorovodBackend> kBackends[] = {
    {"default", HorovodBackend::kDefault},
    {"auto", HorovodBackend::kAuto},
    {"ring", HorovodBackend::kRing},
    {"recursive-doubling", HorovodBackend::kRecursiveDoubling},
    {"halving-doubling", HorovodBackend::kHalvingDoubling},
    {"mpi", HorovodBackend::kMpi},
    {"nccl", HorovodBackend::kNccl},
    {"rd", HorovodBackend::kRecursiveDoubling},
    {"hd", HorovodBackend::kHalvingDoubling},
    {"", HorovodBackend::kDefault},
};
// A communicator across the processes for `o`'s backend and device (every rank must make
// it at the same point).
std::shared_ptr<dist::Communicator> process_communicator(const HorovodOptions& o) {
#if defined(SPIRE_WITH_MPI)
  // make_process_communicator takes the backend by name ("" for SPIRE_MPI_ALGORITHM's).
  return dist::make_process_communicator(o.backend == HorovodBackend::kDefault ? "" : horovod_backend_name(o.backend),
                                         o.device, o.timeout_seconds);
#else
  (void)o;
  throw_error(kKind, ": this Spire was built without MPI (SPIRE_MPI=OFF); pass a communicator in "
              "HorovodOptions or rebuild with OpenMPI installed");
#endif
}

// The communicator of the calls outside the graph (host tensors): `o`'s, else `comm` itself
// where it takes host tensors (or has nothing to call: one process), else a new MPI one (made
// after `comm`, at the same point on every rank).
std::shared_ptr<dist::Communicator> control_for(const HorovodOptions& o,
                                                const std::shared_ptr<dist::Communicator>& comm) {
  if (o.control_communicator) return o.control_communicator;
  if (comm->devices()[0].is_cpu() || comm->num_ranks() == 1) return comm;
#if defined(SPIRE_WITH_MPI)
  // (SPIRE_MPI_ALGORITHM may say "nccl", the graph's backend: the control traffic then takes kAuto.)
  const char* v = std::getenv("SPIRE_MPI_ALGORITHM");
  if (v && std::string(v) == "nccl")
    return std::make_shared<dist::MpiCommunicator>(Device::cpu(), o.timeout_seconds, dist::MpiAlgorithm::kAuto);
  return dist::make_mpi_communicator(Device::cpu(), o.timeout_seconds);
#else
  throw_error(kKind, ": the communicator ", comm->name(), " takes ", comm->devices()[0].to_string(),
              " tensors; the calls outside the graph need a CPU one: pass control_communicator in HorovodOptions");
#endif
}

}  // namespace

HorovodCompression parse_horovod_compression(const std::string& name) {
  return parse_enum(kCompressions, name, kKind, "compression");
}
const char* horovod_compression_name(HorovodCompression compression) {
  return enum_name(kCompressions, compression);
}

HorovodBackend parse_horovod_backend(const std::string& name) {
  return parse_enum(kBackends, name, kKind, "backend");
}
const char* horovod_backend_name(HorovodBackend backend) { return enum_name(kBackends, backend); }

// ---- HorovodTrainer ---------------------------------------------------------------------

HorovodTrainer::HorovodTrainer(bool average, HorovodCompression compression)
    : HorovodTrainer([&] {
        HorovodOptions o;
        o.average = average;
        o.compression = compression;
        return o;
      }()) {}

HorovodTrainer::HorovodTrainer(HorovodOptions options) : options_(std::move(options)) {
  SPIRE_CHECK(options_.fusion_threshold_bytes >= 0, kKind, ": fusion_threshold_bytes must be >= 0, got ",
              options_.fusion_threshold_bytes);
  SPIRE_CHECK(options_.first_bucket_bytes >= -1, kKind, ": first_bucket_bytes must be >= 0 (or -1: ",
              "fusion_threshold_bytes), got ", options_.first_bucket_bytes);
  comm_ = options_.communicator ? options_.communicator : process_communicator(options_);
  SPIRE_CHECK(comm_->devices().size() == 1, kKind, ": the communicator ", comm_->name(),
              " must have one participant per process, it has ", comm_->devices().size());
  // The gradient buckets' own communicator (every rank makes it here, as the first). Not on
  // GPUs: NCCL needs the operations of two communicators issued in one order on every rank or
  // never overlapping, and the buckets' chain and the BatchNorm chain run concurrently.
  if (!options_.communicator && comm_->num_ranks() > 1 && comm_->devices()[0].is_cpu())
    bucket_comm_ = process_communicator(options_);
  control_ = control_for(options_, comm_);
  if (control_ != comm_) {
    SPIRE_CHECK(control_->devices().size() == 1 && control_->devices()[0].is_cpu(), kKind,
                ": the control communicator ", control_->name(), " must have one CPU participant per process "
                "(the calls outside the graph pass host tensors); it has ", dist::device_list(control_->devices()));
    SPIRE_CHECK(control_->rank() == comm_->rank() && control_->num_ranks() == comm_->num_ranks(), kKind,
                ": the control communicator ", control_->name(), " is rank ", control_->rank(), " of ",
                control_->num_ranks(), " but the communicator ", comm_->name(), " is rank ", comm_->rank(), " of ",
                comm_->num_ranks());
  }
  is_chief_ = comm_->rank() == 0;
  logger::info(kKind, ": rank ", rank(), " of ", size(), " (local rank ", local_rank(), "), training on ",
               options_.device.to_string(), ", collectives on ", comm_->name(),
               control_ == comm_ ? std::string() : str_cat(", control on ", control_->name()));
}

HorovodTrainer::~HorovodTrainer() = default;

int HorovodTrainer::rank() const { return comm_->rank(); }
int HorovodTrainer::size() const { return comm_->num_ranks(); }
int HorovodTrainer::local_rank() const { return options_.communicator ? 0 : hvd::local_rank(); }

std::vector<CallbackPtr> HorovodTrainer::_setup_graph(InputSource& input, GetOptFn get_opt_fn) {
  std::shared_ptr<Optimizer> opt = get_opt_fn();
  SPIRE_CHECK(opt, kKind, ": get_opt_fn returned null");
  Graph& g = graph();
  const int n = size();
  dist::CollectiveOptions base;
  base.communicator = communicator_name();
  base.group_size = n;
  base.devices = comm_->devices();
  GradsAndVars grads;
  {
    DeviceScope on(g, options_.device);
    // Every rank is the main training tower (it updates its BatchNorm EMAs);
    // `total` is the ranks, over which synchronized statistics are taken.
    TowerContext ctx("", true, "", 0, n, &g);
    if (n > 1)
      ctx.set_cross_tower_mean([base](const Output& x, const std::string& key) {
        dist::CollectiveOptions o = base;
        o.name = "cross_rank_mean/" + key;
        return dist::all_reduce({x}, dist::ReduceOp::kMean, o)[0];
      });
    grads = compute_tower_gradients(input, *opt);
  }
  if (n > 1) {
    // Buckets in the order the backward pass makes the gradients (ties: the last
    // variables' first).
    std::vector<Output> gs;
    for (const auto& p : grads) gs.push_back(p.first);
    const std::vector<int64_t> level = dist::ready_levels(g);
    std::vector<size_t> order(gs.size());
    for (size_t i = 0; i < gs.size(); ++i) order[i] = gs.size() - 1 - i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return level[static_cast<size_t>(gs[a].node->id())] < level[static_cast<size_t>(gs[b].node->id())];
    });
    // fp16 compression (Horovod's Compression.fp16): a bucket of floating
    // gradients travels and is summed as f16, then is cast back.
    const bool fp16 = options_.compression == HorovodCompression::kFp16;
    const Buckets buckets = fusion_buckets(gs, order, options_.fusion_threshold_bytes, options_.first_bucket_bytes);
    std::map<const Node*, std::vector<const Node*>> ready_with;  // a bucket's allreduce -> its gradients
    const dist::ReduceOp op = options_.average ? dist::ReduceOp::kMean : dist::ReduceOp::kSum;
    for (size_t k = 0; k < buckets.size(); ++k) {
      NameScope ns(g, str_cat("AllReduce/bucket", k, "/"));
      std::vector<Output> xs;
      for (size_t i : buckets[k]) xs.push_back(gs[i]);
      std::vector<Output> reduced = apply_packed(xs, [&](const Output& x) {
        dist::CollectiveOptions o = base;
        o.name = "allreduce";
        o.overlap = options_.overlap;
        if (bucket_comm_) o.communicator = bucket_communicator_name();
        const bool compress = fp16 && (x.dtype() == DType::F32 || x.dtype() == DType::F64);
        Output r = dist::all_reduce({compress ? ops::cast(x, DType::F16, "compress") : x}, op, o)[0];
        grad_collectives_.push_back(r.node);
        for (size_t i : buckets[k]) ready_with[r.node].push_back(gs[i].node);
        // The bucket's members go into the ranks' agreement before the first step.
        std::string members;
        for (size_t i : buckets[k]) members += str_cat(members.empty() ? "" : ", ", grads[i].second.node->name());
        bucket_members_[r.node] = members;
        return compress ? ops::cast(r, x.dtype(), "decompress") : r;
      });
      for (size_t j = 0; j < xs.size(); ++j) {
        DeviceScope back(g, options_.device);
        grads[buckets[k][j]].first =
            reduced[j].device() == options_.device ? reduced[j] : ops::identity(reduced[j], "to_device");
      }
    }
    // One order for the step's collectives on each communicator, the same on every rank: by
    // when their inputs can first exist (a bucket: its gradients). With the buckets on a
    // communicator of their own, synchronized BatchNorm's allreduces (forward and backward)
    // form one chain and the buckets another; with one communicator, one chain interleaves
    // them as the backward pass reaches them.
    call_order_ = dist::order_collectives(dist::collective_nodes(g, communicator_name()), ready_with);
    if (bucket_comm_)
      for (Node* c : dist::order_collectives(dist::collective_nodes(g, bucket_communicator_name()), ready_with))
        call_order_.push_back(c);
    // gradient_collectives() in the order they are called.
    grad_collectives_.clear();
    for (Node* c : call_order_)
      if (bucket_members_.count(c)) grad_collectives_.push_back(c);
  }
  {
    DeviceScope on(g, options_.device);
    train_op = opt->apply_gradients(grads, {}, "train_op");
  }
  optimizer_ = opt;
  if (n == 1) return {};
  // The op is built when the session is created (after_session_init).
  return {make_master_sync_callback("BroadcastGlobalVariables", [this] { return broadcast_op_; },
                                    BROADCAST_EVERY_EPOCH)};
}

void HorovodTrainer::on_session_created(Session& session) {
  session.set_resource<dist::Communicator>(communicator_name(), comm_);
  if (bucket_comm_) session.set_resource<dist::Communicator>(bucket_communicator_name(), bucket_comm_);
}

Node* HorovodTrainer::build_broadcast_op() {
  // tensorpack's broadcast_global_variables(0), built last so that it also
  // covers variables made by callbacks; packed by dtype like the gradients.
  Graph& g = graph();
  DefaultGraphGuard guard(g);
  GraphUnfinalizeGuard unfinalize(g);
  NameScope ns(g, "broadcast_global_variables/");
  DeviceScope on(g, options_.device);
  const std::vector<Output> vars = global_variables("", &g);
  std::vector<size_t> order(vars.size());
  for (size_t i = 0; i < vars.size(); ++i) order[i] = i;
  std::vector<Node*> assigns, collectives;
  dist::CollectiveOptions base;
  base.communicator = communicator_name();
  base.group_size = size();
  base.devices = comm_->devices();
  for (const auto& bucket : fusion_buckets(vars, order, options_.fusion_threshold_bytes)) {
    std::vector<Output> xs;
    for (size_t i : bucket) xs.push_back(ops::identity(vars[i], "read"));
    std::vector<Output> values = apply_packed(xs, [&](const Output& x) {
      dist::CollectiveOptions o = base;
      o.name = "broadcast";
      Output r = dist::broadcast({x}, 0, o)[0];
      collectives.push_back(r.node);
      return r;
    });
    for (size_t j = 0; j < bucket.size(); ++j)
      assigns.push_back(ops::assign(vars[bucket[j]], values[j], "assign").node);
  }
  for (Node* c : dist::order_collectives(collectives)) call_order_.push_back(c);
  return ops::group(assigns, "broadcast_global_variables", &g);
}

void HorovodTrainer::agree_on_collectives() {
  // In the order the ranks call them (the others, made by callbacks, in creation order).
  std::vector<Node*> nodes = call_order_;
  for (const char* name : {communicator_name(), bucket_communicator_name()})
    for (Node* n : dist::collective_nodes(graph(), name))
      if (std::find(call_order_.begin(), call_order_.end(), n) == call_order_.end()) nodes.push_back(n);
  std::vector<std::string> items;
  for (const Node* n : nodes) {
    auto members = bucket_members_.find(n);
    items.push_back(members == bucket_members_.end()
                        ? dist::describe_collective(n)
                        : str_cat(dist::describe_collective(n), " of {", members->second, "}"));
  }
  control_->agree(str_cat(kKind, ": the ranks' collectives"), items);
}

void HorovodTrainer::after_session_init(Session& session) {
  if (size() == 1) return;
  broadcast_op_ = build_broadcast_op();
  // Before the first collective: every rank must have built the same ones.
  agree_on_collectives();
  // Every rank takes the chief's (restored) values at once.
  session.run_without_hooks({}, {}, {broadcast_op_});
}

std::string HorovodTrainer::process_name() const { return str_cat(kKind, ": rank ", rank()); }

dist::CollectiveCall HorovodTrainer::next_call(const std::string& what) {
  dist::CollectiveCall call;
  call.key = {this, 0, ++calls_};
  call.name = what;
  return call;
}

std::vector<int64_t> HorovodTrainer::chief_values(const std::vector<int64_t>& values, const std::string& what) {
  if (size() == 1) return values;
  Tensor t(DType::I64, Shape{static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  std::vector<dist::Participant> parts{{0, t, t}};
  control_->broadcast(next_call(what), parts, 0);
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + values.size());
}

std::vector<double> HorovodTrainer::allreduce_sum(const std::vector<double>& values, const std::string& what) {
  if (size() == 1) return values;
  Tensor t(DType::F64, Shape{static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<double>());
  std::vector<dist::Participant> parts{{0, t, t}};
  control_->allreduce(next_call(what), parts, dist::ReduceOp::kSum);
  return std::vector<double>(t.data<double>(), t.data<double>() + values.size());
}

bool HorovodTrainer::agree_to_stop(bool stopping) {
  if (size() == 1) return stopping;
  Tensor t(DType::I64, Shape{1});
  t.data<int64_t>()[0] = stopping ? 1 : 0;
  std::vector<dist::Participant> parts{{0, t, t}};
  control_->allreduce(next_call("stop training"), parts, dist::ReduceOp::kMax);
  return t.data<int64_t>()[0] != 0;
}

void HorovodTrainer::on_failure(const std::exception& error) {
  // A disagreement is raised on every rank alike: no rank failed.
  if (dynamic_cast<const DisagreementError*>(&error)) return;
#if defined(SPIRE_WITH_MPI)
  if (size() > 1 && (dynamic_cast<dist::MpiCommunicator*>(control_.get()) ||
                     dynamic_cast<dist::MpiCommunicator*>(comm_.get())))
    dist::MpiRuntime::get().announce_failure(error.what());
#endif
}

// ---- DistributedInferenceRunner -----------------------------------------------------------

DistributedInferenceRunner::DistributedInferenceRunner(std::shared_ptr<DataFlow> dataflow,
                                                       std::vector<InferencerPtr> inferencers, int rank,
                                                       int size, std::string tower_name)
    : InferenceRunner(size > 1 ? std::make_shared<ShardData>(std::move(dataflow), rank, size,
                                                             /*drop_remainder=*/false)
                               : std::move(dataflow),
                      std::move(inferencers), std::move(tower_name)) {
  chief_only_ = false;
}

void DistributedInferenceRunner::_setup_graph() {
  trainer_ = dynamic_cast<HorovodTrainer*>(&trainer());
  SPIRE_CHECK(trainer_, "DistributedInferenceRunner: the trainer must be a HorovodTrainer");
  InferenceRunner::_setup_graph();
}

void DistributedInferenceRunner::combine_inferencers(std::vector<InferencerPtr>& inferencers) {
  std::vector<double> all;
  std::vector<size_t> sizes;
  for (const auto& inf : inferencers) {
    std::vector<double> a = inf->accumulators();
    SPIRE_CHECK(!a.empty(), "DistributedInferenceRunner: inferencer ", inf->name(),
                " has no accumulators() to sum over the ranks");
    sizes.push_back(a.size());
    all.insert(all.end(), a.begin(), a.end());
  }
  std::vector<double> sum = trainer_->allreduce_sum(all, "DistributedInferenceRunner");
  size_t at = 0;
  for (size_t k = 0; k < inferencers.size(); ++k) {
    inferencers[k]->set_accumulators(std::vector<double>(sum.begin() + static_cast<long>(at),
                                                         sum.begin() + static_cast<long>(at + sizes[k])));
    at += sizes[k];
  }
}

}  // namespace spire
