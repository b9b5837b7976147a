// The trainers' modes as enums, each with one parse function for the
// command line and configs (tensorpack's spellings accepted) and a name:
// SyncMultiGPUTrainerReplicated's mode, SyncMultiGPUTrainerParameterServer's
// ps_device, HorovodOptions' compression and backend. (BatchNorm's
// ema_update and sync_statistics: tests/layers/batch_norm_test.cc.)
#include <gtest/gtest.h>

#include "dist/trainers/horovod_trainer.h"
#include "dist/trainers/multi_device_trainers.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

TEST(TrainerModes, ReplicatedMode) {
  EXPECT_EQ(parse_replicated_mode(""), ReplicatedMode::kRing);
  EXPECT_EQ(parse_replicated_mode("ring"), ReplicatedMode::kRing);
  EXPECT_EQ(parse_replicated_mode("collective"), ReplicatedMode::kRing);
  EXPECT_EQ(parse_replicated_mode("nccl"), ReplicatedMode::kNccl);
  EXPECT_EQ(parse_replicated_mode("cpu"), ReplicatedMode::kCpu);
  EXPECT_EQ(parse_replicated_mode("gpu"), ReplicatedMode::kGpu);
  EXPECT_EQ(parse_replicated_mode("hierarchical"), ReplicatedMode::kHierarchical);
  for (ReplicatedMode m : {ReplicatedMode::kRing, ReplicatedMode::kNccl, ReplicatedMode::kCpu, ReplicatedMode::kGpu,
                           ReplicatedMode::kHierarchical})
    EXPECT_EQ(parse_replicated_mode(replicated_mode_name(m)), m) << replicated_mode_name(m);
  expect_error([] { parse_replicated_mode("Ring"); },
               {"SyncMultiGPUTrainerReplicated: unknown mode 'Ring'",
                "(accepted: ring, nccl, cpu, gpu, hierarchical, collective, \"\")"});
  // The default is the ring.
  SyncMultiGPUTrainerReplicated t({Device::cpu(0), Device::cpu(1)});
  EXPECT_EQ(t.mode(), ReplicatedMode::kRing);
}

TEST(TrainerModes, PsDevice) {
  EXPECT_EQ(parse_ps_device(""), PsDevice::kAuto);
  EXPECT_EQ(parse_ps_device("auto"), PsDevice::kAuto);
  EXPECT_EQ(parse_ps_device("cpu"), PsDevice::kCpu);
  EXPECT_EQ(parse_ps_device("gpu"), PsDevice::kGpu);
  EXPECT_EQ(parse_ps_device("devices"), PsDevice::kGpu);
  for (PsDevice d : {PsDevice::kAuto, PsDevice::kCpu, PsDevice::kGpu})
    EXPECT_EQ(parse_ps_device(ps_device_name(d)), d) << ps_device_name(d);
  expect_error([] { parse_ps_device("tpu"); }, {"SyncMultiGPUTrainerParameterServer: unknown ps_device 'tpu'",
                                                 "(accepted: auto, cpu, gpu, devices, \"\")"});
  // kAuto is tensorpack's default: the towers' devices up to 2 towers, else cpu:0.
  EXPECT_EQ(SyncMultiGPUTrainerParameterServer({Device::cpu(0), Device::cpu(1)}).ps_device(), PsDevice::kGpu);
  EXPECT_EQ(SyncMultiGPUTrainerParameterServer({Device::cpu(0), Device::cpu(1), Device::cpu(2)}).ps_device(),
            PsDevice::kCpu);
}

TEST(TrainerModes, HorovodCompression) {
  EXPECT_EQ(parse_horovod_compression(""), HorovodCompression::kNone);
  EXPECT_EQ(parse_horovod_compression("none"), HorovodCompression::kNone);
  EXPECT_EQ(parse_horovod_compression("fp16"), HorovodCompression::kFp16);
  for (HorovodCompression c : {HorovodCompression::kNone, HorovodCompression::kFp16})
    EXPECT_EQ(parse_horovod_compression(horovod_compression_name(c)), c);
  expect_error([] { parse_horovod_compression("bf16"); },
               {"HorovodTrainer: unknown compression 'bf16'", "(accepted: none, fp16, \"\")"});
  EXPECT_EQ(HorovodOptions().compression, HorovodCompression::kNone);
}

TEST(TrainerModes, HorovodBackend) {
  EXPECT_EQ(parse_horovod_backend(""), HorovodBackend::kDefault);
  EXPECT_EQ(parse_horovod_backend("default"), HorovodBackend::kDefault);
  EXPECT_EQ(parse_horovod_backend("auto"), HorovodBackend::kAuto);
  EXPECT_EQ(parse_horovod_backend("ring"), HorovodBackend::kRing);
  EXPECT_EQ(parse_horovod_backend("recursive-doubling"), HorovodBackend::kRecursiveDoubling);
  EXPECT_EQ(parse_horovod_backend("rd"), HorovodBackend::kRecursiveDoubling);
  EXPECT_EQ(parse_horovod_backend("halving-doubling"), HorovodBackend::kHalvingDoubling);
  EXPECT_EQ(parse_horovod_backend("hd"), HorovodBackend::kHalvingDoubling);
  EXPECT_EQ(parse_horovod_backend("mpi"), HorovodBackend::kMpi);
  EXPECT_EQ(parse_horovod_backend("nccl"), HorovodBackend::kNccl);
  for (HorovodBackend b : {HorovodBackend::kDefault, HorovodBackend::kAuto, HorovodBackend::kRing,
                           HorovodBackend::kRecursiveDoubling, HorovodBackend::kHalvingDoubling, HorovodBackend::kMpi,
                           HorovodBackend::kNccl})
    EXPECT_EQ(parse_horovod_backend(horovod_backend_name(b)), b) << horovod_backend_name(b);
  expect_error([] { parse_horovod_backend("gloo"); },
               {"HorovodTrainer: unknown backend 'gloo'",
                "(accepted: default, auto, ring, recursive-doubling, halving-doubling, mpi, nccl, rd, hd, \"\")"});
  EXPECT_EQ(HorovodOptions().backend, HorovodBackend::kDefault);
}

}  // namespace
}  // namespace spire::testing
