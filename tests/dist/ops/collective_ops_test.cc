// The collective graph ops (AllReduce, Broadcast, AllGather, ReduceScatter)
// on CPU devices: forward values, gradient-check cases (f64 finite
// differences through the registry-driven test), one-participant parity
// cases (the GPU parity test runs them on cuda:0), and graphs: no Copy nodes
// for a multi-device node, collectives beside ordinary per-device nodes,
// sequential and parallel runs bit-identical, the gradient of a loss through
// an AllReduce, a failing lane while its peers wait inside a collective,
// shape-inference errors, and JSON round trips.
#include <chrono>
#include <cstring>

#include "tests/support/op_test_util.h"
#include "tests/support/test_ops.h"

namespace spire::testing {
namespace {

using dist::ReduceOp;

// Puts in[k] on cpu:k (through a Copy node), the participants' inputs.
std::vector<Output> spread(const std::vector<Output>& in) {
  Graph& g = *in[0].graph();
  std::vector<Output> xs;
  for (size_t k = 0; k < in.size(); ++k) {
    DeviceScope d(g, Device::cpu(static_cast<int>(k)));
    xs.push_back(ops::identity(in[k]));
  }
  return xs;
}

// ---- gradient-check cases (f64, through the registry) ----------------------------

SPIRE_GRAD_CASE(all_reduce_sum3, {"AllReduce", "sum over 3 devices", {{2, 3}, {2, 3}, {2, 3}},
                                  [](auto& in) { return dist::all_reduce(spread(in), ReduceOp::kSum); },
                                  {}, 2e-6, false, 1e-6, 3});
SPIRE_GRAD_CASE(all_reduce_mean2, {"AllReduce", "mean over 2 devices", {{5}, {5}},
                                   [](auto& in) { return dist::all_reduce(spread(in), ReduceOp::kMean); },
                                   {}, 2e-6, false, 1e-6, 2});
SPIRE_GRAD_CASE(broadcast_root1, {"Broadcast", "root 1 of 3", {{4}, {4}, {4}},
                                  [](auto& in) { return dist::broadcast(spread(in), 1); },
                                  {}, 2e-6, false, 1e-6, 3});
SPIRE_GRAD_CASE(all_gather3, {"AllGather", "3 devices", {{2, 2}, {2, 2}, {2, 2}},
                              [](auto& in) { return dist::all_gather(spread(in)); },
                              {}, 2e-6, false, 1e-6, 3});
SPIRE_GRAD_CASE(reduce_scatter_sum2, {"ReduceScatter", "sum over 2 devices", {{4, 3}, {4, 3}},
                                      [](auto& in) { return dist::reduce_scatter(spread(in), ReduceOp::kSum); },
                                      {}, 2e-6, false, 1e-6, 2});
SPIRE_GRAD_CASE(reduce_scatter_mean3, {"ReduceScatter", "mean over 3 devices", {{6}, {6}, {6}},
                                       [](auto& in) { return dist::reduce_scatter(spread(in), ReduceOp::kMean); },
                                       {}, 2e-6, false, 1e-6, 3});

// ---- one-participant cases (also run on cuda:0 by the GPU parity test) -------------

SPIRE_PARITY_CASE(all_reduce_one, {"AllReduce", "one participant", {{{7, 3}}},
                                   [](auto& in) { return dist::all_reduce({in[0]}, ReduceOp::kMean); }});
SPIRE_PARITY_CASE(all_reduce_one_int, {"AllReduce", "one participant, i32", {{{1000}, DType::I32, -50, 50}},
                                       [](auto& in) { return dist::all_reduce({in[0]}, ReduceOp::kMax); }});
SPIRE_PARITY_CASE(broadcast_one, {"Broadcast", "one participant", {{{5}}},
                                  [](auto& in) { return dist::broadcast({in[0]}, 0); }});
SPIRE_PARITY_CASE(all_gather_one, {"AllGather", "one participant", {{{4, 2}}},
                                   [](auto& in) { return dist::all_gather({in[0]}); }});
SPIRE_PARITY_CASE(reduce_scatter_one, {"ReduceScatter", "one participant", {{{6}}},
                                       [](auto& in) { return dist::reduce_scatter({in[0]}); }});

// ---- forward values -----------------------------------------------------------------

Tensor vec(const Shape& s, const std::vector<float>& v) { return Tensor::from_vector<float>(s, v); }

// Builds op(x_k on cpu:k) for fed values and runs it in parallel and sequential sessions.
std::vector<Tensor> run_collective(const std::vector<Tensor>& values,
                                   const std::function<std::vector<Output>(const std::vector<Output>&)>& op,
                                   bool sequential = false) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Output> xs;
  FeedDict feeds;
  for (size_t k = 0; k < values.size(); ++k) {
    DeviceScope d(g, Device::cpu(static_cast<int>(k)));
    xs.push_back(ops::placeholder(values[k].dtype(), values[k].shape(), "x" + std::to_string(k)));
    feeds.push_back({xs.back(), values[k]});
  }
  std::vector<Output> outs = op(xs);
  for (size_t k = 0; k < outs.size(); ++k) EXPECT_EQ(outs[k].device(), Device::cpu(static_cast<int>(k)));
  Session s(g, cpus(static_cast<int>(values.size()), sequential));
  return s.run(outs, feeds);
}

SPIRE_FORWARD_TEST(AllReduce, SumMeanMaxMin) {
  std::vector<Tensor> in{vec({3}, {1, -2, 3}), vec({3}, {4, 5, -6}), vec({3}, {7, 8, 9})};
  for (bool seq : {false, true}) {
    auto r = run_collective(in, [](auto& x) { return dist::all_reduce(x); }, seq);
    ASSERT_EQ(r.size(), 3u);
    for (auto& t : r) expect_tensor(t, {3}, {12, 11, 6});
    r = run_collective(in, [](auto& x) { return dist::all_reduce(x, ReduceOp::kMean); }, seq);
    for (auto& t : r) expect_tensor(t, {3}, {4, 11.0 / 3, 2});
    r = run_collective(in, [](auto& x) { return dist::all_reduce(x, ReduceOp::kMax); }, seq);
    for (auto& t : r) expect_tensor(t, {3}, {7, 8, 9});
    r = run_collective(in, [](auto& x) { return dist::all_reduce(x, ReduceOp::kMin); }, seq);
    for (auto& t : r) expect_tensor(t, {3}, {1, -2, -6});
  }
}

SPIRE_FORWARD_TEST(Broadcast, FromTheRoot) {
  std::vector<Tensor> in{vec({2}, {1, 2}), vec({2}, {3, 4}), vec({2}, {5, 6})};
  for (int root = 0; root < 3; ++root) {
    auto r = run_collective(in, [&](auto& x) { return dist::broadcast(x, root); });
    for (auto& t : r) expect_tensor(t, {2}, {1.0 + 2 * root, 2.0 + 2 * root});
  }
}

SPIRE_FORWARD_TEST(AllGather, ConcatenatesAlongAxis0) {
  std::vector<Tensor> in{vec({1, 2}, {1, 2}), vec({1, 2}, {3, 4})};
  auto r = run_collective(in, [](auto& x) { return dist::all_gather(x); });
  for (auto& t : r) expect_tensor(t, {2, 2}, {1, 2, 3, 4});
}

SPIRE_FORWARD_TEST(ReduceScatter, BlocksOfTheSum) {
  std::vector<Tensor> in{vec({4}, {1, 2, 3, 4}), vec({4}, {10, 20, 30, 40})};
  auto r = run_collective(in, [](auto& x) { return dist::reduce_scatter(x); });
  expect_tensor(r[0], {2}, {11, 22});
  expect_tensor(r[1], {2}, {33, 44});
  r = run_collective(in, [](auto& x) { return dist::reduce_scatter(x, ReduceOp::kMean); });
  expect_tensor(r[0], {2}, {5.5, 11});
}

// ---- graphs ------------------------------------------------------------------------

TEST(CollectiveOps, OneNodeOnSeveralDevicesWithoutCopyNodes) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Output> xs;
  for (int k = 0; k < 3; ++k) {
    DeviceScope d(g, Device::cpu(k));
    xs.push_back(ops::placeholder(DType::F32, {4}, "x" + std::to_string(k)));
  }
  const int before = g.num_nodes();
  auto ys = dist::all_reduce(xs);
  EXPECT_EQ(g.num_nodes(), before + 1) << "no Copy nodes for a multi-device node";
  Node* n = ys[0].node;
  EXPECT_EQ(n->devices(), (std::vector<Device>{Device::cpu(0), Device::cpu(1), Device::cpu(2)}));
  EXPECT_EQ(n->attr<std::vector<std::string>>("devices"), (std::vector<std::string>{"cpu", "cpu:1", "cpu:2"}));
  EXPECT_NE(g.to_text().find("@cpu,cpu:1,cpu:2"), std::string::npos) << g.to_text();
  // Explicit devices: an input living elsewhere is copied to its participant.
  dist::CollectiveOptions o;
  o.devices = {Device::cpu(2), Device::cpu(1), Device::cpu(0)};
  auto zs = dist::all_reduce(xs, ReduceOp::kSum, o);
  EXPECT_EQ(zs[0].device(), Device::cpu(2));
  EXPECT_NE(g.find_node("x0/copy_to_cpu_2"), nullptr);
  // The JSON round trip keeps the participants.
  auto back = Graph::from_json(g.to_json());
  EXPECT_EQ(back->find_node(n->name())->devices(), n->devices());
  EXPECT_EQ(back->find_node(zs[0].node->name())->output_device(2), Device::cpu(0));
}

