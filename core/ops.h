// All graph-building op functions (spire::ops::...), one header per op
// family under core/ops/.
#pragma once

#include "core/ops/array_ops.h"
#include "core/ops/attention_ops.h"
#include "core/ops/batch_norm_ops.h"
#include "core/ops/math_ops.h"
#include "core/ops/nn_ops.h"
#include "core/ops/norm_ops.h"
#include "core/ops/optimizer_ops.h"
#include "core/ops/random_ops.h"
#include "core/ops/reduction_ops.h"
#include "core/ops/state_ops.h"
