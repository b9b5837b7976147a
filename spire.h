// Umbrella header of Spire: `#include <spire.h>` gives the whole public API.
//
//   core/      tensors, shapes, dtypes, devices and device queries
//              (device_count), allocators (get_allocator, cpu_empty_cache),
//              graphs and their guards, every op builder (spire::ops), the
//              op and kernel registries (custom ops and kernels), Session,
//              errors, the logger
//   autograd/  gradient / gradients
//   layers/    variables and variable scopes, initializers, tower contexts
//              and tower functions, layers, losses and top-k errors, optimizers,
//              mixed precision policy and loss scaling
//   train/     ModelDesc, the trainers, TrainConfig and
//              launch_train_with_config, callbacks and monitors, DataFlow
//              and the dataset readers, TestDataSpeed, JPEG/PNG decoding,
//              ImageNet-style folders and image augmentors, input sources,
//              checkpoints and session initializers, TensorBoard event files,
//              file helpers
//   dist/      communicators (Spire's in-process ring, LocalMessageHub),
//              the collective graph ops, the multi-device, Horovod and
//              parameter-server trainers (hvd::rank() and friends); the
//              MPI communicator when built with MPI (SPIRE_WITH_MPI), the
//              NCCL communicator when built with NCCL (SPIRE_WITH_NCCL)
//
// Left out, as internals: core/executor.h and core/step_order.h, core/caching_allocator.h (the
// policy device backends build on), core/ops/op_util.h, kernels/ (kernel
// math, geometry and the CUDA backend), layers/layer_util.h,
// layers/variable_store.h, core/enum_names.h (the spelling tables behind the
// parse_* functions), dist/comm/ring_device.h and dist/comm/ring_schedule.h
// (the ring's own halves), the MPI backend's private dist/mpi/mpi_internal.h
// and mpi_waits.h, and the trainers' own pieces:
// dist/trainers/gradient_buckets.h, master_sync.h and ps_{protocol,server,worker}.h.
// tests/scripts/umbrella_header_test.py checks that every other header is here.
#pragma once

// ---- core ----
#include "core/allocator.h"
#include "core/attr.h"
#include "core/device.h"
#include "core/device_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fusion.h"
#include "core/graph.h"
#include "core/kernel_registry.h"
#include "core/logger.h"
#include "core/op_registry.h"
#include "core/ops.h"
#include "core/run_context.h"
#include "core/session.h"
#include "core/step_stats.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/variable_resource.h"

// ---- autograd ----
#include "autograd/gradients.h"

// ---- layers ----
#include "layers/accum_grad_optimizer.h"
#include "layers/initializers.h"
#include "layers/layers.h"
#include "layers/loss_scale.h"
#include "layers/losses.h"
#include "layers/mixed_precision.h"
#include "layers/optimizers.h"
#include "layers/tower.h"
#include "layers/variables.h"

// ---- train ----
#include "train/callback.h"
#include "train/callbacks.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/dataflow.h"
#include "train/dataflow_speed.h"
#include "train/datasets.h"
#include "train/event_writer.h"
#include "train/file_util.h"
#include "train/image_io.h"
#include "train/imagenet_folder.h"
#include "train/imgaug.h"
#include "train/input_source.h"
#include "train/model_desc.h"
#include "train/multi_process_trainer.h"
#include "train/monitor.h"
#include "train/session_init.h"
#include "train/text_dataset.h"
#include "train/timeline.h"
#include "train/trainer.h"

// ---- dist ----
#include "dist/comm/communicator.h"
#include "dist/comm/in_process_ring.h"
#include "dist/comm/messenger.h"
#include "dist/comm/negotiated_communicator.h"
#include "dist/ops/collective_ops.h"
#include "dist/trainers/distributed_trainers.h"
#include "dist/trainers/horovod_trainer.h"
#include "dist/trainers/multi_device_trainers.h"
// Only in an MPI build (SPIRE_MPI=ON): these headers compile without MPI, but
// what they declare is defined only with it, so a use would fail to link.
#if defined(SPIRE_WITH_MPI)
#include "dist/mpi/mpi_communicator.h"
#endif
#if defined(SPIRE_WITH_NCCL)
#include "dist/nccl/nccl_communicator.h"
#endif