TEST(CollectiveOps, CollectivesBesideOrdinaryPerDeviceNodesInEveryMode) {
  // Per-device math before and after an allreduce, like a data-parallel step.
  const int n = 4;
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {n, 64}, "x");
  std::vector<Output> parts;
  for (int k = 0; k < n; ++k) {
    DeviceScope d(g, Device::cpu(k));
    parts.push_back(ops::tanh(ops::slice(x, {k, 0}, {1, 64})) * (k + 1.0));
  }
  auto summed = dist::all_reduce(parts);
  std::vector<Output> after;
  for (int k = 0; k < n; ++k) {
    DeviceScope d(g, Device::cpu(k));
    after.push_back(ops::exp(summed[k] * 0.1));
  }
  Output total = ops::add_n(after);
  std::mt19937_64 rng(3);
  Tensor in = random_tensor(DType::F32, {n, 64}, rng);
  Session par(g, cpus(n)), seq(g, cpus(n, true));
  Tensor a = par.run({total}, {{x, in}})[0];
  Tensor b = seq.run({total}, {{x, in}})[0];
  ASSERT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << "sequential and parallel differ";
  for (int rep = 0; rep < 50; ++rep) {
    Tensor c = par.run({total}, {{x, in}})[0];
    ASSERT_EQ(std::memcmp(a.raw_data(), c.raw_data(), a.nbytes()), 0) << "run " << rep;
  }
  // Every participant's copy is identical; the total is n times one of them.
  auto each = par.run(after, {{x, in}});
  for (int k = 1; k < n; ++k) EXPECT_EQ(std::memcmp(each[0].raw_data(), each[k].raw_data(), each[0].nbytes()), 0);
  std::string plan = par.plan_text({total}, {{x, in}});
  for (int k = 0; k < n; ++k)
    EXPECT_NE(plan.find(str_cat("AllReduce[", k, "]")), std::string::npos) << plan;
}

