// Executor tests: logical CPU devices (parsing, allocators, placement, Copy
// nodes between them), the plan's lanes, lanes really running at the same
// time, sequential mode giving bit-identical results, errors in one lane
// stopping the others (no hang, one error naming the node), timeouts on
// cross-lane waits, and no threads left behind.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "tests/support/op_test_util.h"
#include "tests/support/test_ops.h"

namespace spire::testing {
namespace {

// ---- devices -----------------------------------------------------------------

TEST(CpuDevices, ParsePrintAndCompare) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu(0));
  EXPECT_EQ(Device::parse("cpu:0"), Device::cpu());
  EXPECT_EQ(Device::parse("cpu:3"), Device::cpu(3));
  EXPECT_EQ(Device::parse("/CPU:2"), Device::cpu(2));
  EXPECT_EQ(Device::parse("/device:CPU:5"), Device::cpu(5));
  EXPECT_EQ(Device::parse("/device:GPU:1"), Device::cuda(1));
  EXPECT_EQ(Device::cpu(0).to_string(), "cpu");
  EXPECT_EQ(Device::cpu(7).to_string(), "cpu:7");
  EXPECT_EQ(Device::parse(Device::cpu(12).to_string()), Device::cpu(12));
  EXPECT_NE(Device::cpu(1), Device::cpu(2));
  EXPECT_LT(Device::cpu(1), Device::cpu(2));
  EXPECT_LT(Device::cpu(9), Device::cuda(0));
  expect_error([] { Device::parse("cpu:x"); }, {"bad device 'cpu:x'"});
  expect_error([] { Device::parse("cpu:"); }, {"bad device"});
  expect_error([] { Device::parse("cpu:-1"); }, {"bad device"});
  expect_error([] { Device::parse("tpu:0"); }, {"bad device 'tpu:0'"});
  expect_error([] { Device::parse("cpu:99999999"); }, {"bad device"});
}

TEST(CpuDevices, EachHasItsOwnAllocatorAndStatistics) {
  Allocator* a0 = get_allocator(Device::cpu(0));
  Allocator* a1 = get_allocator(Device::cpu(1));
  Allocator* a2 = get_allocator(Device::cpu(2));
  EXPECT_NE(a0, a1);
  EXPECT_NE(a1, a2);
  EXPECT_EQ(a1, cpu_allocator(1));
  EXPECT_EQ(a1->device(), Device::cpu(1));
  EXPECT_STREQ(a1->name(), "cpu:1");
  const MemoryStats before1 = a1->memory_stats(), before2 = a2->memory_stats();
  {
    Tensor t(DType::F32, {1000}, Device::cpu(1));
    EXPECT_EQ(t.device(), Device::cpu(1));
    const MemoryStats s1 = a1->memory_stats();
    EXPECT_EQ(s1.in_use, before1.in_use + 4032);  // 4000 bytes rounded to 64
    EXPECT_EQ(s1.num_allocs, before1.num_allocs + 1);
    EXPECT_GE(s1.peak_in_use, s1.in_use);
    EXPECT_EQ(a2->memory_stats().in_use, before2.in_use) << "cpu:2 must not see cpu:1's tensor";
  }
  EXPECT_EQ(a1->memory_stats().in_use, before1.in_use);
  expect_error([] { cpu_allocator(kMaxCpuDevices); }, {"no CPU device cpu:256"});
}

