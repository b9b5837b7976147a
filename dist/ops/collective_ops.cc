// Collective ops (see dist/ops/collective_ops.h): registrations, builders,
// gradients, and their kernels. The kernels are host code shared by every
// device type: they allocate each participant's output on its device and
// hand the participants to the node's Communicator, which does the device
// work (CPU loops, CUDA kernels or NCCL).
#include "dist/ops/collective_ops.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "core/kernel_registry.h"
#include "core/op_registry.h"
#include "core/ops.h"
#include "dist/comm/in_process_ring.h"
#if defined(SPIRE_WITH_NCCL)
#include "dist/nccl/nccl_communicator.h"
#endif

namespace spire::dist {

namespace {

using Grads = std::vector<Output>;

// ---- shape inference ------------------------------------------------------------

int group_size(const InferContext& c) {
  int g = static_cast<int>(c.attr<int64_t>("group_size"));
  if (g < 0) c.fail("group_size must be >= 0 (0: the number of inputs), got ", g);
  if (g == 0) g = c.num_inputs();
  if (g < c.num_inputs())
    c.fail("group_size ", g, " is smaller than the ", c.num_inputs(), " local participants");
  return g;
}

// All inputs: one numeric dtype and one (merged) shape.
Shape common_shape(InferContext& c, bool allow_bool) {
  for (int i = 0; i < c.num_inputs(); ++i) {
    c.expect_same_dtype(0, i);
    if (!allow_bool)
      c.expect_dtype(i, {DType::F32, DType::F64, DType::I32, DType::I64, DType::F16, DType::BF16});
  }
  Shape s = c.input_shape(0);
  for (int i = 1; i < c.num_inputs(); ++i) {
    const Shape& t = c.input_shape(i);
    if (t.rank() != s.rank())
      c.fail("every participant needs the same shape: ", c.input_label(0), " is ", s.to_string(), ", ",
             c.input_label(i), " is ", t.to_string());
    for (int d = 0; d < s.rank(); ++d) {
      if (s[d] < 0) s.set_dim(d, t[d]);
      else if (t[d] >= 0 && t[d] != s[d])
        c.fail("every participant needs the same shape: ", c.input_label(0), " is ",
               c.input_shape(0).to_string(), ", ", c.input_label(i), " is ", t.to_string());
    }
  }
  return s;
}

void reduction_attr_check(InferContext& c) {
  parse_reduce_op(c.attr<std::string>("reduction"), c.where());
}

void all_reduce_shape(InferContext& c) {
  reduction_attr_check(c);
  group_size(c);
  Shape s = common_shape(c, false);
  for (int i = 0; i < c.num_inputs(); ++i) c.set_output(i, c.input_dtype(0), s);
}

void broadcast_shape(InferContext& c) {
  const int g = group_size(c);
  const int64_t root = c.attr<int64_t>("root");
  if (root < 0 || root >= g) c.fail("root ", root, " is not a participant (", g, " participants)");
  Shape s = common_shape(c, true);
  for (int i = 0; i < c.num_inputs(); ++i) c.set_output(i, c.input_dtype(0), s);
}

void all_gather_shape(InferContext& c) {
  const int g = group_size(c);
  Shape s = common_shape(c, true);
  if (s.rank() < 1) c.fail("AllGather concatenates along axis 0: inputs need rank >= 1");
  if (s[0] >= 0) s.set_dim(0, s[0] * g);
  for (int i = 0; i < c.num_inputs(); ++i) c.set_output(i, c.input_dtype(0), s);
}

void reduce_scatter_shape(InferContext& c) {
  reduction_attr_check(c);
  const int g = group_size(c);
  Shape s = common_shape(c, false);
  if (s.rank() < 1) c.fail("ReduceScatter splits along axis 0: inputs need rank >= 1");
  if (s[0] >= 0) {
    if (s[0] % g != 0)
      c.fail("dimension 0 (", s[0], ") must be a multiple of the group size ", g);
    s.set_dim(0, s[0] / g);
  }
  for (int i = 0; i < c.num_inputs(); ++i) c.set_output(i, c.input_dtype(0), s);
}

// ---- gradients ------------------------------------------------------------------

// Options that rebuild a collective like `n` (same devices, communicator, group).
CollectiveOptions like(const Node* n, const std::string& suffix) {
  CollectiveOptions o;
  o.communicator = n->attr<std::string>("communicator");
  o.group_size = static_cast<int>(n->attr<int64_t>("group_size"));
  o.devices = n->devices();
  o.name = n->name() + suffix;
  for (const auto& d : n->attr<std::vector<std::string>>("group_devices"))
    o.group_devices.push_back(Device::parse(d));
  const std::string instance = n->attr<std::string>("instance");
  if (!instance.empty()) o.instance = instance + suffix;
  return o;
}

std::vector<Output> output_grads(GradContext& c) {
  Grads dy;
  for (int i = 0; i < c.node()->num_outputs(); ++i) dy.push_back(c.grad(i));
  return dy;
}

ReduceOp differentiable_reduction(GradContext& c) {
  ReduceOp op = parse_reduce_op(c.attr<std::string>("reduction"), c.node()->describe());
  if (op == ReduceOp::kMax || op == ReduceOp::kMin)
    throw_error("gradients: ", c.node()->describe(), " reduces with ", reduce_op_name(op),
                ", which has no gradient (only sum and mean do)");
  return op;
}

Grads all_reduce_grad(GradContext& c) {
  // y_i = op_j x_j for every i, so dL/dx_j = op_i dy_i (sum, or mean).
  return all_reduce(output_grads(c), differentiable_reduction(c), like(c.node(), "_grad"));
}

Grads broadcast_grad(GradContext& c) {
  // y_i = x_root for every i: the root's input gets the sum of all output
  // gradients (a reduction to the root); the other inputs get zeros.
  const Node* n = c.node();
  const int root = static_cast<int>(n->attr<int64_t>("root"));
  const int g = static_cast<int>(n->attr<int64_t>("group_size"));
  // Participant i's global index: i, or for a node serving part of an
  // in-process group, its device's position in the group.
  const auto group = n->attr<std::vector<std::string>>("group_devices");
  auto global_index = [&](int i) {
    if (group.empty()) return i;
    const std::string d = n->devices()[static_cast<size_t>(i)].to_string();
    return static_cast<int>(std::find(group.begin(), group.end(), d) - group.begin());
  };
  const int in_process = group.empty() ? n->num_inputs() : static_cast<int>(group.size());
  if (g != 0 && g != in_process)
    throw_error("gradients: ", n->describe(), " spans ", g, " participants in several processes; "
                "its gradient needs every participant in this process");
  Grads summed = all_reduce(output_grads(c), ReduceOp::kSum, like(n, "_grad"));
  Grads dx;
  for (int i = 0; i < n->num_inputs(); ++i) {
    DeviceScope there(c.graph(), n->devices()[static_cast<size_t>(i)]);
    dx.push_back(global_index(i) == root ? summed[static_cast<size_t>(i)] : ops::zeros_like(c.input(i)));
  }
  return dx;
}

Grads all_gather_grad(GradContext& c) {
  // y_i = concat_j x_j: dL/dx_j = sum_i (block j of dy_i).
  return reduce_scatter(output_grads(c), ReduceOp::kSum, like(c.node(), "_grad"));
}

Grads reduce_scatter_grad(GradContext& c) {
  // y_j = op_i (block j of x_i): dL/dx_i = concat_j dy_j (over the group size for mean).
  ReduceOp op = differentiable_reduction(c);
  Grads dx = all_gather(output_grads(c), like(c.node(), "_grad"));
  if (op == ReduceOp::kMean) {
    const int g = static_cast<int>(c.node()->attr<int64_t>("group_size"));
    const double scale = 1.0 / (g == 0 ? c.node()->num_inputs() : g);
    for (size_t i = 0; i < dx.size(); ++i) {
      DeviceScope there(c.graph(), dx[i].device());
      dx[i] = ops::mul(dx[i], ops::scalar_like(scale, dx[i]));
    }
  }
  return dx;
}

#define SPIRE_COLLECTIVE_ATTRS                        \
  multi_device()                                     \
      .variadic_input("x", 1)                        \
      .attr("communicator", std::string())           \
      .attr("group_size", int64_t{0})                \
      .attr("group_devices", std::vector<std::string>()) \
      .attr("instance", std::string())              \
      .attr("overlap", false)                        \
      .rendezvous_attr("instance")                   \
      .own_lane_attr("overlap")

SPIRE_REGISTER_OP("AllReduce")
    .SPIRE_COLLECTIVE_ATTRS
    .attr("reduction", std::string("sum"))
    .shape_fn(all_reduce_shape)
    .grad(all_reduce_grad)
    .doc("Participant i's output is the reduction (sum, mean, max, min) of every participant's "
         "input; one participant per input, on the input's device (multi-device node).");

SPIRE_REGISTER_OP("Broadcast")
    .SPIRE_COLLECTIVE_ATTRS
    .attr("root", int64_t{0})
    .shape_fn(broadcast_shape)
    .grad(broadcast_grad)
    .doc("Every participant's output is participant `root`'s input.");

SPIRE_REGISTER_OP("AllGather")
    .SPIRE_COLLECTIVE_ATTRS
    .shape_fn(all_gather_shape)
    .grad(all_gather_grad)
    .doc("Every participant's output is all inputs concatenated along axis 0 in participant order.");

SPIRE_REGISTER_OP("ReduceScatter")
    .SPIRE_COLLECTIVE_ATTRS
    .attr("reduction", std::string("sum"))
    .shape_fn(reduce_scatter_shape)
    .grad(reduce_scatter_grad)
    .doc("Participant i's output is block i (along axis 0) of the reduction of all inputs.");

#undef SPIRE_COLLECTIVE_ATTRS

std::vector<Output> build(const char* op, const std::vector<Output>& xs, AttrMap attrs,
                          const CollectiveOptions& o) {
  SPIRE_CHECK(!xs.empty() && xs[0].valid(), "dist::", op, ": needs at least one input");
  attrs["communicator"] = o.communicator;
  if (o.overlap) attrs["overlap"] = true;
  int64_t group = o.group_size;
  if (!o.group_devices.empty()) {
    SPIRE_CHECK(!o.instance.empty(), "dist::", op, " '", o.name,
                "': a node serving part of a group (group_devices) needs an instance key");
    std::vector<std::string> names;
    for (const auto& d : o.group_devices) names.push_back(d.to_string());
    SPIRE_CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size(),
                "dist::", op, " '", o.name, "': group_devices {", device_list(o.group_devices),
                "} lists a device twice");
    attrs["group_devices"] = names;
    attrs["instance"] = o.instance;
    if (group == 0) group = static_cast<int64_t>(o.group_devices.size());
  }
  attrs["group_size"] = group;
  if (!o.devices.empty()) {
    std::vector<std::string> names;
    for (const auto& d : o.devices) names.push_back(d.to_string());
    attrs["devices"] = names;
  }
  Node* n = xs[0].graph()->add_node(op, xs, attrs, o.name.empty() ? op : o.name);
  if (!o.group_devices.empty())
    for (const Device& d : n->devices())
      if (std::find(o.group_devices.begin(), o.group_devices.end(), d) == o.group_devices.end())
        throw_error("dist::", op, " ", n->describe(), ": participant device ", d.to_string(),
                    " is not in group_devices {", device_list(o.group_devices), "}");
  std::vector<Output> outs;
  for (int i = 0; i < n->num_outputs(); ++i) outs.push_back(n->output(i));
  return outs;
}

// ---- kernels --------------------------------------------------------------------

using Kind = CollectiveKind;

// The node's communicator (see the header's comment), checked against the node.
std::vector<Device> group_devices_of(const Node& n) {
  std::vector<Device> out;
  for (const auto& d : n.attr<std::vector<std::string>>("group_devices")) out.push_back(Device::parse(d));
  return out.empty() ? n.devices() : out;
}

std::shared_ptr<Communicator> communicator_for(KernelContext& ctx) {
  const Node& n = ctx.node();
  const std::string name = ctx.attr<std::string>("communicator");
  const std::vector<Device> devices = group_devices_of(n);
  std::shared_ptr<Communicator> comm;
  if (name.empty() || name == "ring") {
    comm = ctx.state().resource<Communicator>(communicator_key(name, devices), [&] {
      return std::make_shared<InProcessRing>(devices);
    });
  } else if (name == "nccl") {
#if defined(SPIRE_WITH_NCCL)
    comm = ctx.state().resource<Communicator>(communicator_key(name, devices), [&] {
      return std::make_shared<NcclCommunicator>(devices);
    });
#else
    ctx.fail("communicator \"nccl\" needs a build with NCCL (configure with SPIRE_CUDA=ON where "
             "NCCL is installed)");
#endif
  } else {
    comm = ctx.state().resource<Communicator>(name);
    if (!comm)
      ctx.fail("no communicator named '", name, "' in this session (store one with "
               "Session::set_resource<dist::Communicator>)");
  }
  if (comm->devices() != devices)
    ctx.fail("communicator ", comm->name(), " connects devices {", device_list(comm->devices()),
             "} but the node's participants are on {", device_list(devices), "}");
  const int64_t g = ctx.attr<int64_t>("group_size");
  const int64_t want = g == 0 ? static_cast<int64_t>(n.devices().size()) : g;
  if (comm->size() != want)
    ctx.fail("communicator ", comm->name(), " has ", comm->size(), " participants but the node's "
             "group_size is ", want);
  return comm;
}

// Collective-key ids of instance keys, per session: above every node id
// (bit 63 set), equal for every node and run with the same key. Each key's
// nodes are checked to cover their group (instance_problem) when first used
// and again whenever the graph has grown since, so a missing member is an
// error instead of a wait until the timeout.
struct InstanceIds {
  struct Entry {
    uint64_t id = 0;
    int checked_at_nodes = -1;  // the graph's node count when last checked
  };
  std::mutex mu;
  std::map<std::string, Entry> ids;
};

std::string instance_problem(const Graph& g, const std::string& only);

uint64_t instance_id(KernelContext& ctx, const std::string& instance) {
  auto reg = ctx.state().resource<InstanceIds>("spire.collective_instances",
                                               [] { return std::make_shared<InstanceIds>(); });
  const Graph& g = *ctx.node().graph();
  std::lock_guard<std::mutex> lk(reg->mu);
  auto [it, fresh] = reg->ids.try_emplace(instance);
  if (fresh) it->second.id = (uint64_t{1} << 63) | (reg->ids.size() - 1);
  if (it->second.checked_at_nodes != g.num_nodes()) {
    std::string problem = instance_problem(g, instance);
    if (!problem.empty()) ctx.fail(problem);
    it->second.checked_at_nodes = g.num_nodes();
  }
  return it->second.id;
}

template <Kind kKind>
void collective_kernel(KernelContext& ctx) {
  const Node& n = ctx.node();
  std::shared_ptr<Communicator> comm = communicator_for(ctx);
  const int g = comm->size();
  const std::string instance = ctx.attr<std::string>("instance");
  // A node serving part of the group: participant p is local index
  // (position of its device in the group) of the communicator.
  std::vector<int> local_index;
  if (!instance.empty()) {
    if (ctx.run().one_lane && static_cast<int>(n.devices().size()) < static_cast<int>(comm->devices().size()))
      ctx.fail("collective instance '", instance, "' is served by several nodes, which meet while "
               "they run; SessionOptions::sequential runs one node at a time, so they never "
               "would: run this graph with sequential = false");
    const std::vector<Device>& group = comm->devices();
    for (const Device& d : n.devices())
      local_index.push_back(static_cast<int>(std::find(group.begin(), group.end(), d) - group.begin()));
  }
  std::vector<Participant> parts;
  for (int p : ctx.participants()) {
    const Tensor& in = ctx.input(p);
    Shape out_shape = in.shape();
    if (kKind == Kind::kAllGather) out_shape.set_dim(0, in.dim(0) * g);
    if (kKind == Kind::kReduceScatter) {
      if (in.dim(0) % g != 0)
        ctx.fail("participant ", p, "'s input ", in.type_string(), ": dimension 0 must be a "
                 "multiple of the group size ", g);
      out_shape.set_dim(0, in.dim(0) / g);
    }
    Tensor out(in.dtype(), out_shape, n.devices()[static_cast<size_t>(p)]);
    parts.push_back({local_index.empty() ? p : local_index[static_cast<size_t>(p)], in, out});
  }
  CollectiveCall call;
  call.key = {&ctx.state(), ctx.run().id,
              instance.empty() ? static_cast<uint64_t>(n.id()) : instance_id(ctx, instance)};
  call.name = n.name();
  call.identity = instance;  // "" = the node's name
  call.run = &ctx.run();
  call.kernel = &ctx;
  switch (kKind) {
    case Kind::kAllReduce:
      comm->allreduce(call, parts, parse_reduce_op(ctx.attr<std::string>("reduction"), n.describe()));
      break;
    case Kind::kBroadcast:
      comm->broadcast(call, parts, static_cast<int>(ctx.attr<int64_t>("root")));
      break;
    case Kind::kAllGather:
      comm->allgather(call, parts);
      break;
    case Kind::kReduceScatter:
      comm->reduce_scatter(call, parts,
                           parse_reduce_op(ctx.attr<std::string>("reduction"), n.describe()));
      break;
    case Kind::kBarrier:  // no graph op
      break;
  }
  for (size_t i = 0; i < parts.size(); ++i)
    ctx.set_output(ctx.participants()[i], parts[i].output);
}

void register_collective_kernels(DeviceType device) {
  auto& r = KernelRegistry::global();
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64, DType::F16, DType::BF16}) {
    r.add("AllReduce", device, dt, collective_kernel<Kind::kAllReduce>);
    r.add("ReduceScatter", device, dt, collective_kernel<Kind::kReduceScatter>);
  }
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool, DType::F16, DType::BF16}) {
    r.add("Broadcast", device, dt, collective_kernel<Kind::kBroadcast>);
    r.add("AllGather", device, dt, collective_kernel<Kind::kAllGather>);
  }
}

}  // namespace

