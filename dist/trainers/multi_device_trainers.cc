// The data-parallel trainers of one process (see multi_device_trainers.h).
#include "dist/trainers/multi_device_trainers.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "core/device_backend.h"
#include "core/enum_names.h"
#include "core/op_registry.h"
#include "core/ops.h"
#include "core/logger.h"
#include "dist/ops/collective_ops.h"
#include "dist/trainers/gradient_buckets.h"
#include "dist/trainers/master_sync.h"

namespace spire {

namespace {

// Trainable variables whose names start with `prefix` ("" = the global ones).
std::vector<Output> own_trainables(Graph& g, const std::string& prefix) {
  std::vector<Output> out;
  for (const Output& v : trainable_variables("", &g)) {
    const std::string& n = v.node->name();
    if (prefix.empty() ? !is_local_variable(v) : n.compare(0, prefix.size(), prefix) == 0)
      out.push_back(v);
  }
  return out;
}

// tensorpack's _check_grad_list: every tower returns gradients for the
// same variables (matched by position, names without the tower prefix).
void check_grad_lists(const std::vector<GradsAndVars>& grads, const std::string& kind) {
  std::vector<std::vector<std::string>> names;
  for (const auto& gv : grads) {
    names.emplace_back();
    for (const auto& p : gv) names.back().push_back(strip_tower_prefix(p.second.node->name()));
  }
  bool same = true;
  for (size_t k = 1; k < names.size(); ++k) same = same && names[k] == names[0];
  if (same) return;
  std::string detail;
  for (size_t k = 0; k < names.size(); ++k) {
    std::vector<std::string> unmatched;
    for (const auto& n : names[k]) {
      bool everywhere = true;
      for (size_t j = 0; j < names.size(); ++j)
        everywhere = everywhere && std::count(names[j].begin(), names[j].end(), n) > 0;
      if (!everywhere) unmatched.push_back(n);
    }
    detail += str_cat("\n  tower", k, ": ", names[k].size(), " gradients");
    if (!unmatched.empty()) {
      detail += "; only in this tower: ";
      for (size_t i = 0; i < unmatched.size(); ++i) detail += (i ? ", " : "") + unmatched[i];
    }
  }
  const bool counts_differ = std::any_of(names.begin(), names.end(), [&](const auto& n) {
    return n.size() != names[0].size();
  });
  throw_error(kind, ": ",
              counts_differ ? "Number of gradients from each tower is different!"
                            : "the towers' gradients are for different variables (in order)",
              detail);
}

// x * (1/k) on x's device.
Output scaled(const Output& x, double k) {
  DeviceScope there(*x.graph(), x.device());
  return ops::mul(x, ops::scalar_like(1.0 / k, x));
}

}  // namespace

std::vector<Device> parse_device_list(const std::string& list) {
  std::vector<Device> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) throw_error("device list '", list, "': empty entry");
    Device d = Device::parse(item);
    if (std::find(out.begin(), out.end(), d) != out.end())
      throw_error("device list '", list, "': ", d.to_string(), " is listed twice");
    out.push_back(d);
    start = end + 1;
  }
  return out;
}

// ---- DataParallelTrainer ---------------------------------------------------------------

DataParallelTrainer::DataParallelTrainer(std::vector<Device> devices, std::string kind)
    : devices_(std::move(devices)), kind_(std::move(kind)) {
  SPIRE_CHECK(!devices_.empty(), kind_, ": the device list is empty");
  std::set<Device> seen;
  for (const Device& d : devices_) {
    SPIRE_CHECK(seen.insert(d).second, kind_, ": device ", d.to_string(),
                " is listed twice (one tower per device)");
    if (d.is_cpu()) {
      SPIRE_CHECK(d.index >= 0 && d.index < kMaxCpuDevices, kind_, ": device ", d.to_string(),
                  " does not exist (CPU devices are cpu:0 .. cpu:", kMaxCpuDevices - 1, ")");
    } else {
      const int n = device_count(d.type);
      SPIRE_CHECK(d.index >= 0 && d.index < n, kind_, ": device ", d.to_string(),
                  " does not exist (", n == 0 ? std::string("this build or machine has no GPU")
                                              : str_cat("this machine has ", n, " GPUs"),
                  ")");
    }
  }
}

SessionOptions DataParallelTrainer::default_session_options() const {
  SessionOptions o;
  for (const Device& d : devices_)
    if (d.is_cpu()) o.num_cpu_devices = std::max(o.num_cpu_devices, d.index + 1);
  return o;
}

