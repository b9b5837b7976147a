// Test-only ops for executor and collective tests (CPU kernels only, so
// they are cpu_only()): TestRendezvous returns its input once `count` such
// nodes of one group have started in the same run (two of them on two lanes
// only finish when the lanes run at the same time; it fails after 20 s),
// TestFail fails with "boom" after a delay, TestSleep returns its input
// after sleeping, TestTraced returns its input and adds a trace event
// "<node>.inner" (category "test", args bytes=<input bytes>) inside its step.
#pragma once

#include "spire.h"

namespace spire::testing {

Output rendezvous(const Output& x, int count, const std::string& group = "g", bool own_lane = false);
/// A node named "failing" (unique-suffixed) that fails after `delay_ms`.
Output fail_op(const Output& x, int delay_ms = 0);
/// A node named "sleepy" that returns x after `ms` milliseconds.
Output sleep_op(const Output& x, int ms);
/// A TestTraced node named `name`.
Output traced_identity(const Output& x, const std::string& name);

}  // namespace spire::testing
