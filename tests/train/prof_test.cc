// Profiling callbacks (train/callbacks/prof.h) and the Chrome trace writer (train/timeline.h):
// GraphProfiler writes one file per traced step, Timeline one file for its window; both
// load with Python's json module in the Trace Event Format (tests/train/py/
// check_chrome_trace.py), with one named lane per device and the traced runs' nodes.
#include <sstream>

#include "tests/support/run_command.h"
#include "tests/train/train_test_util.h"
#include "train/timeline.h"

namespace spire::testing {
namespace {

struct CheckedTrace {
  std::string process;
  std::vector<std::string> lanes;
  std::vector<int> run_events;  // events per run, in run order
  std::vector<std::pair<double, double>> run_spans;
};

CheckedTrace check_trace(const std::string& path) {
  const std::string script = std::string(SPIRE_SOURCE_DIR) + "/tests/train/py/check_chrome_trace.py";
  std::string out;
  const int rc = run_command("python3 '" + script + "' '" + path + "' 2>&1", &out);
  EXPECT_EQ(rc, 0) << "check_chrome_trace.py failed on " << path << ":\n" << out;
  CheckedTrace t;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string kind;
    f >> kind;
    if (kind == "process") {
      std::getline(f >> std::ws, t.process);
    } else if (kind == "lane") {
      int tid;
      std::string name;
      f >> tid;
      std::getline(f >> std::ws, name);
      t.lanes.push_back(name);
    } else if (kind == "run") {
      long long id;
      int n;
      double lo, hi;
      f >> id >> n >> lo >> hi;
      t.run_events.push_back(n);
      t.run_spans.emplace_back(lo, hi);
    }
  }
  return t;
}

TEST(Timeline, ChromeTraceJsonEscapesNamesAndKeepsTimes) {
  StepStats s;
  s.run_id = 7;
  s.start_unix_us = 1700000000000000;
  s.lane_devices = {"cpu", "cpu:1"};
  s.events.push_back({"a \"quoted\"\\name\n", "Op", "cpu", 0, 1500, 2500, 0, {{"k", "v\t"}}});
  s.events.push_back({"b", "Other", "cpu:1", 1, 2000, 2000, 0, {}});
  const std::string json = chrome_trace_json({s}, 3, "rank 3");
  EXPECT_NE(json.find(R"("name":"a \"quoted\"\\name\n")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("ts":1700000000000001.500,"dur":1.000)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("k":"v\t")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"X("tid":1,"args":{"name":"cpu:1"})X"), std::string::npos) << json;
  // Another run whose plan has the lanes the other way round: its events keep their devices'
  // rows; a second lane of one device gets a row of its own.
  StepStats s2 = s;
  s2.run_id = 8;
  s2.lane_devices = {"cpu:1", "cpu", "cpu"};
  s2.events = {{"c", "Op", "cpu:1", 0, 0, 10, 0, {}}, {"d", "Op", "cpu", 2, 0, 10, 0, {}}};
  const std::string two = chrome_trace_json({s, s2}, 0, "p");
  EXPECT_NE(two.find(R"X("tid":1,"name":"c")X"), std::string::npos) << two;
  EXPECT_NE(two.find(R"X("tid":2,"name":"d")X"), std::string::npos) << two;
  EXPECT_NE(two.find(R"X("tid":2,"args":{"name":"cpu (2)"})X"), std::string::npos) << two;
  const std::string summary = op_time_summary({s, s2});
  EXPECT_NE(summary.find("cpu:1: busy"), std::string::npos) << summary;
  EXPECT_NE(summary.find("cpu (2): busy"), std::string::npos) << summary;
  TempDir dir;
  const std::string path = dir.path() + "/t.json";
  write_chrome_trace(path, {s, s}, 3, "rank 3");
  CheckedTrace t = check_trace(path);
  EXPECT_EQ(t.process, "rank 3");
  EXPECT_EQ(t.lanes, (std::vector<std::string>{"cpu", "cpu:1"}));
  EXPECT_EQ(t.run_events, (std::vector<int>{4})) << "both copies carry run id 7";
}

TEST(GraphProfiler, WritesOneTraceFilePerStepOfItsWindow) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 2);  // 4 steps per epoch
  auto profiler = std::make_shared<GraphProfiler>(TraceWindow{2, 2});
  auto timeline = std::make_shared<Timeline>(TraceWindow{2, 5});
  cfg.extra_callbacks->push_back(profiler);
  cfg.extra_callbacks->push_back(timeline);
  SimpleTrainer t;
  launch_train_with_config(cfg, t);
  ASSERT_EQ(profiler->written(),
            (std::vector<std::string>{dir.path() + "/chrome-trace-2.json",
                                      dir.path() + "/chrome-trace-3.json"}));
  EXPECT_FALSE(path_exists(dir.path() + "/chrome-trace-1.json"));
  EXPECT_FALSE(path_exists(dir.path() + "/chrome-trace-4.json"));
  int step_events = 0;
  for (const std::string& f : profiler->written()) {
    CheckedTrace c = check_trace(f);
    EXPECT_EQ(c.process, "process");
    EXPECT_EQ(c.lanes, (std::vector<std::string>{"cpu"}));
    ASSERT_EQ(c.run_events.size(), 1u);
    EXPECT_GT(c.run_events[0], 10) << "a training step of the classifier runs more nodes";
    if (step_events) EXPECT_EQ(c.run_events[0], step_events) << "same plan every step";
    step_events = c.run_events[0];
  }
  // The timeline has steps 2..6 in one file, in order on one time axis; step 4, the last of
  // the epoch, also runs the summaries.
  EXPECT_EQ(timeline->path(), dir.path() + "/timeline-rank0.json");
  CheckedTrace c = check_trace(timeline->path());
  ASSERT_EQ(c.run_events.size(), 5u);
  for (int i : {0, 1, 3, 4}) EXPECT_EQ(c.run_events[static_cast<size_t>(i)], step_events) << i;
  EXPECT_GT(c.run_events[2], step_events);
  for (size_t i = 1; i < c.run_spans.size(); ++i)
    EXPECT_LE(c.run_spans[i - 1].second, c.run_spans[i].first) << "run " << i;
}

TEST(Timeline, AWindowBeyondTheEndIsWrittenWhenTrainingEnds) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 1);  // 4 steps
  auto timeline = std::make_shared<Timeline>(TraceWindow{3, 100});
  cfg.extra_callbacks->push_back(timeline);
  SimpleTrainer t;
  launch_train_with_config(cfg, t);
  EXPECT_EQ(check_trace(timeline->path()).run_events.size(), 2u);
  // No directory anywhere: a clear error.
  TrainConfig none = tiny_config("", 1);
  none.monitors = std::vector<MonitorPtr>{};
  none.extra_callbacks = std::vector<CallbackPtr>{std::make_shared<Timeline>(TraceWindow{1, 1})};
  SimpleTrainer t2;
  expect_error([&] { launch_train_with_config(none, t2); }, {"Timeline", "no directory"});
}

}  // namespace
}  // namespace spire::testing