void DataParallelTrainer::on_session_created(Session& session) {
  for (const Device& d : devices_)
    if (d.is_cpu() && d.index >= session.options().num_cpu_devices)
      throw_error(kind_, ": device ", d.to_string(), " does not exist in the session "
                  "(SessionOptions::num_cpu_devices = ", session.options().num_cpu_devices,
                  "); give the session as many CPU devices as the towers use, or leave the "
                  "session creator empty to get them");
}

VariablePlacement DataParallelTrainer::least_loaded_placement() const {
  auto bins = std::make_shared<LeastLoadedBins>(devices_.size());
  std::vector<Device> devices = devices_;
  return [bins, devices](const std::string&, const Shape& shape, DType) {
    return devices[bins->add(shape.num_elements())];
  };
}

std::vector<GradsAndVars> DataParallelTrainer::build_towers(InputSource& input, Optimizer& opt,
                                                            bool replicated,
                                                            VariablePlacement placement) {
  Graph& g = graph();
  const int K = static_cast<int>(devices_.size());
  std::vector<GradsAndVars> grads;
  for (int k = 0; k < K; ++k) {
    const Device& dev = devices_[static_cast<size_t>(k)];
    DeviceScope on(g, dev);
    const bool own = replicated && k > 0;
    LocalVariableGuard local(g, own);  // replicas are local: not saved, not restored
    std::optional<VariablePlacementGuard> placed;
    if (placement && k == 0) placed.emplace(g, placement);
    Output cost;
    {
      TowerContext ctx(training_tower_name(k), true, own ? training_tower_name(k) : "", k, K, &g);
      if (K > 1) {
        std::vector<Device> group = devices_;
        ctx.set_cross_tower_mean([group, dev](const Output& x, const std::string& key) {
          dist::CollectiveOptions o;
          o.devices = {dev};
          o.group_devices = group;
          o.instance = "cross_tower_mean/" + key;
          o.name = "cross_tower_mean";
          return dist::all_reduce({x}, dist::ReduceOp::kMean, o)[0];
        });
      }
      cost = build_tower_cost(input);
    }
    // Replicated: each tower differentiates its own copy; else the shared ones.
    std::vector<Output> var_list =
        replicated ? own_trainables(g, own ? training_tower_name(k) + "/" : "") : std::vector<Output>{};
    SPIRE_CHECK(!replicated || !var_list.empty(), kind_, ": tower ", k, " on ", dev.to_string(),
                " has no trainable variables of its own");
    grads.push_back(opt.compute_gradients(cost, var_list));
  }
  check_grad_lists(grads, kind_);
  return grads;
}

// ---- SyncMultiGPUTrainerReplicated ---------------------------------------------------------

namespace {
const EnumSpelling<ReplicatedMode> kReplicatedModes[] = {
    {"ring", ReplicatedMode::kRing},
    {"nccl", ReplicatedMode::kNccl},
    {"cpu", ReplicatedMode::kCpu},
    {"gpu", ReplicatedMode::kGpu},
    {"hierarchical", ReplicatedMode::kHierarchical},
    {"collective", ReplicatedMode::kRing},  // tensorpack's
    {"", ReplicatedMode::kRing},
};
}  // namespace

ReplicatedMode parse_replicated_mode(const std::string& name) {
  return parse_enum(kReplicatedModes, name, "SyncMultiGPUTrainerReplicated", "mode");
}
const char* replicated_mode_name(ReplicatedMode mode) { return enum_name(kReplicatedModes, mode); }

SyncMultiGPUTrainerReplicated::SyncMultiGPUTrainerReplicated(std::vector<Device> devices, bool average,
                                                             ReplicatedMode mode)
    : DataParallelTrainer(std::move(devices), "SyncMultiGPUTrainerReplicated"), average_(average), mode_(mode) {
  if (mode_ == ReplicatedMode::kHierarchical && devices_.size() != 8) {
    logger::warn(kind_, ": mode 'hierarchical' needs 8 devices, got ", devices_.size(),
                 "; using the ring instead");
    mode_ = ReplicatedMode::kRing;
  }
  if (mode_ == ReplicatedMode::kNccl) {
    for (const Device& d : devices_)
      SPIRE_CHECK(d.is_cuda(), kind_, ": mode 'nccl' needs GPU devices, got ", d.to_string());
#if !defined(SPIRE_WITH_NCCL)
    throw_error(kind_, ": mode 'nccl' needs a build with NCCL");
#endif
  }
}