TEST(CpuDevices, TensorsMoveBetweenCpuDevicesByCopy) {
  Tensor a = Tensor::from_vector<float>({3}, {1, 2, 3});
  Tensor b = a.to(Device::cpu(1));
  EXPECT_EQ(b.device(), Device::cpu(1));
  EXPECT_FALSE(b.shares_buffer_with(a));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor c = b.to(Device::cpu());
  EXPECT_EQ(c.device(), Device::cpu());
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(CpuDevices, GraphOnCpu1RunsThereAndCopiesAreRealCopies) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {4}, "x");
  Output y;
  {
    DeviceScope d(g, Device::cpu(1));
    y = ops::exp(x) * 2.0;
  }
  EXPECT_EQ(y.device(), Device::cpu(1));
  // The read of x (on cpu:0) from cpu:1 goes through a Copy node.
  Node* copy = g.find_node("x/copy_to_cpu_1");
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->device(), Device::cpu(1));
  EXPECT_NE(g.to_text().find("@cpu:1"), std::string::npos);
  // JSON keeps the devices.
  auto back = Graph::from_json(g.to_json());
  EXPECT_EQ(back->find_node("x/copy_to_cpu_1")->device(), Device::cpu(1));
  EXPECT_EQ(back->find_node(y.node->name())->device(), Device::cpu(1));

  Session s(g, unfused(cpus(2)));
  Tensor in = Tensor::from_vector<float>({4}, {0, 1, 2, 3});
  s.run({y}, {{x, in}});  // the first run copies the constant 2.0 to cpu:1 once
  const MemoryStats before = cpu_allocator(1)->memory_stats();
  Tensor out = s.run({y}, {{x, in}})[0];
  EXPECT_EQ(out.device(), Device::cpu());  // fetches come back to cpu:0
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(out.data<float>()[i], 2 * std::exp(float(i)));
  EXPECT_GE(cpu_allocator(1)->memory_stats().num_allocs, before.num_allocs + 2)
      << "cpu:1's copy of x and its results are allocated on cpu:1";
  EXPECT_EQ(cpu_allocator(1)->memory_stats().in_use, before.in_use) << "everything freed";
  // A session with one CPU device cannot run it.
  Session one(g);
  expect_error([&] { one.run({y}, {{x, in}}); },
               {"placed on cpu:1", "1 CPU device", "num_cpu_devices"});
}

TEST(CpuDevices, VariablesOnCpu1AndGradients) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output w, init, loss;
  {
    DeviceScope d(g, Device::cpu(1));
    w = ops::variable({3}, DType::F64, "w");
    init = ops::assign(w, ops::constant(Tensor::from_vector<double>({3}, {1, 2, 3})));
  }
  loss = ops::sum(ops::square(w));  // on cpu:0, reads w through a Copy
  Output gw = gradient(loss, w);
  Output step = ops::assign_sub(w, gw * 0.25);
  EXPECT_EQ(step.device(), Device::cpu(1)) << "the update runs where the variable lives";
  Session s(g, cpus(2));
  s.run({}, {}, {init.node});
  s.run({}, {}, {step.node});
  Tensor v = s.variable_value(w.node);
  EXPECT_EQ(v.device(), Device::cpu(1));
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{0.5, 1, 1.5}));
}

// ---- lanes -------------------------------------------------------------------

// Two independent chains on cpu:0 and cpu:1 joined on cpu:0.
struct TwoTowers {
  Graph g;
  Output x, a, b, sum;
  TwoTowers() {
    DefaultGraphGuard guard(g);
    x = ops::placeholder(DType::F32, {8}, "x");
    {
      DeviceScope d(g, Device::cpu(0));
      NameScope ns(g, "tower0");
      a = ops::tanh(ops::exp(x * 0.5) - 1.0);
    }
    {
      DeviceScope d(g, Device::cpu(1));
      NameScope ns(g, "tower1");
      b = ops::tanh(ops::exp(x * 0.25) - 1.0);
    }
    sum = a + b;
  }
};

TEST(Executor, PlansOneLanePerDeviceInTopologicalOrder) {
  TwoTowers t;
  Session s(t.g, cpus(2));
  std::string text = s.plan_text({t.sum}, {{t.x, Tensor::zeros(DType::F32, {8})}});
  std::istringstream lines(text);
  std::string l0, l1, extra;
  std::getline(lines, l0);
  std::getline(lines, l1);
  EXPECT_FALSE(std::getline(lines, extra)) << text;
  EXPECT_EQ(l0.rfind("cpu: ", 0), 0u) << text;
  EXPECT_EQ(l1.rfind("cpu:1: ", 0), 0u) << text;
  EXPECT_NE(l0.find("tower0/"), std::string::npos);
  EXPECT_EQ(l0.find("tower1/Exp"), std::string::npos) << "tower1's math runs on cpu:1 only";
  EXPECT_NE(l0.find("copy_to_cpu"), std::string::npos) << "cpu:0 reads tower1's result through a Copy";
  EXPECT_NE(l1.find("tower1/"), std::string::npos);
  EXPECT_NE(l1.find("x/copy_to_cpu_1"), std::string::npos);
  // Sequential mode: one lane.
  Session seq(t.g, cpus(2, true));
  std::string st = seq.plan_text({t.sum}, {{t.x, Tensor::zeros(DType::F32, {8})}});
  EXPECT_EQ(std::count(st.begin(), st.end(), '\n'), 1) << st;
}