SPIRE_STATIC_INIT(collective_kernels) {
  register_collective_kernels(DeviceType::CPU);
#if defined(SPIRE_WITH_CUDA)
  register_collective_kernels(DeviceType::CUDA);
#endif
}

std::string communicator_key(const std::string& communicator, const std::vector<Device>& devices) {
  if (communicator.empty() || communicator == "ring") return "spire.ring:" + device_list(devices);
  if (communicator == "nccl") return "spire.nccl:" + device_list(devices);
  return communicator;
}

std::vector<Output> all_reduce(const std::vector<Output>& xs, ReduceOp op,
                               const CollectiveOptions& options) {
  return build("AllReduce", xs, {{"reduction", std::string(reduce_op_name(op))}}, options);
}

std::vector<Output> broadcast(const std::vector<Output>& xs, int root,
                              const CollectiveOptions& options) {
  return build("Broadcast", xs, {{"root", int64_t{root}}}, options);
}

std::vector<Output> all_gather(const std::vector<Output>& xs, const CollectiveOptions& options) {
  return build("AllGather", xs, {}, options);
}

std::vector<Output> reduce_scatter(const std::vector<Output>& xs, ReduceOp op,
                                   const CollectiveOptions& options) {
  return build("ReduceScatter", xs, {{"reduction", std::string(reduce_op_name(op))}}, options);
}