std::string SyncMultiGPUTrainerReplicated::variable_scope_on(const Device& device) const {
  for (size_t k = 1; k < devices_.size(); ++k)
    if (devices_[k] == device) return training_tower_name(static_cast<int>(k));
  return "";
}

std::vector<std::vector<Output>> SyncMultiGPUTrainerReplicated::reduce(
    const std::vector<GradsAndVars>& grads) {
  Graph& g = graph();
  const size_t K = grads.size(), N = grads[0].size();
  std::vector<std::vector<Output>> out(K, std::vector<Output>(N));
  if (K == 1) {
    for (size_t i = 0; i < N; ++i) out[0][i] = grads[0][i].first;
    return out;
  }
  if (mode_ == ReplicatedMode::kHierarchical) return reduce_hierarchical(grads);
  if (mode_ == ReplicatedMode::kRing || mode_ == ReplicatedMode::kNccl) {
    NameScope ns(g, "AllReduceGrads/");
    for (size_t i = 0; i < N; ++i) {
      std::vector<Output> xs;
      for (size_t k = 0; k < K; ++k) xs.push_back(grads[k][i].first);
      dist::CollectiveOptions o;
      o.communicator = mode_ == ReplicatedMode::kNccl ? "nccl" : "";
      o.devices = devices_;  // tower k's participant on tower k's device
      o.name = "allreduce";
      std::vector<Output> r =
          dist::all_reduce(xs, average_ ? dist::ReduceOp::kMean : dist::ReduceOp::kSum, o);
      for (size_t k = 0; k < K; ++k) out[k][i] = r[k];
    }
    return out;
  }
  // Naive ("cpu"/"gpu", tensorpack's allreduce_grads_naive): the variables in
  // reverse order, the r-th of them summed on cpu:0 or on devices[r % K];
  // every tower reads that sum.
  NameScope ns(g, "AllReduceNaive/");
  for (size_t r = 0; r < N; ++r) {
    const size_t i = N - 1 - r;
    DeviceScope on(g, mode_ == ReplicatedMode::kCpu ? Device::cpu(0) : devices_[r % K]);
    std::vector<Output> xs;
    for (size_t k = 0; k < K; ++k) xs.push_back(grads[k][i].first);
    Output sum = ops::add_n(xs, "add_n");
    if (average_) sum = scaled(sum, static_cast<double>(K));
    for (size_t k = 0; k < K; ++k) out[k][i] = sum;
  }
  return out;
}

std::vector<std::vector<Output>> SyncMultiGPUTrainerReplicated::reduce_hierarchical(
    const std::vector<GradsAndVars>& grads) {
  // tensorpack's hierarchical all-reduce for 8 devices: pack each device's
  // gradients into 8 chunks when possible; chunk i is summed in two groups
  // of 4 (the half holding device i % 8, led by it, and the other half, led
  // by (i % 8 + 4) % 8), the group sums added on group 1's leader, the
  // total copied to group 0's leader, and every device takes its leader's.
  Graph& g = graph();
  NameScope ns(g, "AllReduceHierarchical/");
  const size_t K = grads.size();
  const DType dt = grads[0][0].first.dtype();
  int64_t total = 0;
  bool packable = true;
  for (const auto& p : grads[0]) {
    packable = packable && p.first.shape().is_fully_defined() && p.first.dtype() == dt;
    if (packable) total += p.first.shape().num_elements();
  }
  packable = packable && total / 8 >= 1024;
  // items[k] = what device k contributes: 8 chunks, or one item per gradient.
  std::vector<std::vector<Output>> items(K);
  for (size_t k = 0; k < K; ++k) {
    if (!packable) {
      for (const auto& p : grads[k]) items[k].push_back(p.first);
      continue;
    }
    DeviceScope on(g, devices_[k]);
    std::vector<Output> xs;
    for (const auto& p : grads[k]) xs.push_back(p.first);
    Output all = pack_flat(xs, "pack");
    const int64_t chunk = total / 8;
    for (int64_t c = 0; c < 8; ++c) {
      const int64_t len = c == 7 ? total - 7 * chunk : chunk;
      items[k].push_back(ops::slice(all, {c * chunk}, {len}, "chunk"));
    }
  }
  const size_t M = items[0].size();
  std::vector<std::vector<Output>> reduced(K, std::vector<Output>(M));
  for (size_t i = 0; i < M; ++i) {
    const size_t lead0 = i % 8, lead1 = (i % 8 + 4) % 8;
    auto half_of = [](size_t d) { return d < 4 ? 0 : 1; };
    std::vector<Output> in0, in1;
    for (size_t k = 0; k < K; ++k) (half_of(k) == half_of(lead0) ? in0 : in1).push_back(items[k][i]);
    Output sum0, sum1, total1, total0;
    {
      DeviceScope on(g, devices_[lead0]);
      sum0 = ops::add_n(in0, "group0_sum");
    }
    {
      DeviceScope on(g, devices_[lead1]);
      sum1 = ops::add_n(in1, "group1_sum");
      total1 = ops::add(sum0, sum1, "total");
      if (average_) total1 = scaled(total1, 8.0);
    }
    {
      DeviceScope on(g, devices_[lead0]);
      total0 = ops::identity(total1, "total_copy");
    }
    for (size_t k = 0; k < K; ++k) reduced[k][i] = half_of(k) == half_of(lead0) ? total0 : total1;
  }
  if (!packable) return reduced;
  std::vector<Shape> shapes;
  for (const auto& p : grads[0]) shapes.push_back(p.first.shape());
  std::vector<std::vector<Output>> out(K);
  for (size_t k = 0; k < K; ++k) {
    DeviceScope on(g, devices_[k]);
    out[k] = unpack_flat(ops::concat(reduced[k], 0, "chunks"), shapes, "unpack");
  }
  return out;
}

