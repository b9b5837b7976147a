// Test-only ops (see test_ops.h).
#include "tests/support/test_ops.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

struct RendezvousTable {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<uint64_t, std::string>, int> arrived;
};
RendezvousTable& rendezvous_table() {
  static RendezvousTable t;
  return t;
}

SPIRE_REGISTER_OP("TestRendezvous")
    .cpu_only()  // test-only: CPU kernels only
    .input("x")
    .attr("count", 2)
    .attr("group", std::string("g"))
    .attr("own_lane", false)
    .own_lane_attr("own_lane")
    .shape_fn([](InferContext& c) { c.set_output(0, c.input_dtype(0), c.input_shape(0)); })
    .no_gradient();

SPIRE_REGISTER_OP("TestFail")
    .cpu_only()
    .input("x")
    .attr("delay_ms", 0)
    .shape_fn([](InferContext& c) { c.set_output(0, c.input_dtype(0), c.input_shape(0)); })
    .no_gradient();

SPIRE_REGISTER_OP("TestSleep")
    .cpu_only()
    .input("x")
    .attr("ms", 0)
    .shape_fn([](InferContext& c) { c.set_output(0, c.input_dtype(0), c.input_shape(0)); })
    .no_gradient();

SPIRE_REGISTER_OP("TestTraced")
    .cpu_only()
    .input("x")
    .shape_fn([](InferContext& c) { c.set_output(0, c.input_dtype(0), c.input_shape(0)); })
    .no_gradient();

SPIRE_STATIC_INIT(test_op_kernels) {
  KernelRegistry::global().add("TestRendezvous", DeviceType::CPU, DType::F32, [](KernelContext& ctx) {
    auto& t = rendezvous_table();
    const auto key = std::make_pair(ctx.run().id, ctx.attr<std::string>("group"));
    const int count = ctx.attr<int>("count");
    std::unique_lock<std::mutex> lock(t.mu);
    ++t.arrived[key];
    t.cv.notify_all();
    if (!t.cv.wait_for(lock, std::chrono::seconds(20), [&] { return t.arrived[key] >= count; }))
      ctx.fail("only ", t.arrived[key], " of ", count, " rendezvous nodes ran at the same time");
    ctx.set_output(0, ctx.input(0));
  });
  KernelRegistry::global().add("TestFail", DeviceType::CPU, DType::F32, [](KernelContext& ctx) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ctx.attr<int>("delay_ms")));
    ctx.fail("boom");
  });
  KernelRegistry::global().add("TestSleep", DeviceType::CPU, DType::F32, [](KernelContext& ctx) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ctx.attr<int>("ms")));
    ctx.set_output(0, ctx.input(0));
  });
  KernelRegistry::global().add("TestTraced", DeviceType::CPU, DType::F32, [](KernelContext& ctx) {
    const int64_t start = ctx.trace_now_ns();
    ctx.set_output(0, ctx.input(0));
    ctx.trace_event(ctx.node().name() + ".inner", "test", start, ctx.trace_now_ns(),
                    {{"bytes", std::to_string(ctx.input(0).nbytes())}});
  });
}

// Their behaviour is what the executor tests check.
const bool test_ops_forward [[maybe_unused]] = register_forward_case("TestRendezvous") &&
                                               register_forward_case("TestFail") &&
                                               register_forward_case("TestSleep") &&
                                               register_forward_case("TestTraced");

}  // namespace

Output rendezvous(const Output& x, int count, const std::string& group, bool own_lane) {
  return x.graph()
      ->add_node("TestRendezvous", {x}, {{"count", count}, {"group", group}, {"own_lane", own_lane}})
      ->output(0);
}
Output fail_op(const Output& x, int delay_ms) {
  return x.graph()->add_node("TestFail", {x}, {{"delay_ms", delay_ms}}, "failing")->output(0);
}
Output sleep_op(const Output& x, int ms) {
  return x.graph()->add_node("TestSleep", {x}, {{"ms", ms}}, "sleepy")->output(0);
}
Output traced_identity(const Output& x, const std::string& name) {
  return x.graph()->add_node("TestTraced", {x}, {}, name)->output(0);
}

}  // namespace spire::testing