namespace {

std::string str_join(const std::vector<std::string>& xs, const char* sep) {
  std::string out;
  for (size_t i = 0; i < xs.size(); ++i) out += (i ? sep : "") + xs[i];
  return out;
}

// What is wrong with the instance collectives of `g` (only `only` when not
// empty), or "" when every one covers its group exactly once.
std::string instance_problem(const Graph& g, const std::string& only) {
  struct Group {
    std::string communicator;
    std::vector<std::string> group;
    std::map<std::string, std::vector<std::string>> served;  // device -> nodes
  };
  std::map<std::string, Group> groups;
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node* n = g.node(id);
    if (!n->op_def().multi_device() || !n->has_attr("instance")) continue;
    const std::string instance = n->attr<std::string>("instance");
    if (instance.empty() || (!only.empty() && instance != only)) continue;
    const auto group = n->attr<std::vector<std::string>>("group_devices");
    const std::string comm = n->attr<std::string>("communicator");
    auto [it, fresh] = groups.try_emplace(instance);
    Group& gr = it->second;
    if (fresh) {
      gr.communicator = comm;
      gr.group = group;
    } else if (gr.communicator != comm || gr.group != group) {
      return str_cat("collective instance '", instance, "': ", n->describe(), " uses communicator '",
                     comm, "' over {", str_join(group, ","), "} but an earlier node of the instance "
                     "uses '", gr.communicator, "' over {", str_join(gr.group, ","), "}");
    }
    for (const Device& d : n->devices()) gr.served[d.to_string()].push_back(n->name());
  }
  for (const auto& [instance, gr] : groups) {
    std::vector<std::string> missing, served;
    for (const auto& d : gr.group) {
      auto it = gr.served.find(d);
      if (it == gr.served.end()) {
        missing.push_back(d);
        continue;
      }
      served.push_back(d + " (" + it->second.front() + ")");
      if (it->second.size() > 1)
        return str_cat("collective instance '", instance, "': device ", d, " is served by ",
                       it->second.size(), " nodes (", str_join(it->second, ", "),
                       "); each device of the group takes part once");
    }
    if (!missing.empty())
      return str_cat("collective instance '", instance, "' over {", str_join(gr.group, ","),
                     "} has participants on ", str_join(served, ", "), " but none on ",
                     str_join(missing, ", "),
                     ": every tower must build it (e.g. run every synchronized BatchNorm layer "
                     "in every tower), or the others would wait for it forever");
  }
  return "";
}

}  // namespace