TEST(CollectiveOps, GraphOpsAreExactForEveryDeviceCountAndSize) {
  for (int n = 1; n <= 8; ++n) {
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{n + 1}, int64_t{1000003}}) {
      if (count == 1000003 && n % 3 != 2) continue;  // the big size on n = 2, 5, 8
      for (DType dt : {DType::F32, DType::I64}) {
        SCOPED_TRACE(str_cat("n=", n, " count=", count, " ", dtype_name(dt)));
        std::vector<Tensor> in;
        for (int k = 0; k < n; ++k) {
          Tensor t(dt, {count});
          visit_dtype(dt, "fill", [&](auto zero) {
            using T = decltype(zero);
            for (int64_t e = 0; e < count; ++e) t.data<T>()[e] = static_cast<T>((e * 7 + k * 3) % 512 - 256);
          });
          in.push_back(t);
        }
        auto r = run_collective(in, [](auto& x) { return dist::all_reduce(x); });
        for (int k = 0; k < n; ++k)
          for (int64_t e = 0; e < count; e += 1 + count / 97) {
            double want = 0;
            for (int j = 0; j < n; ++j) want += static_cast<double>((e * 7 + j * 3) % 512 - 256);
            ASSERT_EQ(r[k].element_as_double(e), want) << "participant " << k << " element " << e;
          }
      }
    }
  }
}