Node* SyncMultiGPUTrainerReplicated::build_sync_op() {
  // tensorpack's sync_variables_from_main_tower: every variable tower<k>/X
  // (k > 0; trainable or not, optimizer slots included) is assigned from X.
  Graph& g = graph();
  DefaultGraphGuard guard(g);
  GraphUnfinalizeGuard unfinalize(g);
  NameScope ns(g, "sync_variables/");
  std::vector<Node*> assigns;
  for (const Replica& r : replicas_of_masters(g)) {
    const std::string& name = r.replica.name();
    if (!r.master) {
      if (r.replica.trainable)
        throw_error(kind_, ": replica '", name, "' has no master variable '", strip_tower_prefix(name),
                    "' to copy from");
      logger::warn(kind_, ": cannot find '", strip_tower_prefix(name), "' to initialize the replica '", name,
                   "' from; it keeps its own value");
      continue;
    }
    DeviceScope on(g, r.replica.node()->device());
    assigns.push_back(ops::assign(r.replica.value, r.master->output(0), "assign").node);
  }
  return ops::group(assigns, "sync_variables_from_main_tower", &g);
}

std::vector<CallbackPtr> SyncMultiGPUTrainerReplicated::_setup_graph(InputSource& input,
                                                                     GetOptFn get_opt_fn) {
  std::shared_ptr<Optimizer> opt = get_opt_fn();  // one optimizer, one learning rate
  SPIRE_CHECK(opt, kind_, ": get_opt_fn returned null");
  std::vector<GradsAndVars> grads = build_towers(input, *opt, /*replicated=*/true);
  std::vector<std::vector<Output>> reduced = reduce(grads);
  // One apply over every tower's copy: each device's variables get one fused
  // update, and step-wide state (Adam's beta powers, made with the masters)
  // advances once per step, as with one device.
  GradsAndVars all;
  for (size_t k = 0; k < grads.size(); ++k)
    for (size_t i = 0; i < grads[k].size(); ++i) all.push_back({reduced[k][i], grads[k][i].second});
  {
    NameScope ns(graph(), "apply_gradients/");
    train_op = opt->apply_gradients(all, {}, "train_op");
  }
  optimizer_ = opt;
  dist::check_collective_instances(graph());
  if (devices_.size() == 1) return {};
  sync_op_ = build_sync_op();
  Node* op = sync_op_;
  // Every process copies its masters to its replicas after the chief's
  // restore, before the first step, and at every epoch.
  return {make_master_sync_callback("SyncVariablesFromMainTower", [op] { return op; }, BROADCAST_EVERY_EPOCH)};
}

// ---- SyncMultiGPUTrainerParameterServer --------------------------------------------------------

namespace {
const EnumSpelling<PsDevice> kPsDevices[] = {
    {"auto", PsDevice::kAuto},
    {"cpu", PsDevice::kCpu},
    {"gpu", PsDevice::kGpu},
    {"devices", PsDevice::kGpu},  // tensorpack's
    {"", PsDevice::kAuto},
};
}  // namespace

