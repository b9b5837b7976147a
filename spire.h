// Umbrella header of Spire: include this to get the whole public API
// (tensors, graphs, ops, sessions, autodiff).
#pragma once

#include "autograd/gradients.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/graph.h"
#include "core/kernel_registry.h"
#include "core/op_registry.h"
#include "core/ops.h"
#include "core/session.h"
#include "core/shape.h"
#include "core/tensor.h"