TEST(Executor, EachLaneRunsItsOwnWorkBeforeWorkThatWaitsOnAnotherLane) {
  // c (cpu:1) = copy of tower 0's result + tower 1's result. Depth first,
  // cpu:1 would copy tower 0's result (waiting for all of tower 0) before
  // starting tower 1; the plan interleaves the devices, so cpu:1 computes
  // tower 1 first.
  Graph g;
  DefaultGraphGuard guard(g);
  Output x0, x1, b0, b1;
  {
    DeviceScope d(g, Device::cpu(0));
    x0 = ops::placeholder(DType::F32, {4}, "x0");
    b0 = ops::exp(ops::neg(x0, "a0"), "b0");
  }
  Output c;
  {
    DeviceScope d(g, Device::cpu(1));
    x1 = ops::placeholder(DType::F32, {4}, "x1");
    Output early = ops::identity(b0, "uses_b0");  // made before tower 1: first in depth-first order
    b1 = ops::exp(ops::neg(x1, "a1"), "b1");
    c = ops::add(early, b1, "c");
  }
  Session s(g, unfused(cpus(2)));
  FeedDict feeds = {{x0, Tensor::full(DType::F32, {4}, 1.0)}, {x1, Tensor::full(DType::F32, {4}, 2.0)}};
  std::string text = s.plan_text({c}, feeds);
  const size_t lane1 = text.find("cpu:1:");
  ASSERT_NE(lane1, std::string::npos) << text;
  const std::string l1 = text.substr(lane1);
  EXPECT_LT(l1.find("a1"), l1.find("copy_to_cpu_1")) << text;
  EXPECT_LT(l1.find("b1"), l1.find("uses_b0")) << text;
  expect_tensor(s.run({c}, feeds)[0], {4}, std::vector<double>(4, std::exp(-1.0) + std::exp(-2.0)));
  // One device: the depth-first order itself (inputs right before their consumer).
  Graph h;
  DefaultGraphGuard hg(h);
  Output y = ops::placeholder(DType::F32, {2}, "y");
  Output p = ops::neg(y, "p");
  Output q = ops::exp(y, "q");
  Output r = ops::add(ops::neg(p, "pp"), ops::exp(q, "qq"), "r");
  Session one(h, unfused(cpus(1)));
  EXPECT_EQ(one.plan_text({r}, {{y, Tensor::zeros(DType::F32, {2})}}), "cpu: p, pp, q, qq, r\n");
}

TEST(Executor, LanesOfDifferentDevicesRunAtTheSameTime) {
  // Each lane has a rendezvous node that waits for the other: this run only
  // completes when the two lanes run concurrently.
  for (int devices : {2, 4}) {
    Graph g;
    DefaultGraphGuard guard(g);
    Output x = ops::placeholder(DType::F32, {2}, "x");
    std::vector<Output> outs;
    for (int d = 0; d < devices; ++d) {
      DeviceScope ds(g, Device::cpu(d));
      outs.push_back(rendezvous(ops::neg(x), devices));
    }
    Output total = ops::add_n(outs);
    Session s(g, cpus(devices));
    for (int rep = 0; rep < 20; ++rep) {
      Tensor r = s.run({total}, {{x, Tensor::from_vector<float>({2}, {1, 2})}})[0];
      EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{-1.f * devices, -2.f * devices}));
    }
  }
}

TEST(Executor, SequentialModeGivesBitIdenticalResults) {
  // Towers with reductions and matmuls on 3 devices, combined on cpu:0.
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {16, 32}, "x");
  std::mt19937_64 wrng(5);
  Output w = ops::constant(random_tensor(DType::F32, {32, 24}, wrng));
  std::vector<Output> parts;
  for (int d = 0; d < 3; ++d) {
    DeviceScope ds(g, Device::cpu(d));
    Output h = ops::tanh(ops::matmul(x * (0.5 + d), w));
    parts.push_back(ops::mean(ops::softmax(h), {1}, true));
  }
  Output y = ops::concat(parts, 1);
  Output gx = gradient(ops::sum(y * y), x);
  std::mt19937_64 rng(11);
  Tensor in = random_tensor(DType::F32, {16, 32}, rng);
  Session par(g, cpus(3)), seq(g, cpus(3, true));
  auto a = par.run({y, gx}, {{x, in}});
  auto b = seq.run({y, gx}, {{x, in}});
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ(a[k].nbytes(), b[k].nbytes());
    EXPECT_EQ(std::memcmp(a[k].raw_data(), b[k].raw_data(), a[k].nbytes()), 0) << "output " << k;
  }
  // And run to run.
  for (int rep = 0; rep < 10; ++rep) {
    auto c = par.run({y, gx}, {{x, in}});
    EXPECT_EQ(std::memcmp(a[1].raw_data(), c[1].raw_data(), a[1].nbytes()), 0);
  }
}

