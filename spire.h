// Umbrella header of Spire: include this to get the whole public API
// (tensors, graphs, ops, sessions, autodiff, variables and scopes, towers,
// layers and optimizers, device queries such as device_count, and the
// collectives of dist/: communicators and the collective graph ops).
#pragma once

#include "autograd/gradients.h"
#include "core/device.h"
#include "core/device_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/graph.h"
#include "core/kernel_registry.h"
#include "core/op_registry.h"
#include "core/ops.h"
#include "core/session.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "dist/ops/collective_ops.h"
#include "dist/comm/communicator.h"
#include "dist/trainers/distributed_trainers.h"
#include "dist/trainers/horovod_trainer.h"
#include "dist/comm/in_process_ring.h"
#include "dist/trainers/multi_device_trainers.h"
#include "layers/initializers.h"
#include "layers/layers.h"
#include "layers/optimizers.h"
#include "layers/tower.h"
#include "layers/variables.h"