void check_collective_instances(const Graph& g) {
  std::string problem = instance_problem(g, "");
  if (!problem.empty()) throw Error(problem);
}

std::vector<Node*> collective_nodes(const Graph& g, const std::string& communicator) {
  static const char* const kOps[] = {"AllReduce", "Broadcast", "AllGather", "ReduceScatter"};
  std::vector<Node*> out;
  for (const auto& n : g.nodes()) {
    bool collective = false;
    for (const char* op : kOps) collective = collective || n->op_type() == op;
    if (collective && n->attr<std::string>("communicator") == communicator) out.push_back(n.get());
  }
  return out;
}

std::string describe_collective(const Node* n) {
  std::string what = n->op_type();
  if (n->has_attr("reduction")) what += "(" + n->attr<std::string>("reduction") + ")";
  if (n->op_type() == "Broadcast") what += str_cat("(root ", n->attr<int64_t>("root"), ")");
  std::string outs;
  for (int i = 0; i < n->num_outputs(); ++i)
    outs += str_cat(i ? ", " : "", dtype_name(n->output_dtype(i)), n->output_shape(i).to_string());
  return str_cat(n->name(), ": ", what, " ", outs);
}

std::vector<int64_t> ready_levels(const Graph& g) {
  const size_t n = static_cast<size_t>(g.num_nodes());
  std::vector<int64_t> level(n, -1);
  std::vector<char> on_stack(n, 0);
  // Iterative depth-first search (graphs of real models are deep): a frame is a node and
  // how many of its inputs, then control inputs, it has visited.
  std::vector<std::pair<Node*, size_t>> stack;
  for (const auto& root : g.nodes()) {
    if (level[static_cast<size_t>(root->id())] >= 0) continue;
    stack.push_back({root.get(), 0});
    on_stack[static_cast<size_t>(root->id())] = 1;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      const size_t ni = static_cast<size_t>(node->num_inputs());
      const size_t total = ni + node->control_inputs().size();
      if (next < total) {
        Node* dep = next < ni ? node->input(static_cast<int>(next)).node : node->control_inputs()[next - ni];
        ++next;
        const size_t d = static_cast<size_t>(dep->id());
        if (level[d] >= 0) continue;
        SPIRE_CHECK(!on_stack[d], "ready_levels: the graph has a cycle through node '", dep->name(), "'");
        on_stack[d] = 1;
        stack.push_back({dep, 0});
        continue;
      }
      int64_t l = 0;
      for (int i = 0; i < node->num_inputs(); ++i)
        l = std::max(l, level[static_cast<size_t>(node->input(i).node->id())] + 1);
      for (Node* c : node->control_inputs()) l = std::max(l, level[static_cast<size_t>(c->id())] + 1);
      level[static_cast<size_t>(node->id())] = l;
      on_stack[static_cast<size_t>(node->id())] = 0;
      stack.pop_back();
    }
  }
  return level;
}