TEST(Executor, AnErrorInOneLaneStopsTheOthersAndIsReportedOnce) {
  // cpu:1 fails; cpu:0 waits for a value cpu:1 would have produced next.
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2}, "x");
  Output bad;
  {
    DeviceScope d(g, Device::cpu(1));
    bad = ops::exp(fail_op(ops::neg(x), 50));
  }
  Output y = bad + ops::neg(x);  // on cpu:0: waits for cpu:1
  SessionOptions o = cpus(2);
  o.timeout_seconds = 120;
  Session s(g, o);
  auto start = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 5; ++rep)
    expect_error([&] { s.run({y}, {{x, Tensor::zeros(DType::F32, {2})}}); },
                 {"failing", "TestFail", "boom"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60))
      << "the waiting lane was not cancelled";
  // The session stays usable.
  Output ok = ops::neg(x);
  expect_tensor(s.run({ok}, {{x, Tensor::from_vector<float>({2}, {1, 2})}})[0], {2}, {-1, -2});
}

TEST(Executor, ALaneWaitingAtARendezvousIsNotLeftBehind) {
  // cpu:0 fails while cpu:1 sits in a kernel waiting for cpu:0's rendezvous
  // node, which never runs; cpu:1's kernel gives up after its own timeout,
  // and the run reports cpu:0's error, not the rendezvous timeout.
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2}, "x");
  Output a, b;
  {
    DeviceScope d(g, Device::cpu(0));
    a = rendezvous(fail_op(x), 2, "never");
  }
  {
    DeviceScope d(g, Device::cpu(1));
    b = ops::neg(x) * 3.0;
  }
  Session s(g, cpus(2));
  expect_error([&] { s.run({a, b}, {{x, Tensor::zeros(DType::F32, {2})}}); }, {"boom"});
}

TEST(Executor, ANodeOnALaneOfItsOwnOverlapsTheDevicesOtherSteps) {
  // Two rendezvous nodes on cpu:0 that must run at the same time (as a
  // collective waiting for another process while the backward pass goes
  // on): on one lane they cannot; the one marked own_lane runs on a second
  // lane of cpu:0 and both complete. No timing is involved: the rendezvous
  // waits for its partner.
  for (int rep = 0; rep < 20; ++rep) {
    Graph g;
    DefaultGraphGuard guard(g);
    Output x = ops::placeholder(DType::F32, {2}, "x");
    Output a = rendezvous(x * 2.0, 2, "overlap", /*own_lane=*/true);
    Output b = rendezvous(ops::neg(x), 2, "overlap");
    Output y = a + b;
    SessionOptions o;
    o.timeout_seconds = 30;
    Session s(g, o);
    Tensor out = s.run({y}, {{x, Tensor::from_vector<float>({2}, {1.0f, 2.0f})}})[0];
    EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
    const std::string plan = s.plan_text({y}, {{x, Tensor::zeros(DType::F32, {2})}});
    EXPECT_EQ(std::count(plan.begin(), plan.end(), '\n'), 2) << plan;  // two lanes of cpu:0
  }
}

TEST(Executor, CrossLaneWaitsTimeOutWithAClearError) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2}, "x");
  Output slow;
  {
    DeviceScope d(g, Device::cpu(1));
    slow = sleep_op(x, 1500);
  }
  Output y = slow + 1.0;  // cpu:0 waits for cpu:1's sleepy node
  SessionOptions o = cpus(2);
  o.timeout_seconds = 0.1;
  Session s(g, o);
  expect_error([&] { s.run({y}, {{x, Tensor::zeros(DType::F32, {2})}}); },
               {"timed out after 0.1 s waiting for node 'sleepy' (op TestSleep) on cpu:1",
                "on cpu:", "timeout_seconds"});
}

TEST(Executor, ManyRunsLeaveNoThreadBehind) {
  const int64_t threads_before = os_thread_count();
  {
    TwoTowers t;
    Session s(t.g, cpus(2));
    Tensor in = Tensor::from_vector<float>({8}, {0, 1, 2, 3, 4, 5, 6, 7});
    Tensor first = s.run({t.sum}, {{t.x, in}})[0];
    for (int rep = 0; rep < 300; ++rep) {
      Tensor r = s.run({t.sum}, {{t.x, in}})[0];
      ASSERT_EQ(std::memcmp(r.raw_data(), first.raw_data(), r.nbytes()), 0);
    }
    // cpu:0's lane runs on the caller; cpu:1's on one reused worker (plus
    // cpu:1's kernel pool, which has no workers with one thread).
    EXPECT_EQ(s.lane_thread_count(), 1);
    EXPECT_EQ(os_thread_count(), threads_before + 1);
  }
  EXPECT_EQ(os_thread_count(), threads_before) << "the session left threads behind";
}