PsDevice parse_ps_device(const std::string& name) {
  return parse_enum(kPsDevices, name, "SyncMultiGPUTrainerParameterServer", "ps_device");
}
const char* ps_device_name(PsDevice device) { return enum_name(kPsDevices, device); }

SyncMultiGPUTrainerParameterServer::SyncMultiGPUTrainerParameterServer(std::vector<Device> devices,
                                                                       PsDevice ps_device)
    : DataParallelTrainer(std::move(devices), "SyncMultiGPUTrainerParameterServer"), ps_device_(ps_device) {
  if (ps_device_ == PsDevice::kAuto) ps_device_ = devices_.size() <= 2 ? PsDevice::kGpu : PsDevice::kCpu;
}

std::vector<CallbackPtr> SyncMultiGPUTrainerParameterServer::_setup_graph(InputSource& input,
                                                                          GetOptFn get_opt_fn) {
  std::shared_ptr<Optimizer> opt = get_opt_fn();
  SPIRE_CHECK(opt, kind_, ": get_opt_fn returned null");
  VariablePlacement placement =
      ps_device_ == PsDevice::kCpu
          ? VariablePlacement([](const std::string&, const Shape&, DType) { return Device::cpu(0); })
          : least_loaded_placement();
  std::vector<GradsAndVars> grads = build_towers(input, *opt, /*replicated=*/false, placement);
  const size_t K = grads.size();
  GradsAndVars averaged;
  {
    NameScope ns(graph(), "AggregateGradsColocate/");
    for (size_t i = 0; i < grads[0].size(); ++i) {
      const Output& var = grads[0][i].second;
      DeviceScope on(graph(), var.device());  // the sum lives with its variable
      std::vector<Output> xs;
      for (size_t k = 0; k < K; ++k) xs.push_back(grads[k][i].first);
      Output g = K == 1 ? xs[0] : scaled(ops::add_n(xs, "add_n"), static_cast<double>(K));
      averaged.push_back({g, var});
    }
  }
  train_op = opt->apply_gradients(averaged, {}, "train_op");
  optimizer_ = opt;
  dist::check_collective_instances(graph());
  return {};
}

// ---- AsyncMultiGPUTrainer ------------------------------------------------------------------------

AsyncMultiGPUTrainer::AsyncMultiGPUTrainer(std::vector<Device> devices, bool scale_gradient)
    : DataParallelTrainer(std::move(devices), "AsyncMultiGPUTrainer"),
      scale_gradient_(scale_gradient) {}

std::vector<CallbackPtr> AsyncMultiGPUTrainer::_setup_graph(InputSource& input, GetOptFn get_opt_fn) {
  std::shared_ptr<Optimizer> opt = get_opt_fn();
  SPIRE_CHECK(opt, kind_, ": get_opt_fn returned null");
  const size_t K = devices_.size();
  if (K == 1) {  // exactly SimpleTrainer's graph, on the one device
    DeviceScope on(graph(), devices_[0]);
    TowerContext ctx("", true);
    GradsAndVars grads = compute_tower_gradients(input, *opt);
    train_op = opt->apply_gradients(grads, {}, "train_op");
    optimizer_ = opt;
    return {};
  }
  VariablePlacement placement =
      K >= 4 ? VariablePlacement([](const std::string&, const Shape&, DType) { return Device::cpu(0); })
             : least_loaded_placement();
  std::vector<GradsAndVars> grads = build_towers(input, *opt, /*replicated=*/false, placement);
  // Each tower applies its own gradients as soon as they exist: no update
  // waits for another tower (the variables' own locks keep each update whole).
  std::vector<Node*> applies;
  for (size_t k = 0; k < K; ++k) {
    GradsAndVars gv = grads[k];
    if (scale_gradient_)
      for (auto& p : gv) p.first = scaled(p.first, static_cast<double>(K));
    applies.push_back(opt->apply_gradients(gv, {}, "apply_grad_" + std::to_string(k)));
  }
  train_op = ops::group(applies, "train_op", &graph());
  optimizer_ = opt;
  dist::check_collective_instances(graph());
  return {};
}

std::unique_ptr<SingleCostTrainer> SyncMultiGPUTrainer(std::vector<Device> devices) {
  return std::make_unique<SyncMultiGPUTrainerParameterServer>(std::move(devices), PsDevice::kCpu);
}

}  // namespace spire