TEST(CollectiveOps, GradientOfALossThroughAnAllReduce) {
  // loss = sum_k sum(w_k * allreduce(x_k)_k): dloss/dx_j = sum_k w_k.
  const int n = 3;
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Output> xs, ws;
  for (int k = 0; k < n; ++k) {
    DeviceScope d(g, Device::cpu(k));
    xs.push_back(ops::placeholder(DType::F64, {2}, "x" + std::to_string(k)));
    ws.push_back(ops::constant(Tensor::from_vector<double>({2}, {k + 1.0, 10.0 * (k + 1)})));
  }
  auto ys = dist::all_reduce(xs);
  std::vector<Output> terms;
  for (int k = 0; k < n; ++k) {
    DeviceScope d(g, Device::cpu(k));
    terms.push_back(ops::sum(ys[k] * ws[k]));
  }
  Output loss = ops::add_n(terms);
  auto grads = gradients({loss}, xs);
  for (int k = 0; k < n; ++k) EXPECT_EQ(grads[k].device(), Device::cpu(k));
  FeedDict feeds;
  for (int k = 0; k < n; ++k) feeds.push_back({xs[k], Tensor::from_vector<double>({2}, {1.0 * k, 2.0})});
  Session s(g, cpus(n));
  auto r = s.run(grads, feeds);
  for (int k = 0; k < n; ++k) expect_tensor(r[k], {2}, {6, 60}, 0);
  // max has no gradient: a clear error, not a wrong value.
  auto zs = dist::all_reduce(xs, ReduceOp::kMax, {"", 0, {}, "maxed"});
  expect_error([&] { gradients({ops::add_n({ops::sum(zs[0]), ops::sum(zs[1]), ops::sum(zs[2])})}, xs); },
               {"maxed", "max", "no gradient"});
}

TEST(CollectiveOps, ALaneFailingWhileItsPeersWaitInsideTheCollective) {
  // cpu:2 fails 300 ms into the run, while cpu:0 and cpu:1 wait for it in
  // the ring: the run ends with cpu:2's error (not a timeout, not a hang).
  const int n = 3;
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2}, "x");
  std::vector<Output> xs;
  for (int k = 0; k < n; ++k) {
    DeviceScope d(g, Device::cpu(k));
    xs.push_back(k == 2 ? fail_op(ops::neg(x), 300) : ops::neg(x));
  }
  auto ys = dist::all_reduce(xs);
  SessionOptions o = cpus(n);
  o.timeout_seconds = 300;
  Session s(g, o);
  for (int rep = 0; rep < 3; ++rep) {
    auto start = std::chrono::steady_clock::now();
    expect_error([&] { s.run({ys[0], ys[1]}, {{x, Tensor::from_vector<float>({2}, {1, 2})}}); },
                 {"failing", "TestFail", "boom"});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60))
        << "the participants waiting in the ring were not released";
  }
  // The ring keeps no instance of the failed runs open for participants that came.
  auto ok = dist::all_reduce({xs[0] * 1.0, xs[1] * 1.0, ops::identity(x)}, ReduceOp::kSum,
                             {"", 0, {Device::cpu(0), Device::cpu(1), Device::cpu(2)}, "ok"});
  expect_tensor(s.run({ok[2]}, {{x, Tensor::from_vector<float>({2}, {1, 2})}})[0], {2}, {-1, -2});
}

