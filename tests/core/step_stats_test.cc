// Traced runs (core/step_stats.h): every executed step appears once, on its lane and device,
// in the lane's plan order, without overlaps; a step waiting on another lane starts after its
// producer ended; hooks that ask for a trace get it, others see it only then; kernels add
// their own events through KernelContext::trace_event.
#include <map>
#include <set>
#include <sstream>

#include "tests/support/op_test_util.h"
#include "tests/support/test_ops.h"

namespace spire::testing {
namespace {

// Two chains, on cpu:0 and cpu:1, joined on cpu:0.
struct TwoChains {
  Graph g;
  Output x, a, b, sum;
  TwoChains() {
    DefaultGraphGuard guard(g);
    x = ops::placeholder(DType::F32, {64}, "x");
    {
      DeviceScope d(g, Device::cpu(0));
      a = ops::tanh(ops::exp(x * 0.5, "a_exp"), "a");
    }
    {
      DeviceScope d(g, Device::cpu(1));
      b = ops::tanh(ops::exp(x * 0.25, "b_exp"), "b");
    }
    sum = ops::add(a, b, "sum");
  }
  FeedDict feeds() const { return {{x, Tensor::full(DType::F32, {64}, 0.5)}}; }
};

// "cpu: p, q\ncpu:1: r\n" -> {{"cpu", {"p", "q"}}, {"cpu:1", {"r"}}} in lane order.
std::vector<std::pair<std::string, std::vector<std::string>>> parse_plan(const std::string& text) {
  std::vector<std::pair<std::string, std::vector<std::string>>> lanes;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(": ");
    std::vector<std::string> steps;
    std::istringstream items(line.substr(colon + 2));
    std::string item;
    while (std::getline(items, item, ',')) {
      if (!item.empty() && item[0] == ' ') item.erase(0, 1);
      steps.push_back(item);
    }
    lanes.emplace_back(line.substr(0, colon), steps);
  }
  return lanes;
}

TEST(StepStats, EveryStepOnceOnItsLaneInPlanOrderWithoutOverlap) {
  TwoChains t;
  Session s(t.g, unfused(cpus(2)));
  const auto plan = parse_plan(s.plan_text({t.sum}, t.feeds()));
  ASSERT_EQ(plan.size(), 2u);
  for (int rep = 0; rep < 20; ++rep) {
    StepStats st;
    Tensor r = s.run({t.sum}, t.feeds(), {}, &st)[0];
    EXPECT_NEAR(r.to_vector<float>()[0], std::tanh(std::exp(0.25f)) + std::tanh(std::exp(0.125f)),
                1e-6);
    EXPECT_GT(st.run_id, 0u);
    EXPECT_GT(st.start_unix_us, 1600000000LL * 1000000);
    ASSERT_EQ(st.lane_devices, (std::vector<std::string>{"cpu", "cpu:1"}));
    std::map<int, std::vector<const TraceEvent*>> per_lane;
    for (const TraceEvent& e : st.events) per_lane[e.lane].push_back(&e);
    ASSERT_EQ(per_lane.size(), 2u);
    for (int lane = 0; lane < 2; ++lane) {
      const auto& events = per_lane[lane];
      const auto& want = plan[static_cast<size_t>(lane)].second;
      ASSERT_EQ(events.size(), want.size()) << "lane " << lane;
      for (size_t i = 0; i < events.size(); ++i) {
        EXPECT_EQ(events[i]->name, want[i]) << "lane " << lane << " step " << i;
        EXPECT_EQ(events[i]->device, plan[static_cast<size_t>(lane)].first);
        EXPECT_FALSE(events[i]->category.empty());
        EXPECT_LE(events[i]->start_ns, events[i]->end_ns);
        EXPECT_GE(events[i]->start_ns, 0);
        if (i > 0) EXPECT_LE(events[i - 1]->end_ns, events[i]->start_ns) << events[i]->name;
      }
    }
    // The join on cpu:0 reads b through a Copy that waits for cpu:1's "b".
    const TraceEvent *b = nullptr, *join = nullptr;
    for (const TraceEvent& e : st.events) {
      if (e.name == "b") b = &e;
      if (e.name == "sum") join = &e;
    }
    ASSERT_TRUE(b && join);
    EXPECT_EQ(b->category, "Tanh");
    EXPECT_EQ(join->category, "Add");
    EXPECT_LE(b->end_ns, join->start_ns);
  }
  // An untraced run of the same plan still works, and sequential mode traces one lane.
  EXPECT_EQ(s.run({t.sum}, t.feeds()).size(), 1u);
  Session seq(t.g, cpus(2, true));
  StepStats st;
  seq.run({t.sum}, t.feeds(), {}, &st);
  ASSERT_EQ(st.lane_devices.size(), 1u);
  std::set<std::string> devices;
  for (const TraceEvent& e : st.events) {
    EXPECT_EQ(e.lane, 0);
    devices.insert(e.device);
  }
  EXPECT_EQ(devices, (std::set<std::string>{"cpu", "cpu:1"})) << "each step keeps its device";
  EXPECT_EQ(st.events.size(), parse_plan(seq.plan_text({t.sum}, t.feeds()))[0].second.size());
}

class TracingHook : public SessionRunHook {
 public:
  explicit TracingHook(bool ask) : ask_(ask) {}
  SessionRunArgs before_run(SessionRunContext&) override {
    SessionRunArgs a;
    a.trace = ask_;
    return a;
  }
  void after_run(SessionRunContext&, const SessionRunValues& v) override { seen.push_back(v.step_stats); }
  std::vector<std::shared_ptr<const StepStats>> seen;