std::vector<Node*> order_collectives(const std::vector<Node*>& nodes,
                                     const std::map<const Node*, std::vector<const Node*>>& ready_with) {
  if (nodes.empty()) return {};
  const Graph* g = nodes.front()->graph();
  std::set<const Node*> seen;
  for (const Node* n : nodes) {
    SPIRE_CHECK(n->graph() == g, "order_collectives: ", n->name(), " is in another graph than ",
                nodes.front()->name());
    SPIRE_CHECK(seen.insert(n).second, "order_collectives: ", n->name(), " is given twice");
  }
  const std::vector<int64_t> level = ready_levels(*g);
  auto key = [&](const Node* n) {
    auto it = ready_with.find(n);
    int64_t l = level[static_cast<size_t>(n->id())];
    if (it != ready_with.end() && !it->second.empty()) {
      l = 0;
      for (const Node* m : it->second) {
        SPIRE_CHECK(m->graph() == g, "order_collectives: ", m->name(), " is in another graph");
        l = std::max(l, level[static_cast<size_t>(m->id())] + 1);
      }
    }
    return std::make_pair(l, n->id());
  };
  std::vector<std::pair<std::pair<int64_t, int>, Node*>> keyed;
  for (Node* n : nodes) keyed.push_back({key(n), n});
  std::sort(keyed.begin(), keyed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Node*> order;
  for (const auto& k : keyed) order.push_back(k.second);
  for (size_t i = 1; i < order.size(); ++i) order[i]->add_control_input(order[i - 1]);
  // (A `ready_with` that leaves out a path into its node could order it before a node it
  // depends on: the cycle is named here, not at the first run.)
  if (!ready_with.empty()) ready_levels(*g);
  return order;
}

}  // namespace spire::dist