TEST(CollectiveOps, ShapeInferenceErrors) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a, b, c, i32;
  {
    DeviceScope d(g, Device::cpu(0));
    a = ops::placeholder(DType::F32, {4, 2}, "a");
  }
  {
    DeviceScope d(g, Device::cpu(1));
    b = ops::placeholder(DType::F32, {3, 2}, "b");
    c = ops::placeholder(DType::F64, {4, 2}, "c");
    i32 = ops::placeholder(DType::I32, {3}, "i");
  }
  const int nodes = g.num_nodes();
  expect_error([&] { dist::all_reduce({a, b}); }, {"AllReduce", "same shape", "[4, 2]", "[3, 2]"});
  expect_error([&] { dist::all_reduce({a, c}); }, {"AllReduce", "same dtype"});
  // The errors name the tensors given, not the op's argument "x" (one per participant).
  expect_error([&] { dist::all_reduce({a, b}); },
               {"input 0 ('a:0') is [4, 2], input 1 ('b:0') is [3, 2]",
                "inputs: x[0] 'a:0': f32[4, 2], x[1] 'b:0': f32[3, 2]"});
  expect_error([&] { dist::all_gather({a, c}); },
               {"input 0 ('a:0') and input 1 ('c:0') must have the same dtype, got f32 and f64"});
  expect_error([&] { dist::all_reduce({a, a}); }, {"participants 0 and 1 are both on cpu"});
  expect_error([&] { dist::reduce_scatter({a, a * 1.0}, ReduceOp::kSum, {"", 3, {}, ""}); },
               {"ReduceScatter", "multiple of the group size 3"});
  expect_error([&] { dist::all_reduce({a}, ReduceOp::kSum, {"", 0, {Device::cpu(0), Device::cpu(1)}, ""}); },
               {"2 devices for 1 inputs"});
  expect_error([&] { dist::broadcast({a}, 3); }, {"root 3 is not a participant"});
  expect_error([&] { dist::all_gather({ops::scalar(1.0, DType::F32)}); }, {"rank >= 1"});
  expect_error([&] { g.add_node("AllReduce", {a}, {{"reduction", std::string("prod")}}); },
               {"unknown reduction 'prod'"});
  // Failed nodes leave nothing behind: only the inputs built for the calls stay
  // (a * 1.0: Const and Mul; the scalar given to all_gather).
  EXPECT_EQ(g.num_nodes(), nodes + 3);
  // A communicator of the wrong devices or size is caught when the node runs.
  auto ys = dist::all_reduce({a}, ReduceOp::kSum, {"mine", 0, {}, "with_mine"});
  Session s(g, cpus(2));
  expect_error([&] { s.run({ys[0]}, {{a, Tensor::zeros(DType::F32, {4, 2})}}); },
               {"with_mine", "no communicator named 'mine'"});
  s.set_resource<dist::Communicator>("mine", std::make_shared<dist::InProcessRing>(
                                                 std::vector<Device>{Device::cpu(1)}));
  expect_error([&] { s.run({ys[0]}, {{a, Tensor::zeros(DType::F32, {4, 2})}}); },
               {"ring(cpu:1) connects devices {cpu:1} but the node's participants are on {cpu}"});
  s.set_resource<dist::Communicator>("mine", std::make_shared<dist::InProcessRing>(
                                                 std::vector<Device>{Device::cpu(0)}));
  expect_tensor(s.run({ys[0]}, {{a, Tensor::full(DType::F32, {4, 2}, 2)}})[0], {4, 2},
                std::vector<double>(8, 2));
  (void)i32;
}


// ---- collectives served by several nodes (instance keys) -------------------------------------

// One partial allreduce node per device, meeting by instance key.
std::vector<Output> per_device_all_reduce(const std::vector<Output>& xs, const std::string& key,
                                          ReduceOp op = ReduceOp::kSum) {
  std::vector<Device> group;
  for (const Output& x : xs) group.push_back(x.device());
  std::vector<Output> out;
  for (const Output& x : xs) {
    dist::CollectiveOptions o;
    o.devices = {x.device()};
    o.group_devices = group;
    o.instance = key;
    out.push_back(dist::all_reduce({x}, op, o)[0]);
  }
  return out;
}