 private:
  bool ask_;
};

TEST(StepStats, HooksThatAskGetTheTraceAndEveryHookSeesIt) {
  TwoChains t;
  Session s(t.g, unfused(cpus(2)));
  TracingHook quiet(false), asks(true);
  s.add_hook(&quiet);
  s.run({t.sum}, t.feeds());
  ASSERT_EQ(quiet.seen.size(), 1u);
  EXPECT_EQ(quiet.seen[0], nullptr) << "no hook asked: no trace";
  s.add_hook(&asks);
  StepStats mine;
  s.run({t.sum}, t.feeds(), {}, &mine);
  ASSERT_EQ(asks.seen.size(), 1u);
  ASSERT_NE(asks.seen[0], nullptr);
  EXPECT_EQ(quiet.seen[1], asks.seen[0]);
  EXPECT_FALSE(asks.seen[0]->events.empty());
  EXPECT_EQ(mine.events.size(), asks.seen[0]->events.size());
  EXPECT_EQ(mine.run_id, asks.seen[0]->run_id);
  s.remove_hook(&asks);
  s.run({t.sum}, t.feeds());
  EXPECT_EQ(quiet.seen[2], nullptr);
  s.remove_hook(&quiet);
}

TEST(StepStats, KernelsAddTheirOwnEvents) {
  // TracedNoop (tests/support/test_ops.h) adds "<node>.inner" inside its own step.
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2}, "x");
  Output y = traced_identity(x, "traced");
  Session s(g);
  StepStats st;
  s.run({y}, {{x, Tensor::from_vector<float>({2}, {1, 2})}}, {}, &st);
  const TraceEvent *outer = nullptr, *inner = nullptr;
  for (const TraceEvent& e : st.events) {
    if (e.name == "traced") outer = &e;
    if (e.name == "traced.inner") inner = &e;
  }
  ASSERT_TRUE(outer && inner);
  EXPECT_EQ(inner->category, "test");
  EXPECT_EQ(inner->depth, 1);
  EXPECT_EQ(outer->depth, 0);
  EXPECT_EQ(inner->device, "cpu");
  EXPECT_EQ(inner->args, (std::vector<std::pair<std::string, std::string>>{{"bytes", "8"}}));
  EXPECT_LE(outer->start_ns, inner->start_ns);
  EXPECT_LE(inner->end_ns, outer->end_ns);
  // Untraced: the kernel's event goes nowhere and the run works.
  EXPECT_EQ(s.run({y}, {{x, Tensor::from_vector<float>({2}, {1, 2})}})[0].to_vector<float>(),
            (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace spire::testing
