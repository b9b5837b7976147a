// State under concurrency: variables as locked resources (consistent
// snapshots, atomic updates, race-free copy-on-write) with several threads
// calling Session::run at once and lanes reading a variable while another
// lane updates it; fetched values never aliasing session state or the
// caller's fed tensors; the session's typed, keyed resources. These tests
// also run under ThreadSanitizer in CI.
#include <atomic>
#include <thread>

#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

constexpr int kThreads = 4;

// Every element of a consistent snapshot of `v` holds the same value.
bool all_equal(const Tensor& t) {
  const float* p = t.data<float>();
  for (int64_t i = 1; i < t.num_elements(); ++i)
    if (p[i] != p[0]) return false;
  return true;
}

TEST(VariableConcurrency, ThreadsAssigningAndReadingSeeConsistentSnapshots) {
  // Writers assign whole tensors of one repeated value or add 1 to every
  // element; readers fetch. Any torn read (part old, part new) breaks the
  // all-elements-equal invariant; a lost AssignAdd breaks the final count.
  Graph g;
  DefaultGraphGuard guard(g);
  const int64_t n = 4096;
  Output v = ops::variable({n}, DType::F32, "v");
  Output counter = ops::variable({n}, DType::F32, "counter");
  Output fill = ops::placeholder(DType::F32, {n}, "fill");
  Output assign = ops::assign(v, fill);
  Output add_v = ops::assign_add(v, ops::scalar(1.0, DType::F32));
  Output add_counter = ops::assign_add(counter, ops::scalar(1.0, DType::F32));
  Output init_counter = ops::assign(counter, ops::constant(Tensor::zeros(DType::F32, {n})));
  Output doubled = v * 2.0;  // a reader that computes from the snapshot
  SessionOptions o;
  o.num_threads = 2;
  Session s(g, o);
  s.run({}, {{fill, Tensor::zeros(DType::F32, {n})}}, {assign.node});
  s.run({}, {}, {init_counter.node});

  constexpr int kRuns = 1500;
  std::atomic<int> torn{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRuns; ++r) {
        switch ((r + t) % 4) {
          case 0:
            s.run({}, {{fill, Tensor::full(DType::F32, {n}, r % 100)}}, {assign.node});
            break;
          case 1:
            s.run({}, {}, {add_v.node});
            break;
          case 2: {
            auto vals = s.run({v, doubled});
            if (!all_equal(vals[0]) || !all_equal(vals[1])) ++torn;
            break;
          }
          default:
            break;
        }
        s.run({}, {}, {add_counter.node});
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(torn.load(), 0) << "a read saw a partly updated variable";
  Tensor c = s.run({counter})[0];
  EXPECT_TRUE(all_equal(c));
  EXPECT_EQ(c.data<float>()[0], float(kThreads * kRuns)) << "updates were lost";
  EXPECT_TRUE(all_equal(s.run({v})[0]));
}

TEST(VariableConcurrency, LanesReadAVariableWhileAnotherLaneUpdatesIt) {
  // v lives on cpu:0 and is incremented there; cpu:1 and cpu:2 read it
  // through Copy nodes in the same runs. Every read is a consistent snapshot.
  Graph g;
  DefaultGraphGuard guard(g);
  const int64_t n = 2048;
  Output v = ops::variable({n}, DType::F32, "v");
  Output init = ops::assign(v, ops::constant(Tensor::zeros(DType::F32, {n})));
  std::vector<Output> fetches;
  std::vector<Node*> targets;
  {
    DeviceScope d(g, Device::cpu(0));
    targets.push_back(ops::assign_add(v, ops::scalar(1.0, DType::F32)).node);
  }
  for (int d = 1; d <= 2; ++d) {
    DeviceScope ds(g, Device::cpu(d));
    fetches.push_back(ops::identity(v) + 0.0);
  }
  SessionOptions o;
  o.num_cpu_devices = 3;
  o.num_threads = 3;
  Session s(g, o);
  s.run({}, {}, {init.node});
  std::atomic<int> torn{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      for (int r = 0; r < 500; ++r) {
        auto vals = s.run(fetches, {}, targets);
        for (const auto& val : vals)
          if (!all_equal(val)) ++torn;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(s.run({v})[0].data<float>()[0], 1000.0f);
}

TEST(VariableConcurrency, FusedUpdatesOfSharedVariablesFromSeveralThreads) {
  // Two optimizer steps over overlapping variable sets (b in both) from
  // several threads: multi-variable locks must not deadlock, and no update
  // may be lost (plain SGD with a constant gradient of 1 and lr 1).
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::variable({64}, DType::F32, "a");
  Output b = ops::variable({64}, DType::F32, "b");
  Output c = ops::variable({64}, DType::F32, "c");
  std::vector<Node*> inits;
  for (const auto& var : {a, b, c})
    inits.push_back(ops::assign(var, ops::constant(Tensor::zeros(DType::F32, {64}))).node);
  Output one = ops::constant(Tensor::full(DType::F32, {64}, 1.0));
  Output lr = ops::scalar(1.0, DType::F32);
  Node* step_ab = ops::fused_apply_gradient_descent({a, b}, {one, one}, lr);
  Node* step_cb = ops::fused_apply_gradient_descent({c, b}, {one, one}, lr);
  Session s(g);
  s.run({}, {}, inits);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 1000; ++r) s.run({}, {}, {(r + t) % 2 ? step_ab : step_cb});
    });
  for (auto& th : threads) th.join();
  auto vals = s.run({a, b, c});
  EXPECT_EQ(vals[0].data<float>()[0] + vals[2].data<float>()[0], -4000.0f);
  EXPECT_EQ(vals[1].data<float>()[0], -4000.0f);
  for (const auto& val : vals) EXPECT_TRUE(all_equal(val));
}