TEST(CollectiveOps, NodesWithOneInstanceKeyFormOneCollective) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Output> xs;
  for (int k = 0; k < 3; ++k) {
    DeviceScope d(g, Device::cpu(k));
    xs.push_back(ops::placeholder(DType::F64, {5}, "x" + std::to_string(k)));
  }
  auto ys = per_device_all_reduce(xs, "sum");
  auto ms = per_device_all_reduce(xs, "mean", ReduceOp::kMean);
  dist::check_collective_instances(g);
  FeedDict feeds;
  for (int k = 0; k < 3; ++k)
    feeds.push_back({xs[static_cast<size_t>(k)],
                     Tensor::from_vector<double>({5}, {1.0 * k, 2, 4, 8, 16.0 * (k + 1)})});
  Session s(g, cpus(3));
  for (int rep = 0; rep < 20; ++rep) {
    auto r = s.run({ys[0], ys[1], ys[2], ms[2]}, feeds);
    for (int k = 0; k < 3; ++k) expect_tensor(r[static_cast<size_t>(k)], {5}, {3, 6, 12, 24, 96});
    expect_tensor(r[3], {5}, {1, 2, 4, 8, 32});
  }
  // Fetching one member runs the others too (they would wait for each other otherwise).
  auto one = s.run({ys[1]}, feeds);
  expect_tensor(one[0], {5}, {3, 6, 12, 24, 96});
  // The gradient meets by its own key.
  auto grads = gradients({ops::add_n({ops::sum(ys[0]), ops::sum(ys[1] * 2.0), ops::sum(ys[2] * 3.0)})}, xs);
  auto gr = s.run(grads, feeds);
  for (int k = 0; k < 3; ++k) expect_tensor(gr[static_cast<size_t>(k)], {5}, {6, 6, 6, 6, 6});
  // Sequential sessions cannot run nodes that meet: a clear error, not a hang.
  Session seq(g, cpus(3, true));
  expect_error([&] { seq.run({ys[0], ys[1], ys[2]}, feeds); }, {"instance 'sum'", "sequential"});
}

TEST(CollectiveOps, BroadcastServedByOneNodePerDeviceHasAGradient) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Output> xs, ys;
  std::vector<Device> group = {Device::cpu(0), Device::cpu(1)};
  for (int k = 0; k < 2; ++k) {
    DeviceScope d(g, group[static_cast<size_t>(k)]);
    xs.push_back(ops::placeholder(DType::F64, {3}, "x" + std::to_string(k)));
    dist::CollectiveOptions o;
    o.devices = {group[static_cast<size_t>(k)]};
    o.group_devices = group;
    o.instance = "bcast";
    ys.push_back(dist::broadcast({xs.back()}, /*root=*/1, o)[0]);
  }
  auto grads = gradients({ops::add(ops::sum(ys[0] * 2.0), ops::sum(ys[1] * 5.0))}, xs);
  Session s(g, cpus(2));
  FeedDict feeds = {{xs[0], Tensor::from_vector<double>({3}, {1, 2, 3})},
                    {xs[1], Tensor::from_vector<double>({3}, {7, 8, 9})}};
  auto r = s.run({ys[0], ys[1], grads[0], grads[1]}, feeds);
  expect_tensor(r[0], {3}, {7, 8, 9});
  expect_tensor(r[1], {3}, {7, 8, 9});
  expect_tensor(r[2], {3}, {0, 0, 0});  // not the root
  expect_tensor(r[3], {3}, {7, 7, 7});  // the root: both outputs' gradients
}