TEST(Executor, SeveralThreadsRunOneSessionAtOnce) {
  TwoTowers t;
  Session s(t.g, cpus(2));
  Tensor in = Tensor::from_vector<float>({8}, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor expected = s.run({t.sum}, {{t.x, in}})[0];
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th)
    threads.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep) {
        Tensor r = s.run({t.sum}, {{t.x, in}})[0];
        if (std::memcmp(r.raw_data(), expected.raw_data(), r.nbytes()) != 0) ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_LE(s.lane_thread_count(), 4) << "lane workers are reused across runs";
}

TEST(Executor, AReadOfAVariableOnAnotherDeviceWaitsForTheReadersControlInputs) {
  // The Copy node that reads v for cpu:1 must wait for the reader's control
  // inputs (given at creation or added later), in every mode and every run.
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({}, DType::F32, "v");
  Output init = ops::assign(v, ops::scalar(0, DType::F32));
  Output inc = ops::assign_add(v, ops::scalar(1, DType::F32));
  Output inc2 = ops::assign_add(v, ops::scalar(10, DType::F32));
  Output y, y2;
  {
    DeviceScope d(g, Device::cpu(1));
    y = g.add_node("Identity", {v}, {}, "y", {inc.node})->output(0);
    y2 = ops::identity(v, "y2");
  }
  y2.node->add_control_input(inc2.node);
  for (bool sequential : {false, true}) {
    Session s(g, cpus(2, sequential));
    s.run({}, {}, {init.node});
    for (int rep = 1; rep <= 300; ++rep) {
      ASSERT_EQ(s.run({y})[0].item<float>(), 11.0f * (rep - 1) + 1) << (sequential ? "sequential" : "lanes");
      ASSERT_EQ(s.run({y2})[0].item<float>(), 11.0f * rep) << (sequential ? "sequential" : "lanes");
    }
  }
}

TEST(Executor, AControlInputWhoseOutputsAreFedIsMet) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output p = ops::placeholder(DType::F32, {}, "p");
  Output c = ops::scalar(3, DType::F32);
  Output y = g.add_node("Identity", {c}, {}, "y", {p.node})->output(0);
  Session s(g);
  expect_error([&] { s.run({y}); }, {"placeholder 'p'", "must be fed"});
  EXPECT_EQ(s.run({y}, {{p, Tensor::scalar<float>(1)}})[0].item<float>(), 3.0f);
}

TEST(Executor, ATimeoutBelowAMillisecondIsStillATimeout) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2}, "x");
  Output slow;
  {
    DeviceScope d(g, Device::cpu(1));
    slow = sleep_op(x, 300);
  }
  Output y = slow + 1.0;
  SessionOptions o = cpus(2);
  o.timeout_seconds = 1e-5;  // rounds up to 1 ms, never to "no limit"
  Session s(g, o);
  expect_error([&] { s.run({y}, {{x, Tensor::zeros(DType::F32, {2})}}); }, {"timed out", "sleepy"});
}

TEST(Executor, ThreadsAreSplitAmongCpuDevices) {
  Graph g;
  SessionOptions o;
  o.num_cpu_devices = 2;
  o.num_threads = 5;
  Session s(g, o);
  EXPECT_EQ(s.thread_pool(0).num_threads(), 3);
  EXPECT_EQ(s.thread_pool(1).num_threads(), 2);
  o.cpu_device_threads = {1, 4};
  Session t(g, o);
  EXPECT_EQ(t.thread_pool(1).num_threads(), 4);
  o.cpu_device_threads = {1};
  expect_error([&] { Session bad(g, o); }, {"cpu_device_threads has 1 entries for 2 CPU devices"});
  o.cpu_device_threads = {};
  o.num_cpu_devices = 0;
  expect_error([&] { Session bad(g, o); }, {"num_cpu_devices must be in [1, 256], got 0"});
  expect_error([&] { s.thread_pool(2); }, {"no CPU device cpu:2"});
}

}  // namespace
}  // namespace spire::testing