TEST(SessionState, FetchedValuesNeverAliasSessionState) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({3}, DType::F32, "v");
  Output k = ops::constant(Tensor::from_vector<float>({3}, {1, 2, 3}), "k");
  Output init = ops::assign(v, k);
  Output k2 = ops::identity(k);
  Session s(g);
  s.run({}, {}, {init.node});
  // Writing into fetched values changes nothing in the session or graph.
  auto r = s.run({v, k, k2, k});
  for (auto& t : r) t.data<float>()[0] = 99;
  EXPECT_EQ(s.run({v})[0].to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(s.run({k})[0].to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_FALSE(r[1].shares_buffer_with(r[3])) << "two fetches of one value are two copies";
  Tensor direct = s.variable_value(v.node);
  direct.data<float>()[1] = 99;
  EXPECT_EQ(s.run({v})[0].to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(SessionState, AssignFromAFedTensorNeverKeepsTheCallersBuffer) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({3}, DType::F32, "v");
  Output x = ops::placeholder(DType::F32, {3}, "x");
  Output assign = ops::assign(v, x);
  Output fetched_x = ops::identity(x);
  Session s(g);
  Tensor mine = Tensor::from_vector<float>({3}, {4, 5, 6});
  auto r = s.run({fetched_x}, {{x, mine}}, {assign.node});
  EXPECT_FALSE(r[0].shares_buffer_with(mine));
  mine.data<float>()[0] = -1;  // the caller reuses its buffer
  EXPECT_EQ(s.run({v})[0].to_vector<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(mine.buffer_use_count(), 1) << "the session kept a reference to the caller's tensor";
  // set_variable_value keeps its own copy too.
  s.set_variable_value(v.node, mine);
  mine.data<float>()[1] = -2;
  EXPECT_EQ(s.run({v})[0].to_vector<float>(), (std::vector<float>{-1, 5, 6}));
}

struct Counter {
  std::atomic<int> hits{0};
};

TEST(SessionState, TypedKeyedResources) {
  Graph g;
  Session s(g);
  EXPECT_EQ(s.resource<Counter>("a"), nullptr);
  auto made = s.resource<Counter>("a", [] { return std::make_shared<Counter>(); });
  ASSERT_NE(made, nullptr);
  EXPECT_EQ(s.resource<Counter>("a"), made) << "one object per (type, key)";
  EXPECT_EQ(s.resource<int>("a"), nullptr) << "types are separate namespaces";
  EXPECT_EQ(s.resource<Counter>("b"), nullptr);
  auto other = std::make_shared<Counter>();
  s.set_resource<Counter>("a", other);
  EXPECT_EQ(s.resource<Counter>("a"), other);
  // Concurrent first use creates one object.
  std::vector<std::shared_ptr<Counter>> seen(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      seen[t] = s.resource<Counter>("c", [] { return std::make_shared<Counter>(); });
      ++seen[t]->hits;
    });
  for (auto& th : threads) th.join();
  for (const auto& p : seen) EXPECT_EQ(p, seen[0]);
  EXPECT_EQ(seen[0]->hits.load(), 8);
}

}  // namespace
}  // namespace spire::testing