TEST(CollectiveOps, MembersAreOrderedAsOneNode) {
  // Lane 0 builds A (member 0) before y; member 1's input is y copied to
  // cpu:1. Ordered node by node, lane 0 would run A (waiting for member 1)
  // before y, which member 1 waits for: the executor runs every member's
  // dependencies first.
  Graph g;
  DefaultGraphGuard guard(g);
  Output x0, y;
  {
    DeviceScope d(g, Device::cpu(0));
    x0 = ops::placeholder(DType::F64, {2}, "x0");
  }
  std::vector<Device> group = {Device::cpu(0), Device::cpu(1)};
  dist::CollectiveOptions o;
  o.group_devices = group;
  o.instance = "late";
  o.devices = {Device::cpu(0)};
  Output a = dist::all_reduce({x0}, ReduceOp::kSum, o)[0];
  {
    DeviceScope d(g, Device::cpu(0));
    y = ops::mul(x0, ops::scalar_like(3.0, x0), "y");
  }
  Output b;
  {
    DeviceScope d(g, Device::cpu(1));
    o.devices = {Device::cpu(1)};
    b = dist::all_reduce({ops::identity(y)}, ReduceOp::kSum, o)[0];
  }
  SessionOptions opt = cpus(2);
  opt.timeout_seconds = 20;
  Session s(g, opt);
  for (int rep = 0; rep < 50; ++rep) {
    auto r = s.run({a, b}, {{x0, Tensor::from_vector<double>({2}, {1, 5})}});
    expect_tensor(r[0], {2}, {4, 20});
    expect_tensor(r[1], {2}, {4, 20});
  }
  // A member depending on another member is a cycle, reported as such.
  {
    DeviceScope d(g, Device::cpu(1));
    o.devices = {Device::cpu(1)};
    o.instance = "cyclic";
    o.devices = {Device::cpu(0)};
    Output c0 = dist::all_reduce({x0}, ReduceOp::kSum, o)[0];
    o.devices = {Device::cpu(1)};
    Output c1 = dist::all_reduce({ops::identity(c0)}, ReduceOp::kSum, o)[0];
    expect_error([&] { s.run({c1}, {{x0, Tensor::from_vector<double>({2}, {1, 5})}}); },
                 {"cycle", "meet at run time"});
  }
}

TEST(CollectiveOps, IncompleteOrRepeatedInstancesAreNamed) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Output> xs;
  for (int k = 0; k < 3; ++k) {
    DeviceScope d(g, Device::cpu(k));
    xs.push_back(ops::placeholder(DType::F32, {2}, "x" + std::to_string(k)));
  }
  dist::CollectiveOptions o;
  o.group_devices = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};
  o.instance = "bn/moments";
  o.devices = {Device::cpu(0)};
  Output m0 = dist::all_reduce({xs[0]}, ReduceOp::kMean, o)[0];
  o.devices = {Device::cpu(2)};
  dist::all_reduce({xs[2]}, ReduceOp::kMean, o);
  expect_error([&] { dist::check_collective_instances(g); },
               {"collective instance 'bn/moments'", "none on cpu:1", "every tower"});
  // Running it is the same error at once, not a wait for the missing member.
  {
    SessionOptions opt = cpus(3);
    opt.timeout_seconds = 300;
    Session s(g, opt);
    FeedDict feeds;
    for (int k = 0; k < 3; ++k) feeds.push_back({xs[static_cast<size_t>(k)], Tensor::full(DType::F32, {2}, 1.0)});
    auto t0 = std::chrono::steady_clock::now();
    expect_error([&] { s.run({m0}, feeds); }, {"collective instance 'bn/moments'", "none on cpu:1"});
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  }
  o.devices = {Device::cpu(1)};
  dist::all_reduce({xs[1]}, ReduceOp::kMean, o);
  dist::check_collective_instances(g);  // complete now
  o.devices = {Device::cpu(1)};
  dist::all_reduce({xs[1]}, ReduceOp::kMean, o);
  expect_error([&] { dist::check_collective_instances(g); }, {"cpu:1 is served by 2 nodes"});
  // A participant outside the group, and a group without an instance key.
  o.instance = "other";
  o.group_devices = {Device::cpu(0), Device::cpu(1)};
  o.devices = {Device::cpu(2)};
  expect_error([&] { dist::all_reduce({xs[2]}, ReduceOp::kSum, o); },
               {"cpu:2 is not in group_devices"});
  o.instance = "";
  expect_error([&] { dist::all_reduce({xs[0]}, ReduceOp::kSum, o); }, {"needs an instance key"});
}

}  // namespace
}  // namespace spire::testing
